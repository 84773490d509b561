"""Just enough SIP message parsing for admission and call records (RFC 3261 §7).

pjsua2 owns the real SIP stack; this module only reads an incoming request's
text so the server can decide (before pjsua allocates a call) whether to admit
it, and label logs and metrics with its Call-ID, caller and called number.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# RFC 3261 §7.3.3 compact header forms.
_COMPACT = {
    "i": "call-id",
    "f": "from",
    "t": "to",
    "v": "via",
    "m": "contact",
    "l": "content-length",
    "c": "content-type",
    "k": "supported",
    "s": "subject",
}

_URI_RE = re.compile(r"^\s*([^;\s]+)")
_TAG_RE = re.compile(r";\s*tag\s*=\s*([^;>\s]+)", re.IGNORECASE)


@dataclass(frozen=True)
class SipRequest:
    """A parsed SIP request line and its headers (names lower-cased, full form)."""

    method: str
    uri: str
    headers: tuple[tuple[str, str], ...] = field(default=())
    body: str = ""

    def header(self, name: str) -> str | None:
        """The first value of header *name* (case-insensitive, compact forms allowed)."""
        key = _COMPACT.get(name.lower(), name.lower())
        for k, v in self.headers:
            if k == key:
                return v
        return None

    @property
    def call_id(self) -> str:
        return self.header("call-id") or ""

    @property
    def to_tag(self) -> str | None:
        to = self.header("to")
        if to is None:
            return None
        m = _TAG_RE.search(to.split(">", 1)[-1] if ">" in to else to)
        return m.group(1) if m else None

    @property
    def called(self) -> str:
        """The dialled number: the Request-URI's user part, else the To user."""
        return uri_user(self.uri) or uri_user(header_uri(self.header("to") or ""))

    @property
    def caller(self) -> str:
        return uri_user(header_uri(self.header("from") or ""))


def parse_request(text: str) -> SipRequest:
    """Parse a SIP request; raise ValueError naming what is wrong."""
    head, _, body = text.replace("\r\n", "\n").partition("\n\n")
    lines = head.split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("SIP/"):
        raise ValueError(f"not a SIP request line: {lines[0][:80]!r}")
    method, uri, _version = parts
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t" and headers:  # folded continuation line
            name, value = headers[-1]
            headers[-1] = (name, value + " " + line.strip())
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"malformed header line: {line[:80]!r}")
        key = name.strip().lower()
        headers.append((_COMPACT.get(key, key), value.strip()))
    return SipRequest(method=method, uri=uri, headers=tuple(headers), body=body)


def header_uri(value: str) -> str:
    """The URI inside a From/To/Contact value (name-addr or addr-spec)."""
    if "<" in value:
        inner = value.split("<", 1)[1]
        return inner.split(">", 1)[0].strip()
    m = _URI_RE.search(value)
    if not m:
        return ""
    return m.group(1)


def uri_user(uri: str) -> str:
    """The user part of a sip:/sips:/tel: URI ('' when there is none)."""
    uri = uri.strip()
    for scheme in ("sips:", "sip:", "tel:"):
        if uri.lower().startswith(scheme):
            rest = uri[len(scheme):]
            if scheme == "tel:":
                return rest.split(";", 1)[0]
            return rest.split("@", 1)[0].split(";", 1)[0] if "@" in rest else ""
    return ""

"""The doors the agent does not use, shut before pjsip's modules see a request (SECURITY.md).

:func:`screen_doors` decides on any request (in or out of a dialog) from its
parsed text: a multipart body is refused with ``415`` and ``Accept:
application/sdp`` (or, with ``multipart: sdp_only``, let through only when
:func:`sdp_part` finds exactly one well-formed SDP part), and methods the agent
does not serve get ``405``/``501`` with ``Allow`` before pjsua's presence or
instant-messaging modules. No I/O; tested in tests/unit/test_sip_doors.py.
The multipart reader is hand-written (~40 lines, RFC 2046 §5.1): the point is a
strict parser that is not pjsip's, and the stdlib email parser is lenient by design.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from sip.message import SipRequest
from sip.rejection import Rejection

#: what the agent serves; the Allow header of every 405/501
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, REFER, NOTIFY, INFO"
#: methods served out of a dialog (REFER, NOTIFY and INFO only inside a call)
OUT_OF_DIALOG = frozenset({"INVITE", "ACK", "BYE", "CANCEL", "OPTIONS"})
IN_DIALOG = frozenset({"INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "REFER", "NOTIFY", "INFO", "UPDATE", "PRACK"})
#: methods of RFC 3261 and its extensions: known, so 405 rather than 501
KNOWN = frozenset({"REGISTER", "SUBSCRIBE", "NOTIFY", "PUBLISH", "MESSAGE", "REFER", "INFO", "UPDATE", "PRACK"})


@dataclass(frozen=True)
class DoorSettings:
    """``sip.doors`` in the config."""

    #: reject (415) or sdp_only (keep a multipart body only when it is exactly one SDP part + others dropped)
    multipart: str = "reject"
    #: the largest multipart body read by sdp_only (bytes)
    multipart_max_bytes: int = 16384


@dataclass(frozen=True)
class Reduced:
    """A multipart body reduced to its SDP part."""

    sdp: str


def unsupported_media() -> Rejection:
    return Rejection(415, "Unsupported Media Type", (("Accept", "application/sdp"),))


def screen_doors(request: SipRequest, settings: DoorSettings) -> Rejection | Reduced | None:
    """None: let pjsip have it; a Rejection to answer; Reduced: replace the body with this SDP."""
    method = request.method.upper()
    in_dialog = request.to_tag is not None
    if method not in (IN_DIALOG if in_dialog else OUT_OF_DIALOG):
        if method in KNOWN or method in IN_DIALOG:
            return Rejection(405, "Method Not Allowed", (("Allow", ALLOW),))
        return Rejection(501, "Not Implemented", (("Allow", ALLOW),))
    ctype = (request.header("content-type") or "").strip()
    if ctype.lower().startswith("multipart/"):
        if settings.multipart != "sdp_only":
            return unsupported_media()
        try:
            return Reduced(sdp_part(ctype, request.body, settings.multipart_max_bytes))
        except ValueError:
            return unsupported_media()
    return None


_BOUNDARY_RE = re.compile(r';\s*boundary\s*=\s*("([^"]{1,70})"|([^\s;"]{1,70}))', re.IGNORECASE)
_BCHARS = re.compile(r"^[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]$")


def sdp_part(content_type: str, body: str, max_bytes: int) -> str:
    """The one ``application/sdp`` part of a multipart body; ValueError naming what is wrong.

    Strict: the boundary must be a valid RFC 2046 boundary, the body must start with
    it and end with its closing delimiter, every part must have headers and a blank
    line, and exactly one part may be SDP.
    """
    if len(body.encode("utf-8", "replace")) > max_bytes:
        raise ValueError(f"multipart body over {max_bytes} bytes")
    m = _BOUNDARY_RE.search(content_type)
    if not m:
        raise ValueError("multipart without a boundary")
    boundary = m.group(2) or m.group(3)
    if not _BCHARS.match(boundary):
        raise ValueError("invalid multipart boundary")
    text = body.replace("\r\n", "\n")
    delimiter = "--" + boundary
    if not text.startswith(delimiter + "\n"):
        raise ValueError("multipart body does not start with its boundary")
    end = text.find("\n" + delimiter + "--")
    if end < 0:
        raise ValueError("multipart body without its closing boundary")
    parts = text[len(delimiter) + 1:end].split("\n" + delimiter + "\n")
    sdps = []
    for part in parts:
        if not part.strip() or part.startswith(delimiter):
            raise ValueError("empty multipart part (adjacent boundaries)")
        head, sep, content = part.partition("\n\n")
        if not sep or not head.strip():
            raise ValueError("multipart part without headers")
        ctype = ""
        for line in head.split("\n"):
            name, colon, value = line.partition(":")
            if not colon or not name.strip():
                raise ValueError("malformed multipart part header")
            if name.strip().lower() == "content-type":
                ctype = value.strip().lower()
            elif name.strip().lower() == "content-id" and len(value.strip()) < 3:
                raise ValueError("malformed Content-ID")
        if not ctype:
            raise ValueError("multipart part without Content-Type")
        if ctype.split(";")[0].strip() == "application/sdp":
            sdps.append(content)
    if len(sdps) != 1:
        raise ValueError(f"expected exactly one application/sdp part, found {len(sdps)}")
    sdp = sdps[0].strip("\n")
    if not sdp.startswith("v=0"):
        raise ValueError("the SDP part does not start with v=0")
    return sdp.replace("\n", "\r\n") + "\r\n"


_CONTENT_LENGTH_RE = re.compile(r"^(?:content-length|l)[ \t]*:[ \t]*(.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE)


def bad_content_length(raw: str) -> Rejection | None:
    """``400`` when Content-Length is not a number or promises more body than came (RFC 3261 §18.3).

    Over a stream pjsip frames the message by Content-Length, so this only fires on a datagram,
    whose body pjsip would otherwise take as it is (a truncated offer answered as if whole).
    """
    head_end = min((i for i in (raw.find("\r\n\r\n"), raw.find("\n\n")) if i >= 0), default=-1)
    if head_end < 0:
        return None
    head = raw[:head_end]
    body = raw[head_end + (4 if raw.startswith("\r\n\r\n", head_end) else 2):]
    values = _CONTENT_LENGTH_RE.findall(head)
    if not values:
        return None
    declared = values[0].strip()
    if len(values) > 1 or not declared.isdigit() or int(declared) > len(body.encode("utf-8", "replace")):
        return Rejection(400, "Bad Request (Content-Length does not match the body)")
    return None

"""Secrets in config and dialplans (``!env NAME``, ``!file /path``) and their redaction from text.

Any string value of the server config or of a dialplan can be written as a YAML tag instead of the
value itself::

    password: !env OPENCLAW_TRUNK_PASSWORD     # the value of an environment variable
    token: !file /run/secrets/crm-token        # a file's content, trailing newline removed

The loaders (``agent/yamlmarks.py`` for the config, ``agent/dialplan/validation.py`` for dialplans)
call :func:`resolve_tagged` for every tagged scalar. A missing variable or unreadable file is a
:class:`SecretError` naming the variable or the file (the loaders put it at ``file:line:column``);
no message ever contains the value. Every value resolved this way is remembered, and
:func:`redact` removes it, URL query strings and user-info from text bound for a log line, a call
record, an HTTP page or an error message.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any, Iterable
from urllib.parse import urlsplit, urlunsplit

__all__ = ["ENV_TAG", "FILE_TAG", "SecretError", "is_secret_tag", "known_secrets", "redact", "redact_headers",
           "redact_log_event", "redact_url", "redact_value", "remember_secret", "resolve_tagged"]

ENV_TAG = "!env"
FILE_TAG = "!file"
#: the most a secret file may hold (a key, a token or a certificate chain, not a data file)
MAX_SECRET_FILE_BYTES = 64 * 1024
#: what a removed secret becomes
MASK = "***"
#: values shorter than this are not remembered for redaction: they would mask ordinary words and
#: numbers in records (a password "1000" and the extension 1000)
MIN_REMEMBERED_LENGTH = 8
#: header names whose values are always masked in logs and records
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key",
                               "api-key", "x-auth-token", "x-access-token"})

_lock = threading.Lock()
_known: set[str] = set()


class SecretError(ValueError):
    """A secret that cannot be read; the message names where it should come from, never its value."""


def is_secret_tag(tag: str | None) -> bool:
    return tag in (ENV_TAG, FILE_TAG)


def resolve_tagged(tag: str, reference: Any, base_dir: str = "") -> str:
    """The value behind ``!env NAME`` or ``!file PATH`` (a relative PATH is from *base_dir*)."""
    if not isinstance(reference, str) or not reference.strip():
        raise SecretError(f"{tag}: expected the name of an environment variable"
                          if tag == ENV_TAG else f"{tag}: expected the path of a file")
    reference = reference.strip()
    if tag == ENV_TAG:
        value = os.environ.get(reference)
        if value is None:
            raise SecretError(f"environment variable {reference} is not set (named by {ENV_TAG})")
    elif tag == FILE_TAG:
        path = reference if os.path.isabs(reference) or not base_dir else os.path.join(base_dir, reference)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_SECRET_FILE_BYTES + 1)
        except OSError as e:
            raise SecretError(f"cannot read secret file {path} (named by {FILE_TAG}): {e.strerror}") from None
        if len(raw) > MAX_SECRET_FILE_BYTES:
            raise SecretError(f"secret file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretError(f"secret file {path} is not UTF-8 text") from None
        value = value[:-1] if value.endswith("\n") else value
        value = value[:-1] if value.endswith("\r") else value
    else:
        raise SecretError(f"unknown secret tag {tag}; expected {ENV_TAG} or {FILE_TAG}")
    if value == "":
        where = f"environment variable {reference}" if tag == ENV_TAG else f"secret file {reference}"
        raise SecretError(f"{where} is empty")
    remember_secret(value)
    return value


def remember_secret(value: str) -> None:
    """Have :func:`redact` mask *value* wherever it appears (a token given some other way)."""
    if len(value) >= MIN_REMEMBERED_LENGTH:
        with _lock:
            _known.add(value)
            # each line of a multi-line secret (a PEM key) too
            _known.update(line for line in value.splitlines() if len(line.strip()) >= 16)


def known_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_known)


_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")


def redact_url(url: str) -> str:
    """*url* without user-info, query string and fragment (``?…`` becomes ``?***``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("?", 1)[0].split("#", 1)[0] + (f"?{MASK}" if "?" in url else "")
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@" + netloc.rsplit("@", 1)[1]
    query = MASK if parts.query else ""
    fragment = MASK if parts.fragment else ""
    return _mask_known(urlunsplit((parts.scheme, netloc, parts.path, query, fragment)))


def redact(text: str) -> str:
    """*text* with every URL redacted (:func:`redact_url`) and every known secret masked."""
    if not text:
        return text
    return _mask_known(_URL.sub(lambda m: redact_url(m.group(0)), text))


def redact_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers fit for a log: credentials masked, other values passed through :func:`redact`."""
    return [(name, MASK if name.lower() in SENSITIVE_HEADERS else redact(value)) for name, value in headers]


def redact_value(value: Any) -> Any:
    """A JSON-like *value* (a call record) with :func:`redact` applied to every string in it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    return value


#: log event keys that are the logging system's own (never user text)
_LOG_SYSTEM_KEYS = frozenset({"log_level", "log_namespace", "log_source", "log_time", "log_logger", "log_system",
                              "log_failure", "log_trace", "log_io", "log_observer"})


def redact_log_event(event: dict[str, Any]) -> dict[str, Any]:
    """A copy of a Twisted log *event* whose format and string fields went through :func:`redact`."""
    out = dict(event)
    for key, value in event.items():
        if key not in _LOG_SYSTEM_KEYS and isinstance(value, str):
            out[key] = redact(value)
        elif key not in _LOG_SYSTEM_KEYS and isinstance(value, (dict, list, tuple)):
            out[key] = redact_value(value)
    return out


def _mask_known(text: str) -> str:
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    return text

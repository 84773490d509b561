"""What the speech server's gRPC services share: request errors, the one language, aborting an RPC."""
from __future__ import annotations

import logging
from typing import NoReturn

import grpc

LANGUAGE_CODE = "en-US"
#: request metadata naming the call a stream belongs to (sent by the agent's speech client)
CALL_ID_METADATA = "x-openclaw-call-id"

_streams_log = logging.getLogger("openclaw.speech_server.streams")


class ConfigError(ValueError):
    """A request's configuration is invalid; reported to the client as INVALID_ARGUMENT."""


class EngineUnavailable(RuntimeError):
    """Decoding cannot proceed (worker process gone or unresponsive); reported as UNAVAILABLE."""


def check_language(code: str, what: str) -> None:
    """Raise :class:`ConfigError` unless *code* is the server's language."""
    if code.lower() != LANGUAGE_CODE.lower():
        raise ConfigError(f"{what}: language_code {code!r} is not available; this server has {LANGUAGE_CODE!r}")


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the RPC with *code* and *message* (``context.abort`` raises)."""
    context.abort(code, message)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


def log_stream(context: grpc.ServicerContext, kind: str, version: str) -> None:
    """One line per recognition or synthesis stream: which call (the ``x-openclaw-call-id``
    metadata, ``-`` without it) was served which model version, e.g.
    ``stream kind=asr call_id=abc version=asr:pocketsphinx-en-US``."""
    call_id = "-"
    for key, value in context.invocation_metadata() or ():
        if key == CALL_ID_METADATA:
            call_id = "".join(ch for ch in str(value) if ch.isprintable() and not ch.isspace())[:128] or "-"
    _streams_log.info("stream kind=%s call_id=%s version=%s", kind, call_id, version)

"""What the speech server's gRPC services share: request errors, the one language, aborting an RPC."""
from __future__ import annotations

from typing import NoReturn

import grpc

LANGUAGE_CODE = "en-US"


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

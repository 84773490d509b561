"""TLS and a required token for the embedded speech server, as a hosted Riva deployment has them.

:func:`server_credentials` reads a certificate, its key and, optionally, the CA that client
certificates must chain to (then required: mutual TLS). :class:`TokenInterceptor` refuses every
RPC, health checks included, that does not carry ``authorization: Bearer <token>``, with
``UNAUTHENTICATED`` and a reason that says what was expected.
"""
from __future__ import annotations

import hmac
from typing import Any, Callable

import grpc


def server_credentials(cert_path: str, key_path: str, client_ca_path: str | None = None) -> grpc.ServerCredentials:
    """TLS credentials from PEM files; with *client_ca_path* clients must show a certificate it signed."""
    with open(cert_path, "rb") as handle:
        cert = handle.read()
    with open(key_path, "rb") as handle:
        key = handle.read()
    client_ca = None
    if client_ca_path:
        with open(client_ca_path, "rb") as handle:
            client_ca = handle.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)


def _refusing(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of *handler*'s kind that ends the RPC with UNAUTHENTICATED."""
    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kinds: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler]] = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    make = kinds[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(refuse, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


class TokenInterceptor(grpc.ServerInterceptor):
    """Lets through RPCs whose ``authorization`` metadata is ``Bearer <token>``."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the required token must not be empty")
        self._expected = f"Bearer {token}".encode("utf-8")

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        values = [value for key, value in (handler_call_details.invocation_metadata or ())
                  if key == "authorization"]
        if not values:
            return _refusing(handler, "missing authorization metadata (expected 'authorization: Bearer <token>')")
        given = values[0].encode("utf-8") if isinstance(values[0], str) else bytes(values[0])
        if not hmac.compare_digest(given, self._expected):
            return _refusing(handler, "authorization metadata does not carry the expected token")
        return handler

"""The one HTTP client of the agent: webhooks, the dialogue model, region probes and the supervisor's polls.

:class:`HttpClient` wraps ``twisted.web.client.Agent`` with what every caller needs: a timeout
covering the whole exchange (connect, answer and body), a connection pool, a JSON or bytes
body, a body read bounded in size, and one exception, :class:`HttpError`, whose ``reason`` is
the short text that call records and logs show (``timeout``, ``connection refused``,
``response too large``, ...) and whose ``kind`` tells whether retrying may help.

It returns Deferreds and must be called on the reactor thread; the reactor is a parameter
(tests pass a ``Clock`` and a scripted ``IAgent``).
"""
from __future__ import annotations

import json as jsonlib
from dataclasses import dataclass
from typing import Any, Iterable

from twisted.internet import defer, error as net_error
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool, ResponseDone, _HTTP11ClientFactory
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from agent.integrations.tls import TlsSettings, tls_failure_reason, tls_policy

__all__ = ["DEFAULT_MAX_BODY_BYTES", "HttpClient", "HttpError", "HttpResponse", "failure_reason"]

DEFAULT_MAX_BODY_BYTES = 1 << 20

#: kinds of :class:`HttpError`: a timeout or a network failure may pass; the others will not
#: (TLS: a certificate the agent refused)
TIMEOUT, NETWORK, TOO_LARGE, TLS, OTHER = "timeout", "network", "too_large", "tls", "other"


@dataclass(frozen=True)
class HttpResponse:
    status: int
    #: the body, or b"" when the caller asked not to read bodies of this status
    body: bytes


class HttpError(Exception):
    """A request that got no usable answer; ``reason`` is the text for records and logs."""

    def __init__(self, reason: str, kind: str, status: int | None = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.status = status
        #: the underlying exception (a connection error), if any
        self.cause = cause

    @property
    def retryable(self) -> bool:
        return self.kind in (TIMEOUT, NETWORK)


def failure_reason(exc: BaseException) -> str:
    """Short text naming why a request failed (``timeout``, ``connection refused``, ``tls: ...``)."""
    tls = tls_failure_reason(exc)
    if tls is not None:
        return tls
    if isinstance(exc, (defer.TimeoutError, defer.CancelledError, net_error.TimeoutError)):
        return "timeout"
    if isinstance(exc, net_error.ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, net_error.DNSLookupError):
        return "dns lookup failed"
    if isinstance(exc, net_error.ConnectError):
        return f"connection error: {exc.__class__.__name__}"
    name = exc.__class__.__name__
    if name in ("ResponseFailed", "ResponseNeverReceived", "RequestTransmissionFailed"):
        return "connection error: " + name
    return f"error: {name}: {str(exc)[:120]}"


@implementer(IBodyProducer)
class _BytesProducer:
    """Writes a fixed body at once (no cooperator, so it works on any reactor or Clock)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.length = len(body)

    def startProducing(self, consumer: Any) -> Deferred[None]:  # noqa: N802 (Twisted API)
        consumer.write(self.body)
        return defer.succeed(None)

    def pauseProducing(self) -> None:  # noqa: N802
        pass

    def resumeProducing(self) -> None:  # noqa: N802
        pass

    def stopProducing(self) -> None:  # noqa: N802
        pass


class _BodyReader(Protocol):
    """Collects a response body, at most *limit* bytes (more fails with ``response too large``)."""

    def __init__(self, done: Deferred[bytes], code: int, limit: int) -> None:
        self.done = done
        self.code = code
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0

    def dataReceived(self, data: bytes) -> None:  # noqa: N802
        if self.done.called:
            return
        self.size += len(data)
        if self.size > self.limit:
            self.done.errback(HttpError("response too large", TOO_LARGE, self.code))
            if self.transport is not None:
                self.transport.stopProducing()
            return
        self.chunks.append(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        if self.done.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(b"".join(self.chunks))
        else:
            self.done.errback(reason)


class _Discard:
    """A protocol that drops a response body nobody reads."""

    def makeConnection(self, transport: Any) -> None:  # noqa: N802
        self.transport = transport

    def dataReceived(self, data: bytes) -> None:  # noqa: N802
        pass

    def connectionLost(self, reason: Any) -> None:  # noqa: N802
        pass


def _read_body(response: Any, limit: int) -> Deferred[bytes]:
    reader: _BodyReader

    def cancel(_: Deferred[bytes]) -> None:
        if reader.transport is not None:
            reader.transport.stopProducing()

    done: Deferred[bytes] = Deferred(cancel)
    reader = _BodyReader(done, int(response.code), limit)
    response.deliverBody(reader)
    return done


class _QuietClientFactory(_HTTP11ClientFactory):
    """A connection factory that does not log each connection's start and stop (the supervisor
    reads every worker's /healthz each second)."""

    noisy = False


class _QuietConnectionPool(HTTPConnectionPool):
    _factory = _QuietClientFactory


class HttpClient:
    """Requests over one ``IAgent`` (default: ``twisted.web.client.Agent`` with its own pool).

    *persistent* keeps connections open between requests; *connect_timeout_s* bounds the TCP
    connect (each request's *timeout_s* bounds the whole exchange anyway). ``https://`` URLs are
    verified against *tls* (:class:`~agent.integrations.tls.TlsSettings`; None: the system's
    trust store), host name included.
    """

    def __init__(self, reactor: Any, *, agent: Any = None, persistent: bool = False,
                 connect_timeout_s: float | None = None, user_agent: bytes | None = None,
                 tls: TlsSettings | None = None) -> None:
        self.reactor = reactor
        if agent is None:
            self.pool = _QuietConnectionPool(reactor, persistent=persistent)
            agent = Agent(reactor, contextFactory=tls_policy(tls), connectTimeout=connect_timeout_s, pool=self.pool)
        else:
            self.pool = None
        self.agent = agent
        self.user_agent = user_agent

    def get(self, url: str, *, timeout_s: float, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
            headers: Iterable[tuple[str, str]] = ()) -> Deferred[HttpResponse]:
        return self.request("GET", url, timeout_s=timeout_s, max_body_bytes=max_body_bytes, headers=headers)

    def request(self, method: str, url: str, *, timeout_s: float, body: bytes | None = None,
                json: Any = None, headers: Iterable[tuple[str, str]] = (),
                max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                skip_body_from_status: int | None = None) -> Deferred[HttpResponse]:
        """Send one request; fire with an :class:`HttpResponse` of any status, or fail with :class:`HttpError`.

        *json* (instead of *body*) is sent as ``application/json``. A response announcing or
        sending more than *max_body_bytes* fails with ``response too large``. Bodies of
        statuses at or above *skip_body_from_status* are dropped unread.
        """
        raw_headers, producer = self._prepare(headers, json, body)
        d: Deferred[Any] = self.agent.request(method.encode("ascii"), url.encode("utf-8"), raw_headers, producer)

        def got_response(response: Any) -> Any:
            code = int(response.code)
            length = response.length
            if isinstance(length, int) and length > max_body_bytes:
                response.deliverBody(_Discard())
                raise HttpError("response too large", TOO_LARGE, code)
            if skip_body_from_status is not None and code >= skip_body_from_status:
                response.deliverBody(_Discard())
                return HttpResponse(code, b"")
            return _read_body(response, max_body_bytes).addCallback(lambda data: HttpResponse(code, data))

        d.addCallback(got_response)
        timed_out: list[bool] = []

        def on_timeout() -> None:
            timed_out.append(True)
            d.cancel()

        timer = self.reactor.callLater(timeout_s, on_timeout)

        def finish(result: Any) -> Any:
            if timer.active():
                timer.cancel()
            return result

        d.addBoth(finish)
        d.addErrback(_translate, timed_out)
        return d

    def _prepare(self, headers: Iterable[tuple[str, str]], json: Any, body: bytes | None) -> tuple[Headers, Any]:
        """The request's headers (User-Agent, JSON content type, the caller's) and body producer."""
        raw_headers = Headers()
        if self.user_agent is not None:
            raw_headers.setRawHeaders(b"User-Agent", [self.user_agent])
        if json is not None:
            body = jsonlib.dumps(json).encode("utf-8")
            raw_headers.setRawHeaders(b"content-type", [b"application/json"])
        for name, value in headers:
            raw_headers.setRawHeaders(name.encode("latin-1"), [value.encode("utf-8")])
        return raw_headers, (_BytesProducer(body) if body is not None else None)

    def request_stream(self, method: str, url: str, *, on_data: Any, timeout_s: float, idle_timeout_s: float,
                       json: Any = None, headers: Iterable[tuple[str, str]] = ()) -> Deferred[int]:
        """Send one request and hand the response body to *on_data(bytes)* as it arrives.

        Fires with the status when the body has ended; a status of 300 or more fails with an
        :class:`HttpError` ``http <status>: <start of the body>``. *timeout_s* bounds
        the wait for the response headers, *idle_timeout_s* each wait for more of the body.
        Fails with :class:`HttpError`; cancelling the Deferred drops the connection.
        """
        raw_headers, producer = self._prepare(headers, json, None)
        timed_out: list[bool] = []
        state: dict[str, Any] = {"timer": None, "reader": None}

        def stop() -> None:
            inner.cancel()
            reader = state["reader"]
            if reader is not None and reader.transport is not None:
                reader.transport.stopProducing()

        def expire() -> None:
            timed_out.append(True)
            stop()

        def rearm(delay: float) -> None:
            timer = state["timer"]
            if timer is not None and timer.active():
                timer.reset(delay)
            else:
                state["timer"] = self.reactor.callLater(delay, expire)

        def cancel(_: Deferred[int]) -> None:
            stop()

        outer: Deferred[int] = Deferred(cancel)
        inner: Deferred[Any] = self.agent.request(method.encode("ascii"), url.encode("utf-8"), raw_headers, producer)
        rearm(timeout_s)

        def got_response(response: Any) -> Any:
            code = int(response.code)
            if code >= 300:
                def refuse(data: bytes) -> int:
                    text = data.decode("utf-8", "replace").strip().replace("\n", " ")[:160]
                    raise HttpError(f"http {code}" + (f": {text}" if text else ""), OTHER, code)
                return _read_body(response, 1 << 16).addCallback(refuse)
            done: Deferred[None] = Deferred()
            rearm(idle_timeout_s)

            def chunk(data: bytes) -> None:
                rearm(idle_timeout_s)
                on_data(data)

            state["reader"] = _StreamReader(done, chunk)
            response.deliverBody(state["reader"])
            return done.addCallback(lambda _: code)

        inner.addCallback(got_response)

        def finish(result: Any) -> None:
            timer = state["timer"]
            if timer is not None and timer.active():
                timer.cancel()
            if outer.called:
                return
            if isinstance(result, Failure):
                try:
                    _translate(result, timed_out)
                except HttpError as exc:
                    outer.errback(exc)
                else:
                    outer.errback(result)
            else:
                outer.callback(result)

        inner.addBoth(finish)
        return outer


class _StreamReader(Protocol):
    """Hands each piece of a response body to *on_data*; *done* fires when the body ends."""

    def __init__(self, done: Deferred[None], on_data: Any) -> None:
        self.done = done
        self.on_data = on_data

    def dataReceived(self, data: bytes) -> None:  # noqa: N802
        if not self.done.called:
            self.on_data(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        if self.done.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(None)
        else:
            self.done.errback(reason)


def _translate(failure: Failure, timed_out: list[bool]) -> Failure:
    exc = failure.value
    if isinstance(exc, HttpError):
        return failure
    if timed_out:
        raise HttpError("timeout", TIMEOUT, cause=exc)
    reason = failure_reason(exc)
    if reason == "timeout":
        raise HttpError(reason, TIMEOUT, cause=exc)
    if reason.startswith("tls:"):
        raise HttpError(reason, TLS, cause=exc)
    if reason.startswith("error:"):
        raise HttpError(reason, OTHER, cause=exc)
    raise HttpError(reason, NETWORK, cause=exc)

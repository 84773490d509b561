"""Continuous probing of every region endpoint; feeds :class:`agent.regions.selector.RegionSelector`.

Every ``interval_s`` (default 250 ms) each speech endpoint gets a ``grpc.health.v1``
``Check`` through gRPC's futures API (no thread per probe; at most ``max_outstanding``
unanswered checks per endpoint, so a blackholed endpoint costs nothing more), with a
deadline of ``timeout_s``. The round-trip time of an answered check feeds the endpoint's
smoothed RTT; a timeout or an error counts as a lost probe. Besides, one ``Watch`` stream
per endpoint (a long-lived RPC on one small thread per endpoint) delivers status
changes as the server makes them, so a server that turns NOT_SERVING (Riva and the
embedded server do on graceful shutdown) is avoided one network delay later, without
waiting for the next check.

Dialogue endpoints (OpenAI-compatible URLs) are probed with an HTTP ``GET`` of the
``models`` resource next to the chat-completions URL, through the agent's HTTP client on the
reactor thread: any HTTP answer below 500 counts as reachable (an API key is not needed to be
reachable).

Version discovery (``discover_versions=True``, every ``discovery_interval_s``): Riva lists
the models it serves in ``GetRivaSpeechRecognitionConfig`` / ``GetRivaSynthesisConfig``;
each deployed model name becomes the version ``asr:<model_name>`` or ``tts:<model_name>``
(e.g. ``asr:pocketsphinx-en-US``, ``tts:flite-kal16`` on the embedded server) and is
handed to :meth:`RegionSelector.set_discovered_versions`. Configured versions and
:meth:`RegionSelector.set_versions` (config reload) work without it.

All results are applied on the reactor thread (``reactor.callFromThread``); probing never
blocks the reactor.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from riva.client.proto import riva_asr_pb2, riva_asr_pb2_grpc, riva_tts_pb2, riva_tts_pb2_grpc
from twisted.internet import defer
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from agent.integrations.http import TIMEOUT, HttpClient, HttpError
from agent.regions.selector import RegionSelector
from agent.speech.api import SpeechConnection
from agent.speech.client import open_channel, rpc_error_text

log = Logger(namespace="openclaw.regions")

WATCH_RETRY_MIN_S = 0.5
WATCH_RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe found; ``rtt_s`` is measured on the thread that saw the answer."""

    ok: bool  # the endpoint answered
    serving: bool  # ... and said SERVING (HTTP: answered below 500)
    rtt_s: float
    error: str = ""


class ProbeTransport(Protocol):
    """The I/O of probing; the real one is :class:`GrpcProbeTransport`, tests use fakes.

    Callbacks may run on any thread."""

    def check(self, address: str, timeout_s: float, done: Callable[[ProbeOutcome], None]) -> None: ...

    def watch(self, address: str, on_status: Callable[[bool], None]) -> Callable[[], None]: ...

    def discover(self, address: str, kind: str, timeout_s: float, done: Callable[[frozenset[str] | None], None]) -> None: ...

    def close(self) -> None: ...


class GrpcProbeTransport:
    """Health checks over gRPC (one channel per endpoint, separate from the call streams'
    channels) and HTTP probes of dialogue URLs (started on the reactor thread, as
    :class:`RegionProber` calls :meth:`check`)."""

    def __init__(self, reactor: Any, *, use_ssl: bool = False, http: HttpClient | None = None,
                 connections: dict[str, SpeechConnection] | None = None) -> None:
        """*connections*: TLS and metadata per endpoint address (others: plaintext, or TLS
        with the system's roots when *use_ssl*)."""
        self._reactor = reactor
        self._use_ssl = use_ssl
        self._connections = dict(connections or {})
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()
        self._http = http if http is not None else HttpClient(reactor)
        self._closed = False

    def _channel(self, address: str) -> grpc.Channel:
        with self._lock:
            ch = self._channels.get(address)
            if ch is None:
                ch = open_channel(address, self._connection(address))
                self._channels[address] = ch
            return ch

    def _connection(self, address: str) -> SpeechConnection:
        return self._connections.get(address) or SpeechConnection(use_ssl=self._use_ssl)

    def _metadata(self, address: str) -> tuple[tuple[str, str], ...]:
        return self._connection(address).metadata

    def check(self, address: str, timeout_s: float, done: Callable[[ProbeOutcome], None]) -> None:
        if address.startswith(("http://", "https://")):
            self._http_check(address, timeout_s, done)
            return
        stub = health_pb2_grpc.HealthStub(self._channel(address))
        started = time.monotonic()
        future = stub.Check.future(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s,
                                   metadata=self._metadata(address))

        def finished(f: Any) -> None:
            rtt = time.monotonic() - started
            try:
                response = f.result()
            except grpc.RpcError as exc:
                done(ProbeOutcome(False, False, rtt, rpc_error_text(exc)))
                return
            except Exception as exc:  # cancelled on close, or a broken channel
                done(ProbeOutcome(False, False, rtt, type(exc).__name__))
                return
            serving = response.status == health_pb2.HealthCheckResponse.SERVING
            done(ProbeOutcome(True, serving, rtt, "" if serving else health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)))

        future.add_done_callback(finished)

    @staticmethod
    def _models_url(url: str) -> str:
        base = url.rstrip("/")
        for suffix in ("/chat/completions", "/completions"):
            if base.endswith(suffix):
                return base[: -len(suffix)] + "/models"
        return base

    def _http_check(self, url: str, timeout_s: float, done: Callable[[ProbeOutcome], None]) -> None:
        started = self._reactor.seconds()
        d = self._http.get(self._models_url(url), timeout_s=timeout_s)

        def answered(response: Any) -> None:
            status = response.status
            done(ProbeOutcome(True, status < 500, self._reactor.seconds() - started,
                              "" if status < 500 else f"HTTP {status}"))

        def failed(failure: Any) -> None:
            exc = failure.value
            if isinstance(exc, HttpError) and exc.kind == TIMEOUT:
                name = "TimeoutError"
            else:
                name = type(exc.cause if isinstance(exc, HttpError) and exc.cause is not None else exc).__name__
            done(ProbeOutcome(False, False, self._reactor.seconds() - started, name))

        d.addCallbacks(answered, failed)

    def watch(self, address: str, on_status: Callable[[bool], None]) -> Callable[[], None]:
        if address.startswith(("http://", "https://")):
            return lambda: None
        stop = threading.Event()
        current: list[Any] = []

        def run() -> None:
            backoff = WATCH_RETRY_MIN_S
            stub = health_pb2_grpc.HealthStub(self._channel(address))
            while not stop.is_set():
                call = stub.Watch(health_pb2.HealthCheckRequest(service=""), metadata=self._metadata(address))
                current[:] = [call]
                if stop.is_set():
                    call.cancel()
                    return
                try:
                    for response in call:
                        backoff = WATCH_RETRY_MIN_S
                        on_status(response.status == health_pb2.HealthCheckResponse.SERVING)
                except grpc.RpcError as exc:
                    code = exc.code() if isinstance(exc, grpc.Call) else None
                    if code == grpc.StatusCode.UNIMPLEMENTED:
                        return  # checks alone then
                except Exception:
                    pass
                if stop.wait(backoff):
                    return
                backoff = min(WATCH_RETRY_MAX_S, backoff * 2)

        thread = threading.Thread(target=run, name=f"region-watch-{address}", daemon=True)
        thread.start()

        def cancel() -> None:
            stop.set()
            for call in current:
                call.cancel()

        return cancel

    def discover(self, address: str, kind: str, timeout_s: float, done: Callable[[frozenset[str] | None], None]) -> None:
        channel = self._channel(address)
        if kind == "asr":
            future = riva_asr_pb2_grpc.RivaSpeechRecognitionStub(channel).GetRivaSpeechRecognitionConfig.future(
                riva_asr_pb2.RivaSpeechRecognitionConfigRequest(), timeout=timeout_s, metadata=self._metadata(address)
            )
        else:
            future = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel).GetRivaSynthesisConfig.future(
                riva_tts_pb2.RivaSynthesisConfigRequest(), timeout=timeout_s, metadata=self._metadata(address)
            )

        def finished(f: Any) -> None:
            try:
                response = f.result()
            except Exception:
                done(None)
                return
            done(frozenset(f"{kind}:{cfg.model_name}" for cfg in response.model_config if cfg.model_name))

        future.add_done_callback(finished)

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for ch in channels:
            ch.close()
        if self._http.pool is not None:
            self._http.pool.closeCachedConnections()


class RegionProber:
    """Probes every endpoint the selector names, on the reactor's clock.

    ``on_probe(address, roles, outcome)`` (optional, reactor thread) sees every outcome,
    e.g. to observe a probe-RTT histogram. :attr:`ready` fires once every speech endpoint
    has answered or failed a first probe (so the first call is routed on data).
    """

    def __init__(
        self,
        reactor: Any,
        selector: RegionSelector,
        *,
        interval_s: float = 0.25,
        timeout_s: float = 0.5,
        watch: bool = True,
        discover_versions: bool = False,
        discovery_interval_s: float = 10.0,
        max_outstanding: int = 2,
        transport: ProbeTransport | None = None,
        on_probe: Callable[[str, tuple[str, ...], ProbeOutcome], None] | None = None,
    ) -> None:
        if interval_s <= 0 or timeout_s <= 0 or max_outstanding < 1:
            raise ValueError("interval_s and timeout_s must be positive, max_outstanding at least 1")
        self._reactor = reactor
        self._selector = selector
        #: the last probe failure of each endpoint still failing (logged when it changes)
        self._last_error: dict[str, str] = {}
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._watch = watch
        self._discover = discover_versions
        self._discovery_interval_s = discovery_interval_s
        self._max_outstanding = max_outstanding
        self._transport: ProbeTransport = transport if transport is not None else GrpcProbeTransport(reactor)
        self._on_probe = on_probe
        self._outstanding: dict[str, int] = {}
        self._watches: dict[str, Callable[[], None]] = {}
        self._answered: set[str] = set()
        self._loop: LoopingCall | None = None
        self._discovery_loop: LoopingCall | None = None
        self._running = False
        self.ready: defer.Deferred[None] = defer.Deferred()
        #: probes sent and outcomes applied, for tests and the benchmark
        self.sent = 0
        self.skipped = 0

    def start(self) -> None:
        self._running = True
        self._loop = LoopingCall(self._tick)
        self._loop.clock = self._reactor
        self._loop.start(self.interval_s, now=True)
        if self._discover:
            self._discovery_loop = LoopingCall(self._discover_all)
            self._discovery_loop.clock = self._reactor
            self._discovery_loop.start(self._discovery_interval_s, now=True)

    def stop(self) -> None:
        self._running = False
        for loop in (self._loop, self._discovery_loop):
            if loop is not None and loop.running:
                loop.stop()
        for cancel in self._watches.values():
            cancel()
        self._watches.clear()
        self._transport.close()

    def _tick(self) -> None:
        endpoints = self._selector.endpoints()
        if self._watch:
            for address in list(self._watches):
                if address not in endpoints:
                    self._watches.pop(address)()
            for address in endpoints:
                if address not in self._watches:
                    self._watches[address] = self._transport.watch(
                        address, lambda serving, a=address: self._from_thread(self._on_watch, a, serving)
                    )
        for address in endpoints:
            if self._outstanding.get(address, 0) >= self._max_outstanding:
                self.skipped += 1
                continue
            self._outstanding[address] = self._outstanding.get(address, 0) + 1
            self.sent += 1
            self._transport.check(
                address, self.timeout_s, lambda outcome, a=address: self._from_thread(self._on_outcome, a, outcome)
            )

    def _from_thread(self, fn: Callable[..., None], *args: Any) -> None:
        if self._running:
            self._reactor.callFromThread(fn, *args)

    def _on_outcome(self, address: str, outcome: ProbeOutcome) -> None:
        self._outstanding[address] = max(0, self._outstanding.get(address, 0) - 1)
        if not self._running:
            return
        now = self._reactor.seconds()
        roles = self._selector.endpoints().get(address, ())
        if outcome.ok:
            self._selector.on_probe_response(address, now, outcome.rtt_s, outcome.serving)
            if self._last_error.pop(address, None) is not None:
                log.info("region endpoint {address} answers probes again", address=address)
        else:
            self._selector.on_probe_failure(address, now, outcome.error or "error")
            if self._last_error.get(address) != outcome.error:  # logged once per new reason
                self._last_error[address] = outcome.error
                log.warn("region endpoint {address} ({roles}) probe failed: {error}", address=address,
                         roles=",".join(roles) or "?", error=outcome.error or "error")
        if self._on_probe is not None:
            self._on_probe(address, roles, outcome)
        self._answered.add(address)
        if not self.ready.called:
            speech = {a for a, r in self._selector.endpoints().items() if "asr" in r or "tts" in r}
            if speech <= self._answered:
                self.ready.callback(None)

    def _on_watch(self, address: str, serving: bool) -> None:
        if not self._running:
            return
        self._selector.on_status(address, self._reactor.seconds(), serving)
        if not serving:
            log.warn("region endpoint {address} reports NOT_SERVING", address=address)

    @property
    def discovers_versions(self) -> bool:
        return self._discover

    def discover_now(self) -> None:
        """Ask every endpoint's versions now (a rollout switched a region), besides the interval."""
        if self._running:
            self._discover_all()

    def _discover_all(self) -> None:
        for address, roles in self._selector.endpoints().items():
            for kind in ("asr", "tts"):
                if kind in roles:
                    self._transport.discover(
                        address,
                        kind,
                        max(self.timeout_s, 1.0),
                        lambda versions, a=address, k=kind: self._from_thread(self._on_discovered, a, k, versions),
                    )

    def _on_discovered(self, address: str, kind: str, versions: frozenset[str] | None) -> None:
        if self._running and versions is not None:
            self._selector.set_discovered_versions(address, kind, versions)

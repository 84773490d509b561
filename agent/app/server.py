"""``openclaw-voice serve``: SIP front, admission, routing, sessions, metrics.

(Over 600 lines: one class whose start-up, admission and call wiring share its state.)

The Twisted reactor owns the process. :class:`AgentServer` is the
application behind the pjsua2 adapter: it admits or refuses each INVITE
(capacity → 503 with Retry-After, unrouted number → 404) before pjsua
allocates a call, answers admitted calls, wires each one to a
:class:`~agent.call.session.CallSession`, and keeps metrics and call records.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from twisted.internet import defer, threads
from twisted.internet.task import LoopingCall, deferLater
from twisted.logger import Logger
from twisted.web.resource import Resource

from agent.app.admission import Admitted, flow_needs, flow_speech, source_ip
from agent.app.call_journal import ServerJournals
from agent.app.access import ServerAccess
from agent.app.answering import answer_call
from agent.app.call_records import append_record
from agent.app.config import ServerConfig
from agent.app.control import SipCallControl
from agent.app.control_plane import listen_pages
from agent.app.prompt_cache import PromptAudioCache
from agent.app.retention import RecordingRetention
from agent.app.speech_process import SpeechServerProcess
from agent.app.web import Admin, Health
from agent.dialplan import semantic
from agent.dialplan.asks import _matcher
from agent.dialplan.engine import DialogueSession
from agent.dialplan.model import AskStep, Dialplan, static_prompts
from agent.dialplan.store import DialplanStore
from agent.integrations.webhook import call_webhook
from agent.call.endpointer import EndpointerConfig
from agent.app.metrics import AGENT_HANGUP_REASONS, AgentMetrics
from agent.app.reconciler import CallReconciler, server_reconciler
from agent.call.record import CallInfo
from agent.call.session import CallSession, SessionSettings
from agent.integrations.chat_stream import stream_reply
from agent.integrations.http import HttpClient
from agent.regions.probe import GrpcProbeTransport, RegionProber
from agent.regions.selector import NoRegion, RegionSelector, RegionSpec, Selection
from agent.regions.rollout_admin import RegionRolloutAdmin
from agent.regions.web import RegionsResource, register_region_metrics
from agent.speech.client import SpeechClient
from agent.speech.failover import RegionalSpeech, SpeechClientPool
from agent.speech.voices import FLITE_VOICES
from agent.secrets import redact_value
from media.vad import VadConfig
from sip.message import SipRequest
from sip.pjsua import PJSUA_MAX_CALLS, Rejection, SipCall, SipConfig, SipStack

log = Logger(namespace="openclaw.server")

#: what the agent says before it hangs up a call itself (drain timeout, stop)
GOODBYE_PROMPT = "We have to end this call now. Please call again in a moment. Goodbye."
#: a call still up this long after its goodbye began is hung up without waiting further
GOODBYE_TIMEOUT_S = 10.0
#: how long start-up waits for a first usable speech region after every endpoint was probed once
STARTUP_REGION_WAIT_S = 10.0


class AgentServer:
    """Implements :class:`sip.pjsua.CallHandler` for the agent."""

    def __init__(self, config: ServerConfig, reactor: Any, dialplan: Dialplan | None = None) -> None:
        self.config = config
        self.reactor = reactor
        self.metrics = AgentMetrics()
        self.capacity = min(config.sip.capacity, PJSUA_MAX_CALLS)
        if config.sip.capacity > PJSUA_MAX_CALLS:
            log.warn("sip.capacity {want} exceeds the {max} calls one process can hold; using {max} "
                     "(run more workers behind a SIP load balancer)", want=config.sip.capacity, max=PJSUA_MAX_CALLS)
        self.metrics.capacity.set(self.capacity)
        self.store = DialplanStore(list(config.dialplans), reactor, on_error=self._on_dialplan_error,
                                   on_reload=self._on_dialplan_reload)
        self.metrics.dialplan_generation.set(self.store.generation)
        self.prompts = PromptAudioCache()
        self.sessions: dict[str, CallSession] = {}
        self._admitted: dict[str, Admitted] = {}
        self.speech: Any = None  # a client of the best region's TTS, for the prompt cache
        self.speech_uri = ""
        self.selector: RegionSelector | None = None
        self.prober: RegionProber | None = None
        self.pool = SpeechClientPool()
        self.region_metrics: Any = None
        self.region_admin: RegionRolloutAdmin | None = None
        self._speech_proc: SpeechServerProcess | None = None
        self._speech_transport: Any = None
        self.stack: SipStack | None = None
        self.web_port: Any = None
        self.ready = False
        self.stopping = False
        self._health_loop: LoopingCall | None = None
        #: index of this worker under ``serve --workers N`` (None: a standalone server)
        self.worker_id: int | None = None
        #: draining: new calls and keepalive OPTIONS get 503, calls in progress go on
        self.draining = False
        self.ending_calls = False
        #: called once when the server has nothing left to do after a drain or a polite end
        self.on_idle: Any = None
        #: calls still up this long after a drain began are ended politely (None: wait)
        self.drain_timeout_s: float | None = None
        self._drain_timer: Any = None
        self._goodbye_timer: Any = None
        self.reconciler: CallReconciler | None = None
        #: running calls' records, journaled turn by turn (set up by start(), once worker_id is known)
        self.journals = ServerJournals("", None)
        self.retention: RecordingRetention | None = None
        self.web_ports: list[Any] = []

    @property
    def dialplan(self) -> Dialplan:
        """The dialplan new calls get (calls in progress keep the one they started with)."""
        return self.store.current

    def reload_dialplans(self) -> bool:
        """Reload the dialplan files now (SIGHUP); invalid files leave the current version."""
        return self.store.reload()

    def _on_dialplan_error(self, error: Exception) -> None:
        self.metrics.dialplan_reloads.labels("invalid").inc()
        log.error("dialplan reload refused, keeping generation {gen}:\n{err}", gen=self.store.generation, err=error)

    def _on_dialplan_reload(self, new: Dialplan, old: Dialplan) -> None:
        self.metrics.dialplan_reloads.labels("ok").inc()
        self.metrics.dialplan_generation.set(self.store.generation)
        log.info("dialplans reloaded: generation {gen} ({digest})", gen=self.store.generation,
                 digest=getattr(new, "digest", "")[:12])
        if self.speech is not None:
            self.warm_prompt_cache()
        threads.deferToThread(prepare_intent_matchers, new).addErrback(
            lambda f: log.failure("intent matchers of the reloaded dialplans", f))

    # -- start / stop ---------------------------------------------------------
    @defer.inlineCallbacks
    def start(self) -> Any:
        # The sentence encoder loads while the speech backend and the prompt cache come up.
        matchers_ready = threads.deferToThread(prepare_intent_matchers, self.dialplan)
        regions = self.config.speech.regions
        if regions:
            specs = [RegionSpec(r.name, r.asr_endpoints, r.tts_endpoints,
                                dialogue_endpoint=r.dialogue or self.config.dialogue.url or None,
                                model_versions=frozenset(r.model_versions), capacity=r.capacity,
                                home_prefixes=r.home_prefixes, home_networks=r.home_networks) for r in regions]
            connections = {address: r.connection for r in regions
                           for address in (*r.asr_endpoints, *r.tts_endpoints)}
            self.pool = SpeechClientPool(lambda address: SpeechClient(address, connection=connections.get(address)))
            for r in regions:
                log.info("speech region {name}: asr {asr}, tts {tts}{tls}{meta}", name=r.name,
                         asr=",".join(r.asr_endpoints), tts=",".join(r.tts_endpoints),
                         tls=" over TLS" if r.connection.secure else "",
                         meta=f" with metadata {', '.join(r.connection.metadata_keys)}" if r.connection.metadata else "")
            if self.config.speech.voice in FLITE_VOICES:
                log.warn("speech.voice {voice!r} is a name of the embedded engine; Riva servers know voices such "
                         "as English-US.Male-1", voice=self.config.speech.voice)
        else:
            connections = {}
            address = yield self._start_embedded_speech()
            log.info("speech backend: embedded speech server at {uri}", uri=address)
            specs = [RegionSpec("local", (address,), (address,), capacity=64,
                                dialogue_endpoint=self.config.dialogue.url or None)]
        routing = self.config.speech.routing
        self.selector = RegionSelector(specs, health=routing.health, selection=routing.selection)
        self.region_metrics = register_region_metrics(self.metrics.registry, self.selector, self.reactor.seconds)
        self.prober = RegionProber(self.reactor, self.selector, interval_s=routing.probe.interval_ms / 1000.0,
                                   timeout_s=routing.probe.timeout_ms / 1000.0, watch=routing.probe.watch,
                                   discover_versions=routing.probe.discover_versions,
                                   discovery_interval_s=routing.probe.discovery_interval_s,
                                   on_probe=self.region_metrics.observe_probe,
                                   transport=GrpcProbeTransport(self.reactor, connections=connections,
                                                                http=HttpClient(self.reactor, tls=self.config.http)))
        self.prober.start()
        yield self.prober.ready
        best = self.selector.select(None, None, (), None, now=self.reactor.seconds())
        # A first probe may miss its deadline while a TLS channel connects: wait a little.
        waited_until = self.reactor.seconds() + STARTUP_REGION_WAIT_S
        while isinstance(best, NoRegion) and self.reactor.seconds() < waited_until:
            yield deferLater(self.reactor, routing.probe_interval_ms / 1000.0, lambda: None)
            best = self.selector.select(None, None, (), None, now=self.reactor.seconds())
        if isinstance(best, NoRegion):
            raise RuntimeError(f"no speech region is usable: {best.reason} ({best.detail})")
        self.speech_uri = best.tts_endpoint
        self.speech = self.pool.get(best.tts_endpoint)
        yield threads.deferToThread(self.speech.wait_ready, 60.0)
        self.metrics.speech_up.set(1)
        self._health_loop = LoopingCall(self._check_speech)
        self._health_loop.clock = self.reactor
        self._health_loop.start(5.0, now=False)
        yield self.warm_prompt_cache()
        yield matchers_ready
        self.store.watch(1.0)
        self.journals = ServerJournals(self.config.call_records, self.worker_id, self.metrics.registry)
        self.journals.recover(self._write_record)
        self.retention = RecordingRetention(self.reactor, self.config.recordings_dir, self.config.recordings_retention,
                                            in_use=lambda: [p for s in self.sessions.values()
                                                            if (p := s.recorder.current_path)])
        self.retention.start()
        self._start_web()
        self._start_sip()
        self.ready = True
        log.info("ready: SIP on {host}:{port} (capacity {cap}), metrics on {mhost}:{mport}; transports {tps}",
                 tps=" ".join(f"{k}:{v}" for k, v in (self.stack.bound_ports if self.stack else {}).items()),
                 host=self.config.sip.host, port=self.stack.bound_port if self.stack else 0,
                 cap=self.capacity, mhost=self.config.metrics.host,
                 mport=self.web_port.getHost().port if self.web_port else 0)

    def _start_embedded_speech(self) -> defer.Deferred[str]:
        proc = SpeechServerProcess()
        env = dict(os.environ)
        env["OPENCLAW_PARENT_PID"] = str(os.getpid())
        self._speech_transport = self.reactor.spawnProcess(
            proc, sys.executable,
            [sys.executable, "-m", "agent.speech.server", "--listen", "127.0.0.1:0",
             "--open-speech", self.config.speech.embedded_open_speech],
            env=env)
        self._speech_proc = proc
        return proc.ready

    @defer.inlineCallbacks
    def warm_prompt_cache(self) -> Any:
        """Synthesise every static prompt of the loaded dialplans."""
        assert self.speech is not None
        started = time.monotonic()
        wanted = set(static_prompts(self.dialplan)) | {(GOODBYE_PROMPT, self.config.speech.voice)}
        for text, voice in sorted(wanted):
            if self.prompts.get(text, voice) is not None:
                continue
            try:
                pcm = yield threads.deferToThread(self.speech.synthesize, text, sample_rate_hz=16000, voice=voice)
            except Exception as e:
                log.warn("prompt not cached ({err}): {text!r}", err=e, text=text)
                continue
            self.prompts.put(text, voice, pcm)
        self.metrics.prompt_cache_size.set(len(self.prompts))
        log.info("prompt cache: {n} prompts synthesised in {ms:.0f} ms", n=len(self.prompts),
                 ms=(time.monotonic() - started) * 1000)

    def _start_sip(self) -> None:
        s = self.config.sip
        m = self.config.media
        cfg = SipConfig(host=s.host, port=s.port, public_address=s.public_address, codecs=s.codecs,
                        frame_ms=m.frame_ms, jb_init_ms=m.jb_init_ms, jb_min_pre_ms=m.jb_min_pre_ms,
                        jb_max_pre_ms=m.jb_max_pre_ms, jb_max_ms=m.jb_max_ms,
                        clock_thread_priority=m.clock_thread_priority, registration=s.registration,
                        rtp_port=s.rtp_port, rtp_port_range=s.rtp_port_range,
                        transports=s.transports, tcp_port=s.tcp_port, tls=s.tls, srtp=s.srtp,
                        session_timers=s.session_timers)
        self.access = ServerAccess(s.access, self.reactor, self.metrics.registry)
        self.access.start()
        self.stack = SipStack(cfg, self.reactor, self, on_registration=self._on_registration,
                              guard=self.access.guard if s.access.enabled else None, doors=s.doors,
                              on_refused=lambda reason: self.access.refused.labels(reason).inc())
        self.stack.on_hangup = self._on_agent_hangup
        self.stack.start()
        self.reconciler = server_reconciler(self, s.reconcile_interval_ms / 1000.0)
        self.reconciler.start()

    def _start_web(self) -> None:
        from prometheus_client.twisted import MetricsResource

        pages: dict[str, Resource] = {"metrics": MetricsResource(registry=self.metrics.registry),
                                      "healthz": Health(self), "admin": Admin(self)}
        if self.selector is not None:
            prober = self.prober
            self.region_admin = RegionRolloutAdmin(
                self.selector, self.reactor.seconds,
                calls_in=lambda region: [cid for cid, s in self.sessions.items()
                                         if getattr(s.info.regional_speech, "region", s.info.region) == region],
                discover_now=prober.discover_now if prober is not None and prober.discovers_versions else None)
            pages["regions"] = RegionsResource(
                self.selector, self.reactor.seconds,
                calls_on=lambda region: [cid for cid, s in self.sessions.items()
                                         if s.info.region == region])
        self.web_ports = listen_pages(self.reactor, self.config, pages)
        self.web_port = self.web_ports[0]

    def _check_speech(self) -> None:
        if self.speech is None:
            return
        d = threads.deferToThread(self.speech.check_health, 1.0)
        d.addCallback(lambda ok: self.metrics.speech_up.set(1 if ok else 0))
        d.addErrback(lambda f: self.metrics.speech_up.set(0))

    def stop(self) -> defer.Deferred[None]:
        """Hang up calls, stop SIP, the web port and the embedded speech server."""
        self.stopping = True
        self.store.stop()
        if self.reconciler is not None:
            self.reconciler.stop()
        for session in list(self.sessions.values()):
            session.close("server shutting down")
        if self.stack is not None:
            self.stack.stop()
            self.stack = None
            self.access.stop()
        if self._health_loop is not None and self._health_loop.running:
            self._health_loop.stop()
        if self.retention is not None:
            self.retention.stop()
        if self.prober is not None:
            self.prober.stop()
        self.pool.close()
        ds = []
        for port in self.web_ports:
            ds.append(defer.maybeDeferred(port.stopListening))
        if self._speech_transport is not None and self._speech_proc is not None:
            try:
                self._speech_transport.signalProcess("TERM")
            except Exception:
                pass
            ds.append(self._speech_proc.ended)
        return defer.DeferredList(ds).addCallback(lambda _: None)

    # -- CallHandler ------------------------------------------------------------
    def admit(self, request: SipRequest) -> Rejection | None:
        call_id = request.call_id
        if self.draining and call_id not in self._admitted:
            self.metrics.calls.labels("rejected_draining").inc()
            log.info("call {call_id} refused: 503 (draining)", call_id=call_id)
            return self._unavailable()
        if self.stopping or not self.ready:
            self.metrics.calls.labels("rejected_capacity").inc()
            log.info("call {call_id} refused: 503 (not ready)", call_id=call_id)
            return self._unavailable()
        if call_id in self._admitted:
            return None  # a retransmission of an INVITE already admitted
        # pjsua's own slots count too: a call the agent has ended may hold one a little longer
        # (its BYE transaction), and pjsua answers an INVITE with no slot left with a 486.
        in_use = max(len(self.stack.calls), self.stack.slots_in_use()) if self.stack else 0
        self._settle_admissions()
        if in_use >= self.capacity:
            self.metrics.calls.labels("rejected_capacity").inc()
            log.info("call {call_id} from {caller} to {called} refused: 503 at capacity ({n}/{cap})",
                     call_id=call_id, caller=request.caller, called=request.called, n=in_use, cap=self.capacity)
            return self._unavailable()
        placed = self._place(request.caller, request.called, source_ip(request), request.header("x-openclaw-region"))
        if isinstance(placed, Rejection):
            if placed.status == 404:
                log.info("call {call_id} from {caller} to {called} refused: 404 no route",
                         call_id=call_id, caller=request.caller, called=request.called)
            return placed
        if isinstance(placed, NoRegion):
            log.info("call {call_id} refused: 503, no speech region ({reason}: {detail})", call_id=call_id,
                     reason=placed.reason, detail=placed.detail)
            return self._unavailable(placed.retry_after_s)
        self._admitted[call_id] = placed
        return None

    def _place(self, caller: str, called: str, source_ip: str | None,
               sticky: str | None) -> Admitted | Rejection | NoRegion:
        """Route a call and choose its speech region: what admits it, or why not (counted)."""
        dialplan = self.dialplan
        flow = dialplan.route(called, caller)
        if flow is None:
            self.metrics.calls.labels("rejected_no_route").inc()
            return Rejection(404, "Not Found")
        pinned, need_dialogue = flow_needs(dialplan, flow)
        choice = self._select_region(caller, source_ip, pinned, sticky, need_dialogue)
        if isinstance(choice, NoRegion):
            self.metrics.calls.labels("rejected_capacity").inc()
            return choice
        return Admitted(flow, dialplan, choice, pinned, need_dialogue, source_ip)

    def _unavailable(self, retry_after_s: float | int | None = None) -> Rejection:
        """503 with Retry-After (the configured one unless the region selector gave its own)."""
        after = self.config.sip.retry_after_s if retry_after_s is None else retry_after_s
        return Rejection(503, "Service Unavailable", (("Retry-After", str(after)),))

    def options_status(self, request: SipRequest) -> Rejection | None:
        """Keepalive OPTIONS (Kamailio's dispatcher): 503 unless the server takes new calls."""
        if self.ready and not self.draining and not self.stopping:
            return None
        return self._unavailable()

    # -- drain and polite stop ------------------------------------------------------
    def drain(self, timeout_s: float | None = None) -> bool:
        """Take no new calls (INVITE and OPTIONS get 503), let the calls in progress finish.

        When the last call has ended, ``on_idle`` is called (``serve`` stops the
        process). After *timeout_s* the remaining calls are ended politely.
        Returns False when the server was already draining.
        """
        if self.draining:
            return False
        self.draining = True
        self.metrics.draining.set(1)
        log.info("draining: {n} call(s) in progress, new calls get 503{limit}", n=len(self.sessions),
                 limit=f" (calls still up in {timeout_s:.0f} s are ended)" if timeout_s else "")
        if timeout_s is not None and timeout_s > 0:
            self._drain_timer = self.reactor.callLater(timeout_s, self._drain_timed_out)
        self._check_idle()
        return True

    def _drain_timed_out(self) -> None:
        self._drain_timer = None
        log.info("drain timeout: ending {n} call(s)", n=len(self.sessions))
        self.end_calls_politely()

    def end_calls_politely(self) -> None:
        """Say goodbye on every call, then hang up; ``on_idle`` once no call is left.

        A second request (another SIGTERM) hangs up at once.
        """
        if self.ending_calls:
            log.info("ending calls now: hanging up {n} call(s)", n=len(self.sessions))
            self._hang_up_all("forced")
            return
        self.ending_calls = True
        if not self.draining:
            self.draining = True
            self.metrics.draining.set(1)
        for session in list(self.sessions.values()):
            self._say_goodbye(session)
        if self.sessions:
            self._goodbye_timer = self.reactor.callLater(GOODBYE_TIMEOUT_S, self._hang_up_all, "forced")
        self._check_idle()

    def _say_goodbye(self, session: CallSession) -> None:
        self.metrics.calls_ended_by_server.labels("goodbye").inc()
        log.info("call {call_id} ending: goodbye prompt, then BYE", call_id=session.call_id)
        session.end_politely(GOODBYE_PROMPT, self.config.speech.voice, "server stopping")

    def _hang_up_all(self, how: str) -> None:
        self._goodbye_timer = None
        for session in list(self.sessions.values()):
            if how == "forced":
                self.metrics.calls_ended_by_server.labels("forced").inc()
            session.hang_up("server stopping")
        if self.stack is not None:
            for call in self.stack.calls:
                call.hangup(why="server stopping (forced)")
        self._check_idle()

    def _check_idle(self) -> None:
        if not (self.draining or self.ending_calls) or self.sessions:
            return
        if self.stack is not None and any(not c.disconnected for c in self.stack.calls):
            self.reactor.callLater(0.2, self._check_idle)  # calls pjsua has not torn down yet
            return
        for timer in (self._drain_timer, self._goodbye_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self._drain_timer = self._goodbye_timer = None
        callback, self.on_idle = self.on_idle, None
        if callback is not None:
            log.info("no calls left: stopping")
            callback()

    def _select_region(self, caller: str, source_ip: str | None, pinned: tuple[str, ...], sticky: str | None,
                       need_dialogue: bool) -> Selection | NoRegion:
        assert self.selector is not None
        choice = self.selector.select(caller or None, source_ip, pinned, sticky or None, now=self.reactor.seconds(),
                                      need_dialogue=need_dialogue)
        return choice

    def _settle_admissions(self) -> None:
        # Forget the INVITEs admitted by the gate that pjsua has not turned into calls, as the
        # gate admits another INVITE. pjsip handles one received message at a time, and pjsua
        # creates the call (incoming_call) while it handles the INVITE the gate admitted; so by
        # the time the gate sees the next INVITE, an earlier admission that is not a call was
        # answered by pjsua itself (e.g. 488 for an unusable SDP) and must not hold a slot, even
        # when its caller calls again within the same poll of the stack.
        for cid in list(self._admitted):
            del self._admitted[cid]
            log.info("call {call_id} was admitted but pjsua answered it itself; its slot is free again",
                     call_id=cid)

    def incoming_call(self, call: SipCall) -> None:
        cid = call.sip_call_id
        # From here the call counts in stack.calls, no longer as a pending admission.
        admitted = self._admitted.pop(cid, None)
        if cid in self.sessions:
            # Sessions, records and metrics are keyed by Call-ID: a second INVITE with the Call-ID
            # of a call in progress (a loop, or a broken peer) must not take the first one's place.
            log.warn("call {call_id} refused: 482, a call with this Call-ID is in progress", call_id=cid)
            call.answer(482, "Loop Detected")
            return
        if admitted is None:  # not seen by the admission gate
            placed = self._place(call.caller, call.called, None, call.header("x-openclaw-region"))
            if isinstance(placed, NoRegion):
                placed = self._unavailable(placed.retry_after_s)
            if isinstance(placed, Rejection):
                call.answer(placed.status, placed.reason, placed.headers)
                return
            admitted = placed
        selection = admitted.selection
        assert selection is not None
        variables = {
            "caller": call.caller, "called": call.called, "call_id": cid, "region": selection.region,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        for name, value in self.config.variables:
            variables[f"config.{name}"] = value
        variables["config.transfer_uri"] = self.config.transfer_uri
        dialogue = DialogueSession(admitted.dialplan, admitted.flow, variables,
                                   now=lambda: datetime.now(timezone.utc))
        # The endpointer hears of a gap when the VAD reports it: no later than the shortest
        # silence that may end a turn, or that silence would be waited for in vain.
        vad_end_ms = min(self.config.media.speech_end_ms, self.config.endpointing.complete_silence_ms)
        settings = SessionSettings(
            frame_ms=self.config.media.frame_ms,
            vad=VadConfig(start_ms=self.config.media.speech_start_ms, end_ms=vad_end_ms),
            stop_history_ms=self.config.speech.stop_history_ms,
            phrase_hints=self.config.speech.phrase_hints,
            alternatives=self.config.speech.alternatives,
            punctuation=self.config.speech.asks_punctuation,
            first_prompt_delay_ms=self.config.media.first_prompt_delay_ms,
            barge_in=self.config.barge_in,
            # every endpointing setting is an EndpointerConfig field of the same name; a falling
            # voice shortens no finished sentence's silence
            endpointer=EndpointerConfig(**asdict(self.config.endpointing),
                                        falling_finished_silence_ms=self.config.endpointing.finished_silence_ms))
        routing = self.config.speech.routing
        assert self.selector is not None
        language, asr_model = flow_speech(admitted.dialplan, admitted.flow)
        speech = RegionalSpeech(self.reactor, self.selector, self.pool, selection, call_id=cid,
                                language_code=language, asr_model=asr_model,
                                caller_number=call.caller or None, source_ip=admitted.source_ip,
                                pinned_versions=admitted.pinned, need_dialogue=admitted.need_dialogue,
                                settings=routing.failover,
                                on_failover=lambda event: self._on_failover(cid, event))
        info = CallInfo(caller=call.caller, called=call.called, flow=admitted.flow, region=selection.region,
                        dialplan_digest=getattr(admitted.dialplan, "digest", ""), sip_call=call,
                        regional_speech=speech)
        control = SipCallControl(call, self)
        session = CallSession(cid, dialogue, speech, control, self.reactor, prompts=self.prompts,
                              metrics=self.metrics, settings=settings, on_ended=self._session_ended,
                              webhooks=lambda request: call_webhook(self.reactor, request, tls=self.config.http),
                              recordings_dir=self.config.recordings_dir,
                              model=self._model_for(selection), info=info,
                              model_stream=self._model_stream_for(selection))
        self.sessions[cid] = session
        self.journals.call_answered(session, {"caller": info.caller, "called": info.called, "flow": info.flow,
                                              "region": info.region, "dialplan": info.dialplan_digest[:12],
                                              "worker": self.worker_id})
        self.metrics.active_calls.inc()
        self.metrics.calls.labels("answered").inc()
        started = {"done": False}

        def media_active() -> None:
            session.codec = call.codec
            if not started["done"]:
                started["done"] = True
                log.info("call {call_id} media active ({codec})", call_id=cid, codec=call.codec)
                self.journals.state(cid, "media_active", codec=call.codec)
                session.start(narrowband=call.codec.upper() in ("PCMU", "PCMA"))

        call.callbacks.on_media_active = media_active
        call.callbacks.on_dtmf = session.on_dtmf
        call.callbacks.on_hold = session.on_hold
        call.callbacks.on_transfer_status = session.on_transfer_status

        def disconnected(code: int, reason: str) -> None:
            self.journals.state(cid, "disconnected", code=code, reason=reason)
            session.close(f"disconnected {code} {reason}".strip())
            leg = control.leg
            if leg is not None and not leg.disconnected:
                leg.hangup(why="transfer: the caller's leg ended")

        call.callbacks.on_disconnected = disconnected
        call.attach_media(session.media, session.playout)
        call.region = selection.region
        log.info("call {call_id} from {caller} to {called}: answering with flow {flow}, region {region} ({why})",
                 call_id=cid, caller=call.caller, called=call.called, flow=admitted.flow, region=selection.region,
                 why=selection.reason)
        answer_call(self.reactor, call, self.config.sip.answer, (("X-OpenClaw-Region", selection.region),),
                    on_failed=lambda: self._answer_failed(call, session))

    @staticmethod
    def _answer_failed(call: Any, session: CallSession) -> None:
        # pjsua could not answer (e.g. no media transport): refuse the call so that it ends, and
        # with it the session, now -- not when the caller gives up.
        call.hangup(500, "Server Internal Error", why="answer_failed: pjsua could not answer")
        if not call.disconnected:
            session.close("answer failed")

    def _on_agent_hangup(self, what: str, why: str) -> None:
        """Count every hangup the agent makes by who decided it (the log line is the SIP stack's)."""
        if "server stopping" in why:
            reason = "shutdown"
        else:
            reason = why.split(":", 1)[0].strip()
        self.metrics.agent_hangups.labels(reason if reason in AGENT_HANGUP_REASONS else "other").inc()

    def _session_ended(self, session: CallSession) -> None:
        # Exactly once per session, and only for the session the Call-ID maps to.
        if self.sessions.get(session.call_id) is not session:
            return
        del self.sessions[session.call_id]
        self._admitted.pop(session.call_id, None)
        self.metrics.active_calls.dec()
        duration = self.reactor.seconds() - session.started_at
        self.metrics.call_duration.observe(duration)
        try:
            record = self._call_record(session, duration)
        except Exception as e:  # a record is never lost: write what is known
            log.failure("call {call_id} record incomplete", call_id=session.call_id)
            record = {"call_id": session.call_id, "end_reason": session.end_reason or "unknown",
                      "duration_s": round(duration, 3), "record_error": repr(e)[:200]}
        if self.worker_id is not None:
            record["worker"] = self.worker_id
        self._write_record(record)
        self.journals.call_recorded(session.call_id)
        if self.draining or self.ending_calls:
            self.reactor.callLater(0, self._check_idle)

    def _call_record(self, session: CallSession, duration: float) -> dict[str, Any]:
        info = session.info
        speech = info.regional_speech
        if speech is not None:
            speech.close()
        record = session.record()
        if speech is not None:
            record.update(speech.record())
        record.update({
            "caller": info.caller, "called": info.called, "flow": info.flow, "codec": session.codec,
            "dialplan": info.dialplan_digest[:12],
            "duration_s": round(duration, 3), "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "media_deadline_misses": session.media.deadline_misses,
            "playout_underruns": session.playout.underruns,
        })
        call = info.sip_call
        if call is not None:
            record["rtp"] = call.rtp_stats()
            if call.hangup_reason:
                record["agent_hangup"] = call.hangup_reason
            record["sip"] = {"transport": call.transport, "srtp": call.srtp}
        self.metrics.playout_underruns.inc(session.playout.underruns)
        return record

    def _write_record(self, record: dict[str, Any]) -> None:
        line = json.dumps(redact_value(record), sort_keys=True)
        log.info("call {call_id} record {record}", call_id=record["call_id"], record=line)
        if self.config.call_records:
            append_record(line, record["call_id"], self.config.call_records, self.worker_id)

    def _on_failover(self, call_id: str, event: Any) -> None:
        log.warn("call {call_id} speech failover: {event}", call_id=call_id, event=event)

    def _model_stream_for(self, selection: Selection) -> Any:
        """``(action, on_sentence) -> Deferred[ModelReply]``: the region's dialogue model, streamed."""
        url = selection.dialogue_endpoint
        if not url:
            return None
        return lambda action, on_sentence: stream_reply(self.reactor, url, self.config.dialogue, action,
                                                        on_sentence=on_sentence, tls=self.config.http)

    def _model_for(self, selection: Selection) -> Any:
        """``action -> Deferred[str]``: the whole reply (for model steps whose reply is not spoken)."""
        stream = self._model_stream_for(selection)
        if stream is None:
            return None
        return lambda action: stream(action, lambda sentence: None).addCallback(lambda reply: reply.text)

    def _on_registration(self, code: int, reason: str, expiration: int) -> None:
        self.metrics.registration_status.set(code)
        up = 200 <= code < 300 and expiration > 0
        self.metrics.registration_up.set(1 if up else 0)
        log.info("registration: {code} {reason} (expires in {exp} s)", code=code, reason=reason, exp=expiration)


def prepare_intent_matchers(dialplan: Dialplan) -> int:
    """Load the sentence encoder and build every ask's intent matcher now (off the reactor), so
    no call pays for them in the middle of a turn; returns how many asks were prepared."""
    semantic.preload()
    asks = [step for flow in dialplan.flows.values() for step in flow.steps if isinstance(step, AskStep)]
    for ask in asks:
        if ask.intents:
            _matcher(ask)
    return len(asks)


def stop_reactor(reactor: Any) -> None:
    """Stop the reactor unless it is already stopping (a second signal must not raise)."""
    from twisted.internet.error import ReactorNotRunning

    try:
        reactor.stop()
    except ReactorNotRunning:
        pass


def install_signal_handlers(reactor: Any, server: AgentServer) -> None:
    """SIGTERM/SIGINT: goodbye on every call, BYE, exit (again: hang up at once).

    SIGUSR1: drain -- new calls and keepalive OPTIONS get 503, calls in progress
    finish, then the process exits (``serve --workers N`` drains workers this way).
    SIGHUP: reload the dialplans.
    """
    def stop_now() -> None:
        stop_reactor(reactor)

    def shutdown_in_reactor(name: str) -> None:
        if server.ending_calls or not server.sessions:
            log.info("signal {sig}: shutting down", sig=name)
            stop_now()
            return
        log.info("signal {sig}: ending {n} call(s) with a goodbye, then shutting down", sig=name,
                 n=len(server.sessions))
        server.on_idle = stop_now
        server.end_calls_politely()

    def shutdown(signum: int, _frame: Any) -> None:
        reactor.callFromThread(shutdown_in_reactor, signal.Signals(signum).name)

    def drain_in_reactor() -> None:
        if server.on_idle is None:
            server.on_idle = stop_now
        server.drain(server.drain_timeout_s)

    def drain(_signum: int, _frame: Any) -> None:
        log.info("SIGUSR1: draining")
        reactor.callFromThread(drain_in_reactor)

    def reload(_signum: int, _frame: Any) -> None:
        log.info("SIGHUP: reloading dialplans")
        reactor.callFromThread(server.reload_dialplans)

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGHUP, reload)
    signal.signal(signal.SIGUSR1, drain)

"""Mid-call speech failover: keep a call's recognition and synthesis going when its region fails.

:class:`RegionalSpeech` is the speech of one call, bound to the region chosen for it
(:class:`agent.regions.selector.Selection`). It offers the same two methods as
:class:`agent.speech.client.SpeechClient` that a session uses (``open_recognition``,
``synthesize_stream``), so :class:`agent.call.session.CallSession` takes it unchanged.

Recognition (:class:`FailoverRecognitionStream`)
    Caller audio is pushed to the region's stream and kept in a :class:`ReplayBuffer`
    from the end of the last final result on. When the stream fails (a retryable
    ``SpeechError``), ends unexpectedly, or *stalls*, the call moves to
    :meth:`RegionSelector.next_best` and the buffer is replayed into a new stream there,
    before any newer audio: no caller speech is lost, and since the buffer starts after
    the last word of the last delivered final, no word is recognised twice.

    Telling a stall from silence (:class:`StallDetector`): a recogniser answers speech
    with interim results (Riva every few frames; the embedded server whenever the
    hypothesis changes), and silence with nothing. So a stall is suspected (:class:`StallDetector`) when the caller has been
    *speaking* (voiced audio, by :class:`media.voicing.VoicingMeter`) for ``stall_timeout_ms``
    with no result at all; when an utterance is under way and no result came for
    ``stall_timeout_ms``; or when that utterance got no final ``stop_history`` +
    ``stall_timeout_ms`` after the caller's last voiced audio (all plus the RTT). The
    suspicion is confirmed when the region's probes have gone unanswered for longer
    than a probe interval plus the RTT plus 100 ms (the path is dead, not just the
    recogniser quiet); unconfirmed, the first and last rules still move the call after
    ``hard_stall_timeout_ms`` (a hung recogniser behind a healthy network). A region
    the prober ejects or that reports NOT_SERVING moves idle streams too.

    Positions: finals carry word end times and ``audio_processed`` (Riva's fields;
    requested with ``enable_word_time_offsets``); the buffer keeps audio from
    ``last word end + final_margin_ms`` on, and at least from ``audio_processed -
    stop_history + 50 ms`` (past the last voiced audio the server heard), never past
    ``audio_processed``. That point lies inside the silence that ended the utterance,
    so a replay neither repeats the last word nor misses the next utterance's first one.

Synthesis (:class:`FailoverSynthesisStream`)
    On an error or a stall (no audio ``tts_first_audio_timeout_ms`` after the request,
    or ``stall_timeout_ms`` after the last chunk, while not done) the same text is
    requested in the next region and the bytes already delivered are skipped: the
    caller hears a pause of about detection time + the new region's first-audio
    latency, then the prompt continues where it stopped (identical audio when the new
    region runs the same voice and model version; otherwise the cut may fall a little
    inside a word).

Threads: ``push_audio`` may be called from any thread and never waits for the network.
Recognition callbacks run on the reactor thread; synthesis ``on_audio``/``on_done`` on a
speech worker thread (as :class:`agent.speech.client.SynthesisStream`), ``on_error`` on the
reactor thread. Everything else (selection, failover, load accounting) runs on the
reactor thread.

The sans-I/O parts (settings, events, :class:`ReplayBuffer`, :class:`StallDetector`) are in
:mod:`agent.speech.failover_core`, the streams in :mod:`agent.speech.failover_streams`.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from twisted.logger import Logger

from agent.regions.selector import EndpointState, NoRegion, RegionSelector, Selection, call_versions
from agent.speech.api import SpeechEndpointClient
from agent.speech.client import RecognitionOptions, SpeechClient, SpeechError

# Re-exported: the failover's parts are imported from here.
from agent.speech.failover_core import (  # noqa: F401
    BYTES_PER_SAMPLE,
    FailoverEvent,
    FailoverSettings,
    ReplayBuffer,
    StallDetector,
)
from agent.speech.failover_streams import (  # noqa: F401
    REPLAY_PIECE_S,
    FailoverRecognitionStream,
    FailoverSynthesisStream,
)
from media.voicing import VoicingMeter  # noqa: F401

log = Logger(namespace="openclaw.regions")


class RefusedSynthesis:
    """A synthesis that could not start (no region serves the call's versions): its error
    reaches ``on_error`` on the reactor thread, as a failed stream's would."""

    def __init__(self, reactor: Any, error: Exception, on_error: Callable[[Exception], None]) -> None:
        self.error = error
        self._call = reactor.callLater(0, on_error, error)

    def cancel(self) -> None:
        if self._call.active():
            self._call.cancel()

    def wait_done(self, timeout_s: float) -> bool:
        return True


class SpeechClientPool:
    """One client per speech endpoint address, created on first use; shared by all calls."""

    def __init__(self, factory: Callable[[str], SpeechEndpointClient] = SpeechClient) -> None:
        self._factory = factory
        self._clients: dict[str, SpeechEndpointClient] = {}
        self._lock = threading.Lock()

    def get(self, address: str) -> SpeechEndpointClient:
        with self._lock:
            client = self._clients.get(address)
            if client is None:
                client = self._factory(address)
                self._clients[address] = client
            return client

    def close(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.close()


class RegionalSpeech:
    """Speech of one call, kept in its region and moved only when that region fails.

    Implements the ``Speech`` protocol of :mod:`agent.call.session`. Create it on the reactor
    thread with the call's :class:`Selection`; every stream it opens takes one slot of
    its region's capacity (:meth:`RegionSelector.acquire`) until it ends.
    """

    def __init__(
        self,
        reactor: Any,
        selector: RegionSelector,
        clients: SpeechClientPool,
        selection: Selection,
        *,
        call_id: str = "",
        caller_number: str | None = None,
        source_ip: str | None = None,
        pinned_versions: Iterable[str] = (),
        need_dialogue: bool = False,
        settings: FailoverSettings | None = None,
        on_failover: Callable[[FailoverEvent], None] | None = None,
        language_code: str | None = None,
        asr_model: str = "",
    ) -> None:
        """*language_code* (the flow's language) goes with every recognition and synthesis
        request of the call, *asr_model* (a Riva model name) with every recognition."""
        self.reactor = reactor
        self.language_code = language_code
        self.asr_model = asr_model
        self.selector = selector
        self.clients = clients
        self.settings = settings or FailoverSettings()
        self.call_id = call_id
        self._caller_number = caller_number
        self._source_ip = source_ip
        self._pinned = frozenset(pinned_versions)
        #: the versions the call keeps for its lifetime (pinned or not): every region it uses serves them
        self.versions = call_versions(selection.versions, self._pinned)
        self._need_dialogue = need_dialogue
        self._on_failover = on_failover
        self._selection = selection
        self._failed: set[str] = set()
        self._streams: set[FailoverRecognitionStream | FailoverSynthesisStream] = set()
        self.regions: list[str] = [selection.region]
        self.failovers: list[FailoverEvent] = []

    @property
    def selection(self) -> Selection:
        return self._selection

    @property
    def region(self) -> str:
        return self._selection.region

    def record(self) -> dict[str, Any]:
        """For the call record: where the call started, went, and why it moved."""
        return {
            "region": self.regions[0],
            "regions": list(self.regions),
            "failovers": [
                {"kind": e.kind, "from": e.from_region, "to": e.to_region, "reason": e.reason} for e in self.failovers
            ],
        }

    # -- Speech protocol ------------------------------------------------------------------
    def open_recognition(
        self,
        options: RecognitionOptions,
        *,
        on_interim: Callable[[str], None],
        on_final: Callable[[str, float], None],
        on_error: Callable[[Exception], None],
        on_alternatives: Callable[[tuple[str, ...]], None] | None = None,
    ) -> FailoverRecognitionStream:
        self._ensure_usable()
        if self.language_code and not options.language_code:
            options = replace(options, language_code=self.language_code)
        if self.asr_model and not options.model:
            options = replace(options, model=self.asr_model)
        if self.call_id and not options.call_id:
            options = replace(options, call_id=self.call_id)
        stream = FailoverRecognitionStream(self, options, on_interim=on_interim, on_final=on_final, on_error=on_error,
                                           on_alternatives=on_alternatives)
        self._streams.add(stream)
        return stream

    def synthesize_stream(
        self,
        text: str,
        *,
        sample_rate_hz: int,
        on_audio: Callable[[bytes], None],
        on_done: Callable[[], None],
        on_error: Callable[[Exception], None],
        voice: str | None = None,
    ) -> FailoverSynthesisStream | RefusedSynthesis:
        try:
            self._ensure_usable()
        except SpeechError as err:
            return RefusedSynthesis(self.reactor, err, on_error)
        stream = FailoverSynthesisStream(
            self, text, sample_rate_hz=sample_rate_hz, voice=voice, on_audio=on_audio, on_done=on_done, on_error=on_error
        )
        self._streams.add(stream)
        return stream

    def close(self) -> None:
        """Close every stream of the call (reactor thread)."""
        for stream in list(self._streams):
            if isinstance(stream, FailoverRecognitionStream):
                stream.close()
            else:
                stream.cancel()

    # -- for the streams (reactor thread) -------------------------------------------------
    def _forget(self, stream: FailoverRecognitionStream | FailoverSynthesisStream) -> None:
        self._streams.discard(stream)

    def _move(self, from_region: str, kind: str, reason: str) -> Selection | NoRegion:
        """A stream in ``from_region`` failed: the call's region after the move."""
        if (from_region != self._selection.region and self._selection.region not in self._failed
                and self._serves_call(self._selection.region)):
            return self._selection  # another stream of the call already moved it
        self._failed.add(from_region)
        now = self.reactor.seconds()
        nxt = self.selector.next_best(
            self._failed,
            self._caller_number,
            self._source_ip,
            self.versions,
            now=now,
            need_dialogue=self._need_dialogue,
        )
        to_region = nxt.region if isinstance(nxt, Selection) else None
        self.selector.record_failover(from_region, to_region)
        event = FailoverEvent(self.call_id, kind, from_region, to_region, reason, now)
        self.failovers.append(event)
        if isinstance(nxt, Selection):
            self._selection = nxt
            self.regions.append(nxt.region)
            log.warn(
                "call {call_id} {kind} moved from region {src} to {dst}: {reason}",
                call_id=self.call_id, kind=kind, src=from_region, dst=nxt.region, reason=reason,
            )
        else:
            self._failed.clear()  # a region may come back: a later stream re-selects (_ensure_usable)
            log.error(
                "call {call_id} {kind} failed in region {src} ({reason}) and no region is left: {detail}",
                call_id=self.call_id, kind=kind, src=from_region, reason=reason, detail=nxt.detail,
            )
        if self._on_failover is not None:
            try:
                self._on_failover(event)
            except Exception:
                log.failure("on_failover raised")
        return nxt

    def _has_alternative(self, from_region: str) -> bool:
        """Could the call move anywhere else right now?"""
        nxt = self.selector.next_best(
            self._failed | {from_region}, self._caller_number, self._source_ip, self.versions,
            now=self.reactor.seconds(), need_dialogue=self._need_dialogue,
        )
        return isinstance(nxt, Selection)

    def _stream_rtt_s(self, address: str) -> float:
        try:
            return self.selector.health(address).rtt_s or 0.0
        except KeyError:
            return 0.0

    def _serves_call(self, region: str) -> bool:
        try:
            return self.versions <= self.selector.versions(region)
        except KeyError:  # the region left the config
            return False

    def _ensure_usable(self) -> None:
        """Before a new stream: if the call's region cannot serve now (e.g. every region
        failed earlier and one came back) or no longer serves the call's versions (a rollout
        switched it), move the call to the best usable one with them. Raises a retryable
        :class:`SpeechError` when the call's region has changed version and no region has
        the call's versions: the call never changes version mid-call."""
        now = self.reactor.seconds()
        current = self._selection
        usable = all(
            self.selector.endpoint_state(a, now).usable for a in (current.asr_endpoint, current.tts_endpoint)
        )
        same_version = self._serves_call(current.region)
        if usable and same_version:
            return
        nxt = self.selector.next_best(
            {current.region}, self._caller_number, self._source_ip, self.versions,
            now=now, need_dialogue=self._need_dialogue,
        )
        if isinstance(nxt, NoRegion) and not same_version:
            log.warn("call {call_id}: region {region} no longer serves the call's versions {versions} and no "
                     "region does: {detail}", call_id=self.call_id, region=current.region,
                     versions=",".join(sorted(self.versions)), detail=nxt.detail)
            raise SpeechError(f"no region serves this call's model versions {sorted(self.versions)}: {nxt.detail}",
                              retryable=True, code="UNAVAILABLE")
        if isinstance(nxt, Selection):
            self._failed.discard(nxt.region)
            self.selector.record_failover(current.region, nxt.region)
            why = "region unusable at stream open" if same_version else "region changed model version"
            event = FailoverEvent(self.call_id, "call", current.region, nxt.region, why, now)
            self.failovers.append(event)
            self._selection = nxt
            self.regions.append(nxt.region)
            log.warn("call {call_id} moved from region {src} to {dst} before opening a stream",
                     call_id=self.call_id, src=current.region, dst=nxt.region)
            if self._on_failover is not None:
                self._on_failover(event)

    def _path_dead(self, address: str, now: float) -> bool:
        """The region's probes of ``address`` have gone unanswered beyond interval + RTT."""
        try:
            h = self.selector.health(address)
        except KeyError:
            return True
        if h.last_ok_at is None:
            return True
        allowance = self.settings.probe_interval_ms / 1000.0 + (h.rtt_s or 0.0) + 0.1
        return now - h.last_ok_at > allowance

    def _region_down(self, address: str, now: float) -> bool:
        return self.selector.endpoint_state(address, now) in (EndpointState.EJECTED, EndpointState.NOT_SERVING)

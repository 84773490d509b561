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
    hypothesis changes, measured at most ~250 ms apart in speech), and silence with
    nothing. So a stall is suspected (:class:`StallDetector`) when the caller has been
    *speaking* (voiced audio, by an adaptive-floor energy meter) for ``stall_timeout_ms``
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
"""
from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import riva.client
from riva.client.proto import riva_asr_pb2
from twisted.logger import Logger

from media import convert as audio_util
from agent.regions.selector import EndpointState, NoRegion, RegionSelector, Selection
from agent.speech.api import SpeechEndpointClient
from agent.speech.client import RecognitionOptions, RecognitionStream, SpeechClient, SpeechError

log = Logger(namespace="openclaw.regions")

BYTES_PER_SAMPLE = 2
#: replayed audio goes to the new stream in pieces of this many seconds
REPLAY_PIECE_S = 0.5


# --------------------------------------------------------------------------------------
# settings and events
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailoverSettings:
    #: voiced audio with no result for this long = stall suspected (also the synthesis gap)
    stall_timeout_ms: int = 400
    #: a suspected stall moves the call after this long even while probes still succeed
    hard_stall_timeout_ms: int = 1500
    #: a synthesis request with no audio for this long is stalled
    tts_first_audio_timeout_ms: int = 800
    #: the server's default trailing silence, when the session does not set stop_history_ms
    default_stop_history_ms: int = 800
    #: buffer kept from this long after the last word of a final (inside the ending silence)
    final_margin_ms: int = 150
    #: caller audio kept for replay at most (the recogniser cuts utterances at 30 s)
    max_buffer_ms: int = 35_000
    #: unvoiced audio kept before the first voiced audio in a replay
    preroll_ms: int = 400
    #: the prober's interval (confirmation: the region's probes unanswered for interval + RTT + 100 ms)
    probe_interval_ms: int = 250
    #: how often streams check for stalls
    check_interval_ms: int = 25
    #: moves per stream before its error reaches the session
    max_failovers: int = 3


@dataclass(frozen=True)
class FailoverEvent:
    """One move of one stream of a call (``to_region`` None: no region was left)."""

    call_id: str
    kind: str  # "asr" or "tts"
    from_region: str
    to_region: str | None
    reason: str
    at: float


# --------------------------------------------------------------------------------------
# sans-I/O parts
# --------------------------------------------------------------------------------------


class VoicingMeter:
    """Voiced or not, per chunk: above -55 dBFS and 6 dB over an adaptive noise floor.

    Deliberately more permissive than the recogniser's own voice detection: it decides
    which audio may be skipped in a replay and when results are due."""

    def __init__(self, min_level_dbfs: float = -55.0, over_floor_db: float = 6.0) -> None:
        self._min = min_level_dbfs
        self._over = over_floor_db
        self._floor = -70.0

    def voiced(self, pcm: bytes, sample_rate_hz: int, level_dbfs: float | None = None) -> bool:
        """Classify *pcm*; *level_dbfs*, when the caller measured it already, saves measuring again."""
        level = audio_util.rms_dbfs(pcm) if level_dbfs is None else level_dbfs
        if math.isinf(level):
            return False
        is_voiced = level >= self._min and level >= self._floor + self._over
        ms = len(pcm) / BYTES_PER_SAMPLE * 1000.0 / sample_rate_hz
        rate = 0.2 if level < self._floor else (0.0025 if is_voiced else 0.01)
        self._floor += (level - self._floor) * min(1.0, rate * ms / 10.0)
        return is_voiced


class ReplayBuffer:
    """Caller audio since the last final, addressed by global byte offsets.

    Offsets count every byte the caller pushed. Leading unvoiced audio beyond
    ``preroll_bytes`` before the first voiced chunk is dropped as it ages (silence need
    not be replayed); past ``max_bytes`` the oldest audio goes and, if it was voiced,
    is counted in :attr:`lost_voiced_bytes`.
    """

    def __init__(self, *, max_bytes: int, preroll_bytes: int) -> None:
        self._chunks: deque[tuple[int, bytes, bool]] = deque()
        self._max = max_bytes
        self._preroll = preroll_bytes
        self.end = 0
        self._size = 0
        self._voiced_bytes = 0
        self.lost_voiced_bytes = 0
        self.lost_voiced_chunks = 0

    @property
    def start(self) -> int:
        return self._chunks[0][0] if self._chunks else self.end

    @property
    def size(self) -> int:
        return self._size

    def append(self, pcm: bytes, voiced: bool) -> None:
        self._chunks.append((self.end, pcm, voiced))
        self.end += len(pcm)
        self._size += len(pcm)
        if voiced:
            self._voiced_bytes += len(pcm)
        self._trim()

    def discard_before(self, offset: int) -> None:
        """Forget audio before ``offset`` (a chunk straddling it is cut)."""
        offset -= offset % BYTES_PER_SAMPLE
        while self._chunks and self._chunks[0][0] < offset:
            start, pcm, voiced = self._chunks.popleft()
            self._size -= len(pcm)
            if voiced:
                self._voiced_bytes -= len(pcm)
            if start + len(pcm) > offset:
                rest = pcm[offset - start :]
                self._chunks.appendleft((offset, rest, voiced))
                self._size += len(rest)
                if voiced:
                    self._voiced_bytes += len(rest)
                break
        self._trim()

    def _pop_head(self) -> None:
        _, pcm, voiced = self._chunks.popleft()
        self._size -= len(pcm)
        if voiced:
            self._voiced_bytes -= len(pcm)

    def _trim(self) -> None:
        while self._size > self._max and self._chunks:
            _, pcm, voiced = self._chunks[0]
            if voiced:
                self.lost_voiced_bytes += len(pcm)
                self.lost_voiced_chunks += 1
            self._pop_head()
        # leading silence beyond the preroll: not needed for a replay
        while len(self._chunks) > 1:
            start, pcm, voiced = self._chunks[0]
            if voiced:
                break
            first_voiced = next((s for s, _, v in self._chunks if v), None) if self._voiced_bytes else None
            horizon = first_voiced if first_voiced is not None else self.end
            if horizon - (start + len(pcm)) < self._preroll:
                break
            self._pop_head()

    def has_voiced(self) -> bool:
        return self._voiced_bytes > 0

    def replay(self) -> tuple[int, bytes]:
        """``(offset of the first byte, audio)`` to feed a new stream."""
        return self.start, b"".join(pcm for _, pcm, _ in self._chunks)


class StallDetector:
    """Decides from result timing whether a recognition stream has stalled (times in s)."""

    def __init__(self, *, stall_timeout_s: float, stop_history_s: float) -> None:
        self.stall_timeout_s = stall_timeout_s
        self.stop_history_s = stop_history_s
        self._first_unanswered_voiced: float | None = None
        self._last_voiced: float | None = None
        self._last_response: float | None = None
        self._in_utterance = False

    def reset(self, now: float, awaiting: bool) -> None:
        """A new stream opened at ``now``; ``awaiting``: it was fed voiced audio (a replay)."""
        self._first_unanswered_voiced = now if awaiting else None
        self._last_voiced = now if awaiting else None
        self._last_response = now
        self._in_utterance = False

    def on_audio(self, now: float, voiced: bool) -> None:
        if voiced:
            # Unanswered voice counts only while it goes on: a noise burst, then seconds of
            # quiet, then new speech is not "speaking for seconds without a result".
            gap = self.stall_timeout_s
            if (self._first_unanswered_voiced is None
                    or (self._last_voiced is not None and now - self._last_voiced > gap)):
                self._first_unanswered_voiced = now
            self._last_voiced = now

    def on_response(self, now: float, final: bool) -> None:
        self._last_response = now
        self._first_unanswered_voiced = None
        self._in_utterance = not final

    def check(self, now: float, rtt_s: float = 0.0) -> tuple[str, float, bool] | None:
        """``(reason, since, hard)`` when a result is overdue, else None.

        ``hard``: the suspicion may move the stream on its own after a hard timeout from
        ``since``; otherwise only when the region's probes confirm the path is dead."""
        deadline_s = self.stall_timeout_s + rtt_s
        f = self._first_unanswered_voiced
        if f is not None and self._last_voiced is not None:
            if self._last_voiced - f >= self.stall_timeout_s and now - f >= deadline_s:
                return "no_result_while_speaking", f, True
        if self._in_utterance:
            since = max(self._last_voiced or 0.0, self._last_response or 0.0)
            if now - since >= self.stop_history_s + deadline_s:
                return "no_final", since, True
            # An utterance is under way, so results (interims, then a final) are due; a
            # pause in speech or its end does not change that. Only with a dead path.
            last = self._last_response or 0.0
            if now - last >= deadline_s:
                return "no_result_in_utterance", last, False
        return None


# --------------------------------------------------------------------------------------
# speech client with final positions
# --------------------------------------------------------------------------------------


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


def _close_in_background(stream: Any) -> None:
    """Close a stream off the reactor thread (closing joins its worker)."""
    closer = getattr(stream, "close", None) or getattr(stream, "cancel")
    threading.Thread(target=closer, name="speech-failover-close", daemon=True).start()


# --------------------------------------------------------------------------------------
# the call's speech
# --------------------------------------------------------------------------------------


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
    ) -> None:
        self.reactor = reactor
        self.selector = selector
        self.clients = clients
        self.settings = settings or FailoverSettings()
        self.call_id = call_id
        self._caller_number = caller_number
        self._source_ip = source_ip
        self._pinned = frozenset(pinned_versions)
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
    ) -> FailoverRecognitionStream:
        self._ensure_usable()
        stream = FailoverRecognitionStream(self, options, on_interim=on_interim, on_final=on_final, on_error=on_error)
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
    ) -> FailoverSynthesisStream:
        self._ensure_usable()
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
        if from_region != self._selection.region and self._selection.region not in self._failed:
            return self._selection  # another stream of the call already moved it
        self._failed.add(from_region)
        now = self.reactor.seconds()
        nxt = self.selector.next_best(
            self._failed,
            self._caller_number,
            self._source_ip,
            self._pinned,
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
            self._failed | {from_region}, self._caller_number, self._source_ip, self._pinned,
            now=self.reactor.seconds(), need_dialogue=self._need_dialogue,
        )
        return isinstance(nxt, Selection)

    def _stream_rtt_s(self, address: str) -> float:
        try:
            return self.selector.health(address).rtt_s or 0.0
        except KeyError:
            return 0.0

    def _ensure_usable(self) -> None:
        """Before a new stream: if the call's region cannot serve now (e.g. every region
        failed earlier and one came back), move the call to the best usable one."""
        now = self.reactor.seconds()
        current = self._selection
        usable = all(
            self.selector.endpoint_state(a, now).usable for a in (current.asr_endpoint, current.tts_endpoint)
        )
        if usable:
            return
        nxt = self.selector.next_best(
            {current.region}, self._caller_number, self._source_ip, self._pinned,
            now=now, need_dialogue=self._need_dialogue,
        )
        if isinstance(nxt, Selection):
            self._failed.discard(nxt.region)
            self.selector.record_failover(current.region, nxt.region)
            event = FailoverEvent(self.call_id, "call", current.region, nxt.region, "region unusable at stream open", now)
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


class _Ticker:
    """Calls ``fn`` every ``interval_s`` on the reactor until stopped."""

    def __init__(self, reactor: Any, interval_s: float, fn: Callable[[], None]) -> None:
        self._reactor = reactor
        self._interval = interval_s
        self._fn = fn
        self._call: Any = None
        self._stopped = False
        self._call = reactor.callLater(interval_s, self._run)

    def _run(self) -> None:
        self._call = None
        if self._stopped:
            return
        try:
            self._fn()
        finally:
            if not self._stopped:
                self._call = self._reactor.callLater(self._interval, self._run)

    def stop(self) -> None:
        self._stopped = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


class FailoverRecognitionStream:
    """A recognition stream that survives its region: same API as :class:`RecognitionStream`."""

    def __init__(
        self,
        owner: RegionalSpeech,
        options: RecognitionOptions,
        *,
        on_interim: Callable[[str], None],
        on_final: Callable[[str, float], None],
        on_error: Callable[[Exception], None],
    ) -> None:
        self._owner = owner
        self._reactor = owner.reactor
        s = owner.settings
        self._settings = s
        self._options = options
        self._rate = options.sample_rate_hz
        self._bytes_per_s = self._rate * BYTES_PER_SAMPLE
        self._on_interim = on_interim
        self._on_final = on_final
        self._on_error = on_error
        self._lock = threading.Lock()
        self._meter = VoicingMeter()
        self._buffer = ReplayBuffer(
            max_bytes=self._bytes_per_s * s.max_buffer_ms // 1000,
            preroll_bytes=self._bytes_per_s * s.preroll_ms // 1000 // BYTES_PER_SAMPLE * BYTES_PER_SAMPLE,
        )
        stop_ms = options.stop_history_ms
        stop_s = (stop_ms if stop_ms is not None else s.default_stop_history_ms) / 1000.0
        self._stop_history_s = stop_s
        self._detector = StallDetector(stall_timeout_s=s.stall_timeout_ms / 1000.0, stop_history_s=stop_s)
        self._gen = 0
        self._inner: Any = None
        self._origin = 0  # global offset of the inner stream's first byte
        self._errored: set[int] = set()
        self._marks: dict[int, tuple[float | None, float]] = {}
        self._closed = False
        self._input_ended = False
        self._done = threading.Event()
        self._region = ""
        self._endpoint = ""
        self._holds_slot = False
        self.failover_count = 0
        #: failover events of this stream, with detection delay (s) from the suspected start
        self.detections: list[tuple[FailoverEvent, float]] = []
        self._ticker: _Ticker | None = None
        with self._lock:
            self._open(owner.selection, replay=False)
        self._ticker = _Ticker(self._reactor, s.check_interval_ms / 1000.0, self._tick)

    # -- the RecognitionStream API --------------------------------------------------------
    def push_audio(self, pcm16: bytes, level_dbfs: float | None = None) -> None:
        """Queue audio (any thread); kept for replay until a final covers it.

        *level_dbfs* is the chunk's level when the caller has measured it (the call's
        media pipeline has, for its VAD), so the per-frame path measures it once."""
        if not pcm16:
            return
        with self._lock:
            if self._closed or self._input_ended:
                return
            voiced = self._meter.voiced(pcm16, self._rate, level_dbfs)
            self._buffer.append(pcm16, voiced)
            self._detector.on_audio(self._reactor.seconds(), voiced)
            if self._inner is not None:
                self._inner.push_audio(pcm16)

    def end_input(self) -> None:
        with self._lock:
            self._input_ended = True
            if self._inner is not None:
                self._inner.end_input()

    def close(self) -> None:
        """Close the region stream; no callback runs after this returns (reactor thread)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            inner, self._inner = self._inner, None
        if self._ticker is not None:
            self._ticker.stop()
        if inner is not None:
            inner.close()
        self._release()
        self._owner._forget(self)
        self._done.set()

    def wait_done(self, timeout_s: float) -> bool:
        """Wait until the recognition has ended (input ended and the region's stream
        finished, a final error, or close); True if it has."""
        return self._done.wait(timeout_s)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def dropped_chunks(self) -> int:
        """Caller audio chunks lost: voiced audio pushed out of the replay buffer."""
        return self._buffer.lost_voiced_chunks

    @property
    def region(self) -> str:
        return self._region

    # -- inner stream ---------------------------------------------------------------------
    def _open(self, selection: Selection, replay: bool) -> None:
        """Open a stream in ``selection``'s region and feed it the buffer (lock held)."""
        self._gen += 1
        g = self._gen
        client = self._owner.clients.get(selection.asr_endpoint)
        self._region = selection.region
        self._endpoint = selection.asr_endpoint
        self._inner = client.open_recognition(
            self._options,
            on_interim=lambda text: self._reactor.callFromThread(self._inner_interim, g, text),
            on_final=lambda text, conf: self._reactor.callFromThread(self._inner_final, g, text, conf),
            on_error=lambda err: self._inner_failed(g, err),
            on_final_marks=lambda end_s, processed_s: self._marks.__setitem__(g, (end_s, processed_s)),
        )
        self._acquire()
        now = self._reactor.seconds()
        if replay:
            origin, audio = self._buffer.replay()
            self._origin = origin
            piece = max(BYTES_PER_SAMPLE, int(self._bytes_per_s * REPLAY_PIECE_S) // BYTES_PER_SAMPLE * BYTES_PER_SAMPLE)
            for i in range(0, len(audio), piece):
                self._inner.push_audio(audio[i : i + piece])
            self._detector.reset(now, awaiting=self._buffer.has_voiced())
        else:
            self._origin = self._buffer.end
            self._detector.reset(now, awaiting=False)
        if self._input_ended:
            self._inner.end_input()

    def _inner_failed(self, g: int, err: Exception) -> None:
        with self._lock:
            self._errored.add(g)
        self._reactor.callFromThread(self._inner_error, g, err)

    def _inner_interim(self, g: int, text: str) -> None:
        if self._closed or g != self._gen:
            return
        with self._lock:
            self._detector.on_response(self._reactor.seconds(), final=False)
        self._on_interim(text)

    def _inner_final(self, g: int, text: str, confidence: float) -> None:
        if self._closed or g != self._gen:
            return
        marks = self._marks.pop(g, None)
        with self._lock:
            if marks is not None:
                end_s, processed_s = marks
                # The utterance ended stop_history of silence before the final's position,
                # so audio from (position - stop_history + 50 ms) on holds no word of it.
                tail_floor_s = processed_s - self._stop_history_s + 0.05
                end_based_s = end_s + self._settings.final_margin_ms / 1000.0 if end_s is not None else processed_s - 0.1
                cut_s = min(processed_s, max(end_based_s, tail_floor_s))
                cut = self._origin + int(cut_s * self._bytes_per_s)
            else:
                # a client without positions: keep what may not have reached the server yet
                lag_s = self._owner._stream_rtt_s(self._endpoint) + 0.1
                cut = self._buffer.end - int(lag_s * self._bytes_per_s)
            self._buffer.discard_before(max(self._buffer.start, min(cut, self._buffer.end)))
            self._detector.on_response(self._reactor.seconds(), final=True)
        self._on_final(text, confidence)

    def _inner_error(self, g: int, err: Exception) -> None:
        if self._closed or g != self._gen:
            return
        if getattr(err, "retryable", False):
            self._failover(f"error: {err}", since=self._reactor.seconds())
        else:
            self._give_up(err)

    def _tick(self) -> None:
        if self._closed:
            return
        now = self._reactor.seconds()
        with self._lock:
            g = self._gen
            inner = self._inner
            errored = g in self._errored
        if inner is None:
            return
        if getattr(inner, "done", False) and not errored:
            if self._input_ended:
                self._finish()
            else:
                self._failover("stream ended unexpectedly", since=now)
            return
        if self._owner._region_down(self._endpoint, now):
            self._failover(f"region {self._region} down", since=now)
            return
        with self._lock:
            suspicion = self._detector.check(now, self._owner._stream_rtt_s(self._endpoint))
        if suspicion is None:
            return
        reason, since, hard = suspicion
        if self._owner._path_dead(self._endpoint, now):
            self._failover(f"stall ({reason}), probes unanswered", since=since)
        elif hard and now - since >= self._settings.hard_stall_timeout_ms / 1000.0:
            self._failover(f"stall ({reason}) for {now - since:.1f} s", since=since)

    def _failover(self, reason: str, since: float) -> None:
        if self.failover_count >= self._settings.max_failovers:
            self._give_up(SpeechError(f"recognition failed after {self.failover_count} region moves: {reason}", retryable=True))
            return
        from_region = self._region
        if reason.startswith("stall") and not self._owner._has_alternative(from_region):
            # Only suspected, and there is nowhere to go: keep the stream (a busy server that
            # answers late is better than none) and watch it afresh.
            with self._lock:
                self._detector.reset(self._reactor.seconds(), awaiting=False)
            log.info("call {call_id} recognition in region {region} looks stalled ({reason}); no other region, "
                     "keeping it", call_id=self._owner.call_id, region=from_region, reason=reason)
            return
        nxt = self._owner._move(from_region, "asr", reason)
        if isinstance(nxt, NoRegion):
            self._give_up(SpeechError(f"recognition failed in region {from_region} ({reason}); no region left: {nxt.detail}", retryable=True))
            return
        self.failover_count += 1
        if self._owner.failovers:
            self.detections.append((self._owner.failovers[-1], self._reactor.seconds() - since))
        with self._lock:
            old, self._inner = self._inner, None
            self._release()
            try:
                self._open(nxt, replay=True)
                opened = None
            except Exception as exc:  # e.g. a malformed endpoint: report like a failed stream
                opened = exc
        if old is not None:
            _close_in_background(old)
        if opened is not None:
            self._give_up(SpeechError(f"recognition could not reopen in region {nxt.region}: {opened!r}", retryable=True))

    def _finish(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
        self._release()
        self._owner._forget(self)
        self._done.set()

    def _give_up(self, err: Exception) -> None:
        with self._lock:
            old, self._inner = self._inner, None
            self._closed = True
        if self._ticker is not None:
            self._ticker.stop()
        if old is not None:
            _close_in_background(old)
        self._release()
        self._owner._forget(self)
        self._done.set()
        self._on_error(err)

    def _acquire(self) -> None:
        if not self._holds_slot:
            self._owner.selector.acquire(self._region)
            self._holds_slot = True

    def _release(self) -> None:
        if self._holds_slot:
            self._owner.selector.release(self._region)
            self._holds_slot = False


class FailoverSynthesisStream:
    """A streaming synthesis that survives its region: same API as :class:`SynthesisStream`."""

    def __init__(
        self,
        owner: RegionalSpeech,
        text: str,
        *,
        sample_rate_hz: int,
        voice: str | None,
        on_audio: Callable[[bytes], None],
        on_done: Callable[[], None],
        on_error: Callable[[Exception], None],
    ) -> None:
        self._owner = owner
        self._reactor = owner.reactor
        self._settings = owner.settings
        self._text = text
        self._rate = sample_rate_hz
        self._voice = voice
        self._on_audio = on_audio
        self._on_done = on_done
        self._on_error = on_error
        self._lock = threading.Lock()
        self._gen = 0
        self._inner: Any = None
        self._skip = 0
        self.delivered_bytes = 0
        self._started_at = 0.0
        self._last_audio_at: float | None = None
        self._finished = False
        self._cancelled = False
        self._done = threading.Event()
        self._region = ""
        self._endpoint = ""
        self._holds_slot = False
        self.failover_count = 0
        self._ticker: _Ticker | None = None
        with self._lock:
            self._open(owner.selection)
        self._ticker = _Ticker(self._reactor, self._settings.check_interval_ms / 1000.0, self._tick)

    @property
    def region(self) -> str:
        return self._region

    def cancel(self) -> None:
        """Stop the synthesis; no callback runs after this returns."""
        with self._lock:
            self._cancelled = True
            inner, self._inner = self._inner, None
        if self._ticker is not None:
            self._ticker.stop()
        if inner is not None:
            inner.cancel()
        self._end()

    def wait_done(self, timeout_s: float) -> bool:
        return self._done.wait(timeout_s)

    def _open(self, selection: Selection) -> None:
        self._gen += 1
        g = self._gen
        self._region = selection.region
        self._endpoint = selection.tts_endpoint
        self._skip = self.delivered_bytes
        self._started_at = self._reactor.seconds()
        self._last_audio_at = None
        client = self._owner.clients.get(selection.tts_endpoint)
        self._inner = client.synthesize_stream(
            self._text,
            sample_rate_hz=self._rate,
            voice=self._voice,
            on_audio=lambda pcm: self._inner_audio(g, pcm),
            on_done=lambda: self._inner_done(g),
            on_error=lambda err: self._reactor.callFromThread(self._inner_error, g, err),
        )
        if not self._holds_slot:
            self._owner.selector.acquire(self._region)
            self._holds_slot = True

    def _inner_audio(self, g: int, pcm: bytes) -> None:
        with self._lock:
            if self._cancelled or self._finished or g != self._gen:
                return
            self._last_audio_at = self._reactor.seconds()
            if self._skip:
                n = min(self._skip, len(pcm))
                self._skip -= n
                pcm = pcm[n:]
            if not pcm:
                return
            self.delivered_bytes += len(pcm)
            self._on_audio(pcm)

    def _inner_done(self, g: int) -> None:
        with self._lock:
            if self._cancelled or self._finished or g != self._gen:
                return
            self._finished = True
            self._on_done()
        self._reactor.callFromThread(self._end)

    def _inner_error(self, g: int, err: Exception) -> None:
        if self._cancelled or self._finished or g != self._gen:
            return
        if getattr(err, "retryable", False):
            self._failover(f"error: {err}")
        else:
            self._give_up(err)

    def _tick(self) -> None:
        with self._lock:
            if self._cancelled or self._finished or self._inner is None:
                return
            last = self._last_audio_at
            started = self._started_at
        now = self._reactor.seconds()
        if self._owner._region_down(self._endpoint, now):
            self._failover(f"region {self._region} down")
            return
        rtt = self._owner._stream_rtt_s(self._endpoint)
        s = self._settings
        if last is None:
            overdue = now - started >= s.tts_first_audio_timeout_ms / 1000.0 + rtt
            since = started
        else:
            overdue = now - last >= s.stall_timeout_ms / 1000.0 + rtt
            since = last
        if not overdue:
            return
        if self._owner._path_dead(self._endpoint, now):
            self._failover("stall, probes unanswered")
        elif now - since >= s.hard_stall_timeout_ms / 1000.0:
            self._failover(f"stall for {now - since:.1f} s")

    def _failover(self, reason: str) -> None:
        if self.failover_count >= self._settings.max_failovers:
            self._give_up(SpeechError(f"synthesis failed after {self.failover_count} region moves: {reason}", retryable=True))
            return
        nxt = self._owner._move(self._region, "tts", reason)
        if isinstance(nxt, NoRegion):
            self._give_up(SpeechError(f"synthesis failed in region {self._region} ({reason}); no region left", retryable=True))
            return
        self.failover_count += 1
        with self._lock:
            old, self._inner = self._inner, None
            if self._holds_slot:
                self._owner.selector.release(self._region)
                self._holds_slot = False
            try:
                self._open(nxt)
                opened = None
            except Exception as exc:
                opened = exc
        if old is not None:
            _close_in_background(old)
        if opened is not None:
            self._give_up(SpeechError(f"synthesis could not restart in region {nxt.region}: {opened!r}", retryable=True))

    def _give_up(self, err: Exception) -> None:
        with self._lock:
            old, self._inner = self._inner, None
            self._cancelled = True
        if old is not None:
            _close_in_background(old)
        self._end()
        self._on_error(err)

    def _end(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
        if self._holds_slot:
            self._owner.selector.release(self._region)
            self._holds_slot = False
        self._owner._forget(self)
        self._done.set()

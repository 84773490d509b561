"""A call's recognition and synthesis streams that survive their region (see :mod:`agent.speech.failover`).

Each stream checks itself for stalls on a :class:`~twisted.internet.task.LoopingCall` driven
by the call's injected reactor; its decisions come from :mod:`agent.speech.failover_core`.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from agent.regions.selector import NoRegion, Selection
from agent.speech.client import RecognitionOptions, SpeechError
from agent.speech.failover_core import BYTES_PER_SAMPLE, FailoverEvent, ReplayBuffer, StallDetector
from media.voicing import VoicingMeter

if TYPE_CHECKING:
    from agent.speech.failover import RegionalSpeech

log = Logger(namespace="openclaw.regions")

#: replayed audio goes to the new stream in pieces of this many seconds
REPLAY_PIECE_S = 0.5


def _close_in_background(stream: Any) -> None:
    """Close a stream off the reactor thread (closing joins its worker)."""
    closer = getattr(stream, "close", None) or getattr(stream, "cancel")
    threading.Thread(target=closer, name="speech-failover-close", daemon=True).start()


def _start_checks(reactor: Any, interval_s: float, check: Callable[[], None]) -> LoopingCall:
    """Call *check* every *interval_s* on *reactor*'s clock, the first after one interval."""

    def guarded() -> None:
        try:
            check()
        except Exception:  # a failing check must not end the checking
            log.failure("speech failover check raised")

    loop = LoopingCall(guarded)
    loop.clock = reactor
    loop.start(interval_s, now=False)
    return loop


def _stop_checks(loop: LoopingCall | None) -> None:
    if loop is not None and loop.running:
        loop.stop()


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
        on_alternatives: Callable[[tuple[str, ...]], None] | None = None,
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
        self._on_alternatives = on_alternatives
        self._lock = threading.Lock()
        self._meter = VoicingMeter(sample_rate_hz=self._rate)
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
        self._checks: LoopingCall | None = None
        with self._lock:
            self._open(owner.selection, replay=False)
        self._checks = _start_checks(self._reactor, s.check_interval_ms / 1000.0, self._tick)

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
            voiced = self._meter.voiced(pcm16, level_dbfs)
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
        _stop_checks(self._checks)
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
            on_alternatives=(None if self._on_alternatives is None else
                             lambda texts: self._reactor.callFromThread(self._inner_alternatives, g, texts)),
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

    def _inner_alternatives(self, g: int, texts: tuple[str, ...]) -> None:
        # Comes right before the interim or final it belongs to, on the same thread.
        if not self._closed and g == self._gen and self._on_alternatives is not None:
            self._on_alternatives(texts)

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
        _stop_checks(self._checks)
        self._release()
        self._owner._forget(self)
        self._done.set()

    def _give_up(self, err: Exception) -> None:
        with self._lock:
            old, self._inner = self._inner, None
            self._closed = True
        _stop_checks(self._checks)
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
        self._checks: LoopingCall | None = None
        with self._lock:
            self._open(owner.selection)
        self._checks = _start_checks(self._reactor, self._settings.check_interval_ms / 1000.0, self._tick)

    @property
    def region(self) -> str:
        return self._region

    def cancel(self) -> None:
        """Stop the synthesis; no callback runs after this returns."""
        with self._lock:
            self._cancelled = True
            inner, self._inner = self._inner, None
        _stop_checks(self._checks)
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
        language = getattr(self._owner, "language_code", None)
        call_id = getattr(self._owner, "call_id", "")
        self._inner = client.synthesize_stream(
            self._text,
            sample_rate_hz=self._rate,
            voice=self._voice,
            on_audio=lambda pcm: self._inner_audio(g, pcm),
            on_done=lambda: self._inner_done(g),
            on_error=lambda err: self._reactor.callFromThread(self._inner_error, g, err),
            **({"language_code": language} if language else {}),
            **({"call_id": call_id} if call_id else {}),
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
        _stop_checks(self._checks)
        if self._holds_slot:
            self._owner.selector.release(self._region)
            self._holds_slot = False
        self._owner._forget(self)
        self._done.set()

"""Per-frame work on pjmedia's clock thread: VAD, voice onset, prosody, a non-blocking push to the recogniser.

Time stamps are the reactor's ``seconds()`` (safe to read from any thread), so the
reactor-side parts compare them with their own readings directly; only the frame's
CPU work is measured with a perf counter.
"""
from __future__ import annotations

import time
from typing import Callable

from agent.app.metrics import AgentMetrics
from agent.call.ports import Reactor
from agent.call.prosody import ProsodyTracker
from agent.speech.api import RecognitionStream
from media.convert import StreamResampler
from media.playout import PlayoutBuffer
from media.vad import EnergyVad, VadEvent
from media.voicing import PeriodicityMeter

#: periodicity above which a frame counts as voice rather than noise
PERIODIC_VOICE = 0.45
#: a frame whose energy above 2.5 kHz is this much over its energy below 2 kHz is a sibilant
#: ("s", "sh", the "ch" of "check"): interruptions start with one as often as with a vowel, and
#: it comes 50-70 ms before the vowel; white noise stays under 0 dB, pink noise, coughs and
#: vowels far under (``PeriodicityMeter.sibilance_db``)
SIBILANT_DB = 6.0
#: a voiced run broken by this much unvoiced audio is over (a new run needs a new onset)
_RUN_GAP_MS = 60.0


class MediaPipeline:
    """Per-frame work on the clock thread: VAD, then a non-blocking ASR push."""

    def __init__(self, reactor: Reactor, vad: EnergyVad, on_vad: Callable[[list[tuple[VadEvent, float]]], None],
                 metrics: AgentMetrics | None, frame_ms: int,
                 perf_counter: Callable[[], float] = time.perf_counter) -> None:
        self._reactor = reactor
        self._vad = vad
        self._on_vad = on_vad
        self._metrics = metrics
        self._deadline_s = frame_ms / 1000.0
        self._perf = perf_counter
        self.asr: RecognitionStream | None = None
        #: the reactor sets this while a prompt that caller speech may interrupt is playing;
        #: the clock thread then pauses *playout* the moment a voice starts
        self.barge_armed = False
        self.playout: PlayoutBuffer | None = None
        #: this much periodic sound, or sibilant sound, in a row (consecutive frames) is a
        #: voice's onset
        self.onset_ms = 20.0
        #: a voice starting before this (reactor seconds) does not pause the prompt; the session
        #: decides what it is: the caller finishing the turn the agent has just taken
        #: (``BargeInConfig.tail_ms``), or the rest of an acknowledgement whose start let the prompt
        #: resume (``BargeIn.resumed_on_onset``)
        self.play_on_until = 0.0
        self._meter = PeriodicityMeter()
        self._frame_ms = float(frame_ms)
        self._run_ms = 0.0
        self._periodic_ms = 0.0
        self._sibilant_ms = 0.0
        self._gap_ms = 0.0
        self._run_started_at = 0.0
        self._onset_sent = False
        self.on_onset: Callable[[float, bool], None] | None = None
        #: when set, received frames are appended here too (a caller message being recorded)
        self.recorder: list[bytes] | None = None
        #: converts bridge audio to the rate the recogniser is told (8 kHz for G.711 calls)
        self.asr_resampler: StreamResampler | None = None
        #: reactor seconds at the end of the latest voiced frame received
        self.last_voiced_at = 0.0
        #: when set, how each voiced run ended (its pitch) is measured here for the endpointer
        self.prosody: ProsodyTracker | None = None
        self.frames = 0
        self.deadline_misses = 0

    def push_frame(self, pcm: bytes) -> None:
        t0 = self._perf()
        self.frames += 1
        events = self._vad.feed(pcm)
        now = self._reactor.seconds()
        voiced = self._vad.last_frame_voiced
        prosody = self.prosody
        if voiced:
            self.last_voiced_at = now
            measured = self._voice_onset(pcm, now)
            if prosody is not None:
                # One periodicity window per voiced frame serves the onset and the pitch.
                periodicity = measured if measured is not None else self._meter.feed(pcm)
                prosody.feed_pitch(True, now, periodicity, self._meter.pitch_hz)
        else:
            if prosody is not None:
                prosody.feed_pitch(False, now)
            self._periodic_ms = self._sibilant_ms = 0.0
            self._gap_ms += self._frame_ms
            if self._gap_ms >= _RUN_GAP_MS:
                self._run_ms = 0.0
                self._onset_sent = False
        recorder = self.recorder
        if recorder is not None:
            recorder.append(pcm)
        asr = self.asr
        if asr is not None:
            resampler = self.asr_resampler
            asr.push_audio(resampler.process(pcm) if resampler is not None else pcm, self._vad.level_dbfs)
        if events:
            # Media time → reactor time of the event itself (not of its detection).
            stamped = [(e, now - (self._vad.now_ms - e.at_ms) / 1000.0) for e in events]
            self._reactor.callFromThread(self._on_vad, stamped)
        spent = self._perf() - t0
        missed = spent > self._deadline_s
        if missed:
            self.deadline_misses += 1
        if self._metrics is not None:
            self._metrics.media_frame_work.observe(spent)
            if missed:
                self._metrics.media_deadline_misses.inc()

    def rearm_onset(self) -> None:
        """Let a voice that is still going on pause the prompt again (called from the reactor
        when a barge-in lets the prompt resume: if the voice was not over after all, the next
        20 ms of it pause the prompt at once)."""
        self._periodic_ms = self._sibilant_ms = 0.0
        self._onset_sent = False

    def _voice_onset(self, pcm: bytes, now: float) -> float | None:
        """Detect a voice (periodic sound, or a sibilant) starting; pause an interruptible prompt at once.
        Returns the frame's periodicity when it was measured (until the onset is sent)."""
        if self._run_ms == 0.0:
            self._run_started_at = now - self._frame_ms / 1000.0
        self._gap_ms = 0.0
        self._run_ms += self._frame_ms
        if self._onset_sent:
            return None
        periodicity = self._meter.feed(pcm)
        if periodicity >= PERIODIC_VOICE:
            self._periodic_ms += self._frame_ms
            self._sibilant_ms = 0.0
        elif self._meter.sibilance_db >= SIBILANT_DB:
            self._sibilant_ms += self._frame_ms
            self._periodic_ms = 0.0
        else:
            self._periodic_ms = self._sibilant_ms = 0.0
        if max(self._periodic_ms, self._sibilant_ms) >= self.onset_ms:
            self._onset_sent = True
            paused = (self.barge_armed and self._run_started_at >= self.play_on_until
                      and self.playout is not None and self.playout.pause())
            if self.on_onset is not None:
                self._reactor.callFromThread(self.on_onset, self._run_started_at, paused)
        return periodicity

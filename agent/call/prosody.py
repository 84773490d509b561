"""How the caller's voice ended: pitch movement and final lengthening over the last voiced frames.

:class:`ProsodyTracker` runs on the media thread, fed one frame at a time with the VAD's
voicing. It measures each voiced frame's pitch with :class:`media.voicing.PeriodicityMeter`
and, when a voiced run ends, publishes a :class:`ProsodyReading` (a frozen value, swapped in
as one reference, so the reactor thread reads it without a lock):

* the pitch slope over the run's last pitched frames (semitones per second): a statement
  ends falling, a continuation or a yes/no question level or rising;
* the final pitch against the caller's median pitch in the last seconds (semitones);
* final lengthening: the last pitched stretch (a syllable's vowel, roughly) against the
  median stretch of the recent ones.

Work per voiced frame is one periodicity window (tens of microseconds); the summary is computed
once per run end, over at most a few hundred numbers.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from media.voicing import PeriodicityMeter

__all__ = ["ProsodyReading", "ProsodyTracker", "FALL", "RISE", "LEVEL", "NONE"]

FALL, RISE, LEVEL, NONE = "fall", "rise", "level", "none"


@dataclass(frozen=True)
class ProsodyReading:
    """The end of one voiced run."""

    #: when the run's last voiced frame ended (the caller's clock, seconds)
    ended_at: float
    #: pitch slope over the run's last pitched frames (semitones per second; 0 when unknown)
    slope_st_per_s: float
    #: the last pitched frames' median against the recent median pitch (semitones)
    final_pitch_st: float
    #: the last pitched stretch's length over the median of the recent ones
    lengthening: float
    #: pitched frames the slope was fitted on
    pitched_frames: int

    @property
    def cue(self) -> str:
        """:data:`FALL` (sounds finished), :data:`RISE` (a question or more to come),
        :data:`LEVEL`, or :data:`NONE` (too little pitch to tell)."""
        if self.pitched_frames < ProsodyTracker.MIN_PITCHED_FRAMES:
            return NONE
        if self.slope_st_per_s <= -FALL_ST_PER_S or (self.final_pitch_st <= -LOW_FINAL_ST
                                                     and self.slope_st_per_s <= 0.0):
            return FALL
        if self.slope_st_per_s >= RISE_ST_PER_S:
            return RISE
        return LEVEL


#: a fall of this many semitones per second over the last pitched frames ends a statement
FALL_ST_PER_S = 8.0
#: a rise this steep is a question or a continuation
RISE_ST_PER_S = 8.0
#: a voice ending this far under its recent median has come down to its floor
LOW_FINAL_ST = 2.0


class ProsodyTracker:
    """Per-frame pitch on the media thread; a :class:`ProsodyReading` at each voiced run's end."""

    #: the slope is fitted on the last pitched frames within this long before the run's end
    TAIL_MS = 250.0
    MIN_PITCHED_FRAMES = 6
    #: pitch history for the caller's median (frames)
    HISTORY_FRAMES = 300
    #: a periodic frame (a pitch worth reading)
    MIN_PERIODICITY = 0.5

    def __init__(self, frame_ms: float = 10.0, sample_rate_hz: int = 16000) -> None:
        self._meter = PeriodicityMeter(sample_rate_hz)
        self._pitch_history: deque[float] = deque(maxlen=self.HISTORY_FRAMES)
        self._stretches: deque[int] = deque(maxlen=20)
        #: (time, semitones) of the current run's pitched frames, the recent tail only
        self._tail: deque[tuple[float, float]] = deque(maxlen=int(self.TAIL_MS / frame_ms) + 1)
        self._stretch = 0
        self._in_run = False
        self._last_voiced_end = 0.0
        #: the reading of the latest run that ended (None before the first)
        self.latest: ProsodyReading | None = None

    def feed(self, pcm: bytes, voiced: bool, now: float) -> None:
        """One frame of caller audio ending at *now* (seconds); *voiced*: the VAD's verdict."""
        if voiced:
            self.feed_pitch(True, now, self._meter.feed(pcm), self._meter.pitch_hz)
        else:
            self.feed_pitch(False, now)

    def feed_pitch(self, voiced: bool, now: float, periodicity: float = 0.0, pitch_hz: float = 0.0) -> None:
        """One frame whose periodicity and pitch a :class:`PeriodicityMeter` has already measured
        (the media pipeline's own, so that a voiced frame is analysed once)."""
        if not voiced:
            if self._in_run:
                self._in_run = False
                self._end_stretch()
                self.latest = self._reading()
                self._tail.clear()
            return
        self._in_run = True
        self._last_voiced_end = now
        if periodicity >= self.MIN_PERIODICITY and pitch_hz > 0.0:
            st = 12.0 * math.log2(pitch_hz / 100.0)
            self._tail.append((now, st))
            self._pitch_history.append(st)
            self._stretch += 1
        else:
            self._end_stretch()

    def _end_stretch(self) -> None:
        if self._stretch:
            self._stretches.append(self._stretch)
            self._stretch = 0

    def _reading(self) -> ProsodyReading:
        end = self._last_voiced_end
        tail = [(t, st) for t, st in self._tail if t >= end - self.TAIL_MS / 1000.0]
        if len(tail) < 2 or not self._pitch_history:
            return ProsodyReading(end, 0.0, 0.0, 1.0, len(tail))
        t = np.array([x for x, _ in tail])
        st = np.array([y for _, y in tail])
        slope = float(np.polyfit(t - t[0], st, 1)[0]) if float(t[-1] - t[0]) > 0.0 else 0.0
        last = float(np.median(st[-4:]))
        final_pitch = last - float(np.median(np.fromiter(self._pitch_history, dtype=float)))
        stretches = list(self._stretches)
        lengthening = (stretches[-1] / float(np.median(stretches[:-1]))) if len(stretches) > 1 else 1.0
        return ProsodyReading(end, slope, final_pitch, lengthening, len(tail))

"""Energy voice-activity detection with an adaptive noise floor (sans-I/O).

Frames go in, :class:`VadEvent` values come out. Timing comes from sample
counts: ``at_ms`` is media time since the first frame, so a test can feed
frames and assert exact boundaries without a clock.
"""
from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass

from media.frames import SAMPLE_RATE_HZ, BYTES_PER_SAMPLE, rms_dbfs


_BLOCK_MS = 100
_DIGITAL_SILENCE_DBFS = -90.0


class VadEventType(enum.Enum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"


@dataclass(frozen=True)
class VadEvent:
    type: VadEventType
    #: media time of the event: first voiced sample for a start, end of the
    #: last voiced frame for an end (not when the silence was confirmed).
    at_ms: float


@dataclass(frozen=True)
class VadConfig:
    #: voiced audio needed before speech counts as started
    start_ms: int = 100
    #: silence needed after speech before it counts as ended
    end_ms: int = 300
    #: a frame is voiced when it is this many dB above the noise floor ...
    threshold_db: float = 12.0
    #: ... and above this absolute level
    min_level_dbfs: float = -45.0
    #: once speech has started, a frame is voiced only within this many dB of the loudest
    #: frame so far: the fading end of the last word 30 dB under the voice is not more speech
    release_db: float = 30.0
    #: noise floor estimate before the first frame
    floor_dbfs: float = -60.0
    #: the noise floor is the quietest 10 ms within this long (minimum statistics): speech
    #: dips between syllables and words keep it down, a hum that never stops becomes it
    floor_window_ms: int = 2000


class EnergyVad:
    """Classify frames as voiced or not and emit start / end of speech.

    A :class:`media.voicing.VoicingDetector` (:meth:`voiced`); the agent's turn-taking energy
    rule, used where a decision must match the agent's (the recogniser's flush)."""

    def __init__(self, config: VadConfig | None = None, sample_rate_hz: int = SAMPLE_RATE_HZ) -> None:
        self.config = config or VadConfig()
        self._rate = sample_rate_hz
        self._t_ms = 0.0
        self._floor = self.config.floor_dbfs
        self._block_min = math.inf     # quietest level of the current 100 ms block
        self._block_ms = 0.0
        n = max(1, self.config.floor_window_ms // _BLOCK_MS)
        # Starts as if floor_dbfs had been heard for a whole window: a sound present from the
        # first frame becomes the floor only once it has lasted the window without a dip.
        self._blocks: deque[float] = deque([self.config.floor_dbfs] * n, maxlen=n)
        self._blocks_min = self.config.floor_dbfs
        self.speaking = False
        self._peak = -math.inf  # loudest frame of the current voiced run or speech
        self._voiced_run_ms = 0.0
        self._run_started_ms = 0.0
        self._silence_run_ms = 0.0
        self._last_voiced_end_ms = 0.0
        self.level_dbfs = -math.inf

    @property
    def now_ms(self) -> float:
        """Media time at the end of the last frame fed."""
        return self._t_ms

    @property
    def last_voiced_end_ms(self) -> float:
        return self._last_voiced_end_ms

    @property
    def last_frame_voiced(self) -> bool:
        """Was the last frame fed voiced?"""
        return self._last_voiced_end_ms == self._t_ms

    def is_voiced(self, level_dbfs: float) -> bool:
        if self.speaking and level_dbfs < self._peak - self.config.release_db:
            return False
        return level_dbfs > self.config.min_level_dbfs and level_dbfs > self._floor + self.config.threshold_db

    def voiced(self, pcm: bytes) -> bool:
        """Feed one frame, for a user that wants only the voicing: was it voiced?"""
        self.feed(pcm)
        return self.last_frame_voiced

    def feed(self, pcm: bytes) -> list[VadEvent]:
        """Feed one frame; return the events it completes."""
        frame_ms = len(pcm) / BYTES_PER_SAMPLE * 1000.0 / self._rate
        start_ms = self._t_ms
        self._t_ms += frame_ms
        level = rms_dbfs(pcm)
        self.level_dbfs = level
        voiced = self.is_voiced(level)
        events: list[VadEvent] = []
        if voiced:
            if self._voiced_run_ms == 0.0:
                self._run_started_ms = start_ms
                if not self.speaking:
                    self._peak = -math.inf
            self._peak = max(self._peak, level)
            self._voiced_run_ms += frame_ms
            self._silence_run_ms = 0.0
            self._last_voiced_end_ms = self._t_ms
            if not self.speaking and self._voiced_run_ms >= self.config.start_ms:
                self.speaking = True
                events.append(VadEvent(VadEventType.SPEECH_START, self._run_started_ms))
        else:
            self._silence_run_ms += frame_ms
            # A short dip inside speech does not reset the onset run.
            if not self.speaking and self._silence_run_ms >= 40.0:
                self._voiced_run_ms = 0.0
            if self.speaking and self._silence_run_ms >= self.config.end_ms:
                self.speaking = False
                self._voiced_run_ms = 0.0
                events.append(VadEvent(VadEventType.SPEECH_END, self._last_voiced_end_ms))
        self._track_floor(level, frame_ms)
        return events

    def _track_floor(self, level: float, frame_ms: float) -> None:
        # Minimum statistics over the last floor_window_ms, in 100 ms blocks: the pauses
        # between syllables keep the floor down under speech (a rising average climbs under
        # talking, and the quiet end of a word then counts as silence), while a
        # sound with no dips becomes the floor. Digital silence (all-zero samples, as trunks
        # send between words) is very quiet, not "no information".
        level = max(level, _DIGITAL_SILENCE_DBFS)
        self._block_min = min(self._block_min, level)
        self._block_ms += frame_ms
        if self._block_ms >= _BLOCK_MS:
            self._blocks.append(self._block_min)
            self._blocks_min = min(self._blocks)  # once per block, not per frame
            self._block_min, self._block_ms = math.inf, 0.0
        self._floor = min(self._block_min, self._blocks_min)

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
#: the noise's level and spread are learnt from frames this long after the last voiced one ...
_NOISE_QUIET_MS = 200.0
#: ... over about this long (an exponential average) ...
_NOISE_AVERAGE_MS = 1000.0
#: ... and count once this much of the noise has been heard
_NOISE_WARM_MS = 500.0
#: over a steady noise, the threshold is its level above the floor + _NOISE_MARGIN_DB +
#: _NOISE_SPREADS x its standard deviation (dB); chosen on the dev half (docs/speech.md)
_NOISE_MARGIN_DB = 2.0
_NOISE_SPREADS = 3.0


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
    #: ... or, over a steady noise (a hiss, a fan, a car: its level measured while the caller is
    #: quiet, see EnergyVad.threshold_db), as little as this: the noise's own level above the
    #: floor plus three times its spread plus 2 dB, when that is less than threshold_db. A voice
    #: 10-15 dB over such a noise has words under 12 dB; babble, which swings, keeps threshold_db
    #: (docs/speech.md, "Callers in noise")
    steady_threshold_db: float = 6.0
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
        # the background's level (dBFS) and variance (dB^2) while the caller is quiet, and how
        # long it has been heard
        self._noise_dbfs: float | None = None
        self._noise_var = 0.0
        self._noise_ms = 0.0
        # once it has been heard for _NOISE_WARM_MS: the level a frame must pass over a steady
        # noise (its level + margin + spreads, dBFS), kept as the noise is learnt, not per frame
        self._steady_dbfs: float | None = None

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

    @property
    def threshold_db(self) -> float:
        """How far over the floor a frame must be to be voiced: ``threshold_db``, or less over a
        steady noise (``steady_threshold_db``)."""
        threshold = self.config.threshold_db
        if self._steady_dbfs is not None:
            threshold = min(threshold, max(self.config.steady_threshold_db, self._steady_dbfs - self._floor))
        return threshold

    def is_voiced(self, level_dbfs: float) -> bool:
        if self.speaking and level_dbfs < self._peak - self.config.release_db:
            return False
        return level_dbfs > self.config.min_level_dbfs and level_dbfs > self._floor + self.threshold_db

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
        # (the floor this frame was judged against: _track_floor comes after)
        if (not self.speaking and self._t_ms - self._last_voiced_end_ms >= _NOISE_QUIET_MS
                and level <= self._floor + self.config.threshold_db):
            self._track_noise(max(level, _DIGITAL_SILENCE_DBFS), frame_ms)
        self._track_floor(level, frame_ms)
        return events

    def _track_noise(self, level: float, frame_ms: float) -> None:
        # The background heard while the caller is quiet (no voice for _NOISE_QUIET_MS, nothing
        # loud): a steady one varies by a dB or so from frame to frame, babble by several.
        self._noise_ms += frame_ms
        if self._noise_dbfs is None:
            self._noise_dbfs = level
            return
        a = min(1.0, frame_ms / _NOISE_AVERAGE_MS)
        d = level - self._noise_dbfs
        self._noise_dbfs += a * d
        self._noise_var = (1.0 - a) * (self._noise_var + a * d * d)
        if self._noise_ms >= _NOISE_WARM_MS:
            self._steady_dbfs = self._noise_dbfs + _NOISE_MARGIN_DB + _NOISE_SPREADS * math.sqrt(self._noise_var)

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

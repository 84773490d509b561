"""Is a frame voiced? One interface (:class:`VoicingDetector`) and two of its detectors.

The project's voicing detectors each serve their own purpose, so their algorithms differ:

* :class:`PeriodicityMeter` (here): a voice's pitch, not a noise burst, for barge-in onsets.
* :class:`VoicingMeter` (here): energy over a slowly adapting floor, deliberately permissive,
  for what a replayed recognition stream may skip and when results are due.
* :class:`media.vad.EnergyVad`: the agent's turn-taking energy rule (start/end of speech, a
  floor by minimum statistics, a release under the loudest frame).
* ``agent.speech.server.recognizer.VoicedFrameClassifier``: the embedded recogniser's
  endpointing, a WebRTC-style VAD standing in for Riva's acoustic model.

Periodicity: voiced speech repeats at its pitch period (2.5-12.5 ms, 80-400 Hz); a click,
a breath, a cough or line noise does not. The peak of the normalised autocorrelation over
those lags, on the last 30 ms of audio, separates them. The peak must lie inside the range:
noise with most of its energy low down (pink noise, rumble) correlates with itself over
short lags and falls off from there, so its largest value in the range is at the shortest
lag, where a voice's pitch period almost never is; such a frame counts as not periodic.
Measurements: docs/speech.md.
"""
from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np

from media.frames import BYTES_PER_SAMPLE, SAMPLE_RATE_HZ, rms_dbfs


@runtime_checkable
class VoicingDetector(Protocol):
    """Fed consecutive frames of pcm16 audio, one call each: is this frame voiced?"""

    def voiced(self, pcm: bytes) -> bool: ...

#: where a sibilant ("s", "sh", the "ch" of "check") has its energy in a telephone band, and the
#: band below it where a voice's, a cough's and most noise's energy is (Hz)
SIBILANT_BAND_HZ = (2500.0, 3800.0)
LOW_BAND_HZ = (100.0, 2000.0)


#: periodicity at and above which :meth:`PeriodicityMeter.voiced` counts a frame as a voice
VOICED_PERIODICITY = 0.45


class PeriodicityMeter:
    """Feed consecutive frames; :meth:`feed` returns the periodicity (0..1) of the latest window."""

    def __init__(self, sample_rate_hz: int = SAMPLE_RATE_HZ, window_ms: int = 30,
                 min_pitch_hz: float = 80.0, max_pitch_hz: float = 400.0,
                 voiced_periodicity: float = VOICED_PERIODICITY) -> None:
        self.voiced_periodicity = voiced_periodicity
        self._n = sample_rate_hz * window_ms // 1000
        self._buf = np.zeros(self._n, dtype=np.float64)
        self._kmin = int(sample_rate_hz / max_pitch_hz)
        self._kmax = min(int(sample_rate_hz / min_pitch_hz), self._n - 1)
        self._nfft = 1 << (2 * self._n - 1).bit_length()
        # Unbias: lag k sums n-k products.
        self._scale = self._n / (self._n - np.arange(self._kmin, self._kmax + 1))
        freqs = np.fft.rfftfreq(self._nfft, 1.0 / sample_rate_hz)
        self._high = (freqs >= SIBILANT_BAND_HZ[0]) & (freqs <= SIBILANT_BAND_HZ[1])
        self._low = (freqs >= LOW_BAND_HZ[0]) & (freqs <= LOW_BAND_HZ[1])
        self._high_energy = self._low_energy = 0.0
        self._rate_hz = sample_rate_hz
        #: the pitch (Hz) of the latest window's periodicity peak; 0.0 when it was not periodic
        self.pitch_hz = 0.0

    @property
    def sibilance_db(self) -> float:
        """Energy of the sibilant band over the low band (dB) in the latest window, from the
        spectrum the periodicity is computed on: high for a sibilant, lower for white noise,
        lower still for pink noise and coughs, far below for vowels; -inf for silence
        (measured ranges: docs/speech.md)."""
        if self._high_energy == 0.0 and self._low_energy == 0.0:
            return -np.inf
        return float(10.0 * np.log10((self._high_energy + 1e-9) / (self._low_energy + 1e-9)))

    def voiced(self, pcm: bytes) -> bool:
        """Feed one frame: is the latest window at least ``voiced_periodicity`` periodic?"""
        return self.feed(pcm) >= self.voiced_periodicity

    def feed(self, pcm: bytes) -> float:
        x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
        if len(x) >= self._n:
            self._buf = x[-self._n:].copy()
        else:
            self._buf = np.concatenate((self._buf[len(x):], x))
        return self.periodicity(self._buf)

    def periodicity(self, x: np.ndarray) -> float:
        x = x - x.mean()
        self.pitch_hz = 0.0
        energy = float(np.dot(x, x))
        if energy < 1e-3 * len(x):
            self._high_energy = self._low_energy = 0.0
            return 0.0
        spec = np.fft.rfft(x, self._nfft)
        power = spec.real ** 2 + spec.imag ** 2   # the autocorrelation's spectrum, and the bands'
        self._high_energy = float(power[self._high].sum())
        self._low_energy = float(power[self._low].sum())
        ac = np.fft.irfft(power, self._nfft)[: self._kmax + 1]
        r = ac[self._kmin: self._kmax + 1] / ac[0] * self._scale
        peak = int(r.argmax())
        if peak == 0 or peak == len(r) - 1:
            return 0.0   # falling off from lag 0 (or still rising past the range): not a pitch
        self.pitch_hz = self._rate_hz / (self._kmin + peak)
        return float(max(0.0, min(1.0, r[peak])))


class VoicingMeter:
    """Voiced or not, per chunk: above -55 dBFS and 6 dB over an adaptive noise floor.

    Deliberately more permissive than the recogniser's own voice detection: it decides
    which audio may be skipped in a replay and when results are due."""

    def __init__(self, sample_rate_hz: int = SAMPLE_RATE_HZ, min_level_dbfs: float = -55.0,
                 over_floor_db: float = 6.0) -> None:
        self._rate = sample_rate_hz
        self._min = min_level_dbfs
        self._over = over_floor_db
        self._floor = -70.0

    def voiced(self, pcm: bytes, level_dbfs: float | None = None) -> bool:
        """Classify *pcm*; *level_dbfs*, when the caller measured it already, saves measuring again."""
        level = rms_dbfs(pcm) if level_dbfs is None else level_dbfs
        if math.isinf(level):
            return False
        is_voiced = level >= self._min and level >= self._floor + self._over
        ms = len(pcm) / BYTES_PER_SAMPLE * 1000.0 / self._rate
        rate = 0.2 if level < self._floor else (0.0025 if is_voiced else 0.01)
        self._floor += (level - self._floor) * min(1.0, rate * ms / 10.0)
        return is_voiced

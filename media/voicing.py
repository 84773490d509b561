"""Is a frame the periodic sound of a voice, or noise? (sans-I/O, numpy)

Voiced speech repeats at its pitch period (2.5-12.5 ms, 80-400 Hz); a click,
a breath, a cough or line noise does not. The peak of the normalised
autocorrelation over those lags, on the last 30 ms of audio, separates them:
about 0.7-0.95 on vowels, below 0.3 on white noise. The peak must lie inside the
range: noise with most of its energy low down (pink noise, rumble) correlates
with itself over short lags and falls off from there, so its largest value in the
range is at the shortest lag, where a voice's pitch period almost never is; such a
frame counts as not periodic (of 100 synthetic pink-noise bursts of 50-150 ms,
this halved those with two periodic frames in a row, 7 -> 3, and moved no voice
onset of the bench corpus).
"""
from __future__ import annotations

import numpy as np

from media.frames import SAMPLE_RATE_HZ

#: where a sibilant ("s", "sh", the "ch" of "check") has its energy in a telephone band, and the
#: band below it where a voice's, a cough's and most noise's energy is (Hz)
SIBILANT_BAND_HZ = (2500.0, 3800.0)
LOW_BAND_HZ = (100.0, 2000.0)


class PeriodicityMeter:
    """Feed consecutive frames; :meth:`feed` returns the periodicity (0..1) of the latest window."""

    def __init__(self, sample_rate_hz: int = SAMPLE_RATE_HZ, window_ms: int = 30,
                 min_pitch_hz: float = 80.0, max_pitch_hz: float = 400.0) -> None:
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

    @property
    def sibilance_db(self) -> float:
        """Energy of the sibilant band over the low band (dB) in the latest window, from the
        spectrum the periodicity is computed on: the "ch" of "check" 3-14 dB; over 100 bursts
        each, white noise -10..0 (never above -1.3 in two frames in a row), pink noise and coughs
        -17..-7; vowels far below; -inf for silence."""
        if self._high_energy == 0.0 and self._low_energy == 0.0:
            return -np.inf
        return float(10.0 * np.log10((self._high_energy + 1e-9) / (self._low_energy + 1e-9)))

    def feed(self, pcm: bytes) -> float:
        x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
        if len(x) >= self._n:
            self._buf = x[-self._n:].copy()
        else:
            self._buf = np.concatenate((self._buf[len(x):], x))
        return self.periodicity(self._buf)

    def periodicity(self, x: np.ndarray) -> float:
        x = x - x.mean()
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
        return float(max(0.0, min(1.0, r[peak])))

"""Trim the silence synthesisers put around speech.

flite starts a prompt with 200-350 ms of silence (and sometimes with a few
hundred milliseconds of low-level noise); played as is, it is added to every
turn's latency. Cached prompts are trimmed once
(:func:`trim_silence`); streamed synthesis passes through a
:class:`LeadingSilenceGate` that drops audio until the first voiced frame.
"""
from __future__ import annotations

import array
import math

from media.frames import BYTES_PER_SAMPLE, SAMPLE_RATE_HZ, rms_dbfs

#: a 5 ms analysis window at 16 kHz
_WINDOW_MS = 5
#: audio kept before the first sound. The sound threshold (25 dB under the
#: prompt's loudest window) already keeps soft first consonants ("s", "f");
#: a lead-in is quiet murmur that reaches the caller as silence: on the wire,
#: a 40 ms lead-in delayed each reply's first voiced packet by 40 ms.
LEAD_MS = 0
#: the cut is faded in over this long so that starting mid-waveform does not click
FADE_IN_MS = 2


def fade_in(pcm: bytes, sample_rate_hz: int = SAMPLE_RATE_HZ, ms: int = FADE_IN_MS) -> bytes:
    """*pcm* with its first *ms* ramped up linearly from silence."""
    n = min(len(pcm) // BYTES_PER_SAMPLE, sample_rate_hz * ms // 1000)
    if n == 0:
        return pcm
    head = array.array("h", pcm[:n * BYTES_PER_SAMPLE])
    for i in range(n):
        head[i] = int(head[i] * i / n)
    return head.tobytes() + pcm[n * BYTES_PER_SAMPLE:]


def _window_bytes(sample_rate_hz: int) -> int:
    return sample_rate_hz * _WINDOW_MS // 1000 * BYTES_PER_SAMPLE


def trim_silence(pcm: bytes, sample_rate_hz: int = SAMPLE_RATE_HZ, *, lead_ms: int = LEAD_MS, tail_ms: int = 150,
                 threshold_dbfs: float | None = None, below_peak_db: float = 25.0) -> bytes:
    """*pcm* without leading silence (keeping *lead_ms*, so a soft first consonant stays) and
    with at most *tail_ms* after the last sound.

    "Sound" is a 5 ms window above *threshold_dbfs*, by default *below_peak_db* under the
    loudest window: synthesisers often start with a long stretch of low-level noise."""
    w = _window_bytes(sample_rate_hz)
    n = len(pcm) // w
    levels = [rms_dbfs(pcm[i * w:(i + 1) * w]) for i in range(n)]
    if threshold_dbfs is None:
        loudest = max(levels, default=-math.inf)
        threshold_dbfs = max(-50.0, loudest - below_peak_db)
    voiced = [i for i, level in enumerate(levels) if level > threshold_dbfs]
    if not voiced:
        return pcm
    per_ms = sample_rate_hz // 1000 * BYTES_PER_SAMPLE
    start = max(0, voiced[0] * w - lead_ms * per_ms)
    end = min(len(pcm), (voiced[-1] + 1) * w + tail_ms * per_ms)
    return fade_in(pcm[start:end], sample_rate_hz) if start > 0 else pcm[start:end]


class LeadingSilenceGate:
    """Drops streamed audio until the first voiced window, then passes everything."""

    def __init__(self, sample_rate_hz: int = SAMPLE_RATE_HZ, *, lead_ms: int = LEAD_MS,
                 threshold_dbfs: float = -40.0) -> None:
        self._rate = sample_rate_hz
        self._w = _window_bytes(sample_rate_hz)
        self._lead = lead_ms * (sample_rate_hz // 1000) * BYTES_PER_SAMPLE
        self._threshold = threshold_dbfs
        self._held = b""
        self.open = False
        self.dropped_bytes = 0

    def process(self, chunk: bytes) -> bytes:
        if self.open:
            return chunk
        data = self._held + chunk
        w = self._w
        for i in range(0, len(data) - w + 1, w):
            if rms_dbfs(data[i:i + w]) > self._threshold:
                self.open = True
                start = max(0, i - self._lead)
                self.dropped_bytes += start
                self._held = b""
                return fade_in(data[start:], self._rate) if start > 0 else data[start:]
        keep = len(data) - len(data) % w
        # Hold back only the lead-in that may precede the first sound.
        cut = max(0, keep - self._lead)
        self.dropped_bytes += cut
        self._held = data[cut:]
        return b""

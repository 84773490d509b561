"""Trim the silence synthesisers put around speech.

flite starts a prompt with silence (and sometimes low-level noise); played as
is, it is added to every turn's latency (docs/latency.md, "Prompt audio").
Cached prompts are trimmed once
(:func:`trim_silence`); streamed synthesis passes through a
:class:`LeadingSilenceGate` that drops audio until the first voiced frame.
"""
from __future__ import annotations

import array
import math

from media.convert import rms_dbfs
from media.frames import BYTES_PER_SAMPLE, SAMPLE_RATE_HZ

#: a 5 ms analysis window at 16 kHz
_WINDOW_MS = 5
#: where a prompt starts: at its first 5 ms window less than BELOW_PEAK_DB under
#: its loudest, moved back over the quieter sound right before it (a soft first
#: consonant: the "th" of "thank", the "f" of "for"), as long as each window is
#: less than ONSET_BELOW_PEAK_DB under the loudest and above ONSET_MIN_DBFS.
#: flite's murmur before a prompt stays out: it reaches the caller as silence and
#: would only delay the reply's first voiced packet.
BELOW_PEAK_DB = 25.0
ONSET_BELOW_PEAK_DB = 35.0
ONSET_MIN_DBFS = -52.0
#: how far back the onset may move (and how much a stream's gate holds back)
MAX_ONSET_MS = 80
#: the cut is faded in over this long so that starting mid-waveform does not click
FADE_IN_MS = 2


def fade_in(pcm: bytes, sample_rate_hz: int = SAMPLE_RATE_HZ, ms: int = FADE_IN_MS) -> bytes:
    """*pcm* with its first *ms* ramped up linearly from silence."""
    return fade(pcm, sample_rate_hz * ms // 1000)


def fade(pcm: bytes, samples: int | None = None, up: bool = True) -> bytes:
    """*pcm* (16-bit) with its first *samples* (default: all) ramped linearly up from silence,
    or (not *up*) down to silence."""
    n = len(pcm) // BYTES_PER_SAMPLE if samples is None else min(len(pcm) // BYTES_PER_SAMPLE, samples)
    if n == 0:
        return pcm
    head = array.array("h", pcm[:n * BYTES_PER_SAMPLE])
    for i in range(n):
        head[i] = int(head[i] * (i if up else n - 1 - i) / n)
    return head.tobytes() + pcm[n * BYTES_PER_SAMPLE:]


def _window_bytes(sample_rate_hz: int) -> int:
    return sample_rate_hz * _WINDOW_MS // 1000 * BYTES_PER_SAMPLE


def _onset(levels: list[float], first: int, peak_dbfs: float) -> int:
    """Index of the window where the sound that reaches its threshold at *first* begins."""
    floor = max(ONSET_MIN_DBFS, peak_dbfs - ONSET_BELOW_PEAK_DB)
    limit = max(0, first - MAX_ONSET_MS // _WINDOW_MS)
    while first > limit and levels[first - 1] > floor:
        first -= 1
    return first


def trim_silence(pcm: bytes, sample_rate_hz: int = SAMPLE_RATE_HZ, *, tail_ms: int = 150,
                 threshold_dbfs: float | None = None) -> bytes:
    """*pcm* from the start of its first sound (see BELOW_PEAK_DB), faded in, with at most
    *tail_ms* after the last sound (*threshold_dbfs* overrides the sound threshold)."""
    w = _window_bytes(sample_rate_hz)
    n = len(pcm) // w
    levels = [rms_dbfs(pcm[i * w:(i + 1) * w]) for i in range(n)]
    loudest = max(levels, default=-math.inf)
    if threshold_dbfs is None:
        threshold_dbfs = max(-50.0, loudest - BELOW_PEAK_DB)
    voiced = [i for i, level in enumerate(levels) if level > threshold_dbfs]
    if not voiced:
        return pcm
    per_ms = sample_rate_hz // 1000 * BYTES_PER_SAMPLE
    start = _onset(levels, voiced[0], loudest) * w
    end = min(len(pcm), (voiced[-1] + 1) * w + tail_ms * per_ms)
    return fade_in(pcm[start:end], sample_rate_hz) if start > 0 else pcm[start:end]


class LeadingSilenceGate:
    """Drops streamed audio until the first sound (a window above *threshold_dbfs*), then
    passes everything from where that sound begins (see :func:`trim_silence`)."""

    def __init__(self, sample_rate_hz: int = SAMPLE_RATE_HZ, *, threshold_dbfs: float = -40.0) -> None:
        self._rate = sample_rate_hz
        self._w = _window_bytes(sample_rate_hz)
        self._hold = MAX_ONSET_MS // _WINDOW_MS * self._w
        self._threshold = threshold_dbfs
        self._held = b""
        self.open = False
        self.dropped_bytes = 0

    def process(self, chunk: bytes) -> bytes:
        if self.open:
            return chunk
        data = self._held + chunk
        w = self._w
        levels: list[float] = []
        for i in range(0, len(data) - w + 1, w):
            levels.append(rms_dbfs(data[i:i + w]))
            if levels[-1] > self._threshold:
                self.open = True
                # The stream's loudest is not known yet: take the threshold as 25 dB under it.
                start = _onset(levels, len(levels) - 1, self._threshold + BELOW_PEAK_DB) * w
                self.dropped_bytes += start
                self._held = b""
                return fade_in(data[start:], self._rate) if start > 0 else data[start:]
        keep = len(data) - len(data) % w
        # Hold back only what may turn out to be the start of the first sound.
        cut = max(0, keep - self._hold)
        self.dropped_bytes += cut
        self._held = data[cut:]
        return b""

"""Small PCM helpers shared by the speech server and client: resampling and G.711.

All functions take and return 16-bit signed little-endian mono PCM (``pcm16``) unless
their name says otherwise. ``audioop`` is in the standard library up to Python 3.12 and
comes from the ``audioop-lts`` package on 3.13+.
"""
from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

SAMPLE_WIDTH_BYTES = 2

# One definition of a frame's level for the whole project.
from media.frames import rms_dbfs  # noqa: E402,F401

# audioop.ratecv carries filter state between calls so that a stream resampled chunk by
# chunk is identical to the whole signal resampled at once.
RatecvState = tuple[int, tuple[tuple[int, int], ...]] | None


def resample(pcm: bytes, from_rate: int, to_rate: int) -> bytes:
    """Resample a complete block of pcm16 mono audio from ``from_rate`` to ``to_rate`` Hz."""
    if from_rate <= 0 or to_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {from_rate} -> {to_rate}")
    if len(pcm) % SAMPLE_WIDTH_BYTES:
        raise ValueError(f"pcm16 length must be even, got {len(pcm)} bytes")
    if from_rate == to_rate or not pcm:
        return pcm
    out, _ = audioop.ratecv(pcm, SAMPLE_WIDTH_BYTES, 1, from_rate, to_rate, None)
    return out


class StreamResampler:
    """Resamples a pcm16 mono stream delivered in chunks, keeping filter state between them."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        if from_rate <= 0 or to_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {from_rate} -> {to_rate}")
        self.from_rate = from_rate
        self.to_rate = to_rate
        self._state: RatecvState = None
        self._odd_byte = b""

    def process(self, pcm: bytes) -> bytes:
        """Resample the next chunk; an odd trailing byte is held for the next call."""
        if self._odd_byte:
            pcm = self._odd_byte + pcm
            self._odd_byte = b""
        if len(pcm) % SAMPLE_WIDTH_BYTES:
            self._odd_byte = pcm[-1:]
            pcm = pcm[:-1]
        if self.from_rate == self.to_rate or not pcm:
            return pcm
        out, self._state = audioop.ratecv(
            pcm, SAMPLE_WIDTH_BYTES, 1, self.from_rate, self.to_rate, self._state
        )
        return out


def ulaw_to_pcm16(data: bytes) -> bytes:
    """Decode G.711 mu-law bytes to pcm16."""
    return audioop.ulaw2lin(data, SAMPLE_WIDTH_BYTES)


def alaw_to_pcm16(data: bytes) -> bytes:
    """Decode G.711 A-law bytes to pcm16."""
    return audioop.alaw2lin(data, SAMPLE_WIDTH_BYTES)


def pcm16_to_ulaw(pcm: bytes) -> bytes:
    """Encode pcm16 to G.711 mu-law bytes."""
    return audioop.lin2ulaw(pcm, SAMPLE_WIDTH_BYTES)


def pcm16_to_alaw(pcm: bytes) -> bytes:
    """Encode pcm16 to G.711 A-law bytes."""
    return audioop.lin2alaw(pcm, SAMPLE_WIDTH_BYTES)



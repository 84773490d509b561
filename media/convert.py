"""PCM conversions for the whole project: levels, resampling, G.711 and G.722.

All functions take and return 16-bit signed little-endian mono PCM (``pcm16``) unless
their name says otherwise. This is the one module that imports ``audioop``: it is in the
standard library up to Python 3.12 and comes from the ``audioop-lts`` package on 3.13+.
G.722 (for packet captures and the benches' callers; pjmedia codes the calls' own) comes from
the ``G722`` package (ITU G.722, public domain).
"""
from __future__ import annotations

import array
import math
import sys
import warnings

with warnings.catch_warnings():
    # 3.11 and 3.12 warn that audioop leaves the standard library in 3.13.
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

SAMPLE_WIDTH_BYTES = 2

# audioop.ratecv carries filter state between calls so that a stream resampled chunk by
# chunk is identical to the whole signal resampled at once.
RatecvState = tuple[int, tuple[tuple[int, int], ...]] | None


def rms(pcm: bytes) -> int:
    """Root-mean-square sample value of pcm16 (a trailing odd byte is ignored)."""
    usable = len(pcm) - len(pcm) % SAMPLE_WIDTH_BYTES
    if usable == 0:
        return 0
    return int(audioop.rms(pcm[:usable], SAMPLE_WIDTH_BYTES))


def rms_dbfs(pcm: bytes) -> float:
    """Root-mean-square level of a frame in dBFS (-inf dB for digital silence)."""
    level = rms(pcm)
    if level == 0:
        return -math.inf
    return 20.0 * math.log10(level / 32768.0)


def peak(pcm: bytes) -> int:
    """Largest absolute sample value of pcm16."""
    return int(audioop.max(pcm, SAMPLE_WIDTH_BYTES))


def scale(pcm: bytes, factor: float) -> bytes:
    """pcm16 with every sample multiplied by *factor* (clipped to the 16-bit range)."""
    return audioop.mul(pcm, SAMPLE_WIDTH_BYTES, factor)


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


#: G.722 as RTP carries it: 16 kHz audio at 64 kbit/s
G722_RATE_HZ = 16000
G722_BIT_RATE = 64000


def _g722() -> object:
    from G722 import G722

    return G722(G722_RATE_HZ, G722_BIT_RATE)


def _little_endian(samples: array.array) -> array.array:  # type: ignore[type-arg]
    """*samples* (``array('h')``) swapped between pcm16's byte order and the machine's, where they
    differ (the swap goes both ways)."""
    if sys.byteorder == "big":
        samples.byteswap()
    return samples


def pcm16_to_g722(pcm16k: bytes) -> bytes:
    """Encode 16 kHz pcm16 to G.722 at 64 kbit/s, as one stream (a phone's encoder)."""
    return bytes(_g722().encode(_little_endian(array.array("h", pcm16k))))  # type: ignore[attr-defined]


class G722Decoder:
    """Decodes one G.722 stream to 16 kHz pcm16, its packets in order: the sub-band ADPCM's
    adaptive state carries from one to the next, so a stream must not be decoded packet by
    packet with fresh decoders."""

    def __init__(self) -> None:
        self._codec = _g722()

    def decode(self, data: bytes) -> bytes:
        return _little_endian(self._codec.decode(data)).tobytes()  # type: ignore[attr-defined]

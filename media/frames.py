"""Audio frame conventions shared by the media path.

Inside the agent all audio is 16-bit signed little-endian mono PCM at
:data:`SAMPLE_RATE_HZ`; the conference bridge converts to and from the call's
codec (G.711 at 8 kHz, G.722 at 16 kHz). Time is derived from sample counts,
never from the wall clock.
"""
from __future__ import annotations

from media.convert import rms_dbfs  # noqa: F401  (the frame level, imported from here by the media path)

SAMPLE_RATE_HZ = 16000
BYTES_PER_SAMPLE = 2


def frame_bytes(frame_ms: int, sample_rate_hz: int = SAMPLE_RATE_HZ) -> int:
    """Bytes in one frame of *frame_ms* milliseconds."""
    return sample_rate_hz * frame_ms // 1000 * BYTES_PER_SAMPLE


def duration_ms(pcm_bytes: int, sample_rate_hz: int = SAMPLE_RATE_HZ) -> float:
    """Milliseconds of audio in *pcm_bytes* bytes."""
    return pcm_bytes / BYTES_PER_SAMPLE * 1000.0 / sample_rate_hz


def silence(nbytes: int) -> bytes:
    return bytes(nbytes)

"""Levels and gain of media.convert, the project's one PCM conversion module."""
from __future__ import annotations

import math
import struct

from media import convert


def pcm(*samples: int) -> bytes:
    return struct.pack(f"<{len(samples)}h", *samples)


def test_rms_dbfs_of_a_half_scale_square_is_minus_six():
    """A square wave at half of full scale is -6.02 dBFS; digital silence and no audio are -inf."""
    assert math.isclose(convert.rms_dbfs(pcm(16384, -16384) * 80), 20 * math.log10(0.5), abs_tol=1e-3)
    assert convert.rms_dbfs(bytes(320)) == -math.inf
    assert convert.rms_dbfs(b"") == -math.inf


def test_rms_ignores_a_trailing_odd_byte():
    """A frame cut mid-sample is measured on its whole samples only."""
    assert convert.rms(pcm(1000, -1000) + b"\x7f") == 1000
    assert convert.rms(b"\x7f") == 0


def test_peak_and_scale_clip_to_sixteen_bits():
    """peak is the largest magnitude; scale multiplies and clips instead of wrapping around."""
    assert convert.peak(pcm(100, -3000, 2000)) == 3000
    assert convert.scale(pcm(100, -3000), 2.0) == pcm(200, -6000)
    assert convert.scale(pcm(20000, -20000), 2.0) == pcm(32767, -32768)


def test_g711_round_trip_keeps_the_level():
    """Encoding to mu-law or A-law and back changes a tone's level by well under a decibel."""
    tone = pcm(*(int(8000 * math.sin(2 * math.pi * 440 * i / 8000)) for i in range(160)))
    level = convert.rms_dbfs(tone)
    assert abs(convert.rms_dbfs(convert.ulaw_to_pcm16(convert.pcm16_to_ulaw(tone))) - level) < 0.5
    assert abs(convert.rms_dbfs(convert.alaw_to_pcm16(convert.pcm16_to_alaw(tone))) - level) < 0.5

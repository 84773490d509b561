"""media.voicing.PeriodicityMeter: a voice's pitch, not noise, makes a frame periodic."""
from __future__ import annotations

import math
import random
import struct

from media.voicing import PeriodicityMeter

RATE = 16000


def frames(samples: list[float], n: int = 160) -> list[bytes]:
    clip = [max(-32767, min(32767, int(s))) for s in samples]
    return [struct.pack(f"<{n}h", *clip[i:i + n]) for i in range(0, len(clip) - n + 1, n)]


def last_periodicity(samples: list[float]) -> float:
    meter = PeriodicityMeter(sample_rate_hz=RATE)
    value = 0.0
    for f in frames(samples):
        value = meter.feed(f)
    return value


def test_a_voiced_sound_with_a_pitch_is_periodic() -> None:
    """Harmonics of 120 Hz (a low male voice) and of 220 Hz: a clear pitch peak."""
    for f0 in (120.0, 220.0):
        voice = [sum(3000 / k * math.sin(2 * math.pi * f0 * k * i / RATE) for k in range(1, 8))
                 for i in range(RATE * 50 // 1000)]
        assert last_periodicity(voice) > 0.7


def test_a_rumble_below_the_pitch_range_is_not_a_pitch() -> None:
    """A 30 Hz rumble correlates with itself most over the shortest lags of the pitch range and
    less at each longer one: its largest value is at the range's edge, so it is no pitch (taken
    as the range's maximum, it would read 0.95)."""
    rumble = [8000 * math.sin(2 * math.pi * 30 * i / RATE) for i in range(RATE * 50 // 1000)]
    assert last_periodicity(rumble) == 0.0


def test_white_noise_is_not_periodic() -> None:
    rng = random.Random(3)
    for _ in range(20):
        white = [rng.gauss(0.0, 4000.0) for _ in range(RATE * 50 // 1000)]
        assert last_periodicity(white) < 0.45

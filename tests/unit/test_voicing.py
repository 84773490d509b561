"""media.voicing.PeriodicityMeter: a voice's pitch, not noise, makes a frame periodic; a
sibilant's spectrum, not white noise's, makes it sibilant."""
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


def last_sibilance(samples: list[float]) -> float:
    meter = PeriodicityMeter(sample_rate_hz=RATE)
    for f in frames(samples):
        meter.feed(f)
    return meter.sibilance_db


def test_sibilance_is_high_for_a_sibilant_only() -> None:
    """Energy at 2.6-3.6 kHz ("s", "sh"): well over the 6 dB the onset needs; white noise below
    0 dB (half its energy in 100-2000 Hz, a third in 2500-3800 Hz); a voice far below."""
    rng = random.Random(3)
    n = RATE * 30 // 1000
    parts = [(f, rng.uniform(0, 2 * math.pi)) for f in range(2600, 3601, 50)]
    sibilant = [sum(1000 * math.sin(2 * math.pi * f * i / RATE + ph) for f, ph in parts) for i in range(n)]
    white = [rng.gauss(0, 4000) for _ in range(n)]
    voice = [sum(3000 / k * math.sin(2 * math.pi * 120 * k * i / RATE) for k in range(1, 8)) for i in range(n)]
    assert last_sibilance(sibilant) > 15
    assert -6 < last_sibilance(white) < 0
    assert last_sibilance(voice) < -30
    assert last_sibilance([0.0] * n) == -math.inf


def test_every_voicing_detector_implements_the_one_interface() -> None:
    """The four detectors answer the same question through VoicingDetector.voiced(pcm)."""
    from agent.speech.server.recognizer import VoicedFrameClassifier
    from media.vad import EnergyVad
    from media.voicing import VoicingDetector, VoicingMeter

    for detector in (PeriodicityMeter(), VoicingMeter(), EnergyVad(), VoicedFrameClassifier()):
        assert isinstance(detector, VoicingDetector), type(detector).__name__


def mixed_frames() -> list[bytes]:
    """Silence, a voice with a pitch, white noise and silence again, in 10 ms frames."""
    rng = random.Random(5)
    voice = [sum(3000 / k * math.sin(2 * math.pi * 150 * k * i / RATE) for k in range(1, 8))
             for i in range(RATE * 300 // 1000)]
    noise = [rng.gauss(0.0, 3000.0) for _ in range(RATE * 200 // 1000)]
    silent = [0.0] * (RATE * 200 // 1000)
    return frames(silent + voice + noise + silent)


def test_periodicity_voiced_is_the_periodicity_at_its_threshold() -> None:
    """voiced() says what feed() >= voiced_periodicity says, frame by frame, and hears the voice."""
    from media.voicing import VOICED_PERIODICITY

    by_voiced, by_feed = PeriodicityMeter(), PeriodicityMeter()
    decisions = [by_voiced.voiced(f) for f in mixed_frames()]
    assert decisions == [by_feed.feed(f) >= VOICED_PERIODICITY for f in mixed_frames()]
    assert any(decisions) and not all(decisions)


def test_energy_vad_voiced_is_its_last_frame_voiced() -> None:
    """EnergyVad.voiced() feeds the frame and reports last_frame_voiced, the same decisions as feed()."""
    from media.vad import EnergyVad

    by_voiced, by_feed = EnergyVad(), EnergyVad()
    decisions = [by_voiced.voiced(f) for f in mixed_frames()]
    expected = []
    for f in mixed_frames():
        by_feed.feed(f)
        expected.append(by_feed.last_frame_voiced)
    assert decisions == expected
    assert any(decisions) and not all(decisions)
    assert by_voiced.now_ms == by_feed.now_ms and by_voiced.speaking == by_feed.speaking

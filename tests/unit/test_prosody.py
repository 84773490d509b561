"""Prosody features from synthetic voices: a falling, a flat and a rising pitch, and lengthening."""
import math

import numpy as np

from agent.call.prosody import FALL, LEVEL, NONE, RISE, ProsodyTracker

RATE_HZ = 16000
FRAME_MS = 10


def voice(pitch_start_hz: float, pitch_end_hz: float, ms: int) -> list[bytes]:
    """A harmonic voice gliding from one pitch to another (exponential glide), in 10 ms frames."""
    n = RATE_HZ * ms // 1000
    f = pitch_start_hz * (pitch_end_hz / pitch_start_hz) ** (np.arange(n) / n)
    phase = 2 * math.pi * np.cumsum(f) / RATE_HZ
    x = sum(np.sin(k * phase) / k for k in range(1, 6)) * 6000.0
    pcm = x.astype("<i2").tobytes()
    step = RATE_HZ * FRAME_MS // 1000 * 2
    return [pcm[i:i + step] for i in range(0, len(pcm), step)]


def feed(tracker: ProsodyTracker, frames: list[bytes], voiced: bool, t: list[float]) -> None:
    for frame in frames:
        t[0] += FRAME_MS / 1000.0
        tracker.feed(frame, voiced, t[0])


def run(*glides: tuple[float, float, int]) -> ProsodyTracker:
    tracker = ProsodyTracker(FRAME_MS, RATE_HZ)
    t = [0.0]
    silence = [b"\0" * (RATE_HZ * FRAME_MS // 1000 * 2)] * 3
    for start, end, ms in glides:
        feed(tracker, voice(start, end, ms), True, t)
        feed(tracker, silence, False, t)
    return tracker


def test_a_falling_pitch_reads_as_a_fall():
    """A voice gliding down from 180 to 110 Hz over its last 400 ms ends like a statement."""
    reading = run((160, 170, 300), (180, 110, 400)).latest
    assert reading is not None and reading.slope_st_per_s < -8.0 and reading.cue == FALL


def test_a_flat_pitch_reads_as_level_and_a_rise_as_a_rise():
    """A held 150 Hz is level (more may come); 130 -> 220 Hz is a rise (a question)."""
    flat = run((150, 150, 400)).latest
    assert flat is not None and abs(flat.slope_st_per_s) < 2.0 and flat.cue == LEVEL
    rise = run((130, 220, 400)).latest
    assert rise is not None and rise.slope_st_per_s > 8.0 and rise.cue == RISE


def test_the_final_pitch_is_measured_against_the_callers_own_median():
    """After a sentence around 200 Hz, a last syllable at 140 Hz is ~6 semitones under it."""
    reading = run((200, 200, 600), (140, 140, 200)).latest
    assert reading is not None and -7.0 < reading.final_pitch_st < -5.0 and reading.cue == FALL


def test_a_long_last_syllable_reads_as_lengthened():
    """Three 150 ms syllables then one of 450 ms: the last is about three times the median."""
    reading = run((150, 150, 150), (150, 150, 150), (150, 150, 150), (150, 150, 450)).latest
    assert reading is not None and 2.5 <= reading.lengthening <= 3.5


def test_noise_gives_no_pitch_and_no_cue():
    """A voiced run of white noise has no pitch to read: the cue is none."""
    tracker = ProsodyTracker(FRAME_MS, RATE_HZ)
    rng = np.random.default_rng(1)
    t = [0.0]
    frames = [(rng.standard_normal(160) * 3000).astype("<i2").tobytes() for _ in range(30)]
    feed(tracker, frames, True, t)
    feed(tracker, [b"\0" * 320], False, t)
    assert tracker.latest is not None and tracker.latest.cue == NONE
    assert abs(tracker.latest.ended_at - 0.3) < 1e-9


def test_the_reading_is_published_when_the_voiced_run_ends():
    """Nothing while the voice goes on; at the first unvoiced frame the run's reading appears."""
    tracker = ProsodyTracker(FRAME_MS, RATE_HZ)
    t = [0.0]
    feed(tracker, voice(150, 150, 200), True, t)
    assert tracker.latest is None
    feed(tracker, [b"\0" * 320], False, t)
    assert tracker.latest is not None and abs(tracker.latest.ended_at - 0.2) < 1e-9

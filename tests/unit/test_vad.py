"""EnergyVad: start and end of speech from sample counts, robust to a noise floor."""
import math
import struct

import numpy as np

from media.vad import EnergyVad, VadConfig, VadEventType

RATE = 16000
FRAME_MS = 10


def tone(amplitude: int, ms: int = FRAME_MS) -> bytes:
    n = RATE * ms // 1000
    return struct.pack(f"<{n}h", *(int(amplitude * math.sin(2 * math.pi * 300 * i / RATE)) for i in range(n)))


def feed(vad: EnergyVad, frames: list[bytes]):
    events = []
    for f in frames:
        events.extend(vad.feed(f))
    return events


def test_speech_start_needs_the_configured_voiced_duration():
    """60 ms of loud audio is not speech with start_ms=100; 100 ms is, and starts at its onset."""
    vad = EnergyVad(VadConfig(start_ms=100, end_ms=300))
    assert feed(vad, [tone(0)] * 20 + [tone(8000)] * 6) == []
    assert feed(vad, [tone(0)] * 10) == []
    events = feed(vad, [tone(8000)] * 10)
    assert [e.type for e in events] == [VadEventType.SPEECH_START]
    assert events[0].at_ms == 360.0


def test_speech_end_is_stamped_at_the_last_voiced_frame():
    """The end event arrives after end_ms of silence but carries the time speech stopped."""
    vad = EnergyVad(VadConfig(start_ms=50, end_ms=300))
    feed(vad, [tone(8000)] * 50)
    assert feed(vad, [tone(0)] * 29) == []
    events = feed(vad, [tone(0)])
    assert [e.type for e in events] == [VadEventType.SPEECH_END]
    assert events[0].at_ms == 500.0


def test_short_pause_does_not_end_speech():
    """A 200 ms pause inside speech (end_ms=300) keeps the caller speaking."""
    vad = EnergyVad(VadConfig(start_ms=50, end_ms=300))
    events = feed(vad, [tone(8000)] * 20 + [tone(0)] * 20 + [tone(8000)] * 20)
    assert [e.type for e in events] == [VadEventType.SPEECH_START]
    assert vad.speaking


def test_steady_background_noise_is_not_speech():
    """A constant noise floor well above -45 dBFS is learnt and not reported as speech."""
    vad = EnergyVad(VadConfig(start_ms=100, end_ms=300))
    # A -33 dBFS hum that never stops counts as noise within four seconds ...
    events = feed(vad, [tone(1000)] * 400)
    assert events == [] or events[-1].type is VadEventType.SPEECH_END
    assert not vad.speaking
    # ... and a VAD that starts with that floor never reports it, but does report speech 20 dB above it.
    vad2 = EnergyVad(VadConfig(start_ms=100, end_ms=300, floor_dbfs=-30))
    assert feed(vad2, [tone(1000)] * 200) == []
    assert [e.type for e in feed(vad2, [tone(12000)] * 20)] == [VadEventType.SPEECH_START]


def test_the_floor_does_not_climb_under_speech():
    """Two seconds of syllables (loud, with digital silence between them, as a trunk sends) do not
    raise the floor: the quiet end of the last word (-42 dBFS) is still voice, and the end is
    stamped after it."""
    vad = EnergyVad(VadConfig(start_ms=50, end_ms=40))
    syllables = ([tone(8000)] * 15 + [tone(0)] * 3) * 11 + [tone(8000)] * 15  # 2.13 s
    feed(vad, [tone(0)] * 10 + syllables)
    tail = [tone(350)] * 8  # -42 dBFS
    events = feed(vad, tail + [tone(0)] * 5)
    assert [e.type for e in events] == [VadEventType.SPEECH_END]
    assert events[0].at_ms == (10 + len(syllables) + len(tail)) * FRAME_MS


def test_digital_silence_counts_as_a_quiet_floor():
    """All-zero frames (a trunk's silence) bring a learnt hum floor back down at once."""
    vad = EnergyVad(VadConfig(start_ms=100, end_ms=300))
    feed(vad, [tone(1000)] * 300)  # a -33 dBFS hum, learnt as the floor
    assert not vad.is_voiced(-30.0)
    feed(vad, [tone(0)] * 2)
    assert vad.is_voiced(-30.0)


def test_the_fading_end_of_loud_speech_is_not_more_speech():
    """After speech at -10 dBFS, a -42 dBFS tail is 32 dB under it: the end is stamped before
    the tail (release_db=30), while the same tail after -15 dBFS speech still counts."""
    loud = EnergyVad(VadConfig(start_ms=50, end_ms=40))
    feed(loud, [tone(0)] * 5 + [tone(14000)] * 30)
    events = feed(loud, [tone(350)] * 8 + [tone(0)] * 5)
    assert [e.type for e in events] == [VadEventType.SPEECH_END] and events[0].at_ms == 350.0
    softer = EnergyVad(VadConfig(start_ms=50, end_ms=40))
    feed(softer, [tone(0)] * 5 + [tone(8000)] * 30)
    events = feed(softer, [tone(350)] * 8 + [tone(0)] * 5)
    assert events[0].at_ms == 430.0


def noise(amplitude: float, frames: int, seed: int = 1, swing_db: float = 0.0) -> list[bytes]:
    """*frames* of white noise of RMS *amplitude*; with *swing_db*, each 100 ms at a level drawn
    within +-swing_db of it (a room of talkers rather than a hiss)."""
    rng = np.random.default_rng(seed)
    n = RATE * FRAME_MS // 1000
    out = []
    gain = 1.0
    for i in range(frames):
        if swing_db and i % 10 == 0:
            gain = 10 ** (rng.uniform(-swing_db, swing_db) / 20)
        x = np.clip(rng.standard_normal(n) * amplitude * gain, -32768, 32767).astype("<i2")
        out.append(x.tobytes())
    return out


def test_a_voice_8_db_over_a_steady_noise_is_heard_to_its_end():
    """Over a steady hiss (-35 dBFS) heard for 3 s, a voice 8 dB over it starts and ends where it
    does: the threshold over the floor falls from 12 dB to steady_threshold_db, the hiss's own
    level and spread being a dB or so. The old rule (12 dB over the floor) hears none of it."""
    vad = EnergyVad(VadConfig(start_ms=100, end_ms=30))
    hiss = 580.0  # -35 dBFS
    feed(vad, noise(hiss, 300))   # (the first 2 s, before the floor learns the hiss, are "speech")
    assert not vad.speaking
    assert vad.threshold_db == 6.0
    # 600 ms of a tone 8 dB over the hiss (RMS 2.5 times), in the hiss
    mixed = []
    for frame in noise(hiss, 60, seed=2):
        x = np.frombuffer(frame, "<i2").astype(float) + np.frombuffer(tone(int(hiss * 2.51 * 1.414)), "<i2")
        mixed.append(np.clip(x, -32768, 32767).astype("<i2").tobytes())
    events = feed(vad, mixed + noise(hiss, 20, seed=3))
    assert [e.type for e in events] == [VadEventType.SPEECH_START, VadEventType.SPEECH_END]
    assert events[0].at_ms == 3000.0 and events[1].at_ms == 3600.0
    old = EnergyVad(VadConfig(start_ms=100, end_ms=30, steady_threshold_db=12.0))
    feed(old, noise(hiss, 300))
    assert feed(old, mixed) == []


def test_a_swinging_noise_keeps_the_full_threshold():
    """Babble-like noise whose level swings by +-6 dB keeps the threshold at 12 dB over the floor,
    so its loud moments are not taken for the caller; so does a noise not yet heard long enough."""
    vad = EnergyVad(VadConfig(start_ms=100, end_ms=30))
    feed(vad, noise(580.0, 400, swing_db=6.0))
    assert vad.threshold_db == 12.0
    fresh = EnergyVad(VadConfig(start_ms=100, end_ms=30, floor_dbfs=-36.0))
    feed(fresh, noise(580.0, 60))   # 0.6 s, of which less than 0.5 s is 200 ms after any voice
    assert fresh.threshold_db == 12.0

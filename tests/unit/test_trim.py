"""Prompt silence trimming: cached prompts and streamed synthesis."""
import math
import struct

from media.trim import LEAD_MS, LeadingSilenceGate, fade_in, trim_silence

RATE = 16000


def tone(ms: int) -> bytes:
    n = RATE * ms // 1000
    return struct.pack(f"<{n}h", *(int(6000 * math.sin(2 * math.pi * 200 * i / RATE)) for i in range(n)))


def silence(ms: int) -> bytes:
    return bytes(RATE * ms // 1000 * 2)


def quiet_tone(ms: int) -> bytes:
    n = RATE * ms // 1000
    return struct.pack(f"<{n}h", *(int(60 * math.sin(2 * math.pi * 200 * i / RATE)) for i in range(n)))


def test_leading_silence_is_cut_to_the_lead_in_and_the_tail_is_capped():
    """300 ms of silence before and 400 ms after 500 ms of sound become the lead-in and 150 ms."""
    out = trim_silence(silence(300) + tone(500) + silence(400))
    assert len(out) == len(silence(LEAD_MS) + tone(500) + silence(150))
    assert out == fade_in(silence(LEAD_MS) + tone(500) + silence(150))


def test_low_level_noise_before_the_speech_is_cut_too():
    """A synthesiser's 400 ms of -55 dBFS murmur before the speech is not kept as the start."""
    out = trim_silence(quiet_tone(400) + tone(500))
    assert len(out) == len(quiet_tone(LEAD_MS) + tone(500))


def test_all_silence_is_left_alone():
    """A prompt with no sound is not emptied."""
    assert trim_silence(silence(200)) == silence(200)


def test_gate_drops_streamed_leading_silence_across_chunks():
    """The first voiced audio passes (with the lead-in) whatever the chunking; later silence passes too."""
    gate = LeadingSilenceGate()
    audio = silence(250) + tone(100) + silence(50) + tone(50)
    out = b"".join(gate.process(audio[i:i + 999]) for i in range(0, len(audio), 999))
    assert out == fade_in(silence(LEAD_MS) + tone(100)) + silence(50) + tone(50)
    assert gate.dropped_bytes == len(silence(250 - LEAD_MS))


def test_the_cut_is_faded_in_and_the_sound_after_it_is_untouched():
    """The first 2 ms ramp up from silence (no click); everything after is the original audio."""
    out = trim_silence(silence(300) + tone(500))
    ramp = 16000 * 2 // 1000 * 2
    assert out[:2] == b"\x00\x00"
    assert out[ramp:] == (silence(LEAD_MS) + tone(500))[ramp:]

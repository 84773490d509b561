"""Prompt silence trimming: cached prompts and streamed synthesis."""
import math
import struct

from media.trim import LeadingSilenceGate, fade_in, trim_silence

RATE = 16000


def tone(ms: int, amplitude: int = 6000) -> bytes:
    n = RATE * ms // 1000
    return struct.pack(f"<{n}h", *(int(amplitude * math.sin(2 * math.pi * 200 * i / RATE)) for i in range(n)))


def silence(ms: int) -> bytes:
    return bytes(RATE * ms // 1000 * 2)


def quiet_tone(ms: int) -> bytes:
    """-58 dBFS: a synthesiser's murmur."""
    return tone(ms, 60)


def soft(ms: int) -> bytes:
    """-45 dBFS: a soft first consonant ("th", "f") under a -18 dBFS voice."""
    return tone(ms, 260)


def test_leading_silence_is_cut_at_the_sound_and_the_tail_is_capped():
    """300 ms of silence before and 400 ms after 500 ms of sound: the sound, faded in, and 150 ms."""
    out = trim_silence(silence(300) + tone(500) + silence(400))
    assert out == fade_in(tone(500) + silence(150))


def test_low_level_noise_before_the_speech_is_cut_too():
    """A synthesiser's 400 ms of -58 dBFS murmur before the speech is not kept as the start."""
    out = trim_silence(quiet_tone(400) + tone(500))
    assert out == fade_in(tone(500))


def test_a_soft_first_consonant_is_kept():
    """40 ms at -45 dBFS right before the voice (the "th" of "thank you") stays: it is the start
    of the word, not silence; the murmur before it does not."""
    out = trim_silence(silence(100) + quiet_tone(100) + soft(40) + tone(500))
    assert out == fade_in(soft(40) + tone(500))


def test_all_silence_is_left_alone():
    """A prompt with no sound is not emptied."""
    assert trim_silence(silence(200)) == silence(200)


def test_gate_drops_streamed_leading_silence_across_chunks():
    """The first sound passes, with the soft sound right before it, whatever the chunking; later
    silence passes too."""
    gate = LeadingSilenceGate()
    audio = silence(250) + soft(30) + tone(100) + silence(50) + tone(50)
    out = b"".join(gate.process(audio[i:i + 999]) for i in range(0, len(audio), 999))
    assert out == fade_in(soft(30) + tone(100)) + silence(50) + tone(50)
    assert gate.dropped_bytes == len(silence(250))


def test_the_cut_is_faded_in_and_the_sound_after_it_is_untouched():
    """The first 2 ms ramp up from silence (no click); everything after is the original audio."""
    out = trim_silence(silence(300) + tone(500))
    ramp = 16000 * 2 // 1000 * 2
    assert out[:2] == b"\x00\x00"
    assert out[ramp:] == tone(500)[ramp:]

"""Tests for in-process flite synthesis (agent.speech.server.flite) and the PCM helpers (media.convert)."""
from __future__ import annotations

import array
import threading

import pytest

from agent.speech.server import flite
from media import convert


def _duration_s(pcm: bytes, rate: int) -> float:
    return len(pcm) / 2 / rate


def test_kal16_synthesizes_16k_speech_of_plausible_length() -> None:
    """The default voice returns 16 kHz pcm16 whose length fits a three-word phrase and is not silent."""
    pcm, rate = flite.synthesize("Check my balance.")
    assert rate == 16000
    assert len(pcm) % 2 == 0
    assert 0.6 < _duration_s(pcm, rate) < 4.0
    assert convert.rms_dbfs(pcm) > -40.0


@pytest.mark.parametrize(("voice", "rate"), [("kal", 8000), ("rms", 16000), ("awb", 16000), ("slt", 16000)])
def test_every_voice_loads_and_reports_its_native_rate(voice: str, rate: int) -> None:
    """Each supported voice registers and reports its own sample rate (kal is the 8 kHz one)."""
    pcm, got_rate = flite.synthesize("Hello there.", voice)
    assert got_rate == rate
    assert 0.3 < _duration_s(pcm, got_rate) < 3.0


@pytest.mark.parametrize("voice", ["rms", "awb", "slt"])
def test_the_clustergen_voices_repeat_exactly_when_asked(voice: str) -> None:
    """These voices draw noise from the C library's rand(): asked to be repeatable, the same text
    is the same audio, whatever was synthesised in between, also from phones (the benchmarks'
    corpora must be the same on every machine and run)."""
    first, _ = flite.synthesize("Yes, check my balance.", voice, repeatable=True)
    flite.synthesize("Something else in between.", voice)
    again, _ = flite.synthesize("Yes, check my balance.", voice, repeatable=True)
    assert first == again
    phones = "pau m hh m pau"
    assert (flite.synthesize_phones(phones, voice, repeatable=True)
            == flite.synthesize_phones(phones, voice, repeatable=True))


def test_longer_text_gives_longer_audio() -> None:
    """Audio length follows the text: a long sentence is several times longer than one word."""
    short, rate = flite.synthesize("Yes.")
    long, _ = flite.synthesize("I would like to speak to somebody about the payment that was declined yesterday.")
    assert _duration_s(long, rate) > 3 * _duration_s(short, rate)


def test_unknown_voice_is_a_value_error_naming_it() -> None:
    """An unknown voice is rejected with a message that names it and lists the known ones."""
    with pytest.raises(ValueError, match=r"unknown flite voice 'bogus'.*kal16"):
        flite.synthesize("hello", "bogus")


def test_non_ascii_text_is_folded_not_rejected() -> None:
    """Accents and typographic quotes are folded to ASCII instead of failing or going silent."""
    pcm, rate = flite.synthesize("Caf\u00e9 \u201cclosed\u201d, isn\u2019t it?")
    assert _duration_s(pcm, rate) > 0.5


def test_concurrent_calls_are_serialised_and_deterministic() -> None:
    """Parallel callers get exactly the audio a lone caller gets (flite's global state is locked)."""
    texts = ["Check my balance.", "Transfer me to an agent.", "Pay my bill.", "Goodbye."]
    expected = {t: flite.synthesize(t)[0] for t in texts}
    results: dict[tuple[int, str], bytes] = {}

    def work(worker: int) -> None:
        for _ in range(5):
            for text in texts:
                results[(worker, text)] = flite.synthesize(text)[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 4 * len(texts)
    for (_, text), pcm in results.items():
        assert pcm == expected[text]


def test_resample_changes_length_by_the_rate_ratio() -> None:
    """Resampling 16 kHz to 8 kHz halves the sample count; 8 kHz to 16 kHz doubles it."""
    pcm, _ = flite.synthesize("Check my balance.")
    down = convert.resample(pcm, 16000, 8000)
    assert abs(len(down) / 2 - len(pcm) / 4) <= 2
    up = convert.resample(down, 8000, 16000)
    assert abs(len(up) - len(down) * 2) <= 4


def test_stream_resampler_in_chunks_matches_whole_signal() -> None:
    """Resampling 20 ms chunks (including odd-sized ones) gives the same samples as one call."""
    pcm, _ = flite.synthesize("Check my balance.")
    pcm8 = convert.resample(pcm, 16000, 8000)
    whole = convert.resample(pcm8, 8000, 16000)
    resampler = convert.StreamResampler(8000, 16000)
    sizes = [320, 321, 319, 160]
    out = bytearray()
    pos = 0
    i = 0
    while pos < len(pcm8):
        size = sizes[i % len(sizes)]
        out += resampler.process(pcm8[pos : pos + size])
        pos += size
        i += 1
    assert bytes(out) == whole


def test_resample_rejects_odd_length_and_bad_rates() -> None:
    """Invalid input is a ValueError with the reason, not silently truncated audio."""
    with pytest.raises(ValueError, match="even"):
        convert.resample(b"\x00\x01\x02", 8000, 16000)
    with pytest.raises(ValueError, match="positive"):
        convert.resample(b"\x00\x00", 0, 16000)


def test_g711_round_trip_stays_close() -> None:
    """mu-law and A-law encode/decode keep a speech-level signal within G.711's error."""
    samples = array.array("h", [int(8000 * ((i % 40) - 20) / 20) for i in range(800)]).tobytes()
    for encode, decode in (
        (convert.pcm16_to_ulaw, convert.ulaw_to_pcm16),
        (convert.pcm16_to_alaw, convert.alaw_to_pcm16),
    ):
        coded = encode(samples)
        assert len(coded) == len(samples) // 2
        back = array.array("h", decode(coded))
        orig = array.array("h", samples)
        assert max(abs(a - b) for a, b in zip(orig, back)) < 300


def test_phones_are_synthesized_and_stretched_without_changing_the_voice() -> None:
    """A phone string ("mm-hmm", which flite's lexicon would spell out) becomes speech; the
    stretch lengthens it and is undone afterwards, so later text keeps the voice's own pace."""
    before, rate = flite.synthesize("Check my balance.")
    plain, _ = flite.synthesize_phones("pau m hh ax m pau")
    slow, _ = flite.synthesize_phones("pau m hh ax m pau", stretch=2.0)
    assert 0.2 < _duration_s(plain, rate) < 1.5
    assert _duration_s(slow, rate) > 1.5 * _duration_s(plain, rate)
    assert convert.rms_dbfs(plain) > -45.0
    assert flite.synthesize("Check my balance.")[0] == before


@pytest.mark.parametrize("phones", ["", "pau zz pau", "m hh m; rm"])
def test_unknown_phones_are_a_value_error_not_a_dead_process(phones: str) -> None:
    """flite exits the process on a phone it does not know: they are checked first."""
    with pytest.raises(ValueError, match="expected flite phones"):
        flite.synthesize_phones(phones, "awb")

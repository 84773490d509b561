"""ops/bench/asr-wer's scoring: text normalisation and word-level Levenshtein distance."""
from __future__ import annotations

from typing import Any

from tests.bench import load_script


def bench() -> Any:
    """ops/bench/asr-wer as a module."""
    return load_script("asr-wer", "asr_wer_bench")


def test_normalisation_lowercases_drops_punctuation_and_spells_numbers() -> None:
    """Both sides are compared as lower-case words: punctuation, pause marks and hyphens go,
    apostrophes inside words stay, numbers are words (long digit strings digit by digit)."""
    normalize = bench().normalize
    assert normalize("Alright, I'm off!") == ["all", "right", "i'm", "off"]
    assert normalize("I would like to | check my balance.") == "i would like to check my balance".split()
    assert normalize("open at 9 on the 21st") == ["open", "at", "nine", "on", "the", "21st"]
    assert normalize("it's 105") == ["it's", "one", "hundred", "five"]
    assert normalize("4471 0923") == ["four", "thousand", "four", "hundred", "seventy", "one",
                                      "nine", "hundred", "twenty", "three"]
    assert normalize("account 447109") == ["account"] + "four four seven one zero nine".split()
    assert normalize("mm-hmm, OK") == ["mm", "hmm", "okay"]


def test_edit_distance_counts_substitutions_deletions_and_insertions() -> None:
    """Word-level Levenshtein distance, each edit costing one."""
    distance = bench().edit_distance
    ref = "check my balance".split()
    assert distance(ref, ref) == 0
    assert distance(ref, "check my ballots".split()) == 1           # substitution
    assert distance(ref, "check balance".split()) == 1              # deletion
    assert distance(ref, "check my account balance".split()) == 1   # insertion
    assert distance(ref, []) == 3
    assert distance([], "uh huh".split()) == 2
    assert distance("a b c d".split(), "b c d e".split()) == 2


def test_wer_is_errors_over_reference_words_across_utterances() -> None:
    """A tally sums errors and reference words over utterances, so long utterances weigh more;
    exact counts utterances with no error."""
    tally = bench().Tally()
    tally.add("check my balance", "Check my balance.")
    tally.add("what are your opening hours", "what are you opening")
    tally.add("goodbye", "good bye")
    assert (tally.errors, tally.words, tally.utterances, tally.exact) == (2, 10, 3, 2)
    assert tally.wer == 0.2
    assert bench().Tally().wer == 0.0


def test_whisper_settings_are_overridden_by_name_with_the_settings_type() -> None:
    """``--whisper-set NAME=VALUE`` takes the Whisper reader's numeric settings, typed as they
    are; an unknown name, a model fact or a value of the wrong type is refused with the choices."""
    import pytest

    overrides = bench().whisper_overrides
    assert overrides(["REPETITION_PENALTY=1.2", "TOKENS_PER_S=6"]) == {"REPETITION_PENALTY": 1.2, "TOKENS_PER_S": 6}
    assert isinstance(overrides(["TOKENS_PER_S=6"])["TOKENS_PER_S"], int)
    assert overrides([]) == {}
    for bad, said in (("FOO=1", "REPETITION_PENALTY"), ("SAMPLE_RATE_HZ=8000", "one of"),
                      ("REPETITION_PENALTY", "NAME=NUMBER"), ("TOKENS_PER_S=5.5", "takes a whole number")):
        with pytest.raises(ValueError, match=said):
            overrides([bad])

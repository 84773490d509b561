"""Tests for agent.intents: tolerant matching of misrecognised speech, and refusing the rest."""

from __future__ import annotations

import pytest

from agent.intents import IntentMatcher, normalize, phonetic_key, token_similarity

MENU = {
    "balance": [
        "balance",
        "account balance",
        "check my balance",
        "what is my balance",
        "how much money do I have",
        "one",
        "option one",
    ],
    "hours": [
        "opening hours",
        "hours",
        "business hours",
        "when are you open",
        "are you open",
        "what time do you open",
        "two",
        "option two",
    ],
    "agent": [
        "agent",
        "talk to an agent",
        "talk to a person",
        "speak to a person",
        "human",
        "representative",
        "operator",
        "customer service",
        "three",
    ],
    "goodbye": ["goodbye", "bye bye", "hang up", "end the call", "that's all", "no thanks", "four"],
}


@pytest.fixture(scope="module")
def menu() -> IntentMatcher:
    return IntentMatcher(MENU)


@pytest.mark.parametrize(
    ("transcript", "intent"),
    [
        # Exact and near-exact phrasing.
        ("balance", "balance"),
        ("check my balance please", "balance"),
        ("Check my balance.", "balance"),
        ("what are your opening hours", "hours"),
        ("I want to talk to a person", "agent"),
        ("goodbye", "goodbye"),
        # Misrecognitions seen from pocketsphinx and similar recognisers.
        ("check my bounce", "balance"),
        ("ballots", "balance"),
        ("check my valance", "balance"),
        ("what's my balanced", "balance"),
        ("a count balance", "balance"),
        ("the balance on my account", "balance"),
        ("how much money have i got", "balance"),
        ("opening ours", "hours"),
        ("open in hours", "hours"),
        ("when are you opened", "hours"),
        ("a gent", "agent"),
        ("agents", "agent"),
        ("you man", "agent"),
        ("talk to a human", "agent"),
        ("good by", "goodbye"),
        ("good buy", "goodbye"),
        ("that is all", "goodbye"),
        # Spoken digits, also when the recogniser writes them as numerals.
        ("one", "balance"),
        ("option two", "hours"),
        ("3", "agent"),
        ("four", "goodbye"),
    ],
)
def test_misrecognised_phrases_match_their_intent(
    menu: IntentMatcher, transcript: str, intent: str
) -> None:
    """Realistic recogniser output, including mishearings, maps to the intended menu choice."""
    match = menu.match(transcript)
    assert match is not None, menu.scores(transcript)
    assert match.name == intent
    assert menu.threshold <= match.score <= 1.0


@pytest.mark.parametrize(
    "transcript",
    [
        "",
        "   ",
        "what is the weather like",
        "hello",
        "um",
        "the",
        "tell me a joke",
        "cancel my card",
        "i lost my credit card",
        "i don't know",
        "can you help me",
        "change my address",
        "open a new account",
        "transfer money to my savings",
        "is it raining",
        "check",
        "please",
        "yes",
    ],
)
def test_unrelated_sentences_match_nothing(menu: IntentMatcher, transcript: str) -> None:
    """Sentences unrelated to the menu (and empty ones) give no match rather than a wrong one."""
    assert menu.match(transcript) is None, menu.scores(transcript)


def test_exact_example_scores_one(menu: IntentMatcher) -> None:
    """Saying an example verbatim gives a perfect score and names that example."""
    match = menu.match("account balance")
    assert match is not None
    assert (match.name, match.score, match.example) == ("balance", 1.0, "account balance")


def test_extra_words_lower_the_score(menu: IntentMatcher) -> None:
    """Words the example does not explain cost a little, so a cleaner answer scores higher."""
    clean = menu.match("opening hours")
    noisy = menu.match("opening hours for the downtown branch office")
    assert clean is not None and noisy is not None
    assert noisy.name == "hours"
    assert noisy.score < clean.score


def test_generic_words_alone_never_match() -> None:
    """An example's weak words (check, tell) do not match without its keyword."""
    matcher = IntentMatcher({"balance": ["check my balance"], "hours": ["tell me the hours"]})
    assert matcher.match("check the weather") is None
    assert matcher.match("tell me a story") is None
    assert matcher.match("check my balance") is not None


def test_threshold_is_respected() -> None:
    """A stricter threshold refuses a fuzzy match that the default accepts."""
    lenient = IntentMatcher({"balance": ["balance"]})
    strict = IntentMatcher({"balance": ["balance"]}, threshold=0.95)
    assert lenient.match("ballots") is not None
    assert strict.match("ballots") is None
    assert strict.match("balance") is not None


def test_ties_go_to_the_intent_listed_first() -> None:
    """When two intents score the same, the one declared first wins."""
    first = IntentMatcher({"a": ["refund"], "b": ["refund"]})
    second = IntentMatcher({"b": ["refund"], "a": ["refund"]})
    first_match, second_match = first.match("refund"), second.match("refund")
    assert first_match is not None and first_match.name == "a"
    assert second_match is not None and second_match.name == "b"


def test_shared_words_weigh_less_than_distinctive_ones() -> None:
    """A word used by several intents counts less than a word unique to one of them."""
    matcher = IntentMatcher(
        {"card_lost": ["lost card", "card stolen"], "card_new": ["new card", "card order"]}
    )
    match = matcher.match("my card was stolen")
    assert match is not None and match.name == "card_lost"
    assert matcher.match("card") is None


def test_scores_lists_candidates_best_first(menu: IntentMatcher) -> None:
    """scores() ranks every intent with keyword evidence, for diagnostics."""
    ranked = menu.scores("balance hours")
    assert [m.name for m in ranked][:2] in (["balance", "hours"], ["hours", "balance"])
    assert ranked == sorted(ranked, key=lambda m: -m.score)


def test_empty_matcher_and_bad_threshold() -> None:
    """A matcher without intents matches nothing; an out-of-range threshold is refused."""
    assert IntentMatcher({}).match("balance") is None
    with pytest.raises(ValueError):
        IntentMatcher({"a": ["a"]}, threshold=0.0)
    with pytest.raises(ValueError):
        IntentMatcher({"a": ["a"]}, threshold=1.5)


def test_normalize_strips_punctuation_and_spells_digits() -> None:
    """Normalisation lower-cases, drops punctuation and apostrophes, and spells single digits."""
    assert normalize("What's MY balance? Press 1, or 22!") == [
        "whats",
        "my",
        "balance",
        "press",
        "one",
        "or",
        "22",
    ]


@pytest.mark.parametrize(
    ("word", "key"),
    [
        ("balance", "PLNS"),
        ("ballots", "PLTS"),
        ("bounce", "PNS"),
        ("hours", "ORS"),
        ("ours", "ORS"),
        ("agent", "AJNT"),
        ("knight", "NT"),
        ("phone", "FN"),
        ("check", "XK"),
        ("", ""),
    ],
)
def test_phonetic_key(word: str, key: str) -> None:
    """Sound-alike words share keys: devoicing, soft c/g, digraphs, dropped h and vowels."""
    assert phonetic_key(word) == key


def test_token_similarity_is_tolerant_but_not_blind() -> None:
    """Sound-alikes score high; unrelated words and confusable short words score low."""
    assert token_similarity("balance", "balance") == 1.0
    assert token_similarity("ours", "hours") >= 0.85
    assert token_similarity("bounce", "balance") >= 0.7
    assert token_similarity("weather", "three") < 0.68
    assert token_similarity("address", "hours") < 0.68
    assert token_similarity("new", "one") < 0.6

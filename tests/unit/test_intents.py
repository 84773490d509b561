"""Tests for agent.dialplan.intents and slots: tolerant matching of misrecognised speech, refusing the rest, and slot values."""

from __future__ import annotations

import pytest

from agent.dialplan.intents import IntentMatcher, normalize, phonetic_key, token_similarity

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


@pytest.mark.parametrize("tense", ["i wanted to", "i needed to", "i was wanting to"])
def test_a_request_in_another_tense_is_the_example_itself(menu: IntentMatcher, tense: str) -> None:
    """"I wanted to talk to an agent" is the request "talk to an agent" (as "I want to" is):
    its verb carries no intent, so the words are the dialplan's own and may end the call or
    transfer it without a confirmation."""
    match = menu.match(f"{tense} talk to an agent")
    assert match is not None and (match.name, match.score) == ("agent", 1.0)


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


# --------------------------------------------------------------------------- slots and synonyms

from datetime import date  # noqa: E402

from agent.dialplan.intents import expand_synonyms  # noqa: E402
from agent.dialplan.slots import (  # noqa: E402
    is_bare_yes,
    parse_date,
    parse_digits,
    parse_number,
    parse_slot,
    parse_time,
    parse_yes_no,
    strip_slot_words,
)

TUESDAY = date(2025, 3, 4)


@pytest.mark.parametrize(
    ("text", "digits"),
    [
        ("one two three four", "1234"),
        ("my account number is 1234 5678", "12345678"),
        ("double five oh one", "5501"),
        ("let me see it's five to seven nine triples zero one", "52790001"),
        ("four for two", "442"),
        ("talk to an agent", None),
        ("", None),
    ],
)
def test_parse_digits_reads_spoken_and_written_digits(text: str, digits: str | None) -> None:
    """Digit runs come from words, numerals, 'oh' and 'double'; sound-alikes only within runs."""
    assert parse_digits(text) == digits


@pytest.mark.parametrize(
    ("text", "number"),
    [("one hundred and twenty three", 123), ("42", 42), ("two thousand five", 2005),
     ("a hundred", 100), ("seven eight nine", 789), ("none at all", None)],
)
def test_parse_number_reads_number_words(text: str, number: int | None) -> None:
    """Whole numbers in words or numerals; digit sequences read as one number."""
    assert parse_number(text) == number


@pytest.mark.parametrize(
    ("text", "answer"),
    [("yes please", "yes"), ("yeah", "yes"), ("that's correct", "yes"), ("no thanks", "no"),
     ("that is not right", "no"), ("maybe", None), ("alright then", "yes")],
)
def test_parse_yes_no_lets_negation_win(text: str, answer: str | None) -> None:
    """Yes words mean yes unless a negation is present."""
    assert parse_yes_no(text) == answer


@pytest.mark.parametrize(
    ("text", "bare"),
    [("yes", True), ("yeah sure", True), ("all right", True), ("yes I do", True), ("okay, go ahead please", True),
     ("okay great", True), ("yeah, sounds good", True), ("alright then", True), ("sure, that's fine", True),
     ("I want- yes, I had another thing", False), ("yes but not now", False), ("maybe", False), ("please", False),
     ("great", False), ("okay great, and what about my balance", False), ("right i all", False),
     ("i all yes", False), ("yes that is it", True), ("yep i have", False)],
)
def test_a_bare_yes_is_a_yes_and_nothing_else(text: str, bare: bool) -> None:
    """A yes with only the words a plain yes comes with, not a yes word inside another sentence."""
    assert is_bare_yes(text) is bare


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("today", date(2025, 3, 4)),
        ("tomorrow", date(2025, 3, 5)),
        ("the day after tomorrow", date(2025, 3, 6)),
        ("friday", date(2025, 3, 7)),
        ("next tuesday", date(2025, 3, 11)),
        ("march fifth", date(2025, 3, 5)),
        ("on the twenty first of march", date(2025, 3, 21)),
        ("march 1st", date(2026, 3, 1)),
        ("3/10", date(2025, 3, 10)),
        ("2025-12-25", date(2025, 12, 25)),
        ("1225", date(2025, 12, 25)),
        ("february thirtieth", None),
        ("whenever", None),
    ],
)
def test_parse_date_relative_to_today(text: str, day: date | None) -> None:
    """Relative days, weekdays (the next one), month and day (next occurrence), ISO and keypad."""
    assert parse_date(text, TUESDAY) == day


@pytest.mark.parametrize(
    ("text", "clock"),
    [("10 am", "10:00"), ("3:30 pm", "15:30"), ("three thirty", "15:30"), ("at nine", "09:00"),
     ("half past two", "14:30"), ("quarter to five", "16:45"), ("noon", "12:00"),
     ("1530", "15:30"), ("twelve am", "00:00"), ("nine in the morning", "09:00"),
     ("whenever", None)],
)
def test_parse_time_assumes_afternoon_for_small_hours(text: str, clock: str | None) -> None:
    """Times with am/pm, words or keypad digits; 1 to 7 without am/pm are afternoon."""
    assert parse_time(text) == clock


def test_parse_slot_dispatches_and_rejects_unknown_types() -> None:
    """parse_slot returns text values per type and refuses an unknown type."""
    assert parse_slot("number", "twelve", TUESDAY) == "12"
    assert parse_slot("date", "tomorrow", TUESDAY) == "2025-03-05"
    assert parse_slot("text", "  Ann  ", TUESDAY) == "Ann"
    with pytest.raises(ValueError):
        parse_slot("colour", "red", TUESDAY)


def test_expand_synonyms_substitutes_whole_words() -> None:
    """Each synonym yields a copy of the example with the word replaced; parts of words do not."""
    assert expand_synonyms(["check my balance", "balances"], {"balance": ["funds"]}) == [
        "check my balance", "balances", "check my funds"
    ]


def test_strip_slot_words_leaves_the_request() -> None:
    """Slot value words are removed so the request itself can be matched."""
    assert strip_slot_words("book an appointment tomorrow at 3 pm", ["date", "time"]) == \
        "book an appointment at"


def test_a_final_by_after_a_closing_word_is_read_as_bye() -> None:
    """The recogniser writes a final "bye" as "by" ("another time by"); the matcher reads it as the
    goodbye, by words and by meaning, while a "by" that wants its object stays a preposition."""
    from agent.dialplan.semantic import without_fillers

    assert normalize("I'll call back another time, by.")[-1] == "bye"
    assert normalize("thank you so much by")[-1] == "bye"
    assert normalize("can I pay by")[-1] == "by"
    assert without_fillers("Okay, thanks, um, by.") == "okay thanks bye"
    assert without_fillers("it was sent by") == "it was sent by"


def test_hang_on_is_read_as_wait_not_near_hang_up() -> None:
    """"hang on" means "wait": its "hang" is no evidence for an example "hang up"."""
    from agent.dialplan.semantic import without_fillers

    assert normalize("uh, yep, hang on, one more") == ["uh", "yes", "wait", "one", "more"]
    assert normalize("please hang up") == ["please", "hang", "up"]
    assert without_fillers("Hang on, one more.") == "wait one more"
    assert IntentMatcher({"goodbye": ["hang up"], "more": ["one more thing"]}).match(
        "hang on", by_meaning=False) is None


def test_see_ya_is_a_goodbye_not_a_yes() -> None:
    """"ya" is "yes" on its own or first ("ya, one more"), but "you" after a verb that takes it:
    "okay, see ya" at "anything else?" was read as "okay see yes", a yes to more help."""
    from agent.dialplan.semantic import without_fillers

    assert normalize("okay, see ya") == ["okay", "see", "you"]
    assert normalize("thank ya, talk to ya later") == ["thank", "you", "talk", "to", "you", "later"]
    assert normalize("ya, one more") == ["yes", "one", "more"]
    assert without_fillers("Okay, um, see ya.") == "okay see you"
    matcher = IntentMatcher({"goodbye": ["goodbye", "see you"], "more": ["yes", "yeah"]})
    assert matcher.match("okay see ya", by_meaning=False).name == "goodbye"

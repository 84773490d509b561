"""Tests for intent matching by meaning: paraphrases, out-of-scope refusal, unfinished fragments,
offline loading of the sentence encoder, and determinism."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from agent.dialplan import semantic
from agent.dialplan.intent_concepts import concept_phrases
from agent.dialplan.intents import SEMANTIC_SCORE_CEILING, IntentMatcher
from agent.dialplan.semantic import SemanticIndex, WordLlamaEncoder, shared_encoder

COMPLETE_MIN_SCORE = 0.9  # the call session's mark for words that already make a request

MENU = {
    "balance": ["balance", "account balance", "check my balance", "how much money do I have", "one"],
    "hours": ["opening hours", "hours", "business hours", "when are you open", "two"],
    "agent": ["agent", "talk to a person", "representative", "customer service", "three"],
    "goodbye": ["goodbye", "bye bye", "hang up", "that's all", "four"],
}


@pytest.fixture(scope="module")
def encoder() -> WordLlamaEncoder:
    loaded = shared_encoder()
    assert loaded is not None, "the wordllama package is an install requirement"
    return loaded


@pytest.fixture(scope="module")
def menu(encoder: WordLlamaEncoder) -> IntentMatcher:
    return IntentMatcher(MENU, encoder=encoder)


@pytest.mark.parametrize(
    ("transcript", "intent"),
    [
        ("i was wondering how much money is left in my account", "balance"),
        ("could you put me through to someone", "agent"),
        ("i want to speak with a human being", "agent"),
        ("what time do you close on saturdays", "hours"),
        ("are you guys open on sunday", "hours"),
        ("ok i have to go now see you", "goodbye"),
        ("how much cash have i got", "balance"),
        ("ta ta", "goodbye"),
        ("toodle-oo", "goodbye"),
    ],
)
def test_paraphrases_match_their_intent(menu: IntentMatcher, transcript: str, intent: str) -> None:
    """Requests worded unlike any example, which words alone miss, select the intent they mean."""
    assert IntentMatcher(MENU).match(transcript) is None
    match = menu.match(transcript)
    assert match is not None and match.name == intent, (match, menu.scores(transcript))
    assert menu.threshold <= match.score <= SEMANTIC_SCORE_CEILING


@pytest.mark.parametrize(
    "transcript",
    [
        "my card was stolen",
        "i lost my credit card",
        "open a new account",
        "transfer money to my savings",
        "what is the weather like",
        "i want to apply for a mortgage",
        "how do i reset my online banking password",
        "change my address",
        "can you help me",
        "i don't know",
        # they share "balance" or "cash" with the balance examples
        "can i get the balance transferred to a new credit card",
        "i need cash delivered to my house",
    ],
)
def test_out_of_scope_requests_match_nothing(menu: IntentMatcher, transcript: str) -> None:
    """Requests no intent covers are refused, even when they share words or topic with one."""
    assert menu.match(transcript) is None, menu.scores(transcript)


@pytest.mark.parametrize(
    "fragment",
    ["i would like to", "i was wondering if", "could you", "can i", "i need to", "i want", "so um"],
)
def test_unfinished_fragments_neither_match_nor_look_complete(menu: IntentMatcher, fragment: str) -> None:
    """The beginning of a request matches nothing, so the endpointer keeps waiting."""
    assert menu.match(fragment) is None, fragment


@pytest.mark.parametrize("transcript", ["how much", "what time", "talk to", "i was wondering how much money"])
def test_matches_by_meaning_never_mark_words_complete(menu: IntentMatcher, transcript: str) -> None:
    """Whatever meaning finds in partial words, it scores below the completeness mark; only the
    dialplan's own words can end a turn early."""
    match = menu.match(transcript)
    assert match is None or match.score < COMPLETE_MIN_SCORE


def test_own_examples_keep_their_lexical_score(menu: IntentMatcher) -> None:
    """Exact and misheard example words score as before: meaning does not dilute them."""
    for transcript, intent in [("check my balance", "balance"), ("check my bounce", "balance"),
                               ("good by", "goodbye"), ("three", "agent")]:
        match = menu.match(transcript)
        lexical = IntentMatcher(MENU).match(transcript)
        assert match == lexical and match is not None and match.name == intent


def test_weak_word_match_yields_to_clearly_nearer_meaning(encoder: WordLlamaEncoder) -> None:
    """A weak lexical match (a spoken digit inside a sentence) loses to the intent the sentence
    means."""
    intents = {"balance": ["balance", "one"], "more": ["something else", "yes"]}
    matcher = IntentMatcher(intents, encoder=encoder)
    assert IntentMatcher(intents).match("um yep one more") is not None
    match = matcher.match("um yep one more")
    assert match is not None and match.name == "more"


@pytest.mark.parametrize("transcript", ["do you do business accounts", "can i open a business account"])
def test_less_than_sure_word_match_yields_to_a_nearer_background_request(menu: IntentMatcher,
                                                                         transcript: str) -> None:
    """Words that sound like an example ("accounts" and "account balance") but mean a request no
    intent covers are refused, as they would be by meaning alone."""
    assert IntentMatcher(MENU).match(transcript) is not None
    assert menu.match(transcript) is None, menu.scores(transcript)
    asked = menu.match("how much money do i have in my business account")
    assert asked is not None and asked.name == "balance"


def test_background_request_is_kept_when_an_intent_offers_it(encoder: WordLlamaEncoder) -> None:
    """A dialplan that does handle lost cards gets them: background requests near its own
    examples are not background for that ask."""
    matcher = IntentMatcher({"lost_card": ["i lost my card", "report a lost card"],
                             "balance": ["balance"]}, encoder=encoder)
    match = matcher.match("i think i lost my debit card")
    assert match is not None and match.name == "lost_card"


def test_concepts_are_adopted_by_anchor_examples_only() -> None:
    """Only an intent listing an anchor example takes a concept's phrases."""
    assert "put me through to someone" in concept_phrases(["agent"])
    assert concept_phrases(["book an appointment"]) == []


def test_semantic_scores_are_deterministic(encoder: WordLlamaEncoder) -> None:
    """The same transcript gives the same scores and match, whatever was encoded in between."""
    first = IntentMatcher(MENU, encoder=encoder)
    before = first.match("could you put me through to someone")
    index = SemanticIndex(MENU, encoder)
    scores = index.compare("how much money is left")
    encoder.encode(["unrelated words to fill the cache", "more words"])
    again = IntentMatcher(MENU, encoder=encoder)
    assert again.match("could you put me through to someone") == before
    assert index.compare("how much money is left") == scores


def test_encoder_loads_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the encoder reads the installed package only: no connection is attempted."""
    import wordllama  # noqa: F401  (imported before the network is cut, as at server start)

    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network access during encoder load")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    started = time.perf_counter()
    encoder = WordLlamaEncoder()
    assert time.perf_counter() - started < 10.0
    vectors = encoder.encode(["check my balance", "opening hours"])
    assert attempts == []
    assert vectors.shape == (2, 256)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_without_encoder_matching_is_lexical(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the encoder cannot load, matching goes on with words alone."""
    monkeypatch.setattr(semantic, "_shared", None)
    monkeypatch.setattr(semantic, "_shared_failed", False)

    def broken() -> None:
        raise FileNotFoundError("weights missing")

    monkeypatch.setattr(semantic, "load_encoder", broken)
    assert semantic.preload() is False
    assert shared_encoder() is None
    matcher = IntentMatcher(MENU, encoder=shared_encoder())
    assert matcher.match("check my balance") is not None
    assert matcher.match("could you put me through to someone") is None


class _CountingEncoder:
    """Wraps the real encoder and counts the texts it is asked to encode."""

    def __init__(self, inner: WordLlamaEncoder) -> None:
        self.inner = inner
        self.min_cosine = inner.min_cosine
        self.encoded: list[str] = []

    def encode(self, texts):  # type: ignore[no-untyped-def]
        self.encoded.extend(texts)
        return self.inner.encode(texts)


def test_a_sure_match_by_words_and_a_words_only_match_embed_nothing(encoder: WordLlamaEncoder) -> None:
    """The transcript is embedded only when its words leave the match in doubt: not for an exact
    example (it stands whatever its meaning), nor when only a match by words is asked for (the
    end-of-turn check on every interim transcript)."""
    counting = _CountingEncoder(encoder)
    matcher = IntentMatcher(MENU, encoder=counting)
    built = len(counting.encoded)
    sure = matcher.match("check my balance")
    assert sure is not None and sure.name == "balance" and sure.score >= COMPLETE_MIN_SCORE
    assert matcher.match("i was wondering how much money is left in my account", by_meaning=False) is None
    assert len(counting.encoded) == built
    loose = matcher.match("i was wondering how much money is left in my account")
    assert loose is not None and loose.name == "balance"
    assert len(counting.encoded) == built + 1


class _Axes:
    """An encoder whose sentences are unit vectors on named axes: exact cosines for the test."""

    def __init__(self, axes: dict[str, list[float]]) -> None:
        self._axes = {text: np.array(v, dtype=np.float32) / np.linalg.norm(v) for text, v in axes.items()}

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._axes.get(t, np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32)) for t in texts])


def test_closeness_is_the_mean_of_the_nearest_phrases() -> None:
    """An intent is as near as its two nearest phrases on average: one phrase that happens to be
    close (a shared word) counts less than two that agree; the nearest phrase is still named."""
    encoder = _Axes({
        "transfer me to a person": [1, 0, 0, 0],
        "speak to someone": [0.6, 0.8, 0, 0],
        "how much money": [0, 0, 1, 0],
        "money left": [0, 0.6, 0.8, 0],
    })
    index = SemanticIndex({"agent": ["transfer me to a person", "speak to someone"],
                           "balance": ["how much money", "money left"]}, encoder)
    encoder._axes["transfer my money"] = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    scores = index.compare("transfer my money")
    assert scores.by_intent["agent"] == pytest.approx((1.0 + 0.6) / 2)
    assert scores.by_intent["balance"] == pytest.approx(0.0)
    assert scores.nearest["agent"] == "transfer me to a person"


def test_requests_no_intent_of_the_ask_adopts_are_background_there() -> None:
    """The common requests an ask does not offer compete as background; answers ("no", "that's
    all"), a person (what department intents are too) and the ask's own concepts do not."""
    from agent.dialplan.intent_concepts import background_concepts

    names = {c.name for c in background_concepts(["agent", "talk to a person"])}
    assert names == {"end_call", "account_balance", "opening_hours", "more_help"}
    assert {c.name for c in background_concepts(["goodbye"])} == {"account_balance", "opening_hours", "more_help"}
    assert not {c.name for c in background_concepts(["talk to sales"])} & {"human_agent", "affirm", "decline",
                                                                        "nothing_more"}


@pytest.mark.parametrize("transcript", ["okay, talk to you later", "we're done here, you can disconnect",
                                        "can you see how much I've got in the bank"])
def test_a_request_the_ask_does_not_offer_is_not_taken_for_the_one_it_does(encoder: WordLlamaEncoder,
                                                                          transcript: str) -> None:
    """Where only a person is offered (an ask for an account number), a goodbye or a balance
    question said with talking or connecting words is refused, not taken for the person."""
    matcher = IntentMatcher({"agent": ["agent", "representative", "talk to a person"]}, encoder=encoder)
    assert matcher.match(transcript) is None, matcher.scores(transcript)
    asked = matcher.match("could you put me through to someone")
    assert asked is not None and asked.name == "agent"


@pytest.mark.parametrize(("intents", "transcript", "intent"), [
    # a department the caller asks a person of: the common request for a person is no background
    ({"sales": ["talk to sales", "sales department"], "support": ["technical support", "my internet is down"]},
     "can I speak with tech support", "support"),
    # a common request the ask offers in its own words ("opening hours" is no example of it)
    ({"store_hours": ["store hours", "what time do you open"], "returns": ["return an item", "I want a refund"]},
     "what time do you close tonight", "store_hours"),
])
def test_an_intent_of_the_integrators_own_is_not_refused_for_a_common_request_like_it(
        encoder: WordLlamaEncoder, intents: dict[str, list[str]], transcript: str, intent: str) -> None:
    match = IntentMatcher(intents, encoder=encoder).match(transcript)
    assert match is not None and match.name == intent, IntentMatcher(intents, encoder=encoder).scores(transcript)



@pytest.mark.parametrize(
    ("transcript", "intent"),
    [
        ("can you read me what I've got, I'm about to pay a bill", "balance"),
    ],
)
def test_a_request_among_other_words_is_matched_by_its_part(menu: IntentMatcher, transcript: str,
                                                             intent: str) -> None:
    """A request written with a reason or a greeting around it, which dilute the whole sentence's
    meaning, is matched by the part that makes it."""
    whole = menu._match_whole(transcript, by_meaning=True)
    assert whole is None
    match = menu.match(transcript)
    assert match is not None and match.name == intent


@pytest.mark.parametrize(
    "transcript",
    ["yeah hi, what's the damage on my checking these days", "hi again, so, what am I sitting at in checking"],
)
def test_a_greeting_around_a_request_is_matched_whole_by_callers_phrasings(menu: IntentMatcher, transcript: str) -> None:
    """Callers' own phrasings of a request (agent.dialplan.intent_concepts.SAID_BY_CALLERS) carry
    greetings and fillers too, so a greeting around a request no longer dilutes it."""
    match = menu._match_whole(transcript, by_meaning=True)
    assert match is not None and match.name == "balance"


@pytest.mark.parametrize(
    "transcript",
    [
        "yes please, I need help with another thing",   # a part ("yes please") that is an answer
        "my card was stolen, can you help me",          # no part is a request of the ask
        "I'm leaving on a trip soon, what's my balance, and when do you open",  # two requests
    ],
)
def test_a_part_selects_nothing_that_ends_answers_transfers_or_competes(menu: IntentMatcher, transcript: str) -> None:
    """Ending the call, a yes or no and a transfer need the whole turn, and parts that select two
    intents select neither."""
    match = menu.match(transcript)
    assert match is None or match.name not in ("goodbye", "agent"), match
    if "balance" in transcript:
        assert match is None


def test_parts_of_a_goodbye_do_not_end_the_call(menu: IntentMatcher) -> None:
    """Only a whole turn ends the call: "okay, hang on, there's one more thing" is no goodbye."""
    assert menu.match("okay, hang on a second, there's one more thing I wanted") is None


@pytest.mark.parametrize("transcript", ["I'd like to talk about investing some money", "i'm calling about a loan",
                                        "can I ask about your mortgage rates"])
def test_what_a_call_is_about_asks_for_no_person(menu: IntentMatcher, transcript: str) -> None:
    """Words that only say what the call is about ("talk about investing") are not a request for
    a person, however near "talk to someone" they come."""
    match = menu.match(transcript)
    assert match is None or match.name != "agent", match


@pytest.mark.parametrize("transcript", ["I'd like to talk to someone about investing",
                                        "can I speak with an advisor about my loan"])
def test_a_person_asked_for_about_a_topic_is_still_a_person(menu: IntentMatcher, transcript: str) -> None:
    match = menu.match(transcript)
    assert match is not None and match.name == "agent", match


@pytest.mark.parametrize("transcript", ["what am i doing", "am i running", "do you do me things at all",
                                        "um, what's my care kicking up", "that way are you there tonight",
                                        "allie are you there tonight"])
def test_a_question_is_no_goodbye(menu: IntentMatcher, transcript: str) -> None:
    """Words that end on a question about something ("what am I doing", misheard) do not end the
    call, however near "I'm hanging up" or "that's all" they come in meaning or in sound; also
    after a word or two the recogniser made of the question's start ("that way are you there
    tonight" for "how late | are you there tonight")."""
    match = menu.match(transcript)
    assert match is None or match.name != "goodbye", match


@pytest.mark.parametrize("transcript", ["could i go now", "can you end the call", "are you still there? bye",
                                        "ok i'll hang up now", "that should do it for today"])
def test_a_goodbye_put_as_a_question_or_after_one_still_ends(menu: IntentMatcher, transcript: str) -> None:
    """A request to end put as a question, or a goodbye after a question, is still a goodbye."""
    match = menu.match(transcript)
    assert match is not None and match.name == "goodbye", match


def test_a_question_answered_in_the_same_breath_is_the_answer(encoder: WordLlamaEncoder) -> None:
    """"what else? nah, I'm good" ends on the answer: nothing else."""
    matcher = IntentMatcher({"nothing_else": ["no", "no thank you", "nothing else", "that is all"],
                             "something_else": ["yes", "something else"]}, encoder=encoder)
    match = matcher.match("what else, nah i'm good")
    assert match is not None and match.name == "nothing_else", match


@pytest.mark.parametrize("transcript", ["send me to whoever handles complaints", "please, just someone from the bank",
                                        "i need someone to help me with a stolen card"])
def test_asked_for_someone_whatever_they_are_for(menu: IntentMatcher, transcript: str) -> None:
    """A caller who asks to be put through to someone reaches the request for a person, also when
    what the person is for is a request no intent covers (complaints, a stolen card)."""
    match = menu.match(transcript)
    assert match is not None and match.name == "agent", match


@pytest.mark.parametrize("transcript", ["someone stole my card", "I want to make a complaint"])
def test_someone_in_a_request_no_intent_covers_is_not_a_transfer(menu: IntentMatcher, transcript: str) -> None:
    """A person named without being asked for ("someone stole my card") is no request for one."""
    match = menu.match(transcript)
    assert match is None or match.name != "agent", match

"""BargeIn decisions on scripted timelines: times in seconds from the voice's onset."""
import pytest

from agent.call.bargein import BargeIn, BargeInConfig, Verdict
from agent.call.endpointer import is_acknowledgement

REQUESTS = {"check my balance", "what are your opening hours", "goodbye", "and an agent"}


def barge(**config: int) -> BargeIn:
    return BargeIn(0.0, lambda text: any(r in text for r in REQUESTS), BargeInConfig(**config))


def test_a_voice_without_words_waits_then_interrupts_at_the_minimum_length():
    b = barge()
    d = b.decide(0.05, last_voiced_at=0.05, speaking=True)
    assert d.verdict is Verdict.WAIT and d.check_in_s == pytest.approx(1.15)
    d = b.decide(1.2, last_voiced_at=1.2, speaking=True)
    assert d.verdict is Verdict.INTERRUPT and d.why == "long enough"


def test_an_interrupting_word_takes_the_turn_at_once():
    b = barge()
    b.on_words("wait")
    assert b.decide(0.2, last_voiced_at=0.2, speaking=True).verdict is Verdict.INTERRUPT


def test_a_request_waits_until_the_voice_outlasts_an_acknowledgement():
    b = barge()
    b.on_words("check my balance")
    d = b.decide(0.4, last_voiced_at=0.4, speaking=True)
    assert d.verdict is Verdict.WAIT and d.check_in_s == pytest.approx(0.31)
    d = b.decide(0.71, last_voiced_at=0.71, speaking=True)
    assert d.verdict is Verdict.INTERRUPT and d.why == "request"


def test_a_short_voice_heard_as_a_request_resumes():
    """ "mm-hmm" (600 ms) heard as "and an agent": over by the time it could be a request."""
    b = barge()
    b.on_words("and an agent")
    assert b.decide(0.5, last_voiced_at=0.5, speaking=True).verdict is Verdict.WAIT
    assert b.decide(0.8, last_voiced_at=0.6, speaking=False).verdict is Verdict.WAIT  # a pause, maybe
    d = b.decide(0.91, last_voiced_at=0.6, speaking=False)
    assert d.verdict is Verdict.RESUME and b.done


def test_a_request_with_a_pause_inside_still_interrupts():
    """ "what are your opening hours" with 150 ms of quiet after 570 ms of voice: the pause is
    not the end of it, and the voice going on makes it an interruption."""
    b = barge()
    b.on_words("what are your opening hours")
    d = b.decide(0.72, last_voiced_at=0.57, speaking=False)
    assert d.verdict is Verdict.WAIT
    assert b.decide(0.9, last_voiced_at=0.9, speaking=True).verdict is Verdict.INTERRUPT


def test_an_acknowledgement_plays_on_while_it_is_said_and_resumes_when_it_ends():
    b = barge()
    b.on_words("okay")
    d = b.decide(0.15, last_voiced_at=0.15, speaking=True)
    assert d.verdict is Verdict.TALK_OVER and b.talking_over
    d = b.decide(0.3, last_voiced_at=0.3, speaking=True)
    assert d.verdict is Verdict.TALK_OVER
    d = b.decide(0.5, last_voiced_at=0.4, speaking=False)
    assert d.verdict is Verdict.RESUME


def test_talking_over_an_acknowledgement_still_hears_an_interruption():
    b = barge()
    b.on_words("okay")
    assert b.decide(0.15, last_voiced_at=0.15, speaking=True).verdict is Verdict.TALK_OVER
    b.on_words("okay what are your opening hours")
    d = b.decide(0.9, last_voiced_at=0.9, speaking=True)
    assert d.verdict is Verdict.INTERRUPT and d.why == "request"
    b2 = barge()
    b2.on_words("okay")
    b2.decide(0.15, last_voiced_at=0.15, speaking=True)
    b2.on_words("okay stop")
    assert b2.decide(0.5, last_voiced_at=0.5, speaking=True).verdict is Verdict.INTERRUPT


def test_a_long_voice_with_unclear_words_waits_for_the_final_words():
    b = barge()
    b.on_words("the much")
    d = b.decide(0.65, last_voiced_at=0.6, speaking=False)
    assert d.verdict is Verdict.WAIT and d.check_in_s == pytest.approx(0.05)  # maybe the stop before a consonant
    d = b.decide(0.75, last_voiced_at=0.6, speaking=False)
    assert d.verdict is Verdict.WAIT and d.check_in_s == pytest.approx(0.05)  # for the final words
    b.on_words("the much", final=True)
    assert b.decide(1.0, last_voiced_at=0.6, speaking=False).verdict is Verdict.RESUME


def test_the_final_words_are_not_waited_for_forever():
    b = barge()
    assert b.decide(0.7, last_voiced_at=0.6, speaking=False).verdict is Verdict.WAIT
    assert b.decide(1.7, last_voiced_at=0.6, speaking=False).verdict is Verdict.WAIT
    assert b.decide(1.81, last_voiced_at=0.6, speaking=False).verdict is Verdict.RESUME  # 1.2 s on


def test_a_voice_without_words_ends_after_the_word_gap_an_acknowledgement_sooner():
    """No words yet: the quiet may be inside a first word, so 200 ms; "okay" said and over: 40 ms."""
    b = barge()
    assert b.decide(0.35, last_voiced_at=0.2, speaking=False).verdict is Verdict.WAIT
    assert b.decide(0.405, last_voiced_at=0.2, speaking=False).verdict is Verdict.RESUME
    b = barge()
    b.on_words("okay", at=0.1)
    assert b.decide(0.23, last_voiced_at=0.2, speaking=False).verdict is Verdict.TALK_OVER
    assert b.decide(0.245, last_voiced_at=0.2, speaking=False).verdict is Verdict.RESUME


def test_a_decided_barge_in_refuses_further_decisions():
    b = barge()
    b.on_words("stop")
    b.decide(0.1, last_voiced_at=0.1, speaking=True)
    with pytest.raises(RuntimeError):
        b.decide(0.2, last_voiced_at=0.2, speaking=True)


@pytest.mark.parametrize("text,ack", [
    ("uh-huh", True), ("mm hmm", True), ("okay", True), ("oh okay", True), ("yeah right", True),
    ("uh", False), ("um", False), ("oh", False), ("", False), ("okay what time", False), ("no", False),
])
def test_what_counts_as_an_acknowledgement(text, ack):
    assert is_acknowledgement(text) is ack


def test_a_hesitation_does_not_let_the_prompt_play_on():
    """ "um" at the start of a voice is as likely the start of a question: the prompt stays paused."""
    b = barge()
    b.on_words("um")
    assert b.decide(0.15, last_voiced_at=0.15, speaking=True).verdict is Verdict.WAIT


def test_a_held_oh_lets_the_prompt_play_on_as_okay_usually_follows():
    """ "okay" is first heard as "oh" for most of its length: held 60 ms, the prompt plays on."""
    b = barge()
    b.on_words("oh", at=0.18)
    assert b.decide(0.2, last_voiced_at=0.2, speaking=True).verdict is Verdict.WAIT
    assert b.decide(0.25, last_voiced_at=0.25, speaking=True).verdict is Verdict.TALK_OVER
    b.on_words("ok", at=0.46)
    assert b.decide(0.5, last_voiced_at=0.5, speaking=True).verdict is Verdict.TALK_OVER
    b.on_words("ok", final=True, at=0.64)
    assert b.decide(0.65, last_voiced_at=0.6, speaking=False).verdict is Verdict.RESUME


def test_a_held_mm_lets_the_prompt_play_on_as_mm_hmm_does():
    """ "mm-hmm" is heard as "mm" for most of it, "mhm" only at its end."""
    b = barge()
    b.on_words("mm", at=0.18)
    assert b.decide(0.2, last_voiced_at=0.2, speaking=True).verdict is Verdict.WAIT
    assert b.decide(0.25, last_voiced_at=0.25, speaking=True).verdict is Verdict.TALK_OVER
    b.on_words("mhm", final=True, at=0.5)
    assert b.decide(0.55, last_voiced_at=0.48, speaking=False).verdict is Verdict.RESUME


def test_an_oh_that_becomes_a_request_still_interrupts():
    b = barge()
    b.on_words("oh", at=0.1)
    assert b.decide(0.2, last_voiced_at=0.2, speaking=True).verdict is Verdict.TALK_OVER
    b.on_words("oh what are your opening hours", at=0.6)
    assert b.decide(0.6, last_voiced_at=0.6, speaking=True).verdict is Verdict.TALK_OVER
    d = b.decide(0.75, last_voiced_at=0.75, speaking=True)
    assert d.verdict is Verdict.INTERRUPT and d.why == "request"


def test_a_voice_that_goes_on_after_an_acknowledgement_is_judged_from_its_first_onset():
    """ "oh okay" (prompt plays on), a gap, then the voice comes back with a request: the voice
    has lasted 900 ms since it began, so the request interrupts."""
    b = barge()
    b.on_words("oh okay")
    assert b.decide(0.2, last_voiced_at=0.2, speaking=True).verdict is Verdict.TALK_OVER
    b.on_voice_again()
    assert not b.talking_over
    b.on_words("oh okay what are your opening hours")
    d = b.decide(0.9, last_voiced_at=0.9, speaking=True)
    assert d.verdict is Verdict.INTERRUPT and d.why == "request"


def test_an_acknowledgement_must_hold_before_the_prompt_plays_on():
    """A first guess of "yeah" that becomes "check" 40 ms later never lets the prompt play."""
    b = barge()
    b.on_words("yeah", at=0.2)
    d = b.decide(0.2, last_voiced_at=0.2, speaking=True)
    assert d.verdict is Verdict.WAIT and d.check_in_s == pytest.approx(0.061)
    b.on_words("check", at=0.24)
    assert b.decide(0.27, last_voiced_at=0.27, speaking=True).verdict is Verdict.WAIT
    assert not b.talking_over


def test_played_over_voice_that_outlasts_an_acknowledgement_pauses_the_prompt_again():
    """ "yeah" (prompt plays on), then words that are not an acknowledgement past 700 ms: pause."""
    b = barge()
    b.on_words("yeah", at=0.2)
    assert b.decide(0.3, last_voiced_at=0.3, speaking=True).verdict is Verdict.TALK_OVER
    b.on_words("yeah the much", at=0.5)
    assert b.decide(0.6, last_voiced_at=0.6, speaking=True).verdict is Verdict.TALK_OVER
    d = b.decide(0.75, last_voiced_at=0.75, speaking=True)
    assert d.verdict is Verdict.PAUSE and not b.talking_over
    assert b.decide(1.2, last_voiced_at=1.2, speaking=True).verdict is Verdict.INTERRUPT


def test_a_voice_back_soon_after_the_prompt_resumed_rejoins_the_barge_in():
    b = barge()
    assert b.decide(0.35, last_voiced_at=0.1, speaking=False).verdict is Verdict.RESUME
    assert b.rejoins(0.7) and not b.rejoins(0.8)
    b.revive()
    assert not b.done and b.resumed_at is None and not b.rejoins(0.7)


def test_the_rest_of_an_acknowledgement_after_its_start_is_talked_over():
    """ "o | kay": the voice ends on "oh" (the stop before the "k") and the prompt resumes; the
    voice back within rejoin_ms is the rest of the acknowledgement: the revived barge-in plays the
    prompt on over it, and still stops it when the words become a request."""
    b = barge()
    b.on_words("oh", at=0.15)
    assert b.decide(0.25, last_voiced_at=0.2, speaking=False).verdict is Verdict.RESUME
    assert b.resumed_on_onset
    b.revive()
    assert b.talking_over and not b.resumed_on_onset
    b.on_words("ok", at=0.35)
    assert b.decide(0.45, last_voiced_at=0.45, speaking=True).verdict is Verdict.TALK_OVER
    b.on_words("ok what are your opening hours", at=0.7)
    d = b.decide(0.75, last_voiced_at=0.75, speaking=True)
    assert d.verdict is Verdict.INTERRUPT and d.why == "request"


def test_a_voice_back_after_other_words_is_judged_paused_again():
    """A voice that ended on words that are not the start of an acknowledgement ("sure", which may
    be the recogniser's first guess at "ch" of "check") is paused again when it comes back."""
    for words_before, over_at in (("sure", 0.45), ("", 0.45), ("the", 1.01)):
        b = barge()
        b.on_words(words_before, at=0.15)
        assert b.decide(over_at, last_voiced_at=0.2, speaking=False).verdict is Verdict.RESUME
        assert not b.resumed_on_onset
        b.revive()
        assert not b.talking_over


def test_words_left_unfinished_keep_the_floor_through_a_pause():
    """ "can i" (400 ms), then quiet: a caller pausing inside a sentence, not a misheard
    acknowledgement over after the stop before a consonant. The prompt (ducked by then) does not
    come back for 800 ms; the voice coming back within that is the same barge-in."""
    b = barge()
    b.on_words("can i", at=0.3)
    assert b.decide(0.55, last_voiced_at=0.4, speaking=False).verdict is Verdict.WAIT
    assert b.decide(1.15, last_voiced_at=0.4, speaking=False).verdict is Verdict.WAIT
    b.on_words("can i get someone on the line", at=1.3)
    d = b.decide(1.6, last_voiced_at=1.6, speaking=True)
    assert d.verdict is Verdict.INTERRUPT and d.why == "long enough"
    b = barge()
    b.on_words("can i", at=0.3)
    assert b.decide(1.21, last_voiced_at=0.4, speaking=False).verdict is Verdict.RESUME


def _said(text: str, voice_s: float, confidence: float | None) -> BargeIn:
    """A voice of *voice_s* heard as *text*, its final words arriving 300 ms after it ended."""
    b = barge()
    b.on_words(text, at=0.3)
    assert b.decide(voice_s + 0.05, last_voiced_at=voice_s, speaking=False).verdict is Verdict.WAIT
    b.on_words(text, final=True, at=voice_s + 0.3, confidence=confidence)
    return b


def test_a_sentence_over_the_prompt_takes_the_turn_once_its_final_words_are_in():
    """ "I'm out, thanks" (740 ms) heard as "i'm out saying": no request of the question and
    shorter than interruption_min_ms, but resuming the prompt over it would lose the caller's words."""
    b = _said("i'm out saying", 0.74, 0.71)
    d = b.decide(0.74 + 0.3, last_voiced_at=0.74, speaking=False)
    assert d.verdict is Verdict.INTERRUPT and d.why == "words"


def test_the_start_of_a_sentence_keeps_the_floor_too():
    b = _said("i would like to", 0.8, 0.9)
    assert b.decide(1.1, last_voiced_at=0.8, speaking=False).verdict is Verdict.INTERRUPT


@pytest.mark.parametrize("text, voice_s, confidence", [
    ("and then make them", 0.86, 0.24),    # "mm hmm" heard as words, with little confidence
    ("that is", 0.32, 0.87),               # "got it": too short to be a sentence
    ("okay great", 0.94, 0.55),            # acknowledgements, whatever their length
    ("sounds good thank you", 0.9, 0.9),
    ("mhm eight mhm", 0.86, 0.8),          # one word besides the acknowledgement
    ("i'm out saying", 0.74, None),        # a recogniser that gives no confidence: as before
])
def test_an_acknowledgement_heard_as_words_lets_the_prompt_resume(text, voice_s, confidence):
    b = _said(text, voice_s, confidence)
    assert b.decide(voice_s + 0.9, last_voiced_at=voice_s, speaking=False).verdict is Verdict.RESUME


def test_the_sentence_rule_waits_for_the_final_words():
    """Interim words are not enough: the recogniser may still revise them."""
    b = barge()
    b.on_words("i'm out saying", at=0.5)
    d = b.decide(0.9, last_voiced_at=0.74, speaking=False)
    assert d.verdict is Verdict.WAIT


def test_final_words_that_come_late_are_still_waited_for():
    """ "check my balance" (940 ms) heard as "check my that" until its final words came 900 ms
    after the voice (a loaded machine): the request is heard, not let go."""
    b = barge()
    b.on_words("check my that", at=0.6)
    assert b.decide(0.94 + 0.9, last_voiced_at=0.94, speaking=False).verdict is Verdict.WAIT
    b.on_words("check my balance", final=True, at=0.94 + 0.9, confidence=0.8)
    d = b.decide(0.94 + 0.9, last_voiced_at=0.94, speaking=False)
    assert d.verdict is Verdict.INTERRUPT and d.why == "request"


def test_a_hesitation_keeps_the_floor_like_unfinished_words():
    """ "uh," then a pause: the start of a question ("uh, can I get a staff member ..."), not an
    acknowledgement over; "oh" still ends as the start of one ("o | kay")."""
    b = barge()
    b.on_words("uh", at=0.2)
    assert b.decide(0.6, last_voiced_at=0.25, speaking=False).verdict is Verdict.WAIT
    b = barge()
    b.on_words("oh", at=0.2)
    assert b.decide(0.3, last_voiced_at=0.25, speaking=False).verdict is Verdict.RESUME and b.resumed_on_onset


def test_a_noise_burst_heard_as_a_hesitation_is_over_when_it_stops():
    """A 150 ms burst the recogniser turns into "uh" or "the" is no start of a sentence: the
    prompt comes back after the usual gap, not 800 ms later."""
    for heard, over_at in (("uh", 0.2), ("the", 0.26)):
        b = barge()
        b.on_words(heard, at=0.1)
        assert b.decide(over_at, last_voiced_at=0.15, speaking=False).verdict is Verdict.RESUME, heard


MEANT = {"so long", "good night", "indeed i do", "okay great", "all right and"}


def _meant(text: str, voice_s: float, confidence: float | None, *, with_final: bool = True) -> tuple[BargeIn, list[str]]:
    """A voice of *voice_s* heard as *text* at an ask whose dialogue understands MEANT by meaning
    (and records what it was asked), its final words 300 ms after it ended."""
    asked: list[str] = []

    def is_meant(t: str) -> bool:
        asked.append(t)
        return t in MEANT

    b = BargeIn(0.0, lambda text: False, BargeInConfig(), is_meant=is_meant)
    b.on_words(text, at=0.2)
    if with_final:
        assert b.decide(voice_s + 0.05, last_voiced_at=voice_s, speaking=False).verdict is Verdict.WAIT
        b.on_words(text, final=True, at=voice_s + 0.3, confidence=confidence)
    return b, asked


def test_a_short_request_by_meaning_over_the_prompt_takes_the_turn():
    """ "so long" (520 ms) over a prompt: shorter than a sentence must be, no example's words,
    but the question understands it by meaning: once its final words are in, it takes the turn
    (asked of the dialogue once, however often the verdict is checked)."""
    b, asked = _meant("so long", 0.52, 0.8)
    d = b.decide(0.85, last_voiced_at=0.52, speaking=False)
    assert d.verdict is Verdict.INTERRUPT and d.why == "request by meaning"
    assert asked == ["so long"]


@pytest.mark.parametrize("text, voice_s, confidence", [
    ("good night", 0.25, 0.9),      # shorter than meaning_min_ms: a quick acknowledgement misheard
    ("indeed i do", 0.76, 0.16),    # heard with little confidence
    ("okay great", 0.6, 0.9),       # acknowledging words only: a goodbye by meaning, but over a prompt
    ("all right and", 0.66, 0.9),   # left unfinished
    ("check my card", 0.6, 0.9),    # not understood by meaning
])
def test_what_is_no_short_request_by_meaning_lets_the_prompt_resume(text, voice_s, confidence):
    b, _ = _meant(text, voice_s, confidence, with_final=voice_s >= 0.3)
    if voice_s < 0.3:  # too short to wait for final words: over once the words' gap has passed
        assert b.decide(voice_s + 0.2, last_voiced_at=voice_s, speaking=False).verdict is Verdict.RESUME
        return
    assert b.decide(voice_s + 0.9, last_voiced_at=voice_s, speaking=False).verdict is Verdict.RESUME


def test_a_short_voice_with_words_waits_for_the_final_only_when_meaning_is_asked():
    """Without an is_meant hook (the recogniser's final is not needed), a 400 ms voice with other
    words is over after the words' gap, as before."""
    b = BargeIn(0.0, lambda text: False, BargeInConfig())
    b.on_words("so long", at=0.2)
    assert b.decide(0.55, last_voiced_at=0.4, speaking=False).verdict is Verdict.RESUME
    b, _ = _meant("so long", 0.4, 0.8, with_final=False)
    assert b.decide(0.55, last_voiced_at=0.4, speaking=False).verdict is Verdict.WAIT

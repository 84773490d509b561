"""TurnEndpointer and TranscriptAssembler on scripted timelines (written in milliseconds, fed as seconds; no clock)."""
import pytest

from agent.call.prosody import ProsodyReading
from agent.call.completeness import Completeness, completeness, one_word_among_others
from agent.call.endpointer import (
    EndpointerConfig, TranscriptAssembler, TurnEndpointer, ends_sentence, is_backchannel,
)


def unfinished(text: str) -> bool:
    return completeness(text) is Completeness.UNFINISHED


def ms(t: float) -> float:
    """A time stamp written in milliseconds, as the endpointer's seconds."""
    return t / 1000.0


COMPLETE = {"check my balance", "what are your opening hours", "goodbye"}


def make() -> TurnEndpointer:
    return TurnEndpointer(lambda text: text in COMPLETE, EndpointerConfig(
        complete_silence_ms=60, finished_silence_ms=60, incomplete_silence_ms=800, continuation_silence_ms=1400))


def test_complete_request_ends_after_a_short_silence():
    """ "check my balance" then 60 ms of silence ends the turn, stamped at the end of speech."""
    ep = make()
    ep.on_speech_start(ms(1000))
    assert ep.on_transcript("check my balance", ms(1700)) is None  # still speaking
    assert ep.on_speech_end(ms(1800), ms(1840)) is None
    assert ep.next_deadline() == pytest.approx(ms(1860))
    d = ep.poll(ms(1860))
    assert d is not None and d.text == "check my balance" and d.reason == "complete"
    assert (d.speech_end_at, d.decided_at) == pytest.approx((ms(1800), ms(1860)))
    assert not ep.in_turn


def test_a_request_by_meaning_ends_after_its_own_silence_and_is_asked_only_in_silence():
    """Words the ask takes by meaning only ("how much money is left") end the turn after
    meaning_silence_ms, between the sure request's and the finished sentence's; the meaning is
    not asked while the caller speaks."""
    asked: list[str] = []

    def meant(text: str) -> bool:
        asked.append(text)
        return text == "how much money is left"
    ep = TurnEndpointer(lambda text: text in COMPLETE, EndpointerConfig(
        complete_silence_ms=30, meaning_silence_ms=200, finished_silence_ms=600), is_meant=meant)
    ep.on_speech_start(ms(0))
    assert ep.on_transcript("how much money is left", ms(900)) is None
    assert asked == []  # still speaking
    assert ep.on_speech_end(ms(1000), ms(1030)) is None
    assert asked == ["how much money is left"]
    assert ep.next_deadline() == pytest.approx(ms(1200))
    d = ep.poll(ms(1200))
    assert d is not None and d.reason == "meaning"
    ep.on_speech_start(ms(2000))
    ep.on_transcript("my card was stolen yesterday", ms(2900))
    ep.on_speech_end(ms(3000), ms(3030))
    assert ep.next_deadline() == pytest.approx(ms(3600))  # finished, no request: 600 ms


def test_finished_words_heard_with_confidence_end_after_the_confident_silence():
    """Finished words that are all final results heard with confidence >= 0.6 end the turn after
    confident_silence_ms (400) instead of the finished sentence's 600; words heard with less,
    words still interim, unfinished words and words ending on a spoken digit (a number read in
    groups) do not; a shorter meaning silence still wins."""
    def turn(text: str, confidence: float | None, config: EndpointerConfig | None = None,
             meant: bool = False) -> tuple[float | None, str]:
        ep = TurnEndpointer(lambda t: False, config or EndpointerConfig(), is_meant=lambda t: meant)
        ep.on_speech_start(ms(0))
        ep.on_speech_end(ms(1500), ms(1530))
        assert ep.on_transcript(text, ms(1540), confidence) is None
        deadline = ep.next_deadline()
        d = ep.poll(deadline) if deadline is not None else None
        assert d is not None and d.confidence == confidence
        return round((deadline - ms(1500)) * 1000), d.reason

    assert turn("my card was stolen yesterday", 0.82) == (400, "confident")
    assert turn("my card was stolen yesterday", 0.6) == (400, "confident")
    assert turn("my card was stolen yesterday", 0.55) == (600, "finished")
    assert turn("it's two six four one", 0.9) == (600, "finished")
    assert turn("my card was stolen yesterday", None) == (600, "finished")   # interim words
    assert turn("i would like to", 0.9) == (800, "continuation")
    assert turn("how much money is left", 0.9, meant=True) == (400, "confident")
    meaning_300 = EndpointerConfig(meaning_silence_ms=300)
    assert turn("how much money is left", 0.9, meaning_300, meant=True) == (300, "meaning")
    off = EndpointerConfig(confident_silence_ms=600)
    assert turn("my card was stolen yesterday", 0.9, off) == (600, "finished")


def test_finished_words_written_as_a_whole_sentence_end_after_the_sentence_silence():
    """Finished words (or a request by meaning) whose latest result the recogniser ended with a
    full stop or a question mark end the turn after sentence_end_silence_ms (250); unfinished
    words so written still wait for the rest, and so do spoken digits (read out in groups);
    words with no mark wait as before, and a mark
    shortens nothing when the sentence silence is no shorter."""
    def turn(text: str, mark: bool, config: EndpointerConfig | None = None, meant: bool = False,
             confidence: float | None = None) -> tuple[float | None, str]:
        ep = TurnEndpointer(lambda t: False, config or EndpointerConfig(), is_meant=lambda t: meant)
        ep.on_speech_start(ms(0))
        ep.on_speech_end(ms(1500), ms(1530))
        assert ep.on_transcript(text, ms(1540), confidence, sentence_end=mark) is None
        deadline = ep.next_deadline()
        d = ep.poll(deadline) if deadline is not None else None
        assert d is not None
        return round((deadline - ms(1500)) * 1000), d.reason

    assert turn("my card was stolen yesterday", True) == (250, "sentence")
    assert turn("my card was stolen yesterday", False) == (600, "finished")
    assert turn("my card was stolen yesterday", True, confidence=0.9) == (250, "sentence")
    assert turn("how much money is left", True, meant=True) == (250, "sentence")
    assert turn("i would like to", True) == (800, "continuation")
    assert turn("checking account", True) == (800, "incomplete")
    assert turn("it's two six four one", True) == (600, "finished")  # a number's first group
    assert turn("my card was stolen yesterday", True, EndpointerConfig(sentence_end_silence_ms=600)) == (600, "finished")
    assert not EndpointerConfig(sentence_end_silence_ms=600).uses_sentence_marks
    assert EndpointerConfig().uses_sentence_marks


def test_a_sentence_mark_is_a_full_stop_a_question_or_an_exclamation_mark_at_the_end():
    for text in ("My card was stolen yesterday.", "can i speak to someone please?", "Thanks!", 'he said "bye."'):
        assert ends_sentence(text), text
    for text in ("my card was stolen yesterday", "I was wondering...", "I was wondering…", "well, i",
                 "Mr. Smith is", "i want to set up,", ""):
        assert not ends_sentence(text), text


def test_the_sentence_mark_is_the_latest_results():
    """The turn's words are written as a whole sentence when the latest result -- the open
    utterance's interim, else the last final -- ends with a mark; the words themselves carry none."""
    words = TranscriptAssembler()
    assert not words.sentence_end
    assert words.on_interim("I want to set up.") == "i want to set up"
    assert words.sentence_end
    assert words.on_interim("I want to set up direct") == "i want to set up direct"
    assert not words.sentence_end
    text, _ = words.on_final("I want to set up direct deposit.", confidence=0.8)
    assert text == "i want to set up direct deposit" and words.sentence_end
    words.on_interim("and")
    assert not words.sentence_end
    words.on_final("and a savings account", confidence=0.8)
    assert not words.sentence_end
    words.reset()
    assert not words.sentence_end


def test_a_restored_turn_has_no_sentence_mark_until_the_recogniser_writes_one_again():
    """Undoing a premature consume brings back the words but not the mark of a result that came
    after them (unknown, like their confidence): the turn waits its usual silence."""
    words = TranscriptAssembler()
    words.on_final("I want to set up", confidence=0.8)
    before = words.snapshot()
    words.on_final("direct deposit.", confidence=0.8)
    assert words.sentence_end
    words.restore(before)
    assert words.text == "i want to set up" and not words.sentence_end
    words.on_final("direct deposit.", confidence=0.8)
    assert words.sentence_end


def test_transcript_arriving_after_the_silence_decides_at_once():
    """When the words that complete the request arrive late, the turn ends on their arrival."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_transcript("check my", ms(500))
    assert ep.on_speech_end(ms(900), ms(940)) is None
    assert ep.poll(ms(1000)) is None
    d = ep.on_transcript("check my balance", ms(1010))
    assert d is not None and d.decided_at == ms(1010) and d.speech_end_at == ms(900)


def test_unfinished_phrase_waits_through_a_500_ms_pause():
    """ "I would like to" + 500 ms pause is not a turn end; the rest of the sentence joins it."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_transcript("i would like to", ms(800))
    assert ep.on_speech_end(ms(900), ms(940)) is None
    assert ep.poll(ms(1400)) is None
    assert ep.next_deadline() == pytest.approx(ms(900 + 1400))
    ep.on_speech_start(ms(1400))
    ep.on_transcript("i would like to check my balance", ms(2100))
    assert ep.on_speech_end(ms(2200), ms(2240)) is None
    d = ep.poll(ms(2260))  # the whole phrase is a finished sentence, though not an intent example
    assert d is not None and d.reason == "finished" and d.text.endswith("check my balance")


def test_words_that_are_not_a_request_wait_the_incomplete_silence():
    """Words neither finished nor unfinished ("my card"), with no request of the ask, end the
    turn only after 800 ms of silence."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_transcript("my card", ms(600))
    ep.on_speech_end(ms(700), ms(740))
    assert ep.poll(ms(1499)) is None
    assert ep.poll(ms(1500)).reason == "incomplete"


def test_a_complete_request_needs_enough_speech():
    """A 100 ms blip recognised as "goodbye" does not end a turn on meaning alone."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_transcript("goodbye", ms(100))
    ep.on_speech_end(ms(100), ms(140))
    assert ep.poll(ms(200)) is None
    assert ep.poll(ms(900)) is not None


def test_a_one_word_request_waits_the_short_turn_silence():
    """ "no" in 250 ms of speech, or the "what" of "what time do you open" heard as a complete
    word before the stop of "time": 250 ms of silence, not 40, ends such a turn."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_transcript("goodbye", ms(200))
    assert ep.on_speech_end(ms(250), ms(290)) is None
    assert ep.poll(ms(400)) is None and ep.next_deadline() == pytest.approx(ms(500))
    ep.on_speech_start(ms(420))  # the caller goes on: no decision was made
    assert ep.in_turn and ep.on_speech_end(ms(1200), ms(1240)) is None
    d = ep.poll(ms(1260))
    assert d is not None and d.reason == "complete"
    ep.on_speech_start(ms(2000))
    ep.on_transcript("goodbye", ms(2200))
    ep.on_speech_end(ms(2250), ms(2290))
    d = ep.poll(ms(2500))
    assert d is not None and d.reason == "short" and d.silence_s == pytest.approx(ms(250))


def _reason_after(ep: TurnEndpointer, text: str, wait_ms: int) -> str:
    """*text* heard in 500 ms of speech: the turn ends exactly *wait_ms* after it; the reason."""
    ep.on_speech_start(ms(0))
    ep.on_transcript(text, ms(400))
    assert ep.on_speech_end(ms(500), ms(510)) is None
    assert ep.next_deadline() == pytest.approx(ms(500 + wait_ms)), text
    d = ep.poll(ms(500 + wait_ms))
    assert d is not None, text
    return d.reason


def test_a_yes_or_no_alone_waits_the_answer_silence():
    """ "yeah" at "anything else?" is a request (something else) in itself, but callers go on
    after it past a comma's pause ("yeah, | I have another question"): answer_silence_ms (500),
    not complete_silence_ms; "yes please" and longer requests still end after the short one. At a
    yes/no question, where a yes alone is most often the whole answer, it waits
    yes_no_answer_silence_ms (250)."""
    yes = {"yeah", "um no", "yes please", "check my balance"}
    for text, wait_ms, reason in (("yeah", 500, "answer"), ("um no", 500, "answer"),
                                  ("yes please", 30, "complete"), ("check my balance", 30, "complete")):
        assert _reason_after(TurnEndpointer(lambda t: t in yes, EndpointerConfig()), text, wait_ms) == reason, text
    for text in ("yeah", "um no"):
        at_question = TurnEndpointer(lambda t: t in yes, EndpointerConfig(), at_yes_no=lambda: True)
        assert _reason_after(at_question, text, 250) == "answer", text
    ep = TurnEndpointer(lambda t: t in yes, EndpointerConfig(answer_silence_ms=10))
    ep.on_speech_start(ms(0))
    ep.on_transcript("yeah", ms(400))
    assert ep.on_speech_end(ms(500), ms(520)) is None, "never shorter than complete_silence_ms"
    d = ep.poll(ms(530))
    assert d is not None and d.reason == "answer"


def test_a_request_resting_on_one_word_among_others_waits_the_answer_silence():
    """ "i want them one" (the recogniser's reading of "I want someone to ...") is key one among
    other words, "and yeah" the yes of something else: as unsure as a bare answer, they wait
    answer_silence_ms (500); "an agent please", the key alone and many-word requests do not."""
    examples = {"i want them one": "one", "and yeah": "yeah", "an agent please": "agent", "option one": "one",
                "i'd like to check my balance": "check my balance"}

    def rests(text: str) -> bool:
        return one_word_among_others(examples[text], text)
    for text, wait_ms, reason in (("i want them one", 500, "one_word"), ("and yeah", 500, "one_word"),
                                  ("an agent please", 30, "complete"), ("option one", 30, "complete"),
                                  ("i'd like to check my balance", 30, "complete")):
        ep = TurnEndpointer(lambda t: t in examples, EndpointerConfig(), rests_on_one_word=rests)
        assert _reason_after(ep, text, wait_ms) == reason, text


def test_one_word_among_others():
    assert one_word_among_others("one", "i want them one")
    assert one_word_among_others("yeah", "yep here")
    assert one_word_among_others("balance", "my balance is wrong")
    assert not one_word_among_others("one", "um, option one please")
    assert not one_word_among_others("agent", "an agent, thank you")
    assert not one_word_among_others("goodbye", "goodbye")
    assert not one_word_among_others("check my balance", "i'd like to check my balance")


def test_silence_counts_from_the_latest_voiced_frame():
    """The VAD reported the end of "check my balance" at a dip, but the last sound of "balance"
    came after it: the 60 ms are counted from that sound, not from the reported end."""
    last_voiced = [ms(1800)]
    ep = TurnEndpointer(lambda text: text in COMPLETE, EndpointerConfig(complete_silence_ms=60),
                        last_voiced_at=lambda: last_voiced[0])
    ep.on_speech_start(ms(1000))
    ep.on_transcript("check my balance", ms(1700))
    assert ep.on_speech_end(ms(1800), ms(1840)) is None
    last_voiced[0] = ms(1850)  # voice again, too short for the VAD to report a new start
    assert ep.poll(ms(1860)) is None
    assert ep.next_deadline() == pytest.approx(ms(1910))
    d = ep.poll(ms(1910))
    assert d is not None and d.speech_end_at == ms(1850) and d.reason == "complete"


def test_noise_without_words_ends_only_after_the_long_silence():
    """Speech the recogniser found no words in ends with an empty turn after 800 ms."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_speech_end(ms(300), ms(340))
    assert ep.poll(ms(1000)) is None
    d = ep.poll(ms(1100))
    assert d is not None and d.text == ""


def test_phrase_classifiers():
    """Unfinished phrases end with a function word; backchannels are acknowledgements."""
    assert unfinished("I would like to") and unfinished("check my")
    assert not unfinished("check my balance")
    assert is_backchannel("uh-huh") and is_backchannel("okay") and is_backchannel("mm hmm") and is_backchannel("")
    assert not is_backchannel("okay check my balance")


def test_assembler_joins_utterances_of_one_turn():
    """Two recogniser utterances (a pause between) make one turn text."""
    a = TranscriptAssembler()
    a.on_interim("i would like")
    text, extra = a.on_final("i would like to")
    assert text == "i would like to" and extra == []
    assert a.on_interim("check my") == "i would like to check my"


def test_assembler_keeps_the_recognisers_commas_inside_the_words():
    """A comma or a sentence mark the recogniser wrote between words stays, as a comma (the
    dialogue matches a request by its part), and so does the mark of a final written as a whole
    sentence when more words follow; a mark after the turn's last word is the sentence end's
    (:func:`ends_sentence`), not part of the text; consumed words compare without them."""
    a = TranscriptAssembler()
    assert a.on_interim("Hi, what's my balance?") == "hi, what's my balance"
    assert a.sentence_end
    text, _ = a.on_final("hi, what's my balance. thanks.")
    assert text == "hi, what's my balance, thanks"
    assert a.on_interim("and my savings") == "hi, what's my balance, thanks, and my savings"
    b = TranscriptAssembler()
    b.on_interim("yes please, my balance")
    b.consume()
    assert b.on_final("yes please, my balance, thanks")[0] == "thanks"


def test_assembler_does_not_repeat_words_consumed_mid_utterance():
    """After a decision on an interim, the utterance's later results lose the consumed words."""
    a = TranscriptAssembler()
    a.on_interim("check my balance")
    assert a.consume() == "check my balance"
    assert a.on_interim("check my balance") == ""
    text, extra = a.on_final("check my balance")
    assert text == "" and extra == []
    assert a.on_interim("goodbye") == "goodbye"


def test_assembler_reports_words_said_after_a_decision():
    """Words the caller added after the agent decided show up as extra: a cut-in seen after the fact."""
    a = TranscriptAssembler()
    a.on_interim("check my balance")
    a.consume()
    text, extra = a.on_final("check my balance and my savings")
    assert extra == ["and", "my", "savings"] and text == "and my savings"


def test_assembler_restores_words_set_aside_too_soon():
    """Words consumed when a barge-in let the prompt resume come back if the same voice does: a
    revision of them ("oh" -> "ok") is then the voice's words, not dropped as already consumed."""
    a = TranscriptAssembler()
    a.on_interim("oh")
    state = a.snapshot()
    a.consume()
    assert a.on_interim("ok") == ""
    a.restore(state)
    assert a.on_interim("ok") == "ok"


def test_assembler_drops_a_set_aside_voices_late_revision_but_not_words_of_a_new_voice():
    """Words a barge-in set aside are no turn's: the utterance's final revising them ("you" ->
    "you have") with no voice since is dropped, and is no cut-in; after a new voice it is kept."""
    a = TranscriptAssembler()
    a.on_interim("you")
    a.set_aside(at=10.0)
    assert a.on_final("you have", last_voice_at=9.9) == ("", [])
    assert a.on_interim("yeah") == "yeah"
    a = TranscriptAssembler()
    a.on_interim("you")
    a.set_aside(at=10.0)
    assert a.on_final("you what time", last_voice_at=10.2) == ("what time", [])


# -- turn-end signals beyond the intent match -----------------------------------------------
def test_a_finished_sentence_with_no_intent_ends_after_the_short_silence():
    """An out-of-scope "my card was stolen yesterday" gets its answer (a reprompt) as fast as a
    request of the ask: finished words need no intent for the short silence."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_transcript("my card was stolen yesterday", ms(1500))
    assert ep.on_speech_end(ms(1600), ms(1630)) is None
    d = ep.poll(ms(1660))
    assert d is not None and d.reason == "finished" and d.silence_s == pytest.approx(ms(60))


def test_unfinished_words_wait_even_when_an_intent_matches():
    """ "hi there I'd like to..." heard mid-breath as "bye that i'd will" matches goodbye, but
    ends on a modal: the continuation silence, not the short one, ends it."""
    ep = TurnEndpointer(lambda text: True, EndpointerConfig(complete_silence_ms=60, continuation_silence_ms=1000))
    ep.on_speech_start(ms(0))
    ep.on_transcript("bye that i'd will", ms(700))
    ep.on_speech_end(ms(800), ms(830))
    assert ep.poll(ms(1700)) is None and ep.next_deadline() == pytest.approx(ms(1800))
    ep.on_speech_start(ms(1100))  # the breath is over: "...like to know how much is in my account"
    ep.on_transcript("bye that i'd like to know how much is in my account", ms(2900))
    ep.on_speech_end(ms(3000), ms(3030))
    d = ep.poll(ms(3060))
    assert d is not None and d.reason == "complete" and d.text.endswith("my account")


def test_words_closed_by_a_tag_are_a_finished_sentence_not_a_request_at_once():
    """ "right, i'll be off then" no longer waits as words that go on ("then" is a conjunction
    elsewhere), but a recogniser also writes "then" inside a sentence ("i want to open then" for
    "i want to open | an account"), so an intent its words match does not end it after the short
    silence: the finished sentence's does."""
    ep = TurnEndpointer(lambda text: True, EndpointerConfig(complete_silence_ms=60, finished_silence_ms=600,
                                                            continuation_silence_ms=1000))
    ep.on_speech_start(ms(0))
    ep.on_transcript("i want to open then", ms(700))
    ep.on_speech_end(ms(800), ms(830))
    assert ep.poll(ms(1300)) is None and ep.next_deadline() == pytest.approx(ms(1400))
    d = ep.poll(ms(1400))
    assert d is not None and d.reason == "finished"
    ep.on_speech_start(ms(2000))
    ep.on_transcript("and then", ms(2400))
    ep.on_speech_end(ms(2500), ms(2530))
    assert ep.next_deadline() == pytest.approx(ms(3500))  # "and then": more is coming


def test_a_discourse_marker_alone_waits_for_what_it_announces_even_when_an_intent_matches():
    """ "actually | there's one more thing": a lone "actually", which the sentence encoder may
    put near "something else", is no turn yet; the continuation silence ends it, not the short
    one."""
    ep = TurnEndpointer(lambda text: True, EndpointerConfig(complete_silence_ms=60, continuation_silence_ms=1000))
    assert _reason_after(ep, "actually", 1000) == "continuation"
    ep = TurnEndpointer(lambda text: True, EndpointerConfig(complete_silence_ms=60, continuation_silence_ms=1000))
    assert _reason_after(ep, "actually one more thing", 60) == "complete"


def reading(ended_at_ms: float, slope: float) -> ProsodyReading:
    return ProsodyReading(ms(ended_at_ms), slope, 0.0, 1.0, 20)


def test_undecided_words_said_with_a_falling_voice_wait_the_falling_silence():
    """ "my balance" (no verb: an answer, or the start of one) ends after falling_silence_ms when
    the voice fell at its end, after incomplete_silence_ms when it stayed level."""
    config = EndpointerConfig(complete_silence_ms=60, falling_silence_ms=300, incomplete_silence_ms=800)
    for slope, need_ms, reason in ((-20.0, 300, "falling"), (0.0, 800, "incomplete")):
        ep = TurnEndpointer(lambda text: False, config, prosody=lambda: reading(1000, slope))
        ep.on_speech_start(ms(0))
        ep.on_transcript("my balance", ms(900))
        ep.on_speech_end(ms(1000), ms(1030))
        assert ep.poll(ms(1000 + need_ms - 1)) is None
        d = ep.poll(ms(1000 + need_ms))
        assert d is not None and d.reason == reason


def test_a_prosody_reading_of_an_earlier_voiced_run_is_ignored():
    """A fall measured at the end of an earlier run (600 ms before this one ended) says nothing
    about how the turn ends: the undecided words wait the incomplete silence."""
    config = EndpointerConfig(falling_silence_ms=300, incomplete_silence_ms=800)
    ep = TurnEndpointer(lambda text: False, config, prosody=lambda: reading(400, -30.0))
    ep.on_speech_start(ms(0))
    ep.on_transcript("my balance", ms(900))
    ep.on_speech_end(ms(1000), ms(1030))
    assert ep.poll(ms(1300)) is None
    assert ep.poll(ms(1800)).reason == "incomplete"


def test_the_recognisers_confidence_goes_with_the_decision():
    """Words made of final results carry the recogniser's confidence to the decision; an interim
    carries none."""
    ep = make()
    ep.on_speech_start(ms(0))
    ep.on_transcript("check my balance", ms(900), confidence=0.42)
    ep.on_speech_end(ms(1000), ms(1030))
    assert ep.poll(ms(1060)).confidence == 0.42
    a = TranscriptAssembler()
    a.on_final("check my", confidence=0.9)
    assert a.confidence == 0.9
    a.on_interim("balance")
    assert a.confidence is None
    a.on_final("balance", confidence=0.6)
    assert a.confidence == 0.6
    a.consume()
    assert a.confidence is None


def test_finished_words_with_no_intent_end_sooner_when_the_voice_fell():
    """Finished words that are no request of the ask ("my card was stolen") wait
    falling_finished_silence_ms after a falling voice, finished_silence_ms after a level one:
    the pauses between a sentence's words are as long as the shorter silence."""
    config = EndpointerConfig(finished_silence_ms=400, falling_finished_silence_ms=200)
    for slope, need_ms in ((-20.0, 200), (0.0, 400)):
        ep = TurnEndpointer(lambda text: False, config, prosody=lambda: reading(1000, slope))
        ep.on_speech_start(ms(0))
        ep.on_transcript("my card was stolen", ms(900))
        ep.on_speech_end(ms(1000), ms(1030))
        assert ep.poll(ms(1000 + need_ms - 1)) is None
        d = ep.poll(ms(1000 + need_ms))
        assert d is not None and d.reason == "finished"


def test_assembler_gives_the_other_readings_of_the_latest_result_after_the_turns_earlier_words():
    a = TranscriptAssembler()
    a.on_interim("i would like")
    a.on_final("i would like to")
    assert a.alternatives == ()
    a.on_alternatives(("check my balance", "check the balance"))
    a.on_interim("chuck my ballot")
    assert a.alternatives == ("i would like to check my balance", "i would like to check the balance")
    # The final comes with its own readings, or none.
    a.on_alternatives(("check my balance",))
    a.on_final("chuck my ballot")
    assert a.alternatives == ("i would like to check my balance",)
    a.on_final("please")
    assert a.alternatives == ()


def test_assembler_readings_lose_the_words_a_decision_took_and_are_gone_after_it():
    a = TranscriptAssembler()
    a.on_alternatives(("check my balance",))
    a.on_interim("chuck my")
    a.consume()
    assert a.alternatives == ()
    a.on_alternatives(("check my balance please", "chuck my", "chuck my balance lease"))
    assert a.on_interim("chuck my balance please") == "balance please"
    # Past the two words taken, the first reading is the words themselves and the second is
    # nothing: only the third is another reading.
    assert a.alternatives == ("balance lease",)
    a.reset()
    assert a.alternatives == ()

"""Whisper for open speech (agent.speech.server.open_speech, agent.speech.server.whisper): when the
hint decoder's words stand, when Whisper's replace them, how often Whisper runs, and Whisper's own
text clean-up. The last test transcribes real synthesised speech with the bundled model."""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
import pytest

from agent.speech.server.open_speech import (MAX_VOICE_WITHOUT_WORDS_MS, MIN_WORD_POSTERIOR, SENTENCE_END_MIN_CONFIDENCE,
                                             OpenSpeechDecoder)
from agent.speech.server.recognizer import EndpointingParams, FinalHypothesis, InterimHypothesis, UtteranceRecognizer
from agent.speech.server.whisper import Transcript, cut_repeat, normalise, normalise_with_commas
from tests.unit.test_recognizer_flush import FakeDecoder, LevelClassifier, Seg, silence, tone


class ScriptedTranscriber:
    """Says *text*; records the length of each audio it was given."""

    def __init__(self, text: str = "my card was stolen yesterday", alternatives: tuple[str, ...] = (),
                 sentence_end: float = 0.0, question: bool = False, commas: tuple[int, ...] = (),
                 confidence: float = 0.8) -> None:
        self.text = text
        self.commas = commas
        self.confidence = confidence
        self.alternatives = alternatives
        self.sentence_end = sentence_end
        self.question = question
        self.calls: list[int] = []
        #: the readings asked for, per call
        self.asked: list[int] = []
        #: the piece before given, per call: (its audio's length, its words), or None
        self.before: list[tuple[int, str] | None] = []

    def transcribe(self, pcm16k: bytes, alternatives: int = 1, sentence_end: bool = False,
                   before: tuple[bytes, str] | None = None) -> Transcript:
        self.calls.append(len(pcm16k))
        self.asked.append(alternatives)
        self.before.append(None if before is None else (len(before[0]), before[1]))
        return Transcript(self.text, self.confidence, self.alternatives[:alternatives - 1],
                          sentence_end=self.sentence_end if sentence_end else None, question=self.question,
                          commas=self.commas)


@dataclass
class Judge:
    """Accepts hypotheses made only of *words*."""

    words: frozenset[str]

    def accepts(self, words: list[str], final: bool) -> bool:
        return all(w in self.words for w in words)

    def reads_as_hints(self, words: list[str], final: bool) -> bool:
        return self.accepts(words, final)


class WordsDecoder(FakeDecoder):
    """A FakeDecoder saying *text* over the whole utterance."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def hyp(self):  # noqa: ANN201
        hyp = super().hyp()
        hyp.hypstr = self.text
        return hyp


def run(decoder: OpenSpeechDecoder, audio: bytes) -> list:
    rec = UtteranceRecognizer(decoder, EndpointingParams(stop_history_ms=300), interim_results=True,
                              word_time_offsets=True, classifier=LevelClassifier())
    events = []
    for i in range(0, len(audio), 320):
        events += rec.process(audio[i:i + 320])
    return events + rec.finish()


def test_words_that_read_as_the_hints_never_wake_whisper() -> None:
    whisper = ScriptedTranscriber()
    decoder = OpenSpeechDecoder(WordsDecoder("check my balance"), whisper, Judge(frozenset("check my balance".split())))
    events = run(decoder, silence(200) + tone(600) + silence(500))
    finals = [e for e in events if isinstance(e, FinalHypothesis)]
    assert [f.transcript for f in finals] == ["check my balance"]
    assert whisper.calls == []
    assert (decoder.decoder_finals, decoder.whisper_finals) == (1, 0)


def test_other_words_are_whispers_from_the_flush_on_and_the_end_reuses_them() -> None:
    """The hint decoder's salad is replaced once the voice drops away (the flush's interim
    already carries Whisper's words), and the final after a quiet tail does not run it again."""
    whisper = ScriptedTranscriber()
    decoder = OpenSpeechDecoder(WordsDecoder("with tell and had care day"), whisper, Judge(frozenset({"balance"})))
    events = run(decoder, silence(200) + tone(600) + silence(500))
    interims = [e.transcript for e in events if isinstance(e, InterimHypothesis)]
    assert interims[0] == "with tell and had care day"
    assert interims[-1] == "my card was stolen yesterday"
    finals = [e for e in events if isinstance(e, FinalHypothesis)]
    assert [f.transcript for f in finals] == ["my card was stolen yesterday"]
    assert finals[0].confidence == pytest.approx(0.8)
    assert len(whisper.calls) == 1 and decoder.whisper_runs == 1
    # The preroll and the voice reached Whisper: at least the 600 ms of tone, 16 kHz pcm16.
    assert whisper.calls[0] >= 600 * 32


class ChangingDecoder(WordsDecoder):
    """Says *text* while the utterance runs and *final_text* once it has ended (a hint decoder
    whose last search settles on the hints)."""

    def __init__(self, text: str, final_text: str) -> None:
        super().__init__(text)
        self.final_text = final_text

    def end_utt(self) -> None:
        super().end_utt()
        self.text = self.final_text


def test_hint_words_the_decoder_settles_on_do_not_replace_what_whisper_heard_with_confidence() -> None:
    """ "how late are you there on fridays": at the checkpoint the hint decoder's words read as
    no hint and Whisper hears the sentence (0.8); at the end the decoder settles on "i would like
    to", which reads as the hints. Whisper's words stand. Heard by Whisper with confidence under
    WHISPER_OVER_HINTS_MIN_CONFIDENCE ("hours hours", 0.25), the decoder's hint words stand."""
    hints = Judge(frozenset("i would like to check my balance hours".split()))
    for confidence, want in ((0.8, "how late are you they're on friday"), (0.25, "i would like to")):
        whisper = ScriptedTranscriber("how late are you they're on friday")
        whisper.transcribe = lambda pcm, alternatives=1, sentence_end=False, w=whisper, c=confidence: (  # type: ignore[method-assign]
            w.calls.append(len(pcm)) or Transcript(w.text, c, ()))
        decoder = OpenSpeechDecoder(ChangingDecoder("ah on to right", "i would like to"), whisper, hints)
        finals = [e for e in run(decoder, silence(200) + tone(600) + silence(500)) if isinstance(e, FinalHypothesis)]
        assert [f.transcript for f in finals] == [want], confidence
        assert len(whisper.calls) == 1


def test_whisper_saying_only_the_decoders_words_again_does_not_replace_them() -> None:
    """At the dip Whisper hears "agent agent agent" with confidence, words that do not read as the
    hints (a hint said three times); at the end the decoder settles on "agent". Whisper said no
    word the decoder did not (it repeats itself over a short utterance): the decoder's words stand."""
    class OnceEach(Judge):
        def reads_as_hints(self, words: list[str], final: bool) -> bool:
            return super().reads_as_hints(words, final) and len(set(words)) == len(words)

    whisper = ScriptedTranscriber("agent agent agent")
    decoder = OpenSpeechDecoder(ChangingDecoder("ah on", "agent"), whisper, OnceEach(frozenset({"agent"})))
    finals = [e for e in run(decoder, silence(200) + tone(600) + silence(500)) if isinstance(e, FinalHypothesis)]
    assert [f.transcript for f in finals] == ["agent"]
    assert len(whisper.calls) == 1


class VoiceDecoder(WordsDecoder):
    """Says *first* until the voice comes back after a drop, then *then* (a hint decoder that
    hears the rest of the sentence after a dip inside it)."""

    def __init__(self, first: str, then: str) -> None:
        super().__init__(first)
        self.then = then
        self.processed = 0

    def process_raw(self, audio: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        super().process_raw(audio, no_search, full_utt)
        self.processed += len(audio)
        if self.processed > 32 * 900:  # (16 kHz pcm16: past the second tone's start)
            self.text = self.then


def test_hint_words_that_go_on_from_what_whisper_heard_stand_at_the_end() -> None:
    """ "when do you | close": at a dip the hint decoder's "when do you" reads as no hint and
    Whisper hears "when do you"; the voice goes on and the decoder hears "when do you close",
    which reads as the hints and goes on from Whisper's words: they stand, and Whisper is not run
    again at the end (its run would hold the last word back). Words that start over ("when do you
    when do you close", the decoder repeating itself) do not."""
    class EndsOnAHint(Judge):
        def accepts(self, words: list[str], final: bool) -> bool:  # ("when do you" alone is no hint)
            return super().accepts(words, final) and words[-1:] == ["close"]

    hints = EndsOnAHint(frozenset("when do you close".split()))
    for then, want, runs in (("when do you close", "when do you close", 1),
                             ("when do you when do you close", "when do you", 2)):
        whisper = ScriptedTranscriber("when do you")
        decoder = OpenSpeechDecoder(VoiceDecoder("when do you oh", then), whisper, hints)
        audio = silence(200) + tone(400) + silence(120) + tone(300) + silence(500)
        finals = [e for e in run(decoder, audio) if isinstance(e, FinalHypothesis)]
        assert [f.transcript for f in finals] == [want], then
        assert len(whisper.calls) == runs, then


class PartlyDeafDecoder(WordsDecoder):
    """Says *text*, its words over the loud 10 ms frames it was fed, but for the first *deaf_ms*
    of them, which it spends in silence (a hint decoder that fitted only part of the voice)."""

    def __init__(self, text: str, deaf_ms: int) -> None:
        super().__init__(text)
        self.deaf_frames = deaf_ms // 10
        self.loud: list[bool] = []

    def start_utt(self) -> None:
        super().start_utt()
        self.loud = []

    def process_raw(self, audio: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        super().process_raw(audio, no_search, full_utt)
        self.loud += [any(audio[i:i + 320]) for i in range(0, len(audio), 320)]

    def seg(self) -> list[Seg]:
        labels, loud_seen = [], 0
        for loud in self.loud:
            loud_seen += loud
            labels.append("word" if loud and loud_seen > self.deaf_frames else "<sil>")
        segs: list[Seg] = []
        for i, label in enumerate(labels):
            if segs and segs[-1].word == label:
                segs[-1].end_frame = i
            else:
                segs.append(Seg(label, i, i))
        return segs


def test_hint_words_that_leave_the_voice_unheard_give_way_to_whisper_at_the_end() -> None:
    """The hint decoder's words read as the hints, but it heard no word in 300 ms of the caller's
    voice ("what are you" for "my card got swallowed by the ATM"): at the end Whisper reads the
    utterance. Its interims, and words that leave only silence or a short stretch of voice
    unheard (the quiet between the two tones is no voice), stand without Whisper."""
    audio = silence(200) + tone(300) + silence(150) + tone(400) + silence(500)
    assert_finals_of_check_my_balance(
        lambda deaf_ms: PartlyDeafDecoder("check my balance", deaf_ms), audio,
        ((0, "check my balance", 0), (MAX_VOICE_WITHOUT_WORDS_MS - 50, "check my balance", 0),
         (MAX_VOICE_WITHOUT_WORDS_MS + 100, "my card was stolen yesterday", 1)))


def assert_finals_of_check_my_balance(make_decoder, audio: bytes, cases) -> None:  # noqa: ANN001
    """For each (case, final words wanted, Whisper runs wanted) of *cases*: the hint decoder
    *make_decoder(case)*, saying "check my balance" (which reads as the hints), over *audio*
    gives that final and those runs, and its interims stand as they are."""
    hints = Judge(frozenset("check my balance".split()))
    for case, want, runs in cases:
        whisper = ScriptedTranscriber()
        events = run(OpenSpeechDecoder(make_decoder(case), whisper, hints), audio)
        assert [e.transcript for e in events if isinstance(e, FinalHypothesis)] == [want], case
        assert {e.transcript for e in events if isinstance(e, InterimHypothesis)} == {"check my balance"}, case
        assert len(whisper.calls) == runs, case


class UnsureDecoder(WordsDecoder):
    """Says *text*, its words sharing the utterance's frames, each with its posterior from
    *probs* (what pocketsphinx works out over the final's lattice)."""

    def __init__(self, text: str, probs: tuple[float, ...]) -> None:
        super().__init__(text)
        self.probs = probs

    def seg(self) -> list[Seg]:
        words = self.text.split()
        step = max(1, self.frames // len(words))
        return [Seg(w, i * step, (i + 1) * step - 1, p) for i, (w, p) in enumerate(zip(words, self.probs))]


def test_hint_words_the_decoder_was_unsure_of_give_way_to_whisper_at_the_end() -> None:
    """The hint decoder's words read as the hints, but one of them has a posterior under
    MIN_WORD_POSTERIOR ("how much i and okay" for "how are my finances looking"): at the end
    Whisper reads the utterance. Its interims, and words it is sure enough of, stand without
    Whisper."""
    assert_finals_of_check_my_balance(
        lambda probs: UnsureDecoder("check my balance", probs), silence(200) + tone(700) + silence(500),
        (((1.0, 0.9, 1.0), "check my balance", 0), ((1.0, MIN_WORD_POSTERIOR, 0.7), "check my balance", 0),
         ((1.0, MIN_WORD_POSTERIOR - 0.05, 1.0), "my card was stolen yesterday", 1)))


def test_voice_after_the_flush_is_heard_again_at_the_end() -> None:
    whisper = ScriptedTranscriber()
    decoder = OpenSpeechDecoder(WordsDecoder("salad"), whisper, Judge(frozenset({"balance"})))
    run(decoder, silence(200) + tone(400) + silence(120) + tone(300) + silence(500))
    # Two drops of the voice, two checkpoints; the end's audio after the second was quiet.
    assert len(whisper.calls) == 2
    assert whisper.calls[1] > whisper.calls[0]


class HangingJudge(Judge):
    """Accepts hypotheses made only of *words*, but not, at the end, one ending on "i"."""

    def accepts(self, words: list[str], final: bool) -> bool:
        return super().accepts(words, final) and not (final and words[-1] == "i")


def dip_then_end(decoder: OpenSpeechDecoder, whisper: ScriptedTranscriber, then_decoder: str,
                 then_whisper: str) -> list:
    """A first part, a dip (Whisper reads the first part if the decoder's words are not the
    hints), then the rest of the utterance, after which the decoder says *then_decoder* and
    Whisper *then_whisper*."""
    rec = UtteranceRecognizer(decoder, EndpointingParams(stop_history_ms=300), interim_results=True,
                              word_time_offsets=True, classifier=LevelClassifier())
    events: list = []
    audio = silence(200) + tone(400) + silence(120)
    for i in range(0, len(audio), 320):
        events += rec.process(audio[i:i + 320])
    decoder.decoder.text = then_decoder
    whisper.text = then_whisper
    audio = tone(300) + silence(500)
    for i in range(0, len(audio), 320):
        events += rec.process(audio[i:i + 320])
    return events + rec.finish()


def test_final_words_turned_down_at_the_end_are_whispers_of_the_whole_utterance() -> None:
    """At a dip the decoder's words are not the hints and Whisper reads the first part; the voice
    goes on, and the words read as the hints until the end, where they are left hanging ("what
    time do you i"): Whisper reads the whole utterance again, its words of the dip do not stand."""
    whisper = ScriptedTranscriber("what time")
    decoder = OpenSpeechDecoder(ChangingDecoder("salad", "what time do you i"), whisper,
                                HangingJudge(frozenset("what time do you i".split())))
    events = dip_then_end(decoder, whisper, "what time do you", "what time do you lock up tonight")
    assert [e.transcript for e in events if isinstance(e, FinalHypothesis)] == ["what time do you lock up tonight"]
    assert len(whisper.calls) == 2 and whisper.calls[1] > whisper.calls[0]


def test_a_whole_that_only_says_the_dips_words_again_leaves_the_dips_words() -> None:
    """As above, but Whisper's reading of the whole repeats the dip's words and adds none ("agent
    agent agent" for "agent", Whisper repeating itself over a short utterance): the dip's words
    stand. A whole that adds a word replaces them (above)."""
    whisper = ScriptedTranscriber("agent")
    decoder = OpenSpeechDecoder(ChangingDecoder("salad", "agent i"), whisper,
                                HangingJudge(frozenset("agent i".split())))
    events = dip_then_end(decoder, whisper, "agent", "agent agent agent")
    assert [e.transcript for e in events if isinstance(e, FinalHypothesis)] == ["agent"]
    assert len(whisper.calls) == 2


def test_a_stream_without_hints_is_whispers_at_every_checkpoint() -> None:
    whisper = ScriptedTranscriber("what time do you open")
    decoder = OpenSpeechDecoder(WordsDecoder("what time to you often"), whisper, None)
    events = run(decoder, silence(200) + tone(600) + silence(500))
    assert [e.transcript for e in events if isinstance(e, FinalHypothesis)] == ["what time do you open"]


def test_whispers_words_are_laid_over_the_speech_and_end_with_it() -> None:
    whisper = ScriptedTranscriber("my card was stolen yesterday")
    decoder = OpenSpeechDecoder(WordsDecoder("salad"), whisper, None)
    events = run(decoder, silence(200) + tone(600) + silence(500))
    final = next(e for e in events if isinstance(e, FinalHypothesis))
    words = final.words
    assert [w.word for w in words] == "my card was stolen yesterday".split()
    assert all(a.end_ms <= b.start_ms + 10 for a, b in zip(words, words[1:]))
    # The fake decoder's one word spans the utterance: Whisper's last word ends where it did.
    assert words[-1].end_ms == 200 + 600 + 300
    assert len(words[-1].word) > len(words[0].word) and words[-1].end_ms - words[-1].start_ms > words[0].end_ms - words[0].start_ms


class SilentDecoder(FakeDecoder):
    """A decoder that heard no word: no hypothesis and, as pocketsphinx then gives, no segments."""

    def hyp(self):  # noqa: ANN201
        return None

    def seg(self):  # noqa: ANN201
        return None


def test_whispers_words_stand_where_the_decoder_heard_no_word() -> None:
    """A stream without hints whose general decoder has no hypothesis: Whisper's words are the
    final, laid over the whole utterance (the layout once failed on the decoder's missing segments)."""
    whisper = ScriptedTranscriber("yes please")
    decoder = OpenSpeechDecoder(SilentDecoder(), whisper, None)
    events = run(decoder, silence(200) + tone(600) + silence(500))
    final = next(e for e in events if isinstance(e, FinalHypothesis))
    assert final.transcript == "yes please"
    assert [w.word for w in final.words] == ["yes", "please"]
    assert final.words[0].start_ms >= 0 and final.words[-1].end_ms > final.words[0].start_ms


def test_asked_to_punctuate_whispers_words_end_with_a_mark_when_it_is_sure_of_the_sentences_end() -> None:
    """With punctuation asked for, Whisper's words end with a full stop (or the question mark
    it wrote) when its sentence-end probability is at least SENTENCE_END_MIN_PROBABILITY, in the
    interim after the drop and in the final; not when it is less, not unless asked, and never on
    the hint decoder's words. The final's word times carry no mark."""
    from agent.speech.server.open_speech import SENTENCE_END_MIN_PROBABILITY as sure

    def heard(punctuate: bool, sentence_end: float, question: bool = False, hints: str = "salad") -> tuple[str, str]:
        whisper = ScriptedTranscriber(sentence_end=sentence_end, question=question)
        decoder = OpenSpeechDecoder(WordsDecoder(hints), whisper, Judge(frozenset("check my balance".split())),
                                    punctuate=punctuate)
        events = run(decoder, silence(200) + tone(600) + silence(500))
        final = next(e for e in events if isinstance(e, FinalHypothesis))
        assert final.words and not final.words[-1].word.endswith((".", "?"))
        return [e.transcript for e in events if isinstance(e, InterimHypothesis)][-1], final.transcript

    said = "my card was stolen yesterday"
    assert heard(True, sure) == (said + ".", said + ".")
    assert heard(True, 0.97, question=True) == (said + "?", said + "?")
    assert heard(True, sure - 0.01) == (said, said)
    assert heard(False, 0.97) == (said, said)
    assert heard(True, 0.97, hints="check my balance") == ("check my balance", "check my balance")


def test_a_sentence_mark_stands_only_until_the_voice_goes_on() -> None:
    """The mark made at a drop of the voice is not repeated in the interims once the caller goes
    on ("I want to set up. | direct deposit"); the next checkpoint decides again."""
    whisper = ScriptedTranscriber("i want to set up", sentence_end=0.9)
    decoder = OpenSpeechDecoder(WordsDecoder("salad"), whisper, None, punctuate=True)
    events = run(decoder, silence(200) + tone(400) + silence(150) + tone(300) + silence(500))
    interims = [e.transcript for e in events if isinstance(e, InterimHypothesis)]
    marked = interims.index("i want to set up.")
    assert "i want to set up" in interims[marked + 1:]  # the voice went on
    assert [e.transcript for e in events if isinstance(e, FinalHypothesis)] == ["i want to set up."]
    assert len(whisper.calls) == 2


def test_no_sentence_mark_on_words_whisper_barely_heard() -> None:
    """A sure sentence end on words Whisper has little confidence in ("that way." for "how late",
    0.13) is no sign the caller finished: no mark, the endpointer waits as for unmarked words."""
    def finals(confidence: float) -> list[str]:
        whisper = ScriptedTranscriber("that way", sentence_end=0.9, confidence=confidence)
        decoder = OpenSpeechDecoder(WordsDecoder("salad"), whisper, None, punctuate=True)
        events = run(decoder, silence(200) + tone(500) + silence(600))
        return [e.transcript for e in events if isinstance(e, FinalHypothesis)]

    assert finals(0.13) == ["that way"]
    assert finals(SENTENCE_END_MIN_CONFIDENCE) == ["that way."]


def test_a_piece_said_just_after_another_is_judged_with_it() -> None:
    """When punctuating, an utterance that began within BEFORE_MAX_GAP_MS of the last one's end
    (a caller's pause inside a sentence: "can I get | someone on the line") has its sentence end
    judged with the piece before it: Whisper is given that piece's audio, the silence between
    and its final words. The first utterance, one after a longer gap, and a stream not asked to
    punctuate are judged alone."""
    def befores(gap_ms: int, punctuate: bool = True) -> list[tuple[int, str] | None]:
        whisper = ScriptedTranscriber("can i get", sentence_end=0.9)
        decoder = OpenSpeechDecoder(WordsDecoder("salad"), whisper, None, punctuate=punctuate)
        run(decoder, silence(200) + tone(600) + silence(gap_ms) + tone(500) + silence(600))
        return whisper.before

    near = befores(700)
    assert near[0] is None and near[-1] is not None and near[-1][1] == "can i get"
    first_piece_bytes = 32 * 600  # at least its 600 ms of voice, at 16 kHz
    assert near[-1][0] > first_piece_bytes
    assert all(b is None for b in befores(2500))
    assert all(b is None for b in befores(700, punctuate=False))


def test_whispers_commas_are_written_when_punctuating() -> None:
    """A stream asked to punctuate gets the commas (and sentence marks inside the words) Whisper
    wrote, as a hosted recogniser's punctuation gives them; its other readings and a stream not
    asked to punctuate get none."""
    def finals(punctuate: bool) -> list[str]:
        whisper = ScriptedTranscriber("can you read me what i've got i'm about to pay a bill", sentence_end=0.9,
                                      commas=(6,))
        decoder = OpenSpeechDecoder(WordsDecoder("salad"), whisper, None, punctuate=punctuate)
        events = run(decoder, silence(200) + tone(900) + silence(600))
        return [e.transcript for e in events if isinstance(e, FinalHypothesis)]

    assert finals(True) == ["can you read me what i've got, i'm about to pay a bill."]
    assert finals(False) == ["can you read me what i've got i'm about to pay a bill"]


def test_commas_are_kept_apart_from_the_words() -> None:
    """The words are normalised as without commas (a run of numbers is still said figure by
    figure across one, its comma after the group's last figure); the commas and sentence marks inside the text are the indices of the
    words they follow, never after the last word."""
    assert normalise_with_commas("Hi, um, what have I got in checking, please?") == (
        "hi um what have i got in checking please".split(), (0, 1, 7))
    assert normalise_with_commas("Hi. I need my balance. Thanks.") == ("hi i need my balance thanks".split(), (0, 4))
    assert normalise_with_commas("It's 4021, 7731, okay") == (
        "it's four zero two one seven seven three one okay".split(), (4, 8))
    assert normalise_with_commas("Get me someone,") == (["get", "me", "someone"], ())
    assert normalise_with_commas("It costs $1,250.50, right?") == (
        "it costs one thousand two hundred fifty dollars and fifty cents right".split(), (10,))
    assert Transcript("yes yes please", 0.9, commas=(0,)).written() == "yes, yes please"


def test_whisper_saying_nothing_gives_no_final() -> None:
    decoder = OpenSpeechDecoder(WordsDecoder("salad"), ScriptedTranscriber(""), None)
    events = run(decoder, silence(200) + tone(600) + silence(500))
    assert not [e for e in events if isinstance(e, FinalHypothesis)]


def test_normalise_writes_whispers_text_as_the_recognisers_words() -> None:
    assert normalise("Hello, is there a life someone I could chat with?") == "hello is there a life someone i could chat with"
    assert normalise("My account number is 4021-77.") == "my account number is four zero two one seven seven"
    assert normalise("Account 101 0667 8, number 731 8840") == \
        "account one zero one zero six six seven eight number seven three one eight eight four zero"
    assert normalise("Your balance is $123.45.") == "your balance is one hundred twenty three dollars and forty five cents"
    assert normalise("It's $1 or $2,000.") == "it's one dollar or two thousand dollars"
    assert normalise("We open at 9:00 and close at 5:30, 7:05 on Sundays") == \
        "we open at nine and close at five thirty seven oh five on sundays"
    assert normalise("Press 1 for 25 or 100% and 0123") == "press one for twenty five or one hundred percent and zero one two three"
    assert normalise("I'd like to... um, check it 'now'") == "i'd like to um check it now"
    assert normalise("") == ""
    # times as Whisper also writes them: with a dot, or without the colon after a word of time
    assert normalise("Are you there at 5.30? Till 9.00?") == "are you there at five thirty till nine"
    assert normalise("Can I come by like 1230, or at 930") == "can i come by like twelve thirty or at nine thirty"
    assert normalise("It's 1230 4455, at 4021") == "it's one two three zero four four five five at four zero two one"


def test_cut_repeat_keeps_the_sentence_once() -> None:
    said = "could you pass me over to colleague could you pass me over to colleague could you".split()
    assert cut_repeat(said) == "could you pass me over to colleague".split()
    assert cut_repeat("no no no I'm fine".split()) == "no no no I'm fine".split()
    assert cut_repeat("see you later see you later see you".split()) == "see you later".split()
    said = "can i get put through to someone in the office and i get put through to someone on the office"
    assert cut_repeat(said.split()) == "can i get put through to someone in the office".split()
    digits = "one two three four one two three five".split()
    assert cut_repeat(digits) == digits


def test_cut_repeat_drops_the_last_two_words_said_again() -> None:
    assert cut_repeat("sounds good sounds good".split()) == "sounds good".split()
    assert cut_repeat("no nothing more nothing more".split()) == "no nothing more".split()
    # one word said twice is a caller's own, two said again inside the sentence too
    assert cut_repeat("bye bye".split()) == "bye bye".split()
    assert cut_repeat("and i and i get someone on the line".split()) == "and i and i get someone on the line".split()
    # an account number may end on a pair said twice
    assert cut_repeat("five five five oh one two one two".split()) == "five five five oh one two one two".split()


def _flite_16k(text: str) -> bytes:
    from agent.speech.server import flite
    from media import convert

    audio, rate = flite.synthesize(text, "kal16")
    return audio if rate == 16000 else convert.resample(audio, rate, 16000)


def _telephone_16k(text: str, lead_bytes: int) -> bytes:
    """flite kal16 saying *text* as a G.711 line carries it, back at 16 kHz, after *lead_bytes*
    of silence."""
    from media import convert

    narrow = convert.resample(_flite_16k(text), 16000, 8000)
    return bytes(lead_bytes) + convert.resample(convert.ulaw_to_pcm16(convert.pcm16_to_ulaw(narrow)), 8000, 16000)


def test_the_bundled_model_hears_a_sentence_no_dialplan_has() -> None:
    from agent.speech.server.whisper import WhisperTranscriber

    pcm = _flite_16k("my card was stolen yesterday")
    heard = WhisperTranscriber().transcribe(bytes(16000) + pcm)
    assert {"card", "stolen", "yesterday"} <= set(heard.text.split()), heard
    assert 0.0 < heard.confidence <= 1.0


def test_the_bundled_model_is_surer_of_a_sentences_end_than_of_a_pause_inside_it() -> None:
    """Whisper's sentence-end probability (asked for) is higher after a whole sentence said with
    its falling end than after its first words said alone on a telephone line; it is None unless
    asked for."""
    from agent.speech.server.whisper import WhisperTranscriber

    whisper = WhisperTranscriber()

    def line(text: str) -> bytes:
        return _telephone_16k(text, 16000)

    whole = whisper.transcribe(line("my card was stolen yesterday"), alternatives=4, sentence_end=True)
    half = whisper.transcribe(line("i was wondering if"), alternatives=4, sentence_end=True)
    assert whole.sentence_end is not None and half.sentence_end is not None
    assert 0.0 <= half.sentence_end < whole.sentence_end <= 1.0, (half, whole)
    assert whisper.transcribe(line("my card was stolen yesterday")).sentence_end is None


def test_the_bundled_model_is_surer_of_a_second_pieces_end_with_the_first_piece_before_it() -> None:
    """"a person on the line" read alone is not sure to be a sentence; after "can I get" and a
    400 ms pause it ends one, a question: given the piece before, the sentence-end probability
    passes SENTENCE_END_MIN_PROBABILITY (0.32 -> 0.86 measured), and the words read are the same."""
    from agent.speech.server.open_speech import SENTENCE_END_MIN_PROBABILITY as sure
    from agent.speech.server.whisper import WhisperTranscriber

    whisper = WhisperTranscriber()

    def line(text: str) -> bytes:
        return _telephone_16k(text, 3200)

    first, second = line("can i get"), line("a person on the line")
    alone = whisper.transcribe(second, alternatives=4, sentence_end=True)
    judged = whisper.transcribe(second, alternatives=4, sentence_end=True, before=(first + bytes(2 * 16 * 400), "can i get"))
    assert judged.text == alone.text and "person on the line" in alone.text
    assert alone.sentence_end is not None and judged.sentence_end is not None
    assert alone.sentence_end < sure <= judged.sentence_end and judged.question, (alone, judged)


def test_a_misheard_first_piece_does_not_take_away_the_end_the_second_piece_has_alone() -> None:
    """"how late | are you there tonight" with its first piece heard as "ali ali ali": read after
    those words the end is unsure (0.31 measured), read alone it is sure (0.83); the surer
    reading stands, so the caller is not kept waiting for a mishearing."""
    from agent.speech.server.open_speech import SENTENCE_END_MIN_PROBABILITY as sure
    from agent.speech.server.whisper import WhisperTranscriber

    whisper = WhisperTranscriber()

    def line(text: str) -> bytes:
        return _telephone_16k(text, 3200)

    first, second = line("how late"), line("are you there tonight")
    alone = whisper.transcribe(second, alternatives=4, sentence_end=True)
    judged = whisper.transcribe(second, alternatives=4, sentence_end=True,
                                before=(first + bytes(2 * 16 * 400), "ali ali ali"))
    assert alone.sentence_end is not None and judged.sentence_end is not None
    assert sure <= alone.sentence_end <= judged.sentence_end, (alone, judged)


def test_the_end_is_judged_after_a_reading_said_again() -> None:
    """Whisper reads a telephone line's "are you there tonight" as "Are you there tonight? Are
    you there tonight", the second time in the silence after the voice: the words are kept
    once, and the sentence's end (a question) is judged after them, not taken as unknown."""
    from agent.speech.server.open_speech import SENTENCE_END_MIN_PROBABILITY as sure
    from agent.speech.server.whisper import WhisperTranscriber

    heard = WhisperTranscriber().transcribe(_telephone_16k("are you there tonight", 3200), alternatives=4,
                                            sentence_end=True)
    assert heard.text == "are you there tonight", heard
    assert heard.sentence_end is not None and heard.sentence_end >= sure and heard.question, heard


def test_a_reading_that_ended_before_the_voice_did_gives_way_to_one_that_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the repetition penalty at 1.2, Whisper's likeliest reading of a telephone line's "I
    want to cancel a transfer I made yesterday" stops at "transfer" (and "yes, I'd like to go
    back to the menu" at "back"), the rest said while the voice goes on (at the shipped 1.1 it
    reads these whole); the beam's reading that goes on from it is taken, and the short one is
    kept as another reading. A whole sentence keeps its reading, not one that adds a word in the
    silence after it."""
    from agent.speech.server import whisper as module
    from agent.speech.server.whisper import WhisperTranscriber

    monkeypatch.setattr(module, "REPETITION_PENALTY", 1.2)
    whisper = WhisperTranscriber()
    for said, stopped_at in (("I want to cancel a transfer I made yesterday", "transfer"),
                             ("yes, I'd like to go back to the menu", "back")):
        heard = whisper.transcribe(_telephone_16k(said, 3200), alternatives=4, sentence_end=True)
        assert heard.text.split()[-1] != stopped_at and len(heard.text.split()) >= 8, heard
        assert any(a.split()[-1] == stopped_at for a in heard.alternatives), heard
    whole = whisper.transcribe(_telephone_16k("bye for now", 3200) + bytes(16000), alternatives=4)
    assert whole.text == "bye for now", whole


def test_the_voice_ends_where_the_energy_vad_last_heard_it_and_a_reading_said_again_is_told() -> None:
    """``_voice_end_s`` is the end of the recogniser's own VAD's last voiced frame (a tone of
    0.5 s after 0.1 s of silence ends at 0.6 s; near-silence after it is no voice);
    ``_starts_over`` tells words that begin the reading again from words that go on."""
    from agent.speech.server.whisper import _starts_over, _voice_end_s

    tone = np.sin(2 * np.pi * 200 * np.arange(8000) / 16000) * 0.3
    audio = np.concatenate([np.zeros(1600), tone, np.full(4800, 1e-4)])
    assert _voice_end_s((audio * 32767).astype("<i2").tobytes()) == pytest.approx(0.6, abs=0.021)
    assert _voice_end_s(bytes(32000)) == 0.0
    assert _starts_over("where's the nearest atm".split(), "where is".split())
    assert _starts_over("what interest do you pay".split(), "what interests".split())
    assert not _starts_over("i don't want a machine".split(), "i want someone who works there".split())
    assert not _starts_over("yes i'd like to go back".split(), "to the menu".split())


def test_a_tone_is_not_speech() -> None:
    from agent.speech.server.whisper import WhisperTranscriber

    n = 16000
    beep = struct.pack(f"<{n}h", *(int(3000 * math.sin(2 * math.pi * 440 * i / 16000)) for i in range(n)))
    heard = WhisperTranscriber().transcribe(beep)
    assert len(heard.text.split()) <= 3, heard


def test_the_other_readings_are_whispers_and_only_when_its_words_are_used() -> None:
    """Asked for four readings, the decoder asks Whisper for four and passes on its other three
    with the interim and the final; words the hint decoder keeps have none."""
    others = ("my car was stolen yesterday", "my card was stolen today", "by card was stolen yesterday")
    whisper = ScriptedTranscriber(alternatives=others)
    decoder = OpenSpeechDecoder(WordsDecoder("with tell and had care day"), whisper, Judge(frozenset({"balance"})), 4)
    events = run(decoder, silence(200) + tone(600) + silence(500))
    assert whisper.asked and set(whisper.asked) == {4}
    finals = [e for e in events if isinstance(e, FinalHypothesis)]
    assert [f.alternatives for f in finals] == [others]
    assert [e.alternatives for e in events if isinstance(e, InterimHypothesis)][-1] == others

    kept = OpenSpeechDecoder(WordsDecoder("check my balance"), ScriptedTranscriber(alternatives=others),
                             Judge(frozenset("check my balance".split())), 4)
    finals = [e for e in run(kept, silence(200) + tone(600) + silence(500)) if isinstance(e, FinalHypothesis)]
    assert [(f.transcript, f.alternatives) for f in finals] == [("check my balance", ())]


def test_one_reading_asked_is_a_greedy_whisper_run_with_none_other() -> None:
    whisper = ScriptedTranscriber(alternatives=("my car was stolen yesterday",))
    decoder = OpenSpeechDecoder(WordsDecoder("salad"), whisper, Judge(frozenset({"balance"})))
    finals = [e for e in run(decoder, silence(200) + tone(600) + silence(500)) if isinstance(e, FinalHypothesis)]
    assert set(whisper.asked) == {1} and finals[0].alternatives == ()


def test_the_bundled_models_beam_gives_other_distinct_readings() -> None:
    """Over a telephone line (8 kHz µ-law) a beam of four reads some phrases more than one way;
    the other readings are never the first one again, nor each other."""
    from agent.speech.server.whisper import WhisperTranscriber
    from media import convert

    whisper = WhisperTranscriber()
    heard = []
    for text in ("what time do you close", "i want to speak to a person", "nothing else"):
        line = convert.resample(_flite_16k(text), 16000, 8000)
        pcm = convert.resample(convert.ulaw_to_pcm16(convert.pcm16_to_ulaw(line)), 8000, 16000)
        heard.append(whisper.transcribe(bytes(16000) + pcm, alternatives=4))
    assert any(h.alternatives for h in heard), heard
    for h in heard:
        assert h.text and len(h.alternatives) <= 3, h
        assert h.text not in h.alternatives and len(set(h.alternatives)) == len(h.alternatives), h


class ScriptedAligner:
    """Stands for the CTranslate2 model in :meth:`WhisperTranscriber._heard_only`: aligns the
    tokens from index *i* of *frames_at* on to its frame (20 ms encoder frames), those before
    the first such index to frame 0."""

    def __init__(self, frames_at: dict[int, int]) -> None:
        self.frames_at = frames_at
        self.calls = 0

    def align(self, encoded, prompt, texts, frames):  # noqa: ANN001, ANN201
        self.calls += 1
        (tokens,) = texts
        at, pairs = 0, []
        for i, token in enumerate(tokens):
            at = self.frames_at.get(i, at)
            pairs.append((i, at))
        return [type("Alignment", (), {"alignments": pairs})()]


def _heard_only(text: str, frames_at: dict[int, int], audio_s: float) -> tuple[str, int]:
    """Whisper's *text* after :meth:`WhisperTranscriber._heard_only` over *audio_s* of audio,
    its tokens aligned as :class:`ScriptedAligner` does with *frames_at*, and how many
    alignment passes that took."""
    import os

    import tokenizers

    from agent.speech.server.whisper import WhisperTranscriber, model_dir

    whisper = WhisperTranscriber.__new__(WhisperTranscriber)
    whisper._tokenizer = tokenizers.Tokenizer.from_file(os.path.join(model_dir(), "tokenizer.json"))
    whisper._eot = whisper._tokenizer.token_to_id("<|endoftext|>")
    whisper._prompt = []
    whisper._model = ScriptedAligner(frames_at)
    ids = whisper._tokenizer.encode(text, add_special_tokens=False).ids + [whisper._eot]
    kept = whisper._heard_only(None, ids, 200, audio_s)
    return whisper._tokenizer.decode(kept), whisper._model.calls


def test_words_said_again_in_the_appended_silence_are_cut_at_the_mark_before_them() -> None:
    # " know that should do it . Know": the second "Know" (token 6) aligned at 2.14 s, the audio
    # 1.2 s long
    assert _heard_only(" know that should do it. Know", {6: 107}, 1.2) == (" know that should do it.", 1)
    # a repeat of two words after a comma ("no long, no long")
    assert _heard_only(" no long, no long.", {3: 84}, 0.7) == (" no long,", 1)


def test_a_repeat_aligned_inside_the_audio_stays() -> None:
    assert _heard_only(" know that should do it. Know", {6: 50}, 1.2)[0] == " know that should do it. Know"


def test_a_word_not_said_before_stays_even_aligned_past_the_end_and_costs_no_pass() -> None:
    # "..., bye": the alignment of a last word after a comma can fall past the audio's end
    assert _heard_only(" I will call back another time. Bye!", {7: 179}, 2.9) == (
        " I will call back another time. Bye!", 0)
    assert _heard_only(" what is my balance", {}, 1.0) == (" what is my balance", 0)


def test_a_new_sentence_made_up_in_the_appended_silence_is_cut() -> None:
    # " could you pass me over to a colleague ? Because could you": "Because" (token 9) on
    # aligned at 3.4 s, the audio 2.4 s long
    assert _heard_only(" could you pass me over to a colleague? Because could you", {9: 170}, 2.4) == (
        " could you pass me over to a colleague?", 1)
    # a comma is no sentence's end: a new clause after it stays
    assert _heard_only(" I want my balance, then hang up", {5: 170}, 2.4)[0] == " I want my balance, then hang up"


def test_readings_come_from_a_beam_wider_than_they_are_and_one_reading_is_greedy() -> None:
    """Asked for four readings, Whisper searches a beam of BEAM_SIZE (8) and returns its four
    best; asked for more than that, the beam is as wide as the readings; asked for one, the
    search is greedy (a beam of one), as a Riva client asking for one reading expects."""
    from agent.speech.server import whisper

    transcriber = whisper.WhisperTranscriber()
    real, asked = transcriber._model, []

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def generate(self, *args: object, **kwargs: object) -> object:
            asked.append((kwargs["beam_size"], kwargs["num_hypotheses"]))
            return real.generate(*args, **kwargs)

    transcriber._model = Spy()
    pcm = _flite_16k("my card was stolen yesterday")
    four = transcriber.transcribe(pcm, alternatives=4)
    transcriber.transcribe(pcm, alternatives=1)
    transcriber.transcribe(pcm, alternatives=whisper.BEAM_SIZE + 2)
    assert whisper.BEAM_SIZE == 8
    assert asked == [(8, 4), (1, 1), (10, 10)]
    assert "stolen" in four.text.split() and len(four.alternatives) <= 3, four

"""Phrase hints beside the general model (agent.speech.server.biasing): the judge that tells a
hint hypothesis from open speech, and the pair of decoders that answers with one of them."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import pocketsphinx

from agent.speech.server import phrase_lm
from agent.speech.server.biasing import BiasedDecoder, PhraseJudge

PHRASES = ("check my balance", "what are your opening hours", "talk to an agent", "goodbye")


def judge(phrases: tuple[str, ...] = PHRASES) -> PhraseJudge:
    sents = phrase_lm.sentences(phrases + phrase_lm.CARRIER_PHRASES + phrase_lm.ACKNOWLEDGEMENTS)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "phrases.arpa")
        with open(path, "w") as f:
            f.write(phrase_lm.build_arpa(sents))
        model = pocketsphinx.NGramModel(pocketsphinx.Config(loglevel="FATAL"), pocketsphinx.LogMath(), path)
    return PhraseJudge(model, frozenset(w for s in sents for w in s),
                       phrase_ends=frozenset(p.split()[-1] for p in phrases))


def test_the_phrases_and_their_carriers_read_as_the_hints() -> None:
    """A hint phrase, alone or wrapped in carrier words, is accepted, final or partial."""
    j = judge()
    for text in ("check my balance", "i would like to check my balance", "goodbye", "talk to an agent please"):
        assert j.accepts(text.split(), final=True), text
    assert j.reads_as_hints("what are your".split(), final=False)


def test_hint_words_left_hanging_on_a_filler_or_function_word_do_not_stand() -> None:
    """The hint decoder spells speech it cannot match with its fillers and carrier words; words
    ending on one of those read as the hints but do not stand ("what time do you i" for "... lock
    up tonight"), unless a phrase of the dialplan ends so or they are an acknowledgement whole."""
    j = judge(PHRASES + ("what time do you open",))
    for text in ("what time do you i", "all right i'm ah", "would like to", "could you to an and", "check my balance oh"):
        assert j.reads_as_hints(text.split(), final=True), text
        assert j.left_hanging(text.split()) and not j.accepts(text.split(), final=True), text
        # before the end the decoder's last word may be still to come ("how much money do i"):
        # only whether the words read as the hints counts there
        assert j.accepts(text.split(), final=False) == j.reads_as_hints(text.split(), final=False), text
    assert j.accepts("what time do you i".split(), final=False)
    for text in ("uh huh", "all right", "no", "oh", "talk to an agent", "check my balance please"):
        assert not j.left_hanging(text.split()), text
    assert not judge(PHRASES + ("put me through to",)).left_hanging("put me through to".split())


def test_an_everyday_word_inside_a_phrase_still_reads_as_the_hints() -> None:
    """One word outside the phrases costs OTHER_WORD_LN_PROB, not the whole hypothesis: "check
    my current balance" is still the hinted request."""
    j = judge()
    assert "current" not in j.words
    assert j.accepts("i want to check my current balance".split(), final=True)


def test_other_words_or_a_salad_of_hint_words_is_open_speech() -> None:
    """A word outside the phrases, or hint words in an order no phrase has, is not accepted."""
    j = judge()
    assert not j.accepts("my card was stolen".split(), final=True)
    assert not j.accepts("balance hours my agent what check".split(), final=True)
    assert not j.accepts("lead need the to someone please".split(), final=True)
    assert j.mean_ln_prob("check my balance".split(), True) > j.mean_ln_prob("balance my check".split(), True)


def test_a_phrase_framed_by_a_few_words_reads_as_the_hints() -> None:
    """A hinted phrase of two content words with up to three other words around it reads as the
    hints however unlikely the framing is under the phrases' model ("what are the opening hours");
    not with more words, not said twice, and not a phrase of one content word."""
    sents = phrase_lm.sentences(("opening hours", "a human", "check my balance"))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "phrases.arpa")
        with open(path, "w") as f:
            f.write(phrase_lm.build_arpa(sents))
        model = pocketsphinx.NGramModel(pocketsphinx.Config(loglevel="FATAL"), pocketsphinx.LogMath(), path)
    from agent.speech.server.decoders import HintModels
    j = HintModels._judge(sents, sents)
    assert ("opening", "hours") in j.phrases and ("a", "human") not in j.phrases
    for text in ("what are the opening hours", "tell me opening hours", "opening hours"):
        assert j.accepts(text.split(), final=True), text
    assert PhraseJudge(model, j.words).mean_ln_prob("what are the opening hours".split(), True) < j.min_mean_ln_prob
    for text in ("i would like to know the opening hours", "i need a human being please", "my card was stolen"):
        assert not j.accepts(text.split(), final=True), text
    assert not j.holds_phrase("opening hours the opening hours".split())


@dataclass
class Hyp:
    hypstr: str


class FakeDecoder:
    """Records the audio it is fed; says *text*."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.fed = 0
        self.utterances = 0
        self.ended = 0

    def start_utt(self) -> None:
        self.utterances += 1

    def process_raw(self, audio: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        self.fed += len(audio)

    def end_utt(self) -> None:
        self.ended += 1

    def hyp(self) -> Hyp | None:
        return Hyp(self.text) if self.text else None

    def seg(self) -> list[str]:
        return self.text.split()


def test_both_decoders_hear_everything_and_the_judge_picks_the_answer() -> None:
    """Each decoder is fed the same audio and utterance boundaries; the hint decoder answers
    when its hypothesis reads as the hints, the general one otherwise, hypothesis and words
    alike."""
    hints, general = FakeDecoder("check my balance"), FakeDecoder("check my balance please")
    pair = BiasedDecoder(hints, general, judge())
    pair.start_utt()
    pair.process_raw(bytes(320))
    assert pair.hyp().hypstr == "check my balance"
    hints.text, general.text = "my the check balance of", "my card was stolen"
    pair.process_raw(bytes(320))
    assert pair.hyp().hypstr == "my card was stolen"
    assert pair.seg() == ["my", "card", "was", "stolen"]
    pair.end_utt()
    assert pair.hyp().hypstr == "my card was stolen"
    assert (hints.fed, general.fed, hints.utterances, general.utterances, hints.ended, general.ended) == (
        640, 640, 1, 1, 1, 1)
    assert (pair.hint_finals, pair.general_finals) == (0, 1)


def test_silence_from_the_hint_decoder_stays_silence() -> None:
    """When the hint decoder heard no words (a noise), the pair says nothing either."""
    pair = BiasedDecoder(FakeDecoder(""), FakeDecoder("the"), judge())
    pair.start_utt()
    pair.process_raw(bytes(320))
    pair.end_utt()
    assert pair.hyp() is None

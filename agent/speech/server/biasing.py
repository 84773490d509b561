"""Phrase hints that bias recognition without giving up open speech.

A stream with phrase hints is decoded twice, frame by frame: by the phrase-hint decoder
(agent.speech.server.phrase_lm: the hints, carrier phrases, acknowledgements and everyday
words) and by the general model's decoder. Whenever a hypothesis is asked for, the hint
decoder's is kept if it *reads as the hints*: its mean log probability per word under a model
of the phrases, carrier phrases and acknowledgements alone (:class:`PhraseJudge`), a word
outside them counting :data:`OTHER_WORD_LN_PROB`, is at least :data:`MIN_MEAN_LN_PROB`.
Otherwise the caller said something else, which the hint model can only spell with the nearest
everyday words, and the general model's hypothesis is returned. Figures: docs/speech.md.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pocketsphinx

from agent.call.completeness import FILLERS
from agent.speech.server.phrase_lm import ACKNOWLEDGEMENTS, sentences

#: a hint hypothesis whose words average below this log probability (natural log, per word
#: and end of sentence) under the phrases' own model is open speech
MIN_MEAN_LN_PROB = -3.5
#: what a word outside the phrases (one of the hint model's everyday words) counts
OTHER_WORD_LN_PROB = -6.0
#: a hinted phrase of two content words or more with at most this many other words reads as the
#: hints (Whisper need not read the dialplan's requests in the caller's framing: docs/speech.md)
MAX_WORDS_AROUND_PHRASE = 3
#: words no dialplan phrase is likely to end with: hesitations and function words. Hint words
#: that end with one the dialplan's phrases never end with do not stand at the end: the hint
#: decoder spells what it cannot match with its fillers and carrier words ("what time do you i"
#: for "... lock up tonight", "talk to with much oh"), and the words read as unfinished, so the
#: caller waits for the turn's end either way (docs/speech.md, "Hint words left hanging")
HANGING_WORDS = FILLERS | frozenset({"huh", "i", "a", "an", "the", "to", "and", "of", "or", "my", "your"})
#: the hint model's acknowledgements as a whole ("uh huh", "i see"): words that are one hang on nothing
_ACKNOWLEDGEMENTS = frozenset(tuple(a) for a in sentences(ACKNOWLEDGEMENTS))
#: pocketsphinx's log base (``logbase``): language model scores are in these units
_LN_LOGBASE = math.log(1.0001)
_BOS, _EOS = "<s>", "</s>"


@dataclass(frozen=True)
class PhraseJudge:
    """Tells a hypothesis that reads as the expected phrases from open speech.

    *model* is a trigram model of the phrases alone (no background words); *words* its
    vocabulary.
    """

    model: pocketsphinx.NGramModel
    words: frozenset[str]
    min_mean_ln_prob: float = MIN_MEAN_LN_PROB
    other_word_ln_prob: float = OTHER_WORD_LN_PROB
    #: the hinted phrases of two content words or more ("opening hours", "check my balance"; not
    #: "a human"): a few words around one of them read as the hints ("what are your opening hours")
    phrases: frozenset[tuple[str, ...]] = frozenset()
    #: the last words of the dialplan's own phrases (a hanging word that ends one is not hanging)
    phrase_ends: frozenset[str] = frozenset()

    def mean_ln_prob(self, words: Sequence[str], final: bool) -> float:
        """Mean natural-log probability per word (and end of sentence when *final*)."""
        history = [_BOS]
        total = 0.0
        targets = [*words, _EOS] if final else list(words)
        for word in targets:
            if word != _EOS and word not in self.words:
                total += self.other_word_ln_prob
            else:
                total += self.model.prob([word, *reversed(history[-2:])]) * _LN_LOGBASE
            history.append(word)
        return total / len(targets) if targets else 0.0

    def accepts(self, words: Sequence[str], final: bool) -> bool:
        """Do the hint decoder's *words* stand: they read as the hints and, *final*, are not left
        hanging? (Before the end the decoder's last word is often still to come: "how much money
        do i" at the voice's drop; a Whisper run there would hold back the dialplan's phrases.)"""
        return not (final and self.left_hanging(words)) and self.reads_as_hints(words, final)

    def reads_as_hints(self, words: Sequence[str], final: bool) -> bool:
        """Are *words* (anyone's) likely under the phrases' model, or one of the phrases framed?"""
        return self.mean_ln_prob(words, final) >= self.min_mean_ln_prob or self.holds_phrase(words)

    def left_hanging(self, words: Sequence[str]) -> bool:
        """Do *words* (two or more) end with one of :data:`HANGING_WORDS` that ends none of the
        dialplan's phrases, and are they no acknowledgement as a whole?"""
        return (len(words) >= 2 and words[-1] in HANGING_WORDS and words[-1] not in self.phrase_ends
                and tuple(words) not in _ACKNOWLEDGEMENTS)

    def holds_phrase(self, words: Sequence[str]) -> bool:
        """Is one of :attr:`phrases` among *words*, with at most
        :data:`MAX_WORDS_AROUND_PHRASE` others, none of them one of its own ("what are your opening
        hours", "could you tell me the opening hours")?"""
        for phrase in self.phrases:
            n = len(phrase)
            if len(words) - n > MAX_WORDS_AROUND_PHRASE:
                continue
            for i in range(len(words) - n + 1):
                # the phrase said once, the other words only framing it ("no thanks no thanks not
                # thanks" is the decoder repeating itself over the audio, not the hints)
                if tuple(words[i:i + n]) == phrase and not set(words[:i] + words[i + n:]) & set(phrase):
                    return True
        return False


class BiasedDecoder:
    """A phrase-hint decoder and a general one fed the same audio; answers with the hint
    decoder's hypothesis when the judge accepts it, else with the general one's.

    Offers the part of ``pocketsphinx.Decoder`` that ``UtteranceRecognizer`` uses.
    """

    def __init__(self, hints: pocketsphinx.Decoder, general: pocketsphinx.Decoder, judge: PhraseJudge) -> None:
        self.hints = hints
        self.general = general
        self._judge = judge
        self._chosen: pocketsphinx.Decoder | None = None
        self._final = False
        #: final hypotheses taken from each decoder
        self.hint_finals = 0
        self.general_finals = 0

    def start_utt(self) -> None:
        self.hints.start_utt()
        self.general.start_utt()
        self._chosen, self._final = None, False

    def process_raw(self, audio: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        self.hints.process_raw(audio, no_search, full_utt)
        self.general.process_raw(audio, no_search, full_utt)
        self._chosen = None

    def end_utt(self) -> None:
        self.hints.end_utt()
        self.general.end_utt()
        self._chosen, self._final = None, True

    def hyp(self) -> Any:
        return self._choose().hyp()

    def seg(self) -> Any:
        return self._choose().seg()

    def _choose(self) -> pocketsphinx.Decoder:
        if self._chosen is None:
            hyp = self.hints.hyp()
            words = hyp.hypstr.split() if hyp is not None else []
            use_hints = not words or self._judge.accepts(words, self._final)
            self._chosen = self.hints if use_hints else self.general
            if self._final:
                if use_hints:
                    self.hint_finals += 1
                else:
                    self.general_finals += 1
        return self._chosen

"""Pools of pocketsphinx decoders: the general model's, and one per phrase-hint set.

A decoder is slow to build and large, so streams borrow them from a pool instead.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from typing import Callable

import pocketsphinx

from agent.dialplan.intents import STOP_WORDS
from agent.speech.server import phrase_lm
from agent.speech.server.biasing import PhraseJudge
from agent.speech.server.recognizer import DECODER_OPTIONS, new_decoder

#: everyday words a phrase-hint model also knows (see agent.speech.server.phrase_lm.build_arpa)
BACKGROUND_WORDS = 1000
#: how a stream with phrase hints hears words that are not the hints: Whisper
#: (agent.speech.server.open_speech), the general pocketsphinx model decoded alongside
#: (agent.speech.server.biasing), or not at all (the hint decoder alone)
OPEN_SPEECH_MODES = ("whisper", "general", "hints")
DEFAULT_OPEN_SPEECH = "whisper"


class DecoderPool:
    """Reusable pocketsphinx decoders, so a new stream does not wait for one to be built."""

    def __init__(self, max_idle: int, factory: Callable[[], pocketsphinx.Decoder] = new_decoder) -> None:
        self._factory = factory
        self._max_idle = max_idle
        #: for a hint set's pool: what tells its decoders' hypotheses from open speech
        self.judge: PhraseJudge | None = None
        self._idle: list[pocketsphinx.Decoder] = []
        self._lock = threading.Lock()
        self.created = 0
        self.in_use = 0

    def prewarm(self, count: int) -> None:
        """Build decoders until ``count`` are idle (blocking)."""
        while True:
            with self._lock:
                if len(self._idle) >= min(count, self._max_idle):
                    return
            decoder = self._factory()
            with self._lock:
                self.created += 1
                self._idle.append(decoder)

    def acquire(self) -> pocketsphinx.Decoder:
        with self._lock:
            self.in_use += 1
            if self._idle:
                return self._idle.pop()
        try:
            decoder = self._factory()
        except BaseException:
            with self._lock:
                self.in_use -= 1
            raise
        with self._lock:
            self.created += 1
        return decoder

    def release(self, decoder: pocketsphinx.Decoder) -> None:
        with self._lock:
            self.in_use -= 1
            if len(self._idle) < self._max_idle:
                self._idle.append(decoder)

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)


class HintModels:
    """Decoder pools for phrase-hint language models, one per distinct hint set.

    A hint decoder is built from an ARPA model of the phrases and a dictionary of only their
    words; each pool also carries the :class:`PhraseJudge` of its phrases, which decides when
    the general model's hypothesis is returned instead (agent.speech.server.biasing). The most
    recently used ``max_sets`` hint sets keep their pools.
    """

    def __init__(self, max_sets: int = 8, max_idle: int = 4, *, general_alongside: bool = False,
                 open_speech: str | None = None) -> None:
        mode = open_speech or ("general" if general_alongside else "hints")
        if mode not in OPEN_SPEECH_MODES:
            raise ValueError(f"open speech must be one of {', '.join(OPEN_SPEECH_MODES)}, got {mode!r}")
        self.open_speech = mode
        #: decode hinted streams beside the general model too (agent.speech.server.biasing)
        self.general_alongside = mode == "general"
        self._transcriber: object | None = None
        self._whisper_lock = threading.Lock()
        self._max_sets = max_sets
        self._max_idle = max_idle
        self._pools: dict[str, DecoderPool] = {}
        self._lock = threading.Lock()
        self._pronunciations: dict[str, list[str]] | None = None
        self._background_words: dict[str, float] | None = None

    def pool_for(self, phrases: tuple[str, ...]) -> DecoderPool | None:
        """The pool of decoders for *phrases*, or None when none of their words is pronounceable."""
        key = hashlib.sha1("\n".join(sorted(set(phrases))).encode()).hexdigest()
        with self._lock:
            pool = self._pools.pop(key, None)
            if pool is None:
                known = self._dictionary().__contains__
                hinted = phrase_lm.sentences(phrases, known)
                if not hinted:
                    return None
                sents = (hinted + phrase_lm.sentences(phrase_lm.CARRIER_PHRASES, known)
                         + phrase_lm.sentences(phrase_lm.ACKNOWLEDGEMENTS, known) * phrase_lm.ACKNOWLEDGEMENT_WEIGHT)
                background = self.background_words()
                arpa = phrase_lm.build_arpa(sents, background)
                words = sorted({w for sent in sents for w in sent} | set(background))
                pool = DecoderPool(self._max_idle, factory=lambda: self._build(arpa, words))
                if self.open_speech != "hints":
                    pool.judge = self._judge(sents, hinted)
            self._pools[key] = pool  # most recent last
            while len(self._pools) > self._max_sets:
                self._pools.pop(next(iter(self._pools)))
            return pool

    def prewarm(self) -> None:
        """Read the dictionary and the background words (and load Whisper) now rather than at the
        first stream."""
        self.background_words()
        if self.open_speech == "whisper":
            # Before the worker says it is ready: loading it beside a first call's decoding
            # would delay that call's results (~0.7 s of a core).
            self.transcriber()

    def transcriber(self):  # -> agent.speech.server.whisper.WhisperTranscriber (imported on use)
        """This process's Whisper (loaded once, on first use)."""
        with self._whisper_lock:
            if self._transcriber is None:
                from agent.speech.server.whisper import WhisperTranscriber

                self._transcriber = WhisperTranscriber()
            return self._transcriber

    def background_words(self) -> dict[str, float]:
        """The ``BACKGROUND_WORDS`` commonest words of the general model, with their probabilities
        (computed once; do not modify)."""
        if self._background_words is None:
            model_dir = os.path.join(pocketsphinx.get_model_path(), "en-us")
            logmath = pocketsphinx.LogMath()
            general = pocketsphinx.NGramModel(pocketsphinx.Config(loglevel="FATAL"), logmath,
                                              os.path.join(model_dir, "en-us.lm.bin"))
            scored = sorted(((general.prob([w]), w) for w in self._dictionary() if "_" not in w), reverse=True)
            self._background_words = {w: logmath.exp(score) for score, w in scored[:BACKGROUND_WORDS]}
        return self._background_words

    def _dictionary(self) -> dict[str, list[str]]:
        if self._pronunciations is None:
            entries: dict[str, list[str]] = {}
            path = os.path.join(pocketsphinx.get_model_path(), "en-us", "cmudict-en-us.dict")
            with open(path, encoding="utf-8") as f:
                for line in f:
                    head = line.split(" ", 1)[0]
                    entries.setdefault(head.split("(", 1)[0], []).append(line if line.endswith("\n") else line + "\n")
            self._pronunciations = entries
        return self._pronunciations

    @staticmethod
    def _judge(sents: list[list[str]], hinted: list[list[str]]) -> PhraseJudge:
        """A judge of the phrases alone (no background words); *hinted*: the hint phrases."""
        with tempfile.TemporaryDirectory(prefix="openclaw-hints-") as tmp:
            path = os.path.join(tmp, "phrases.arpa")
            with open(path, "w", encoding="utf-8") as f:
                f.write(phrase_lm.build_arpa(sents))
            model = pocketsphinx.NGramModel(pocketsphinx.Config(loglevel="FATAL"), pocketsphinx.LogMath(), path)
        return PhraseJudge(model, frozenset(w for sent in sents for w in sent),
                           phrases=frozenset(tuple(p) for p in hinted if sum(w not in STOP_WORDS for w in p) >= 2),
                           phrase_ends=frozenset(p[-1] for p in hinted if p))

    def _build(self, arpa: str, words: list[str]) -> pocketsphinx.Decoder:
        dictionary = self._dictionary()
        with tempfile.TemporaryDirectory(prefix="openclaw-hints-") as tmp:
            lm_path, dict_path = os.path.join(tmp, "hints.arpa"), os.path.join(tmp, "hints.dict")
            with open(lm_path, "w", encoding="utf-8") as f:
                f.write(arpa)
            with open(dict_path, "w", encoding="utf-8") as f:
                for word in words:
                    f.writelines(dictionary[word])
            return pocketsphinx.Decoder(lm=lm_path, dict=dict_path, **DECODER_OPTIONS)

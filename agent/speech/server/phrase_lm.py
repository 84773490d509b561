"""A small trigram language model (ARPA text) built from phrase hints.

The embedded speech server decodes with pocketsphinx's general 130k-word
English model; when a request carries Riva ``speech_contexts`` it also decodes
with a model of those phrases and keeps that decoder's hypothesis when it reads
as the phrases (agent.speech.server.biasing). For the few dozen phrases a
dialplan expects, recognition is both more accurate (a caller's "check my
balance" can no longer become "chuck my ballots") and quicker to name the last
word (a search over a few hundred words instead of the whole dictionary), which
is what lets the endpointer answer after a short silence.

The phrases are split into sentences of words; counts of 1- to 3-grams are
discounted by a constant (absolute discounting) and the freed mass goes to the
next lower order through Katz back-off weights. Unigrams are smoothed so that
every hint word can start or end an utterance in any order: callers say
"balance please" as readily as "my balance".
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping

ORDER = 3
DISCOUNT = 0.5
#: share of the unigram mass spread evenly over the vocabulary, so that any
#: hint word may follow any other (through back-off), however rare
UNIFORM_SHARE = 0.2
#: share of the unigram mass given to background words (see :func:`build_arpa`)
BACKGROUND_SHARE = 0.45
BOS, EOS = "<s>", "</s>"

_WORD = re.compile(r"[a-z0-9']+")

#: How callers wrap a request on the phone. Added to every hint set so that
#: "I would like to ... check my balance" is heard as words, not squeezed into
#: the nearest hint words.
CARRIER_PHRASES: tuple[str, ...] = (
    "i would like to", "i'd like to", "i want to", "i need to", "i wanna", "can you", "could you",
    "can you tell me", "could you tell me", "can i", "could i", "may i", "please", "i would like to know",
    "i want to know", "tell me", "what is", "what's", "what are", "when is", "how do i", "how much",
    "yes", "no", "um", "uh", "hello", "hi", "thank you", "thanks", "the", "a", "my",
    "and", "for", "to", "of", "is", "it", "that", "this", "me", "about", "just", "again", "sorry",
)

#: Acknowledgements said while the agent talks. Without words of their own in the
#: model they come out as the nearest hint words ("mm-hmm" as "an agent", which is
#: a request); they are added ACKNOWLEDGEMENT_WEIGHT times, as a caller says them
#: far more often than any one request.
ACKNOWLEDGEMENTS: tuple[str, ...] = (
    "uh huh", "mm hmm", "mhm", "hmm", "mm", "yeah", "yep", "okay", "ok", "right", "all right", "sure", "i see",
    "oh", "ah",
)
ACKNOWLEDGEMENT_WEIGHT = 12


def sentences(phrases: Iterable[str], known: Callable[[str], bool] = lambda w: True) -> list[list[str]]:
    """Lower-cased word lists of *phrases*, keeping only words *known* accepts (in the dictionary)."""
    out: list[list[str]] = []
    for phrase in phrases:
        words = [w for w in _WORD.findall(phrase.lower()) if known(w)]
        if words:
            out.append(words)
    return out


def build_arpa(sents: list[list[str]], background: Mapping[str, float] | None = None,
               background_share: float = BACKGROUND_SHARE) -> str:
    """ARPA text of a trigram model of *sents* (lists of words); empty input raises ValueError.

    *background* (word -> probability, e.g. the commonest words of a general model) gets
    *background_share* of the unigram mass: words outside the hints then have somewhere
    to go, so a noise or an off-script answer is heard as everyday words instead of being
    forced into the nearest hint phrase.
    """
    if not sents:
        raise ValueError("no phrases with known words to build a language model from")
    counts: list[Counter[tuple[str, ...]]] = [Counter() for _ in range(ORDER + 1)]
    for words in sents:
        seq = [BOS] + words + [EOS]
        for n in range(1, ORDER + 1):
            for i in range(len(seq) - n + 1):
                gram = tuple(seq[i:i + n])
                if n == 1 and gram == (BOS,):
                    continue
                counts[n][gram] += 1
    hinted = sorted(w for (w,) in counts[1])
    total = sum(counts[1].values())
    background = {w: p for w, p in (background or {}).items() if p > 0 and w not in (BOS, EOS)}
    bg_total = sum(background.values())
    bg_share = background_share if bg_total > 0 else 0.0
    vocab = sorted(set(hinted) | set(background))
    # Unigrams: the observed distribution mixed with a uniform one, then with the background.
    prob: list[dict[tuple[str, ...], float]] = [{} for _ in range(ORDER + 1)]
    for w in vocab:
        hint_p = 0.0
        if counts[1][(w,)] or w in hinted:
            hint_p = (1 - UNIFORM_SHARE) * counts[1][(w,)] / total + UNIFORM_SHARE / len(hinted)
        bg_p = background.get(w, 0.0) / bg_total if bg_total > 0 else 0.0
        prob[1][(w,)] = (1 - bg_share) * hint_p + bg_share * bg_p
    # Higher orders: absolute discounting; histories remember their seen continuations.
    for n in range(2, ORDER + 1):
        history_total: Counter[tuple[str, ...]] = Counter()
        for gram, c in counts[n].items():
            history_total[gram[:-1]] += c
        for gram, c in counts[n].items():
            prob[n][gram] = (c - DISCOUNT) / history_total[gram[:-1]]
    backoff: list[dict[tuple[str, ...], float]] = [{} for _ in range(ORDER + 1)]
    for n in range(1, ORDER):
        seen: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for gram in prob[n + 1]:
            seen[gram[:-1]].append(gram[-1])
        for history, nexts in seen.items():
            left = 1.0 - sum(prob[n + 1][history + (w,)] for w in nexts)
            lower = 1.0 - sum(_katz(prob, backoff, history[1:] + (w,)) for w in nexts)
            backoff[n][history] = left / lower if lower > 1e-9 else 1.0
    lines = ["\\data\\"]
    # <s> is a unigram of its own (probability 0, written -99) with a back-off weight.
    lines.append(f"ngram 1={len(vocab) + 1}")
    for n in range(2, ORDER + 1):
        lines.append(f"ngram {n}={len(prob[n])}")
    lines.append("")
    for n in range(1, ORDER + 1):
        lines.append(f"\\{n}-grams:")
        grams = sorted(prob[n])
        if n == 1:
            lines.append(f"-99.0000\t{BOS}\t{_log(backoff[1].get((BOS,), 1.0)):.4f}")
        for gram in grams:
            entry = f"{_log(prob[n][gram]):.4f}\t{' '.join(gram)}"
            if n < ORDER and gram in backoff[n]:
                entry += f"\t{_log(backoff[n][gram]):.4f}"
            lines.append(entry)
        lines.append("")
    lines.append("\\end\\")
    return "\n".join(lines) + "\n"


def _katz(prob: list[dict[tuple[str, ...], float]], backoff: list[dict[tuple[str, ...], float]],
          gram: tuple[str, ...]) -> float:
    """P(gram[-1] | gram[:-1]) with back-off (weights of the lower orders are known by now)."""
    n = len(gram)
    if gram in prob[n]:
        return prob[n][gram]
    if n == 1:
        return 0.0
    return backoff[n - 1].get(gram[:-1], 1.0) * _katz(prob, backoff, gram[1:])


def _log(p: float) -> float:
    return math.log10(p) if p > 0 else -99.0

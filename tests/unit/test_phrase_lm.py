"""The phrase-hint language model: a well-formed back-off trigram model of the phrases."""
from __future__ import annotations

import math
import re

import pytest

from agent.speech.server.phrase_lm import BOS, build_arpa, sentences


def _parse(arpa: str) -> dict[int, dict[tuple[str, ...], tuple[float, float]]]:
    grams: dict[int, dict[tuple[str, ...], tuple[float, float]]] = {}
    order = 0
    for line in arpa.splitlines():
        m = re.fullmatch(r"\\(\d)-grams:", line)
        if m:
            order = int(m.group(1))
            grams[order] = {}
            continue
        if order and line and not line.startswith("\\"):
            fields = line.split("\t")
            words = tuple(fields[1].split())
            grams[order][words] = (float(fields[0]), float(fields[2]) if len(fields) > 2 else 0.0)
    return grams


def _prob(grams: dict[int, dict[tuple[str, ...], tuple[float, float]]], history: tuple[str, ...], word: str) -> float:
    gram = history + (word,)
    if gram in grams[len(gram)]:
        return 10 ** grams[len(gram)][gram][0]
    backoff = 10 ** grams[len(history)].get(history, (0.0, 0.0))[1] if history else 1.0
    return backoff * _prob(grams, history[1:], word)


def test_header_counts_match_the_sections_and_every_history_sums_to_one() -> None:
    arpa = build_arpa(sentences(["check my balance", "my account balance", "opening hours", "goodbye"]))
    grams = _parse(arpa)
    for n in (1, 2, 3):
        assert f"ngram {n}={len(grams[n])}" in arpa
    vocab = [w for (w,) in grams[1] if w != BOS]
    for history in [(BOS,), ("my",), (BOS, "check"), ("check", "my"), ("hours",), ("goodbye",)]:
        total = sum(_prob(grams, history, w) for w in vocab)
        assert math.isclose(total, 1.0, rel_tol=1e-3), (history, total)
    # Seen continuations are likelier than unseen ones.
    assert _prob(grams, ("check", "my"), "balance") > _prob(grams, ("check", "my"), "hours")
    assert _prob(grams, (BOS,), "goodbye") > _prob(grams, (BOS,), "hours")


def test_words_outside_the_dictionary_are_dropped_and_no_words_is_an_error() -> None:
    known = {"check", "my", "balance"}.__contains__
    assert sentences(["Check my BALANCE, please!", "xyzzy"], known) == [["check", "my", "balance"]]
    with pytest.raises(ValueError, match="no phrases"):
        build_arpa(sentences(["xyzzy"], known))


def test_pocketsphinx_loads_the_model() -> None:
    import os
    import tempfile

    import pocketsphinx

    arpa = build_arpa(sentences(["check my balance", "goodbye"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hints.arpa")
        with open(path, "w") as f:
            f.write(arpa)
        model = pocketsphinx.NGramModel(pocketsphinx.Config(loglevel="FATAL"), pocketsphinx.LogMath(), path)
        assert model.size() == 3  # orders
        assert model.prob(["balance", "my", "check"]) > model.prob(["goodbye", "my", "check"])

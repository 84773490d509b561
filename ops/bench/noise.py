"""A caller's background noise, mixed into the evaluation corpus's 8 kHz speech (docs/speech.md,
"Callers in noise").

Kinds: ``white`` and ``pink`` noise cut to the telephone band (300-3400 Hz, as a handset and the
network pass it: a hiss, a fan, a car or a street), and ``babble``: six of the same half's other
renderings said at once, a room of people talking. The noise is made from a seed taken from the
file's name, so a trace made again is made of the same noise. The speech's level is its active
level (the power of its voiced spans, from the manifest), the noise is scaled to lie *snr_db*
under it, and the mix is coded as G.711 µ-law again, as the caller's line would carry it.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from media import convert
from media.latency import wav_data

KINDS = ("white", "pink", "babble")
RATE_HZ = 8000
BAND_HZ = (300.0, 3400.0)
#: talkers in the babble
BABBLE_TALKERS = 6


@dataclass(frozen=True)
class Noise:
    """A kind of noise *snr_db* under the speech (``pink:15``)."""

    kind: str
    snr_db: float

    @classmethod
    def parse(cls, text: str) -> "Noise":
        kind, sep, snr = text.partition(":")
        if kind not in KINDS or not sep:
            raise ValueError(f"noise {text!r}: expected KIND:SNR_DB with KIND one of {', '.join(KINDS)} (e.g. pink:15)")
        try:
            return cls(kind, float(snr))
        except ValueError:
            raise ValueError(f"noise {text!r}: the SNR must be a number of dB (e.g. pink:15)") from None

    @property
    def tag(self) -> str:
        """For file names: ``pink15``."""
        return f"{self.kind}{self.snr_db:g}"


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))


def _band(x: np.ndarray) -> np.ndarray:
    spectrum = np.fft.rfft(x)
    f = np.fft.rfftfreq(len(x), 1.0 / RATE_HZ)
    spectrum[(f < BAND_HZ[0]) | (f > BAND_HZ[1])] = 0
    return np.fft.irfft(spectrum, len(x))


def _coloured(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    x = rng.standard_normal(n)
    if kind == "pink":
        spectrum = np.fft.rfft(x)
        spectrum /= np.sqrt(np.arange(len(spectrum)) + 1.0)
        x = np.fft.irfft(spectrum, n)
    return _band(x)


@lru_cache(maxsize=8)
def _talkers(half_dir: str) -> tuple[np.ndarray, ...]:
    import json

    with open(os.path.join(half_dir, "manifest.json")) as f:
        files = json.load(f)["files"]
    voices = []
    for entry in files:
        if entry["kind"] in ("turn", "out_of_scope"):
            voices.append(_pcm(os.path.join(half_dir, entry["file"])))
    return tuple(voices)


def _pcm(path: str) -> np.ndarray:
    return np.frombuffer(convert.ulaw_to_pcm16(wav_data(path)[2]), dtype=np.int16).astype(np.float64)


def _babble(rng: np.random.Generator, n: int, half_dir: str, exclude: int) -> np.ndarray:
    voices = _talkers(half_dir)
    out = np.zeros(n)
    for _ in range(BABBLE_TALKERS):
        stream: list[np.ndarray] = []
        length = 0
        while length < n:
            i = int(rng.integers(len(voices)))
            if len(voices[i]) == exclude:
                continue
            stream.append(voices[i])
            length += len(voices[i])
        talker = np.concatenate(stream)
        start = int(rng.integers(len(talker) - n + 1))
        out += talker[start:start + n]
    return out


def _power(x: np.ndarray) -> float:
    return float(np.mean(x * x)) if len(x) else 0.0


def active_level(pcm: np.ndarray, voiced_ms: Sequence[Sequence[float]]) -> float:
    """Mean power of *pcm* over its voiced spans (ms)."""
    spans = [pcm[int(a * RATE_HZ / 1000):int(b * RATE_HZ / 1000)] for a, b in voiced_ms]
    return _power(np.concatenate(spans)) if spans else _power(pcm)


def mixed(half_dir: str, entry: dict[str, Any], noise: Noise, lead_ms: int, tail_ms: int) -> bytes:
    """The entry's 8 kHz speech with *lead_ms* of the noise alone before it and *tail_ms* after
    it (the speech's own file silence included), the noise running through: pcm16."""
    speech = _pcm(os.path.join(half_dir, entry["file"]))
    lead, tail = lead_ms * RATE_HZ // 1000, tail_ms * RATE_HZ // 1000
    n = lead + len(speech) + tail
    rng = _rng(f"{entry['file']}:{noise.kind}")
    sound = _babble(rng, n, half_dir, len(speech)) if noise.kind == "babble" else _coloured(rng, n, noise.kind)
    target = active_level(speech, entry["voiced_ms"]) / 10 ** (noise.snr_db / 10)
    sound *= np.sqrt(target / max(_power(sound), 1e-12))
    sound[lead:lead + len(speech)] += speech
    pcm = np.clip(np.round(sound), -32768, 32767).astype(np.int16).tobytes()
    return convert.ulaw_to_pcm16(convert.pcm16_to_ulaw(pcm))

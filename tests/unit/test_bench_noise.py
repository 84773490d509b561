"""ops/bench/noise.py: a caller's background noise mixed into the evaluation corpus's speech."""
import json
import math
import os

import numpy as np
import pytest

from media import convert
from media.latency import wav_data, write_ulaw_wav
from ops.bench.noise import Noise, mixed

RATE = 8000


def _write(half_dir: str, name: str, freq: float, ms: int) -> dict:
    t = np.arange(RATE * ms // 1000) / RATE
    pcm = (8000 * np.sin(2 * math.pi * freq * t)).astype("<i2").tobytes()
    write_ulaw_wav(os.path.join(half_dir, name), convert.pcm16_to_ulaw(pcm))
    return {"file": name, "kind": "turn", "voiced_ms": [[0, ms]]}


@pytest.fixture
def half_dir(tmp_path):
    files = [_write(str(tmp_path), f"talker{i}.wav", 200 + 50 * i, 700 + 100 * i) for i in range(4)]
    (tmp_path / "manifest.json").write_text(json.dumps({"files": files}))
    return str(tmp_path), files


def _power_db(pcm: np.ndarray) -> float:
    return 10 * math.log10(float(np.mean(pcm.astype(float) ** 2)))


@pytest.mark.parametrize("kind", ["white", "pink", "babble"])
def test_the_noise_lies_the_asked_snr_under_the_speech_and_is_made_again_the_same(half_dir, kind):
    directory, files = half_dir
    entry = files[0]
    out = mixed(directory, entry, Noise.parse(f"{kind}:10"), lead_ms=1000, tail_ms=500)
    again = mixed(directory, entry, Noise.parse(f"{kind}:10"), lead_ms=1000, tail_ms=500)
    assert out == again
    pcm = np.frombuffer(out, "<i2")
    assert len(pcm) == RATE * (1000 + 700 + 500) // 1000
    speech_db = _power_db(np.frombuffer(convert.ulaw_to_pcm16(wav_data(os.path.join(directory, entry["file"]))[2]), "<i2"))
    # the lead and the tail hold the noise alone, 10 dB under the speech (over the whole mix)
    alone = np.concatenate([pcm[:RATE], pcm[RATE + RATE * 700 // 1000:]])
    assert abs(speech_db - _power_db(alone) - 10.0) < 1.5


def test_a_noise_is_named_kind_and_snr():
    assert Noise.parse("pink:15") == Noise("pink", 15.0) and Noise.parse("pink:15").tag == "pink15"
    for bad in ("pink", "hum:10", "pink:loud"):
        with pytest.raises(ValueError, match="KIND:SNR|SNR must be a number"):
            Noise.parse(bad)

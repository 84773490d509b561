"""ops/bench/barge-in's replay: a voice over a prompt through the agent's media pipeline and barge-in
controller on a Clock, the recogniser's words scripted."""
from __future__ import annotations

import math
import os
import struct
from typing import Any

from media import convert
from media.latency import write_ulaw_wav
from tests.bench import load_script


def bench() -> Any:
    return load_script("barge-in", "barge_in_bench")


def _entry(tmp_path: Any, kind: str, voice_ms: int) -> dict[str, Any]:
    """An 8 kHz µ-law file: 100 ms of silence, a 200 Hz tone of *voice_ms* at about -20 dBFS, 100 ms of silence."""
    n = voice_ms * 8
    tone = struct.pack(f"<{n}h", *(int(3000 * math.sin(2 * math.pi * 200 * i / 8000)) for i in range(n)))
    pcm = bytes(1600) + tone + bytes(1600)
    os.makedirs(tmp_path / "8k", exist_ok=True)
    write_ulaw_wav(str(tmp_path / "8k" / "voice.wav"), convert.pcm16_to_ulaw(pcm))
    return {"file": "8k/voice.wav", "kind": kind, "text": "", "voice": "tone", "asks": "all",
            "duration_ms": voice_ms + 200, "voiced_ms": [[100, 100 + voice_ms]]}


def test_a_sentence_over_the_prompt_is_heard_and_an_acknowledgement_lets_it_play_on(tmp_path: Any) -> None:
    b = bench()
    cfg = b.config_with([])
    entry = _entry(tmp_path, "out_of_scope", 800)
    said = {"events": [[0.5, "interim", "i'm out saying"], [1.2, "final", "i'm out saying", 0.7]]}
    r = b.over_prompt(entry, said, cfg, str(tmp_path))
    assert r["onset"] and r["stopped"] and r["why"] == "words" and r["heard"] == "i'm out saying"
    assert 1000 <= r["verdict_after_ms"] <= 1300  # the final words' time, less the first voiced frame
    assert 0 < r["loud_after_ms"] <= 150  # paused at the onset, then ducked until the verdict

    # Begun like an acknowledgement: the prompt plays on over "oh", ducked, not at its own level.
    oh = {"events": [[0.3, "interim", "oh"], [0.9, "interim", "oh can i talk to someone"],
                     [1.2, "final", "oh can i talk to someone", 0.8]]}
    r = b.over_prompt(_entry(tmp_path, "turn", 900), oh, cfg, str(tmp_path))
    assert r["stopped"] and 0 < r["loud_after_ms"] <= 150, r

    ack = {"events": [[0.4, "interim", "uh huh"], [1.2, "final", "uh huh", 0.9]]}
    r = b.over_prompt(_entry(tmp_path, "backchannel", 800), ack, cfg, str(tmp_path))
    assert r["onset"] and not r["stopped"] and r["heard"] == "uh huh"
    assert 0 < r["hole_ms"] < 300  # paused, then played on: no hole a caller notices

    rows = b.summarise([{**r, "kind": "backchannel"}, {**r, "kind": "turn"}])
    assert {k: rows["all"][k] for k in ("let_pass", "false_stops", "holes", "sentences", "dropped")} == \
        {"let_pass": 1, "false_stops": 0, "holes": 0, "sentences": 1, "dropped": 1}
    assert rows["all"]["ducked_p50_ms"] == r["ducked_ms"] > 0  # played on ducked under the voice

"""Barge-in over real SIP/RTP: what stops the agent and what does not.

One SIPp call plays, over the agent's greeting and menu, an "uh-huh", a 100 ms
noise burst and then a real interruption ("check my balance"), at known times
(the bench's scenario template and corpus). The capture is read back with the
bench's scoring, and the server's call record is checked too. Bounds are
generous: the test is about behaviour, the bench measures the figures.
"""
from __future__ import annotations

import pytest

from agent.tools.latency_report import timelines
from media.latency import ScoreParams, score_items
from tests.integration.conftest import AgentProcess
from tests.bench import load_bench
from tests.integration.test_latency_report import play_steps

pytestmark = pytest.mark.integration

SCHEDULE = (
    (3000, "backchannel-uh-huh-rms"),
    (7500, "noise-white-100ms"),
    (12500, "interruption-check-my-balance-awb"),
)


def test_uh_huh_and_a_noise_burst_do_not_stop_the_prompt_an_interruption_does(agent: AgentProcess,
                                                                             tmp_path) -> None:
    bench = load_bench()
    corpus = {cf.name: cf for files in bench.load_corpus().values() for cf in files}
    steps = [bench.Step(at, corpus[name]) for at, name in SCHEDULE]
    before = len(agent.records())
    pcap, _port = play_steps(bench, agent, tmp_path, steps, tail_ms=8000, timeout_s=90)

    tls = timelines(pcap)
    assert len(tls) == 1
    tl = tls[0]
    items, missing, _errors = bench.locate_items(tl.caller_packets, tl.caller_voiced, steps)
    assert not missing and len(items) == 3
    outcomes = {o.item.name: o for o in score_items(items, tl.agent_voiced, ScoreParams())}

    uh_huh = outcomes["backchannel-uh-huh-rms"]
    noise = outcomes["noise-white-100ms"]
    interruption = outcomes["interruption-check-my-balance-awb"]
    # Each item landed while the agent talked. The noise did not stop it (see below). The "uh-huh"
    # did not stop it: the prompt plays on over it, or -- when the recogniser names it only as it
    # ends -- pauses for about as long as it lasts and resumes (at the bench's 450 ms this
    # recording sits on the line: 420-460 ms; how often is the bench's figure, not this test's).
    # The interruption stopped it, soon, and was answered.
    assert uh_huh.outcome in ("kept_talking", "false_barge_in"), uh_huh
    if uh_huh.outcome == "false_barge_in":
        stop = uh_huh.item.onset_s + uh_huh.latency_ms / 1000.0
        resumed = min(t for t in tl.agent_voiced if t > stop)
        assert resumed - stop < 1.0, (uh_huh, resumed - stop)
    # On a loaded machine the noise may land in a gap between the menu's sentences (the prompt's
    # timing moves with the "uh-huh" pause and the machine): the wire then has nothing to score,
    # and the server's record below still shows the menu said once and no pause made for it.
    assert noise.outcome in ("kept_talking", "false_barge_in", "not_over_speech"), noise
    assert interruption.outcome == "barge_in", interruption
    assert interruption.latency_ms is not None and interruption.latency_ms < 400, interruption
    assert interruption.reply_ms is not None and interruption.reply_ms < 1000, interruption

    agent.wait_for(lambda: len(agent.records()) > before, what="the call record")
    record = agent.records()[-1]
    assert record["barge_ins"] == 1, record
    heard = [t["caller"] for t in record["turns"] if t.get("caller")]
    assert any("balance" in text for text in heard), heard
    spoken = [p["text"] for t in record["turns"] for p in t["agent"]]
    assert any(text.startswith("Your account balance") for text in spoken), spoken
    # the menu was said once, interrupted once: "uh-huh" and the noise left it playing
    menus = [p for t in record["turns"] for p in t["agent"] if p["text"].startswith("How can I help you")]
    assert len(menus) == 1 and menus[0]["interrupted"], menus
    assert record["rtp"]["rx_packets"] > 0 and record["rtp"]["tx_packets"] > 0, record["rtp"]
    # The server's own account of the holes: the "uh-huh" and the interruption each paused the
    # prompt (the noise did not, but for the case below), and no pause lasted long: past 200 ms a
    # voice still being judged lets the prompt play on, ducked (bound kept generous for a loaded
    # machine).
    pauses = record["prompt_pauses"]
    assert 2 <= len(pauses) <= 3, pauses
    if noise.outcome == "false_barge_in":
        # The noise does not pause the prompt, unless a packet of it came too late for the jitter
        # buffer (a loaded machine): pjmedia conceals it by repeating the last pitch period, a
        # periodic sound (docs/latency.md, "Packet loss concealment stays on"). Then the prompt
        # pauses briefly for it and resumes; the wire's silence may run on into a sentence gap.
        near = [p for p in pauses if abs(p["at_s"] - noise.item.onset_s) < 0.5]
        assert len(near) == 1 and near[0]["outcome"] == "resumed" and near[0]["ms"] < 300, (noise, pauses)
    if noise.outcome == "not_over_speech":
        assert not [p for p in pauses if abs(p["at_s"] - noise.item.onset_s) < 0.5], (noise, pauses)
    assert all(p["ms"] < 500 for p in pauses), pauses
    assert {p["outcome"] for p in pauses} <= {"resumed", "played_on", "ducked", "interrupted"}, pauses
    assert agent.metrics()["openclaw_prompt_pause_seconds_count"] >= len(pauses)

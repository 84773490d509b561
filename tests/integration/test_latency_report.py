"""The latency report's numbers on a real capture match what the test played.

A SIPp call (the bench's scenario template, ops/sipp/bench-call.xml, with a
one-item schedule) streams a corpus file of known content at a known time over
the agent's greeting; dumpcap captures loopback. The test then works out from
the raw packets, with its own decoding, what was on the wire -- the file's
bytes, the caller's voiced extent, the agent's stop and its reply -- and checks
that ``latency-report`` (in-process and the CLI) and the bench's scoring
(``locate_items`` + ``score_items``) report the same numbers.
"""
from __future__ import annotations

import json
import math
import os
import subprocess

import pytest

from agent.tools.latency_report import timelines
from media.convert import rms, ulaw_to_pcm16
from media.latency import AGENT_GAP_MS, score_items, wav_data
from media.pcap import read_udp, rtp_streams
from tests.bench import load_bench
from tests.integration.conftest import ROOT, OPENCLAW, AgentProcess, Capture, free_media_ports, free_port, run_sipp

pytestmark = pytest.mark.integration

CORPUS = os.path.join(ROOT, "ops", "bench", "corpus")
FILE = "interruption-check-my-balance-awb"
PLAY_AT_MS = 3000


def play_steps(bench, agent: AgentProcess, tmp_path, steps, *, tail_ms: int,  # type: ignore[no-untyped-def]
               timeout_s: float = 60) -> tuple[str, int]:
    """One SIPp call to *agent* playing the bench's *steps*, captured with dumpcap; returns the
    capture's path and the caller's media port (SIPp must have succeeded)."""
    media_dir = str(tmp_path)
    bench.write_media(steps, media_dir)
    scenario = tmp_path / "scenario.xml"
    scenario.write_text(bench.scenario_xml(steps, media_dir, tail_ms=tail_ms), encoding="iso-8859-1")
    media_port = free_media_ports()
    cap = Capture(str(tmp_path / "call.pcap"), f"udp port {agent.sip_port} or udp port {media_port}")
    try:
        result = run_sipp(str(scenario), f"127.0.0.1:{agent.sip_port}", "-s", "1000", "-m", "1", "-l", "1",
                          "-mp", str(media_port), timeout_s=timeout_s)
    finally:
        pcap = cap.stop()
    assert result.returncode == 0, result.stdout.decode()[-2000:] + result.stderr.decode()[-2000:]
    return pcap, media_port


def voiced(payload: bytes) -> bool:
    """The test's own voiced test: µ-law decoded RMS above -40 dBFS."""
    level = rms(ulaw_to_pcm16(payload))
    return level > 0 and 20 * math.log10(level / 32768.0) > -40.0


def test_report_matches_a_played_interruption_and_its_reply(agent: AgentProcess, tmp_path) -> None:
    """One call: "check my balance" (awb) streamed 3 s after the ACK, over the menu prompt.

    What the test played must be what the report measured: the caller's voiced
    start/end on the wire equal the manifest's within 30 ms, one barge-in at the
    caller's onset whose latency is the agent's last voiced packet (before a
    silence of AGENT_GAP_MS) minus that onset, and exactly one turn whose latency
    is the agent's first voiced packet after the caller's last voiced one minus
    that packet's time -- in the report, the CLI's JSON and the bench's scoring.
    """
    bench = load_bench()
    manifest = {e["file"]: e for e in json.load(open(os.path.join(CORPUS, "manifest.json")))["files"]}
    truth = manifest[FILE + ".wav"]
    corpus = {cf.name: cf for files in bench.load_corpus().values() for cf in files}
    steps = [bench.Step(PLAY_AT_MS, corpus[FILE])]
    pcap, media_port = play_steps(bench, agent, tmp_path, steps, tail_ms=9000)

    # -- what was played, from the raw capture with the test's own decoding
    with open(pcap, "rb") as f:
        udp = list(read_udp(f))
    ack = [p.at_s for p in udp if p.payload.startswith(b"ACK ")]
    assert len(ack) == 1, f"{len(ack)} ACKs in the capture"
    streams = rtp_streams(pcap, {media_port})
    caller = [s for s in streams if s.sport == media_port]
    agent_rtp = [s for s in streams if s.dport == media_port]
    assert len(caller) == 1 and len(agent_rtp) == 1, [(s.sport, s.dport) for s in streams]
    cpk = caller[0].packets
    data = wav_data(os.path.join(CORPUS, FILE + ".wav"))[2]
    assert len(cpk) == -(-len(data) // 160), "one packet per 160 bytes of the file"
    wire = b"".join(p.payload for p in cpk)
    assert wire[:len(data)] == data, "the wire carries exactly the file's audio, no header"
    assert set(wire[len(data):]) <= {0xFF, 0x7F}, "SIPp pads the last packet with silence"
    first = cpk[0].at_s
    assert abs((first - ack[0]) * 1000 - PLAY_AT_MS) < 250, f"stream began {(first - ack[0]) * 1000:.0f} ms after ACK"
    cvoiced = [p.at_s for p in cpk if voiced(p.payload)]
    onset, caller_end = cvoiced[0], cvoiced[-1]
    assert abs((onset - first) * 1000 - truth["voiced_start_ms"]) <= 30
    assert abs((caller_end - first) * 1000 - (truth["voiced_end_ms"] - 20)) <= 30

    avoiced = [p.at_s for p in agent_rtp[0].packets if voiced(p.payload)]
    before = [t for t in avoiced if t <= onset]
    assert before and onset - before[-1] < 0.4, "the agent was not talking when the caller began"
    stop = before[-1]
    for t in avoiced[avoiced.index(stop) + 1:]:
        if (t - stop) * 1000 >= AGENT_GAP_MS:
            break
        stop = t
    barge_ms = (stop - onset) * 1000
    assert stop < caller_end, f"the agent talked through the caller ({barge_ms:.0f} ms)"
    reply = [t for t in avoiced if t > caller_end]
    assert reply, "the agent never replied"
    turn_ms = (reply[0] - caller_end) * 1000

    # -- the report, in-process
    tls = timelines(pcap)
    assert len(tls) == 1
    tl = tls[0]
    assert abs((tl.caller[0].start_s - first) * 1000 - truth["voiced_start_ms"]) <= 30
    assert abs((tl.caller[-1].end_s - first) * 1000 - (truth["voiced_end_ms"] - 20)) <= 30
    turns = [e for e in tl.events if e.kind == "turn"]
    barges = [e for e in tl.events if e.kind == "barge_in"]
    assert len(turns) == 1, tl.events
    assert turns[0].latency_ms == pytest.approx(turn_ms, abs=0.5)
    assert len(barges) == 1 and barges[0].at_s == pytest.approx(onset, abs=1e-4)
    assert barges[0].latency_ms == pytest.approx(barge_ms, abs=0.5)

    # -- the CLI prints the same numbers
    out = subprocess.run([OPENCLAW, "latency-report", pcap, "--json"], capture_output=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr.decode()
    report = json.loads(out.stdout)
    assert report["calls"] == 1 and report["turns"] == 1 and report["barge_ins"] == 1
    assert report["turn_latency_ms"]["p50"] == pytest.approx(turn_ms, abs=0.1)
    # the agent's packets, one per 20 ms, paced by the media clock: the report counts the gaps
    # the test finds (a packet missing by sequence, or 40 ms or more between two); how many there
    # are is the machine's scheduling, which the bench judges, not this test
    pacing = report["agent_rtp_pacing"]
    apk = agent_rtp[0].packets
    gaps = sum(1 for a, b in zip(apk, apk[1:])
               if (b.sequence - a.sequence) % 65536 != 1 or (b.at_s - a.at_s) * 1000 >= 40.0)
    assert pacing["jitter_ms"]["n"] >= len(apk) - 2 - gaps
    assert pacing["gaps"] == gaps and pacing["gaps_in_speech"] <= gaps
    assert pacing["jitter_ms"]["p50"] < 10.0

    # -- the bench's scoring with the manifest's ground truth
    items, missing, errors = bench.locate_items(tl.caller_packets, tl.caller_voiced, steps)
    assert not missing and len(items) == 1
    assert max(abs(e) for e in errors) <= 30
    outcome = score_items(items, tl.agent_voiced)[0]
    assert outcome.outcome == "barge_in", outcome
    assert outcome.latency_ms == pytest.approx(barge_ms, abs=0.5)
    assert outcome.reply_ms == pytest.approx(turn_ms, abs=0.5)

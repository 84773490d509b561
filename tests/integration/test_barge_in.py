"""Barge-in over real SIP/RTP: what stops the agent and what does not.

One SIPp call plays, over the agent's greeting and menu, an "uh-huh", a 100 ms
noise burst and then a real interruption ("check my balance"), at known times
(the bench's scenario template and corpus). The capture is read back with the
bench's scoring, and the server's call record is checked too. Bounds are
generous: the test is about behaviour, the bench measures the figures.
"""
from __future__ import annotations

import os
import re
import socket
import struct
import time
import uuid

import pytest

from agent.tools.latency_report import timelines
from media.latency import ScoreParams, score_items
from tests.integration.conftest import ROOT, AgentProcess
from tests.bench import load_bench
from tests.integration.test_latency_report import play_steps
from tests.integration.test_robustness import UdpPeer, _final, _invite_bytes, rtp

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
    # Each item landed while the agent talked. The noise did not pause it at all. The "uh-huh"
    # did not stop it: the prompt plays on over it, or -- when the recogniser names it only as it
    # ends -- pauses for about as long as it lasts and resumes (at the bench's 450 ms this
    # recording sits on the line: 420-460 ms; how often is the bench's figure, not this test's).
    # The interruption stopped it, soon, and was answered.
    assert uh_huh.outcome in ("kept_talking", "false_barge_in"), uh_huh
    if uh_huh.outcome == "false_barge_in":
        stop = uh_huh.item.onset_s + uh_huh.latency_ms / 1000.0
        resumed = min(t for t in tl.agent_voiced if t > stop)
        assert resumed - stop < 1.0, (uh_huh, resumed - stop)
    assert noise.outcome == "kept_talking", noise
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
    # prompt (the noise did not), and no pause lasted long: past 200 ms a voice still being
    # judged lets the prompt play on, ducked (bound kept generous for a loaded machine).
    pauses = record["prompt_pauses"]
    assert 2 <= len(pauses) <= 3, pauses
    assert all(p["ms"] < 500 for p in pauses), pauses
    assert {p["outcome"] for p in pauses} <= {"resumed", "played_on", "ducked", "interrupted"}, pauses
    assert agent.metrics()["openclaw_prompt_pause_seconds_count"] >= len(pauses)


def _ulaw_data(path: str) -> bytes:
    """The data chunk of a µ-law WAV of the bench corpus."""
    with open(path, "rb") as f:
        raw = f.read()
    at = raw.index(b"data")
    (size,) = struct.unpack("<I", raw[at + 4:at + 8])
    return raw[at + 8:at + 8 + size]


def test_noise_bursts_with_late_packets_do_not_pause_the_prompt(agent: AgentProcess) -> None:
    """Six 100 ms white-noise bursts over the menu, each with its second and third packets sent
    40 ms late (network jitter: the jitter buffer finds them missing and drops them when they come).
    Packet loss concealment would fill the gap by repeating the noise's last few milliseconds, a
    periodic sound the barge-in detector takes for a voice; with it off, the prompt never pauses."""
    target = f"127.0.0.1:{agent.sip_port}"
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 30.0, "no active calls")
    before = len(agent.records())
    burst = _ulaw_data(os.path.join(ROOT, "ops", "bench", "corpus", "noise-white-100ms.wav"))[800:-800]
    silence = b"\xff" * 160
    frames = [silence] * 175  # 3.5 s: the greeting, then the menu has begun
    starts = []
    for _ in range(6):
        starts.append(len(frames))
        frames += [burst[i:i + 160].ljust(160, b"\xff") for i in range(0, len(burst), 160)]
        frames += [silence] * 55
    frames += [silence] * 25
    media = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    media.bind(("127.0.0.1", 0))
    peer = UdpPeer(target)
    try:
        offer = _invite_bytes(target, peer.local).replace(b"m=audio 40998 ",
                                                          f"m=audio {media.getsockname()[1]} ".encode())
        peer.send(offer)
        code, reply = _final(peer.recv, offer)
        assert code == 200, f"the call was not answered: {code} {reply[:300]!r}"
        m = re.search(rb"m=audio (\d+) ", reply)
        to = re.search(rb"(?im)^(?:To|t)\s*:\s*(.*?)\r$", reply, re.M)
        contact = re.search(rb"(?im)^(?:Contact|m)\s*:.*?<([^>]+)>", reply, re.M)
        call_id = re.search(rb"(?im)^(?:Call-ID|i)\s*:\s*(.*?)\r$", reply, re.M)
        assert m and to and contact and call_id, reply
        dest = ("127.0.0.1", int(m.group(1)))
        uri = contact.group(1).decode()
        dialog = (f"Max-Forwards: 70\r\nFrom: <sip:caller@example.net>;tag=t\r\nTo: {to.group(1).decode()}\r\n"
                  f"Call-ID: {call_id.group(1).decode()}\r\n")
        peer.send(f"ACK {uri} SIP/2.0\r\nVia: SIP/2.0/UDP {peer.local};rport;branch=z9hG4bK{uuid.uuid4().hex}\r\n"
                  f"{dialog}CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n".encode())
        start = time.monotonic()
        held: list[bytes] = []
        for index, payload in enumerate(frames):
            delay = start + index * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            packet = rtp(2000 + index, 16000 + 160 * index, 0x5EED, 0, payload)
            in_burst = [index - s for s in starts if 0 <= index - s < 5]
            if in_burst and in_burst[0] in (1, 2):
                held.append(packet)
                continue
            media.sendto(packet, dest)
            if held:
                time.sleep(0.02)
                for late in held:
                    media.sendto(late, dest)
                held = []
        peer.send(f"BYE {uri} SIP/2.0\r\nVia: SIP/2.0/UDP {peer.local};rport;branch=z9hG4bK{uuid.uuid4().hex}\r\n"
                  f"{dialog}CSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n".encode())
    finally:
        peer.close()
        media.close()
    agent.wait_for(lambda: len(agent.records()) > before, what="the call record")
    record = agent.records()[-1]
    rtp_stats = record["rtp"]
    # the late packets reached the jitter buffer too late: it found frames missing
    assert rtp_stats["jb_discarded"] + rtp_stats["jb_empty"] > 0, rtp_stats
    assert record["prompt_pauses"] == [], record["prompt_pauses"]
    assert record["false_interruptions"] == 0 and record["barge_ins"] == 0, record

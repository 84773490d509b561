"""Turn-taking analysis on synthetic packet timelines (media/latency.py, agent/tools/latency_report.py).

Packets are 20 ms apart, as G.711 RTP is; times are seconds. No capture, no
clock: each test builds the voiced-packet times of the caller and the agent and
checks the events, latencies and outcomes that come out.
"""
from __future__ import annotations

import argparse
import math
import struct
import sys

import pytest

from agent.tools.latency_report import call_timelines, format_report, main_report, read_capture, summary
from media.latency import (
    AGENT_GAP_MS, PlayedItem, ScoreParams, Spurt, analyse, packet_runs, percentile, rtp_pacing, score_items,
    sip_calls, spurts,
    voiced_intervals_ms, wav_data, write_ulaw_wav,
)
from media.convert import pcm16_to_ulaw
from media.pcap import UdpPacket

PKT = 0.020


def packets(start_s: float, end_s: float) -> list[float]:
    """Times of 20 ms packets from start_s to end_s inclusive."""
    n = int(round((end_s - start_s) / PKT))
    return [round(start_s + i * PKT, 6) for i in range(n + 1)]


def kinds(tl) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.kind for e in tl.events]


# --------------------------------------------------------------------------- wire-only analysis


def test_spurts_merge_gaps_up_to_the_merge_gap_only():
    """A 300 ms gap stays inside a spurt at merge 400 ms; a 500 ms gap splits it."""
    times = packets(0.0, 1.0) + packets(1.3, 2.0) + packets(2.5, 3.0)
    s = spurts(times, merge_gap_ms=400)
    assert [(x.start_s, x.end_s) for x in s] == [(0.0, 2.0), (2.5, 3.0)]
    assert s[0].duration_ms == pytest.approx(2000.0)


def test_turn_latency_is_agent_first_voiced_minus_caller_last_voiced():
    """Caller talks 1.00-2.00 s, agent answers from 2.34 s: one turn of 340 ms."""
    tl = analyse("c", packets(1.0, 2.0), packets(2.34, 4.0))
    assert kinds(tl) == ["turn"]
    assert tl.events[0].latency_ms == pytest.approx(340.0)
    assert tl.events[0].at_s == pytest.approx(2.0)


def test_agent_starting_in_the_callers_pause_is_a_cut_in_not_a_turn():
    """"I would like to" 1.0-2.0 s, 440 ms pause, "check my balance" 2.44-3.4 s; the agent starts at
    2.2 s, inside the pause: a cut-in (the caller talked 1.2 s into the reply), and no turn."""
    caller = packets(1.0, 2.0) + packets(2.44, 3.4)
    tl = analyse("c", caller, packets(2.2, 3.0) + packets(4.0, 6.0))
    assert kinds(tl) == ["cut_in"]
    assert tl.events[0].latency_ms == pytest.approx(-1200.0)


def test_reply_after_the_whole_paused_turn_is_a_turn():
    """The same paused turn answered 120 ms after its last voiced packet is one turn of 120 ms."""
    caller = packets(1.0, 2.0) + packets(2.44, 3.4)
    tl = analyse("c", caller, packets(3.52, 6.0))
    assert kinds(tl) == ["turn"]
    assert tl.events[0].latency_ms == pytest.approx(120.0)


def test_barge_in_latency_runs_to_the_agents_last_voiced_packet_then_the_reply_is_a_turn():
    """Agent talks 0-2.3 s (stopped), caller interrupts 2.0-3.0 s, agent replies at 3.2 s."""
    tl = analyse("c", packets(2.0, 3.0), packets(0.0, 2.3) + packets(3.2, 5.0))
    assert kinds(tl) == ["barge_in", "turn"]
    assert tl.events[0].latency_ms == pytest.approx(300.0)
    assert tl.events[1].latency_ms == pytest.approx(200.0)


def test_a_sentence_pause_of_the_agent_is_not_taken_for_it_stopping():
    """A 380 ms pause between two sentences (flite's longest) keeps the agent's spurt whole by
    default, so a barge-in at 1.0 s that the agent ignores reads as 4 s of talking on, not 0.4."""
    agent = packets(0.0, 1.4) + packets(1.78, 5.0)
    tl = analyse("c", packets(1.0, 1.3), agent)
    assert AGENT_GAP_MS > 380
    assert kinds(tl) == ["barge_in", "talk_over"]
    assert tl.events[0].latency_ms == pytest.approx(4000.0)
    tl_250 = analyse("c", packets(1.0, 1.3), agent, agent_gap_ms=250)
    assert tl_250.events[0].latency_ms == pytest.approx(400.0)


def test_backchannel_the_agent_talks_through_makes_no_turn():
    """"uh-huh" at 2.0-2.3 s while the agent talks 0-6 s: a barge-in event the agent talked
    through, and its continuing speech is not a reply with a turn latency."""
    tl = analyse("c", packets(2.0, 2.3), packets(0.0, 6.0))
    assert kinds(tl) == ["barge_in", "talk_over"]
    s = summary([tl])
    assert s["turns"] == 0 and s["barge_ins"] == 1 and s["talk_overs"] == 1
    assert "barge_in_latency_ms" not in s   # talked through: not a barge-in latency


def test_reply_after_the_callers_next_turn_belongs_to_the_next_turn():
    """Two caller turns 1 s apart with one agent reply after the second: one turn, for the second."""
    tl = analyse("c", packets(0.0, 0.5) + packets(1.5, 2.0), packets(2.1, 3.0), caller_gap_ms=700)
    assert kinds(tl) == ["turn"]
    assert tl.events[0].at_s == pytest.approx(2.0)
    assert tl.events[0].latency_ms == pytest.approx(100.0)


def test_percentile_is_nearest_rank():
    """p50/p95/p99 of 1..100 are 50/95/99; of 1..20, p95 is 19 and p99 is 20; one value is every percentile."""
    values = [float(v) for v in range(100, 0, -1)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50.0, 95.0, 99.0)
    twenty = [float(v) for v in range(1, 21)]
    assert (percentile(twenty, 95), percentile(twenty, 99)) == (19.0, 20.0)
    assert percentile([7.0], 99) == 7.0


def test_summary_and_report_give_p50_p95_p99_of_the_turns():
    """Three calls with turn latencies 100, 200 and 300 ms: p50 200, p95 and p99 300, printed as such."""
    tls = [analyse(f"c{i}", packets(1.0, 2.0), packets(2.0 + lat, 3.0)) for i, lat in enumerate((0.1, 0.2, 0.3))]
    s = summary(tls)
    assert s["turns"] == 3 and s["cut_ins"] == 0
    assert (s["turn_latency_ms"]["p50"], s["turn_latency_ms"]["p95"], s["turn_latency_ms"]["p99"]) == (200.0, 300.0, 300.0)
    assert "turn latency: p50 200 ms, p95 300 ms, p99 300 ms" in format_report(tls)


# --------------------------------------------------------------------------- ground-truth scoring


def item(kind: str, onset: float, end: float, pauses=(), index: int = 0) -> PlayedItem:  # type: ignore[no-untyped-def]
    return PlayedItem(index, f"{kind}-{index}", kind, onset - 0.1, onset, end, tuple(pauses))


def test_score_turn_latency_and_no_reply():
    """A plain turn ending at 2.0 s answered at 2.09 s scores 90 ms; one never answered is no_reply."""
    out = score_items([item("turn", 1.0, 2.0, index=0), item("turn", 10.0, 11.0, index=1)], packets(2.09, 5.0))
    assert [o.outcome for o in out] == ["turn", "no_reply"]
    assert out[0].latency_ms == pytest.approx(90.0)


def test_score_cut_in_inside_the_pause_of_a_paused_turn():
    """The agent starting at 2.2 s inside the turn's pause (2.0-2.45 s) is a cut-in "in a pause";
    starting 60 ms after the turn's end is not."""
    it = item("paused_turn", 1.0, 3.4, pauses=[(2.0, 2.45)])
    cut = score_items([it], packets(2.2, 3.0))[0]
    assert cut.outcome == "cut_in" and "in a pause" in cut.detail
    ok = score_items([it], packets(3.46, 5.0))[0]
    assert ok.outcome == "turn" and ok.latency_ms == pytest.approx(60.0)


def test_score_cut_in_needs_the_agent_to_start_before_the_turns_end():
    """Agent starting 40 ms after the last voiced packet: a turn of 40 ms. Starting 40 ms before
    it (within the 60 ms overlap): a turn of -40 ms. Starting 100 ms before: a cut-in of -100 ms."""
    it = item("turn", 1.0, 2.0)
    assert [(o.outcome, round(o.latency_ms or 0)) for o in
            (score_items([it], packets(t, 4.0))[0] for t in (2.04, 1.96, 1.9))] == \
        [("turn", 40), ("turn", -40), ("cut_in", -100)]


def test_score_a_turn_begun_while_the_agent_talked_is_not_a_turn():
    """A turn whose onset falls in agent speech is spoken_over and carries no latency."""
    out = score_items([item("turn", 2.0, 3.0)], packets(0.0, 2.5) + packets(3.2, 4.0))
    assert out[0].outcome == "spoken_over" and out[0].latency_ms is None


def test_score_noise_over_speech_false_barge_in_or_kept_talking():
    """A cough at 2.0 s: the agent going silent at 2.12 s (for 1 s) is a false barge-in of 120 ms;
    talking on through 6 s is kept_talking; a cough in agent silence is not scored."""
    cough = item("cough", 2.0, 2.12)
    stopped = score_items([cough], packets(0.0, 2.12) + packets(3.2, 5.0))[0]
    assert stopped.outcome == "false_barge_in" and stopped.latency_ms == pytest.approx(120.0)
    kept = score_items([cough], packets(0.0, 6.0))[0]
    assert kept.outcome == "kept_talking" and kept.latency_ms == pytest.approx(4000.0)
    silent = score_items([cough], packets(0.0, 1.0) + packets(4.0, 5.0))[0]
    assert silent.outcome == "not_over_speech"


def test_score_items_right_after_a_prompt_ended_are_in_silence():
    """A prompt that ended 300 ms before a cough's onset was not stopped by it (not scored), and a
    turn begun 300 ms after a prompt ended is a turn (latency to the reply), not spoken over."""
    prompt_then_reply = packets(0.0, 1.7) + packets(3.1, 5.0)
    assert score_items([item("cough", 2.0, 2.12)], prompt_then_reply)[0].outcome == "not_over_speech"
    turn = score_items([item("turn", 2.0, 3.0)], prompt_then_reply)[0]
    assert turn.outcome == "turn" and turn.latency_ms == pytest.approx(100.0)


def test_score_a_sentence_pause_right_after_a_backchannel_is_not_a_false_barge_in():
    """The agent pausing 380 ms between sentences 100 ms after "okay" began keeps talking."""
    out = score_items([item("backchannel", 2.0, 2.4)], packets(0.0, 2.1) + packets(2.48, 6.0))[0]
    assert out.outcome == "kept_talking"


def test_score_interruption_barge_in_latency_and_its_reply():
    """"check my balance" 5.0-6.0 s over a prompt: the agent's last voiced packet at 5.1 s gives
    barge-in latency 100 ms; its reply at 6.15 s is a turn of 150 ms."""
    out = score_items([item("interruption", 5.0, 6.0)], packets(0.0, 5.1) + packets(6.15, 9.0))[0]
    assert out.outcome == "barge_in"
    assert out.latency_ms == pytest.approx(100.0)
    assert out.reply_ms == pytest.approx(150.0)


def test_score_interruption_talked_over_is_missed():
    """The agent talking 3 s past an interruption's onset missed it (limit 2 s)."""
    out = score_items([item("interruption", 1.0, 2.0)], packets(0.0, 4.0), ScoreParams(missed_ms=2000))[0]
    assert out.outcome == "missed" and out.latency_ms == pytest.approx(3000.0)


def test_score_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="unknown item kind 'laugh'"):
        score_items([item("laugh", 1.0, 2.0)], [])


def test_packet_runs_split_items_at_gaps():
    """SIPp sends only while it plays: two files 1 s apart are two runs."""
    runs = packet_runs(packets(1.0, 2.0) + packets(3.0, 3.5))
    assert runs == [(1.0, 2.0), (3.0, 3.5)]


# --------------------------------------------------------------------------- audio ground truth


def ulaw_tone(ms: int, amplitude: int) -> bytes:
    n = 8 * ms
    pcm = struct.pack(f"<{n}h", *(int(amplitude * math.sin(2 * math.pi * 440 * i / 8000)) for i in range(n)))
    return pcm16_to_ulaw(pcm)


def test_voiced_intervals_follow_sipp_packetisation():
    """100 ms silence, 200 ms tone, 400 ms silence, 100 ms tone: intervals [100,300] and [700,800];
    merged across gaps up to 400 ms they are one."""
    audio = ulaw_tone(100, 0) + ulaw_tone(200, 8000) + ulaw_tone(400, 0) + ulaw_tone(100, 8000)
    assert voiced_intervals_ms(audio) == [(100, 300), (700, 800)]
    assert voiced_intervals_ms(audio, merge_gap_ms=400) == [(100, 800)]
    assert voiced_intervals_ms(ulaw_tone(100, 50)) == []   # -56 dBFS is not voiced


def test_ulaw_wav_round_trip_and_errors(tmp_path):
    """write_ulaw_wav then wav_data gives back the µ-law bytes, format 7 at 8 kHz; odd sizes too."""
    data = ulaw_tone(101, 8000)[:-1]
    path = str(tmp_path / "x.wav")
    write_ulaw_wav(path, data)
    assert wav_data(path) == (7, 8000, data)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"OggS" + bytes(40))
    with pytest.raises(ValueError, match="not a RIFF/WAVE file"):
        wav_data(str(bad))


# --------------------------------------------------------------------------- SIP and captures


def sip(at: float, text: str, sport: int = 5070, dport: int = 5060) -> UdpPacket:
    return UdpPacket(at, "127.0.0.1", sport, "127.0.0.1", dport, text.replace("\n", "\r\n").encode())


def invite(at: float, call_id: str, port: int) -> UdpPacket:
    return sip(at, f"INVITE sip:1000@127.0.0.1 SIP/2.0\nCall-ID: {call_id}\nCSeq: 1 INVITE\n"
                   f"Content-Type: application/sdp\n\nv=0\nc=IN IP4 127.0.0.1\nm=audio {port} RTP/AVP 0 101\n")


def ok(at: float, call_id: str, port: int) -> UdpPacket:
    return sip(at, f"SIP/2.0 200 OK\nCall-ID: {call_id}\nCSeq: 1 INVITE\n\nv=0\nc=IN IP4 127.0.0.1\n"
                   f"m=audio {port} RTP/AVP 0\n", 5060, 5070)


def bye(at: float, call_id: str) -> UdpPacket:
    return sip(at, f"BYE sip:1000@127.0.0.1 SIP/2.0\nCall-ID: {call_id}\nCSeq: 2 BYE\n\n")


def rtp(at: float, sport: int, dport: int, voiced: bool, seq: int = 0, pt: int = 0) -> UdpPacket:
    payload = ulaw_tone(20, 8000 if voiced else 0)
    header = struct.pack("!BBHII", 0x80, pt, seq & 0xFFFF, seq * 160, 0x1234 + sport)
    return UdpPacket(at, "127.0.0.1", sport, "127.0.0.1", dport, header + payload)


def test_sip_calls_reads_media_ports_and_call_times():
    """The INVITE gives the caller's port and start, the 200 OK to the INVITE the agent's, the BYE the end."""
    calls = sip_calls([invite(1.0, "a@x", 6000), ok(1.1, "a@x", 4000), bye(9.0, "a@x")])
    c = calls["a@x"]
    assert (c.caller, c.agent, c.started_s, c.ended_s) == (("127.0.0.1", 6000), ("127.0.0.1", 4000), 1.0, 9.0)


def test_call_timelines_keep_calls_on_reused_ports_apart():
    """Two calls one after the other on the same ports: each timeline has only its own packets,
    so the second call's turn latency is its own (150 ms), not polluted by the first call."""
    pk = [invite(0.0, "one", 6000), ok(0.05, "one", 4000)]
    pk += [rtp(t, 6000, 4000, True) for t in packets(1.0, 2.0)]
    pk += [rtp(t, 4000, 6000, True) for t in packets(2.3, 3.0)]
    pk += [bye(4.0, "one"), invite(10.0, "two", 6000), ok(10.05, "two", 4000)]
    pk += [rtp(t, 6000, 4000, True) for t in packets(11.0, 12.0)]
    pk += [rtp(t, 4000, 6000, v) for t, v in zip(packets(11.0, 13.0), [False] * 58 + [True] * 43)]
    tls = call_timelines(pk)
    assert [t.call_id for t in tls] == ["one", "two"]
    assert [e.latency_ms for e in tls[0].events] == pytest.approx([300.0])
    assert [e.latency_ms for e in tls[1].events] == pytest.approx([160.0])
    assert len(tls[1].caller_packets) == 51 and tls[1].started_s == 10.0 and tls[1].codec == "PCMU"


def g722_packets(start_s: float, sport: int, dport: int, levels: list[int]) -> list[UdpPacket]:
    """A G.722 stream (payload type 9) of 20 ms packets, one 400 Hz tone of each amplitude in
    *levels* (0: silence), encoded as one stream as a phone would (the ADPCM state carries over)."""
    import numpy as np

    from media.convert import pcm16_to_g722

    t = np.arange(320 * len(levels)) / 16000.0
    amplitude = np.repeat(np.array(levels, dtype=float), 320)
    payload = pcm16_to_g722((amplitude * np.sin(2 * np.pi * 400 * t)).astype("<i2").tobytes())
    out = []
    for k in range(len(levels)):
        header = struct.pack("!BBHII", 0x80, 9, k & 0xFFFF, k * 160, 0x4321 + sport)
        out.append(UdpPacket(start_s + k * 0.02, "127.0.0.1", sport, "127.0.0.1", dport,
                             header + payload[k * 160:(k + 1) * 160]))
    return out


def test_g722_calls_are_read_like_g711_ones():
    """A call whose both sides send G.722 (payload type 9) has its turn found: the caller's
    packets are all counted, voiced ones told from silent ones after decoding the stream. The
    codec's filters delay the sound by ~1.5 ms, so the packet after the caller's last one with
    tone still carries its end (-27 dBFS): the turn ends 20 ms later than the tone was sent."""
    pk = [invite(0.0, "w", 6000), ok(0.05, "w", 4000)]
    pk += g722_packets(1.0, 6000, 4000, [8000] * 25 + [0] * 25)           # tone in 1.00-1.48
    pk += g722_packets(1.0, 4000, 6000, [0] * 34 + [6000] * 16)            # the agent from 1.68
    tls = call_timelines(pk)
    assert len(tls) == 1 and [e.kind for e in tls[0].events] == ["turn"]
    assert tls[0].events[0].latency_ms == pytest.approx(180.0, abs=0.01)
    assert len(tls[0].caller_packets) == 50 and len(tls[0].caller_voiced) == 26
    assert tls[0].codec == "G722" and format_report(tls).startswith("call w (G722): ")


def test_g722_stream_audio_is_decoded_in_order():
    """RtpStream.audio decodes G.722 with its state carried over: a tone comes back at its level."""
    from media.convert import rms_dbfs
    from media.pcap import RtpStream, parse_rtp

    pk = g722_packets(0.0, 6000, 4000, [8000] * 10)
    stream = RtpStream("127.0.0.1", 6000, "127.0.0.1", 4000, 0, [parse_rtp(p.at_s, p.payload) for p in pk])
    pcm16k = stream.audio(16000)
    assert len(pcm16k) == 10 * 640
    # the tone's RMS is 8000 / sqrt(2) = 5657, -15.3 dBFS; the codec's first packet is its ramp-up
    assert rms_dbfs(pcm16k[640:]) == pytest.approx(-15.3, abs=0.5)
    assert len(stream.audio(8000)) == 10 * 320


def test_call_timelines_from_a_pcap_file(tmp_path):
    """A classic pcap (raw IPv4 link type) with one call: read_capture + call_timelines find the turn."""
    tls = call_timelines(read_capture(one_call_capture(tmp_path)))
    assert len(tls) == 1 and [e.kind for e in tls[0].events] == ["turn"]
    assert tls[0].events[0].latency_ms == pytest.approx(200.0, abs=0.01)


def write_pcap(path, pk: list[UdpPacket]):  # type: ignore[no-untyped-def]
    """A classic pcap (raw IPv4 link type) of *pk*; returns *path*."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        for p in pk:
            udp = struct.pack("!HHHH", p.sport, p.dport, 8 + len(p.payload), 0) + p.payload
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                             bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1])) + udp
            sec = int(p.at_s)
            f.write(struct.pack("<IIII", 1_000_000 + sec, int(round((p.at_s - sec) * 1e6)), len(ip), len(ip)) + ip)
    return path


def one_call_capture(tmp_path):  # type: ignore[no-untyped-def]
    """A capture of one call with one 200 ms turn."""
    pk = [invite(0.0, "p", 6000), ok(0.05, "p", 4000)]
    pk += [rtp(t, 6000, 4000, True, i) for i, t in enumerate(packets(1.0, 1.5))]
    pk += [rtp(t, 4000, 6000, True, i) for i, t in enumerate(packets(1.7, 2.0))]
    return str(write_pcap(tmp_path / "c.pcap", pk))


def report_args(capture: str, png: str | None) -> argparse.Namespace:
    return argparse.Namespace(capture=capture, png=png, json=False, voiced_dbfs=-40.0, caller_gap_ms=700.0,
                              agent_gap_ms=450.0)


def test_report_png_draws_the_histograms(tmp_path, capsys):
    """latency-report --png with matplotlib installed prints the report and writes a PNG."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "h.png"
    assert main_report(report_args(one_call_capture(tmp_path), str(png))) == 0
    assert "1 calls, 1 turns" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_png_without_matplotlib_says_what_to_install(tmp_path, capsys, monkeypatch):
    """Without matplotlib (an optional extra), --png fails with one line naming the extra to
    install, exit status 2 and no traceback, before any analysis is printed or file written."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # `import matplotlib` raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    png = tmp_path / "h.png"
    assert main_report(report_args(one_call_capture(tmp_path), str(png))) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("latency-report: --png: drawing a PNG needs matplotlib:")
    assert "openclaw-voice[report]" in err and "Traceback" not in err
    assert not png.exists()


def test_report_without_png_needs_no_matplotlib(tmp_path, capsys, monkeypatch):
    """The text report itself never imports matplotlib."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main_report(report_args(one_call_capture(tmp_path), None)) == 0
    assert "turn latency: p50 200 ms" in capsys.readouterr().out


def test_rtp_pacing_measures_each_interval_against_the_packet_time():
    """20 ms packets (160 timestamp units) sent 20, 21, 19, 23 ms apart: deviations 0, 1, 1, 3 ms."""
    t, out = 0.0, [(0.0, 100, 0)]
    for i, gap in enumerate((20, 21, 19, 23), start=1):
        t += gap / 1000.0
        out.append((t, 100 + i, 160 * i))
    p = rtp_pacing(out)
    assert p is not None and p.ptime_ms == 20.0 and p.gaps == 0
    assert [round(d, 3) for d in p.deviations_ms] == [0.0, 1.0, 1.0, 3.0]


def test_rtp_pacing_counts_gaps_and_those_inside_a_prompt():
    """A lost packet (sequence jump) inside a talk spurt and a 60 ms hole outside it."""
    pk = [(0.00, 1, 0), (0.02, 2, 160), (0.06, 4, 480), (0.08, 5, 640), (0.14, 6, 800), (0.16, 7, 960)]
    p = rtp_pacing(pk, [Spurt(0.0, 0.09)])
    assert p is not None and p.gaps == 2 and p.gaps_in_speech == 1
    assert rtp_pacing(pk[:2]) is None

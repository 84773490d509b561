"""``openclaw-voice latency-report CAPTURE.pcap``: turn-taking figures from the wire.

Reads a classic pcap of SIP and RTP (``dumpcap -P -i lo -f udp``), finds each
call's media from the SDP of its INVITE and 200 OK (SIPp's and pjsua's alike),
classifies every G.711 or G.722 packet (payload type 0, 8 or 9) as voiced or not, and
prints per call and turn the turn latency, barge-in latency and cut-ins, then
p50/p95/p99. See docs/latency.md.

The same functions are the bench's API (``ops/bench/turn-latency``):
:func:`read_capture` and :func:`call_timelines` give, per call, the caller's
packet times and both sides' voiced packet times, which
:func:`media.latency.score_items` scores against the corpus ground truth.
"""
from __future__ import annotations

import json
import math
import sys
from typing import Any

from media.latency import (
    AGENT_GAP_MS, CALLER_GAP_MS, VOICED_DBFS, CallTimeline, analyse, audio_times, codec_of, percentile, rtp_pacing, sip_calls,
    voiced_times,
)
from media.pcap import RtpStream, UdpPacket, parse_rtp, read_udp

#: RTP this long after a call's BYE still belongs to it (packets in flight)
_AFTER_BYE_S = 1.0

#: what to install for ``--png`` (matplotlib is an optional extra, not a run-time dependency)
PNG_EXTRA_HINT = "install openclaw-voice[report] (pip install 'openclaw-voice[report]')"


class PlottingUnavailable(RuntimeError):
    """matplotlib, which draws the histograms, is not installed."""


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise PlottingUnavailable(f"drawing a PNG needs matplotlib: {PNG_EXTRA_HINT}") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_capture(path: str) -> list[UdpPacket]:
    """Every UDP datagram of a classic pcap file (ValueError on a bad file)."""
    with open(path, "rb") as f:
        return list(read_udp(f))


def call_timelines(packets: list[UdpPacket], *, voiced_dbfs: float = VOICED_DBFS,
                   caller_gap_ms: float = CALLER_GAP_MS, agent_gap_ms: float = AGENT_GAP_MS) -> list[CallTimeline]:
    """One analysed timeline per call that has SIP (offer and answer) and G.711 or G.722 RTP both
    ways.

    A call's RTP is the packets between its media ports (from the SDP), sent
    after its INVITE and before its BYE (plus a second), so ports reused by a
    later call do not mix two calls. Calls are ordered by their INVITE.
    """
    calls = sorted(sip_calls(packets).values(), key=lambda c: c.started_s or 0.0)
    rtp_by_ports: dict[tuple[int, int], list[tuple[UdpPacket, Any]]] = {}
    for p in packets:
        rtp = parse_rtp(p.at_s, p.payload)
        if rtp is not None:
            rtp_by_ports.setdefault((p.sport, p.dport), []).append((p, rtp))
    out = []
    for call in calls:
        if call.caller is None or call.agent is None:
            continue
        start = call.started_s if call.started_s is not None else -math.inf
        end = call.ended_s + _AFTER_BYE_S if call.ended_s is not None else math.inf
        cport, aport = call.caller[1], call.agent[1]
        streams = []
        for key in ((cport, aport), (aport, cport)):
            pkts = [(u, r) for u, r in rtp_by_ports.get(key, []) if start <= u.at_s <= end]
            if not pkts:
                break
            u0 = pkts[0][0]
            streams.append(RtpStream(u0.src, u0.sport, u0.dst, u0.dport, pkts[0][1].ssrc, [r for _, r in pkts]))
        if len(streams) != 2:
            continue
        from_caller, to_caller = streams
        tl = analyse(call.call_id, voiced_times(from_caller, voiced_dbfs), voiced_times(to_caller, voiced_dbfs),
                     caller_gap_ms=caller_gap_ms, agent_gap_ms=agent_gap_ms)
        tl.caller_packets = audio_times(from_caller)
        tl.codec = codec_of(from_caller)
        tl.agent_packets = [(p.at_s, p.sequence, p.timestamp) for p in to_caller.packets]
        tl.started_s = call.started_s
        out.append(tl)
    return out


def timelines(path: str, *, voiced_dbfs: float = VOICED_DBFS, caller_gap_ms: float = CALLER_GAP_MS,
              agent_gap_ms: float = AGENT_GAP_MS) -> list[CallTimeline]:
    """:func:`call_timelines` of a capture file."""
    return call_timelines(read_capture(path), voiced_dbfs=voiced_dbfs, caller_gap_ms=caller_gap_ms,
                          agent_gap_ms=agent_gap_ms)


def stats(values: list[float]) -> dict[str, float]:
    """n, p50/p95/p99 (nearest rank), min and max of a non-empty list, in its unit."""
    return {"n": len(values), "p50": round(percentile(values, 50), 1), "p95": round(percentile(values, 95), 1),
            "p99": round(percentile(values, 99), 1), "min": round(min(values), 1), "max": round(max(values), 1)}


def summary(tls: list[CallTimeline]) -> dict[str, Any]:
    turns = [e.latency_ms for t in tls for e in t.events if e.kind == "turn"]
    barge_ins = [e for t in tls for e in t.events if e.kind == "barge_in"]
    cut_ins = [e for t in tls for e in t.events if e.kind == "cut_in"]
    talk_overs = [e for t in tls for e in t.events if e.kind == "talk_over"]
    # Spurts the agent talked through are left out of the barge-in latency: without ground
    # truth they may be noises or backchannels it was right to ignore (the bench knows which).
    through = {(t.call_id, e.at_s) for t in tls for e in t.events if e.kind == "talk_over"}
    barge = [e.latency_ms for t in tls for e in t.events if e.kind == "barge_in" and (t.call_id, e.at_s) not in through]
    out: dict[str, Any] = {"calls": len(tls), "turns": len(turns), "cut_ins": len(cut_ins),
                           "barge_ins": len(barge_ins), "talk_overs": len(talk_overs)}
    for name, values in (("turn_latency_ms", turns), ("barge_in_latency_ms", barge)):
        if values:
            out[name] = stats(values)
    pacing = [p for p in (rtp_pacing(t.agent_packets, t.agent) for t in tls) if p is not None]
    deviations = [d for p in pacing for d in p.deviations_ms]
    if deviations:
        out["agent_rtp_pacing"] = {"jitter_ms": stats(deviations), "gaps": sum(p.gaps for p in pacing),
                                   "gaps_in_speech": sum(p.gaps_in_speech for p in pacing)}
    return out


def format_report(tls: list[CallTimeline]) -> str:
    lines = []
    for t in tls:
        lines.append(f"call {t.call_id} ({t.codec or 'no audio'}): {len(t.caller)} caller spurts, "
                     f"{len(t.agent)} agent spurts")
        t0 = min([s.start_s for s in t.caller + t.agent] or [0.0])
        for e in t.events:
            lines.append(f"  {e.at_s - t0:8.3f} s  {e.kind:<9} {e.latency_ms:8.1f} ms  {e.detail}")
    s = summary(tls)
    lines.append(f"{s['calls']} calls, {s['turns']} turns, {s['cut_ins']} cut-ins, {s['barge_ins']} barge-ins "
                 f"({s['talk_overs']} of them talked through, left out of the barge-in latency)")
    for name in ("turn_latency_ms", "barge_in_latency_ms"):
        if name in s:
            v = s[name]
            lines.append(f"{name.replace('_ms', '').replace('_', ' ')}: p50 {v['p50']:.0f} ms, p95 {v['p95']:.0f} ms, "
                         f"p99 {v['p99']:.0f} ms (min {v['min']:.0f}, max {v['max']:.0f})")
    if "agent_rtp_pacing" in s:
        lines.append(format_pacing(s["agent_rtp_pacing"]))
    return "\n".join(lines)


def format_pacing(p: dict[str, Any]) -> str:
    j = p["jitter_ms"]
    return (f"agent RTP pacing: |interval - ptime| p50 {j['p50']:.2f} ms, p99 {j['p99']:.2f} ms, max {j['max']:.2f} ms "
            f"over {j['n']} intervals; {p['gaps']} gap(s), {p['gaps_in_speech']} inside a prompt")


def draw_png(tls: list[CallTimeline], path: str, *, turns: list[float] | None = None,
             barge: list[float] | None = None, turn_target_ms: float = 150.0,
             barge_target_ms: float = 120.0) -> None:
    """Histograms of turn and barge-in latency with p50/p95/p99 lines and the p95 target
    (values default to the wire-only events). Raises PlottingUnavailable without matplotlib."""
    plt = _pyplot()
    if turns is None:
        turns = [e.latency_ms for t in tls for e in t.events if e.kind == "turn"]
    if barge is None:
        through = {(t.call_id, e.at_s) for t in tls for e in t.events if e.kind == "talk_over"}
        barge = [e.latency_ms for t in tls for e in t.events
                 if e.kind == "barge_in" and (t.call_id, e.at_s) not in through]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, values, title, target in ((axes[0], turns, "turn latency", turn_target_ms),
                                      (axes[1], barge, "barge-in latency", barge_target_ms)):
        if values:
            ax.hist(values, bins=30, color="#3b6ea8")
            for q, style in ((50, "-"), (95, "--"), (99, ":")):
                ax.axvline(percentile(values, q), color="black", linestyle=style, label=f"p{q}")
            ax.axvline(target, color="#c0392b", linestyle="--", label=f"p95 target {target:.0f} ms")
            ax.legend()
        ax.set_title(f"{title} (n={len(values)})")
        ax.set_xlabel("ms (on the wire)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main_report(args: Any) -> int:
    if args.png:
        try:
            _pyplot()
        except PlottingUnavailable as e:
            print(f"latency-report: --png: {e}", file=sys.stderr)
            return 2
    try:
        tls = timelines(args.capture, voiced_dbfs=args.voiced_dbfs, caller_gap_ms=args.caller_gap_ms,
                        agent_gap_ms=getattr(args, "agent_gap_ms", None) or AGENT_GAP_MS)
    except (OSError, ValueError) as e:
        print(f"latency-report: {args.capture}: {e}", file=sys.stderr)
        return 2
    if not tls:
        print(f"latency-report: {args.capture}: no call with SIP and G.711 or G.722 RTP both ways found", file=sys.stderr)
        return 1
    print(json.dumps(summary(tls)) if args.json else format_report(tls))
    if args.png:
        draw_png(tls, args.png)
    return 0

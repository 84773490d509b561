"""``openclaw-voice latency-report CAPTURE.pcap``: turn-taking figures from the wire.

Reads a classic pcap of SIP and RTP (``dumpcap -P -i lo -f udp``), finds each
call's media from the SDP of its INVITE and 200 OK, classifies every G.711
packet as voiced or not, and prints per call and turn the turn latency,
barge-in latency and cut-ins, then p50/p95/p99. See docs/latency.md.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from media.latency import CallTimeline, analyse, percentile, sip_calls, voiced_times
from media.pcap import RtpStream, parse_rtp, read_udp


def timelines(path: str, *, voiced_dbfs: float = -40.0, caller_gap_ms: float = 700.0,
              agent_gap_ms: float = 250.0) -> list[CallTimeline]:
    with open(path, "rb") as f:
        packets = list(read_udp(f))
    calls = sip_calls(packets)
    by_port: dict[tuple[int, int], RtpStream] = {}
    for p in packets:
        rtp = parse_rtp(p.at_s, p.payload)
        if rtp is None:
            continue
        key = (p.sport, p.dport)
        stream = by_port.get(key)
        if stream is None:
            stream = by_port[key] = RtpStream(p.src, p.sport, p.dst, p.dport, rtp.ssrc)
        stream.packets.append(rtp)
    out = []
    for call in calls.values():
        if call.caller is None or call.agent is None:
            continue
        cport, aport = call.caller[1], call.agent[1]
        from_caller = by_port.get((cport, aport))
        to_caller = by_port.get((aport, cport))
        if from_caller is None or to_caller is None:
            continue
        out.append(analyse(call.call_id, voiced_times(from_caller, voiced_dbfs), voiced_times(to_caller, voiced_dbfs),
                           caller_gap_ms=caller_gap_ms, agent_gap_ms=agent_gap_ms))
    out.sort(key=lambda t: (t.caller[0].start_s if t.caller else 0.0))
    return out


def summary(tls: list[CallTimeline]) -> dict[str, Any]:
    turns = [e.latency_ms for t in tls for e in t.events if e.kind == "turn"]
    barge = [e.latency_ms for t in tls for e in t.events if e.kind == "barge_in"]
    cut_ins = [e for t in tls for e in t.events if e.kind == "cut_in"]
    out: dict[str, Any] = {"calls": len(tls), "turns": len(turns), "cut_ins": len(cut_ins),
                           "barge_ins": len(barge)}
    for name, values in (("turn_latency_ms", turns), ("barge_in_latency_ms", barge)):
        if values:
            out[name] = {"p50": round(percentile(values, 50), 1), "p95": round(percentile(values, 95), 1),
                         "p99": round(percentile(values, 99), 1), "min": round(min(values), 1),
                         "max": round(max(values), 1)}
    return out


def format_report(tls: list[CallTimeline]) -> str:
    lines = []
    for t in tls:
        lines.append(f"call {t.call_id}: {len(t.caller)} caller spurts, {len(t.agent)} agent spurts")
        t0 = min([s.start_s for s in t.caller + t.agent] or [0.0])
        for e in t.events:
            lines.append(f"  {e.at_s - t0:8.3f} s  {e.kind:<9} {e.latency_ms:8.1f} ms  {e.detail}")
    s = summary(tls)
    lines.append(f"{s['calls']} calls, {s['turns']} turns, {s['cut_ins']} cut-ins, {s['barge_ins']} barge-ins")
    for name in ("turn_latency_ms", "barge_in_latency_ms"):
        if name in s:
            v = s[name]
            lines.append(f"{name.replace('_ms', '').replace('_', ' ')}: p50 {v['p50']:.0f} ms, p95 {v['p95']:.0f} ms, "
                         f"p99 {v['p99']:.0f} ms (min {v['min']:.0f}, max {v['max']:.0f})")
    return "\n".join(lines)


def draw_png(tls: list[CallTimeline], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = [e.latency_ms for t in tls for e in t.events if e.kind == "turn"]
    barge = [e.latency_ms for t in tls for e in t.events if e.kind == "barge_in"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, values, title in ((axes[0], turns, "turn latency"), (axes[1], barge, "barge-in latency")):
        if values:
            ax.hist(values, bins=30, color="#3b6ea8")
            for q, style in ((50, "-"), (95, "--"), (99, ":")):
                ax.axvline(percentile(values, q), color="black", linestyle=style, label=f"p{q}")
            ax.legend()
        ax.set_title(f"{title} (n={len(values)})")
        ax.set_xlabel("ms (on the wire)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main_report(args: Any) -> int:
    try:
        tls = timelines(args.capture, voiced_dbfs=args.voiced_dbfs, caller_gap_ms=args.caller_gap_ms)
    except (OSError, ValueError) as e:
        print(f"latency-report: {args.capture}: {e}", file=sys.stderr)
        return 2
    if not tls:
        print(f"latency-report: {args.capture}: no call with SIP and G.711 RTP both ways found", file=sys.stderr)
        return 1
    print(json.dumps(summary(tls)) if args.json else format_report(tls))
    if args.png:
        draw_png(tls, args.png)
    return 0

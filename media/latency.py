"""Turn-taking figures measured on the wire (from a packet capture).

Definitions (docs/latency.md):

* **turn latency**: from the caller's last voiced RTP packet of a turn to the
  agent's first voiced RTP packet of its reply;
* **barge-in latency**: from the caller's first voiced packet while the agent
  is talking to the agent's last voiced packet before its audio goes silent;
* **cut-in**: the agent starts replying while the caller is still talking
  (the caller's talk spurt goes on after the agent's reply began).

Everything here is pure: packets (time, voiced) in, events out. A packet is
voiced when its decoded level is above ``voiced_dbfs``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from media.frames import rms_dbfs
from media.pcap import RtpStream, UdpPacket


@dataclass(frozen=True)
class Spurt:
    """A run of voiced packets with no gap longer than the merge gap."""

    start_s: float
    end_s: float  # time of the last voiced packet

    @property
    def duration_ms(self) -> float:
        return (self.end_s - self.start_s) * 1000.0


@dataclass(frozen=True)
class TurnEvent:
    kind: str             # "turn", "cut_in", "barge_in", "talk_over"
    at_s: float
    latency_ms: float
    detail: str = ""


@dataclass
class CallTimeline:
    call_id: str
    caller: list[Spurt] = field(default_factory=list)
    agent: list[Spurt] = field(default_factory=list)
    events: list[TurnEvent] = field(default_factory=list)


def voiced_times(stream: RtpStream, voiced_dbfs: float = -40.0) -> list[float]:
    """Arrival times of the stream's voiced G.711 packets."""
    import audioop  # noqa: PLC0415 -- deprecated module, imported where used

    out = []
    for p in stream.packets:
        if p.payload_type == 0:
            pcm = audioop.ulaw2lin(p.payload, 2)
        elif p.payload_type == 8:
            pcm = audioop.alaw2lin(p.payload, 2)
        else:
            continue
        if rms_dbfs(pcm) > voiced_dbfs:
            out.append(p.at_s)
    return out


def spurts(times: list[float], merge_gap_ms: float) -> list[Spurt]:
    """Group voiced packet times into talk spurts; gaps up to *merge_gap_ms* stay inside one."""
    out: list[Spurt] = []
    for t in times:
        if out and (t - out[-1].end_s) * 1000.0 <= merge_gap_ms:
            out[-1] = Spurt(out[-1].start_s, t)
        else:
            out.append(Spurt(t, t))
    return out


def analyse(call_id: str, caller_times: list[float], agent_times: list[float], *,
            caller_gap_ms: float = 700.0, agent_gap_ms: float = 250.0,
            overlap_ms: float = 60.0) -> CallTimeline:
    """Turn, cut-in and barge-in events of one call.

    *caller_gap_ms*: pauses shorter than this stay inside one caller turn (a
    caller pausing mid-sentence is still in the same turn). *agent_gap_ms*: the
    agent's audio is "silent" after a gap this long. *overlap_ms*: caller
    audio continuing this long after the agent started makes a cut-in.
    """
    tl = CallTimeline(call_id, spurts(caller_times, caller_gap_ms), spurts(agent_times, agent_gap_ms))
    agent = tl.agent
    for c in tl.caller:
        talking = [a for a in agent if a.start_s < c.start_s <= a.end_s + agent_gap_ms / 1000.0]
        if talking:
            a = talking[0]
            stop = a.end_s
            tl.events.append(TurnEvent("barge_in", c.start_s, (stop - c.start_s) * 1000.0,
                                       f"caller spoke {c.duration_ms:.0f} ms; agent went on "
                                       f"{(stop - c.start_s) * 1000:.0f} ms"))
        # The agent's reply: its first spurt starting after this caller turn began.
        replies = [a for a in agent if a.start_s > c.start_s and not (a.start_s <= c.start_s <= a.end_s)]
        if not replies:
            continue
        reply = replies[0]
        # Only a reply that starts before the caller's next turn answers this one.
        nxt = [c2 for c2 in tl.caller if c2.start_s > c.start_s]
        if nxt and reply.start_s > nxt[0].start_s:
            continue
        if c.end_s > reply.start_s + overlap_ms / 1000.0:
            tl.events.append(TurnEvent("cut_in", reply.start_s, (reply.start_s - c.end_s) * 1000.0,
                                       f"caller talked {(c.end_s - reply.start_s) * 1000:.0f} ms into the reply"))
        else:
            tl.events.append(TurnEvent("turn", c.end_s, (reply.start_s - c.end_s) * 1000.0))
    tl.events.sort(key=lambda e: e.at_s)
    return tl


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


_CALL_ID = re.compile(r"^(?:Call-ID|i)\s*:\s*(\S+)", re.I | re.M)
_MEDIA = re.compile(r"^m=audio (\d+) ", re.M)
_CONN = re.compile(r"^c=IN IP[46] (\S+)", re.M)


@dataclass
class SipCallMedia:
    """Media addresses of one call, read from the SDP offer (INVITE) and answer (200)."""

    call_id: str
    caller: tuple[str, int] | None = None   # caller's RTP address (from the INVITE)
    agent: tuple[str, int] | None = None    # agent's RTP address (from its 200 OK)


def sip_calls(packets: list[UdpPacket]) -> dict[str, SipCallMedia]:
    calls: dict[str, SipCallMedia] = {}
    for p in packets:
        text = p.payload[:4096].decode("utf-8", "replace")
        if not (text.startswith("INVITE ") or text.startswith("SIP/2.0 200")) or "m=audio" not in text:
            continue
        cid = _CALL_ID.search(text)
        port = _MEDIA.search(text)
        conn = _CONN.search(text)
        if not cid or not port or not conn:
            continue
        call = calls.setdefault(cid.group(1), SipCallMedia(cid.group(1)))
        addr = (conn.group(1), int(port.group(1)))
        if text.startswith("INVITE "):
            call.caller = call.caller or addr
        elif "CSeq: 1 INVITE" in text or re.search(r"^CSeq:\s*\d+ INVITE", text, re.M):
            call.agent = call.agent or addr
    return calls

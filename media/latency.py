"""Turn-taking figures measured on the wire (from a packet capture).

Definitions (docs/latency.md):

* **turn latency**: from the caller's last voiced RTP packet of a turn to the
  agent's first voiced RTP packet of its reply;
* **barge-in latency**: from the caller's first voiced packet while the agent
  is talking to the agent's last voiced packet before its audio goes silent;
* **cut-in**: the agent starts replying while the caller is still in its turn
  (the caller's talk spurt, pauses included, goes on after the reply began);
* **false barge-in**: the agent goes silent right after a noise or a
  backchannel the caller made while it talked.

Everything here is pure: packet times and levels in, events out. A packet is
voiced when its decoded level is above ``voiced_dbfs``. Two layers:

* :func:`analyse` needs nothing but the two voiced-packet timelines of a call
  (``openclaw-voice latency-report`` on any capture);
* :func:`score_items` also knows what the caller played (the bench corpus's
  ground truth: kind, voiced extent, pauses) and scores each played item.
"""
from __future__ import annotations

import bisect
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from media.convert import rms_dbfs, ulaw_to_pcm16
from media.pcap import AUDIO_PAYLOAD_TYPES, PayloadDecoder, RtpStream, UdpPacket

#: level above which a 20 ms G.711 or G.722 packet counts as voiced
VOICED_DBFS = -40.0
#: pauses shorter than this stay inside one caller turn (wire-only analysis)
CALLER_GAP_MS = 700.0
#: the agent is silent after a gap this long: longer than the pauses flite leaves between
#: sentences, so a sentence boundary is not taken for the agent stopping (docs/latency.md)
AGENT_GAP_MS = 450.0


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
    caller_packets: list[float] = field(default_factory=list)   # arrival times of every caller G.711 or G.722 packet
    caller_voiced: list[float] = field(default_factory=list)    # ... of the voiced ones
    agent_voiced: list[float] = field(default_factory=list)     # agent's voiced packet times
    agent_packets: list[tuple[float, int, int]] = field(default_factory=list)  # every agent packet: (time, seq, ts)
    started_s: float | None = None                              # capture time of the call's INVITE
    codec: str = ""                                             # the caller's codec: PCMU, PCMA or G722


# --------------------------------------------------------------------------- levels


def voiced_times(stream: RtpStream, voiced_dbfs: float = VOICED_DBFS) -> list[float]:
    """Arrival times of the stream's voiced G.711 and G.722 packets."""
    decoder = PayloadDecoder()
    out = []
    for p in stream.packets:
        decoded = decoder.decode(p)
        if decoded is not None and rms_dbfs(decoded[0]) > voiced_dbfs:
            out.append(p.at_s)
    return out


CODEC_NAMES = {0: "PCMU", 8: "PCMA", 9: "G722"}


def codec_of(stream: RtpStream) -> str:
    """The codec of the stream's audio packets (the commonest, if it changed), "" if none."""
    counts: dict[int, int] = {}
    for p in stream.packets:
        if p.payload_type in AUDIO_PAYLOAD_TYPES:
            counts[p.payload_type] = counts.get(p.payload_type, 0) + 1
    return CODEC_NAMES[max(counts, key=counts.__getitem__)] if counts else ""


def audio_times(stream: RtpStream) -> list[float]:
    """Arrival times of all the stream's G.711 and G.722 packets, voiced or not."""
    return [p.at_s for p in stream.packets if p.payload_type in AUDIO_PAYLOAD_TYPES]


def voiced_frames(ulaw: bytes, frame_ms: int = 20, voiced_dbfs: float = VOICED_DBFS) -> list[bool]:
    """Per *frame_ms* frame of 8 kHz µ-law audio: is it voiced? (the last partial frame counts)."""
    return voiced_pcm_frames(ulaw_to_pcm16(ulaw), 8000, frame_ms, voiced_dbfs)


def voiced_pcm_frames(pcm: bytes, rate_hz: int, frame_ms: int = 20, voiced_dbfs: float = VOICED_DBFS) -> list[bool]:
    """Per *frame_ms* frame of pcm16 at *rate_hz*: is it voiced? (the last partial frame counts)."""
    step = 2 * rate_hz * frame_ms // 1000
    return [rms_dbfs(pcm[i:i + step]) > voiced_dbfs for i in range(0, len(pcm), step)]


def voiced_intervals_ms(ulaw: bytes, *, frame_ms: int = 20, voiced_dbfs: float = VOICED_DBFS,
                        merge_gap_ms: float = 0.0) -> list[tuple[int, int]]:
    """Voiced intervals ``[(start_ms, end_ms)]`` of 8 kHz µ-law audio, as SIPp packetises it.

    SIPp's ``rtp_stream`` sends 160 bytes (20 ms) per packet from the first byte,
    so frame *k* is packet *k*; an interval runs from its first voiced frame's
    start to its last voiced frame's end. Gaps up to *merge_gap_ms* are merged.
    """
    return voiced_pcm_intervals_ms(ulaw_to_pcm16(ulaw), 8000, frame_ms=frame_ms, voiced_dbfs=voiced_dbfs,
                                   merge_gap_ms=merge_gap_ms)


def voiced_pcm_intervals_ms(pcm: bytes, rate_hz: int, *, frame_ms: int = 20, voiced_dbfs: float = VOICED_DBFS,
                            merge_gap_ms: float = 0.0) -> list[tuple[int, int]]:
    """:func:`voiced_intervals_ms` of pcm16 audio at *rate_hz*."""
    out: list[tuple[int, int]] = []
    for k, voiced in enumerate(voiced_pcm_frames(pcm, rate_hz, frame_ms, voiced_dbfs)):
        if not voiced:
            continue
        start, end = k * frame_ms, (k + 1) * frame_ms
        if out and start - out[-1][1] <= merge_gap_ms:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def wav_data(path: str) -> tuple[int, int, bytes]:
    """``(format_tag, sample_rate_hz, data)`` of a WAV file (7 = µ-law, 6 = A-law, 1 = PCM).

    Raises ValueError when the file is not a RIFF/WAVE file with fmt and data chunks.
    """
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:4] != b"RIFF" or blob[8:12] != b"WAVE":
        raise ValueError(f"{path}: not a RIFF/WAVE file")
    pos, fmt, rate = 12, None, 0
    while pos + 8 <= len(blob):
        cid, size = blob[pos:pos + 4], struct.unpack("<I", blob[pos + 4:pos + 8])[0]
        body = blob[pos + 8:pos + 8 + size]
        if cid == b"fmt ":
            fmt, _channels, rate = struct.unpack("<HHI", body[:8])
        elif cid == b"data":
            if fmt is None:
                raise ValueError(f"{path}: data chunk before fmt chunk")
            return fmt, rate, body
        pos += 8 + size + (size & 1)
    raise ValueError(f"{path}: no data chunk")


def write_ulaw_wav(path: str, ulaw: bytes, sample_rate_hz: int = 8000) -> None:
    """Write 8-bit µ-law mono as WAVE_FORMAT_MULAW (fmt with cbSize, fact chunk, like sox)."""
    fmt = struct.pack("<HHIIHHH", 7, 1, sample_rate_hz, sample_rate_hz, 1, 8, 0)
    fact = struct.pack("<I", len(ulaw))
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"fact" + struct.pack("<I", 4) + fact
            + b"data" + struct.pack("<I", len(ulaw)) + ulaw + (b"\x00" if len(ulaw) & 1 else b""))
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body)) + body)


# --------------------------------------------------------------------------- wire-only analysis


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
            caller_gap_ms: float = CALLER_GAP_MS, agent_gap_ms: float = AGENT_GAP_MS,
            overlap_ms: float = 60.0) -> CallTimeline:
    """Turn, cut-in, barge-in and talk-over events of one call, from voiced packet times alone.

    *caller_gap_ms*: pauses shorter than this stay inside one caller turn (a
    caller pausing mid-sentence is still in the same turn). *agent_gap_ms*: the
    agent's audio is "silent" after a gap this long. *overlap_ms*: caller
    audio continuing this long after the agent started makes a cut-in.

    A caller spurt that starts inside an agent spurt is a ``barge_in`` (latency:
    how long the agent went on). When the agent talked on past the end of that
    spurt it never yielded: a ``talk_over`` event replaces the turn. Otherwise
    the agent's next spurt, if it starts before the caller's next spurt, is the
    reply: a ``turn`` (latency: reply start minus caller's last voiced packet)
    or, when the caller was still talking, a ``cut_in``.
    """
    tl = CallTimeline(call_id, spurts(caller_times, caller_gap_ms), spurts(agent_times, agent_gap_ms),
                      caller_voiced=list(caller_times), agent_voiced=list(agent_times))
    agent = tl.agent
    for i, c in enumerate(tl.caller):
        nxt = tl.caller[i + 1] if i + 1 < len(tl.caller) else None
        talking = [a for a in agent if a.start_s < c.start_s <= a.end_s]
        if talking:
            a = talking[0]
            went_on_ms = (a.end_s - c.start_s) * 1000.0
            tl.events.append(TurnEvent("barge_in", c.start_s, went_on_ms,
                                       f"caller spoke {c.duration_ms:.0f} ms; agent went on {went_on_ms:.0f} ms"))
            if a.end_s >= c.end_s:
                tl.events.append(TurnEvent("talk_over", c.start_s, went_on_ms,
                                           "agent talked through the caller's spurt"))
                continue
        replies = [a for a in agent if a.start_s > c.start_s]
        if not replies:
            continue
        reply = replies[0]
        if nxt is not None and reply.start_s > nxt.start_s:
            continue  # the agent said nothing before the caller's next spurt
        if c.end_s > reply.start_s + overlap_ms / 1000.0:
            tl.events.append(TurnEvent("cut_in", reply.start_s, (reply.start_s - c.end_s) * 1000.0,
                                       f"caller talked {(c.end_s - reply.start_s) * 1000:.0f} ms into the reply"))
        else:
            tl.events.append(TurnEvent("turn", c.end_s, (reply.start_s - c.end_s) * 1000.0))
    tl.events.sort(key=lambda e: e.at_s)
    return tl


@dataclass(frozen=True)
class Pacing:
    """How evenly a sender's RTP packets left: each interval against the nominal packet time."""
    ptime_ms: float
    intervals: int
    #: |interval - ptime| of every interval, ms
    deviations_ms: tuple[float, ...]
    #: packets missing by sequence number, or intervals of two packet times or more
    gaps: int
    #: ... of those, the ones inside a talk spurt (a prompt being played)
    gaps_in_speech: int


def rtp_pacing(packets: Sequence[tuple[float, int, int]], spurts_: Sequence[Spurt] = (),
               clock_rate_hz: int = 8000) -> Pacing | None:
    """Pacing of one RTP stream from ``(arrival_s, sequence, timestamp)`` per packet, in the
    order sent. The nominal packet time is the commonest RTP timestamp step."""
    if len(packets) < 3:
        return None
    steps = [(b[2] - a[2]) % (1 << 32) for a, b in zip(packets, packets[1:])]
    step = max(set(steps), key=steps.count)
    ptime_ms = step * 1000.0 / clock_rate_hz
    if ptime_ms <= 0:
        return None
    devs, gaps, in_speech = [], 0, 0
    for a, b in zip(packets, packets[1:]):
        interval_ms = (b[0] - a[0]) * 1000.0
        missing = (b[1] - a[1]) % 65536 != 1
        if missing or interval_ms >= 2 * ptime_ms:
            gaps += 1
            if any(s.start_s <= a[0] and b[0] <= s.end_s for s in spurts_):
                in_speech += 1
        if not missing:
            devs.append(abs(interval_ms - ptime_ms))
    return Pacing(ptime_ms, len(devs), tuple(devs), gaps, in_speech)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s) / 100.0 - 1e-9) - 1))
    return s[k]


# --------------------------------------------------------------------------- ground-truth scoring

#: kinds of played items (ops/bench/corpus/manifest.json)
TURN_KINDS = ("turn", "paused_turn")
OVER_SPEECH_KINDS = ("noise", "cough", "backchannel")
INTERRUPTION = "interruption"


@dataclass(frozen=True)
class PlayedItem:
    """One caller item as played on the wire: kind and ground truth, absolute times.

    ``onset_s``/``voiced_end_s``: first/last voiced packet expected from the
    file's ground truth (aligned to the item's first packet on the wire);
    ``pauses``: internal pauses ``(start_s, end_s)`` of a paused turn.
    """

    index: int
    name: str
    kind: str
    first_packet_s: float
    onset_s: float
    voiced_end_s: float
    pauses: tuple[tuple[float, float], ...] = ()

    def in_pause(self, t: float) -> bool:
        """Is *t* inside one of the turn's designed pauses?"""
        return any(a <= t < b for a, b in self.pauses)


@dataclass(frozen=True)
class ItemOutcome:
    """What the agent did about one played item.

    ``outcome``: for turns ``turn`` (latency_ms = reply latency), ``cut_in``
    (the agent started while the caller paused or still talked, more than
    ``overlap_ms`` before the turn's last voiced packet; latency_ms < 0),
    ``spoken_over`` (the agent was talking when the turn began: not a turn),
    ``no_reply``; for noise/cough/backchannel items ``kept_talking`` or
    ``false_barge_in`` (latency_ms = onset to the agent's last voiced packet),
    or ``not_over_speech`` (the agent was silent at the onset: not scored);
    for interruptions ``barge_in`` (latency_ms = onset to the agent's last
    voiced packet before it went silent), ``missed`` (it went on longer than
    *missed_ms*) or ``not_over_speech``. ``reply_ms``: for an interruption the
    agent stopped for, the turn latency of its reply (None if none).
    """

    item: PlayedItem
    outcome: str
    latency_ms: float | None = None
    reply_ms: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class ScoreParams:
    #: the agent is "talking" at t when it sent a voiced packet in the preceding
    #: window (longer than its own sentence pauses) and its speech goes on across t
    talking_window_ms: float = 400.0
    #: the agent went silent = a gap of at least this long in its voiced packets
    agent_gap_ms: float = AGENT_GAP_MS
    #: a noise/backchannel is a false barge-in when the agent went silent within
    #: this long after its onset
    false_barge_in_window_ms: float = 400.0
    #: an interruption the agent talked over this long is "missed"
    missed_ms: float = 2000.0
    #: the agent starting more than this before the caller's last voiced packet = cut-in
    #: (a smaller overlap is a turn with a negative latency: the agent timed the end)
    overlap_ms: float = 60.0
    #: no voiced agent packet this long after the turn's end = no reply
    no_reply_ms: float = 5000.0


def _talking_at(agent: list[float], t: float, window_ms: float, gap_ms: float) -> bool:
    """Was the agent talking at *t*: a voiced packet at most *window_ms* before it, and its
    speech going on across *t* (the next voiced packet less than *gap_ms* after that one)?

    A prompt that had just ended before *t* is not talking: the item landed in silence.
    """
    i = bisect.bisect_right(agent, t)
    if i == 0 or i == len(agent):
        return False
    prev, nxt = agent[i - 1], agent[i]
    return (t - prev) * 1000.0 <= window_ms and (nxt - prev) * 1000.0 < gap_ms


def _silent_from(agent: list[float], t: float, gap_ms: float) -> float | None:
    """The agent's last voiced packet at or after *t* that is followed by a gap
    of at least *gap_ms* (or ends the capture); None if it sent nothing at or
    after the last packet before *t*."""
    i = bisect.bisect_right(agent, t)
    j = max(0, i - 1)
    if not agent:
        return None
    while j + 1 < len(agent) and (agent[j + 1] - agent[j]) * 1000.0 < gap_ms:
        j += 1
    return agent[j]


def _first_after(agent: list[float], t: float) -> float | None:
    i = bisect.bisect_right(agent, t)
    return agent[i] if i < len(agent) else None


def score_items(items: Sequence[PlayedItem], agent_voiced: Sequence[float],
                params: ScoreParams = ScoreParams()) -> list[ItemOutcome]:
    """Score each played item of one call against the agent's voiced packet times."""
    agent = sorted(agent_voiced)
    out: list[ItemOutcome] = []
    for k, it in enumerate(items):
        next_onset = items[k + 1].first_packet_s if k + 1 < len(items) else math.inf
        talking = _talking_at(agent, it.onset_s, params.talking_window_ms, params.agent_gap_ms)
        if it.kind in TURN_KINDS:
            if talking:
                out.append(ItemOutcome(it, "spoken_over", detail="the agent was talking when the turn began"))
                continue
            first = _first_after(agent, it.onset_s)
            if first is not None and first < it.voiced_end_s - params.overlap_ms / 1000.0:
                where = "in a pause" if it.in_pause(first) else "while the caller talked"
                out.append(ItemOutcome(it, "cut_in", (first - it.voiced_end_s) * 1000.0,
                                       detail=f"agent started {where}, "
                                              f"{(it.voiced_end_s - first) * 1000:.0f} ms before the turn's end"))
                continue
            if first is None or first >= next_onset or (first - it.voiced_end_s) * 1000.0 > params.no_reply_ms:
                out.append(ItemOutcome(it, "no_reply", detail="no agent audio before the next item"))
                continue
            out.append(ItemOutcome(it, "turn", (first - it.voiced_end_s) * 1000.0))
        elif it.kind in OVER_SPEECH_KINDS or it.kind == INTERRUPTION:
            if not talking:
                out.append(ItemOutcome(it, "not_over_speech", detail="the agent was silent at the onset"))
                continue
            stop = _silent_from(agent, it.onset_s, params.agent_gap_ms)
            assert stop is not None  # talking implies a packet before the onset
            went_on_ms = (stop - it.onset_s) * 1000.0
            if it.kind != INTERRUPTION:
                if went_on_ms <= params.false_barge_in_window_ms:
                    after = _first_after(agent, stop)
                    silent = "" if after is None else f", for {(after - stop) * 1000:.0f} ms"
                    out.append(ItemOutcome(it, "false_barge_in", went_on_ms,
                                           detail=f"agent went silent {max(went_on_ms, 0):.0f} ms after the onset"
                                                  f"{silent}"))
                else:
                    out.append(ItemOutcome(it, "kept_talking", went_on_ms))
                continue
            if went_on_ms > params.missed_ms:
                out.append(ItemOutcome(it, "missed", went_on_ms,
                                       detail=f"agent talked on {went_on_ms:.0f} ms"))
                continue
            reply_ms = None
            first = _first_after(agent, max(stop, it.voiced_end_s))
            if stop < it.voiced_end_s and first is not None and first < next_onset \
                    and (first - it.voiced_end_s) * 1000.0 <= params.no_reply_ms:
                reply_ms = (first - it.voiced_end_s) * 1000.0
            out.append(ItemOutcome(it, "barge_in", went_on_ms, reply_ms))
        else:
            raise ValueError(f"unknown item kind {it.kind!r}")
    return out


def packet_runs(times: Iterable[float], gap_ms: float = 200.0) -> list[tuple[float, float]]:
    """Runs of packets with no gap over *gap_ms*: ``[(first_s, last_s)]``.

    SIPp's ``rtp_stream`` sends only while it plays a file, so each played item
    is one run of caller packets.
    """
    out: list[tuple[float, float]] = []
    for t in sorted(times):
        if out and (t - out[-1][1]) * 1000.0 <= gap_ms:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


# --------------------------------------------------------------------------- SIP


_CALL_ID = re.compile(r"^(?:Call-ID|i)\s*:\s*(\S+)", re.I | re.M)
_CSEQ = re.compile(r"^(?:CSeq)\s*:\s*\d+\s+(\S+)", re.I | re.M)
_MEDIA = re.compile(r"^m=audio (\d+) ", re.M)
_CONN = re.compile(r"^c=IN IP[46] (\S+)", re.M)


@dataclass
class SipCallMedia:
    """Media addresses of one call, read from the SDP offer (INVITE) and answer (200),
    and when the call began (first INVITE) and ended (first BYE), capture time."""

    call_id: str
    caller: tuple[str, int] | None = None   # caller's RTP address (from the INVITE)
    agent: tuple[str, int] | None = None    # agent's RTP address (from its 200 OK)
    started_s: float | None = None
    ended_s: float | None = None


def sip_calls(packets: list[UdpPacket]) -> dict[str, SipCallMedia]:
    """Calls seen in SIP over UDP: Call-ID → media addresses and start/end times."""
    calls: dict[str, SipCallMedia] = {}
    for p in packets:
        head = p.payload[:8]
        if not (head.startswith((b"INVITE ", b"SIP/2.0 ", b"BYE "))):
            continue
        text = p.payload[:4096].decode("utf-8", "replace")
        cid = _CALL_ID.search(text)
        if not cid:
            continue
        if text.startswith("BYE "):
            call = calls.get(cid.group(1))
            if call is not None and call.ended_s is None:
                call.ended_s = p.at_s
            continue
        if "m=audio" not in text:
            continue
        port, conn = _MEDIA.search(text), _CONN.search(text)
        if not port or not conn:
            continue
        call = calls.setdefault(cid.group(1), SipCallMedia(cid.group(1)))
        addr = (conn.group(1), int(port.group(1)))
        if text.startswith("INVITE "):
            call.caller = call.caller or addr
            call.started_s = call.started_s if call.started_s is not None else p.at_s
        elif text.startswith("SIP/2.0 200"):
            cseq = _CSEQ.search(text)
            if cseq and cseq.group(1).upper() == "INVITE":
                call.agent = call.agent or addr
    return calls

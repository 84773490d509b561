"""Read RTP audio out of a packet capture (classic pcap, as written by
``tshark -F pcap`` / ``dumpcap -P``), without I/O beyond reading the file.

Used by tests and benchmarks to hear what actually crossed the wire.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

from media.convert import G722_RATE_HZ, G722Decoder, alaw_to_pcm16, resample, ulaw_to_pcm16

_LINKTYPE_NULL = 0
_LINKTYPE_ETHERNET = 1
_LINKTYPE_RAW = 101
_LINKTYPE_LINUX_SLL = 113
_LINKTYPE_LINUX_SLL2 = 276


@dataclass(frozen=True)
class UdpPacket:
    at_s: float
    src: str
    sport: int
    dst: str
    dport: int
    payload: bytes


@dataclass(frozen=True)
class RtpPacket:
    at_s: float
    payload_type: int
    marker: bool
    sequence: int
    timestamp: int
    ssrc: int
    payload: bytes


@dataclass
class RtpStream:
    src: str
    sport: int
    dst: str
    dport: int
    ssrc: int
    packets: list[RtpPacket] = field(default_factory=list)

    def audio(self, sample_rate_hz: int = 8000) -> bytes:
        """16-bit PCM of the G.711 and G.722 packets (others skipped), in arrival order."""
        decoder = PayloadDecoder()
        frames = [f for f in map(decoder.decode, self.packets) if f is not None]
        return b"".join(resample(pcm, rate, sample_rate_hz) for pcm, rate in _runs_of_one_rate(frames))


#: the static RTP payload types (RFC 3551) of the codecs read here
PCMU, PCMA, G722 = 0, 8, 9
AUDIO_PAYLOAD_TYPES = frozenset({PCMU, PCMA, G722})


def packet_pcm(packet: RtpPacket) -> bytes | None:
    """16-bit PCM (8 kHz) of a G.711 packet (payload type 0 or 8), else None. G.722 needs the
    stream's earlier packets: :class:`PayloadDecoder`."""
    if packet.payload_type == PCMU:
        return ulaw_to_pcm16(packet.payload)
    if packet.payload_type == PCMA:
        return alaw_to_pcm16(packet.payload)
    return None


class PayloadDecoder:
    """Decodes one stream's packets, given in order: G.711 packet by packet (8 kHz), G.722 with
    the state it carries from packet to packet (16 kHz: :class:`media.convert.G722Decoder`)."""

    def __init__(self) -> None:
        self._g722: G722Decoder | None = None

    def decode(self, packet: RtpPacket) -> tuple[bytes, int] | None:
        """(16-bit PCM, its sample rate) of *packet*, or None for another payload type."""
        pcm = packet_pcm(packet)
        if pcm is not None:
            return pcm, 8000
        if packet.payload_type != G722:
            return None
        if self._g722 is None:
            self._g722 = G722Decoder()
        return self._g722.decode(packet.payload), G722_RATE_HZ


def _runs_of_one_rate(frames: list[tuple[bytes, int]]) -> Iterator[tuple[bytes, int]]:
    """Consecutive frames of one sample rate joined (a stream whose codec changed has two)."""
    run: list[bytes] = []
    rate = 0
    for pcm, r in frames:
        if run and r != rate:
            yield b"".join(run), rate
            run = []
        run.append(pcm)
        rate = r
    if run:
        yield b"".join(run), rate


def read_udp(f: BinaryIO) -> Iterator[UdpPacket]:
    """UDP datagrams of a classic pcap file; raises ValueError on a bad header."""
    header = f.read(24)
    if len(header) < 24:
        raise ValueError("not a pcap file: shorter than its 24-byte header")
    magic = header[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    elif magic == b"\x0a\x0d\x0d\x0a":
        raise ValueError("pcapng is not supported: capture with 'tshark -F pcap' or 'dumpcap -P'")
    else:
        raise ValueError(f"not a pcap file: magic {magic.hex()}")
    nanos = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack(endian + "I", header[20:24])[0]
    while True:
        rec = f.read(16)
        if len(rec) < 16:
            return
        sec, frac, incl, _orig = struct.unpack(endian + "IIII", rec)
        data = f.read(incl)
        at = sec + frac / (1e9 if nanos else 1e6)
        pkt = _udp_of(linktype, data, at)
        if pkt is not None:
            yield pkt


def _udp_of(linktype: int, data: bytes, at: float) -> UdpPacket | None:
    if linktype == _LINKTYPE_ETHERNET:
        if len(data) < 14:
            return None
        ethertype = struct.unpack("!H", data[12:14])[0]
        ip = data[14:]
    elif linktype == _LINKTYPE_LINUX_SLL:
        ethertype = struct.unpack("!H", data[14:16])[0]
        ip = data[16:]
    elif linktype == _LINKTYPE_LINUX_SLL2:
        ethertype = struct.unpack("!H", data[0:2])[0]
        ip = data[20:]
    elif linktype == _LINKTYPE_NULL:
        family = struct.unpack("<I", data[:4])[0]
        ethertype = 0x0800 if family == 2 else 0x86DD
        ip = data[4:]
    elif linktype == _LINKTYPE_RAW:
        ethertype = 0x0800 if data[:1] and data[0] >> 4 == 4 else 0x86DD
        ip = data
    else:
        raise ValueError(f"unsupported pcap link type {linktype}")
    if ethertype == 0x0800 and len(ip) >= 20:
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 17:
            return None
        src = ".".join(str(b) for b in ip[12:16])
        dst = ".".join(str(b) for b in ip[16:20])
        udp = ip[ihl:]
    elif ethertype == 0x86DD and len(ip) >= 40:
        if ip[6] != 17:
            return None
        import ipaddress

        src = str(ipaddress.IPv6Address(ip[8:24]))
        dst = str(ipaddress.IPv6Address(ip[24:40]))
        udp = ip[40:]
    else:
        return None
    if len(udp) < 8:
        return None
    sport, dport, length = struct.unpack("!HHH", udp[:6])
    return UdpPacket(at, src, sport, dst, dport, udp[8:length])


def parse_rtp(at_s: float, payload: bytes) -> RtpPacket | None:
    """An RTP packet (RFC 3550), or None for anything else (RTCP, SIP, STUN)."""
    if len(payload) < 12 or payload[0] >> 6 != 2:
        return None
    pt = payload[1] & 0x7F
    if 72 <= pt <= 76:  # RTCP SR/RR/SDES/BYE/APP share the first bits
        return None
    cc = payload[0] & 0x0F
    offset = 12 + 4 * cc
    if payload[0] & 0x10:  # header extension
        if len(payload) < offset + 4:
            return None
        offset += 4 + 4 * struct.unpack("!H", payload[offset + 2: offset + 4])[0]
    end = len(payload)
    if payload[0] & 0x20 and end > offset:  # padding
        end -= payload[-1]
    seq, ts, ssrc = struct.unpack("!HII", payload[2:12])
    return RtpPacket(at_s, pt, bool(payload[1] & 0x80), seq, ts, ssrc, payload[offset:end])


def rtp_streams(path: str, ports: set[int] | None = None) -> list[RtpStream]:
    """Every RTP stream in the capture (optionally only those touching *ports*)."""
    streams: dict[tuple[str, int, str, int, int], RtpStream] = {}
    with open(path, "rb") as f:
        for udp in read_udp(f):
            if ports is not None and udp.sport not in ports and udp.dport not in ports:
                continue
            rtp = parse_rtp(udp.at_s, udp.payload)
            if rtp is None:
                continue
            key = (udp.src, udp.sport, udp.dst, udp.dport, rtp.ssrc)
            stream = streams.get(key)
            if stream is None:
                stream = streams[key] = RtpStream(udp.src, udp.sport, udp.dst, udp.dport, rtp.ssrc)
            stream.packets.append(rtp)
    return list(streams.values())

"""Robustness: malformed and hostile SIP and RTP replayed against the real server over loopback.

The SIP corpus is tests/data/sip-torture/ (RFC 4475-style messages, one per file, each naming the
answers it may get) plus shapes made here: a 64 KiB header, truncated and binary datagrams, and
garbage, oversize and half-sent messages over TCP and garbage over TLS. The RTP part sends wrong SSRCs and payload types,
huge and truncated packets, sequence jumps and an RFC 4733 event flood to an answered call's media
port. Throughout, the server must keep answering OPTIONS, answer each bad message with a 4xx (or an
allowed code) or ignore it, keep the call up, answer a real SIPp call afterwards, and leak nothing:
its open files, active calls and memory stay flat. Described in docs/security.md.
"""
from __future__ import annotations

import os
import random
import re
import socket
import ssl
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

from tests.integration.conftest import ROOT, AgentProcess, free_port, run_sipp, start_agent, stop_agent
from tests.integration.tls_certs import make_pki

pytestmark = pytest.mark.integration

CORPUS = os.path.join(ROOT, "tests", "data", "sip-torture")
SIPP_DIR = os.path.join(ROOT, "ops", "sipp")


def sdp(port: int = 40998) -> str:
    return ("v=0\r\no=x 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            f"m=audio {port} RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
            "a=fmtp:101 0-16\r\na=sendrecv\r\n")


@dataclass
class Case:
    name: str
    template: str
    expect: set[str]
    transports: tuple[str, ...]

    def render(self, target: str, local: str, proto: str) -> bytes:
        text = self.template.replace("\n", "\r\n")
        for key, value in (("$TARGET", target), ("$LOCAL", local), ("$PROTO", proto),
                           ("$BRANCH", uuid.uuid4().hex), ("$CALLID", f"{uuid.uuid4().hex}@torture"),
                           ("$SDP", sdp())):
            text = text.replace(key, value)
        head, sep, body = text.partition("\r\n\r\n")
        return (head.replace("$BODYLEN", str(len(body.encode()))) + sep + body).encode()

    def allows(self, code: int) -> bool:
        if code == 0:
            return "none" in self.expect
        return str(code) in self.expect or f"{code // 100}xx" in self.expect


def load_corpus() -> list[Case]:
    cases = []
    for name in sorted(os.listdir(CORPUS)):
        if not name.endswith(".sip"):
            continue
        with open(os.path.join(CORPUS, name), encoding="utf-8") as f:
            lines = f.read().split("\n")
        directives: dict[str, str] = {}
        while lines and lines[0].startswith("#"):
            key, _, value = lines.pop(0)[1:].partition(":")
            directives[key.strip()] = value.strip()
        transport = directives.get("transport", "udp")
        cases.append(Case(name[:-4], "\n".join(lines), set(directives["expect"].split()),
                          ("udp", "tcp") if transport == "both" else (transport,)))
    return cases


CASES = load_corpus()


def _status(reply: bytes) -> int:
    m = re.match(rb"SIP/2\.0 (\d{3}) ", reply)
    return int(m.group(1)) if m else -1


def _ack_or_bye(sock_send: Callable[[bytes], None], request: bytes, reply: bytes, target: str, local: str,
                proto: str) -> None:
    """Close an INVITE transaction the server answered: ACK a failure; ACK and BYE a success."""
    text = reply.decode(errors="replace")
    req = request.decode(errors="replace")
    call_id = re.search(r"(?im)^(?:Call-ID|i)\s*:\s*(.*?)\r$", text, re.M)
    from_ = re.search(r"(?im)^(?:From|f)\s*:\s*(.*?)\r$", text, re.M)
    to = re.search(r"(?im)^(?:To|t)\s*:\s*(.*?)\r$", text, re.M)
    cseq = re.search(r"(?im)^CSeq\s*:\s*(\d+)", text, re.M)
    via = re.search(r"(?im)^Via\s*:.*?\r$", req, re.M)
    if not (call_id and from_ and to and cseq and via):
        return
    code = _status(reply)
    uri = f"sip:1000@{target}"
    if code < 300:
        contact = re.search(r"(?im)^(?:Contact|m)\s*:.*?<([^>]+)>", text, re.M)
        uri = contact.group(1) if contact else uri
    common = (f"Max-Forwards: 70\r\nFrom: {from_.group(1)}\r\nTo: {to.group(1)}\r\n"
              f"Call-ID: {call_id.group(1)}\r\n")
    sock_send(f"ACK {uri} SIP/2.0\r\n{via.group(0)}\r\n{common}CSeq: {cseq.group(1)} ACK\r\n"
              "Content-Length: 0\r\n\r\n".encode())
    if code < 300:
        sock_send(f"BYE {uri} SIP/2.0\r\nVia: SIP/2.0/{proto} {local};rport;branch=z9hG4bK{uuid.uuid4().hex}\r\n"
                  f"{common}CSeq: {int(cseq.group(1)) + 1} BYE\r\nContent-Length: 0\r\n\r\n".encode())


def _final(recv: Callable[[], bytes | None], request: bytes, quiet_s: float = 1.0,
           ringing_s: float = 10.0) -> tuple[int, bytes]:
    """Wait for the final answer to *request*: (code, reply), or (0, b'') when nothing comes in *quiet_s*
    (longer once a provisional came). Answers to other requests (a BYE's 200) are skipped."""
    start = time.monotonic()
    limit = quiet_s
    while time.monotonic() - start < limit:
        reply = recv()
        if reply is None:
            continue
        if reply == b"":
            return 0, b""
        code = _status(reply)
        if code < 0:
            continue
        if re.search(rb"(?im)^CSeq\s*:\s*\d+\s+BYE", reply) and not request.startswith(b"BYE"):
            continue
        if code < 200:
            limit = ringing_s
            continue
        return code, reply
    return 0, b""


class UdpPeer:
    def __init__(self, target: str) -> None:
        host, port = target.split(":")
        self.addr = (host, int(port))
        self.target = target
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.local = "127.0.0.1:%d" % self.sock.getsockname()[1]

    def send(self, data: bytes) -> None:
        self.sock.sendto(data, self.addr)

    def recv(self) -> bytes | None:
        try:
            return self.sock.recv(70000)
        except socket.timeout:
            return None

    def close(self) -> None:
        self.sock.close()


class TcpPeer:
    def __init__(self, target: str) -> None:
        host, port = target.split(":")
        self.target = target
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.settimeout(0.2)
        self.local = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> bytes | None:
        """One whole message from the stream, None if none yet, b'' once the server closed."""
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"(?im)^(?:Content-Length|l)\s*:\s*(\d+)", head)
                n = int(m.group(1)) if m else 0
                if len(rest) >= n:
                    self.buf = rest[n:]
                    return head + sep + rest[:n]
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            except OSError:
                return b""
            if not chunk:
                return b""
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def exchange(peer: "UdpPeer | TcpPeer", request: bytes, proto: str) -> int:
    """Send *request* on *peer*; its final answer's code (0: none), closing any INVITE it opened."""
    peer.send(request)
    code, reply = _final(peer.recv, request)
    if code and request.startswith(b"INVITE"):
        _ack_or_bye(peer.send, request, reply, peer.target, peer.local, proto)
        if code < 300:
            _final(peer.recv, b"BYE", quiet_s=3.0)
    return code


def options(target: str, proto: str = "UDP") -> int:
    peer = UdpPeer(target) if proto == "UDP" else TcpPeer(target)
    try:
        req = (f"OPTIONS sip:1000@{target} SIP/2.0\r\nVia: SIP/2.0/{proto} {peer.local};rport;branch=z9hG4bK"
               f"{uuid.uuid4().hex}\r\nMax-Forwards: 70\r\nFrom: <sip:probe@127.0.0.1>;tag={uuid.uuid4().hex[:8]}\r\n"
               f"To: <sip:1000@{target}>\r\nCall-ID: {uuid.uuid4().hex}@probe\r\nCSeq: 1 OPTIONS\r\n"
               "Content-Length: 0\r\n\r\n").encode()
        return exchange(peer, req, proto)
    finally:
        peer.close()


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """UDP and TCP on one port, TLS on another; capacity 2."""
    tmp = str(tmp_path_factory.mktemp("robust"))
    pki = make_pki(os.path.join(tmp))
    tls_port = free_port(socket.SOCK_STREAM)
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w", encoding="utf-8") as f:
        f.write(f"sip:\n  transports: [udp, tcp, tls]\n  tls:\n    port: {tls_port}\n"
                f"    certificate: {pki.server_cert}\n    private_key: {pki.server_key}\n    ca_file: {pki.ca_file}\n")
    a = start_agent(tmp, "--config", cfg, capacity=2)
    a.tls_port = tls_port  # type: ignore[attr-defined]
    a.ca_file = pki.ca_file  # type: ignore[attr-defined]
    yield a
    assert stop_agent(a) == 0, a.log()[-3000:]
    assert "Traceback" not in a.log(), a.log()[-6000:]


@pytest.fixture(scope="module")
def baseline(agent: AgentProcess) -> dict[str, int]:
    """Open files and RSS once the server has served one call of each kind (pools warmed up)."""
    target = f"127.0.0.1:{agent.sip_port}"
    assert options(target) == 200 and options(target, "TCP") == 200
    result = run_sipp(os.path.join(SIPP_DIR, "bench-call.xml"), target, "-s", "1000", "-m", "1", "-d", "1000")
    assert result.returncode == 0, result.stdout.decode(errors="replace")[-2000:]
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 30.0, "no active calls")
    return {"fds": fds(agent.proc.pid), "rss": rss_kib(agent.proc.pid)}


CASE_PARAMS = [(c, t) for c in CASES for t in c.transports]


@pytest.mark.parametrize("case, transport", CASE_PARAMS, ids=[f"{c.name}-{t}" for c, t in CASE_PARAMS])
def test_torture_message_gets_an_allowed_answer(agent: AgentProcess, baseline: dict[str, int], case: Case,
                                                 transport: str) -> None:
    """Each corpus message gets one of the answers its file allows (never an unlisted 5xx), and OPTIONS
    over UDP is answered 200 right after it."""
    target = f"127.0.0.1:{agent.sip_port}"
    proto = transport.upper()
    peer = UdpPeer(target) if transport == "udp" else TcpPeer(target)
    try:
        code = exchange(peer, case.render(target, peer.local, proto), proto)
    finally:
        peer.close()
    print(f"{case.name} over {transport}: {code or 'no answer'}")
    assert case.allows(code), f"{case.name} over {transport}: got {code or 'no answer'}, allowed {case.expect}"
    assert options(target) == 200, f"OPTIONS not answered after {case.name}\n{agent.log()[-3000:]}"


def _invite_bytes(target: str, local: str) -> bytes:
    return Case("invite", "INVITE sip:1000@$TARGET SIP/2.0\nVia: SIP/2.0/UDP $LOCAL;rport;branch=z9hG4bK$BRANCH\n"
                "Max-Forwards: 70\nFrom: <sip:caller@example.net>;tag=t\nTo: <sip:1000@$TARGET>\nCall-ID: $CALLID\n"
                "CSeq: 1 INVITE\nContact: <sip:caller@$LOCAL>\nContent-Type: application/sdp\n"
                "Content-Length: $BODYLEN\n\n$SDP", set(), ("udp",)).render(target, local, "UDP")


def test_oversize_truncated_and_binary_datagrams(agent: AgentProcess, baseline: dict[str, int]) -> None:
    """A 64 KiB header, an INVITE cut at five points, empty, keep-alive, NUL-filled and random datagrams
    get a 4xx (413/513 allowed for the oversize one) or nothing, with OPTIONS answered after each."""
    target = f"127.0.0.1:{agent.sip_port}"
    rng = random.Random(4475)
    peer = UdpPeer(target)
    try:
        full = _invite_bytes(target, peer.local)
        huge = full.replace(b"Max-Forwards: 70\r\n", b"X-Huge: " + b"a" * 65000 + b"\r\nMax-Forwards: 70\r\n")
        shapes = [("64 KiB header", huge[:65507])]
        shapes += [(f"cut at {n}", full[:n]) for n in (9, 40, len(full) // 2, len(full) - 30, len(full) - 1)]
        shapes += [("empty", b""), ("keep-alive", b"\r\n\r\n"), ("NULs", b"\x00" * 1400),
                   ("random", bytes(rng.randrange(256) for _ in range(1400))),
                   ("random after a request line", b"INVITE sip:1000@" + target.encode() + b" SIP/2.0\r\n"
                    + bytes(rng.randrange(256) for _ in range(1000)))]
        for name, data in shapes:
            peer.send(data)
            code, reply = _final(peer.recv, data, quiet_s=1.0)
            if code >= 200 and data.startswith(b"INVITE"):
                _ack_or_bye(peer.send, data, reply, target, peer.local, "UDP")
            print(f"datagram {name}: {code or 'no answer'}")
            assert code == 0 or 400 <= code < 500 or code in (513,), f"{name}: {code} {reply[:200]!r}"
            assert options(target) == 200, f"OPTIONS not answered after {name}"
    finally:
        peer.close()


def test_garbage_over_tcp(agent: AgentProcess, baseline: dict[str, int]) -> None:
    """Random bytes, a 64 KiB header, a Content-Length never sent, a half-sent message held open and 40
    connections opened and dropped: the server closes or ignores each, keeps answering OPTIONS over UDP
    and TCP, and afterwards holds no more open files than before."""
    target = f"127.0.0.1:{agent.sip_port}"
    host, port = "127.0.0.1", agent.sip_port
    rng = random.Random(4475)
    before = fds(agent.proc.pid)
    invite = _invite_bytes(target, "127.0.0.1:9").replace(b"/UDP ", b"/TCP ")
    shapes = [
        ("random", bytes(rng.randrange(256) for _ in range(4096))),
        ("64 KiB header", invite.replace(b"Max-Forwards: 70\r\n",
                                         b"X-Huge: " + b"a" * 65536 + b"\r\nMax-Forwards: 70\r\n")),
        ("Content-Length never sent", re.sub(rb"Content-Length: \d+", b"Content-Length: 2147483647", invite)),
        ("CRLF flood", b"\r\n" * 20000),
    ]
    options_req = (f"OPTIONS sip:1000@{target} SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKg\r\n"
                   f"Max-Forwards: 70\r\nFrom: <sip:g@127.0.0.1>;tag=g\r\nTo: <sip:1000@{target}>\r\n"
                   "Call-ID: garbage-after@torture\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n").encode()
    shapes.append(("an OPTIONS then garbage", options_req + bytes(rng.randrange(256) for _ in range(2000))))
    for name, data in shapes:
        with socket.create_connection((host, port), timeout=5) as s:
            try:
                s.sendall(data)
            except OSError:
                pass  # the server may close a connection it will not read on
            s.settimeout(1.0)
            got, closed = b"", False
            try:
                while len(got) < 200000:
                    chunk = s.recv(65536)
                    if not chunk:
                        closed = True
                        break
                    got += chunk
            except socket.timeout:
                pass
            except OSError:
                closed = True
        codes = [int(c) for c in re.findall(rb"SIP/2\.0 (\d{3}) ", got)]
        print(f"TCP {name}: {codes or 'no answer'}, {'closed' if closed else 'left open'} by the server")
        allowed = {100, 200} if name.startswith("an OPTIONS") else {100}
        assert all(c in allowed or 400 <= c < 500 or c == 513 for c in codes), f"{name}: {codes}"
        if name.startswith("an OPTIONS"):
            assert 200 in codes, f"{name}: the OPTIONS before the garbage was not answered ({codes})"
        assert options(target) == 200 and options(target, "TCP") == 200, f"OPTIONS not answered after {name}"
    held = socket.create_connection((host, port), timeout=5)
    try:
        held.sendall(invite[:len(invite) // 2])
        for _ in range(3):  # a half-sent message does not hold up anyone else
            assert options(target) == 200 and options(target, "TCP") == 200
            time.sleep(0.5)
    finally:
        held.close()
    tls_port = agent.tls_port  # type: ignore[attr-defined]
    tls_shapes = [("plain SIP", options_req),
                  ("a ClientHello cut short", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"),
                  ("a record claiming 16 MiB", b"\x16\x03\x03\xff\xff" + bytes(rng.randrange(256) for _ in range(3000))),
                  ("random", bytes(rng.randrange(256) for _ in range(4096)))]
    for name, data in tls_shapes:
        with socket.create_connection((host, tls_port), timeout=5) as s:
            try:
                s.sendall(data)
                s.settimeout(1.0)
                s.recv(65536)
            except OSError:
                pass
        assert options(target) == 200, f"OPTIONS not answered after TLS {name}"
    ctx = ssl.create_default_context(cafile=agent.ca_file)  # type: ignore[attr-defined]
    ctx.check_hostname = False
    with socket.create_connection((host, tls_port), timeout=5) as raw:
        with ctx.wrap_socket(raw) as s:  # garbage inside a good TLS session
            s.sendall(bytes(rng.randrange(256) for _ in range(4096)))
            s.settimeout(1.0)
            try:
                got = s.recv(65536)
            except (OSError, ssl.SSLError):
                got = b""
            print(f"TLS garbage inside a session: {got[:40]!r}")
            assert not re.search(rb"SIP/2\.0 [235]\d\d", got), got[:300]
    assert options(target) == 200, "OPTIONS not answered after garbage inside a TLS session"
    for _ in range(40):
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(b"OPTIONS sip:1000@" + target.encode() + b" SIP/2.0\r\n")
    agent.wait_for(lambda: fds(agent.proc.pid) <= before + 2, 20.0,
                   f"open files back to {before} + 2 (now {fds(agent.proc.pid)})")


def rtp(seq: int, ts: int, ssrc: int, pt: int, payload: bytes, marker: bool = False, first: int = 0x80) -> bytes:
    return struct.pack("!BBHII", first, (0x80 if marker else 0) | pt, seq & 0xFFFF, ts & 0xFFFFFFFF, ssrc) + payload


def test_malformed_rtp_leaves_the_call_up(agent: AgentProcess, baseline: dict[str, int]) -> None:
    """On an answered call, from the offered media address: wrong SSRCs and payload types, 9,000- and
    65,000-byte packets, headers cut short or with bogus CSRC/extension/padding lengths, wrong versions,
    sequence and timestamp jumps and 1,500 RFC 4733 packets (key 2) at full speed. The call stays up
    (the server answers our BYE with 200, not 481), and OPTIONS is answered throughout."""
    target = f"127.0.0.1:{agent.sip_port}"
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 30.0, "no active calls")
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
        assert m, reply
        dest = ("127.0.0.1", int(m.group(1)))
        to = re.search(rb"(?im)^(?:To|t)\s*:\s*(.*?)\r$", reply, re.M).group(1).decode()  # type: ignore[union-attr]
        contact_m = re.search(rb"(?im)^(?:Contact|m)\s*:.*?<([^>]+)>", reply, re.M)
        call_id_m = re.search(rb"(?im)^(?:Call-ID|i)\s*:\s*(.*?)\r$", reply, re.M)
        assert contact_m and call_id_m, reply
        contact, call_id = contact_m.group(1).decode(), call_id_m.group(1).decode()
        dialog = (f"Max-Forwards: 70\r\nFrom: <sip:caller@example.net>;tag=t\r\nTo: {to}\r\nCall-ID: {call_id}\r\n")
        peer.send(f"ACK {contact} SIP/2.0\r\nVia: SIP/2.0/UDP {peer.local};rport;branch=z9hG4bK{uuid.uuid4().hex}\r\n"
                  f"{dialog}CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n".encode())
        silence = b"\xff" * 160
        ssrc, seq, ts = 0x1234, 1000, 8000
        rng = random.Random(3550)
        for _ in range(25):  # half a second of good audio, so the stream is latched
            media.sendto(rtp(seq, ts, ssrc, 0, silence), dest)
            seq, ts = seq + 1, ts + 160
            time.sleep(0.02)
        shapes: list[tuple[str, list[bytes]]] = [
            ("other SSRCs", [rtp(seq + i, ts + 160 * i, rng.randrange(1 << 32), 0, silence) for i in range(100)]),
            ("unknown payload types", [rtp(seq + i, ts, ssrc, pt, silence)
                                       for i, pt in enumerate((8, 9, 18, 34, 96, 99, 126, 127) * 10)]),
            ("9,000-byte packets", [rtp(seq + i, ts, ssrc, 0, b"\xff" * 9000) for i in range(20)]),
            ("65,000-byte packets", [rtp(seq + i, ts, ssrc, 0, b"\x7f" * 65000) for i in range(5)]),
            ("cut headers", [rtp(seq, ts, ssrc, 0, b"")[:n] for n in range(12)]),
            ("15 CSRCs announced, none sent", [rtp(seq + i, ts, ssrc, 0, b"\x00" * 8, first=0x8F) for i in range(20)]),
            ("extension longer than the packet", [rtp(seq + i, ts, ssrc, 0, b"\xbe\xde\xff\xff" + b"\x00" * 8, first=0x90)
                                                  for i in range(20)]),
            ("padding longer than the packet", [rtp(seq + i, ts, ssrc, 0, b"\xff" * 10 + b"\xfe", first=0xA0)
                                                for i in range(20)]),
            ("RTP versions 0, 1 and 3", [rtp(seq + i, ts, ssrc, 0, silence, first=v)
                                         for i, v in enumerate((0x00, 0x40, 0xC0) * 10)]),
            ("sequence and timestamp jumps", [rtp(s, t, ssrc, 0, silence) for s, t in
                                              ((seq + 30000, ts), (0, 0), (65535, 0xFFFFFFFF), (seq - 5000, ts - 999999),
                                               (seq, ts + 0x7FFFFFFF), (seq + 1, ts), (seq + 1, ts), (seq + 2, ts))]),
            ("random datagrams", [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(100)]),
        ]
        # RFC 4733 event flood: key 2 (the opening hours, harmless in the default dialplan), mostly
        # retransmissions of a few events, ends included, with durations and volumes out of range
        flood = []
        for i in range(1500):
            event_ts = ts + 160 * 50 * (i // 300)
            end = 0x80 if i % 300 >= 297 else 0
            flood.append(rtp(seq + i, event_ts, ssrc, 101, struct.pack("!BBH", 2, end | (i % 64), (i * 160) & 0xFFFF),
                             marker=i % 300 == 0))
        shapes.append(("1,500 telephone-event packets", flood))
        for name, packets in shapes:
            for p in packets:
                media.sendto(p, dest)
            assert options(target) == 200, f"OPTIONS not answered after RTP {name}"
        assert agent.metrics().get("openclaw_active_calls") == 1.0, "the call did not survive the RTP"
        for _ in range(25):  # good audio again
            seq, ts = seq + 1, ts + 160
            media.sendto(rtp(seq, ts, ssrc, 0, silence), dest)
            time.sleep(0.02)
        bye = (f"BYE {contact} SIP/2.0\r\nVia: SIP/2.0/UDP {peer.local};rport;branch=z9hG4bK{uuid.uuid4().hex}\r\n"
               f"{dialog}CSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n").encode()
        peer.send(bye)
        code, reply = _final(peer.recv, bye, quiet_s=5.0)
        assert code == 200, f"BYE got {code}: the call was dropped? {reply[:300]!r}\n{agent.log()[-3000:]}"
    finally:
        peer.close()
        media.close()
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 30.0, "no active calls")
    record = [r for r in agent.records() if r.get("call_id") == call_id]
    assert record, f"no call record for {call_id}"


def test_after_the_run_a_real_call_is_answered_and_nothing_leaked(agent: AgentProcess,
                                                                  baseline: dict[str, int]) -> None:
    """After every case above: a SIPp call is answered and completes, no call is left active, and the
    server's open files (+8) and resident memory (+64 MiB) are where they were before the run."""
    target = f"127.0.0.1:{agent.sip_port}"
    result = run_sipp(os.path.join(SIPP_DIR, "bench-call.xml"), target, "-s", "1000", "-m", "1", "-d", "1000")
    assert result.returncode == 0, result.stdout.decode(errors="replace")[-2000:]
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 30.0, "no active calls")
    pid = agent.proc.pid
    agent.wait_for(lambda: fds(pid) <= baseline["fds"] + 8, 20.0,
                   f"open files back near {baseline['fds']} (now {fds(pid)})")
    rss = rss_kib(pid)
    print(f"open files {baseline['fds']} -> {fds(pid)}, RSS {baseline['rss']} -> {rss} KiB")
    assert rss <= baseline["rss"] + 64 * 1024, f"RSS grew from {baseline['rss']} to {rss} KiB"
    assert "Traceback" not in agent.log()

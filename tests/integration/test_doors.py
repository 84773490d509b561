"""The shapes of the pjproject 2.15 advisories (SECURITY.md), sent to the real server over UDP.

Each must be refused before pjsip's modules use it (415 for multipart, 405/501 for
unserved methods) or handled without ICE, the server must keep answering OPTIONS,
and a real SIPp call must work afterwards. The same shapes through Kamailio are in
tests/integration/test_front_security.py.
"""
from __future__ import annotations

import os
import re
import socket
import time
import uuid
from typing import Iterator

import pytest

from tests.integration.conftest import ROOT, AgentProcess, run_sipp, start_agent, stop_agent

pytestmark = pytest.mark.integration

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")

SDP = ("v=0\r\no=x 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
       "m=audio 40998 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n")


def request(method: str, target: str, port: int, extra: str = "", body: str = "", ctype: str = "",
            to_tag: str = "") -> tuple[bytes, str]:
    call_id = f"{uuid.uuid4().hex}@doors"
    content = f"Content-Type: {ctype}\r\n" if ctype else ""
    text = (f"{method} sip:1000@{target} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bK{uuid.uuid4().hex}\r\n"
            f"Max-Forwards: 70\r\nFrom: <sip:5550100@127.0.0.1>;tag=doors\r\n"
            f"To: <sip:1000@{target}>{';tag=' + to_tag if to_tag else ''}\r\nCall-ID: {call_id}\r\n"
            f"CSeq: 1 {method}\r\nContact: <sip:5550100@127.0.0.1:{port}>\r\n{extra}{content}"
            f"Content-Length: {len(body.encode())}\r\n\r\n{body}")
    return text.encode(), call_id


def exchange(target: str, build: "callable", timeout_s: float = 5.0) -> str:  # type: ignore[valid-type]
    """Send one request from a fresh UDP socket; the first final response's text ('' if none)."""
    host, port = target.split(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        data, _ = build(s.getsockname()[1])  # type: ignore[misc]
        s.sendto(data, (host, int(port)))
        s.settimeout(0.5)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                reply = s.recv(65535).decode(errors="replace")
            except socket.timeout:
                continue
            code = int(reply.split(" ", 2)[1]) if reply.startswith("SIP/2.0 ") else 0
            if code >= 200:
                if code >= 300 and " INVITE" in re.search(r"(?im)^CSeq:.*$", reply).group(0):  # type: ignore[union-attr]
                    ack = data.decode().split("\r\n\r\n")[0].replace("INVITE sip", "ACK sip", 1)
                    ack = re.sub(r"(?m)^CSeq: 1 INVITE", "CSeq: 1 ACK", ack)
                    ack = re.sub(r"(?im)^To:.*$", re.search(r"(?im)^To:.*$", reply).group(0), ack)  # type: ignore[union-attr]
                    ack = re.sub(r"(?im)^Content-(Type|Length):.*\r\n", "", ack) + "\r\nContent-Length: 0\r\n\r\n"
                    s.sendto(ack.encode(), (host, int(port)))
                return reply
    return ""


def multipart(boundary: str, parts: list[tuple[str, str]], raw: str | None = None) -> str:
    if raw is not None:
        return raw
    out = "".join(f"--{boundary}\r\n{headers}\r\n\r\n{content}\r\n" for headers, content in parts)
    return out + f"--{boundary}--\r\n"


ISUP = "\x01\x00\x49\x00\x00\x03\x02\x00\x07\x04\x10\x00\x33\x63\x21\x43\x00\x00\x03\x06\x0d\x03\x80\x90\xa2"

#: (name, body, content type, extra headers) of the multipart advisory shapes
MULTIPART_SHAPES = [
    ("mpart01 (RFC 4475)", multipart("unique-boundary-1", [
        ("Content-Type: application/sdp", SDP),
        ("Content-Type: application/isup;version=itu-t92+\r\nContent-Disposition: signal; handling=optional",
         ISUP)]), 'multipart/mixed;boundary=unique-boundary-1', "MIME-Version: 1.0\r\n"),
    ("two adjacent boundaries (GHSA-x5pq-qrp4-fmrj)", multipart("b", [], raw=(
        f"--b\r\n--b\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n--b--\r\n")), "multipart/mixed;boundary=b", ""),
    ("one-character Content-ID (PR 4844)", multipart("b", [
        ("Content-Type: application/sdp\r\nContent-ID: <", SDP)]), "multipart/mixed;boundary=b", ""),
]


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    a = start_agent(str(tmp_path_factory.mktemp("doors")))
    yield a
    assert stop_agent(a) == 0, a.log()[-3000:]
    assert "Traceback" not in a.log(), a.log()[-6000:]


def options_ok(target: str) -> bool:
    return exchange(target, lambda port: request("OPTIONS", target, port)).startswith("SIP/2.0 200")


@pytest.mark.parametrize("name, body, ctype, extra", MULTIPART_SHAPES, ids=[s[0] for s in MULTIPART_SHAPES])
def test_multipart_invite_is_refused_415(agent: AgentProcess, name: str, body: str, ctype: str, extra: str) -> None:
    """Each multipart INVITE gets 415 with Accept: application/sdp; no call is created; OPTIONS still 200."""
    target = f"127.0.0.1:{agent.sip_port}"
    reply = exchange(target, lambda port: request("INVITE", target, port, extra, body, ctype))
    assert reply.startswith("SIP/2.0 415 Unsupported Media Type"), reply[:300]
    assert re.search(r"(?im)^Accept:\s*application/sdp", reply)
    assert options_ok(target)
    assert agent.metrics()["openclaw_active_calls"] == 0


@pytest.mark.parametrize("method, extra, to_tag, code", [
    ("SUBSCRIBE", "Event: presence\r\nExpires: 3600\r\n", "", 405),
    ("SUBSCRIBE", "Event: presence\r\nSubscription-State: terminated;reason=;retry-after=\r\n", "", 405),
    ("NOTIFY", "Event: presence\r\nSubscription-State: terminated;reason=noresource\r\n", "", 405),
    # pjsip's own header parser refuses this one: the packet is dropped before any module
    ("NOTIFY", "Event: presence\r\nSubscription-State: terminated;;reason\r\n", "", 0),
    ("PUBLISH", "Event: presence\r\nExpires: 60\r\n", "", 405),
    ("MESSAGE", "", "", 405),
    ("SUBSCRIBE", "Event: presence\r\nSubscription-State: terminated;reason=\r\n", "sometag", 405),
    ("FROBNICATE", "", "", 501),
])
def test_unserved_methods_are_refused_with_allow(agent: AgentProcess, method: str, extra: str, to_tag: str,
                                                 code: int) -> None:
    """SUBSCRIBE / NOTIFY / PUBLISH / MESSAGE (in or out of a dialog) get 405, unknown methods 501, with Allow
    (code 0: a header pjsip's parser cannot read, dropped unanswered)."""
    target = f"127.0.0.1:{agent.sip_port}"
    body = "hello" if method == "MESSAGE" else ""
    reply = exchange(target, lambda port: request(method, target, port, extra, body,
                                                  "text/plain" if body else "", to_tag), timeout_s=5 if code else 2)
    if code == 0:
        assert reply == "" and options_ok(target)
        return
    assert reply.startswith(f"SIP/2.0 {code} "), reply[:300]
    allow = re.search(r"(?im)^Allow:\s*(.*)$", reply)
    assert allow and "INVITE" in allow.group(1) and "SUBSCRIBE" not in allow.group(1)
    assert options_ok(target)


def test_overlong_ice_ufrag_is_answered_without_ice_and_calls_work_after(agent: AgentProcess) -> None:
    """An offer with a 1,500-character ice-ufrag (GHSA-j29p-pvh2-pvqp) is answered with no ICE in the answer;
    after every shape above, a real SIPp call is answered and completes."""
    target = f"127.0.0.1:{agent.sip_port}"
    ice = SDP + f"a=ice-ufrag:{'u' * 1500}\r\na=ice-pwd:{'p' * 40}\r\na=candidate:1 1 UDP 2130706431 127.0.0.1 40998 typ host\r\n"
    reply = exchange(target, lambda port: request("INVITE", target, port, body=ice, ctype="application/sdp"),
                     timeout_s=10)
    assert reply.startswith("SIP/2.0 200"), reply[:300]
    assert "ice-ufrag" not in reply and "candidate" not in reply
    # hang it up: the agent ends calls it cannot hear after its own timeout, so BYE it here
    assert options_ok(target)
    result = run_sipp(os.path.join(SIPP_DIR, "bench-call.xml"), target, "-s", "1000", "-m", "1", "-d", "1500")
    assert result.returncode == 0, result.stdout.decode(errors="replace")[-2000:]
    assert "Assertion" not in agent.log()


@pytest.fixture(scope="module")
def sdp_only_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    tmp = str(tmp_path_factory.mktemp("sdponly"))
    path = os.path.join(tmp, "doors.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("sip:\n  doors:\n    multipart: sdp_only\n    multipart_max_bytes: 4096\n")
    a = start_agent(tmp, "--config", path)
    yield a
    assert stop_agent(a) == 0, a.log()[-3000:]
    assert "Traceback" not in a.log(), a.log()[-6000:]


def test_sdp_only_reduces_a_well_formed_multipart_offer(sdp_only_agent: AgentProcess) -> None:
    """multipart: sdp_only: SDP + ISUP (mpart01) is answered 200 with the SDP part; the malformed shapes still
    get 415; every reduction and refusal is counted."""
    a = sdp_only_agent
    target = f"127.0.0.1:{a.sip_port}"
    _, body, ctype, extra = MULTIPART_SHAPES[0]
    reply = exchange(target, lambda port: request("INVITE", target, port, extra, body, ctype), timeout_s=10)
    assert reply.startswith("SIP/2.0 200"), reply[:300]
    assert "m=audio" in reply and "40998" not in reply  # an SDP answer of its own
    for _, body, ctype, extra in MULTIPART_SHAPES[1:]:
        reply = exchange(target, lambda port: request("INVITE", target, port, extra, body, ctype))
        assert reply.startswith("SIP/2.0 415"), reply[:300]
    m = a.metrics()
    assert m['openclaw_sip_refused_total{reason="multipart_reduced"}'] == 1
    assert m['openclaw_sip_refused_total{reason="unsupported_media"}'] == 2
    assert "multipart body reduced to its SDP part" in a.log()

"""SIP over UDP, TCP and TLS, SRTP and client certificates, against the real server over loopback.

The certificates are made by the test (tests/integration/tls_certs.py). SIPp (Debian's build has
no TLS) covers UDP and TCP; the project's pjsua2 caller covers TLS and SRTP media.
"""
from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import warnings
from typing import Iterator

import pytest

from media.pcap import rtp_streams
from tests.integration.conftest import (
    ROOT, AgentProcess, Capture, free_port, heard_balance, run_caller, run_sipp, start_agent, stop_agent,
)
from tests.integration.test_calls import transcribe_8k
from tests.integration.tls_certs import Pki, make_pki

pytestmark = pytest.mark.integration

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")
GREETING_WORDS = {"thank", "calling", "help", "balance", "opening", "hours", "agent"}


def _config(path: str, pki: Pki, tls_port: int, srtp: str, client_certificate: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"""sip:
  transports: [udp, tcp, tls]
  tls:
    port: {tls_port}
    certificate: {pki.server_cert}
    private_key: {pki.server_key}
    ca_file: {pki.ca_file}
    client_certificate: {client_certificate}
  srtp:
    policy: {srtp}
""")
    return path


class TlsAgent:
    def __init__(self, agent: AgentProcess, tls_port: int, rtp_port: int, pki: Pki) -> None:
        self.agent, self.tls_port, self.rtp_port, self.pki = agent, tls_port, rtp_port, pki

    @property
    def tls_uri(self) -> str:
        return f"sip:1000@127.0.0.1:{self.tls_port}"


def _start(tmp: str, pki: Pki, srtp: str, client_certificate: str, capacity: int) -> TlsAgent:
    tls_port, rtp_port = free_port(socket.SOCK_STREAM), free_port()
    cfg = _config(os.path.join(tmp, "config.yaml"), pki, tls_port, srtp, client_certificate)
    agent = start_agent(tmp, "--config", cfg, "--rtp-port", str(rtp_port), "--rtp-port-range", "16",
                        capacity=capacity)
    assert f"tls:{tls_port}" in agent.log() and f"tcp:{agent.sip_port}" in agent.log(), agent.log()[-2000:]
    return TlsAgent(agent, tls_port, rtp_port, pki)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def srtp_agent(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsAgent]:
    """UDP, TCP and TLS; SRTP mandatory; client certificates verified when presented; capacity 1."""
    a = _start(str(tmp_path_factory.mktemp("srtp-agent")), pki, "mandatory", "verify", capacity=1)
    yield a
    assert stop_agent(a.agent) == 0, a.agent.log()[-3000:]
    assert "Traceback" not in a.agent.log(), a.agent.log()[-6000:]


def _idle(agent: AgentProcess) -> None:
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 30.0, "no active calls")


def test_tls_call_with_srtp_is_encrypted_on_the_wire(srtp_agent: TlsAgent, tmp_path) -> None:
    """A call over TLS with SRTP is answered and understood, while on loopback neither the SIP
    (no INVITE or SDP key in clear) nor the agent's audio (RTP that does not decode to speech,
    carrying an authentication tag) can be read."""
    agent = srtp_agent.agent
    _idle(agent)
    lo, hi = srtp_agent.rtp_port, srtp_agent.rtp_port + 16
    # two captures: the signalling on the agent's TLS port alone, and its RTP ports (a UDP port
    # range may also carry another test's plain SIP when test files run side by side)
    sip_cap = Capture(str(tmp_path / "tls.pcap"), f"tcp port {srtp_agent.tls_port}")
    try:
        rtp_cap = Capture(str(tmp_path / "rtp.pcap"), f"udp portrange {lo}-{hi}")
        try:
            code, report, out = run_caller(srtp_agent.tls_uri, "--transport", "tls", "--tls-ca",
                                           srtp_agent.pki.ca_file, "--srtp", "mandatory", "--say", "check my balance")
        finally:
            pcap = rtp_cap.stop()
    finally:
        sip_pcap = sip_cap.stop()
    assert code == 0 and report.get("answered"), out[-3000:]
    assert report["transport"] == "tls" and report["srtp"] is True, report
    assert len(set(str(report["greeting"]).split()) & GREETING_WORDS) >= 3, report
    turn = report["turns"][0]  # type: ignore[index]
    assert heard_balance(str(turn["agent_text"])), report   # the balance reply
    with open(sip_pcap, "rb") as f:
        raw = f.read()
    assert b"INVITE sip:" not in raw and b"a=crypto" not in raw and b"m=audio" not in raw
    assert b"SIP/2.0" not in raw, "SIP in clear on the TLS port"
    assert raw.count(b"\x16\x03") > 0, "no TLS handshake record in the capture"
    streams = [s for s in rtp_streams(pcap) if lo <= s.sport <= hi]
    assert streams, "no RTP from the agent in the capture"
    packets = max(streams, key=lambda s: len(s.packets)).packets
    # PCMU carries 8 bytes per ms; SRTP appends a 4- or 10-byte authentication tag to each packet.
    assert all(len(p.payload) % 8 in (2, 4) for p in packets), {len(p.payload) for p in packets[:20]}
    heard = transcribe_8k(agent.speech_uri, type(streams[0])("", 0, "", 0, 0, packets).audio(8000))
    assert len(set(heard.split()) & GREETING_WORDS) <= 1, heard
    _idle(agent)
    record = agent.records()[-1]
    assert record["sip"] == {"transport": "tls", "srtp": True}, record


def _handshake(port: int, ca_file: str, version: ssl.TLSVersion) -> str:
    """The TLS version agreed with the agent's TLS port when the client offers only *version*."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca_file)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1: the server must refuse it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1 is deprecated: that is the point
        ctx.minimum_version = ctx.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.version() or ""


def test_tls_is_1_2_and_older_versions_are_refused(srtp_agent: TlsAgent) -> None:
    """A TLS 1.2 client completes the handshake (certificate verified against the test CA); a
    client that offers only TLS 1.1 is cut off by the server."""
    assert _handshake(srtp_agent.tls_port, srtp_agent.pki.ca_file, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    with pytest.raises((ssl.SSLError, ConnectionError)) as e:
        _handshake(srtp_agent.tls_port, srtp_agent.pki.ca_file, ssl.TLSVersion.TLSv1_1)
    assert "NO_PROTOCOLS_AVAILABLE" not in str(e.value).upper(), e.value  # refused by the server, not here


@pytest.mark.parametrize("transport", ["u1", "t1"])
def test_plain_rtp_offer_gets_488_when_srtp_is_mandatory(srtp_agent: TlsAgent, transport: str) -> None:
    """A plain RTP/AVP offer, over UDP or TCP, is refused with 488 naming SRTP; no call is made."""
    agent = srtp_agent.agent
    _idle(agent)
    answered = agent.metrics().get('openclaw_calls_total{outcome="answered"}', 0.0)
    result = run_sipp(os.path.join(SIPP_DIR, "caller-plain-offer.xml"), f"127.0.0.1:{agent.sip_port}",
                      "-s", "1000", "-m", "1", "-t", transport, timeout_s=30)
    assert result.returncode == 0, result.stdout.decode()[-2000:] + result.stderr.decode()[-2000:]
    assert agent.metrics().get('openclaw_calls_total{outcome="answered"}', 0.0) == answered
    assert "refused: 488 (SRTP required)" in agent.log()


def test_rogue_client_certificate_is_refused(srtp_agent: TlsAgent) -> None:
    """With client_certificate: verify, a certificate from a CA the server does not trust ends
    the TLS handshake: the call fails and no call reaches the agent."""
    agent = srtp_agent.agent
    _idle(agent)
    answered = agent.metrics().get('openclaw_calls_total{outcome="answered"}', 0.0)
    code, report, out = run_caller(srtp_agent.tls_uri, "--transport", "tls", "--tls-ca", srtp_agent.pki.ca_file,
                                   "--tls-cert", srtp_agent.pki.rogue_client_cert,
                                   "--tls-key", srtp_agent.pki.rogue_client_key, "--srtp", "mandatory",
                                   "--dtmf", "1", timeout_s=90)
    assert code != 0 and not report.get("answered"), out[-3000:]
    assert agent.metrics().get('openclaw_calls_total{outcome="answered"}', 0.0) == answered


def test_admission_sees_tcp_and_tls_and_udp(srtp_agent: TlsAgent, tmp_path) -> None:
    """Capacity 1: while a SIPp call over TCP holds the slot, a TLS call (the pjsua2 caller) and a
    UDP call (SIPp) get 503 with Retry-After from the admission gate, and the held call ends well."""
    agent = srtp_agent.agent
    _idle(agent)
    sipp = shutil.which("sipp")
    assert sipp
    hold = subprocess.Popen([sipp, "-sf", os.path.join(SIPP_DIR, "caller-hold-srtp.xml"), "-i", "127.0.0.1",
                             "-p", str(free_port(socket.SOCK_STREAM)), "-t", "t1", "-nostdin", "-s", "1000",
                             "-m", "1", "-d", "15000", "-timeout", "60s", "-timeout_error",
                             f"127.0.0.1:{agent.sip_port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT)
    try:
        agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 1.0, 20.0, "the TCP call")
        rejected = agent.metrics().get('openclaw_calls_total{outcome="rejected_capacity"}', 0.0)
        code, report, out = run_caller(srtp_agent.tls_uri, "--transport", "tls", "--tls-ca", srtp_agent.pki.ca_file,
                                       "--srtp", "mandatory", "--dtmf", "1", timeout_s=60)
        assert code != 0 and report.get("status") == 503, out[-3000:]
        trace = tmp_path / "udp.log"
        result = run_sipp(os.path.join(SIPP_DIR, "caller-hold-srtp.xml"), f"127.0.0.1:{agent.sip_port}",
                          "-s", "1000", "-m", "1", "-d", "1000", "-trace_msg", "-message_file", str(trace),
                          timeout_s=30)
        assert result.returncode == 0, result.stdout.decode()[-2000:]
        assert "SIP/2.0 503" in trace.read_text(errors="replace")
        assert agent.metrics().get('openclaw_calls_total{outcome="rejected_capacity"}', 0.0) == rejected + 2
    finally:
        try:
            out_hold, err_hold = hold.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            hold.kill()
            out_hold, err_hold = hold.communicate()
    assert hold.returncode == 0, out_hold.decode()[-2000:] + err_hold.decode()[-2000:]
    _idle(agent)
    record = agent.records()[-1]
    assert record["sip"] == {"transport": "tcp", "srtp": True}, record


def test_client_certificate_required(tmp_path, pki: Pki) -> None:
    """client_certificate: require refuses a TLS client without a certificate and answers one
    with a certificate the CA signed; with SRTP optional, a caller that offers no keys gets
    plain RTP and one that offers keys (RTP/AVP with a=crypto) gets SRTP."""
    a = _start(str(tmp_path), pki, "optional", "require", capacity=2)
    try:
        code, report, out = run_caller(a.tls_uri, "--transport", "tls", "--tls-ca", pki.ca_file, "--dtmf", "1",
                                       timeout_s=90)
        assert code != 0 and not report.get("answered"), out[-3000:]
        # (the key pressed over the greeting: the call needs no more than one reply)
        code, report, out = run_caller(a.tls_uri, "--transport", "tls", "--tls-ca", pki.ca_file,
                                       "--tls-cert", pki.client_cert, "--tls-key", pki.client_key,
                                       "--barge-in-at", "600", "--dtmf", "1")
        assert code == 0 and report.get("answered") and report["srtp"] is False, out[-3000:]
        _idle(a.agent)
        assert a.agent.records()[-1]["sip"] == {"transport": "tls", "srtp": False}
        # SRTP optional on both sides: the caller's keyed RTP/AVP offer is taken
        code, report, out = run_caller(a.tls_uri, "--transport", "tls", "--tls-ca", pki.ca_file,
                                       "--tls-cert", pki.client_cert, "--tls-key", pki.client_key,
                                       "--srtp", "optional", "--barge-in-at", "600", "--dtmf", "1")
        assert code == 0 and report["srtp"] is True, out[-3000:]
        _idle(a.agent)
        assert a.agent.records()[-1]["sip"] == {"transport": "tls", "srtp": True}
    finally:
        assert stop_agent(a.agent) == 0
    assert "Traceback" not in a.agent.log(), a.agent.log()[-6000:]

"""The hardened Kamailio front (``serve --workers 2 --front kamailio``), scanned and flooded on loopback.

Attackers bind their own loopback addresses (127.0.0.3-6) and the legitimate
caller 127.0.0.1 or 127.0.0.2, so bans are per attacker. Every flood is bounded
in count (-m) and time (-timeout). Kamailio's own view is read with kamcmd
(statistics, htable dumps). Scenarios in ops/sipp/; docs/security.md.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from typing import Any

import pytest

from tests.integration.conftest import ROOT, free_media_ports, free_port
from tests.integration.test_workers import Node, start_node, stop_node

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kamailio") is None or shutil.which("kamcmd") is None,
                       reason="kamailio is not installed (ops/bootstrap.sh installs it)"),
]

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")


def sipp(node: Node, scenario: str, source: str, *args: str, timeout_s: float = 30.0) -> tuple[int, int, int]:
    """Run SIPp from *source* against the front: (exit status, successful calls, failed calls)."""
    binary = shutil.which("sipp")
    assert binary, "sipp (Debian package sip-tester) is not installed; run ops/bootstrap.sh"
    proc = subprocess.run([binary, "-sf", os.path.join(SIPP_DIR, scenario), "-s", "1000", "-i", source,
                           "-p", str(free_port()), "-mp", str(free_media_ports()), "-nostdin",
                           "-timeout", f"{int(timeout_s)}s", *args, node.target],
                          capture_output=True, timeout=timeout_s + 30, cwd=ROOT)
    out = proc.stdout.decode(errors="replace")
    ok = re.findall(r"Successful call\s*\|\s*\d+\s*\|\s*(\d+)", out)
    failed = re.findall(r"Failed call\s*\|\s*\d+\s*\|\s*(\d+)", out)
    return proc.returncode, int(ok[-1]) if ok else -1, int(failed[-1]) if failed else -1


def kam(node: Node, *command: str) -> str:
    return subprocess.run(["kamcmd", "-s", f"unix:{node.run_dir}/kamailio.ctl", *command],
                          capture_output=True, timeout=5).stdout.decode()


def front_stats(node: Node) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"script:openclaw_(\w+)\s*=\s*(\d+)", kam(node, "stats.get_statistics",
                                                                                       "script:"))}


def banned(node: Node, table: str) -> set[str]:
    return set(re.findall(r"name:\s*(\S+)", kam(node, "htable.dump", table)))


def stop(node: Node) -> None:
    code = stop_node(node)
    assert code == 0, f"supervisor exited with {code}:\n{node.log()[-4000:]}"
    assert "Traceback" not in node.log(), node.log()[-6000:]


@pytest.fixture(scope="module")
def hardened(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """No sip.access: the front's own defences only; pike tuned low so a bounded flood trips it. Shared by
    the tests below: each attacks from its own address and reads the front's counters as differences."""
    n = start_node(str(tmp_path_factory.mktemp("hardened")), "--kamailio-define", "PIKE_REQS=4",
                   "--kamailio-define", "PIKE_SAMPLING_S=1")
    yield n
    stop(n)


def grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """How much each front counter grew."""
    return {k: v - before.get(k, 0) for k, v in after.items()}


def test_scanner_sweep_is_dropped_and_banned(hardened: Node) -> None:
    """An OPTIONS sweep with a scanner User-Agent gets no answer at all; its address stays banned for any
    User-Agent, while an ordinary OPTIONS from another address is answered."""
    before = front_stats(hardened)
    code, ok, failed = sipp(hardened, "options-probe.xml", "127.0.0.5", "-m", "20", "-r", "20",
                            "-set", "ua", "friendly-scanner", "-recv_timeout", "1000")
    assert (code, ok, failed) == (1, 0, 20)
    assert grown(before, front_stats(hardened))["rejected_scanner"] >= 1
    assert "127.0.0.5" in banned(hardened, "scanban")
    code, ok, _ = sipp(hardened, "options-probe.xml", "127.0.0.5", "-m", "1", "-set", "ua", "Yealink",
                       "-recv_timeout", "1000")
    assert ok == 0
    code, ok, failed = sipp(hardened, "options-probe.xml", "127.0.0.2", "-m", "3", "-r", "5", "-set", "ua",
                            "Yealink SIP-T46S", "-recv_timeout", "2000")
    assert (code, ok, failed) == (0, 3, 0)


def test_register_brute_force_is_banned(hardened: Node) -> None:
    """40 REGISTERs with guessed credentials at 20/s: the first are answered (405: no registrar here),
    then pike bans the address and the rest get nothing."""
    before = front_stats(hardened)
    code, ok, failed = sipp(hardened, "register-attempt.xml", "127.0.0.6", "-m", "40", "-r", "20",
                            "-recv_timeout", "1000")
    assert 1 <= ok <= 12 and failed == 40 - ok, (ok, failed)
    assert "127.0.0.6" in banned(hardened, "ipban")
    assert grown(before, front_stats(hardened))["rejected_flood"] >= 1


def test_invite_flood_is_banned_and_a_call_during_it_is_answered(hardened: Node) -> None:
    """150 INVITEs at 50/s from 127.0.0.4 (capacity is 8): pike bans the flood after a few; a call from
    127.0.0.2 placed a second into the flood is answered and completes."""
    before = front_stats(hardened)
    result: dict[str, tuple[int, int, int]] = {}
    flood = threading.Thread(target=lambda: result.setdefault("flood", sipp(
        hardened, "invite-flood.xml", "127.0.0.4", "-m", "150", "-r", "50", "-recv_timeout", "2000")))
    flood.start()
    try:
        hardened.wait_for(lambda: "127.0.0.4" in banned(hardened, "ipban"), 10, "the flood to be banned")
        code, ok, failed = sipp(hardened, "bench-call.xml", "127.0.0.2", "-m", "1", "-d", "2000")
    finally:
        flood.join(timeout=60)
    assert (code, ok, failed) == (0, 1, 0)
    _, flood_ok, flood_failed = result["flood"]
    assert flood_ok + flood_failed == 150 and flood_failed >= 120, result["flood"]
    stats = grown(before, front_stats(hardened))
    assert stats["rejected_flood"] >= 1 and stats["dispatched"] <= 30, stats
    # The flood calls answered before the ban cannot hang up (their BYEs are dropped with everything else
    # from the banned address): the agent ends them itself when nobody speaks (no-input, then goodbye).
    hardened.wait_for(lambda: sum(v for k, v in hardened.metrics().items()
                                  if k.startswith("openclaw_active_calls{")) == 0, 120, "the flood's calls to end")


def access_node(tmp_path: Any, config: str) -> Node:
    path = os.path.join(str(tmp_path), "access.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(config)
    return start_node(str(tmp_path), "--config", path)


def test_front_refuses_untrusted_sources_with_403(tmp_path: Any) -> None:
    """sip.access.trusted_sources without digest users: Kamailio itself answers 403 to 127.0.0.2 (the
    workers never see it) and dispatches 127.0.0.1's call."""
    node = access_node(tmp_path, "sip:\n  access:\n    trusted_sources: [127.0.0.1/32]\n")
    try:
        assert open(os.path.join(node.run_dir, "trusted.list")).read().splitlines()[1:] == ["1 127.0.0.1 32"]
        code, ok, _ = sipp(node, "invite-refused.xml", "127.0.0.2", "-m", "1", "-recv_timeout", "3000")
        assert (code, ok) == (0, 1)
        assert front_stats(node)["rejected_untrusted"] == 1
        assert front_stats(node).get("dispatched", 0) == 0
        code, ok, _ = sipp(node, "bench-call.xml", "127.0.0.1", "-m", "1", "-d", "1500")
        assert (code, ok) == (0, 1)
        assert front_stats(node)["dispatched"] == 1
    finally:
        stop(node)


def test_digest_brute_force_through_the_front_is_banned(tmp_path: Any) -> None:
    """With digest users the workers challenge callers from outside the trusted sources (the caller's
    address comes from Kamailio in X-OpenClaw-Source); 3 wrong answers, spread over both workers, ban
    the address in Kamailio; a right caller elsewhere goes on."""
    node = access_node(tmp_path, """\
sip:
  access:
    trusted_sources: [127.0.0.1]
    auth:
      users: [{user: alice, password: s3cret}]
      retry_interval_s: 0.2
    bans: {after_failures: 3, window_s: 60, ban_s: 30}
""")
    try:
        code, ok, _ = sipp(node, "caller-auth.xml", "127.0.0.2", "-m", "1", "-d", "1000", "-au", "alice",
                           "-ap", "s3cret")
        assert (code, ok) == (0, 1)
        tries = [sipp(node, "caller-auth-wrong.xml", "127.0.0.3", "-m", "1", "-au", "alice", "-ap", "guess",
                      "-recv_timeout", "2000")[1] for _ in range(4)]
        assert tries == [1, 1, 1, 0]  # the third failure bans: the fourth try gets nothing
        assert "127.0.0.3" in banned(node, "authban")
        stats = front_stats(node)
        assert stats["auth_bans"] == 1 and stats["rejected_banned"] >= 1
        log = node.log()
        assert "from 127.0.0.3 refused (auth_failed)" in log  # the workers saw the caller's own address
        code, ok, _ = sipp(node, "caller-auth.xml", "127.0.0.2", "-m", "1", "-d", "1000", "-au", "alice",
                           "-ap", "s3cret")
        assert (code, ok) == (0, 1)
        metrics = node.metrics()
        assert metrics.get("openclaw_front_auth_bans_total") == 1
    finally:
        stop(node)


def _read_sip(sock: ssl.SSLSocket, deadline: float) -> str:
    """One SIP message from a stream (headers, then Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if time.monotonic() > deadline:
            raise AssertionError(f"no SIP message over TLS; got {data[:300]!r}")
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError(f"TLS connection closed; got {data[:300]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^(?:content-length|l)\s*:\s*(\d+)", head)
    need = int(m.group(1)) if m else 0
    while len(body) < need:
        body += sock.recv(4096)
    return (head + b"\r\n\r\n" + body[:need]).decode(errors="replace")


def test_front_terminates_tls(tmp_path: Any) -> None:
    """WITH_TLS: Kamailio answers OPTIONS over TLS 1.2+, and an INVITE over TLS reaches a worker over UDP,
    is answered, ACKed and hung up over the same TLS connection (Record-Route both ways)."""
    tls_dir = str(tmp_path)
    cert, key = os.path.join(tls_dir, "cert.pem"), os.path.join(tls_dir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)
    cfg = os.path.join(tls_dir, "tls.cfg")
    with open(os.path.join(ROOT, "ops", "kamailio", "tls.cfg"), encoding="utf-8") as f:
        text = f.read().replace("/etc/openclaw-voice/tls/cert.pem", cert).replace("/etc/openclaw-voice/tls/key.pem",
                                                                                 key)
    with open(cfg, "w", encoding="utf-8") as f:
        f.write(text)
    tls_port = free_port(socket.SOCK_STREAM)
    node = start_node(str(tmp_path), "--kamailio-define", "WITH_TLS=1",
                      "--kamailio-define", f"TLS_LISTEN=tls:127.0.0.1:{tls_port}",
                      "--kamailio-define", f'TLS_CFG="{cfg}"')
    try:
        ctx = ssl.create_default_context(cafile=cert)
        ctx.check_hostname = False
        with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw, \
                ctx.wrap_socket(raw) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            local = f"127.0.0.1:{tls.getsockname()[1]}"
            deadline = time.monotonic() + 30

            def send(method: str, uri: str, cseq: int, extra: str = "", body: str = "") -> None:
                tls.sendall((f"{method} {uri} SIP/2.0\r\nVia: SIP/2.0/TLS {local};branch=z9hG4bK{method}{cseq}\r\n"
                             f"Max-Forwards: 70\r\nFrom: <sip:5550111@127.0.0.1>;tag=tlsc\r\n"
                             f"To: <sip:1000@127.0.0.1>{extra}\r\nCall-ID: tls-{tls_port}\r\nCSeq: {cseq} {method}\r\n"
                             f"Contact: <sip:5550111@{local};transport=tls>\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n{body}").encode())

            send("OPTIONS", f"sip:127.0.0.1:{tls_port};transport=tls", 1)
            assert _read_sip(tls, deadline).startswith("SIP/2.0 200")
            sdp = ("v=0\r\no=tls 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                   f"m=audio {free_port()} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n")
            tls.sendall((f"INVITE sip:1000@127.0.0.1:{tls_port};transport=tls SIP/2.0\r\n"
                         f"Via: SIP/2.0/TLS {local};branch=z9hG4bKinv\r\nMax-Forwards: 70\r\n"
                         f"From: <sip:5550111@127.0.0.1>;tag=tlsc\r\nTo: <sip:1000@127.0.0.1>\r\n"
                         f"Call-ID: tls-{tls_port}\r\nCSeq: 2 INVITE\r\nContact: <sip:5550111@{local};transport=tls>\r\n"
                         f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}").encode())
            reply = _read_sip(tls, deadline)
            while reply.startswith("SIP/2.0 1"):
                reply = _read_sip(tls, deadline)
            assert reply.startswith("SIP/2.0 200"), reply[:400]
            to = re.search(r"(?im)^To:\s*(.*)$", reply).group(1).strip()  # type: ignore[union-attr]
            contact = re.search(r"(?im)^Contact:\s*<([^>]+)>", reply).group(1)  # type: ignore[union-attr]
            routes = [r.strip() for line in re.findall(r"(?im)^Record-Route:\s*(.*)$", reply)
                      for r in line.split(",")][::-1]
            route = "".join(f"\r\nRoute: {r}" for r in routes)
            for method, cseq in (("ACK", 2), ("BYE", 3)):
                tls.sendall((f"{method} {contact} SIP/2.0\r\nVia: SIP/2.0/TLS {local};branch=z9hG4bK{method}\r\n"
                             f"Max-Forwards: 70\r\nFrom: <sip:5550111@127.0.0.1>;tag=tlsc\r\nTo: {to}{route}\r\n"
                             f"Call-ID: tls-{tls_port}\r\nCSeq: {cseq} {method}\r\n"
                             f"Content-Length: 0\r\n\r\n").encode())
            bye_reply = _read_sip(tls, deadline)
            assert bye_reply.startswith("SIP/2.0 200") and "CSeq: 3 BYE" in bye_reply, bye_reply[:400]
        node.wait_for(lambda: os.path.isdir(node.records_dir) and len(node.records(0) + node.records(1)) == 1, 20,
                      "the TLS call's record")
    finally:
        stop(node)

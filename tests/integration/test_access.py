"""Who may call (sip.access), through the real server with SIPp on loopback addresses.

Loopback is 127.0.0.0/8, so SIPp binds 127.0.0.2 / 127.0.0.3 as callers outside the
trusted source 127.0.0.1. Scenarios: ops/sipp/invite-refused.xml, caller-auth.xml,
caller-auth-wrong.xml; docs/security.md.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Iterator

import pytest

from tests.integration.conftest import ROOT, AgentProcess, free_port, start_agent, stop_agent

pytestmark = pytest.mark.integration

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")


def sipp(scenario: str, agent: AgentProcess, source: str, *args: str,
         timeout_s: float = 30.0) -> subprocess.CompletedProcess[bytes]:
    """One SIPp call from *source* (exit status 0: the scenario went as written)."""
    binary = shutil.which("sipp")
    assert binary, "sipp (Debian package sip-tester) is not installed; run ops/bootstrap.sh"
    return subprocess.run([binary, "-sf", os.path.join(SIPP_DIR, scenario), "-s", "1000", "-m", "1", "-l", "1",
                           "-i", source, "-p", str(free_port()), "-nostdin", "-timeout", f"{int(timeout_s)}s",
                           "-timeout_error", *args, f"127.0.0.1:{agent.sip_port}"],
                          capture_output=True, timeout=timeout_s + 30, cwd=ROOT)


def write_config(tmp: str, text: str) -> str:
    path = os.path.join(tmp, "access.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


@pytest.fixture(scope="module")
def acl_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """A server that trusts the name localhost only (resolved through the reactor; no digest users)."""
    tmp = str(tmp_path_factory.mktemp("acl"))
    a = start_agent(tmp, "--config", write_config(tmp, "sip:\n  access:\n    trusted_sources: [localhost]\n"))
    yield a
    assert stop_agent(a) == 0, a.log()[-3000:]
    assert "Traceback" not in a.log(), a.log()[-6000:]


@pytest.fixture(scope="module")
def auth_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """A server that trusts 127.0.0.1 and lets others in with digest credentials; 3 failures ban for 8 s."""
    tmp = str(tmp_path_factory.mktemp("auth"))
    a = start_agent(tmp, "--config", write_config(tmp, """\
sip:
  access:
    trusted_sources: [127.0.0.1]
    auth:
      realm: openclaw-test
      users:
        - {user: alice, password: s3cret}
      retry_interval_s: 0.3
    bans: {after_failures: 3, window_s: 60, ban_s: 8}
"""))
    yield a
    assert stop_agent(a) == 0, a.log()[-3000:]
    assert "Traceback" not in a.log(), a.log()[-6000:]


def test_untrusted_invite_is_refused_403_and_trusted_call_is_answered(acl_agent: AgentProcess) -> None:
    """An INVITE from 127.0.0.2 gets 403 before pjsua (no call created, counted); 127.0.0.1 is answered."""
    before = acl_agent.metrics()
    r = sipp("invite-refused.xml", acl_agent, "127.0.0.2", "-recv_timeout", "5000")
    assert r.returncode == 0, r.stdout.decode(errors="replace")[-2000:]
    after = acl_agent.metrics()
    assert after['openclaw_sip_refused_total{reason="untrusted"}'] \
        == before['openclaw_sip_refused_total{reason="untrusted"}'] + 1
    assert "refused (untrusted)" in acl_agent.log() and "from 127.0.0.2" in acl_agent.log()
    # The same scenario from the trusted address is not refused: no 403 comes (SIPp fails on the 200).
    ok = sipp("bench-call.xml", acl_agent, "127.0.0.1", "-d", "1500")
    assert ok.returncode == 0, ok.stdout.decode(errors="replace")[-2000:]
    acl_agent.wait_for(lambda: len(acl_agent.records()) >= 1, 20, "the trusted call's record")
    assert len(acl_agent.records()) == 1  # the refused INVITE never became a call


def test_digest_call_brute_force_ban_and_recovery(auth_agent: AgentProcess) -> None:
    """Right credentials are answered; 3 wrong tries ban the source (nothing answered, even right ones)
    while other callers go on; after ban_s the banned source can call again."""
    a = auth_agent
    ok = sipp("caller-auth.xml", a, "127.0.0.2", "-au", "alice", "-ap", "s3cret", "-d", "1500")
    assert ok.returncode == 0, ok.stdout.decode(errors="replace")[-2000:]
    m0 = a.metrics()
    results = []
    for _ in range(2):
        results.append(sipp("caller-auth-wrong.xml", a, "127.0.0.3", "-au", "alice", "-ap", "guess",
                            "-recv_timeout", "3000").returncode)
        time.sleep(0.4)  # past retry_interval_s: these are failures, not rate-limited tries
    assert results == [0, 0]  # each wrong try: 401 again
    third = sipp("caller-auth-wrong.xml", a, "127.0.0.3", "-au", "alice", "-ap", "guess", "-recv_timeout", "3000")
    assert third.returncode != 0  # the third failure bans: no answer
    banned_at = time.monotonic()
    m1 = a.metrics()
    assert m1["openclaw_sip_bans_total"] == m0["openclaw_sip_bans_total"] + 1
    assert m1["openclaw_sip_banned_sources"] == 1
    assert m1['openclaw_sip_refused_total{reason="auth_failed"}'] \
        == m0['openclaw_sip_refused_total{reason="auth_failed"}'] + 2
    # Banned: even the right password gets no answer at all.
    right = sipp("caller-auth.xml", a, "127.0.0.3", "-au", "alice", "-ap", "s3cret", "-d", "500",
                 "-recv_timeout", "2000")
    assert right.returncode != 0
    assert a.metrics()['openclaw_sip_refused_total{reason="banned"}'] \
        > m1['openclaw_sip_refused_total{reason="banned"}']
    # Another caller is not affected during the ban.
    other = sipp("caller-auth.xml", a, "127.0.0.2", "-au", "alice", "-ap", "s3cret", "-d", "1000")
    assert other.returncode == 0, other.stdout.decode(errors="replace")[-2000:]
    assert time.monotonic() - banned_at < 8, "the checks during the ban took longer than the ban"
    time.sleep(max(0.0, banned_at + 8.5 - time.monotonic()))
    again = sipp("caller-auth.xml", a, "127.0.0.3", "-au", "alice", "-ap", "s3cret", "-d", "1000")
    assert again.returncode == 0, again.stdout.decode(errors="replace")[-2000:]
    assert a.metrics()["openclaw_sip_banned_sources"] == 0
    a.wait_for(lambda: len(a.records()) >= 3, 20, "three answered calls' records")

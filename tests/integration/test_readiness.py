"""``/healthz/ready`` of a real single-process server: 200 with a free slot, 503 ``no_free_slot`` while
its one slot holds a SIPp call, 200 again when the call ends, 503 ``draining`` once draining."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from typing import Any, Iterator

import pytest

from tests.integration.conftest import ROOT, AgentProcess, free_media_ports, free_port, start_agent, stop_agent, wait_until

pytestmark = pytest.mark.integration


def ready(agent: AgentProcess) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/healthz/ready", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture()
def one_slot_agent(tmp_path: Any) -> Iterator[AgentProcess]:
    a = start_agent(str(tmp_path), capacity=1)
    yield a
    stop_agent(a)


def test_readiness_follows_the_free_slots_and_the_drain(one_slot_agent: AgentProcess) -> None:
    """capacity 1: ready; a call in progress takes the slot (503 no_free_slot) while /healthz stays 200;
    hung up: ready again; SIGUSR1 (drain) with a call up: 503 draining."""
    agent = one_slot_agent
    code, body = ready(agent)
    assert code == 200 and body["ready"] is True and body["free_slots"] == 1
    sipp = shutil.which("sipp")
    assert sipp, "sipp (Debian package sip-tester) is not installed; run ops/bootstrap.sh"

    def call(hold_ms: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sipp, "-sf", os.path.join(ROOT, "ops", "sipp", "bench-call.xml"), "-s", "1000",
                                 "-m", "1", "-l", "1", "-d", str(hold_ms), "-i", "127.0.0.1", "-p", str(free_port()),
                                 "-mp", str(free_media_ports()), "-nostdin", "-timeout", "30s", "-timeout_error",
                                 f"127.0.0.1:{agent.sip_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)

    first = call(3000)
    code, body = wait_until(lambda: (lambda r: r if r[0] == 503 else None)(ready(agent)), 15,
                            "readiness 503 while the only slot is taken", agent.log)
    assert body["reasons"] == ["no_free_slot"] and body["active_calls"] == 1
    assert agent.health()["status"] == "ok"  # the process is fine, only full
    assert first.wait(timeout=30) == 0
    wait_until(lambda: ready(agent)[0] == 200, 15, "readiness 200 after the call", agent.log)

    second = call(8000)
    wait_until(lambda: ready(agent)[0] == 503, 15, "the second call taking the slot", agent.log)
    agent.proc.send_signal(signal.SIGUSR1)
    code, body = wait_until(lambda: (lambda r: r if "draining" in r[1].get("reasons", []) else None)(ready(agent)),
                            15, "readiness to say draining", agent.log)
    assert code == 503
    done = threading.Event()
    threading.Thread(target=lambda: (second.wait(timeout=40), done.set()), daemon=True).start()
    assert done.wait(45)

"""A model-version rollout with a real call running: the real agent server, two regions whose
embedded speech servers are restarted on a new version by the rollout's hook, a SIPp call, and
``openclaw-voice models rollout``. The call's version comes from the speech servers' own
per-stream log (call id, version), not from the node."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import OPENCLAW, ROOT, free_port, start_agent, stop_agent
from tests.integration.relay_fixtures import load_relay_module

pytestmark = [pytest.mark.integration,
              pytest.mark.solo]  # region health probes with short timeouts: a loaded machine fails them

OLD, NEW = "pocketsphinx-en-US-1.0", "pocketsphinx-en-US-1.1"
HOOK = os.path.join(ROOT, "ops", "bench", "rollout_region.py")
TOKEN = "rollout-test-token"
STREAM = re.compile(r"stream kind=(\w+) call_id=(\S+) version=(\S+)")


def _hook(*args: str) -> None:
    subprocess.run([sys.executable, HOOK, *args], check=True, cwd=ROOT, timeout=120, stdout=subprocess.DEVNULL)


@pytest.mark.skipif(shutil.which("sipp") is None, reason="needs sipp (Debian sip-tester)")
def test_a_call_cut_by_a_region_switch_moves_to_a_region_with_its_version(tmp_path) -> None:
    """Regions a (near) and b (far) serve asr:…-1.0; a 20 s SIPp call lands in a. The rollout of
    1.1 to a drains it for 2 s (the call is still there: reported as left), switches it and
    restarts a's server on 1.1: the call's recognition moves to b, still on 1.0, and the call
    completes. Every stream of the call was served by 1.0 (the servers' logs); a new call
    afterwards goes to a and is served by 1.1 while b still serves 1.0."""
    state = str(tmp_path)
    relay_mod = load_relay_module()
    relays = {}
    agent = None
    sipp = None
    try:
        ports = {"a": free_port(socket.SOCK_STREAM), "b": free_port(socket.SOCK_STREAM)}
        starting = [subprocess.Popen([sys.executable, HOOK, "start", "--state", state, "--region", name, "--port",
                                      str(port), "--asr-model", OLD], cwd=ROOT, stdout=subprocess.DEVNULL)
                    for name, port in ports.items()]  # both at once: each loads its models for seconds
        assert [p.wait(timeout=120) for p in starting] == [0, 0]
        for name, delay in (("a", 5.0), ("b", 40.0)):
            relays[name] = relay_mod.Relay("127.0.0.1:0", f"127.0.0.1:{ports[name]}", delay_ms=delay).start()
        config = tmp_path / "agent.yaml"
        config.write_text(
            f"admin: {{token: {TOKEN}}}\nspeech:\n  regions:\n"
            + "".join(f"    - {{name: {n}, uri: '{r.address}', model_versions: ['asr:{OLD}']}}\n"
                      for n, r in relays.items())
            + "  routing:\n    probe: {discover_versions: true, discovery_interval_s: 1}\n")
        agent = start_agent(state, "--config", str(config))
        scenario = tmp_path / "call.xml"
        with open(os.path.join(ROOT, "ops", "sipp", "caller-utterance.xml")) as f:
            scenario.write_text(f.read().replace("ops/sipp/audio/", os.path.join(ROOT, "ops", "sipp", "audio") + "/")
                                .replace('<pause milliseconds="9000"/>', '<pause milliseconds="17000"/>'))
        sipp = subprocess.Popen(
            ["sipp", "-sf", str(scenario), "-i", "127.0.0.1", "-p", str(free_port()), "-nostdin", "-s", "1000",
             "-m", "1", "-l", "1", "-mp", str(free_port() // 2 * 2), "-cid_str", "rollout-%u@%s",
             "-timeout", "60s", "-timeout_error", f"127.0.0.1:{agent.sip_port}"],
            cwd=state, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        agent.wait_for(lambda: "region a" in agent.log() and "end of turn" in agent.log(), 30.0, "the call in region a")
        rollout = subprocess.run(
            [OPENCLAW, "models", "rollout", f"asr:{NEW}", "--regions", "a", "--node",
             f"http://127.0.0.1:{agent.metrics_port}", "--drain-timeout", "2", "--health-timeout", "40",
             "--poll-interval", "0.25", "--json", "--apply",
             f"{sys.executable} {HOOK} restart --state {state} --region {{region}} --asr-model {{model}}"],
            capture_output=True, text=True, cwd=ROOT, timeout=150, env={**os.environ, "OPENCLAW_ADMIN_TOKEN": TOKEN})
        assert rollout.returncode == 0, rollout.stdout + rollout.stderr
        report = json.loads(rollout.stdout)
        a_step = report["steps"][0]
        assert report["ok"] and a_step["region"] == "a" and a_step["calls_left"] == 1, report
        assert report["skew_window_s"] == 0.0 and a_step["result"] == "done"
        assert sipp.wait(timeout=60) == 0, sipp.stderr.read().decode()[-2000:] if sipp.stderr else ""
        record = agent.wait_for(lambda: agent.records(), 20.0, "the call record")[-1]
        assert record["regions"][:2] == ["a", "b"], record

        # a new call now: served by 1.1 (the request said over the greeting: one turn is enough)
        after = subprocess.run([OPENCLAW, "call", agent.uri, "--json", "--barge-in-at", "600",
                                "--say", "check my balance"],
                               capture_output=True, timeout=90, cwd=ROOT)
        assert after.returncode == 0, after.stdout.decode()[-2000:]
        node = f"http://127.0.0.1:{agent.metrics_port}"
        shown = subprocess.run([OPENCLAW, "models", "status", "--node", node, "--json"], capture_output=True,
                               text=True, cwd=ROOT, timeout=60, env={**os.environ, "OPENCLAW_ADMIN_TOKEN": TOKEN})
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)[node]
        versions = {r["name"]: r["versions"] for r in status["regions"]}
        assert f"asr:{NEW}" in versions["a"] and f"asr:{OLD}" not in versions["a"], status
        assert f"asr:{OLD}" in versions["b"] and f"asr:{NEW}" not in versions["b"], status
    finally:
        if sipp is not None and sipp.poll() is None:
            sipp.kill()
        code = stop_agent(agent) if agent is not None else 0
        for name in ("a", "b"):
            _hook("stop", "--state", state, "--region", name)
        for relay in relays.values():
            relay.stop()
    assert code == 0
    seen: dict[str, set[str]] = {}
    where: dict[str, set[str]] = {}
    for name in ("a", "b"):
        for kind, call_id, version in STREAM.findall(open(os.path.join(state, f"{name}.log")).read()):
            if kind == "asr" and call_id != "-":
                seen.setdefault(call_id, set()).add(version)
                where.setdefault(call_id, set()).add(name)
    cut = [cid for cid in seen if cid.startswith("rollout-")]
    assert len(cut) == 1 and seen[cut[0]] == {f"asr:{OLD}"} and where[cut[0]] == {"a", "b"}, (seen, where)
    later = [cid for cid in seen if not cid.startswith("rollout-")]
    assert later and all(seen[cid] == {f"asr:{NEW}"} and where[cid] == {"a"} for cid in later), (seen, where)

"""Regions with real calls: three simulated regions (one speech server behind three relays with
different delays); the nearest is chosen, a region dying mid-call does not lose the caller's next
turn, and a pinned model version is honoured."""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

from tests.integration.conftest import OPENCLAW, ROOT, start_agent, stop_agent
from tests.integration.relay_fixtures import start_regions

pytestmark = [pytest.mark.integration,
              pytest.mark.solo]  # a region blackholed mid-call: stall detection and failover timing


@pytest.fixture(scope="module")
def regions():
    sims = start_regions({"near": 5, "mid": 25, "far": 60}, shared_server=True)
    yield sims
    sims.close()


def region_config(tmp_path, sims, versions: dict[str, str] | None = None) -> str:
    lines = ["speech:", "  regions:"]
    for name in ("near", "mid", "far"):
        lines.append(f"    - name: {name}")
        lines.append(f"      uri: {sims[name].address}")
        if versions and name in versions:
            lines.append(f"      model_versions: [{versions[name]}]")
    path = tmp_path / "regions.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def regions_doc(agent) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/regions", timeout=5).read())


def test_nearest_region_serves_and_a_dead_region_loses_no_turn(tmp_path, regions) -> None:
    """The call goes to the nearest region; blackholing it between turns moves the call's speech,
    and the caller's next turn is still understood and answered."""
    agent = start_agent(str(tmp_path), "--config", region_config(tmp_path, regions))
    caller = None
    try:
        doc = regions_doc(agent)
        assert {r["name"] for r in doc["regions"]} == {"near", "mid", "far"}, doc
        caller = subprocess.Popen([OPENCLAW, "call", agent.uri, "--json", "--say", "check my balance",
                                   "--say", "what are your opening hours"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
        agent.wait_for(lambda: "end of turn" in agent.log(), 60.0, "the first turn")
        assert "region near" in agent.log()
        regions["near"].relay.blackhole(True)
        out, _ = caller.communicate(timeout=120)
        report = json.loads([line for line in out.decode().splitlines() if line.startswith("{")][-1])
        assert caller.returncode == 0, out.decode()[-3000:]
        first, second = report["turns"]
        assert "balance" in first["agent_text"], report
        heard = set(second["agent_text"].split())
        assert len(heard & {"open", "monday", "friday", "morning", "afternoon"}) >= 2, report
        record = agent.wait_for(lambda: agent.records(), 20.0, "the call record")[-1]
        assert record["region"] == "near", record
        assert record["failovers"] and record["regions"][-1] in ("mid", "far"), record
        doc = regions_doc(agent)
        near = [r for r in doc["regions"] if r["name"] == "near"][0]
        assert not near["up"] and near["state"] != "healthy", near
    finally:
        regions["near"].relay.blackhole(False)
        if caller is not None and caller.poll() is None:
            caller.kill()
        assert stop_agent(agent) == 0


def test_pinned_model_version_goes_to_the_region_that_has_it(tmp_path, regions) -> None:
    """A flow pinning an ASR model version is served by the only region with that version, though it
    is the farthest; with no such region at all the call gets 503 + Retry-After."""
    dialplan = tmp_path / "pinned.yaml"
    dialplan.write_text(
        "version: 1\nroutes:\n  - flow: main\nflows:\n  main:\n"
        "    settings: {asr_model: 'pocketsphinx-en-US@5.1'}\n"
        "    steps:\n      - say: Hello.\n      - hangup:\n")
    config = region_config(tmp_path, regions, {"far": "asr:pocketsphinx-en-US@5.1"})
    agent = start_agent(str(tmp_path), "--config", config, "--dialplan", str(dialplan))
    try:
        proc = subprocess.run([OPENCLAW, "call", agent.uri, "--json"], capture_output=True, timeout=90, cwd=ROOT)
        record = agent.wait_for(lambda: agent.records(), 20.0, "the call record")[-1]
        assert record["region"] == "far", record
    finally:
        assert stop_agent(agent) == 0
    config = region_config(tmp_path, regions, {"far": "asr:pocketsphinx-en-US@5.0"})
    agent = start_agent(str(tmp_path), "--config", config, "--dialplan", str(dialplan))
    try:
        started = time.monotonic()
        proc = subprocess.run([OPENCLAW, "call", agent.uri, "--json"], capture_output=True, timeout=90, cwd=ROOT)
        report = json.loads([line for line in proc.stdout.decode().splitlines() if line.startswith("{")][-1])
        assert report["status"] == 503 and not report["answered"], report
        assert "no speech region (no_version" in agent.log()
        assert time.monotonic() - started < 30
    finally:
        assert stop_agent(agent) == 0

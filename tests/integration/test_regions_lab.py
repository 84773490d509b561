"""The regions lab end to end: three regions (Kamailio, a worker, a speech server, relays) in network
namespaces, PowerDNS with LUA records in front, a caller resolving the SIP service through DNS.

Needs root and network namespaces (CI has both); everything is torn down by ``ops/regions-lab down``
whatever happens.
"""
from __future__ import annotations

import glob
import json
import os
import secrets
import subprocess
import sys
import time
from typing import Any, Iterator

import pytest

from tests.integration.conftest import ROOT

sys.path.insert(0, ROOT)
from ops.lab import netns  # noqa: E402

pytestmark = pytest.mark.integration

LAB = os.path.join(ROOT, "ops", "regions-lab")
TTL_S = 2
HEALTH_INTERVAL_S = 1


def _skip_reason() -> str:
    if os.geteuid() != 0:
        return "the regions lab needs root (network namespaces); CI runs as root"
    return netns.netns_available()


class LabRun:
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir

    def cli(self, *args: str, timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, LAB, "--run-dir", self.run_dir, *args], capture_output=True,
                              text=True, timeout=timeout_s, cwd=ROOT)
        if check and proc.returncode != 0:
            raise AssertionError(f"regions-lab {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{self.logs_tail()}")
        return proc

    def caller(self, *args: str, timeout_s: float = 60.0) -> dict[str, Any]:
        plan = json.load(open(os.path.join(self.run_dir, "plan.json")))
        proc = subprocess.run(["ip", "netns", "exec", f"{plan['prefix']}-caller", sys.executable, "-m",
                               "ops.lab.caller", "--run-dir", self.run_dir, *args], capture_output=True, text=True,
                              timeout=timeout_s, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])  # type: ignore[no-any-return]

    def dns(self) -> dict[str, list[str]]:
        st = self.caller("status")
        return {net: a["addresses"] for net, a in st["dns"].items()}

    def records(self, region: str) -> int:
        n = 0
        for path in glob.glob(os.path.join(self.run_dir, region, "calls", "*.jsonl")):
            with open(path, encoding="utf-8") as f:
                n += sum(1 for line in f if line.strip())
        return n

    def logs_tail(self) -> str:
        out = []
        for path in sorted(glob.glob(os.path.join(self.run_dir, "logs", "*.log"))):
            with open(path, encoding="utf-8", errors="replace") as f:
                out.append(f"--- {os.path.basename(path)}\n{f.read()[-1500:]}")
        return "\n".join(out)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabRun]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    run = LabRun(str(tmp_path_factory.mktemp("lab")))
    prefix = "oclt" + secrets.token_hex(3)
    try:
        run.cli("up", "--prefix", prefix, "--ttl", str(TTL_S), "--health-interval", str(HEALTH_INTERVAL_S),
                "--timeout", "150", timeout_s=200)
        yield run
    finally:
        run.cli("down", check=False, timeout_s=60)
        left = {ns for ns in netns.existing() if ns.startswith(prefix)}
        assert not left, f"namespaces left behind: {left}"


NEAR = {"eu-west": "10.77.101.0/24", "us-east": "10.77.102.0/24", "ap-south": "10.77.103.0/24"}
ADDRESS = {"eu-west": "10.77.0.11", "us-east": "10.77.0.12", "ap-south": "10.77.0.13"}


def wait_dns(lab: LabRun, net: str, want: str, timeout_s: float) -> float:
    t0 = time.monotonic()
    seen: list[str] = []
    while time.monotonic() - t0 < timeout_s:
        seen = lab.dns()[net]
        if seen == [want]:
            return time.monotonic() - t0
        time.sleep(0.3)
    raise AssertionError(f"DNS for {net} answered {seen}, not [{want}], for {timeout_s} s")


def test_dns_answers_each_client_network_its_nearest_region_and_honours_ecs(lab: LabRun) -> None:
    """Every region healthy: each client network gets its own region, with the configured TTL; an EDNS
    Client Subnet from another network wins over the querier's address; NAPTR -> SRV -> A resolves."""
    st = lab.caller("status")
    for name, address in ADDRESS.items():
        assert st["regions"][name]["ready"]["code"] == 200, st["regions"][name]
        assert st["regions"][name]["ready"]["free_slots"] == 4
        assert st["dns"][NEAR[name]]["addresses"] == [address]
        assert st["dns"][NEAR[name]]["ttl_s"] == TTL_S
    via_ecs = lab.caller("resolve", "--from", "eu-west", "--ecs", "10.77.103.0/24")
    assert via_ecs["addresses"] == [ADDRESS["ap-south"]] and via_ecs["port"] == 5060
    assert via_ecs["naptr"] == "_sip._udp.voice.lab."


def test_a_call_through_dns_is_answered_in_the_nearest_region(lab: LabRun) -> None:
    """SIPp from us-east's client network: resolved to us-east, answered there (its call record)."""
    before = {name: lab.records(name) for name in ADDRESS}
    result = lab.caller("call", "--from", "us-east", "--hold-s", "1")
    assert result["ok"], result
    assert result["region"] == "us-east"
    deadline = time.monotonic() + 20
    while lab.records("us-east") == before["us-east"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lab.records("us-east") == before["us-east"] + 1
    assert lab.records("eu-west") == before["eu-west"] and lab.records("ap-south") == before["ap-south"]


def test_a_full_region_leaves_dns_until_a_slot_frees(lab: LabRun) -> None:
    """ap-south's one worker holds 4 calls: its /healthz/ready says no_free_slot (503), DNS sends its
    network to us-east (next nearest) while it is full, and back once the calls end."""
    plan = json.load(open(os.path.join(lab.run_dir, "plan.json")))
    argv = ["ip", "netns", "exec", f"{plan['prefix']}-caller", sys.executable, "-m", "ops.lab.caller",
            "--run-dir", lab.run_dir, "call", "--from", "ap-south", "--hold-s", "10", "--timeout-s", "15"]
    calls = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": ROOT}) for _ in range(4)]
    try:
        deadline = time.monotonic() + 10
        st = lab.caller("status")
        while st["regions"]["ap-south"]["ready"].get("code") != 503 and time.monotonic() < deadline:
            time.sleep(0.3)
            st = lab.caller("status")
        ready = st["regions"]["ap-south"]["ready"]
        assert ready.get("code") == 503 and ready["reasons"] == ["no_free_slot"], ready
        wait_dns(lab, NEAR["ap-south"], ADDRESS["us-east"], timeout_s=HEALTH_INTERVAL_S + TTL_S + 6)
        results = [json.loads(c.communicate(timeout=40)[0].strip().splitlines()[-1]) for c in calls]
    finally:
        for c in calls:
            if c.poll() is None:
                c.kill()
    assert [(r["ok"], r["region"]) for r in results] == [(True, "ap-south")] * 4, results
    wait_dns(lab, NEAR["ap-south"], ADDRESS["ap-south"], timeout_s=HEALTH_INTERVAL_S + TTL_S + 6)


def wait_global_view(lab: LabRun, check: Any, what: str, timeout_s: float) -> dict[str, Any]:
    """Poll the caller's status until *check*(its global_view) holds."""
    t0 = time.monotonic()
    view: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout_s:
        view = lab.caller("status")["global_view"]
        if "error" not in view and check(view):
            return view
        time.sleep(1.0)
    raise AssertionError(f"global Prometheus: {what} not seen in {timeout_s} s; last view {view}")


def _region_down(view: dict[str, Any]) -> list[Any]:
    """The global view's OpenClawRegionDown alerts, pending or firing."""
    return [a for a in view["alerts"] if a[0] == "OpenClawRegionDown"]


def test_the_global_prometheus_federates_every_regions_readiness(lab: LabRun) -> None:
    """Each region's Prometheus scrapes its node; the global one federates the region series: every
    region is scraped and reported ready, and no region alert is left. (A region alert pending
    from the lab's first seconds, before its node was ready, clears at a rule evaluation after
    the ready series arrive, which may come a few seconds after the view first shows them.)"""
    wait_global_view(lab, lambda v: v["ready"] == {r: 1.0 for r in ADDRESS}
                     and v["scraped"] == {r: 1.0 for r in ADDRESS} and not _region_down(v),
                     "three ready regions and no region alert", timeout_s=45)


def test_a_killed_region_leaves_dns_and_comes_back_when_revived(lab: LabRun) -> None:
    """kill us-east: within health interval + TTL + 2 s DNS sends its network to eu-west (next nearest)
    and a new call is answered there; revive: DNS returns us-east again and calls land there."""
    lab.cli("kill", "us-east")
    bound_s = HEALTH_INTERVAL_S + TTL_S + 2
    took = wait_dns(lab, NEAR["us-east"], ADDRESS["eu-west"], timeout_s=bound_s + 10)
    assert lab.dns()[NEAR["ap-south"]] == [ADDRESS["ap-south"]]
    result = lab.caller("call", "--from", "us-east", "--hold-s", "1")
    assert result["ok"] and result["region"] == "eu-west", result
    st = lab.caller("status")
    assert st["regions"]["us-east"]["ready"]["code"] is None  # nothing listens: the node is gone
    # The region's Prometheus died with it: the global one cannot scrape it and raises the alert.
    view = wait_global_view(lab, lambda v: v["scraped"].get("us-east") == 0.0
                            and ["OpenClawRegionDown", "us-east", "pending"] in v["alerts"]
                            or ["OpenClawRegionDown", "us-east", "firing"] in v["alerts"],
                            "us-east unreachable and OpenClawRegionDown", timeout_s=20)
    assert view["scraped"]["eu-west"] == 1.0 and view["scraped"]["ap-south"] == 1.0, view
    lab.cli("revive", "us-east", timeout_s=150)
    wait_dns(lab, NEAR["us-east"], ADDRESS["us-east"], timeout_s=bound_s + 10)
    result = lab.caller("call", "--from", "us-east", "--hold-s", "1")
    assert result["ok"] and result["region"] == "us-east", result
    print(f"DNS left the killed region after {took:.1f} s (bound {bound_s} s + polling)")


def test_a_failed_start_leaves_nothing_behind(tmp_path: object) -> None:
    """`up` that cannot finish in time (2 s) fails with the reason and removes every namespace and process."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    prefix = "oclf" + secrets.token_hex(3)
    run = LabRun(os.path.join(str(tmp_path), "lab"))
    try:
        proc = run.cli("up", "--prefix", prefix, "--timeout", "2", check=False, timeout_s=120)
        assert proc.returncode == 1
        assert "not ready in time" in proc.stderr and "tearing everything down" in proc.stdout
        assert not {ns for ns in netns.existing() if ns.startswith(prefix)}
    finally:
        run.cli("down", check=False, timeout_s=60)


def test_a_second_lab_with_the_same_prefix_is_refused_and_the_first_survives(lab: LabRun, tmp_path: object) -> None:
    """`up` with a prefix in use fails at once and tears nothing down: the running lab still answers."""
    prefix = json.load(open(os.path.join(lab.run_dir, "plan.json")))["prefix"]
    other = LabRun(os.path.join(str(tmp_path), "other"))
    proc = other.cli("up", "--prefix", prefix, check=False, timeout_s=60)
    assert proc.returncode == 1 and "already exist" in proc.stderr
    assert lab.dns()[NEAR["eu-west"]] == [ADDRESS["eu-west"]]

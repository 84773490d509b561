"""One global view, for real on loopback: a node (``serve --workers 2``: the supervisor, two workers,
Kamailio) with two speech regions, a region Prometheus scraping the supervisor's /metrics (ops/prometheus/federation/region_rules.yml) and a global Prometheus
federating the region series from it (global rules and alerts), both the Debian ``prometheus``
started with ops/lab/prometheus.py's configs and command line at a 1 s scrape interval."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from types import ModuleType
from typing import Any, Callable

import pytest

from tests.integration.conftest import ROOT, free_port
from tests.integration.test_workers import Node, start_node, stop_node
from tests.integration.relay_fixtures import start_regions

pytestmark = pytest.mark.integration

REGION = "eu-west"
VERSIONS = {"near": ("asr:conformer-en-US-2.1", "tts:fastpitch-1.0"),
            "far": ("asr:conformer-en-US-2.2", "tts:fastpitch-1.0")}


def load_lab_prometheus() -> ModuleType:
    """ops/lab/prometheus.py as a module (ops/ is not a package)."""
    name = "openclaw_ops_lab_prometheus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "ops", "lab", "prometheus.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def start_prometheus(lab: ModuleType, tmp: str, name: str, config: str) -> tuple[subprocess.Popen[bytes], str]:
    path = os.path.join(tmp, f"{name}.yml")
    with open(path, "w") as f:
        f.write(config)
    address = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    log = open(os.path.join(tmp, f"{name}.log"), "wb")
    proc = subprocess.Popen(lab.command(path, address, os.path.join(tmp, f"{name}-data"), prometheus_bin=PROMETHEUS),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        lab.wait_ready(address, timeout_s=20.0, proc=proc)
    except BaseException:
        stop(proc)
        raise
    return proc, address


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def eventually(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Call *check* until it returns something true; fail with its last result."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"no {what} within {timeout_s} s; last: {last!r}")


PROMETHEUS = shutil.which("prometheus") or ""


@pytest.mark.skipif(not PROMETHEUS, reason="prometheus is not installed (ops/bootstrap.sh installs it)")
def test_global_prometheus_sees_the_region_series_and_a_region_going_down(tmp_path: Any) -> None:
    """Through the global Prometheus's query API: the region's readiness, capacity (both workers), speech regions
    and the model versions each serves arrive labelled region=eu-west; the global rules see the
    version skew the two speech regions have; stopping the region Prometheus makes the global one
    report it unreachable, count no region ready and put OpenClawRegionDown pending."""
    lab = load_lab_prometheus()
    tmp = str(tmp_path)
    sims = start_regions({"near": 5, "far": 25}, shared_server=True)
    procs: list[subprocess.Popen[Any]] = []
    node: Node | None = None
    try:
        lines = ["speech:", "  regions:"]
        for name in ("near", "far"):
            lines += [f"    - name: {name}", f"      uri: {sims[name].address}",
                      f"      model_versions: [{', '.join(VERSIONS[name])}]"]
        config = tmp_path / "regions.yaml"
        config.write_text("\n".join(lines) + "\n")
        node = start_node(tmp, "--config", str(config), workers=2, capacity=4)

        started = time.monotonic()
        region_proc, region_addr = start_prometheus(
            lab, tmp, "region", lab.region_config(REGION, [f"127.0.0.1:{node.metrics_port}"], scrape_interval_s=1.0))
        procs.append(region_proc)
        global_proc, global_addr = start_prometheus(
            lab, tmp, "global", lab.global_config({REGION: region_addr}, scrape_interval_s=1.0))
        procs.append(global_proc)

        def q(promql: str) -> dict[tuple[tuple[str, str], ...], float]:
            return {tuple(sorted((k, v) for k, v in s.labels.items() if k != "__name__")): s.value
                    for s in lab.query(global_addr, promql)}

        ready = eventually(lambda: q('region:openclaw_ready:bool{region="eu-west"} == 1'), 25.0,
                           "ready region series at the global Prometheus")
        federated = {"job": "openclaw-federate", "region": REGION}
        assert ready == {tuple(sorted(federated.items())): 1.0}
        assert q("region:openclaw_nodes_ready:count") == {tuple(sorted(federated.items())): 1.0}
        assert q("region:openclaw_call_capacity:sum") == {tuple(sorted(federated.items())): 8.0}  # 2 workers x 4
        assert q("region:openclaw_call_slots_free:sum") == {tuple(sorted(federated.items())): 8.0}
        # the global rules run on the federated series one evaluation later
        eventually(lambda: q("global:openclaw_regions_ready:count") == {(): 1.0}, 5.0, "one region ready")

        def versions() -> dict[tuple[str, str, str], float]:
            return {(dict(k)["speech_region"], dict(k)["kind"], dict(k)["version"]): v
                    for k, v in q('region:openclaw_speech_model_version_info:max{region="eu-west"}').items()}

        seen = eventually(lambda: len(versions()) == 4 and versions(), 10.0, "four federated model versions")
        assert seen == {("near", "asr", "asr:conformer-en-US-2.1"): 1.0, ("near", "tts", "tts:fastpitch-1.0"): 1.0,
                        ("far", "asr", "asr:conformer-en-US-2.2"): 1.0, ("far", "tts", "tts:fastpitch-1.0"): 1.0}
        up = eventually(lambda: (lambda r: len(r) == 2 and r)(q('region:openclaw_region_up:avg{region="eu-west"}')),
                        10.0, "speech region up for both speech regions")
        assert {dict(k)["speech_region"]: v for k, v in up.items()} == {"near": 1.0, "far": 1.0}
        assert all(dict(k)["region"] == REGION for k in up)
        skew = eventually(lambda: q("global:openclaw_speech_model_version_skew:regions"), 10.0, "version skew series")
        assert {dict(k)["version"]: v for k, v in skew.items()} == {"asr:conformer-en-US-2.1": 1.0,
                                                                    "asr:conformer-en-US-2.2": 1.0}
        arrived_s = time.monotonic() - started
        print(f"region series at the global Prometheus {arrived_s:.1f} s after the region one started")

        stop(region_proc)
        eventually(lambda: q('up{job="openclaw-federate",region="eu-west"} == 0'), 10.0,
                   "the global Prometheus seeing the region Prometheus unreachable")
        pending = eventually(lambda: q('ALERTS{alertname="OpenClawRegionDown",alertstate="pending"}'), 10.0,
                             "OpenClawRegionDown pending")
        assert [dict(k)["cause"] for k in pending] == ["prometheus_unreachable"]
        assert [dict(k)["region"] for k in pending] == [REGION]
        # federated samples keep their timestamps (no staleness): the region must stop counting as ready
        eventually(lambda: q("global:openclaw_regions_ready:count") == {(): 0.0}, 5.0, "zero regions ready")
        assert q("global:openclaw_regions:count") == {(): 1.0}
        assert arrived_s < 40.0
    finally:
        for proc in procs:
            stop(proc)
        if node is not None:
            stop_node(node)
        sims.close()


@pytest.mark.skipif(not PROMETHEUS, reason="prometheus is not installed (ops/bootstrap.sh installs it)")
def test_lab_helpers_report_a_server_that_exits_and_a_bad_query(tmp_path: Any) -> None:
    """wait_ready names a server that exited before it was ready (here: a config it refuses); query
    passes on Prometheus's own error for bad PromQL, and answers a scalar as one sample."""
    lab = load_lab_prometheus()
    tmp = str(tmp_path)
    bad = tmp_path / "bad.yml"
    bad.write_text("scrape_configs:\n  - job_name: x\n    scrape_interval: often\n")
    address = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    proc = subprocess.Popen(lab.command(str(bad), address, os.path.join(tmp, "bad-data"), prometheus_bin=PROMETHEUS),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with pytest.raises(lab.PrometheusError, match=rf"prometheus on {address} exited with [1-9][0-9]* before it was ready"):
            lab.wait_ready(address, timeout_s=20.0, proc=proc)
    finally:
        stop(proc)
    proc, address = start_prometheus(lab, tmp, "ok", lab.global_config({"eu": "127.0.0.1:1"}, scrape_interval_s=1.0))
    try:
        with pytest.raises(lab.PrometheusError, match=r"query 'sum\(' on .*: bad_data: "):
            lab.query(address, "sum(")
        assert lab.query(address, "1 + 1") == [lab.Sample({}, 2.0)]
        with pytest.raises(lab.PrometheusError, match=r"not ready after 0.3 s"):
            lab.wait_ready(f"127.0.0.1:{free_port(socket.SOCK_STREAM)}", timeout_s=0.3)
    finally:
        stop(proc)

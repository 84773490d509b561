"""The operations files of scaling: Prometheus rules (promtool), Kamailio config (kamailio -c),
systemd units (systemd-analyze verify) and the Grafana dashboard (only metrics that exist)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from twisted.internet.task import Clock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = os.path.join(ROOT, "ops")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (ops/bootstrap.sh installs it)")
    return path


def test_prometheus_config_and_rules_pass_promtool_check() -> None:
    """promtool accepts the scrape config (with both rule files) and the rules."""
    promtool = _tool("promtool")
    cfg = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=os.path.join(OPS, "prometheus"),
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    assert "2 rule files found" in cfg.stdout
    rules = subprocess.run([promtool, "check", "rules", "recording_rules.yml", "alert_rules.yml"],
                           cwd=os.path.join(OPS, "prometheus"), capture_output=True, text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr


def test_alerts_fire_on_the_conditions_they_name() -> None:
    """promtool test rules: slow turns, callers turned away, worker restarts and crash loops, region
    failovers alert; fast turns, a worker's retried 503 and a clean restart do not."""
    promtool = _tool("promtool")
    result = subprocess.run([promtool, "test", "rules", "tests.yml"], cwd=os.path.join(OPS, "prometheus"),
                            capture_output=True, text=True)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    alerts = open(os.path.join(OPS, "prometheus", "alert_rules.yml")).read()
    for name in ("OpenClawTurnLatencyHigh", "OpenClawCallsRejected", "OpenClawWorkerRestarts",
                 "OpenClawRegionFailovers"):
        assert f"alert: {name}" in alerts


def test_kamailio_config_is_accepted_by_kamailio(tmp_path: pytest.TempPathFactory) -> None:
    """kamailio -c parses the config with the defines the supervisor passes, with the modules it loads."""
    kamailio = _tool("kamailio")
    ds = tmp_path / "dispatcher.list"  # type: ignore[operator]
    ds.write_text(open(os.path.join(OPS, "kamailio", "dispatcher.list")).read())
    result = subprocess.run(
        [kamailio, "-c", "-f", os.path.join(OPS, "kamailio", "kamailio.cfg"), "-A", f'DISPATCHER_LIST="{ds}"',
         "-A", f'CTL_SOCKET="unix:{tmp_path}/ctl"', "-A", "LISTEN=udp:127.0.0.1:5999", "-A", "RETRY_AFTER_S=7"],
        capture_output=True, text=True)
    out = result.stdout + result.stderr
    assert result.returncode == 0 and "config file ok" in out, out
    cfg = open(os.path.join(OPS, "kamailio", "kamailio.cfg")).read()
    for needle in ('loadmodule "dispatcher.so"', 'loadmodule "pike.so"', "sanity_check", "record_route()",
                   "ds_next_dst()", "ds_ping_interval", "Retry-After"):
        assert needle in cfg


def test_systemd_units_verify_and_drain_on_stop(tmp_path: pytest.TempPathFactory) -> None:
    """systemd-analyze verify accepts the units (paths pointed at this checkout); stopping sends SIGTERM to
    the supervisor only (KillMode=mixed) and waits longer than the drain timeout."""
    analyze = _tool("systemd-analyze")
    names = ("openclaw-voice.service", "openclaw-voice-workers.service", "openclaw-kamailio.service")
    paths = []
    for name in names:
        text = open(os.path.join(OPS, "systemd", name)).read()
        if "openclaw-voice serve" in text:
            assert "KillMode=mixed" in text and "KillSignal=SIGTERM" in text
            drain = int(re.search(r"--drain-timeout (\d+)", text).group(1))  # type: ignore[union-attr]
            stop = int(re.search(r"TimeoutStopSec=(\d+)", text).group(1))  # type: ignore[union-attr]
            assert stop >= drain + 30
        text = text.replace("/opt/openclaw-voice", ROOT)
        path = tmp_path / name  # type: ignore[operator]
        path.write_text(text)
        paths.append(str(path))
    result = subprocess.run([analyze, "verify", "--man=no", *paths], capture_output=True, text=True)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if line.strip() and "openclaw" in line]
    assert not problems, problems


def _known_metric_names() -> set[str]:
    from agent.app.config import ServerConfig
    from agent.regions.selector import HealthPolicy, RegionSelector, RegionSpec, SelectionPolicy
    from agent.regions.web import register_region_metrics
    from agent.app.server import AgentServer
    from agent.app.supervisor import Supervisor, SupervisorSettings, plan_workers

    server = AgentServer(ServerConfig(), Clock())
    selector = RegionSelector([RegionSpec("local", ("a:1",), ("a:1",))], health=HealthPolicy(),
                              selection=SelectionPolicy())
    register_region_metrics(server.metrics.registry, selector, lambda: 0.0)
    plans = plan_workers(1, host="127.0.0.1", sip_port=5060, worker_port=None, metrics_port=9464, rtp_port=4000,
                         rtp_port_range=200, call_records="")
    sup = Supervisor(SupervisorSettings(workers=plans, worker_argv=[], capacity=4, public_host="", public_port=5060,
                                        metrics_host="", metrics_port=9464, run_dir=""), Clock())
    names = {"openclaw_front_rejected_total", "openclaw_front_dispatched_total", "up",
             "openclaw_region_failovers_total"}
    for registry in (server.metrics.registry, sup.registry):
        for family in registry.collect():
            names.update(s.name for s in family.samples)
            names.add(family.name)
            if family.type == "histogram":  # labelled histograms have no samples until observed
                names.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
            if family.type == "counter":
                names.add(family.name + "_total")
    return names


def test_grafana_dashboard_queries_only_metrics_that_exist() -> None:
    """Every metric a dashboard panel queries is exported by a worker, the supervisor or the front."""
    dash = json.load(open(os.path.join(OPS, "grafana", "openclaw-voice.json")))
    known = _known_metric_names()
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    used = set()
    for expr in exprs:
        for name in re.findall(r"\b(openclaw_[a-z_]+)\b", expr):
            used.add(name)
    missing = sorted(n for n in used if n not in known)
    assert not missing, missing
    for needed in ("openclaw_turn_latency_seconds_bucket", "openclaw_front_rejected_total",
                   "openclaw_worker_restarts_total", "openclaw_region_failovers_total", "openclaw_worker_up"):
        assert needed in used
    rules = open(os.path.join(OPS, "prometheus", "alert_rules.yml")).read() + \
        open(os.path.join(OPS, "prometheus", "recording_rules.yml")).read()
    rule_names = set(re.findall(r"\b(openclaw_[a-z_]+)\b", rules)) - {n for n in re.findall(
        r"record: \S*?(openclaw_[a-z_]+)", rules)}
    missing_in_rules = sorted(n for n in rule_names if n not in known and not n.endswith("_up"))
    assert not missing_in_rules, missing_in_rules

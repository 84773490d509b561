"""The federation files (ops/prometheus/federation/): promtool accepts the configs and rules, the
promtool tests pass and cover every rule, ops/lab/prometheus.py renders configs that agree with the
shipped ones, and the global dashboard queries only series that exist."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FED = os.path.join(ROOT, "ops", "prometheus", "federation")
RULE_FILES = ("region_rules.yml", "global_rules.yml", "global_alerts.yml")
TEST_FILES = ("region_tests.yml", "global_tests.yml")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (ops/bootstrap.sh installs it)")
    return path


def _lab() -> ModuleType:
    name = "openclaw_ops_lab_prometheus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "ops", "lab", "prometheus.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _load(name: str) -> Any:
    with open(os.path.join(FED, name)) as f:
        return yaml.safe_load(f)


def _rules(name: str) -> list[dict[str, Any]]:
    return [rule for group in _load(name)["groups"] for rule in group["rules"]]


def test_federation_configs_and_rules_pass_promtool_check() -> None:
    """promtool check config accepts the region and global configs with their rule files; check rules
    accepts the three rule files."""
    promtool = _tool("promtool")
    for config, n_files in (("region.yml", 3), ("global.yml", 2)):
        result = subprocess.run([promtool, "check", "config", config], cwd=FED, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{n_files} rule files found" in result.stdout
    result = subprocess.run([promtool, "check", "rules", *RULE_FILES], cwd=FED, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_federation_rules_pass_their_promtool_tests() -> None:
    """promtool test rules: region capacity/readiness/latency/speech-region series, and the global
    alerts firing on their condition and not otherwise (region down three ways, latency per
    region, version skew past the rollout window but not within it nor with every region on both)."""
    promtool = _tool("promtool")
    result = subprocess.run([promtool, "test", "rules", *TEST_FILES], cwd=FED, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(TEST_FILES), result.stdout


def test_every_federation_rule_is_tested_firing_and_not_firing() -> None:
    """Each recorded series is the expr of a promql_expr_test; each alert has a case where it fires
    and one where it does not."""
    exprs: set[str] = set()
    alerts: dict[str, set[bool]] = {}
    for name in TEST_FILES:
        for test in _load(name)["tests"]:
            exprs.update(t["expr"] for t in test.get("promql_expr_test", []))
            for case in test.get("alert_rule_test", []):
                alerts.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    records = [r["record"] for name in RULE_FILES for r in _rules(name) if "record" in r]
    assert len(records) >= 30
    assert sorted(r for r in records if r not in exprs) == []
    names = {r["alert"] for name in RULE_FILES for r in _rules(name) if "alert" in r}
    assert names == {"OpenClawRegionDown", "OpenClawRegionTurnLatencyHigh", "OpenClawModelVersionSkew"}
    for alert in names:
        assert alerts.get(alert) == {True, False}, alert
    causes = {r["labels"]["cause"] for r in _rules("global_alerts.yml") if r.get("alert") == "OpenClawRegionDown"}
    assert causes == {"prometheus_unreachable", "no_ready_node", "no_region_series"}


def test_rollout_window_is_one_documented_constant() -> None:
    """The skew alert waits exactly ROLLOUT_WINDOW, and the docs state the same window."""
    window = _lab().ROLLOUT_WINDOW
    skew = [r for r in _rules("global_alerts.yml") if r.get("alert") == "OpenClawModelVersionSkew"]
    assert [r["for"] for r in skew] == [window]
    assert f"({window})" in skew[0]["annotations"]["summary"]
    docs = open(os.path.join(ROOT, "docs", "regions.md")).read()
    assert f"rollout window is {window}" in docs


def test_lab_configs_agree_with_the_shipped_ones_and_pass_promtool(tmp_path: Any) -> None:
    """region_config/global_config render what region.yml/global.yml ship (jobs, relabelling, match[],
    honor_labels, the region label) with the lab's names, addresses and interval; promtool accepts them."""
    promtool = _tool("promtool")
    lab = _lab()
    region = yaml.safe_load(lab.region_config("eu-west", ["10.1.0.11:9464", "10.1.0.12:9464"], scrape_interval_s=1))
    shipped = _load("region.yml")
    assert region["global"] == {"scrape_interval": "1000ms", "scrape_timeout": "1000ms",
                                "evaluation_interval": "1000ms", "external_labels": {"region": "eu-west"}}
    assert [os.path.basename(p) for p in region["rule_files"]] == [os.path.basename(p) for p in shipped["rule_files"]]
    assert all(os.path.isfile(p) for p in region["rule_files"])
    (ours,), (theirs,) = region["scrape_configs"], shipped["scrape_configs"]
    assert ours == theirs
    glob = yaml.safe_load(lab.global_config({"eu-west": "10.1.0.2:9090", "us-east": "10.2.0.2:9090"},
                                            scrape_interval_s=0.5))
    shipped = _load("global.yml")
    assert glob["global"]["evaluation_interval"] == "500ms"
    assert [os.path.basename(p) for p in glob["rule_files"]] == shipped["rule_files"]
    (ours,), (theirs,) = glob["scrape_configs"], shipped["scrape_configs"]
    assert {k: v for k, v in ours.items() if k != "static_configs"} == \
        {k: v for k, v in theirs.items() if k != "static_configs"}
    assert ours["static_configs"] == [{"targets": ["10.1.0.2:9090"], "labels": {"region": "eu-west"}},
                                      {"targets": ["10.2.0.2:9090"], "labels": {"region": "us-east"}}]
    for name, text in (("r.yml", lab.region_config("eu-west", ["127.0.0.1:9464"])),
                       ("g.yml", lab.global_config({"eu-west": "127.0.0.1:9090"}))):
        (tmp_path / name).write_text(text)
        result = subprocess.run([promtool, "check", "config", str(tmp_path / name)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_lab_rejects_bad_names_addresses_and_intervals_with_the_reason() -> None:
    """Bad input is a ValueError naming what is wrong, before any file or process exists."""
    lab = _lab()
    with pytest.raises(ValueError, match=r"region name 'EU West'"):
        lab.region_config("EU West", ["127.0.0.1:9464"])
    with pytest.raises(ValueError, match=r"region eu: target '127.0.0.1' is not host:port"):
        lab.region_config("eu", ["127.0.0.1"])
    with pytest.raises(ValueError, match=r"region eu: targets must be a non-empty list"):
        lab.region_config("eu", "127.0.0.1:9464")
    with pytest.raises(ValueError, match=r"scrape interval must be positive"):
        lab.region_config("eu", ["127.0.0.1:9464"], scrape_interval_s=0)
    with pytest.raises(ValueError, match=r"region us: Prometheus address 'prom-us' is not host:port"):
        lab.global_config({"eu": "127.0.0.1:9090", "us": "prom-us"})
    with pytest.raises(ValueError, match=r"at least one region"):
        lab.global_config({})
    with pytest.raises(ValueError, match=r"listen address ':9090' is not host:port"):
        lab.command("p.yml", ":9090", "/tmp/d")


def test_lab_command_line_runs_prometheus_on_the_given_address_and_data_dir() -> None:
    """The command names the config, the listen address, the data dir and a short retention."""
    argv = _lab().command("/run/r.yml", "10.1.0.2:9090", "/run/r-data", retention="1h")
    assert argv[0] == "prometheus"
    assert {"--config.file=/run/r.yml", "--web.listen-address=10.1.0.2:9090", "--storage.tsdb.path=/run/r-data",
            "--storage.tsdb.retention.time=1h"} <= set(argv)


def test_global_dashboard_has_a_row_per_region_querying_only_recorded_series() -> None:
    """ops/grafana/openclaw-voice-global.json loads; a `region` variable drives a repeated row whose
    panels all filter on it and show calls, latency against the target, free capacity, speech regions
    up and RTT, failovers and model versions; every series a panel queries is recorded by the
    federation rules (the global Prometheus holds nothing else) or is up/ALERTS."""
    import json
    import re

    dash = json.load(open(os.path.join(ROOT, "ops", "grafana", "openclaw-voice-global.json")))
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["region"]["query"] == "label_values(region:openclaw_ready:bool, region)"
    assert variables["region"]["multi"] and variables["region"]["includeAll"]
    panels = dash["panels"]
    rows = [i for i, p in enumerate(panels) if p["type"] == "row"]
    repeated = [i for i in rows if panels[i].get("repeat") == "region"]
    assert len(repeated) == 1
    start = repeated[0]
    end = next((i for i in rows if i > start), len(panels))
    region_panels = panels[start + 1:end]
    region_exprs = [t["expr"] for p in region_panels for t in p["targets"]]
    assert region_exprs and all('region=~"$region"' in e for e in region_exprs)
    for needed in ("region:openclaw_calls_active:sum", "region:openclaw_turn_latency_seconds:p95_5m",
                   "region:openclaw_turn_latency_seconds:p50_5m", "region:openclaw_call_slots_free:sum",
                   "region:openclaw_region_up:avg", "region:openclaw_region_rtt_seconds:avg",
                   "region:openclaw_region_failovers:increase15m", "region:openclaw_speech_model_version_info:max"):
        assert any(e.startswith(needed + "{") for e in region_exprs), needed
    latency = next(p for p in region_panels if "p95_5m" in json.dumps(p["targets"]))
    steps = latency["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 0.15]
    recorded = {r["record"] for name in RULE_FILES for r in _rules(name) if "record" in r}
    used: set[str] = set()
    for expr in (t["expr"] for p in panels for t in p.get("targets", [])):
        names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\{|\s|$|\))", expr)) - {"by", "on", "sum"}
        used |= names
    assert sorted(n for n in used if n not in recorded | {"ALERTS"}) == []
    assert len(used) >= 20

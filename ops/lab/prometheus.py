"""Region and global Prometheus servers for a multi-region deployment: their configs, how to run one,
and how to wait for it and query it.

The configs rendered here are the shipped ones (ops/prometheus/federation/region.yml and
global.yml) with the lab's names, addresses and a short scrape interval; the rules are the shipped
files, referenced by absolute path. Nothing here creates namespaces or starts processes: a caller
runs :func:`command` where it wants (e.g. inside a region's network namespace) and then uses
:func:`wait_ready` and :func:`query`.

HTTP is plain urllib: these helpers run in blocking scripts and tests, outside any reactor.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

#: ops/prometheus: node rules here, federation rules in federation/
DEFAULT_RULES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "prometheus")
#: job names the federation rules and alerts refer to
NODE_JOB = "openclaw-voice"
FEDERATE_JOB = "openclaw-federate"
#: what the global Prometheus pulls from each region's /federate
FEDERATE_MATCH = '{__name__=~"region:openclaw_.+"}'
#: the rollout window: how long speech regions may serve different versions of a model before
#: OpenClawModelVersionSkew fires (the `for:` of that alert in federation/global_alerts.yml)
ROLLOUT_WINDOW = "30m"

_REGION = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_TARGET = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$")


class PrometheusError(RuntimeError):
    """A Prometheus server did not become ready, or answered a query with an error."""


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector: its labels (``__name__`` included when present) and value."""

    labels: dict[str, str]
    value: float


def _duration(seconds: float) -> str:
    if seconds <= 0:
        raise ValueError(f"scrape interval must be positive, got {seconds!r} s")
    return f"{max(1, round(seconds * 1000))}ms"


def _check_region(name: str) -> None:
    if not isinstance(name, str) or not _REGION.match(name):
        raise ValueError(f"region name {name!r}: expected 1-63 characters of a-z, 0-9, '_' or '-'")


def _check_target(target: str, what: str) -> None:
    if not isinstance(target, str) or not _TARGET.match(target):
        raise ValueError(f"{what} {target!r} is not host:port")


def _global_section(scrape_interval_s: float, external_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    interval = _duration(scrape_interval_s)
    section: dict[str, Any] = {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval}
    if external_labels:
        section["external_labels"] = dict(external_labels)
    return section


def region_config(
    region: str, targets: Sequence[str], rules_dir: str = DEFAULT_RULES_DIR, scrape_interval_s: float = 1.0
) -> str:
    """A region Prometheus config (YAML text): scrapes ``targets`` (the region's nodes' metrics
    ``host:port``, e.g. the supervisor's 9464), labels everything it federates with ``region``,
    evaluates the node rules and the region rules found under ``rules_dir``, every
    ``scrape_interval_s`` (also the scrape timeout and the rule evaluation interval).

    Raises ``ValueError`` naming the bad region name, target or interval.
    """
    _check_region(region)
    if isinstance(targets, str) or not targets:
        raise ValueError(f"region {region}: targets must be a non-empty list of host:port")
    for target in targets:
        _check_target(target, f"region {region}: target")
    rules = os.path.abspath(rules_dir)
    config = {
        "global": _global_section(scrape_interval_s, {"region": region}),
        "rule_files": [
            os.path.join(rules, "recording_rules.yml"),
            os.path.join(rules, "alert_rules.yml"),
            os.path.join(rules, "federation", "region_rules.yml"),
        ],
        "scrape_configs": [
            {
                "job_name": NODE_JOB,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": list(targets)}],
                "metric_relabel_configs": [
                    {"source_labels": ["region"], "regex": "(.+)", "target_label": "speech_region"},
                    {"action": "labeldrop", "regex": "region"},
                ],
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def global_config(
    regions: Mapping[str, str], rules_dir: str = DEFAULT_RULES_DIR, scrape_interval_s: float = 1.0
) -> str:
    """The global Prometheus config (YAML text): ``regions`` maps each region's name to its region
    Prometheus ``host:port``; each is scraped on ``/federate`` for the region series (labels honoured),
    with the global rules and alerts under ``rules_dir``/federation.

    Raises ``ValueError`` naming the bad region name or address.
    """
    if not regions:
        raise ValueError("global Prometheus: at least one region is needed")
    static = []
    for name, address in regions.items():
        _check_region(name)
        _check_target(address, f"region {name}: Prometheus address")
        static.append({"targets": [address], "labels": {"region": name}})
    rules = os.path.join(os.path.abspath(rules_dir), "federation")
    config = {
        "global": _global_section(scrape_interval_s),
        "rule_files": [os.path.join(rules, "global_rules.yml"), os.path.join(rules, "global_alerts.yml")],
        "scrape_configs": [
            {
                "job_name": FEDERATE_JOB,
                "metrics_path": "/federate",
                "honor_labels": True,
                "params": {"match[]": [FEDERATE_MATCH]},
                "static_configs": static,
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def command(
    config_path: str,
    listen: str,
    data_dir: str,
    *,
    prometheus_bin: str = "prometheus",
    retention: str = "2h",
    log_level: str = "warn",
) -> list[str]:
    """The ``prometheus`` command line for a config: listening on ``listen`` (``host:port``), its
    TSDB in ``data_dir`` kept ``retention`` (short: a lab's data), no WAL compression (faster start)."""
    _check_target(listen, "listen address")
    return [
        prometheus_bin,
        f"--config.file={config_path}",
        f"--web.listen-address={listen}",
        f"--storage.tsdb.path={data_dir}",
        f"--storage.tsdb.retention.time={retention}",
        "--no-storage.tsdb.wal-compression",
        f"--log.level={log_level}",
    ]


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_ready(
    address: str, timeout_s: float = 30.0, proc: subprocess.Popen[Any] | None = None, interval_s: float = 0.1
) -> float:
    """Poll ``http://address/-/ready`` until it answers 200; return the seconds waited.

    Raises :class:`PrometheusError` when ``proc`` (the server, if given) exits first or the time runs out.
    """
    start = time.monotonic()
    last = "no answer"
    while True:
        if proc is not None and proc.poll() is not None:
            raise PrometheusError(f"prometheus on {address} exited with {proc.returncode} before it was ready")
        try:
            status, body = _get(f"http://{address}/-/ready", timeout_s=1.0)
            if status == 200:
                return time.monotonic() - start
            last = f"HTTP {status}: {body[:200].decode('utf-8', 'replace').strip()}"
        except OSError as e:
            last = str(e)
        if time.monotonic() - start >= timeout_s:
            raise PrometheusError(f"prometheus on {address} not ready after {timeout_s} s ({last})")
        time.sleep(interval_s)


def query(address: str, promql: str, timeout_s: float = 5.0) -> list[Sample]:
    """Evaluate ``promql`` now on the server at ``address`` (``/api/v1/query``); an instant vector
    (or a scalar, as one sample without labels).

    Raises :class:`PrometheusError` with Prometheus's own error text on a bad query.
    """
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    status, body = _get(url, timeout_s)
    try:
        doc = json.loads(body)
    except ValueError:
        raise PrometheusError(f"query {promql!r} on {address}: HTTP {status}, not JSON") from None
    if doc.get("status") != "success":
        raise PrometheusError(f"query {promql!r} on {address}: {doc.get('errorType')}: {doc.get('error')}")
    data = doc["data"]
    if data["resultType"] == "vector":
        return [Sample(dict(r["metric"]), float(r["value"][1])) for r in data["result"]]
    if data["resultType"] == "scalar":
        return [Sample({}, float(data["result"][1]))]
    raise PrometheusError(f"query {promql!r} on {address}: expected an instant vector, got {data['resultType']}")

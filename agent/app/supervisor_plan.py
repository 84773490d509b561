"""Pure pieces of the node supervisor: worker ports and files, restart delays, Kamailio's
dispatcher list and kamcmd output, and the merge of several processes' /metrics."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

#: calls one worker can hold (pjsua2-python is compiled with PJSUA_MAX_CALLS = 4)
WORKER_MAX_CALLS = 4
#: RTP ports one worker needs at least: RTP + RTCP per call, and room to skip busy ones
MIN_RTP_PORTS_PER_WORKER = 12


@dataclass(frozen=True)
class WorkerPlan:
    """Where worker *index* listens and writes."""

    index: int
    host: str
    sip_port: int
    metrics_port: int
    rtp_port: int
    rtp_port_range: int
    call_records: str

    @property
    def address(self) -> str:
        """host:port the balancer sends to (loopback when the worker binds every interface)."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"{host}:{self.sip_port}"

    @property
    def sip_uri(self) -> str:
        return f"sip:{self.address}"


def plan_workers(count: int, *, host: str, sip_port: int, worker_port: int | None, metrics_port: int,
                 rtp_port: int, rtp_port_range: int, call_records: str) -> list[WorkerPlan]:
    """Ports and files of *count* workers; raises ValueError naming the conflict.

    Worker i listens for SIP on ``worker_port + i`` (default ``sip_port + 100``),
    serves metrics on ``metrics_port + 1 + i`` (the supervisor has
    ``metrics_port``), and gets an equal slice of the configured RTP range.
    A ``.jsonl`` call-record file becomes one file per worker (``NAME.wI.jsonl``);
    a directory stays shared and each worker writes its own per-day files.
    """
    if count < 1:
        raise ValueError(f"--workers must be at least 1, got {count}")
    base = worker_port if worker_port is not None else sip_port + 100
    per_worker = rtp_port_range // count
    if per_worker < MIN_RTP_PORTS_PER_WORKER:
        raise ValueError(f"sip.rtp_port_range {rtp_port_range} gives each of {count} workers {per_worker} RTP "
                         f"ports; each needs at least {MIN_RTP_PORTS_PER_WORKER}")
    sip_ports = range(base, base + count)
    metrics_ports = range(metrics_port + 1, metrics_port + 1 + count)
    if sip_ports[-1] > 65535 or metrics_ports[-1] > 65535 or rtp_port + rtp_port_range > 65536:
        raise ValueError(f"worker ports run past 65535 (SIP {base}+{count}, metrics {metrics_port + 1}+{count})")
    if sip_port in sip_ports:
        raise ValueError(f"worker SIP ports {base}-{sip_ports[-1]} include the public SIP port {sip_port}; "
                         f"choose another --worker-port")
    rtp = range(rtp_port, rtp_port + rtp_port_range)
    clash = [p for p in sip_ports if p in rtp]
    if clash:
        raise ValueError(f"worker SIP port {clash[0]} lies inside the RTP range {rtp_port}-{rtp[-1]}")
    plans = []
    for i in range(count):
        records = call_records
        if records.endswith(".jsonl"):
            records = f"{records[:-len('.jsonl')]}.w{i}.jsonl"
        plans.append(WorkerPlan(i, host, sip_ports[i], metrics_ports[i], rtp_port + i * per_worker, per_worker,
                                records))
    return plans


@dataclass(frozen=True)
class RestartPolicy:
    """Delay before restarting a process that exited: exponential, reset once it ran stably."""

    initial_delay_s: float = 0.5
    factor: float = 2.0
    max_delay_s: float = 30.0
    #: a process that ran this long before exiting starts again from the initial delay
    stable_after_s: float = 60.0

    def delay_s(self, consecutive_failures: int) -> float:
        """Delay before the restart after the *consecutive_failures*-th quick failure (1-based)."""
        n = max(1, consecutive_failures)
        return min(self.max_delay_s, self.initial_delay_s * self.factor ** (n - 1))


def dispatcher_list(plans: Iterable[WorkerPlan], set_id: int = 1) -> str:
    """Kamailio dispatcher list file naming every worker (``setid uri flags priority attrs``)."""
    lines = ["# OpenClaw Voice workers (written by openclaw-voice serve --workers N)",
             "# setid destination flags priority attributes"]
    for p in plans:
        lines.append(f"{set_id} {p.sip_uri} 0 0 duid=w{p.index};worker={p.index}")
    return "\n".join(lines) + "\n"


def parse_dispatcher_states(kamcmd_output: str) -> dict[str, str]:
    """{uri: flags} from ``kamcmd dispatcher.list`` (flags: AP active, IP inactive, DX disabled...)."""
    states: dict[str, str] = {}
    for m in re.finditer(r"URI:\s*(\S+)\s+FLAGS:\s*(\S+)", kamcmd_output):
        states[m.group(1)] = m.group(2)
    return states


def parse_kamailio_stats(kamcmd_output: str) -> dict[str, float]:
    """{name: value} from ``kamcmd stats.get_statistics script:`` (``script:openclaw_name = 3``)."""
    out: dict[str, float] = {}
    for m in re.finditer(r"script:openclaw_(\w+)\s*=\s*(\d+)", kamcmd_output):
        out[m.group(1)] = float(m.group(2))
    return out


def merge_metrics(texts: dict[str, str], label: str = "worker") -> list[Metric]:
    """Metric families of several processes' /metrics, each sample labelled ``label=<key>``.

    Families with the same name are merged into one (a scrape may hold each
    family once). A text that does not parse is skipped entirely; the caller
    counts it.
    """
    merged: dict[str, Metric] = {}
    for key, text in texts.items():
        for family in text_string_to_metric_families(text):
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                labels = dict(s.labels)
                labels[label] = key
                target.add_sample(s.name, labels, s.value, s.timestamp, s.exemplar)
    return list(merged.values())


def parse_all(texts: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Split expositions into those that parse ({key: text}) and the keys of those that do not."""
    good: dict[str, str] = {}
    bad: list[str] = []
    for key, text in texts.items():
        try:
            list(text_string_to_metric_families(text))
        except Exception:  # noqa: BLE001 -- the parser raises ValueError and others
            bad.append(key)
            continue
        good[key] = text
    return good, bad


class MetricFamilies:
    """A prometheus_client collector serving fixed metric families (the merged ones)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families

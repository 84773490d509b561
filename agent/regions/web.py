"""Visibility of region routing: the ``/regions`` JSON resource and Prometheus metrics.

Both read the :class:`agent.regions.selector.RegionSelector` at request/scrape time on the reactor
thread (twisted.web renders there; ``prometheus_client.twisted.MetricsResource`` too).

Metrics (labels are bounded: region names come from config, reasons and results are
fixed sets; nothing per call or per endpoint address, so series sum cleanly across
nodes, e.g. ``sum by (region) (openclaw_region_active_streams)``):

=============================================================  ======================================
``openclaw_region_up{region}``                                  1 when the region can take calls
``openclaw_region_rtt_seconds{region}``                         smoothed probe RTT (absent until known)
``openclaw_region_loss_ratio{region}``                          lost probes over the loss window
``openclaw_region_active_streams{region}``                      speech streams open there (this node)
``openclaw_region_capacity_streams{region}``                    configured capacity (this node)
``openclaw_region_selections_total{region,reason}``             calls placed: best/spill/sticky/sticky_lost/failover
``openclaw_region_refusals_total{reason}``                      503s: no_version/unavailable/full
``openclaw_region_failovers_total{from_region,to_region}``      mid-call moves (to_region "none": nowhere left)
``openclaw_region_selection_flips_total``                       changes of a preferred region (hysteresis check)
``openclaw_region_probe_duration_seconds{region}``              histogram of answered probes' RTT
``openclaw_region_probes_total{region,result}``                 probes: ok/not_serving/failed
``openclaw_speech_model_version_info{region,kind,version}``     1 per model version the region serves
=============================================================  ======================================

``openclaw_speech_model_version_info`` is read from ``selector.versions(region)`` at scrape time (configured
plus discovered versions), so a rollout shows in the next scrape. ``kind`` is the part of the version
before ``:`` (``asr:conformer-en-US-2.1`` → ``asr``; ``unknown`` without one). At most
:data:`MAX_VERSIONS_PER_REGION` versions per region are exported (sorted; the rest are counted in
``openclaw_speech_model_versions_dropped``), so the label set stays bounded whatever discovery reports.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from twisted.web.resource import Resource

from agent.regions.probe import ProbeOutcome
from agent.secrets import redact
from agent.regions.selector import NO_REGION_REASONS, SELECTION_REASONS, RegionSelector, RegionView

_PROBE_BUCKETS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5)

#: versions exported per region in ``openclaw_speech_model_version_info`` (bounded label set)
MAX_VERSIONS_PER_REGION = 16


def version_kind(version: str) -> str:
    """The kind of a model version: ``asr`` for ``asr:conformer-en-US-2.1``; ``unknown`` without a ``:``."""
    kind, sep, _ = version.partition(":")
    return kind if sep and kind else "unknown"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 2)


def regions_document(
    selector: RegionSelector,
    now: float,
    *,
    calls_on: Callable[[str], Iterable[str]] | None = None,
    wall_now: float | None = None,
) -> dict[str, Any]:
    """The ``/regions`` body: every region's health, RTT, loss, load, versions and calls."""
    wall = time.time() if wall_now is None else wall_now
    regions = []
    for v in selector.view(now):
        selections = {reason: selector.selections.get((v.name, reason), 0) for reason in SELECTION_REASONS}
        regions.append(
            {
                "name": v.name,
                "state": v.state,
                "up": v.up,
                "rtt_ms": _ms(v.rtt_s),
                "loss_ratio": round(v.loss_ratio, 4),
                "active_streams": v.active_streams,
                "capacity": v.capacity,
                "load_ratio": round(v.active_streams / v.capacity, 4),
                "versions": sorted(v.versions),
                "ejected_for_s": None if v.ejected_until is None else round(max(0.0, v.ejected_until - now), 3),
                "ejected_until": None
                if v.ejected_until is None
                else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall + max(0.0, v.ejected_until - now))),
                "dialogue_endpoint": v.dialogue_endpoint,
                "calls": sorted(calls_on(v.name)) if calls_on is not None else [],
                "selections": selections,
                "endpoints": [
                    {
                        "address": e.address,
                        "roles": list(e.kinds),
                        "state": e.state,
                        "rtt_ms": _ms(e.rtt_s),
                        "loss_ratio": round(e.loss_ratio, 4),
                        "consecutive_failures": e.consecutive_failures,
                        "ejections": e.ejections,
                        "ejected_for_s": None if e.ejected_until is None else round(max(0.0, e.ejected_until - now), 3),
                        "last_failure": e.last_failure,
                    }
                    for e in v.endpoints
                ],
            }
        )
    return {
        "regions": regions,
        "failovers": [
            {"from": src, "to": dst, "count": n} for (src, dst), n in sorted(selector.failovers.items())
        ],
        "refusals": {reason: selector.refusals.get(reason, 0) for reason in NO_REGION_REASONS},
        "selection_flips": selector.flips,
    }


class RegionsResource(Resource):
    """``GET /regions``: :func:`regions_document` as JSON.

    ``clock`` gives the selector's time (``reactor.seconds``); ``calls_on(region)`` the
    call ids currently in a region (e.g. from the server's sessions).
    """

    isLeaf = True

    def __init__(
        self,
        selector: RegionSelector,
        clock: Callable[[], float],
        calls_on: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        super().__init__()
        self._selector = selector
        self._clock = clock
        self._calls_on = calls_on

    def render_GET(self, request: Any) -> bytes:  # noqa: N802 (twisted.web API)
        body = regions_document(self._selector, self._clock(), calls_on=self._calls_on)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return redact(json.dumps(body, indent=1)).encode()


class _RegionCollector:
    def __init__(self, selector: RegionSelector, clock: Callable[[], float]) -> None:
        self._selector = selector
        self._clock = clock

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._selector
        views = s.view(self._clock())
        up = GaugeMetricFamily("openclaw_region_up", "1 when the region can take calls", labels=["region"])
        rtt = GaugeMetricFamily("openclaw_region_rtt_seconds", "Smoothed probe round-trip time", labels=["region"])
        loss = GaugeMetricFamily("openclaw_region_loss_ratio", "Lost probes over the loss window", labels=["region"])
        active = GaugeMetricFamily(
            "openclaw_region_active_streams", "Speech streams this node has open in the region", labels=["region"]
        )
        capacity = GaugeMetricFamily(
            "openclaw_region_capacity_streams", "Speech streams this node may open in the region", labels=["region"]
        )
        for v in views:
            up.add_metric([v.name], 1.0 if v.up else 0.0)
            if v.rtt_s is not None:
                rtt.add_metric([v.name], v.rtt_s)
            loss.add_metric([v.name], v.loss_ratio)
            active.add_metric([v.name], v.active_streams)
            capacity.add_metric([v.name], v.capacity)
        yield from (up, rtt, loss, active, capacity)
        selections = CounterMetricFamily(
            "openclaw_region_selections", "Calls placed in a region, by reason", labels=["region", "reason"]
        )
        for v in views:
            for reason in SELECTION_REASONS:
                selections.add_metric([v.name, reason], s.selections.get((v.name, reason), 0))
        yield selections
        refusals = CounterMetricFamily("openclaw_region_refusals", "Calls refused for want of a region", labels=["reason"])
        for reason in NO_REGION_REASONS:
            refusals.add_metric([reason], s.refusals.get(reason, 0))
        yield refusals
        failovers = CounterMetricFamily(
            "openclaw_region_failovers", "Mid-call moves of a speech stream", labels=["from_region", "to_region"]
        )
        for (src, dst), n in sorted(s.failovers.items()):
            failovers.add_metric([src, dst], n)
        yield failovers
        flips = CounterMetricFamily("openclaw_region_selection_flips", "Changes of a preferred region")
        flips.add_metric([], s.flips)
        yield flips
        yield from self._versions(views)

    def _versions(self, views: list[RegionView]) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "openclaw_speech_model_version_info", "1 for every model version a speech region serves (as this node sees it)",
            labels=["region", "kind", "version"],
        )
        dropped = GaugeMetricFamily(
            "openclaw_speech_model_versions_dropped",
            f"Versions a region serves beyond the {MAX_VERSIONS_PER_REGION} exported in openclaw_speech_model_version_info",
            labels=["region"],
        )
        for v in views:
            versions = sorted(self._selector.versions(v.name))
            for version in versions[:MAX_VERSIONS_PER_REGION]:
                info.add_metric([v.name, version_kind(version), version], 1.0)
            dropped.add_metric([v.name], max(0, len(versions) - MAX_VERSIONS_PER_REGION))
        yield info
        yield dropped


class RegionMetrics:
    """Region metrics on ``registry``; :meth:`observe_probe` is the prober's ``on_probe``."""

    def __init__(self, registry: CollectorRegistry, selector: RegionSelector, clock: Callable[[], float]) -> None:
        self._selector = selector
        registry.register(_RegionCollector(selector, clock))  # type: ignore[arg-type]
        self.probe_duration = Histogram(
            "openclaw_region_probe_duration_seconds", "Round-trip time of answered health probes",
            ["region"], buckets=_PROBE_BUCKETS, registry=registry,
        )
        self.probes = Counter("openclaw_region_probes_total", "Health probes by result", ["region", "result"],
                              registry=registry)

    def observe_probe(self, address: str, roles: tuple[str, ...], outcome: ProbeOutcome) -> None:
        result = "failed" if not outcome.ok else ("ok" if outcome.serving else "not_serving")
        for region in self._selector.region_names:
            spec = self._selector.spec(region)
            if address in spec.speech_endpoints or address == spec.dialogue_endpoint:
                self.probes.labels(region, result).inc()
                if outcome.ok:
                    self.probe_duration.labels(region).observe(outcome.rtt_s)


def register_region_metrics(
    registry: CollectorRegistry, selector: RegionSelector, clock: Callable[[], float]
) -> RegionMetrics:
    """Register every region metric on ``registry``; pass the result's ``observe_probe``
    to :class:`agent.regions.probe.RegionProber` as ``on_probe``."""
    return RegionMetrics(registry, selector, clock)

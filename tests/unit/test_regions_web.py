"""/regions JSON and the region Prometheus metrics (agent/regions/web.py)."""
from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest
from twisted.web.test.requesthelper import DummyRequest

from agent.regions.probe import ProbeOutcome
from agent.regions.selector import RegionSelector, RegionSpec
from agent.regions.web import RegionsResource, register_region_metrics


def make_selector() -> RegionSelector:
    sel = RegionSelector(
        [
            RegionSpec("eu", ("eu:1",), ("eu:1",), model_versions=frozenset({"asr:2", "tts:1"}), capacity=8),
            RegionSpec("us", ("us:1",), ("us:1",), capacity=4),
        ]
    )
    sel.on_probe_response("eu:1", 0.0, 0.021)
    for t in (0.0, 0.25, 0.5):
        sel.on_probe_failure("us:1", t)
    return sel


def samples(registry: CollectorRegistry) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_regions_resource_reports_health_rtt_loss_load_versions_and_calls() -> None:
    """GET /regions: one entry per region with what an operator needs, calls included."""
    sel = make_selector()
    sel.acquire("eu")
    sel.select(None, None, now=0.6)
    sel.record_failover("us", "eu")
    resource = RegionsResource(sel, clock=lambda: 0.6, calls_on=lambda r: ["call-2", "call-1"] if r == "eu" else [])
    request = DummyRequest([b""])
    body = json.loads(resource.render_GET(request))
    assert request.responseHeaders.getRawHeaders(b"content-type") == [b"application/json"]
    eu, us = body["regions"]
    assert (eu["name"], eu["state"], eu["up"], eu["rtt_ms"]) == ("eu", "up", True, 21.0)
    assert eu["versions"] == ["asr:2", "tts:1"]
    assert (eu["active_streams"], eu["capacity"], eu["load_ratio"]) == (1, 8, 0.125)
    assert eu["calls"] == ["call-1", "call-2"]
    assert eu["selections"]["best"] == 1
    assert (us["state"], us["up"], us["loss_ratio"]) == ("down", False, 1.0)
    assert us["ejected_for_s"] == 0.9 and us["ejected_until"].endswith("Z")
    assert us["endpoints"][0]["consecutive_failures"] == 3
    assert body["failovers"] == [{"from": "us", "to": "eu", "count": 1}]


def test_metrics_carry_bounded_labels_and_current_values() -> None:
    """Gauges reflect the selector at scrape time; counters exist for every reason."""
    sel = make_selector()
    registry = CollectorRegistry()
    metrics = register_region_metrics(registry, sel, clock=lambda: 0.6)
    sel.acquire("eu")
    sel.select(None, None, now=0.6)
    sel.select(None, None, ["v9"], now=0.6)
    sel.record_failover("us", "eu")
    metrics.observe_probe("eu:1", ("asr", "tts"), ProbeOutcome(True, True, 0.021))
    metrics.observe_probe("us:1", ("asr", "tts"), ProbeOutcome(False, False, 0.5, "DEADLINE_EXCEEDED"))
    s = samples(registry)
    assert s['openclaw_region_up{region="eu"}'] == 1.0
    assert s['openclaw_region_up{region="us"}'] == 0.0
    assert s['openclaw_region_rtt_seconds{region="eu"}'] == 0.021
    assert s['openclaw_region_loss_ratio{region="us"}'] == 1.0
    assert s['openclaw_region_active_streams{region="eu"}'] == 1.0
    assert s['openclaw_region_capacity_streams{region="us"}'] == 4.0
    assert s['openclaw_region_selections_total{reason="best",region="eu"}'] == 1.0
    assert s['openclaw_region_selections_total{reason="failover",region="us"}'] == 0.0
    assert s['openclaw_region_refusals_total{reason="no_version"}'] == 1.0
    assert s['openclaw_region_failovers_total{from_region="us",to_region="eu"}'] == 1.0
    assert s['openclaw_region_probes_total{region="us",result="failed"}'] == 1.0
    assert s['openclaw_region_probe_duration_seconds_count{region="eu"}'] == 1.0
    assert not any("eu:1" in k or "call" in k for k in s)


def test_model_version_info_follows_the_selector_at_scrape_time() -> None:
    """openclaw_speech_model_version_info has one sample per (region, version), kind from the prefix;
    a rollout (set_versions) and version discovery show in the next scrape, a removed version goes."""
    sel = make_selector()
    registry = CollectorRegistry()
    register_region_metrics(registry, sel, clock=lambda: 0.6)

    def info() -> dict[str, float]:
        return {k: v for k, v in samples(registry).items() if k.startswith("openclaw_speech_model_version_info")}

    assert info() == {
        'openclaw_speech_model_version_info{kind="asr",region="eu",version="asr:2"}': 1.0,
        'openclaw_speech_model_version_info{kind="tts",region="eu",version="tts:1"}': 1.0,
    }
    sel.set_versions("eu", ["asr:conformer-en-US-2.2", "tts:1"])
    sel.set_versions("us", ["asr:conformer-en-US-2.1", "v9"])
    assert info() == {
        'openclaw_speech_model_version_info{kind="asr",region="eu",version="asr:conformer-en-US-2.2"}': 1.0,
        'openclaw_speech_model_version_info{kind="tts",region="eu",version="tts:1"}': 1.0,
        'openclaw_speech_model_version_info{kind="asr",region="us",version="asr:conformer-en-US-2.1"}': 1.0,
        'openclaw_speech_model_version_info{kind="unknown",region="us",version="v9"}': 1.0,
    }
    sel.set_discovered_versions("us:1", "tts", ["tts:fastpitch-1.0"])
    assert info()['openclaw_speech_model_version_info{kind="tts",region="us",version="tts:fastpitch-1.0"}'] == 1.0
    assert samples(registry)['openclaw_speech_model_versions_dropped{region="us"}'] == 0.0


def test_model_version_info_is_bounded_per_region() -> None:
    """A region reporting more versions than MAX_VERSIONS_PER_REGION exports only that many (sorted)
    and counts the rest, so discovery cannot grow the label set without bound."""
    from agent.regions.web import MAX_VERSIONS_PER_REGION

    sel = make_selector()
    registry = CollectorRegistry()
    register_region_metrics(registry, sel, clock=lambda: 0.6)
    sel.set_versions("us", [f"asr:m-{i:03d}" for i in range(MAX_VERSIONS_PER_REGION + 5)])
    s = samples(registry)
    us = sorted(k for k in s if k.startswith("openclaw_speech_model_version_info") and 'region="us"' in k)
    assert len(us) == MAX_VERSIONS_PER_REGION
    assert 'version="asr:m-000"' in us[0]
    assert not any('version="asr:m-020"' in k for k in us)
    assert s['openclaw_speech_model_versions_dropped{region="us"}'] == 5.0
    assert s['openclaw_speech_model_versions_dropped{region="eu"}'] == 0.0

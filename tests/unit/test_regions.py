"""Region routing cores: endpoint health, selection, load, versions (agent/regions/selector.py).

Pure: probe outcomes and times go in by hand, decisions come out. The scenario rows of
the issue's target table (with the real prober on a fake clock) are in
test_regions_scenarios.py.
"""
from __future__ import annotations

import pytest

from agent.regions.selector import (
    EndpointHealth,
    EndpointState,
    HealthPolicy,
    NoRegion,
    RegionSelector,
    RegionSpec,
    Selection,
    SelectionPolicy,
)


def spec(name: str, *, versions: tuple[str, ...] = ("v1",), capacity: int = 10, **kw: object) -> RegionSpec:
    address = f"{name}.example:50051"
    return RegionSpec(name, (address,), (address,), model_versions=frozenset(versions), capacity=capacity, **kw)  # type: ignore[arg-type]


def feed(selector: RegionSelector, name: str, rtt_ms: float, now: float, n: int = 1) -> None:
    for i in range(n):
        selector.on_probe_response(f"{name}.example:50051", now + i * 0.25, rtt_ms / 1000.0)


def pick(selector: RegionSelector, now: float, **kw: object) -> Selection:
    result = selector.select(kw.pop("caller", None), kw.pop("ip", None), now=now, **kw)  # type: ignore[arg-type]
    assert isinstance(result, Selection), result
    return result


# -- RegionSpec ----------------------------------------------------------------------------


def test_region_spec_rejects_bad_fields_with_precise_messages() -> None:
    """Invalid names, endpoints, capacity, prefixes and networks raise ValueError naming the field."""
    with pytest.raises(ValueError, match="region name 'EU West'"):
        RegionSpec("EU West", ("a:1",), ("a:1",))
    with pytest.raises(ValueError, match="region eu: asr_endpoints entry 'nohost' is not host:port"):
        RegionSpec("eu", ("nohost",), ("a:1",))
    with pytest.raises(ValueError, match="tts_endpoints must be a non-empty list"):
        RegionSpec("eu", ("a:1",), ())
    with pytest.raises(ValueError, match="capacity must be a positive integer, got 0"):
        RegionSpec("eu", ("a:1",), ("a:1",), capacity=0)
    with pytest.raises(ValueError, match="home prefix '44x'"):
        RegionSpec("eu", ("a:1",), ("a:1",), home_prefixes=("44x",))
    with pytest.raises(ValueError, match="home network '10.0.0.0/33'"):
        RegionSpec("eu", ("a:1",), ("a:1",), home_networks=("10.0.0.0/33",))
    with pytest.raises(ValueError, match="dialogue_endpoint 'ftp://x' is not an http"):
        RegionSpec("eu", ("a:1",), ("a:1",), dialogue_endpoint="ftp://x")


def test_duplicate_region_names_are_rejected() -> None:
    """Two regions with one name would make routing ambiguous."""
    with pytest.raises(ValueError, match="region names must be unique"):
        RegionSelector([spec("eu"), spec("eu")])


# -- EndpointHealth --------------------------------------------------------------------------


def test_rtt_is_an_ewma_of_answered_probes() -> None:
    """The first answer sets the RTT; later ones move it by alpha (0.2)."""
    h = EndpointHealth("a:1")
    h.on_response(0.0, 0.100)
    h.on_response(0.25, 0.200)
    assert h.rtt_s == pytest.approx(0.120)
    assert h.state(0.25) is EndpointState.HEALTHY


def test_first_failure_makes_suspect_third_ejects_with_doubling_backoff() -> None:
    """Suspect after one lost probe, ejected after three; each new ejection lasts twice as long."""
    h = EndpointHealth("a:1", HealthPolicy(base_ejection_s=1.0, max_ejection_s=30.0))
    h.on_response(0.0, 0.02)
    h.on_failure(0.25)
    assert h.state(0.25) is EndpointState.SUSPECT
    h.on_failure(0.5)
    assert h.state(0.5) is EndpointState.SUSPECT
    h.on_failure(0.75)
    assert h.state(0.75) is EndpointState.EJECTED
    assert h.ejected_until == pytest.approx(1.75)
    # still failing after the ejection time: ejected again, for 2 s
    h.on_failure(1.8)
    assert h.ejected_until == pytest.approx(3.8)
    h.on_failure(3.9)
    assert h.ejected_until == pytest.approx(3.9 + 4.0)
    assert h.ejections == 3


def test_readmission_needs_the_ejection_time_and_consecutive_successes() -> None:
    """Answers during the ejection do not re-admit early; after it, two in a row do."""
    h = EndpointHealth("a:1", HealthPolicy(readmit_after_successes=2, base_ejection_s=1.0))
    h.on_response(0.0, 0.02)
    for t in (0.25, 0.5, 0.75):
        h.on_failure(t)
    h.on_response(1.0, 0.02)
    h.on_response(1.25, 0.02)
    assert h.state(1.5) is EndpointState.EJECTED  # 1.75 not reached
    h.on_response(1.8, 0.02)
    assert h.state(1.8) is EndpointState.HEALTHY
    assert h.ejected_until is None


def test_ejection_backoff_decays_after_a_healthy_period() -> None:
    """Ten healthy seconds after re-admission take one doubling off the next ejection."""
    h = EndpointHealth("a:1", HealthPolicy(base_ejection_s=1.0, ejection_decay_s=10.0))
    h.on_response(0.0, 0.02)
    for t in (1.0, 1.1, 1.2):
        h.on_failure(t)  # ejected until 2.2 (level 1)
    for t in (2.3, 2.4):
        h.on_response(t, 0.02)  # re-admitted at 2.4
    for t in (30.0, 30.1, 30.2):
        h.on_failure(t)
    assert h.ejected_until == pytest.approx(31.2)  # level back to 1, not 2


def test_loss_over_the_window_ejects_even_without_consecutive_failures() -> None:
    """Every other probe lost: 50 % loss over a full window ejects the endpoint."""
    h = EndpointHealth("a:1", HealthPolicy(loss_window=10, eject_loss_ratio=0.5))
    t = 0.0
    for i in range(10):
        t += 0.25
        if i % 2:
            h.on_failure(t)
        else:
            h.on_response(t, 0.02)
    assert h.loss_ratio == pytest.approx(0.5)
    assert h.state(t) is EndpointState.EJECTED


def test_not_serving_takes_effect_at_once_and_serving_restores() -> None:
    """A pushed NOT_SERVING removes a healthy endpoint immediately; SERVING brings it back."""
    h = EndpointHealth("a:1")
    h.on_response(0.0, 0.02)
    h.on_status(0.1, serving=False)
    assert h.state(0.1) is EndpointState.NOT_SERVING
    h.on_status(0.2, serving=True)
    assert h.state(0.2) is EndpointState.HEALTHY


def test_never_probed_endpoint_is_unknown_and_not_usable() -> None:
    """Before the first answer an endpoint is not routed to."""
    h = EndpointHealth("a:1")
    assert h.state(0.0) is EndpointState.UNKNOWN
    assert not h.state(0.0).usable
    sel = RegionSelector([spec("eu")])
    result = sel.select(None, None, now=0.0)
    assert isinstance(result, NoRegion) and result.reason == "unavailable"


# -- selection -------------------------------------------------------------------------------


def test_lowest_rtt_region_is_chosen() -> None:
    """Three healthy regions: the one with the lowest measured RTT wins."""
    sel = RegionSelector([spec("eu"), spec("us"), spec("ap")])
    feed(sel, "eu", 80, 0.0)
    feed(sel, "us", 20, 0.0)
    feed(sel, "ap", 150, 0.0)
    chosen = pick(sel, 0.1)
    assert (chosen.region, chosen.reason) == ("us", "best")
    assert chosen.asr_endpoint == "us.example:50051"
    assert sel.selections[("us", "best")] == 1


def test_home_hint_by_e164_prefix_and_by_source_network() -> None:
    """A caller's home region wins when its RTT is within the home bonus of the best."""
    sel = RegionSelector(
        [spec("eu", home_prefixes=("+44", "49")), spec("us", home_prefixes=("+1",), home_networks=("198.51.100.0/24",))]
    )
    feed(sel, "eu", 40, 0.0)
    feed(sel, "us", 30, 0.0)
    assert sel.home_region("+442071234567", None) == "eu"
    assert sel.home_region("00497111234", None) == "eu"
    assert sel.home_region("+33123", None) is None
    assert sel.home_region("+442071234567", "198.51.100.7") == "us"  # network first
    assert pick(sel, 0.1, caller="+442071234567").region == "eu"  # 40 - 20 < 30
    assert pick(sel, 0.1, caller="+33123").region == "us"


def test_load_weighting_moves_new_calls_to_a_less_loaded_region() -> None:
    """A nearly full region loses to one 30 ms farther once its load penalty exceeds the gap."""
    sel = RegionSelector([spec("eu", capacity=10), spec("us", capacity=10)], selection=SelectionPolicy(hysteresis_ms=5))
    feed(sel, "eu", 20, 0.0)
    feed(sel, "us", 50, 0.0)
    assert pick(sel, 0.1).region == "eu"
    for _ in range(9):
        sel.acquire("eu")
    # eu: 20 + 45 = 65 ms, us: 50 ms
    assert pick(sel, 0.1).region == "us"


def test_full_region_spills_to_the_next_and_back() -> None:
    """At capacity the preferred region is skipped (reason spill) but stays preferred."""
    sel = RegionSelector([spec("eu", capacity=2), spec("us", capacity=2)], selection=SelectionPolicy(load_penalty_ms=0))
    feed(sel, "eu", 20, 0.0)
    feed(sel, "us", 60, 0.0)
    sel.acquire("eu")
    sel.acquire("eu")
    spilled = pick(sel, 0.1)
    assert (spilled.region, spilled.reason) == ("us", "spill")
    sel.release("eu")
    assert pick(sel, 0.1).region == "eu"
    sel.acquire("eu")
    sel.acquire("us")
    sel.acquire("us")
    full = sel.select(None, None, now=0.1)
    assert isinstance(full, NoRegion) and full.reason == "full" and full.retry_after_s == 2


def test_sticky_region_is_honoured_while_usable() -> None:
    """A leg carrying X-OpenClaw-Region stays there even when another region is nearer."""
    sel = RegionSelector([spec("eu"), spec("us")])
    feed(sel, "eu", 20, 0.0)
    feed(sel, "us", 90, 0.0)
    s = pick(sel, 0.1, sticky_region="us")
    assert (s.region, s.reason) == ("us", "sticky")
    sel.on_status("us.example:50051", 0.2, serving=False)
    lost = pick(sel, 0.3, sticky_region="us")
    assert (lost.region, lost.reason) == ("eu", "sticky_lost")


def test_pinned_version_only_lands_where_it_is_served() -> None:
    """A pinned call goes to the only region serving its version, even at 3x the RTT."""
    sel = RegionSelector([spec("eu", versions=("v1",)), spec("us", versions=("v1", "v2"))])
    feed(sel, "eu", 30, 0.0)
    feed(sel, "us", 90, 0.0)
    assert pick(sel, 0.1, pinned_versions=["v2"]).region == "us"
    assert pick(sel, 0.1).region == "eu"


def test_no_region_with_the_pinned_version_refuses_with_retry_after() -> None:
    """No region serves v9: NoRegion(no_version) with the configured Retry-After, counted."""
    sel = RegionSelector([spec("eu")], selection=SelectionPolicy(retry_after_no_version_s=17))
    feed(sel, "eu", 30, 0.0)
    result = sel.select(None, None, ["v9"], now=0.1)
    assert isinstance(result, NoRegion)
    assert (result.reason, result.retry_after_s) == ("no_version", 17)
    assert "v9" in result.detail
    assert sel.refusals == {"no_version": 1}


def test_versions_change_at_runtime_without_touching_placed_calls() -> None:
    """A rollout adds v2 to eu: pinned calls go there; a call placed before keeps its Selection."""
    sel = RegionSelector([spec("eu", versions=("v1",)), spec("us", versions=("v1", "v2"))])
    feed(sel, "eu", 30, 0.0)
    feed(sel, "us", 90, 0.0)
    before = pick(sel, 0.1, pinned_versions=["v2"])
    sel.set_versions("eu", ["v1", "v2"])
    assert pick(sel, 0.2, pinned_versions=["v2"]).region == "eu"
    sel.set_versions("eu", ["v1"])
    assert pick(sel, 0.3, pinned_versions=["v2"]).region == "us"
    assert before.region == "us" and before.versions == frozenset({"v1", "v2"})


def test_discovered_versions_are_the_intersection_over_a_regions_endpoints() -> None:
    """Two ASR instances report models; a version counts only when both have it."""
    r = RegionSpec("eu", ("a:1", "b:1"), ("a:1",), model_versions=frozenset({"cfg"}))
    sel = RegionSelector([r])
    sel.set_discovered_versions("a:1", "asr", {"asr:m1", "asr:m2"})
    assert sel.versions("eu") == {"cfg", "asr:m1", "asr:m2"}
    sel.set_discovered_versions("b:1", "asr", {"asr:m2"})
    assert sel.versions("eu") == {"cfg", "asr:m2"}


def test_suspect_region_is_avoided_while_a_healthy_one_exists() -> None:
    """One missed probe on the best region sends new calls elsewhere at once."""
    sel = RegionSelector([spec("eu"), spec("us")])
    feed(sel, "eu", 20, 0.0)
    feed(sel, "us", 60, 0.0)
    assert pick(sel, 0.1).region == "eu"
    sel.on_probe_failure("eu.example:50051", 0.5)
    assert pick(sel, 0.5).region == "us"


def test_hysteresis_keeps_the_preferred_region_within_the_margin() -> None:
    """us becoming 10 ms better than eu does not flip the preference; 40 ms better does."""
    sel = RegionSelector([spec("eu"), spec("us")], health=HealthPolicy(rtt_alpha=1.0))
    feed(sel, "eu", 30, 0.0)
    feed(sel, "us", 35, 0.0)
    assert pick(sel, 0.1).region == "eu"
    feed(sel, "us", 20, 0.2)
    assert pick(sel, 0.3).region == "eu"
    assert sel.flips == 0
    feed(sel, "eu", 60, 0.4)
    assert pick(sel, 0.5).region == "us"
    assert sel.flips == 1


def test_contexts_keep_separate_preferences() -> None:
    """Callers with different home regions, or different pinned versions, are separate contexts."""
    sel = RegionSelector([spec("eu", home_prefixes=("44",)), spec("us", versions=("v1", "v2"))],
                         health=HealthPolicy(rtt_alpha=1.0))
    feed(sel, "eu", 30, 0.0)
    feed(sel, "us", 35, 0.0)
    assert pick(sel, 0.1).region == "eu"
    assert pick(sel, 0.1, pinned_versions=["v2"]).region == "us"
    assert pick(sel, 0.1, caller="+4420").region == "eu"
    assert len(sel._contexts) == 3


def test_next_best_excludes_failed_regions_and_counts_failovers() -> None:
    """Failover picks the best other region, and reports none left when all failed."""
    sel = RegionSelector([spec("eu"), spec("us"), spec("ap", versions=("v2",))])
    for name, rtt in (("eu", 20), ("us", 60), ("ap", 30)):
        feed(sel, name, rtt, 0.0)
    nxt = sel.next_best({"eu"}, pinned_versions=["v1"], now=0.1)
    assert isinstance(nxt, Selection) and (nxt.region, nxt.reason) == ("us", "failover")
    none_left = sel.next_best({"eu", "us"}, pinned_versions=["v1"], now=0.1)
    assert isinstance(none_left, NoRegion)
    sel.record_failover("eu", "us")
    sel.record_failover("us", None)
    assert sel.failovers == {("eu", "us"): 1, ("us", "none"): 1}


def test_update_regions_keeps_health_and_load_of_surviving_regions() -> None:
    """A reload that drops one region and adds another keeps what was measured for the rest."""
    sel = RegionSelector([spec("eu"), spec("us")])
    feed(sel, "eu", 20, 0.0)
    sel.acquire("eu")
    sel.update_regions([spec("eu"), spec("ap")])
    assert sel.region_names == ("eu", "ap")
    assert sel.health("eu.example:50051").rtt_s == pytest.approx(0.02)
    assert sel.active_streams("eu") == 1
    assert sel.endpoint_state("ap.example:50051", 0.0) is EndpointState.UNKNOWN
    with pytest.raises(KeyError):
        sel.acquire("us")


def test_dialogue_endpoint_health_counts_only_for_calls_that_need_it() -> None:
    """A region whose dialogue URL is down still takes speech-only calls."""
    r = RegionSpec("eu", ("a:1",), ("a:1",), dialogue_endpoint="http://llm.example/v1/chat/completions")
    sel = RegionSelector([r])
    sel.on_probe_response("a:1", 0.0, 0.02)
    sel.on_probe_failure("http://llm.example/v1/chat/completions", 0.0)
    assert isinstance(sel.select(None, None, now=0.1), Selection)
    assert "dialogue" in sel.endpoints()["http://llm.example/v1/chat/completions"]
    result = sel.select(None, None, now=0.1, need_dialogue=True)
    assert isinstance(result, NoRegion) and result.reason == "unavailable"


def test_view_reports_state_rtt_loss_load_and_versions() -> None:
    """The /regions view carries what an operator needs per region and endpoint."""
    sel = RegionSelector([spec("eu"), spec("us")])
    feed(sel, "eu", 20, 0.0)
    sel.on_probe_failure("us.example:50051", 0.0)
    sel.acquire("eu")
    views = {v.name: v for v in sel.view(0.1)}
    assert views["eu"].state == "up" and views["eu"].up
    assert views["eu"].rtt_s == pytest.approx(0.02)
    assert views["eu"].active_streams == 1 and views["eu"].capacity == 10
    assert views["eu"].versions == {"v1"}
    assert views["us"].state == "down" and views["us"].loss_ratio == 1.0
    assert views["us"].endpoints[0].kinds == ("asr", "tts")

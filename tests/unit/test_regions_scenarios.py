"""The issue's target table as scripted scenarios: real RegionProber + RegionSelector, fake
network, fake clock (twisted.internet.task.Clock). Each test is one row of the table.

The fake network answers a health check after the path's RTT (± jitter), times it out
when the path is blackholed (answers in flight when the blackhole starts are lost too),
and pushes Watch status changes one one-way delay after they happen.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from twisted.internet.task import Clock

from agent.regions.probe import ProbeOutcome, RegionProber
from agent.regions.selector import NoRegion, RegionSelector, RegionSpec, Selection
from tests.fakes import FakeReactor

STEP_S = 0.01




@dataclass
class Path:
    rtt_s: float
    jitter_s: float = 0.0
    blackholed: bool = False
    serving: bool = True
    watchers: list[Callable[[bool], None]] = field(default_factory=list)


class FakeNet:
    """A ProbeTransport over scripted paths."""

    def __init__(self, clock: FakeReactor, paths: dict[str, Path], seed: int = 1) -> None:
        self.clock = clock
        self.paths = paths
        self.rng = random.Random(seed)
        self.in_flight: dict[str, int] = {a: 0 for a in paths}
        self.max_in_flight: dict[str, int] = {a: 0 for a in paths}
        self.discovered: dict[str, frozenset[str]] = {}

    def check(self, address: str, timeout_s: float, done: Callable[[ProbeOutcome], None]) -> None:
        p = self.paths[address]
        sent = self.clock.seconds()
        self.in_flight[address] += 1
        self.max_in_flight[address] = max(self.max_in_flight[address], self.in_flight[address])

        def finish(outcome: ProbeOutcome) -> None:
            self.in_flight[address] -= 1
            done(outcome)

        def timeout() -> None:
            finish(ProbeOutcome(False, False, timeout_s, "DEADLINE_EXCEEDED"))

        if p.blackholed:
            self.clock.callLater(timeout_s, timeout)
            return
        rtt = max(0.0005, p.rtt_s + self.rng.uniform(-p.jitter_s, p.jitter_s))
        if rtt >= timeout_s:
            self.clock.callLater(timeout_s, timeout)
            return

        def answer() -> None:
            if p.blackholed:  # the answer was on the wire when the path died
                self.clock.callLater(max(0.0, sent + timeout_s - self.clock.seconds()), timeout)
            else:
                finish(ProbeOutcome(True, p.serving, rtt))

        self.clock.callLater(rtt, answer)

    def watch(self, address: str, on_status: Callable[[bool], None]) -> Callable[[], None]:
        self.paths[address].watchers.append(on_status)
        return lambda: self.paths[address].watchers.remove(on_status)

    def discover(self, address: str, kind: str, timeout_s: float, done: Callable[[frozenset[str] | None], None]) -> None:
        done(self.discovered.get(f"{kind}@{address}"))

    def close(self) -> None:
        pass

    def set_serving(self, address: str, serving: bool) -> None:
        p = self.paths[address]
        p.serving = serving
        if not p.blackholed:
            for cb in list(p.watchers):
                self.clock.callLater(p.rtt_s / 2, cb, serving)


def addr(name: str) -> str:
    return f"{name}:50051"


def setup(rtts_ms: dict[str, float], *, jitter_ms: float = 0.0, versions: dict[str, tuple[str, ...]] | None = None,
          watch: bool = True, seed: int = 1) -> tuple[FakeReactor, FakeNet, RegionSelector, RegionProber]:
    clock = FakeReactor()
    paths = {addr(n): Path(ms / 1000.0, jitter_ms / 1000.0) for n, ms in rtts_ms.items()}
    net = FakeNet(clock, paths, seed)
    specs = [
        RegionSpec(n, (addr(n),), (addr(n),), model_versions=frozenset((versions or {}).get(n, ("v1",))))
        for n in rtts_ms
    ]
    selector = RegionSelector(specs)
    prober = RegionProber(clock, selector, interval_s=0.25, timeout_s=0.5, watch=watch, transport=net)
    prober.start()
    advance(clock, 3.0)
    return clock, net, selector, prober


def advance(clock: Clock, seconds: float) -> None:
    for _ in range(int(round(seconds / STEP_S))):
        clock.advance(STEP_S)


def chosen(selector: RegionSelector, clock: Clock, **kw: Any) -> str:
    result = selector.select(kw.pop("caller", None), None, now=clock.seconds(), **kw)
    assert isinstance(result, Selection), result
    return result.region


def time_until(clock: Clock, predicate: Callable[[], bool], limit_s: float) -> float:
    start = clock.seconds()
    while not predicate():
        if clock.seconds() - start > limit_s:
            raise AssertionError(f"condition not reached within {limit_s} s")
        clock.advance(STEP_S)
    return clock.seconds() - start


@pytest.mark.parametrize("phase_s", [0.0, 0.03, 0.07, 0.11, 0.16, 0.2, 0.24])
def test_blackholed_region_is_avoided_by_new_calls_within_1s(phase_s: float) -> None:
    """Row 1: the best region is blackholed (at any phase of the probe cycle): new calls
    go elsewhere within 1 s, and the region is ejected soon after."""
    clock, net, selector, _ = setup({"a": 20, "b": 60, "c": 100})
    assert chosen(selector, clock) == "a"
    advance(clock, phase_s)
    net.paths[addr("a")].blackholed = True
    detected = time_until(clock, lambda: chosen(selector, clock) != "a", 2.0)
    assert detected <= 1.0
    assert chosen(selector, clock) == "b"
    advance(clock, 1.0)
    assert [v.state for v in selector.view(clock.seconds()) if v.name == "a"] == ["down"]


def test_not_serving_region_is_left_within_rtt_plus_100ms() -> None:
    """Row 2: a Watch push of NOT_SERVING takes the region out one one-way delay later."""
    clock, net, selector, _ = setup({"a": 40, "b": 60})
    assert chosen(selector, clock) == "a"
    advance(clock, 0.13)
    net.set_serving(addr("a"), False)
    detected = time_until(clock, lambda: chosen(selector, clock) != "a", 1.0)
    assert detected <= 0.040 + 0.100


def test_not_serving_without_watch_is_seen_by_the_next_check() -> None:
    """Without Watch (a server that lacks it) NOT_SERVING is seen within one interval + RTT."""
    clock, net, selector, _ = setup({"a": 40, "b": 60}, watch=False)
    advance(clock, 0.13)
    net.set_serving(addr("a"), False)
    detected = time_until(clock, lambda: chosen(selector, clock) != "a", 1.0)
    assert detected <= 0.25 + 0.040 + STEP_S


def test_rtt_step_of_150ms_on_the_best_region_shifts_new_calls_within_5s() -> None:
    """Row 3: a, the best, gets +150 ms of RTT; the smoothed RTT crosses b's plus the
    hysteresis margin and new calls shift well within 5 s (and never flip back)."""
    clock, net, selector, _ = setup({"a": 20, "b": 60, "c": 100})
    assert chosen(selector, clock) == "a"
    net.paths[addr("a")].rtt_s += 0.150
    shifted = time_until(clock, lambda: chosen(selector, clock) != "a", 5.0)
    assert shifted <= 5.0
    seen = {chosen(selector, clock)}
    for _ in range(100):
        advance(clock, 0.1)
        seen.add(chosen(selector, clock))
    assert seen == {"b"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_jitter_of_10ms_flips_the_choice_at_most_once_a_minute(seed: int) -> None:
    """Row 4: two regions 5 ms apart, both with ±10 ms jitter on every probe, selected
    every 100 ms for ten minutes: at most ten flips in all."""
    clock, _, selector, _ = setup({"a": 20, "b": 25}, jitter_ms=10.0, seed=seed)
    flips_before = selector.flips
    last = chosen(selector, clock)
    changes = 0
    for _ in range(6000):
        clock.advance(0.1)
        now = chosen(selector, clock)
        changes += now != last
        last = now
    assert changes <= 10
    assert selector.flips - flips_before <= 10


def test_pinned_version_is_honoured_even_at_three_times_the_rtt() -> None:
    """Row 5: only c serves v2 and it is 3x farther: every pinned call lands on c,
    unpinned calls stay on a, with jitter and through a rollout that adds v2 to b."""
    clock, _, selector, _ = setup(
        {"a": 30, "b": 50, "c": 90}, jitter_ms=10.0, versions={"a": ("v1",), "b": ("v1",), "c": ("v1", "v2")}
    )
    placed: list[Selection] = []
    for i in range(600):
        clock.advance(0.1)
        if i == 300:
            selector.set_versions("b", ["v1", "v2"])
        result = selector.select(None, None, ["v2"], now=clock.seconds())
        assert isinstance(result, Selection)
        placed.append(result)
        assert chosen(selector, clock) == "a"
    assert all("v2" in s.versions for s in placed)
    assert {s.region for s in placed[:300]} == {"c"}
    assert {s.region for s in placed[301:]} == {"b"}


def test_no_region_with_the_pinned_version_is_refused_at_once() -> None:
    """Row 6: no region serves v9: the refusal (503 + Retry-After) is decided without
    waiting for anything (no clock time passes), even while every region is healthy."""
    clock, _, selector, _ = setup({"a": 20, "b": 60})
    before = clock.seconds()
    result = selector.select(None, None, ["v9"], now=clock.seconds())
    assert isinstance(result, NoRegion)
    assert result.reason == "no_version" and result.retry_after_s > 0
    assert clock.seconds() == before


def test_blackholed_region_comes_back_after_the_path_heals() -> None:
    """After a 3 s blackhole the region is re-admitted and wins again once its probes answer
    (ejection time, two successes, the loss window draining)."""
    clock, net, selector, _ = setup({"a": 20, "b": 60})
    net.paths[addr("a")].blackholed = True
    advance(clock, 3.0)
    assert chosen(selector, clock) == "b"
    net.paths[addr("a")].blackholed = False
    back = time_until(clock, lambda: chosen(selector, clock) == "a", 15.0)
    assert back <= 15.0


def test_probing_a_dead_endpoint_is_bounded() -> None:
    """A blackholed endpoint never has more than max_outstanding (2) checks in flight,
    and the prober's first round fires ``ready``."""
    clock, net, selector, prober = setup({"a": 20, "b": 60})
    assert prober.ready.called
    net.paths[addr("a")].blackholed = True
    advance(clock, 5.0)
    assert net.max_in_flight[addr("a")] == 2
    assert prober.skipped > 0


def test_discovered_versions_reach_the_selector() -> None:
    """With discovery on, the models an endpoint lists become the region's versions."""
    clock = FakeReactor()
    net = FakeNet(clock, {addr("a"): Path(0.02)})
    net.discovered = {f"asr@{addr('a')}": frozenset({"asr:m2"}), f"tts@{addr('a')}": frozenset({"tts:voice1"})}
    selector = RegionSelector([RegionSpec("a", (addr("a"),), (addr("a"),))])
    prober = RegionProber(clock, selector, transport=net, discover_versions=True)
    prober.start()
    advance(clock, 0.5)
    assert selector.versions("a") == {"asr:m2", "tts:voice1"}
    assert chosen(selector, clock, pinned_versions=["asr:m2"]) == "a"
    prober.stop()

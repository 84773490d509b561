"""The rollout controller (agent/regions/rollout.py) against fake nodes on a fake clock.

Each fake node holds a real RegionSelector behind a real RegionRolloutAdmin-shaped status (the
admin's ``status()``), so drain/switch/serve change what the node's calls would see; the fake
deployer "restarts" a region's servers after a delay by changing what its endpoints report.
"""
from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock

from agent.regions.rollout import RolloutController, RolloutPlan
from agent.regions.rollout_admin import RegionRolloutAdmin, replace_kinds
from agent.regions.selector import NoRegion, RegionSelector, RegionSpec, Selection

OLD, NEW, TTS = "asr:ps-1", "asr:ps-2", "tts:flite-kal16"
REGIONS = ("a", "b", "c")


class FakeNode:
    def __init__(self, clock: Clock, name: str = "n1", discovers: bool = True) -> None:
        self.name = name
        self.clock = clock
        self.selector = RegionSelector([RegionSpec(r, (f"{r}:1",), (f"{r}:1",), model_versions=frozenset({OLD, TTS}))
                                        for r in REGIONS])
        #: calls per region, and when each ends
        self.calls: dict[str, list[float]] = {r: [] for r in REGIONS}
        self.admin = RegionRolloutAdmin(self.selector, clock.seconds, self.calls_in,
                                        discover_now=(lambda: None) if discovers else None)
        self.log: list[tuple[float, str, str]] = []
        self.serving: dict[str, str] = {r: OLD for r in REGIONS}
        self.up: dict[str, bool] = {r: True for r in REGIONS}
        self.refuse: set[str] = set()
        self.probe()

    def calls_in(self, region: str) -> list[str]:
        now = self.clock.seconds()
        return [f"{region}{i}" for i, end in enumerate(self.calls[region]) if end > now]

    def probe(self) -> None:
        now = self.clock.seconds()
        for r in REGIONS:
            if self.up[r]:
                self.selector.on_probe_response(f"{r}:1", now, 0.02)
                if self.admin.status()["discovers_versions"]:
                    self.selector.set_discovered_versions(f"{r}:1", "asr", {self.serving[r]})
            else:
                self.selector.on_status(f"{r}:1", now, False)

    def status(self) -> defer.Deferred[dict[str, Any]]:
        self.probe()
        return defer.succeed(self.admin.status())

    def command(self, region: str, action: str, versions: tuple[str, ...] = ()) -> defer.Deferred[dict[str, Any]]:
        if action in self.refuse:
            return defer.fail(RuntimeError("HTTP 500: boom"))
        self.log.append((self.clock.seconds(), region, action))
        s = self.selector
        {"drain": s.drain_region, "undrain": s.undrain_region, "switch": s.begin_switch}.get(
            action, lambda r: s.finish_switch(r, replace_kinds(s.spec(r).model_versions, versions)))(region)
        return defer.succeed({"region": region, "action": action})


class FakeDeployer:
    """A region's servers go down, then come back serving the versions after ``restart_s``."""

    def __init__(self, clock: Clock, nodes: list[FakeNode], restart_s: float = 2.0,
                 broken: set[tuple[str, str]] | None = None) -> None:
        self.clock, self.nodes, self.restart_s = clock, nodes, restart_s
        self.broken = broken or set()  # (region, version) that never comes up
        self.applied: list[tuple[float, str, tuple[str, ...]]] = []

    def apply(self, region: str, versions: tuple[str, ...]) -> defer.Deferred[int]:
        self.applied.append((self.clock.seconds(), region, versions))
        for n in self.nodes:
            n.up[region] = False
        if (region, versions[0]) in self.broken:
            return defer.succeed(0)

        def back() -> int:
            for n in self.nodes:
                n.up[region], n.serving[region] = True, versions[0]
            return 0
        from twisted.internet.task import deferLater
        return deferLater(self.clock, self.restart_s, back)


def run(clock: Clock, controller: RolloutController, limit_s: float = 600.0) -> Any:
    d = controller.run()
    out: list[Any] = []
    d.addBoth(out.append)
    steps = 0
    while not out and steps < limit_s * 10:
        clock.advance(0.1)
        steps += 1
    assert out, "the rollout did not finish"
    return out[0]


def make(**plan: Any) -> tuple[Clock, FakeNode, FakeDeployer, RolloutController, list[str]]:
    clock = Clock()
    node = FakeNode(clock)
    deployer = FakeDeployer(clock, [node])
    lines: list[str] = []
    p = RolloutPlan(versions=(NEW,), regions=REGIONS, **{"drain_timeout_s": 30.0, "health_timeout_s": 10.0,
                                                          "poll_interval_s": 0.5, **plan})
    return clock, node, deployer, RolloutController(clock, [node], deployer, p, log=lines.append), lines


def test_regions_move_one_at_a_time_each_drained_switched_healthy_then_served() -> None:
    """Per region: drain, switch, hook, serve, in region order, never two regions out at once;
    every region ends on the new version; the skew window runs from a's serve to c's."""
    clock, node, deployer, controller, lines = make()
    report = run(clock, controller)
    assert report.ok, report.error
    assert [(r, a) for _, r, a in node.log] == [(r, a) for r in REGIONS for a in ("drain", "switch", "serve")]
    assert [r for _, r, _ in deployer.applied] == list(REGIONS)
    for r in REGIONS:
        assert NEW in node.selector.versions(r) and OLD not in node.selector.versions(r)
        assert node.selector.rollout_state(r) == "serving"
    served = {r: t for t, r, a in node.log if a == "serve"}
    assert report.skew_window_s == served["c"] - served["a"] and report.skew_window_s >= 2 * 2.0
    assert all(s.result == "done" and s.hook_s >= 2.0 for s in report.steps)
    assert any("skew window" in line for line in lines)


def test_drain_waits_for_calls_in_progress_and_reports_the_time() -> None:
    """Calls in b end at 7 s: b is switched only then (drain about 7 s after it began); a call
    that outlives the drain timeout is reported as left."""
    clock, node, deployer, controller, lines = make(drain_timeout_s=20.0)
    node.calls["b"] = [3.0, 7.0]
    node.calls["c"] = [1000.0]
    report = run(clock, controller)
    b = next(s for s in report.steps if s.region == "b")
    switch_b = next(t for t, r, a in node.log if r == "b" and a == "switch")
    assert switch_b >= 7.0 and b.calls_left == 0
    c = next(s for s in report.steps if s.region == "c")
    assert c.calls_left == 1 and 20.0 <= c.drain_s < 21.0
    assert any("drain timed out" in line for line in lines)


def test_during_the_rollout_some_regions_serve_old_some_new_and_pins_keep_finding_theirs() -> None:
    """After a is moved: a pin on the old version goes to b or c, a pin on the new one to a; a
    draining region takes no new call."""
    clock, node, deployer, controller, lines = make(pause_s=5.0)
    d = controller.run()
    while not [a for _, r, a in node.log if r == "a" and a == "serve"]:
        clock.advance(0.1)
    clock.advance(1.0)  # in the pause after a
    now = clock.seconds()
    old = node.selector.select(None, None, (OLD,), now=now)
    new = node.selector.select(None, None, (NEW,), now=now)
    assert isinstance(old, Selection) and old.region in ("b", "c")
    assert isinstance(new, Selection) and new.region == "a"
    while not [a for _, r, a in node.log if r == "c" and a == "drain"]:
        clock.advance(0.1)
    only_old = node.selector.select(None, None, (OLD,), now=clock.seconds())
    assert isinstance(only_old, NoRegion) and only_old.reason == "no_version"  # the last old region is draining
    while not d.called:
        clock.advance(0.5)


def test_a_failed_health_wait_aborts_and_rolls_back_every_moved_region() -> None:
    """b never comes up on the new version: the rollout aborts after the health timeout, b and
    then a go back to the old version, c is never touched."""
    clock = Clock()
    node = FakeNode(clock)
    deployer = FakeDeployer(clock, [node], broken={("b", NEW)})
    lines: list[str] = []
    controller = RolloutController(clock, [node], deployer,
                                   RolloutPlan((NEW,), REGIONS, health_timeout_s=10.0, poll_interval_s=0.5),
                                   log=lines.append)
    report = run(clock, controller)
    assert not report.ok and "not healthy" in report.error and "b" in report.error
    assert [(r, v[0]) for _, r, v in deployer.applied] == [("a", NEW), ("b", NEW), ("b", OLD), ("a", OLD)]
    assert [s.region for s in report.rollback] == ["b", "a"] and all(s.result == "done" for s in report.rollback)
    for r in REGIONS:
        assert OLD in node.selector.versions(r) and NEW not in node.selector.versions(r), r
        assert node.selector.rollout_state(r) == "serving"
    assert all(r != "c" for _, r, _ in node.log)
    assert any("ABORT" in line for line in lines)


def test_a_hook_failure_aborts_without_waiting_for_health() -> None:
    """A hook exiting 1 aborts at once and rolls the region back."""
    clock, node, deployer, controller, lines = make()
    real = deployer.apply
    deployer.apply = lambda region, versions: (defer.succeed(1) if versions == (NEW,) and region == "a"  # type: ignore[method-assign]
                                               else real(region, versions))
    report = run(clock, controller)
    assert not report.ok and "exited with status 1" in report.error
    assert report.steps[0].result == "rolled_back" and node.selector.rollout_state("a") == "serving"


def test_without_discovery_health_alone_ends_the_wait() -> None:
    """A node that does not discover versions: the region being up is enough."""
    clock = Clock()
    node = FakeNode(clock, discovers=False)
    deployer = FakeDeployer(clock, [node])
    controller = RolloutController(clock, [node], deployer, RolloutPlan((NEW,), ("a",)), log=lambda line: None)
    report = run(clock, controller)
    assert report.ok and report.skew_window_s == 0.0 and NEW in node.selector.versions("a")


def test_a_region_already_on_the_version_is_skipped_and_a_busy_region_is_refused() -> None:
    """Regions already serving the target are skipped; a region another rollout left draining
    stops the run before any step."""
    clock, node, deployer, controller, lines = make()
    node.selector.finish_switch("a", {NEW, TTS})
    node.serving["a"] = NEW
    report = run(clock, controller)
    assert report.ok and report.steps[0].result == "skipped" and [r for _, r, _ in deployer.applied] == ["b", "c"]

    clock2, node2, deployer2, controller2, _ = make()
    node2.selector.drain_region("b")
    report2 = run(clock2, controller2)
    assert not report2.ok and "draining" in report2.error and deployer2.applied == [] and node2.log == []


def test_two_nodes_are_both_told_and_both_must_see_health() -> None:
    """Every command goes to every node; a node refusing one aborts."""
    clock = Clock()
    n1, n2 = FakeNode(clock, "n1"), FakeNode(clock, "n2")
    deployer = FakeDeployer(clock, [n1, n2])
    controller = RolloutController(clock, [n1, n2], deployer, RolloutPlan((NEW,), ("a", "b")), log=lambda line: None)
    report = run(clock, controller)
    assert report.ok and [a for _, r, a in n2.log] == ["drain", "switch", "serve"] * 2

    clock3 = Clock()
    m1, m2 = FakeNode(clock3, "m1"), FakeNode(clock3, "m2")
    m2.refuse.add("switch")
    bad = RolloutController(clock3, [m1, m2], FakeDeployer(clock3, [m1, m2]), RolloutPlan((NEW,), ("a",)),
                            log=lambda line: None)
    report3 = run(clock3, bad)
    assert not report3.ok and "node m2 refused switch" in report3.error


def test_plan_validation() -> None:
    """Bad plans are refused with the reason."""
    for kwargs, text in (({"versions": (), "regions": ("a",)}, "at least one"),
                         ({"versions": ("asr:x", "asr:y"), "regions": ("a",)}, "one per kind"),
                         ({"versions": ("asr:x",), "regions": ("a", "a")}, "twice"),
                         ({"versions": ("asr:x",), "regions": ("a",), "poll_interval_s": 0}, "positive")):
        try:
            RolloutPlan(**kwargs)
        except ValueError as exc:
            assert text in str(exc)
        else:
            raise AssertionError(kwargs)


def _request(method: bytes, path: list[bytes], body: bytes = b"") -> Any:
    import io

    from twisted.web.test.requesthelper import DummyRequest

    request = DummyRequest([b"regions", *path])
    request.method = method
    request.content = io.BytesIO(body)
    return request


def test_admin_page_commands_and_bad_input() -> None:
    """/admin/regions through agent/app/web.py's Admin: GET lists, POST drains/serves; an unknown
    region, an unknown action, a bad versions body get 404/400 with the reason and change nothing."""
    import json

    from agent.app.web import Admin

    clock = Clock()
    node = FakeNode(clock)

    class Server:
        region_admin = node.admin

    page = Admin(Server())  # type: ignore[arg-type]
    got = json.loads(page.render_GET(_request(b"GET", [])))
    assert [r["name"] for r in got["regions"]] == list(REGIONS) and got["regions"][0]["rollout"] == "serving"
    assert got["regions"][0]["configured"] == sorted({OLD, TTS})
    req = _request(b"POST", [b"b", b"drain"])
    assert json.loads(page.render_POST(req))["rollout"] == "draining" and node.selector.rollout_state("b") == "draining"
    for path, body, code, text in (([b"zz", b"drain"], b"", 404, "unknown region 'zz'"),
                                   ([b"a", b"explode"], b"", 404, "expected GET /admin/regions"),
                                   ([b"a", b"serve"], b'{"versions": ["ps 2"]}', 400, "is not KIND:NAME"),
                                   ([b"a", b"serve"], b"{not json", 400, "serve:")):
        req = _request(b"POST", path, body)
        answer = json.loads(page.render_POST(req))
        assert req.responseCode == code and text in answer["error"], answer
    assert node.selector.rollout_state("a") == "serving" and OLD in node.selector.versions("a")
    req = _request(b"POST", [b"a", b"serve"], json.dumps({"versions": [NEW]}).encode())
    assert json.loads(page.render_POST(req))["versions"] == sorted({NEW, TTS, OLD})  # OLD: still reported by a:1
    assert node.selector.spec("a").model_versions == frozenset({NEW, TTS})

    class Plain:
        region_admin = None

    req = _request(b"GET", [])
    Admin(Plain()).render_GET(req)  # type: ignore[arg-type]
    assert req.responseCode == 404


def test_a_failure_while_draining_only_undrains_that_region() -> None:
    """A node refusing b's drain: b is undrained (its servers were never touched, no hook runs for
    it) and a, already moved, is rolled back to the old version."""
    clock, node, deployer, controller, lines = make()
    real = node.command

    def command(region: str, action: str, versions: tuple[str, ...] = ()) -> defer.Deferred[dict[str, Any]]:
        if region == "b" and action == "drain" and not any(r == "b" for _, r, _ in node.log):
            node.log.append((clock.seconds(), "b", "drain-refused"))
            return defer.fail(RuntimeError("HTTP 503: busy"))
        return real(region, action, versions)

    node.command = command  # type: ignore[method-assign]
    report = run(clock, controller)
    assert not report.ok and "refused drain of region b" in report.error
    assert [(r, v[0]) for _, r, v in deployer.applied] == [("a", NEW), ("a", OLD)]
    assert [(b.region, b.result) for b in report.rollback] == [("b", "done"), ("a", "done")]
    assert all(node.selector.rollout_state(r) == "serving" and OLD in node.selector.versions(r) for r in REGIONS)

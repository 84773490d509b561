"""Model-version rollouts across regions, one region at a time (``openclaw-voice models rollout``).

For each region in turn, the :class:`RolloutController`:

1. **drains** it on every node (``POST /admin/regions/R/drain``): no new calls, no failovers into
   it; calls already there go on with the old version;
2. waits until no node has a call in it, at most ``drain_timeout_s`` (the drain time and the calls
   left are reported; streams of calls left are cut by the switch and move to a region that still
   has their version, or end);
3. **switches** it (``.../switch``): it serves no version the nodes trust, so no stream of any call
   opens there until it is back;
4. runs the **deployment hook** for the region (a command template, e.g. ``systemctl restart
   riva@{region}``) that makes its speech servers serve the new version;
5. **waits for health**: every node sees the region's endpoints up and, when the node discovers
   versions, every endpoint reporting the new version(s); at most ``health_timeout_s``;
6. **serves** it with the new version(s) on every node (``.../serve``), then pauses ``pause_s``.

A failed hook, a failed health wait or a node refusing a command aborts: the failed region and
every region already moved are rolled back (same steps, old versions, in reverse order). The
skew window is the time from the first region serving the new version to the last one doing so.

Sans-I/O at the edges: nodes and the hook are :class:`NodeDriver` / :class:`Deployer` (HTTP and a
shell command in :mod:`agent.regions.rollout_io`), time is the ``clock`` passed in.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.task import deferLater

from agent.regions.rollout_admin import replace_kinds
from agent.regions.selector import version_kind


class RolloutError(Exception):
    """A step failed (a node refused a command, the hook failed, health did not come)."""


class NodeDriver(Protocol):
    """One node's ``/admin/regions`` (:class:`agent.regions.rollout_io.HttpNodeDriver`)."""

    name: str

    def status(self) -> defer.Deferred[dict[str, Any]]: ...

    def command(self, region: str, action: str, versions: tuple[str, ...] = ()) -> defer.Deferred[dict[str, Any]]: ...


class Deployer(Protocol):
    """Makes a region's speech servers serve *versions*; fires with the command's exit status."""

    def apply(self, region: str, versions: tuple[str, ...]) -> defer.Deferred[int]: ...


@dataclass(frozen=True)
class RolloutPlan:
    #: what the regions move to, e.g. ("asr:conformer-en-US-2.2",); each replaces the versions of its kind
    versions: tuple[str, ...]
    #: in this order
    regions: tuple[str, ...]
    drain_timeout_s: float = 120.0
    health_timeout_s: float = 60.0
    poll_interval_s: float = 0.5
    #: after a region serves the new version, before the next one is drained
    pause_s: float = 0.0
    #: roll back on a failure (else leave the failed region drained, the others as they are)
    rollback: bool = True

    def __post_init__(self) -> None:
        if not self.versions or not self.regions:
            raise ValueError("a rollout needs at least one version and one region")
        if len(set(self.regions)) != len(self.regions):
            raise ValueError(f"regions listed twice: {', '.join(self.regions)}")
        kinds = [version_kind(v) for v in self.versions]
        if "" in kinds or len(set(kinds)) != len(kinds):
            raise ValueError(f"versions must be KIND:NAME, one per kind, got {', '.join(self.versions)}")
        for name in ("drain_timeout_s", "health_timeout_s", "pause_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more")
        if self.poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be positive")


@dataclass
class RegionStep:
    """What happened to one region (times in seconds)."""

    region: str
    from_versions: tuple[str, ...]
    to_versions: tuple[str, ...]
    drain_s: float = 0.0
    #: calls still in the region when the drain ended (0 unless it timed out)
    calls_left: int = 0
    hook_s: float = 0.0
    health_wait_s: float = 0.0
    #: done | skipped (already there) | failed | rolled_back | rollback_failed
    result: str = ""
    detail: str = ""
    served_at: float | None = None
    #: a switch was sent (before it, undoing the step is an undrain)
    switched: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"region": self.region, "from": list(self.from_versions), "to": list(self.to_versions),
                "drain_s": round(self.drain_s, 3), "calls_left": self.calls_left, "hook_s": round(self.hook_s, 3),
                "health_wait_s": round(self.health_wait_s, 3), "result": self.result, "detail": self.detail}


@dataclass
class RolloutReport:
    ok: bool = False
    steps: list[RegionStep] = field(default_factory=list)
    rollback: list[RegionStep] = field(default_factory=list)
    #: from the first region serving the new version to the last one (None: fewer than two moved)
    skew_window_s: float | None = None
    error: str = ""
    started_at: float = 0.0
    ended_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "duration_s": round(self.ended_at - self.started_at, 3),
                "skew_window_s": None if self.skew_window_s is None else round(self.skew_window_s, 3),
                "steps": [s.as_dict() for s in self.steps], "rollback": [s.as_dict() for s in self.rollback]}


def _region_of(status: dict[str, Any], region: str) -> dict[str, Any] | None:
    return next((r for r in status.get("regions", []) if r.get("name") == region), None)


class RolloutController:
    """Runs one :class:`RolloutPlan` (see the module docstring); ``log`` gets one line per step."""

    def __init__(self, clock: Any, nodes: Iterable[NodeDriver], deployer: Deployer, plan: RolloutPlan,
                 log: Callable[[str], None] = print) -> None:
        self.clock = clock
        self.nodes = list(nodes)
        if not self.nodes:
            raise ValueError("a rollout needs at least one node")
        self.deployer = deployer
        self.plan = plan
        self._log = log
        self.report = RolloutReport()

    def log(self, text: str) -> None:
        self._log(f"[{self.clock.seconds() - self.report.started_at:7.2f} s] {text}")

    def _sleep(self, seconds: float) -> defer.Deferred[None]:
        return deferLater(self.clock, seconds, lambda: None)

    @defer.inlineCallbacks
    def _all(self, region: str, action: str, versions: tuple[str, ...] = ()) -> Any:
        for node in self.nodes:
            try:
                yield node.command(region, action, versions)
            except Exception as exc:
                raise RolloutError(f"node {node.name} refused {action} of region {region}: {exc}") from exc

    @defer.inlineCallbacks
    def _statuses(self) -> Any:
        out = []
        for node in self.nodes:
            try:
                out.append((node, (yield node.status())))
            except Exception as exc:
                raise RolloutError(f"node {node.name} did not answer GET /admin/regions: {exc}") from exc
        return out

    # -- the run --------------------------------------------------------------------------
    @defer.inlineCallbacks
    def run(self) -> Any:
        """Fires with the :class:`RolloutReport` (``ok`` False after an abort; never errbacks)."""
        plan, report = self.plan, self.report
        report.started_at = self.clock.seconds()
        moved: list[RegionStep] = []
        failed: RegionStep | None = None
        try:
            steps = yield self._plan_steps()
            report.steps = steps
            for step in steps:
                if step.result == "skipped":
                    self.log(f"region {step.region}: already serves {', '.join(step.to_versions)}; skipped")
                    continue
                try:
                    yield self._move(step, step.to_versions)
                except RolloutError as exc:
                    step.result, step.detail = "failed", str(exc)
                    failed = step
                    raise
                step.result = "done"
                moved.append(step)
                if plan.pause_s and step is not steps[-1]:
                    yield self._sleep(plan.pause_s)
            report.ok = True
        except RolloutError as exc:
            report.error = str(exc)
            self.log(f"ABORT: {exc}")
            if plan.rollback:
                yield self._roll_back(([failed] if failed is not None else []) + moved[::-1])
        served = [s.served_at for s in report.steps if s.served_at is not None and s.result == "done"]
        if len(served) >= 2:
            report.skew_window_s = max(served) - min(served)
        elif len(served) == 1 and report.ok:
            report.skew_window_s = 0.0
        report.ended_at = self.clock.seconds()
        skew = "n/a" if report.skew_window_s is None else f"{report.skew_window_s:.2f} s"
        self.log(f"rollout {'done' if report.ok else 'ABORTED'}: {', '.join(plan.versions)}; skew window {skew}")
        return report

    @defer.inlineCallbacks
    def _plan_steps(self) -> Any:
        statuses = yield self._statuses()
        steps = []
        for region in self.plan.regions:
            first: dict[str, Any] | None = None
            for node, status in statuses:
                r = _region_of(status, region)
                if r is None:
                    raise RolloutError(f"node {node.name} has no region {region!r}")
                if r.get("rollout") != "serving":
                    raise RolloutError(f"region {region} is {r.get('rollout')} on node {node.name} "
                                       f"(another rollout?); undrain or serve it first")
                first = first or r
            assert first is not None
            configured = frozenset(first.get("configured", ()))
            kinds = {version_kind(v) for v in self.plan.versions}
            old = tuple(sorted(v for v in configured if version_kind(v) in kinds))
            step = RegionStep(region, old, self.plan.versions)
            if set(self.plan.versions) <= configured and not set(old) - set(self.plan.versions):
                step.result = "skipped"
            elif not old:
                raise RolloutError(f"region {region} has no configured {'/'.join(sorted(kinds))} version to "
                                   f"replace (model_versions of the config); a rollback would have nothing to return to")
            steps.append(step)
        return steps

    @defer.inlineCallbacks
    def _move(self, step: RegionStep, versions: tuple[str, ...]) -> Any:
        plan, region = self.plan, step.region
        self.log(f"region {region}: draining (no new calls for {', '.join(step.from_versions) or '-'})")
        yield self._all(region, "drain")
        t0 = self.clock.seconds()
        left = -1
        while True:
            statuses = yield self._statuses()
            left = sum(int((_region_of(st, region) or {}).get("active_calls", 0)) for _, st in statuses)
            elapsed = self.clock.seconds() - t0
            if left == 0 or elapsed >= plan.drain_timeout_s:
                break
            yield self._sleep(min(plan.poll_interval_s, plan.drain_timeout_s - elapsed))
        step.drain_s, step.calls_left = self.clock.seconds() - t0, left
        if left:
            self.log(f"region {region}: drain timed out after {step.drain_s:.1f} s with {left} call(s) still in it; "
                     f"their streams move to a region with their version when it switches")
        else:
            self.log(f"region {region}: drained in {step.drain_s:.2f} s")
        self.log(f"region {region}: switching to {', '.join(versions)}")
        step.switched = True
        yield self._all(region, "switch")
        t1 = self.clock.seconds()
        try:
            status = yield self.deployer.apply(region, versions)
        except Exception as exc:
            raise RolloutError(f"deployment hook for region {region} failed to run: {exc}") from exc
        step.hook_s = self.clock.seconds() - t1
        if status != 0:
            raise RolloutError(f"deployment hook for region {region} exited with status {status}")
        self.log(f"region {region}: hook done in {step.hook_s:.2f} s; waiting for health")
        t2 = self.clock.seconds()
        while True:
            statuses = yield self._statuses()
            missing = [why for node, st in statuses for why in self._not_ready(node, st, region, versions)]
            if not missing:
                break
            if self.clock.seconds() - t2 >= plan.health_timeout_s:
                step.health_wait_s = self.clock.seconds() - t2
                raise RolloutError(f"region {region} not healthy on {', '.join(versions)} after "
                                   f"{plan.health_timeout_s:g} s: {'; '.join(missing)}")
            yield self._sleep(plan.poll_interval_s)
        step.health_wait_s = self.clock.seconds() - t2
        yield self._all(region, "serve", versions)
        step.served_at = self.clock.seconds()
        self.log(f"region {region}: serving {', '.join(versions)} (healthy after {step.health_wait_s:.2f} s)")

    @staticmethod
    def _not_ready(node: NodeDriver, status: dict[str, Any], region: str, versions: tuple[str, ...]) -> list[str]:
        r = _region_of(status, region)
        if r is None:
            return [f"node {node.name} lost region {region}"]
        why = []
        if not r.get("up"):
            why.append(f"node {node.name} sees it {r.get('health', 'down')}")
        if status.get("discovers_versions"):
            reported = r.get("reported", {})
            for v in versions:
                kind = version_kind(v)
                sets = [set(vs) for key, vs in reported.items() if key.split(" ", 1)[0] == kind]
                if not sets or not all(v in vs for vs in sets):
                    why.append(f"node {node.name}: its {kind} endpoints do not all report {v} yet")
        return why

    @defer.inlineCallbacks
    def _roll_back(self, steps: list[RegionStep]) -> Any:
        for step in steps:
            back = RegionStep(step.region, step.to_versions, step.from_versions)
            self.report.rollback.append(back)
            if not step.switched:  # failed while draining: its servers never changed
                self.log(f"region {step.region}: undraining (it was not switched)")
                try:
                    yield self._all(step.region, "undrain")
                except RolloutError as exc:
                    back.result, back.detail = "rollback_failed", str(exc)
                    self.log(f"region {step.region}: ROLLBACK FAILED: {exc}")
                    continue
                back.result = "done"
                step.result = "rolled_back"
                continue
            self.log(f"region {step.region}: rolling back to {', '.join(step.from_versions)}")
            try:
                yield self._move(back, step.from_versions)
            except RolloutError as exc:
                back.result, back.detail = "rollback_failed", str(exc)
                self.log(f"region {step.region}: ROLLBACK FAILED: {exc}; it stays drained")
                continue
            back.result = "done"
            step.result = "rolled_back"


__all__ = ["Deployer", "NodeDriver", "RegionStep", "RolloutController", "RolloutError", "RolloutPlan",
           "RolloutReport", "replace_kinds"]

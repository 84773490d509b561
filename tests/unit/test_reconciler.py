"""The reconciler (agent/app/reconciler.py): its comparison, and its loop on a fake clock."""
from __future__ import annotations

from twisted.internet.task import Clock

from agent.app.reconciler import (
    CallReconciler, Difference, KnownCall, OpenSession, Snapshot, confirm, find_differences,
)


def snap(pjsua: dict[int, int] | None = None, calls: tuple[KnownCall, ...] = (),
         sessions: tuple[OpenSession, ...] = (), gauge: float | None = None) -> Snapshot:
    return Snapshot(pjsua or {}, calls, sessions, float(len(sessions)) if gauge is None else gauge)


A = KnownCall(key=1, call_id="a@x", slot=0, owner=0xA0)
B = KnownCall(key=2, call_id="b@x", slot=1, owner=0xB0)


def test_tables_that_agree_show_no_difference() -> None:
    """Two calls in pjsua, each reporting to its own object, two open sessions: nothing to repair."""
    s = snap({0: 0xA0, 1: 0xB0}, (A, B), (OpenSession("a@x", False), OpenSession("b@x", False)))
    assert find_differences(s) == []


def test_a_call_pjsua_no_longer_has_is_lost() -> None:
    """The stack still holds call a, pjsua has ended it (its DISCONNECTED never arrived)."""
    diffs = find_differences(snap({1: 0xB0}, (A, B), (OpenSession("a@x", False), OpenSession("b@x", False))))
    assert [(d.kind, d.target, d.call_id) for d in diffs] == [("lost_call", 1, "a@x")]
    assert "no call 0" in diffs[0].detail


def test_a_call_whose_events_go_nowhere_is_lost_but_not_unknown() -> None:
    """pjsua's slot 0 reports to nobody (user data cleared): call a is lost and its own repair hangs
    it up; the slot is not also reported as an unknown call."""
    diffs = find_differences(snap({0: 0, 1: 0xB0}, (A, B), (OpenSession("a@x", False), OpenSession("b@x", False))))
    assert [(d.kind, d.target) for d in diffs] == [("lost_call", 1)]
    assert "nobody" in diffs[0].detail


def test_a_slot_given_to_an_object_the_agent_does_not_know_is_both_lost_and_unknown() -> None:
    """Slot 0 reports to a third object: call a (filed under slot 0) is lost, and the call in slot 0
    is unknown to the agent."""
    diffs = find_differences(snap({0: 0xC0}, (A,), (OpenSession("a@x", False),)))
    assert [(d.kind, d.target) for d in diffs] == [("lost_call", 1), ("unknown_pjsua_call", 0)]


def test_a_session_whose_call_ended_is_stale_and_the_gauge_must_match_the_sessions() -> None:
    """An open session whose SIP call has ended, and a gauge left one too high."""
    diffs = find_differences(snap({}, (), (OpenSession("a@x", True),), gauge=2.0))
    assert [(d.kind, d.target) for d in diffs] == [("stale_session", "a@x"), ("active_gauge", 0)]
    assert "is 2 with 1 session" in diffs[1].detail


def test_only_what_two_checks_in_a_row_saw_is_repaired() -> None:
    """A difference seen once is a suspect; seen again it is repaired; gone in between, forgotten."""
    lost = Difference("lost_call", 1, "a@x", "")
    stale = Difference("stale_session", "b@x", "b@x", "")
    repair, suspects = confirm(set(), [lost])
    assert repair == [] and suspects == {lost.ident}
    repair, suspects = confirm(suspects, [lost, stale])
    assert repair == [lost] and suspects == {stale.ident}
    repair, suspects = confirm(suspects, [])
    assert repair == [] and suspects == set()


class World:
    """A server seen through a snapshot function; repairs change it as the real ones would."""

    def __init__(self) -> None:
        self.pjsua = {0: 0xA0}
        self.calls = [A]
        self.sessions = {"a@x": False}
        self.gauge = 1.0
        self.repaired: list[str] = []
        self.counted: list[str] = []
        self.fail = False

    def snapshot(self) -> Snapshot:
        return Snapshot(dict(self.pjsua), tuple(self.calls),
                        tuple(OpenSession(c, ended) for c, ended in self.sessions.items()), self.gauge)

    def repair(self, diff: Difference) -> None:
        if self.fail:
            raise RuntimeError("repair failed")
        self.repaired.append(diff.kind)
        if diff.kind == "lost_call":
            self.calls = [c for c in self.calls if c.key != diff.target]
            self.sessions.pop(diff.call_id, None)
            self.gauge -= 1


def test_the_loop_repairs_a_lost_call_on_the_second_check_and_counts_it_once() -> None:
    """Every interval on the clock: pjsua loses call a; the first check only notes it, the second
    repairs it (session closed, gauge down), later checks find nothing more."""
    clock = Clock()
    world = World()
    rec = CallReconciler(clock, 5.0, world.snapshot, world.repair, on_repaired=world.counted.append)
    rec.start()
    clock.advance(5.0)
    assert world.repaired == []
    world.pjsua = {}
    clock.advance(5.0)
    assert world.repaired == []
    clock.advance(5.0)
    assert world.repaired == ["lost_call"] and world.counted == ["lost_call"] and rec.repairs == 1
    assert world.sessions == {} and world.gauge == 0.0
    clock.advance(15.0)
    assert world.repaired == ["lost_call"]
    rec.stop()
    assert not clock.getDelayedCalls()


def test_a_difference_that_heals_itself_between_checks_is_not_repaired() -> None:
    """A call seen in one check only (its end was on its way) is never touched."""
    clock = Clock()
    world = World()
    rec = CallReconciler(clock, 2.0, world.snapshot, world.repair)
    rec.start()
    world.pjsua = {}
    clock.advance(2.0)
    world.pjsua = {0: 0xA0}
    clock.advance(2.0)
    clock.advance(2.0)
    assert world.repaired == [] and rec.repairs == 0


def test_a_failing_repair_or_snapshot_does_not_stop_the_loop() -> None:
    """A repair that raises is logged and not counted; a snapshot that raises skips one check; the
    loop keeps running and repairs once it can."""
    clock = Clock()
    world = World()
    world.pjsua = {}
    world.fail = True
    broken = {"on": False}

    def snapshot() -> Snapshot:
        if broken["on"]:
            raise RuntimeError("pjsua gone")
        return world.snapshot()

    rec = CallReconciler(clock, 1.0, snapshot, world.repair, on_repaired=world.counted.append)
    rec.start()
    clock.advance(1.0)
    clock.advance(1.0)
    assert world.counted == [] and rec.repairs == 0
    broken["on"] = True
    clock.advance(1.0)
    broken["on"] = False
    world.fail = False
    clock.advance(1.0)
    clock.advance(1.0)
    assert world.counted == ["lost_call"] and rec.repairs == 1

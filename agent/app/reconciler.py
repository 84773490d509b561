"""Keep the server's calls true to pjsua's own call table: check every few seconds, repair, log, count.

Whatever order pjsua's callbacks come in, every call must end exactly once; this is the
safety net behind that rule, so that a race nobody has thought of yet cannot shrink a node
for good. :func:`find_differences` is the sans-I/O core: it compares a :class:`Snapshot`
(pjsua's table, the SIP stack's calls, the open sessions, the active-calls gauge) and names
each difference. :func:`confirm` repairs only what two checks in a row both saw (nothing is
repaired on one look). :class:`CallReconciler` runs them on a Twisted ``LoopingCall`` and
:func:`server_reconciler` wires one to an :class:`~agent.app.server.AgentServer`.

Kinds of difference (the ``kind`` label of ``openclaw_call_slot_repairs_total``):

* ``lost_call`` -- the stack holds a call pjsua no longer has, or whose events pjsua no
  longer reports to it: the call is ended here (hung up first if pjsua still holds it with
  nobody listening), which closes its session and writes its call record.
* ``unknown_pjsua_call`` -- pjsua holds a call no SipCall stands for: it is hung up.
* ``stale_session`` -- a session is open although its SIP call has ended: it is closed.
* ``active_gauge`` -- ``openclaw_active_calls`` differs from the sessions open: it is set.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from twisted.internet.task import LoopingCall
from twisted.logger import Logger

log = Logger(namespace="openclaw.reconciler")

#: the kinds of difference, in the order they are repaired
KINDS = ("lost_call", "unknown_pjsua_call", "stale_session", "active_gauge")


@dataclass(frozen=True)
class KnownCall:
    """A call the SIP stack holds: its SIP Call-ID, pjsua call id and the address of its pjsua2 object."""

    key: int
    call_id: str
    slot: int
    owner: int


@dataclass(frozen=True)
class OpenSession:
    call_id: str
    #: the session's SIP call has ended (or never reached the stack)
    call_ended: bool


@dataclass(frozen=True)
class Snapshot:
    #: pjsua's table: {pjsua call id: address of the object it reports events to, 0 for none}
    pjsua: Mapping[int, int]
    calls: tuple[KnownCall, ...]
    sessions: tuple[OpenSession, ...]
    active_gauge: float


@dataclass(frozen=True)
class Difference:
    kind: str
    #: what the repair acts on: a KnownCall key, a pjsua call id, a SIP Call-ID, or 0 for the gauge
    target: int | str
    call_id: str
    detail: str

    @property
    def ident(self) -> tuple[str, int | str]:
        return (self.kind, self.target)


def find_differences(snap: Snapshot) -> list[Difference]:
    """Every way *snap*'s tables disagree, in :data:`KINDS` order."""
    lost: list[Difference] = []
    claimed: set[int] = set()
    for call in snap.calls:
        owner = snap.pjsua.get(call.slot) if call.slot >= 0 else None
        if owner is None:
            lost.append(Difference("lost_call", call.key, call.call_id,
                                   f"pjsua has no call {call.slot} any more"))
        elif owner != call.owner:
            lost.append(Difference("lost_call", call.key, call.call_id,
                                   f"pjsua call {call.slot} reports its events to "
                                   f"{'nobody' if owner == 0 else 'another object'}"))
            if owner == 0:
                claimed.add(call.slot)  # this call, orphaned: its own repair hangs it up
        else:
            claimed.add(call.slot)
    unknown = [Difference("unknown_pjsua_call", slot, "", f"pjsua call {slot} is held by no call of the agent")
               for slot in sorted(snap.pjsua) if slot not in claimed]
    stale = [Difference("stale_session", s.call_id, s.call_id, "the session is open but its SIP call has ended")
             for s in snap.sessions if s.call_ended]
    gauge = []
    if snap.active_gauge != len(snap.sessions):
        gauge.append(Difference("active_gauge", 0, "",
                                f"openclaw_active_calls is {snap.active_gauge:g} with {len(snap.sessions)} "
                                "session(s) open"))
    return lost + unknown + stale + gauge


def confirm(previous: Iterable[tuple[str, int | str]], found: list[Difference]
            ) -> tuple[list[Difference], set[tuple[str, int | str]]]:
    """(differences to repair now: those the previous check saw too, the suspects for the next check)."""
    before = set(previous)
    repair = [d for d in found if d.ident in before]
    suspects = {d.ident for d in found if d.ident not in before}
    return repair, suspects


class CallReconciler:
    """Runs :func:`find_differences` every *interval_s* on *clock*; repairs what two checks saw."""

    def __init__(self, clock: Any, interval_s: float, snapshot: Callable[[], Snapshot | None],
                 repair: Callable[[Difference], None], on_repaired: Callable[[str], None] | None = None) -> None:
        self._snapshot = snapshot
        self._repair = repair
        self._on_repaired = on_repaired
        self._suspects: set[tuple[str, int | str]] = set()
        self.interval_s = interval_s
        self.repairs = 0
        self._loop = LoopingCall(self.check)
        self._loop.clock = clock

    def start(self) -> None:
        self._loop.start(self.interval_s, now=False)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def check(self) -> list[Difference]:
        """One check: returns the differences repaired (never raises: the loop must go on)."""
        try:
            snap = self._snapshot()
            if snap is None:
                self._suspects = set()
                return []
            repair, self._suspects = confirm(self._suspects, find_differences(snap))
        except Exception:
            log.failure("reconciler check failed")
            return []
        done = []
        for diff in repair:
            log.warn("call {call_id} reconciler: {kind}: {detail}; repairing", call_id=diff.call_id or "-",
                     kind=diff.kind, detail=diff.detail)
            try:
                self._repair(diff)
            except Exception:
                log.failure("reconciler repair {kind} failed", kind=diff.kind)
                continue
            self.repairs += 1
            done.append(diff)
            if self._on_repaired is not None:
                self._on_repaired(diff.kind)
        return done


def server_reconciler(server: Any, interval_s: float) -> CallReconciler:
    """A reconciler over *server*'s SIP stack, sessions and metrics (an AgentServer)."""

    def snapshot() -> Snapshot | None:
        stack = server.stack
        if stack is None:
            return None
        calls = []
        live: set[int] = set()
        for call in stack.calls:
            if call.disconnected:
                continue
            slot, owner = call.pjsua_slot()
            calls.append(KnownCall(id(call), call.sip_call_id, slot, owner))
            live.add(id(call))
        sessions = []
        for cid, session in server.sessions.items():
            if session.ended:
                continue
            call = getattr(session.info, "sip_call", None)
            sessions.append(OpenSession(cid, call is None or call.disconnected or id(call) not in live))
        gauge = server.metrics.registry.get_sample_value("openclaw_active_calls") or 0.0
        return Snapshot(stack.pjsua_calls(), tuple(calls), tuple(sessions), gauge)

    def repair(diff: Difference) -> None:
        stack = server.stack
        if diff.kind == "lost_call" and stack is not None:
            for call in stack.calls:
                if id(call) == diff.target:
                    call.lost(f"reconciler: {diff.detail}")
        elif diff.kind == "unknown_pjsua_call" and stack is not None:
            stack.hangup_unknown(int(diff.target), f"reconciler: {diff.detail}")
        elif diff.kind == "stale_session":
            session = server.sessions.get(diff.target)
            if session is not None:
                session.close(f"reconciler: {diff.detail}")
        elif diff.kind == "active_gauge":
            server.metrics.active_calls.set(len(server.sessions))

    return CallReconciler(server.reactor, interval_s, snapshot, repair,
                          on_repaired=lambda kind: server.metrics.call_slot_repairs.labels(kind).inc())

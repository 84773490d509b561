"""The call state machine (sip/lifecycle.py) under every order of pjsua's callbacks, on a fake clock."""
from __future__ import annotations

import itertools

import pytest
from twisted.internet.task import Clock

from sip.lifecycle import ACK_TIMEOUT_S, CallLifecycle

#: what pjsua (or the agent) can do to an inbound call after the INVITE: the 200 going out, media
#: becoming active, the ACK (CONFIRMED), the caller's BYE or CANCEL (DISCONNECTED), a hangup the
#: dialplan asks for, and the reconciler finding the call gone
EVENTS = ("answer", "media", "ack", "disconnected", "agent_hangup", "lost")


class Trace:
    """Drives one CallLifecycle through *order* and records what it decided at each event."""

    def __init__(self, order: tuple[str, ...]) -> None:
        self.clock = Clock()
        self.timeouts = 0
        self.life = CallLifecycle(self.clock, on_ack_timeout=self._timeout)
        self.ends = 0
        self.session_starts = 0
        self.byes: list[str] = []
        self.started_after_end = False
        for event in order:
            self.feed(event)

    def _timeout(self) -> None:
        self.timeouts += 1
        what = self.life.hangup("timeout: no ACK")
        if what:
            self.byes.append(what)

    def feed(self, event: str) -> None:
        life = self.life
        if event == "answer":
            life.answer_sent(200)
        elif event == "media":
            if life.on_media_active():
                self.session_starts += 1
                self.started_after_end = self.started_after_end or life.ended
        elif event == "ack":
            life.on_confirmed()
        elif event == "agent_hangup":
            what = life.hangup("dialplan: done")
            if what:
                self.byes.append(what)
        elif event in ("disconnected", "lost"):
            if life.on_ended():
                self.ends += 1


@pytest.mark.parametrize("order", list(itertools.permutations(EVENTS)))
def test_every_order_of_callbacks_ends_the_call_exactly_once(order: tuple[str, ...]) -> None:
    """Whatever order the six events come in: one end, at most one session start and never after the
    end, at most one hangup and only while the call is up, and after the end nothing is sent."""
    t = Trace(order)
    assert t.ends == 1
    assert t.life.ended and t.life.state == "ended"
    assert t.session_starts <= 1 and not t.started_after_end
    ended_at = min(order.index("disconnected"), order.index("lost"))
    hung_up_while_up = order.index("agent_hangup") < ended_at
    assert len(t.byes) == (1 if hung_up_while_up else 0)
    if hung_up_while_up:
        # after a 2xx (or an ACK, which implies one) a BYE; before it, an error response
        answered_before = min(order.index("answer"), order.index("ack")) < order.index("agent_hangup")
        assert t.byes == ["BYE" if answered_before else "response"]
    # Ended: a later hangup (an old call's, after pjsua reused its id) sends nothing.
    assert t.life.hangup("late") is None
    # Whatever came first, the ACK timer is gone once the call has ended.
    t.clock.advance(ACK_TIMEOUT_S * 2)
    assert t.timeouts == 0


def test_an_unacknowledged_200_is_ended_with_a_bye_after_64_t1_once() -> None:
    """No ACK: nothing happens before 32 s; at 32 s one BYE with the timeout as its reason."""
    t = Trace(("answer", "media"))
    t.clock.advance(ACK_TIMEOUT_S - 0.1)
    assert t.byes == [] and t.timeouts == 0
    t.clock.advance(0.1)
    assert t.byes == ["BYE"] and t.life.hangup_reason == "timeout: no ACK"
    t.feed("disconnected")
    t.clock.advance(ACK_TIMEOUT_S)
    assert t.timeouts == 1 and t.ends == 1
    assert not t.life.ended_without_ack  # the agent ended it, for a reason it logged


@pytest.mark.parametrize("before_timeout", ["ack", "disconnected", "lost"])
def test_an_ack_or_an_end_before_the_timeout_stops_it(before_timeout: str) -> None:
    """The ACK, the caller's BYE, or the call found gone: no BYE from the agent at 32 s."""
    t = Trace(("answer", "media"))
    t.clock.advance(10.0)
    t.feed(before_timeout)
    t.clock.advance(ACK_TIMEOUT_S)
    assert t.timeouts == 0 and t.byes == []


def test_a_bye_before_the_ack_is_told_apart_from_an_agent_hangup() -> None:
    """The caller's BYE before its ACK: ended without an ACK (logged as such); after an agent hangup
    the same end is the agent's own."""
    caller = Trace(("answer", "media", "disconnected"))
    assert caller.life.ended_without_ack
    agent = Trace(("answer", "agent_hangup", "disconnected"))
    assert not agent.life.ended_without_ack and agent.byes == ["BYE"]


def test_the_sip_stacks_own_ack_timeout_is_the_agents_timeout_hangup() -> None:
    """pjsua waits the same 64*T1 and may end the call (408, its own BYE) before the agent's timer:
    the end carries the agent's timeout reason, the timer is gone, and it is not a caller's end. A 408
    after an ACK, or on a call the agent already hung up, keeps its own account."""
    t = Trace(("answer", "media"))
    t.clock.advance(ACK_TIMEOUT_S - 0.01)
    assert t.life.on_ended(408)
    assert t.life.ack_timed_out_in_stack and not t.life.ended_without_ack
    assert t.life.hangup_reason == "timeout: no ACK for the 200 in 32 s" == t.life.ack_timeout_reason
    t.clock.advance(1.0)
    assert t.timeouts == 0 and t.byes == []
    for order in (("answer", "ack"), ("answer", "agent_hangup")):
        other = Trace(order)
        assert other.life.on_ended(408)
        assert not other.life.ack_timed_out_in_stack
        assert other.life.hangup_reason in ("", "dialplan: done")
    caller = Trace(("answer",))
    assert caller.life.on_ended(200) and caller.life.ended_without_ack and not caller.life.hangup_reason


def test_an_error_response_does_not_wait_for_an_ack_and_an_outbound_leg_cancels() -> None:
    """A 488/500 answer starts no ACK timer; hanging up an unanswered outbound leg sends CANCEL."""
    clock = Clock()
    fired = []
    refused = CallLifecycle(clock, on_ack_timeout=lambda: fired.append(1))
    refused.answer_sent(488)
    clock.advance(ACK_TIMEOUT_S * 2)
    assert fired == [] and refused.state == "new"
    leg = CallLifecycle(clock, outbound=True, on_ack_timeout=lambda: fired.append(1))
    assert leg.hangup("transfer: the target did not answer in time") == "CANCEL"
    leg.answer_sent(200)  # an outbound leg's 2xx is not ours to wait an ACK for
    clock.advance(ACK_TIMEOUT_S * 2)
    assert fired == []

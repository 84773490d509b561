"""The caller put the call on hold: nothing is said into the held line and no silence is counted.

While held (the caller's re-INVITE or UPDATE with ``sendonly``/``inactive`` media), the prompt
being said stops where it is and anything queued waits (:meth:`PlayoutBuffer.hold`), and the
no-input timer does not run: music on hold or silence is not the caller's answer (the SIP
adapter also stops handing the call's received audio to the session). On resume the prompt goes
on and the wait for the caller starts afresh.
"""
from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from agent.call.ports import Reactor
from agent.call.turns import TurnTaker
from media.playout import PlayoutBuffer

log = Logger(namespace="openclaw.session")


class CallHold:
    """Hold and resume of one call (reactor thread)."""

    def __init__(self, reactor: Reactor, playout: PlayoutBuffer, turn_taker: TurnTaker,
                 log_fields: dict[str, Any]) -> None:
        self._reactor = reactor
        self._playout = playout
        self._turn_taker = turn_taker
        self._log_fields = log_fields
        self.held = False
        #: how many times the call was held, and for how long in all (seconds)
        self.holds = 0
        self.held_s = 0.0
        self._since = 0.0

    def set(self, held: bool) -> bool:
        """The call is now held (True) or not; returns whether that changed anything."""
        if held == self.held:
            return False
        self.held = held
        now = self._reactor.seconds()
        if held:
            self.holds += 1
            self._since = now
            self._playout.hold()
            self._turn_taker.cancel_no_input()
            log.info("call {call_id} on hold: prompts and the no-input timer wait", **self._log_fields)
        else:
            self.held_s += now - self._since
            self._playout.release()
            self._turn_taker.restart_no_input()
            log.info("call {call_id} resumed after {s:.1f} s on hold", s=now - self._since, **self._log_fields)
        return True

    def record(self) -> dict[str, Any]:
        held_s = self.held_s + (self._reactor.seconds() - self._since if self.held else 0.0)
        return {"holds": self.holds, "held_s": round(held_s, 3)}

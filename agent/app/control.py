"""What a session may do to its SIP call: hang up, transfer (REFER), or bridge to a second leg."""
from __future__ import annotations

from typing import Any, Callable, Protocol

from sip.pjsua import SipCall, SipStack


class StackOwner(Protocol):
    """Where the control finds the SIP stack (gone once the server stops) and the reactor."""

    reactor: Any
    stack: SipStack | None


class SipCallControl:
    def __init__(self, call: SipCall, server: StackOwner) -> None:
        self._call = call
        self._server = server
        self.leg: SipCall | None = None

    def hangup(self, why: str = "") -> None:
        self._call.hangup(why=why or "session")
        if self.leg is not None:
            self.leg.hangup(why=f"transfer: leg of an ended call ({why or 'session'})")

    def transfer(self, target_uri: str) -> bool:
        region = getattr(self._call, "region", "")
        return self._call.transfer(target_uri, (("X-OpenClaw-Region", region),) if region else ())

    def bridge(self, target_uri: str, timeout_ms: int, on_result: Callable[[bool, str], None]) -> None:
        """Dial *target_uri* and, once it answers, connect the caller's audio to it."""
        stack = self._server.stack
        reactor = self._server.reactor
        if stack is None:
            on_result(False, "SIP stack stopped")
            return
        state = {"reported": False}

        def report(ok: bool, reason: str) -> None:
            if not state["reported"]:
                state["reported"] = True
                on_result(ok, reason)

        try:
            headers = [("X-OpenClaw-Transferred-From", self._call.sip_call_id)]
            region = getattr(self._call, "region", "")
            if region:
                headers.append(("X-OpenClaw-Region", region))
            leg = stack.make_call(target_uri, tuple(headers))
        except Exception as e:  # noqa: BLE001 -- pjsua2 raises its own Error type
            report(False, f"cannot dial {target_uri}: {e}")
            return
        self.leg = leg

        def no_answer() -> None:
            if not leg.confirmed:
                leg.hangup(why="transfer: the target did not answer in time")
                report(False, "no_answer")

        timer = reactor.callLater(timeout_ms / 1000.0, no_answer)

        def answered() -> None:
            if timer.active():
                timer.cancel()
            if self._call.disconnected:
                leg.hangup(why="transfer: the caller left before the target answered")
                return
            if self._call.bridge_to(leg):
                report(True, "")
            else:
                leg.hangup(why="transfer: no media on the target")
                report(False, "no media on the transfer target")

        def leg_ended(code: int, reason: str) -> None:
            if timer.active():
                timer.cancel()
            if not leg.confirmed:
                report(False, f"{code} {reason}".strip())
            elif not self._call.disconnected:
                self._call.hangup(why="transfer: the target hung up")  # end the caller's leg too

        leg.callbacks.on_confirmed = answered
        leg.callbacks.on_disconnected = leg_ended

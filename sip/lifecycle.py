"""One call leg's life as the agent sees it, whatever order pjsua's callbacks come in (sans-I/O).

pjsua reports an answered call's media, its ACK (CONFIRMED) and its end (DISCONNECTED) in an
order that depends on the caller and on timing: a BYE can come before the ACK, a CANCEL can cross
the 200, the ACK may never come, media can fail while answering. :class:`CallLifecycle` takes
those events in any order and says what follows from each, so that a call ends exactly once,
its media starts at most once and never after its end, and the agent hangs up only a live call
and only for a stated reason. :class:`sip.pjsua.SipCall` feeds it; the clock is only for the ACK
timeout (RFC 3261 13.3.1.4: a 2xx unacknowledged for 64*T1 ends the session with a BYE).
"""
from __future__ import annotations

from typing import Any, Callable

#: 64*T1: how long a 2xx may wait for its ACK
ACK_TIMEOUT_S = 32.0
#: the status pjsua ends a call with when its own wait for the ACK ran out (it sends the BYE itself)
ACK_TIMEOUT_STATUS = 408


class CallLifecycle:
    """States: new -> answered (2xx sent) -> confirmed (ACK) -> ended; ended is final and reached once."""

    def __init__(self, clock: Any, outbound: bool = False, ack_timeout_s: float = ACK_TIMEOUT_S,
                 on_ack_timeout: Callable[[], None] | None = None) -> None:
        self._clock = clock
        self.outbound = outbound
        self.ack_timeout_s = ack_timeout_s
        self.on_ack_timeout = on_ack_timeout
        #: the agent's reason for a hangup when the ACK never came
        self.ack_timeout_reason = f"timeout: no ACK for the 200 in {ack_timeout_s:.0f} s"
        self.answered = False
        self.confirmed = False
        self.ended = False
        self.media_started = False
        #: why the agent hung up (empty: it did not)
        self.hangup_reason = ""
        #: the call ended after a 2xx that was never acknowledged, and not because the agent hung up
        self.ended_without_ack = False
        #: the SIP stack's own 64*T1 timer ended the call before the agent's (same wait, same BYE):
        #: it is the agent's ACK-timeout hangup all the same
        self.ack_timed_out_in_stack = False
        self._ack_timer: Any = None

    @property
    def state(self) -> str:
        if self.ended:
            return "ended"
        if self.confirmed:
            return "confirmed"
        return "answered" if self.answered else "new"

    def answer_sent(self, status: int) -> None:
        """A response to the INVITE went out; a 2xx starts the wait for the ACK."""
        if self.ended or self.answered or not 200 <= status < 300:
            return
        self.answered = True
        if not self.outbound and self.on_ack_timeout is not None:
            self._ack_timer = self._clock.callLater(self.ack_timeout_s, self._ack_timed_out)

    def on_confirmed(self) -> bool:
        """pjsua says CONFIRMED (ACK received, or the 2xx received on an outbound leg): True the first time."""
        if self.ended or self.confirmed:
            return False
        self.confirmed = True
        self._cancel_timer()
        return True

    def on_media_active(self) -> bool:
        """pjsua says the audio is active: True the first time, while the call is up (start its session)."""
        if self.ended or self.media_started:
            return False
        self.media_started = True
        return True

    def hangup(self, why: str) -> str | None:
        """The agent wants the call ended: what goes out (BYE, CANCEL, an error response), or None when
        the call has already ended (its pjsua slot may belong to another call by now)."""
        if self.ended:
            return None
        self.hangup_reason = why or "unspecified"
        if self.confirmed or self.answered:
            return "BYE"
        return "CANCEL" if self.outbound else "response"

    def on_ended(self, status: int = 0) -> bool:
        """pjsua says DISCONNECTED (with its last *status*), or the call was found gone: True exactly once.

        An answered inbound call that ends with 408 before its ACK timed out in pjsua, whose timer
        runs alongside the agent's and may fire first: recorded as the agent's ACK-timeout hangup."""
        if self.ended:
            return False
        self.ended = True
        if (status == ACK_TIMEOUT_STATUS and self.answered and not self.confirmed and not self.outbound
                and not self.hangup_reason and self.on_ack_timeout is not None):
            self.hangup_reason = self.ack_timeout_reason
            self.ack_timed_out_in_stack = True
        self.ended_without_ack = self.answered and not self.confirmed and not self.hangup_reason
        self._cancel_timer()
        return True

    def _ack_timed_out(self) -> None:
        self._ack_timer = None
        if not self.confirmed and not self.ended and self.on_ack_timeout is not None:
            self.on_ack_timeout()

    def _cancel_timer(self) -> None:
        timer, self._ack_timer = self._ack_timer, None
        if timer is not None and timer.active():
            timer.cancel()

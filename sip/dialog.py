"""How the agent answers (ringing, early media) and keeps its dialogs alive (RFC 4028 session
timers): settings read from ``sip.answer`` and ``sip.session_timers`` (no pjsua2 import).

See docs/configuration.md and docs/sip-trunk.md.
"""
from __future__ import annotations

from dataclasses import dataclass

SESSION_TIMER_MODES = ("off", "optional", "required", "always")


@dataclass(frozen=True)
class AnswerSettings:
    """How an admitted call is answered."""

    #: ring this long before the 200 OK (0: answer at once); a CANCEL meanwhile ends the call
    ring_ms: int = 0
    #: send 183 Session Progress with SDP and start the dialogue in early media while ringing
    early_media: bool = False


@dataclass(frozen=True)
class SessionTimerSettings:
    """RFC 4028 session timers: a dialog nobody refreshes is ended with BYE."""

    #: off: never; optional: when the caller asks for them; required: refuse callers without
    #: (420); always: also with callers that do not ask (the agent refreshes)
    mode: str = "optional"
    #: the session interval asked for (Session-Expires) and the smallest accepted (Min-SE; >= 90)
    expires_s: int = 1800
    min_se_s: int = 90

    def __post_init__(self) -> None:
        if self.mode not in SESSION_TIMER_MODES:
            raise ValueError(f"session timer mode: expected one of {', '.join(SESSION_TIMER_MODES)}, "
                             f"got {self.mode!r}")

"""What a call needs from the world around it: the reactor, its SIP call, the prompt cache."""
from __future__ import annotations

from typing import Any, Callable, Protocol

from twisted.internet.interfaces import IDelayedCall


class Reactor(Protocol):
    """The reactor's clock (``seconds()``: the one time base of a call, in seconds) and its thread hand-off."""

    def seconds(self) -> float: ...
    def callLater(self, delay: float, f: Callable[..., Any], *a: Any, **kw: Any) -> IDelayedCall: ...  # noqa: N802
    def callFromThread(self, f: Callable[..., Any], *a: Any, **kw: Any) -> None: ...  # noqa: N802


class CallControl(Protocol):
    """What a session may do to its SIP call (reactor thread)."""

    def hangup(self, why: str = "") -> None:
        """End the call (BYE once answered); *why* is logged with the call id."""

    def transfer(self, target_uri: str) -> bool: ...

    def bridge(self, target_uri: str, timeout_ms: int, on_result: Callable[[bool, str], None]) -> None:
        """Dial *target_uri* and connect the caller to it; report (connected, reason) once."""


class PromptCache(Protocol):
    def get(self, text: str, voice: str) -> bytes | None: ...


def cancel(timer: IDelayedCall | None) -> None:
    """Cancel *timer* if it is still pending."""
    if timer is not None and timer.active():
        timer.cancel()

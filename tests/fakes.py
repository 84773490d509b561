"""Fakes shared by the unit tests of the sans-I/O cores."""
from __future__ import annotations

from typing import Any, Callable

from twisted.internet.task import Clock


class FakeReactor(Clock):
    """A Clock whose callFromThread runs at once (everything is on one thread here)."""

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:  # noqa: N802
        f(*args, **kw)

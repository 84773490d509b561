"""How the admission gate refuses a request: a final response, or no answer at all."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rejection:
    """A final response that refuses a call before it is created."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...] = ()


#: a refusal without an answer: the request is consumed and nothing is sent
DROP = Rejection(0, "dropped")


@dataclass(frozen=True)
class ReplaceBody:
    """Let the request through with its body replaced by *text* (``type/subtype``); *fallback* if that fails."""

    type: str
    subtype: str
    text: str
    fallback: Rejection

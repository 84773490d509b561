"""Steps that cannot be undone: where an answer leads, and the request for a person.

Ending the call and handing it to someone else are the two things a misheard word must not do.
:meth:`~agent.dialplan.model.Flow.consequence` tells whether a step leads (through steps that
only speak or set variables) to a ``hangup`` (:data:`END`) or to a ``transfer``/``queue``
(:data:`TRANSFER`); the engine then asks the caller to confirm unless the answer was clear
(:class:`~agent.dialplan.model.Confirmation`), and a caller it does not understand is offered a
person (:data:`OFFER`).

:func:`with_escalation` gives every ask of a scope with an ``escalation`` step a way to reach it:
the intent that already goes there gains the everyday words for a person, or a new intent
``agent`` is added; either takes the key ``0`` when the ask leaves it free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from agent.dialplan.intents import IntentMatch
from agent.dialplan.model import END, TRANSFER, Intent
from agent.yamlmarks import Mark

__all__ = [
    "END",
    "ESCALATION_KEY",
    "OFFER",
    "PERSON_REQUESTS",
    "Question",
    "TRANSFER",
    "with_escalation",
]

OFFER = "offer"

ESCALATION_KEY = "0"
"""The key that asks for a person where an ask leaves it free (the operator key)."""

PERSON_REQUESTS = (
    "agent",
    "talk to an agent",
    "a real person",
    "talk to a person",
    "speak to a person",
    "speak to someone",
    "talk to someone",
    "somebody",
    "a human",
    "human",
    "representative",
    "operator",
)
"""Ways of asking for a person; ``agent`` and ``talk to a person`` anchor the semantic concept."""

def with_escalation(
    intents: tuple[Intent, ...], target: str, reserved_keys: Mapping[str, str], mark: Mark
) -> tuple[Intent, ...]:
    """*intents* of an ask with a way to ask for a person that leads to step *target*.

    The first intent going to *target* gains :data:`PERSON_REQUESTS` (and the key ``0`` if it
    has none and the key is free); otherwise an intent ``agent`` (``escalation`` if that name is
    taken) is added. *reserved_keys* are keys the ask's slot uses.
    """
    used = {i.dtmf for i in intents if i.dtmf is not None} | set(reserved_keys)
    key = ESCALATION_KEY if ESCALATION_KEY not in used else None
    for n, intent in enumerate(intents):
        if intent.goto == target:
            examples = intent.examples + tuple(
                p for p in PERSON_REQUESTS if p not in intent.examples
            )
            merged = replace(intent, examples=examples, dtmf=intent.dtmf or key)
            return intents[:n] + (merged,) + intents[n + 1:]
    names = {i.name for i in intents}
    name = "agent" if "agent" not in names else "escalation"
    return intents + (Intent(name, PERSON_REQUESTS, key, target, mark),)


@dataclass(frozen=True)
class Question:
    """A yes/no question the engine put to the caller at an ask.

    *kind* :data:`END` or :data:`TRANSFER` (confirm the answer *intent*, heard as *text* with
    *match*) or :data:`OFFER` (a person, at step *target*). *repeated*: asked a second time.
    *heard_as*: the answer was taken from the recogniser's other reading of the caller's words.
    """

    kind: str
    target: str | None
    intent: Intent | None = None
    match: IntentMatch | None = None
    text: str | None = None
    repeated: bool = False
    #: the recogniser's other reading the answer was taken from (None: its first)
    heard_as: str | None = None

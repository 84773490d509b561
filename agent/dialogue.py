"""The dialogue engine: runs one call through a dialplan flow, without any I/O.

:class:`DialogueSession` is a pure state machine. The call session feeds it events (``start``, a
final transcript, a DTMF key, a no-input timeout, the outcome of a transfer) and carries out the
actions it returns, in order: :class:`Say` a prompt, :class:`Listen` for the caller's answer,
:class:`Transfer` the call, :class:`Hangup`. It never reads a clock, starts a timer or blocks;
timeouts arrive as :meth:`DialogueSession.on_no_input`.

Timing contract with the call session:

* Actions in one returned list are sequential: a ``Listen``, ``Transfer`` or ``Hangup`` takes
  effect once the ``Say`` actions before it have been played (or cut short by barge-in).
* As soon as a list ending in ``Listen`` is returned the engine is at that ask step
  (:attr:`DialogueSession.expects_input` is true), even while the prompts are still playing.
  Input delivered during those prompts therefore answers the ask: a DTMF key pressed during a
  barge-in-able greeting selects the menu option. Whether to deliver input during a prompt that
  is *not* barge-in-able (``Say.barge_in`` false) is the call session's decision: it should
  discard speech and keys until that prompt has finished.
* Input that arrives when no ask is waiting (during a transfer attempt, or while the prompts
  before a hangup play) is ignored, and recorded in :attr:`DialogueSession.history` as
  ``ignored``. Speech is never buffered for a later ask: words said before a question was asked
  do not answer it.
* After the call has ended every event returns ``[]``; no event ever raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Union

from agent.dialplan import (
    AskStep,
    Dialplan,
    Flow,
    HangupStep,
    Intent,
    RepromptPolicy,
    SayStep,
    Settings,
    Step,
    Template,
    TransferStep,
    prompt_cache_key,
)
from agent.intents import IntentMatch, IntentMatcher

__all__ = [
    "Action",
    "DialogueEvent",
    "DialogueSession",
    "Hangup",
    "Listen",
    "MAX_STEPS_PER_EVENT",
    "Say",
    "Transfer",
    "call_variables",
]

MAX_STEPS_PER_EVENT = 100
"""Steps one event may run before the engine gives up on a runaway flow and hangs up."""

DTMF_KEYS = frozenset("0123456789*#ABCD")

_SPOKEN_DIGITS = {
    "0": "zero",
    "1": "one",
    "2": "two",
    "3": "three",
    "4": "four",
    "5": "five",
    "6": "six",
    "7": "seven",
    "8": "eight",
    "9": "nine",
}


@dataclass(frozen=True)
class Say:
    """Speak *text* with *voice*; *cache_key* is set when the audio is cached at load time."""

    text: str
    voice: str
    barge_in: bool
    cache_key: str | None


@dataclass(frozen=True)
class Listen:
    """The caller's turn, once the preceding prompts have played; times out after the limit."""

    no_input_timeout_ms: int


@dataclass(frozen=True)
class Transfer:
    """Blind-transfer the call (SIP REFER) to *target_uri* after the preceding prompts."""

    target_uri: str


@dataclass(frozen=True)
class Hangup:
    """End the call after the preceding prompts, recording *reason*."""

    reason: str


Action = Union[Say, Listen, Transfer, Hangup]


@dataclass(frozen=True)
class DialogueEvent:
    """One entry of the call record.

    *kind* is one of: ``step`` (a step began), ``transcript``, ``dtmf``, ``intent`` (an answer
    was recognised; *intent* and *score* set), ``no_match``, ``no_input``, ``reprompt``,
    ``gave_up`` (reprompts exhausted), ``transfer``, ``transfer_failed``,
    ``transfer_succeeded``, ``ignored`` (input while no ask was waiting), ``hangup``.
    """

    kind: str
    step: str
    text: str = ""
    intent: str | None = None
    score: float | None = None


def call_variables(
    caller: str,
    called: str,
    call_id: str,
    region: str = "",
    config: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """Build the flat variable mapping templates read: ``caller`` ... and ``config.<key>``.

    Nested configuration mappings are flattened with dots (``config.speech.voice``); ``None``
    values are left out so a template using them counts as missing.
    """
    variables = {"caller": caller, "called": called, "call_id": call_id, "region": region}

    def flatten(prefix: str, value: object) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                flatten(f"{prefix}.{key}", item)
        elif value is not None:
            variables[prefix] = str(value)

    for key, value in (config or {}).items():
        flatten(f"config.{key}", value)
    return variables


@lru_cache(maxsize=256)
def _matcher(ask: AskStep) -> IntentMatcher:
    """The intent matcher of an ask; DTMF-bound intents also accept the spoken digit."""
    examples: dict[str, list[str]] = {}
    for intent in ask.intents:
        phrases = list(intent.examples)
        word = _SPOKEN_DIGITS.get(intent.dtmf or "")
        if word is not None:
            phrases += [word, f"option {word}", f"press {word}", f"number {word}"]
        examples[intent.name] = phrases
    return IntentMatcher(examples)


_IDLE = "idle"
_LISTENING = "listening"
_TRANSFERRING = "transferring"
_ENDED = "ended"


class DialogueSession:
    """One call's progress through one flow of a dialplan.

    *variables* are the call's template values with flat dotted keys (see
    :func:`call_variables`). Raises ``KeyError`` if *flow* is not in the dialplan.
    """

    def __init__(self, dialplan: Dialplan, flow: str, variables: Mapping[str, str]) -> None:
        self._flow: Flow = dialplan.flow(flow)
        self._variables: dict[str, str] = dict(variables)
        self._mode = _IDLE
        self._started = False
        self._step: Step | None = None
        self._no_input_count = 0
        self._no_match_count = 0
        self._history: list[DialogueEvent] = []

    # ------------------------------------------------------------------ inspection

    @property
    def flow(self) -> str:
        """Name of the flow this call runs."""
        return self._flow.name

    @property
    def state(self) -> str:
        """Id of the current step ("" before :meth:`start`)."""
        return self._step.id if self._step is not None else ""

    @property
    def ended(self) -> bool:
        """True once a Hangup has been issued."""
        return self._mode == _ENDED

    @property
    def expects_input(self) -> bool:
        """True while an ask waits for the caller (speech, DTMF or a no-input timeout)."""
        return self._mode == _LISTENING

    @property
    def history(self) -> tuple[DialogueEvent, ...]:
        """What happened so far, for the call record."""
        return tuple(self._history)

    def peek_intent(self, text: str) -> IntentMatch | None:
        """The intent *text* would select at the waiting ask, without acting on it.

        For end-of-turn detection: a partial transcript that already completes an intent lets
        the endpointer accept a shorter silence. None when no ask is waiting or nothing matches.
        """
        ask = self._listening_ask()
        return _matcher(ask).match(text) if ask is not None else None

    # ------------------------------------------------------------------ events

    def start(self) -> list[Action]:
        """Begin the flow at its first step; later calls return []."""
        if self._started:
            return []
        self._started = True
        return self._run(self._flow.steps[0].id)

    def on_transcript(self, text: str) -> list[Action]:
        """A final recognition result. Ignored unless an ask is waiting."""
        if self.ended:
            return []
        ask = self._listening_ask()
        self._record("transcript" if ask is not None else "ignored", text=text)
        if ask is None:
            return []
        match = _matcher(ask).match(text)
        if match is None:
            return self._reprompt_or_give_up(ask, "no_match")
        return self._answered(ask, _intent_named(ask, match), match)

    def on_dtmf(self, digit: str) -> list[Action]:
        """A DTMF key (0-9, *, #, A-D). Answers the waiting ask; ignored otherwise."""
        if self.ended:
            return []
        ask = self._listening_ask()
        if ask is None or digit not in DTMF_KEYS:
            self._record("ignored", text=f"dtmf {digit}")
            return []
        self._record("dtmf", text=digit)
        intent = ask.intent_for_dtmf(digit)
        if intent is None:
            return self._reprompt_or_give_up(ask, "no_match")
        return self._answered(ask, intent, IntentMatch(intent.name, 1.0, f"dtmf {digit}"))

    def on_no_input(self) -> list[Action]:
        """The Listen timed out without speech. Ignored unless an ask is waiting."""
        ask = self._listening_ask()
        if ask is None:
            return []
        return self._reprompt_or_give_up(ask, "no_input")

    def on_transfer_failed(self, reason: str) -> list[Action]:
        """The transfer was refused or failed; continue at the step's ``on_failure``."""
        step = self._step
        if self._mode != _TRANSFERRING or not isinstance(step, TransferStep):
            return []
        self._record("transfer_failed", text=reason)
        self._mode = _IDLE
        return self._run(step.on_failure or self._flow.following(step))

    def on_transfer_succeeded(self) -> list[Action]:
        """The transfer was accepted; the call leaves the agent."""
        if self._mode != _TRANSFERRING:
            return []
        self._record("transfer_succeeded")
        return [self._hangup("transferred")]

    # ------------------------------------------------------------------ engine

    def _listening_ask(self) -> AskStep | None:
        if self._mode == _LISTENING and isinstance(self._step, AskStep):
            return self._step
        return None

    def _record(
        self, kind: str, text: str = "", intent: str | None = None, score: float | None = None
    ) -> None:
        self._history.append(DialogueEvent(kind, self.state, text, intent, score))

    def _answered(self, ask: AskStep, intent: Intent, match: IntentMatch) -> list[Action]:
        self._record("intent", text=match.example, intent=intent.name, score=match.score)
        self._mode = _IDLE
        return self._run(intent.goto or self._flow.successor(ask))

    def _reprompt_or_give_up(self, ask: AskStep, kind: str) -> list[Action]:
        policy: RepromptPolicy
        if kind == "no_input":
            self._no_input_count += 1
            count, policy = self._no_input_count, ask.no_input
        else:
            self._no_match_count += 1
            count, policy = self._no_match_count, ask.no_match
        self._record(kind)
        if count <= len(policy.reprompts):
            self._record("reprompt", text=f"{kind} {count}")
            actions: list[Action] = []
            say = self._say(policy.reprompts[count - 1], ask.settings)
            if say is not None:
                actions.append(say)
            actions.append(Listen(ask.settings.no_input_timeout_ms))
            return actions
        self._record("gave_up", text=kind)
        self._mode = _IDLE
        if policy.then is None:
            return [self._hangup(kind)]
        return self._run(policy.then)

    def _run(self, step_id: str | None) -> list[Action]:
        """Execute steps from *step_id* until one waits for the caller or the call ends."""
        actions: list[Action] = []
        for _ in range(MAX_STEPS_PER_EVENT):
            if step_id is None:
                actions.append(self._hangup("end_of_flow"))
                return actions
            step = self._flow.step(step_id)
            self._step = step
            self._record("step")
            if isinstance(step, SayStep):
                say = self._say(step.text, step.settings)
                if say is not None:
                    actions.append(say)
                step_id = self._flow.successor(step)
            elif isinstance(step, AskStep):
                self._no_input_count = 0
                self._no_match_count = 0
                if step.prompt is not None:
                    say = self._say(step.prompt, step.settings)
                    if say is not None:
                        actions.append(say)
                actions.append(Listen(step.settings.no_input_timeout_ms))
                self._mode = _LISTENING
                return actions
            elif isinstance(step, TransferStep):
                target = step.to.render(self._variables).strip()
                if target and not step.to.missing(self._variables):
                    self._record("transfer", text=target)
                    self._mode = _TRANSFERRING
                    actions.append(Transfer(target))
                    return actions
                missing = ", ".join(step.to.missing(self._variables)) or "empty target"
                self._record("transfer_failed", text=f"no transfer target ({missing})")
                step_id = step.on_failure or self._flow.following(step)
            else:
                assert isinstance(step, HangupStep)
                actions.append(self._hangup(step.reason))
                return actions
        actions.append(self._hangup("step_limit"))
        return actions

    def _say(self, template: Template, settings: Settings) -> Say | None:
        text = template.render(self._variables)
        if not text.strip():
            return None
        cache_key = prompt_cache_key(text, settings.voice) if template.is_static else None
        return Say(text, settings.voice, settings.barge_in, cache_key)

    def _hangup(self, reason: str) -> Hangup:
        self._record("hangup", text=reason)
        self._mode = _ENDED
        return Hangup(reason)


def _intent_named(ask: AskStep, match: IntentMatch) -> Intent:
    for intent in ask.intents:
        if intent.name == match.name:
            return intent
    raise KeyError(match.name)  # unreachable: the matcher only knows this ask's intents

"""The dialplan language's objects: routes, flows and steps as frozen dataclasses.

Kept whole: one dataclass per construct of the language, imported as one namespace.

A dialplan says which called numbers go to which flow and what each flow does, step by step
(``say``, ``ask``, ``set``, ``branch``, ``webhook``, ``hours``, ``transfer``, ``queue``, ``goto``,
``return``, ``hangup``, ``record``, ``model``). See ``docs/dialplans.md`` for the language.

Files are read once, at the edge, by :mod:`agent.dialplan.loader`: their structure is checked
against ``dialplans/schema.json`` (:mod:`agent.dialplan.validation`), their references and flow
shape by :mod:`agent.dialplan.checks`; every problem is reported at once as
``path:line:column: message`` in one :class:`DialplanError`. The dialogue engine only ever sees
the :class:`Dialplan` built here, never a raw dict; its :attr:`Dialplan.digest` identifies the
exact text it was loaded from.

Public API: :func:`load_dialplan`, :func:`load_dialplans`, :func:`parse_dialplan`,
:func:`static_prompts`, :func:`prompt_cache_key`, :func:`parse_template`,
:meth:`NumberPattern.parse` and the dataclasses below.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterator, Mapping, Sequence, Union

from agent.dialplan.intents import slot_phrases
from agent.dialplan.templates import (
    Expression,
    JsonArray,
    JsonObject,
    JsonValue,
    NumberPattern,
    Template,
    TemplateError,
    Variable,
    parse_template,
)
from agent.speech.voices import DEFAULT_VOICE
from agent.secrets import redact
from agent.yamlmarks import Mark

__all__ = [
    "AskStep",
    "BUILTIN_VARIABLES",
    "BranchCase",
    "BranchStep",
    "CALL_VARIABLES",
    "Confirmation",
    "DEFAULT_SETTINGS",
    "Dialplan",
    "DialplanError",
    "DialplanIssue",
    "END",
    "Endpointing",
    "Flow",
    "GotoStep",
    "HangupStep",
    "Holiday",
    "HoursStep",
    "Intent",
    "ModelStep",
    "NumberPattern",
    "OpenWindow",
    "PersonOffer",
    "QueueStep",
    "RecordStep",
    "RepromptPolicy",
    "ReturnStep",
    "Route",
    "SayStep",
    "SetStep",
    "Settings",
    "Slot",
    "SourceMark",
    "Step",
    "Template",
    "TemplateError",
    "TRANSFER",
    "TransferStep",
    "Variable",
    "WebhookStep",
    "load_dialplan",
    "load_dialplans",
    "parse_dialplan",
    "parse_template",
    "prompt_cache_key",
    "static_prompts",
]

CALL_VARIABLES = ("caller", "called", "call_id", "region")
"""Variables every call has from its start."""

NOW_VARIABLES = (
    "now", "now.date", "now.time", "now.hour", "now.minute", "now.weekday", "now.day",
    "now.month", "now.year",
)
"""The current time in the flow's timezone, computed when read (``now`` is ISO 8601)."""

STEP_VARIABLES = (
    "flow", "step", "time",
    "intent", "intent.score", "intent.text", "input", "input.mode",
    "webhook.status", "webhook.reason", "webhook.http_status",
    "hours.open", "hours.holiday",
    "transfer.result", "transfer.reason",
)
"""Variables the engine maintains as steps run (see docs/dialplans.md, Variables)."""

BUILTIN_VARIABLES = frozenset(CALL_VARIABLES + NOW_VARIABLES + STEP_VARIABLES)

CONFIG_PREFIX = "config."

DEFAULT_REPROMPT_COUNT = 2
"""Without a ``no_input``/``no_match`` block, an ask repeats its prompt this many times."""

DEFAULT_ROUTE_PRIORITY = 100

END = "end"
TRANSFER = "transfer"
"""What an answer may lead to that cannot be undone (:meth:`Flow.consequence`)."""

# --------------------------------------------------------------------------- errors


SourceMark = Mark
"""A position in a dialplan file (the one mark type of :mod:`agent.yamlmarks`)."""


@dataclass(frozen=True)
class DialplanIssue:
    """One problem found while loading a dialplan."""

    mark: Mark
    message: str

    def __str__(self) -> str:
        return f"{self.mark}: {self.message}"


class DialplanError(ValueError):
    """A dialplan could not be loaded; ``str()`` is one ``path:line:col: message`` per line."""

    def __init__(self, errors: Sequence[DialplanIssue]) -> None:
        self.errors: list[DialplanIssue] = list(errors)
        # A secret (!env/!file) put where it does not belong must not be quoted back.
        super().__init__(redact("\n".join(str(issue) for issue in self.errors)))


def prompt_cache_key(text: str, voice: str) -> str:
    """Key under which the synthesised audio of *text* spoken by *voice* is cached."""
    digest = hashlib.sha256(f"{voice}\n{text}".encode("utf-8")).hexdigest()[:20]
    return f"{voice}-{digest}"


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Endpointing:
    """How the end of a caller's turn is decided; None leaves the server's default.

    *end_silence_ms*: silence that ends a turn; *fast_end_silence_ms*: the shorter silence that
    is enough when the partial transcript already completes an intent; *max_speech_ms*: the
    longest turn before the recogniser is asked for a final result.
    """

    end_silence_ms: int | None = None
    fast_end_silence_ms: int | None = None
    max_speech_ms: int | None = None


@dataclass(frozen=True)
class Confirmation:
    """When an answer that ends or transfers the call is acted on without asking back.

    A spoken answer whose intent leads to a ``hangup``, ``transfer`` or ``queue`` is acted on
    when its intent score reaches *min_score* and the recogniser's confidence (when known)
    reaches *min_confidence*; otherwise the caller hears *end_prompt* or *transfer_prompt*.
    """

    min_score: float = 0.9
    min_confidence: float = 0.7
    #: an acknowledgement begun while the question was being said ("uh huh, okay") answers
    #: nothing: with no more words for this long after its turn ended, the question is said again
    reask_after_ms: int = 1000
    end_prompt: Template = parse_template("Do you want to end the call?")
    transfer_prompt: Template = parse_template("Do you want me to put you through to an agent?")


@dataclass(frozen=True)
class PersonOffer:
    """After *after* answers in a row that an ask did not understand, offer a person.

    *after* 0 never offers. The offer is only made where an ``escalation`` step is set.
    """

    after: int = 2
    prompt: Template = parse_template(
        "I'm having trouble understanding. Would you like to speak to a person?"
    )


@dataclass(frozen=True)
class MomentRequest:
    """A caller who asks for a moment ("hold on", "give me a second, let me find it") is told
    *prompt* and given *timeout_ms* of silence before the ask's no-input reprompt, instead of
    having the words matched against the ask's intents. *enabled* False matches them as before."""

    enabled: bool = True
    prompt: Template = parse_template("Sure, take your time.")
    timeout_ms: int = 30000


@dataclass(frozen=True)
class Settings:
    """How prompts are spoken and input awaited; set per dialplan file, flow or step.

    ``barge_in`` lets caller speech interrupt prompts, ``dtmf_barge_in`` lets keys do it
    (YAML ``barge_in: true | false | dtmf``). ``max_call_duration_s`` applies to whole flows.
    ``escalation`` is the step a request for a person goes to from every ask (None: none);
    ``confirm`` says when ending or transferring needs a yes; ``no_match`` when a person is
    offered to a caller the ask does not understand; ``hold`` how a request for a moment is met.
    """

    voice: str = DEFAULT_VOICE
    barge_in: bool = True
    no_input_timeout_ms: int = 5000
    dtmf_barge_in: bool = True
    language: str = "en-US"
    asr_model: str | None = None
    endpointing: Endpointing = Endpointing()
    max_call_duration_s: int | None = None
    timezone: str = "UTC"
    inter_digit_timeout_ms: int = 3000
    escalation: str | None = None
    confirm: Confirmation = Confirmation()
    no_match: PersonOffer = PersonOffer()
    hold: MomentRequest = MomentRequest()
    #: the dialogue model's system prompt for model steps (a step's instructions follow it)
    system_prompt: str | None = None


DEFAULT_SETTINGS = Settings()


@dataclass(frozen=True)
class SayStep:
    """Speak *text*, then continue with *next* (or the following step)."""

    id: str
    text: Template
    settings: Settings
    mark: Mark
    next: str | None = None


@dataclass(frozen=True)
class Intent:
    """One answer an ask accepts: spoken *examples* and/or a DTMF key, and where it leads.

    *synonyms* maps a word of the examples to alternatives that count the same; *slots* are
    values (``name -> type``) read from the same utterance when the intent matches by speech.
    """

    name: str
    examples: tuple[str, ...]
    dtmf: str | None
    goto: str | None
    mark: Mark
    synonyms: tuple[tuple[str, tuple[str, ...]], ...] = ()
    slots: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RepromptPolicy:
    """Reprompts for silence or unrecognised input; after *retries* of them, go to *then*.

    ``retries`` None means one per reprompt; when it is larger, the last reprompt repeats.
    ``then`` None ends the call (reason ``no_input`` or ``no_match``). *offer*: the ask's own
    :class:`PersonOffer` (None: the settings' one).
    """

    reprompts: tuple[Template, ...]
    then: str | None
    retries: int | None = None
    offer: PersonOffer | None = None

    @property
    def limit(self) -> int:
        """How many failures are answered with a reprompt before giving up."""
        return self.retries if self.retries is not None else len(self.reprompts)


@dataclass(frozen=True)
class Slot:
    """A value an ask collects into variable *name*: digits, number, yes_no, date, time, text."""

    name: str
    type: str
    min_length: int | None = None
    max_length: int | None = None
    min: int | None = None
    max: int | None = None
    terminator: str | None = "#"

    @property
    def collects_digits(self) -> bool:
        """True when keypad digits fill the slot (so digit keys cannot select intents)."""
        return self.type in ("digits", "number", "date", "time")

    @property
    def max_dtmf_digits(self) -> int:
        """Keys collected before the value is complete without a terminator."""
        if self.type == "yes_no":
            return 1
        if self.type == "date":
            return 8
        if self.type == "time":
            return 4
        if self.max_length is not None:
            return self.max_length
        return 20

    def accepts(self, value: str) -> bool:
        """True when *value* satisfies the slot's length and range limits."""
        if self.min_length is not None and len(value) < self.min_length:
            return False
        if self.max_length is not None and len(value) > self.max_length:
            return False
        if self.type == "number":
            number = int(value)
            if self.min is not None and number < self.min:
                return False
            if self.max is not None and number > self.max:
                return False
        return True


@dataclass(frozen=True)
class AskStep:
    """Say an optional *prompt*, then listen for one of *intents* and/or a *slot* value."""

    id: str
    prompt: Template | None
    intents: tuple[Intent, ...]
    no_input: RepromptPolicy
    no_match: RepromptPolicy
    settings: Settings
    mark: Mark
    next: str | None = None
    slot: Slot | None = None
    speech: bool = True
    dtmf: bool = True
    skip_if_set: bool = False

    def intent_for_dtmf(self, digit: str) -> Intent | None:
        """The intent bound to DTMF key *digit*, if any."""
        for intent in self.intents:
            if intent.dtmf == digit:
                return intent
        return None


@dataclass(frozen=True)
class SetStep:
    """Assign variables (each value a template), then continue."""

    id: str
    assignments: tuple[tuple[str, Template], ...]
    settings: Settings
    mark: Mark
    next: str | None = None


@dataclass(frozen=True)
class BranchCase:
    """Go to *goto* when *when* holds."""

    when: Expression
    goto: str
    mark: Mark


@dataclass(frozen=True)
class BranchStep:
    """Take the first case whose condition holds, else continue with *next*."""

    id: str
    cases: tuple[BranchCase, ...]
    settings: Settings
    mark: Mark
    next: str | None = None


@dataclass(frozen=True)
class WebhookStep:
    """Call the integrator's HTTP endpoint; its JSON answer becomes ``<save_as>.<field>``."""

    id: str
    url: Template
    method: str
    headers: tuple[tuple[str, Template], ...]
    query: tuple[tuple[str, Template], ...]
    body: JsonValue
    timeout_ms: int
    retries: int
    retry_backoff_ms: int
    save_as: str
    fields: tuple[str, ...]
    on_failure: str
    settings: Settings
    mark: Mark
    next: str | None = None
    default_body: bool = True


@dataclass(frozen=True)
class OpenWindow:
    """Open on *weekday* (0 = Monday) from *start_min* to *end_min* minutes after midnight."""

    weekday: int
    start_min: int
    end_min: int


@dataclass(frozen=True)
class Holiday:
    """A closed day: every year on *month*-*day* when *year* is None."""

    month: int
    day: int
    year: int | None
    name: str

    def falls_on(self, day: _dt.date) -> bool:
        """True when *day* is this holiday."""
        return (
            day.month == self.month
            and day.day == self.day
            and (self.year is None or day.year == self.year)
        )


@dataclass(frozen=True)
class HoursStep:
    """Business hours: continue with *next* when open, else at *closed* (or *holiday*)."""

    id: str
    timezone: str | None
    windows: tuple[OpenWindow, ...]
    holidays: tuple[Holiday, ...]
    closed: str
    holiday: str | None
    settings: Settings
    mark: Mark
    next: str | None = None

    def status(self, local: _dt.datetime) -> tuple[str, str]:
        """``("open" | "closed" | "holiday", holiday name)`` at local time *local*."""
        for holiday in self.holidays:
            if holiday.falls_on(local.date()):
                return "holiday", holiday.name
        minute = local.hour * 60 + local.minute
        for window in self.windows:
            if window.weekday == local.weekday() and window.start_min <= minute < window.end_min:
                return "open", ""
        return "closed", ""


@dataclass(frozen=True)
class TransferStep:
    """Transfer the call to *to*; on failure continue at *on_failure*.

    *mode* ``blind``: SIP REFER, the agent leaves the call. ``bridged``: the agent dials *to*
    (ringing at most *timeout_ms*) and connects the caller to it.
    """

    id: str
    to: Template
    on_failure: str | None
    settings: Settings
    mark: Mark
    mode: str = "blind"
    timeout_ms: int = 30_000


@dataclass(frozen=True)
class QueueStep:
    """Say *announce*, then transfer (blind) to the queue at *uri*."""

    id: str
    name: str
    uri: Template
    announce: Template | None
    on_failure: str | None
    settings: Settings
    mark: Mark


@dataclass(frozen=True)
class GotoStep:
    """Jump to *step* of this flow, or enter *flow* (at *step* or its start) as a sub-flow."""

    id: str
    step: str | None
    flow: str | None
    settings: Settings
    mark: Mark


@dataclass(frozen=True)
class ReturnStep:
    """Leave a sub-flow: continue after the ``goto`` that entered it."""

    id: str
    settings: Settings
    mark: Mark


@dataclass(frozen=True)
class HangupStep:
    """End the call, recording *reason*."""

    id: str
    reason: str
    settings: Settings
    mark: Mark


@dataclass(frozen=True)
class RecordStep:
    """Record the caller to a WAV file (name from *file*) for at most *max_ms*."""

    id: str
    file: Template
    max_ms: int
    beep: bool
    prompt: Template | None
    terminator: str | None
    save_as: str
    on_failure: str | None
    settings: Settings
    mark: Mark
    next: str | None = None


@dataclass(frozen=True)
class ModelStep:
    """Ask the region's dialogue model for a reply to *input*; store (and say) it."""

    id: str
    instructions: Template | None
    input: Template
    save_as: str
    say: bool
    timeout_ms: int
    on_failure: str
    settings: Settings
    mark: Mark
    next: str | None = None
    #: functions of the flow offered to the model (see agent.dialplan.model_tools)
    tools: tuple["ModelTool", ...] = ()
    #: most tool calls answered in one turn before the model must reply in words
    max_tool_rounds: int = 3


@dataclass(frozen=True)
class ModelTool:
    """A step of the flow (webhook, transfer, queue or hangup) the model may call by its id."""

    step: str
    description: str
    #: JSON schema of the arguments (an object)
    parameters: JsonValue
    mark: Mark


Step = Union[
    SayStep, AskStep, SetStep, BranchStep, WebhookStep, HoursStep, TransferStep, QueueStep,
    GotoStep, ReturnStep, HangupStep, RecordStep, ModelStep,
]


@dataclass(frozen=True)
class Flow:
    """A named, ordered list of steps; execution starts at the first."""

    name: str
    settings: Settings
    steps: tuple[Step, ...]
    mark: Mark
    variables: tuple[tuple[str, Template], ...] = ()
    needs_model: bool = False
    _index: Mapping[str, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        index = {step.id: i for i, step in enumerate(self.steps)}
        object.__setattr__(self, "_index", MappingProxyType(index))

    def step(self, step_id: str) -> Step:
        """The step called *step_id* (KeyError when there is none)."""
        return self.steps[self._index[step_id]]

    def has_step(self, step_id: str) -> bool:
        """True when the flow has a step called *step_id*."""
        return step_id in self._index

    def following(self, step: Step) -> str | None:
        """Id of the step written after *step*, or None at the end of the flow."""
        i = self._index[step.id] + 1
        return self.steps[i].id if i < len(self.steps) else None

    def successor(self, step: Step) -> str | None:
        """Where a step continues: its ``next`` if given, else the following step."""
        given = getattr(step, "next", None)
        return given if given is not None else self.following(step)

    def consequence(self, step_id: str | None) -> str | None:
        """:data:`END` or :data:`TRANSFER` when running from *step_id* reaches a ``hangup`` or
        a ``transfer``/``queue`` step before anything else happens (only ``say``, ``set`` and
        ``goto`` within the flow on the way); None otherwise (the flow's end included)."""
        for _ in range(len(self.steps) + 1):
            if step_id is None:
                return None
            step = self.step(step_id)
            if isinstance(step, HangupStep):
                return END
            if isinstance(step, (TransferStep, QueueStep)):
                return TRANSFER
            if isinstance(step, (SayStep, SetStep)):
                step_id = self.successor(step)
            elif isinstance(step, GotoStep) and step.flow is None:
                step_id = step.step
            else:
                return None
        return None  # a loop of say/set/goto steps


@dataclass(frozen=True)
class Route:
    """Send calls whose called (and optionally calling) number match to *flow*."""

    flow: str
    number: NumberPattern | None
    caller: NumberPattern | None
    mark: Mark
    priority: int = DEFAULT_ROUTE_PRIORITY

    @property
    def is_default(self) -> bool:
        """True for a route without patterns: it takes every call that reaches it."""
        return self.number is None and self.caller is None

    def matches(self, called: str, caller: str) -> bool:
        """True when this route applies to a call from *caller* to *called*."""
        if self.number is not None and not self.number.matches(called):
            return False
        if self.caller is not None and not self.caller.matches(caller):
            return False
        return True


@dataclass(frozen=True)
class Dialplan:
    """Routes (by priority, then as written; first match wins) and the flows they lead to.

    *digest* is a hash of the source texts: two loads of the same files have the same digest.
    """

    routes: tuple[Route, ...]
    flows: Mapping[str, Flow]
    sources: tuple[str, ...]
    digest: str = ""
    variables: tuple[tuple[str, Template], ...] = ()

    def route(self, called: str, caller: str) -> str | None:
        """Name of the flow for a call from *caller* to *called*, or None (answer 404)."""
        for route in self.routes:
            if route.matches(called, caller):
                return route.flow
        return None

    def flow(self, name: str) -> Flow:
        """The flow called *name* (KeyError when there is none)."""
        return self.flows[name]

    def required_config(self) -> frozenset[str]:
        """Server configuration keys that templates reference (``config.<key>``)."""
        keys: set[str] = set()
        for template in _templates(self):
            for name in template.variables:
                if name.startswith(CONFIG_PREFIX):
                    keys.add(name[len(CONFIG_PREFIX) :])
        return frozenset(keys)

    def reachable_flows(self, flow: str) -> list[Flow]:
        """*flow* and every flow it may enter through ``goto`` (directly or not)."""
        seen: dict[str, Flow] = {}
        pending = [flow]
        while pending:
            name = pending.pop()
            if name in seen or name not in self.flows:
                continue
            current = seen[name] = self.flows[name]
            pending.extend(s.flow for s in current.steps if isinstance(s, GotoStep) and s.flow)
        return list(seen.values())

    def needs_model(self, flow: str) -> bool:
        """True when *flow*, or a flow it enters, has a ``model`` step."""
        return any(f.needs_model for f in self.reachable_flows(flow))

    def phrase_hints(self, flow: str) -> tuple[str, ...]:
        """What a caller of *flow* is expected to say: the speech recogniser's phrase hints.

        The examples and synonyms of every spoken intent and the words of every slot type
        in the flows a call may reach. Empty -- open vocabulary -- when the call may meet a
        ``model`` step or an ask for free ``text``, where callers say anything.
        """
        phrases: dict[str, None] = {}
        for current in self.reachable_flows(flow):
            if current.needs_model:
                return ()
            for step in current.steps:
                if not isinstance(step, AskStep) or not step.speech:
                    continue
                kinds = [step.slot.type] if step.slot is not None else []
                for intent in step.intents:
                    phrases.update(dict.fromkeys(intent.examples))
                    for word, alternatives in intent.synonyms:
                        phrases.update(dict.fromkeys((word, *alternatives)))
                    kinds.extend(kind for _, kind in intent.slots)
                for kind in kinds:
                    if kind == "text":
                        return ()
                    phrases.update(dict.fromkeys(slot_phrases(kind)))
        return tuple(phrases)


def _templates(dialplan: Dialplan) -> Iterator[Template]:
    for _, template, _ in _spoken_templates(dialplan):
        yield template
    for flow in dialplan.flows.values():
        for step in flow.steps:
            if isinstance(step, TransferStep):
                yield step.to
            elif isinstance(step, QueueStep):
                yield step.uri
            elif isinstance(step, SetStep):
                yield from (value for _, value in step.assignments)
            elif isinstance(step, WebhookStep):
                yield step.url
                yield from (value for _, value in step.headers + step.query)
                yield from _json_templates(step.body)
            elif isinstance(step, RecordStep):
                yield step.file
            elif isinstance(step, ModelStep):
                yield step.input
                if step.instructions is not None:
                    yield step.instructions


def _json_templates(value: JsonValue) -> Iterator[Template]:
    if isinstance(value, Template):
        yield value
    elif isinstance(value, JsonObject):
        for _, item in value.items:
            yield from _json_templates(item)
    elif isinstance(value, JsonArray):
        for item in value.items:
            yield from _json_templates(item)


def _spoken_templates(dialplan: Dialplan) -> Iterator[tuple[Step, Template, Settings]]:
    for flow in dialplan.flows.values():
        for step in flow.steps:
            if isinstance(step, SayStep):
                yield step, step.text, step.settings
            elif isinstance(step, AskStep):
                if step.prompt is not None:
                    yield step, step.prompt, step.settings
                for policy in (step.no_input, step.no_match):
                    for reprompt in policy.reprompts:
                        yield step, reprompt, step.settings
                kinds = {flow.consequence(i.goto or flow.successor(step))
                         for i in step.intents if step.speech}
                if END in kinds:
                    yield step, step.settings.confirm.end_prompt, step.settings
                if TRANSFER in kinds:
                    yield step, step.settings.confirm.transfer_prompt, step.settings
                if step.settings.escalation is not None:
                    offer = step.no_match.offer or step.settings.no_match
                    yield step, offer.prompt, step.settings
                if step.speech and step.settings.hold.enabled:
                    yield step, step.settings.hold.prompt, step.settings
            elif isinstance(step, QueueStep) and step.announce is not None:
                yield step, step.announce, step.settings
            elif isinstance(step, RecordStep) and step.prompt is not None:
                yield step, step.prompt, step.settings


def static_prompts(dialplan: Dialplan) -> set[tuple[str, str]]:
    """Every prompt without placeholders as ``(text, voice)``, for synthesis at load time."""
    return {
        (template.source, settings.voice)
        for _, template, settings in _spoken_templates(dialplan)
        if template.is_static and template.source.strip()
    }


def step_targets(flow: Flow, step: Step) -> list[tuple[str | None, str | None]]:
    """Where *step* may lead, as ``(flow name, step id)``; ``(None, None)`` ends or returns.

    A sub-flow entry lists both the sub-flow and the step after the ``goto`` (its return point).
    """
    here = flow.name
    end: tuple[str | None, str | None] = (None, None)

    def at(step_id: str | None) -> tuple[str | None, str | None]:
        return (here, step_id) if step_id is not None else end

    successor = at(flow.successor(step))
    following = at(flow.following(step))
    if isinstance(step, AskStep):
        falls_through = step.slot is not None or any(i.goto is None for i in step.intents)
        targets = [successor] if falls_through else []
        targets += [at(i.goto) for i in step.intents if i.goto is not None]
        targets += [at(step.no_input.then), at(step.no_match.then)]
        return targets
    if isinstance(step, BranchStep):
        return [at(case.goto) for case in step.cases] + [successor]
    if isinstance(step, WebhookStep):
        return [successor, at(step.on_failure)]
    if isinstance(step, HoursStep):
        return [successor, at(step.closed)] + ([at(step.holiday)] if step.holiday else [])
    if isinstance(step, (TransferStep, QueueStep)):
        return [end, at(step.on_failure) if step.on_failure else following]
    if isinstance(step, RecordStep):
        return [successor, at(step.on_failure) if step.on_failure else successor]
    if isinstance(step, ModelStep):
        return [successor, at(step.on_failure)] + [at(tool.step) for tool in step.tools]
    if isinstance(step, GotoStep):
        if step.flow is None:
            return [at(step.step)]
        return [(step.flow, step.step), following]
    if isinstance(step, (ReturnStep, HangupStep)):
        return [end]
    return [successor]


# --------------------------------------------------------------------------- loading
# The loader builds these classes, so it is imported when called.


def load_dialplan(path: str) -> Dialplan:
    """Load and validate one dialplan file; raise :class:`DialplanError` on any problem."""
    from agent.dialplan.loader import load_dialplans as load

    return load([path])


def load_dialplans(paths: Sequence[str]) -> Dialplan:
    """Load several files as one dialplan: routes in file order, flows merged by name.

    Flow names must be unique across the files; a route or step may refer to a flow or step
    defined in any of them. Raise :class:`DialplanError` listing every problem, or ValueError
    when *paths* is empty.
    """
    from agent.dialplan.loader import load_dialplans as load

    return load(paths)


def parse_dialplan(text: str, path: str = "<string>") -> Dialplan:
    """Load a dialplan from YAML *text*; *path* names it in error messages."""
    from agent.dialplan.loader import parse_dialplan_texts

    return parse_dialplan_texts([(path, text)])


def parse_dialplan_texts(sources: Sequence[tuple[str, str]]) -> Dialplan:
    """Load several ``(path, text)`` sources as one dialplan (see :func:`load_dialplans`)."""
    from agent.dialplan.loader import parse_dialplan_texts as parse

    return parse(sources)

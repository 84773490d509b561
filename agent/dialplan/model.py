"""Dialplan loading: YAML files in, validated frozen objects out.

A dialplan says which called numbers go to which flow and what each flow does, step by step
(``say``, ``ask``, ``set``, ``branch``, ``webhook``, ``hours``, ``transfer``, ``queue``, ``goto``,
``return``, ``hangup``, ``record``, ``model``). See ``docs/dialplans.md`` for the language.

Files are read once, at the edge, with PyYAML's node composer so every problem is reported as
``path:line:column: message`` (1-based, as editors count). Loading checks, in one pass, and
collects every problem found into one :class:`DialplanError`:

* structure, against the published JSON Schema (``dialplans/schema.json``, see
  :mod:`agent.dialplan.schema`) and the loader's own stricter reading (unknown keys are errors);
* references: every ``goto``/``next``/``then``/``on_failure`` target, route flow, variable used
  in a template or condition, and intent named in a condition exists;
* the shape of each flow: no step that nothing leads to, no loop that nothing leads out of;
* prompts: every template and condition parses.

The result, :class:`Dialplan`, is made of frozen dataclasses; the dialogue engine never sees a
raw dict. Its :attr:`Dialplan.digest` identifies the exact text it was loaded from.

Public API: :func:`load_dialplan`, :func:`load_dialplans`, :func:`parse_dialplan`,
:func:`static_prompts`, :func:`prompt_cache_key`, :func:`parse_template`,
:meth:`NumberPattern.parse` and the dataclasses below.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agent.dialplan.intents import SLOT_TYPES, slot_phrases
from agent.dialplan.templates import (
    Expression,
    JsonArray,
    JsonObject,
    JsonValue,
    NumberPattern,
    Placeholder,
    Template,
    TemplateError,
    Variable,
    parse_expression,
    parse_template,
)

__all__ = [
    "AskStep",
    "BUILTIN_VARIABLES",
    "BranchCase",
    "BranchStep",
    "CALL_VARIABLES",
    "DEFAULT_SETTINGS",
    "Dialplan",
    "DialplanError",
    "DialplanIssue",
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

SUPPORTED_VERSIONS = (1,)

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

DTMF_KEYS = frozenset("0123456789*#")

MIN_NO_INPUT_TIMEOUT_MS = 100
MAX_NO_INPUT_TIMEOUT_MS = 120_000

DEFAULT_REPROMPT_COUNT = 2
"""Without a ``no_input``/``no_match`` block, an ask repeats its prompt this many times."""

DEFAULT_ROUTE_PRIORITY = 100

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_REASON = re.compile(r"[A-Za-z0-9_.-]+\Z")
_VOICE = re.compile(r"[A-Za-z0-9_.-]+\Z")
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*\Z")
_MODEL_PIN = re.compile(r"[A-Za-z0-9_.:@/+-]+\Z")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+\Z")
_FILE_TEXT = re.compile(r"[A-Za-z0-9_.+-]*\Z")


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class SourceMark:
    """A position in a dialplan file, 1-based line and column."""

    path: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class DialplanIssue:
    """One problem found while loading a dialplan."""

    mark: SourceMark
    message: str

    def __str__(self) -> str:
        return f"{self.mark}: {self.message}"


class DialplanError(ValueError):
    """A dialplan could not be loaded; ``str()`` is one ``path:line:col: message`` per line."""

    def __init__(self, errors: Sequence[DialplanIssue]) -> None:
        self.errors: list[DialplanIssue] = list(errors)
        super().__init__("\n".join(str(issue) for issue in self.errors))


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
class Settings:
    """How prompts are spoken and input awaited; set per dialplan file, flow or step.

    ``barge_in`` lets caller speech interrupt prompts, ``dtmf_barge_in`` lets keys do it
    (YAML ``barge_in: true | false | dtmf``). ``max_call_duration_s`` applies to whole flows.
    """

    voice: str = "kal16"
    barge_in: bool = True
    no_input_timeout_ms: int = 5000
    dtmf_barge_in: bool = True
    language: str = "en-US"
    asr_model: str | None = None
    endpointing: Endpointing = Endpointing()
    max_call_duration_s: int | None = None
    timezone: str = "UTC"
    inter_digit_timeout_ms: int = 3000


DEFAULT_SETTINGS = Settings()


@dataclass(frozen=True)
class SayStep:
    """Speak *text*, then continue with *next* (or the following step)."""

    id: str
    text: Template
    settings: Settings
    mark: SourceMark
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
    mark: SourceMark
    synonyms: tuple[tuple[str, tuple[str, ...]], ...] = ()
    slots: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RepromptPolicy:
    """Reprompts for silence or unrecognised input; after *retries* of them, go to *then*.

    ``retries`` None means one per reprompt; when it is larger, the last reprompt repeats.
    ``then`` None ends the call (reason ``no_input`` or ``no_match``).
    """

    reprompts: tuple[Template, ...]
    then: str | None
    retries: int | None = None

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
    mark: SourceMark
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
    mark: SourceMark
    next: str | None = None


@dataclass(frozen=True)
class BranchCase:
    """Go to *goto* when *when* holds."""

    when: Expression
    goto: str
    mark: SourceMark


@dataclass(frozen=True)
class BranchStep:
    """Take the first case whose condition holds, else continue with *next*."""

    id: str
    cases: tuple[BranchCase, ...]
    settings: Settings
    mark: SourceMark
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
    mark: SourceMark
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
    mark: SourceMark
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
    mark: SourceMark
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
    mark: SourceMark


@dataclass(frozen=True)
class GotoStep:
    """Jump to *step* of this flow, or enter *flow* (at *step* or its start) as a sub-flow."""

    id: str
    step: str | None
    flow: str | None
    settings: Settings
    mark: SourceMark


@dataclass(frozen=True)
class ReturnStep:
    """Leave a sub-flow: continue after the ``goto`` that entered it."""

    id: str
    settings: Settings
    mark: SourceMark


@dataclass(frozen=True)
class HangupStep:
    """End the call, recording *reason*."""

    id: str
    reason: str
    settings: Settings
    mark: SourceMark


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
    mark: SourceMark
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
    mark: SourceMark
    next: str | None = None


Step = Union[
    SayStep, AskStep, SetStep, BranchStep, WebhookStep, HoursStep, TransferStep, QueueStep,
    GotoStep, ReturnStep, HangupStep, RecordStep, ModelStep,
]

_CONTINUING = (SayStep, AskStep, SetStep, BranchStep, WebhookStep, HoursStep, RecordStep, ModelStep)


@dataclass(frozen=True)
class Flow:
    """A named, ordered list of steps; execution starts at the first."""

    name: str
    settings: Settings
    steps: tuple[Step, ...]
    mark: SourceMark
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


@dataclass(frozen=True)
class Route:
    """Send calls whose called (and optionally calling) number match to *flow*."""

    flow: str
    number: NumberPattern | None
    caller: NumberPattern | None
    mark: SourceMark
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
        return [successor, at(step.on_failure)]
    if isinstance(step, GotoStep):
        if step.flow is None:
            return [at(step.step)]
        return [(step.flow, step.step), following]
    if isinstance(step, (ReturnStep, HangupStep)):
        return [end]
    return [successor]


# --------------------------------------------------------------------------- loading


def load_dialplan(path: str) -> Dialplan:
    """Load and validate one dialplan file; raise :class:`DialplanError` on any problem."""
    return load_dialplans([path])


def load_dialplans(paths: Sequence[str]) -> Dialplan:
    """Load several files as one dialplan: routes in file order, flows merged by name.

    Flow names must be unique across the files; a route or step may refer to a flow or step
    defined in any of them. Raise :class:`DialplanError` listing every problem, or ValueError
    when *paths* is empty.
    """
    if not paths:
        raise ValueError("no dialplan files given")
    sources: list[tuple[str, str]] = []
    issues: list[DialplanIssue] = []
    for path in paths:
        name = str(path)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            issues.append(
                DialplanIssue(SourceMark(name, 1, 1), f"cannot read file: {exc.strerror}")
            )
            continue
        try:
            sources.append((name, data.decode("utf-8")))
        except UnicodeDecodeError as exc:
            issues.append(
                DialplanIssue(SourceMark(name, 1, 1), f"file is not UTF-8 text: {exc.reason}")
            )
    if issues:
        raise DialplanError(issues)
    return _build(sources)


def parse_dialplan(text: str, path: str = "<string>") -> Dialplan:
    """Load a dialplan from YAML *text*; *path* names it in error messages."""
    return _build([(path, text)])


def parse_dialplan_texts(sources: Sequence[tuple[str, str]]) -> Dialplan:
    """Load several ``(path, text)`` sources as one dialplan (see :func:`load_dialplans`)."""
    if not sources:
        raise ValueError("no dialplan files given")
    return _build(sources)


@dataclass
class _Reference:
    """A step id named somewhere in a flow, checked once all steps are known."""

    flow: str
    target: str
    key: str
    mark: SourceMark


@dataclass
class _FileResult:
    routes: list[Route] = field(default_factory=list)
    flows: dict[str, Flow] = field(default_factory=dict)
    references: list[_Reference] = field(default_factory=list)
    route_marks: list[tuple[str, SourceMark]] = field(default_factory=list)
    flow_refs: list[tuple[str, str, SourceMark]] = field(default_factory=list)
    # Names declared, even by flows or steps that had errors (so those errors do not cascade
    # into "unknown step" reports wherever the broken step is referred to).
    declared_flows: set[str] = field(default_factory=set)
    declared_steps: dict[str, set[str]] = field(default_factory=dict)
    variables: set[str] = field(default_factory=set)
    prefixes: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    variable_uses: list[tuple[str, SourceMark, str]] = field(default_factory=list)
    intents: set[str] = field(default_factory=set)
    intent_uses: list[tuple[str, SourceMark]] = field(default_factory=list)
    defaults: list[tuple[str, Template]] = field(default_factory=list)
    had_errors: bool = False


def _build(sources: Sequence[tuple[str, str]]) -> Dialplan:
    issues: list[DialplanIssue] = []
    routes: list[Route] = []
    flows: dict[str, Flow] = {}
    merged = _FileResult()
    for path, text in sources:
        parser = _FileParser(path)
        result = parser.parse(text)
        issues.extend(parser.issues)
        if result is None:
            merged.had_errors = True
            continue
        merged.had_errors = merged.had_errors or bool(parser.issues)
        routes.extend(result.routes)
        merged.route_marks.extend(result.route_marks)
        merged.references.extend(result.references)
        merged.flow_refs.extend(result.flow_refs)
        merged.declared_flows.update(result.declared_flows)
        for name, ids in result.declared_steps.items():
            merged.declared_steps.setdefault(name, set()).update(ids)
        merged.variables.update(result.variables)
        for prefix, fields in result.prefixes.items():
            known = merged.prefixes.get(prefix, ())
            merged.prefixes[prefix] = (
                None if fields is None or known is None else tuple(known) + tuple(fields)
            )
        merged.variable_uses.extend(result.variable_uses)
        merged.intents.update(result.intents)
        merged.intent_uses.extend(result.intent_uses)
        merged.defaults.extend(result.defaults)
        for name, flow in result.flows.items():
            if name in flows:
                issues.append(
                    DialplanIssue(
                        flow.mark,
                        f"duplicate flow {name!r}; first defined at {flows[name].mark}",
                    )
                )
            else:
                flows[name] = flow

    declared_flows = merged.declared_flows
    for target, mark in merged.route_marks:
        if target not in declared_flows:
            issues.append(DialplanIssue(mark, "'flow' " + _unknown("flow", target, declared_flows)))
    for target, key, mark in merged.flow_refs:
        if target not in declared_flows:
            issues.append(
                DialplanIssue(mark, f"'{key}' " + _unknown("flow", target, declared_flows))
            )
    for ref in merged.references:
        ids = merged.declared_steps.get(ref.flow, set())
        if ref.target not in ids:
            if ref.flow not in declared_flows:
                continue  # reported as an unknown flow
            where = f" in flow {ref.flow!r}"
            issues.append(
                DialplanIssue(ref.mark, f"'{ref.key}' " + _unknown("step", ref.target, ids, where))
            )
    issues.extend(_check_variables(merged))
    issues.extend(_check_intents(merged))
    issues.extend(_check_routes(routes))
    if not issues and not merged.had_errors and routes:
        # The shape of the flows is only meaningful once every reference resolves.
        issues.extend(_check_reachability(routes, flows))
        issues.extend(_check_loops(flows))
    if sources and not routes and not issues:
        issues.append(
            DialplanIssue(
                SourceMark(sources[0][0], 1, 1), "no routes: add at least one entry under 'routes'"
            )
        )
    if issues:
        raise DialplanError(_sorted_unique(issues, [path for path, _ in sources]))
    ordered = tuple(sorted(routes, key=lambda r: r.priority))  # stable: file order kept
    digest = hashlib.sha256()
    for path, text in sources:
        digest.update(path.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
    return Dialplan(
        ordered,
        MappingProxyType(dict(flows)),
        tuple(p for p, _ in sources),
        digest.hexdigest()[:16],
        tuple(merged.defaults),
    )


def _unknown(what: str, name: str, known: Iterable[str], where: str = "") -> str:
    names = sorted(known)
    listed = ", ".join(names) if names else "(none)"
    message = f"refers to unknown {what} {name!r}{where}; expected one of: {listed}"
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def _variable_problem(name: str, merged: _FileResult) -> str | None:
    """Why *name* is not a variable the dialplan can read, or None when it is."""
    if name in BUILTIN_VARIABLES or name in merged.variables:
        return None
    if name.startswith(CONFIG_PREFIX):
        return None
    if name == "config":
        return "expected 'config.<key>', found 'config' alone"
    for prefix, fields in merged.prefixes.items():
        if name.startswith(prefix + "."):
            if fields is None or name[len(prefix) + 1 :] in fields:
                return None
            listed = ", ".join(f"{prefix}.{f}" for f in fields)
            return (
                f"unknown variable {name!r}: the webhook saving as {prefix!r} declares only "
                f"these fields: {listed}"
            )
    known = sorted(BUILTIN_VARIABLES | merged.variables)
    message = (
        f"unknown variable {name!r}; no step sets it and it is not a call variable "
        "(caller, called, call_id, region, now.<part>, intent, input, ...) or config.<key>"
    )
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def _check_variables(merged: _FileResult) -> Iterator[DialplanIssue]:
    for name, mark, what in merged.variable_uses:
        problem = _variable_problem(name, merged)
        if problem is not None:
            yield DialplanIssue(mark, f"in {what}: {problem}")


def _check_intents(merged: _FileResult) -> Iterator[DialplanIssue]:
    for name, mark in merged.intent_uses:
        if name not in merged.intents:
            yield DialplanIssue(mark, "condition " + _unknown("intent", name, merged.intents))


def _check_routes(routes: Sequence[Route]) -> Iterator[DialplanIssue]:
    """Report routes that an earlier route (by priority, then order) always takes first."""
    ordered = sorted(routes, key=lambda r: r.priority)
    for i, route in enumerate(ordered):
        for earlier in ordered[:i]:
            if _shadows(earlier, route):
                yield DialplanIssue(
                    route.mark,
                    f"this route is never used: the route at {earlier.mark} takes every call "
                    "it would match (give this route a lower 'priority' or move it first)",
                )
                break


def _shadows(earlier: Route, later: Route) -> bool:
    def covers(a: NumberPattern | None, b: NumberPattern | None) -> bool:
        if a is None:
            return True
        if b is None:
            return False
        if b.is_literal:
            return a.matches(b.source)
        return a.source == b.source

    return covers(earlier.number, later.number) and covers(earlier.caller, later.caller)


def _check_reachability(routes: Sequence[Route], flows: Mapping[str, Flow]) -> list[DialplanIssue]:
    issues: list[DialplanIssue] = []
    reached: set[tuple[str, str]] = set()
    pending: list[tuple[str, str]] = []
    used_flows: set[str] = set()

    def visit(flow_name: str | None, step_id: str | None) -> None:
        if flow_name is None or flow_name not in flows:
            return
        flow = flows[flow_name]
        used_flows.add(flow_name)
        target = step_id if step_id is not None else flow.steps[0].id
        if flow.has_step(target) and (flow_name, target) not in reached:
            reached.add((flow_name, target))
            pending.append((flow_name, target))

    for route in routes:
        visit(route.flow, None)
    while pending:
        flow_name, step_id = pending.pop()
        flow = flows[flow_name]
        for target_flow, target_step in step_targets(flow, flow.step(step_id)):
            visit(target_flow, target_step)
    for name, flow in flows.items():
        if name not in used_flows:
            issues.append(
                DialplanIssue(
                    flow.mark, f"flow {name!r} is never used: no route or 'goto' leads to it"
                )
            )
            continue
        for step in flow.steps:
            if (name, step.id) not in reached:
                label = f"step {step.id!r}" if not step.id.startswith("#") else "this step"
                issues.append(
                    DialplanIssue(
                        step.mark,
                        f"{label} in flow {name!r} is never reached: no earlier step, 'goto', "
                        "'next' or 'then' leads to it",
                    )
                )
    return issues


def _check_loops(flows: Mapping[str, Flow]) -> list[DialplanIssue]:
    """Report loops that nothing leads out of (they would run forever).

    Each strongly connected group of steps from which no path reaches the end of the call is
    reported once, at the member written first.
    """
    nodes = [(name, step.id) for name, flow in flows.items() for step in flow.steps]
    edges: dict[tuple[str, str], list[tuple[str, str] | None]] = {}
    for name, flow in flows.items():
        for step in flow.steps:
            out: list[tuple[str, str] | None] = []
            for target_flow, target_step in step_targets(flow, step):
                if target_flow is None or target_flow not in flows:
                    out.append(None)
                else:
                    entry = target_step or flows[target_flow].steps[0].id
                    out.append((target_flow, entry))
            if isinstance(step, GotoStep) and step.flow is not None:
                out.append(None)  # the sub-flow may hang up or transfer; judged on its own
            edges[(name, step.id)] = out
    components = _strongly_connected(nodes, edges)
    issues: list[DialplanIssue] = []
    for component in components:
        members = set(component)
        looped = len(component) > 1 or any(e == component[0] for e in edges[component[0]])
        if not looped:
            continue
        leaves = any(e is None or e not in members for n in component for e in edges[n])
        if leaves:
            continue
        first = min(component, key=lambda n: (flows[n[0]].mark.path, flows[n[0]].step(n[1]).mark.line))
        cycle = [first]
        current = first
        while True:
            following = next(e for e in edges[current] if e in members and e is not None)
            if following in cycle:
                break
            cycle.append(following)
            current = following
        names = " -> ".join(step_id for _, step_id in cycle + [cycle[0]])
        step = flows[first[0]].step(first[1])
        if all(isinstance(flows[f].step(s), SayStep) for f, s in component):
            message = f"steps {names} repeat forever without asking the caller anything"
        else:
            message = (
                f"steps {names} loop forever: nothing in the loop leads out of it "
                "(add a way out such as a hangup, an ask's 'then' or a branch that leaves)"
            )
        issues.append(DialplanIssue(step.mark, message))
    return issues


def _strongly_connected(
    nodes: Sequence[tuple[str, str]], edges: Mapping[tuple[str, str], list[tuple[str, str] | None]]
) -> list[list[tuple[str, str]]]:
    """Tarjan's algorithm, iterative."""
    index: dict[tuple[str, str], int] = {}
    low: dict[tuple[str, str], int] = {}
    on_stack: set[tuple[str, str]] = set()
    stack: list[tuple[str, str]] = []
    result: list[list[tuple[str, str]]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[tuple[str, str], int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            successors = [e for e in edges.get(node, []) if e is not None and e in edges]
            if child > 0:
                low[node] = min(low[node], low[successors[child - 1]])
            pushed = False
            for i in range(child, len(successors)):
                target = successors[i]
                if target not in index:
                    work.append((node, i + 1))
                    work.append((target, 0))
                    pushed = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if pushed:
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component)
    return result


def _sorted_unique(issues: Sequence[DialplanIssue], paths: Sequence[str]) -> list[DialplanIssue]:
    order = {path: i for i, path in enumerate(paths)}
    unique = list(dict.fromkeys(issues))
    return sorted(
        unique, key=lambda i: (order.get(i.mark.path, len(order)), i.mark.line, i.mark.column)
    )


_T = TypeVar("_T")
_Parsed = TypeVar("_Parsed", Template, Expression)

_TAG_NAMES = {
    "tag:yaml.org,2002:str": "a string",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a timestamp",
}
_STRINGLIKE_TAGS = frozenset(
    [
        "tag:yaml.org,2002:str",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool",
    ]
)
_NULL = "tag:yaml.org,2002:null"

_TOP_KEYS = ("version", "description", "settings", "variables", "routes", "flows")
_ROUTE_KEYS = ("number", "caller", "flow", "priority")
_FLOW_KEYS = ("description", "settings", "variables", "needs_model", "steps")
_SETTINGS_KEYS = (
    "voice", "barge_in", "no_input_timeout_ms", "language", "asr_model", "endpointing",
    "max_call_duration_s", "timezone", "inter_digit_timeout_ms",
)
_ENDPOINTING_KEYS = ("end_silence_ms", "fast_end_silence_ms", "max_speech_ms")
_STEP_KINDS = (
    "say", "ask", "set", "branch", "webhook", "hours", "transfer", "queue", "goto", "return",
    "hangup", "record", "model",
)
_NEXT_KINDS = ("say", "ask", "set", "branch", "webhook", "hours", "record", "model")
_STEP_KEYS = ("id", "settings", "next") + _STEP_KINDS
_SAY_KEYS = ("text", "voice", "barge_in")
_ASK_KEYS = ("prompt", "intents", "slot", "input", "skip_if_set", "no_input", "no_match")
_INTENT_KEYS = ("examples", "synonyms", "dtmf", "slots", "goto")
_SLOT_KEYS = ("name", "type", "min_length", "max_length", "min", "max", "terminator")
_POLICY_KEYS = ("reprompts", "retries", "then")
_CASE_KEYS = ("when", "goto")
_WEBHOOK_KEYS = (
    "url", "method", "headers", "query", "body", "timeout_ms", "retries", "retry_backoff_ms",
    "save_as", "fields", "on_failure",
)
_HOURS_KEYS = ("timezone", "open", "holidays", "closed", "holiday")
_HOLIDAY_KEYS = ("date", "name")
_TRANSFER_KEYS = ("to", "mode", "timeout_ms", "on_failure")
_QUEUE_KEYS = ("name", "uri", "announce", "on_failure")
_GOTO_KEYS = ("flow", "step")
_HANGUP_KEYS = ("reason",)
_RECORD_KEYS = ("file", "max_ms", "beep", "prompt", "terminator", "save_as", "on_failure")
_MODEL_KEYS = ("instructions", "input", "save_as", "say", "timeout_ms", "on_failure")

_WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_ALIASES = {
    "daily": tuple(range(7)), "weekdays": tuple(range(5)), "weekends": (5, 6),
    **{name: (i,) for i, name in enumerate(_WEEKDAY_NAMES)},
    **{full: (i,) for i, full in enumerate(
        ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))},
}
_TIME_RANGE = re.compile(r"(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\Z")

_Entries = dict[str, tuple[ScalarNode, Node]]
_Ref = Callable[[Node, str], Union[str, None]]


def _id_node(step: Node) -> ScalarNode | None:
    """The scalar value of a step's ``id`` key, if it has one."""
    if isinstance(step, MappingNode):
        for key_node, value_node in step.value:
            if isinstance(key_node, ScalarNode) and key_node.value == "id":
                return value_node if isinstance(value_node, ScalarNode) else None
    return None


def _describe(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    assert isinstance(node, ScalarNode)
    if node.tag == _NULL:
        return "nothing (null)"
    return f"{_TAG_NAMES.get(node.tag, node.tag)} {node.value!r}"


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL


class _FileParser:
    """Turns one file's YAML node tree into model objects, collecting issues as it goes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.issues: list[DialplanIssue] = []
        self._constructor = SafeConstructor()
        self.result = _FileResult()
        self._flow_name = ""

    # -- reporting

    def mark(self, node: Node) -> SourceMark:
        return SourceMark(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def error(self, node: Node, message: str) -> None:
        self.issues.append(DialplanIssue(self.mark(node), message))

    # -- typed access

    def mapping(
        self,
        node: Node,
        what: str,
        allowed: Sequence[str],
        required: Sequence[str] = (),
        free_keys: bool = False,
    ) -> _Entries | None:
        """Check *node* is a mapping; return its entries by key (None if it is not a mapping).

        Unknown keys (unless *free_keys*), duplicate keys and missing required keys are reported.
        """
        if not isinstance(node, MappingNode):
            self.error(node, f"expected {what} (a mapping), found {_describe(node)}")
            return None
        try:
            self._constructor.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or node.start_mark
            self.issues.append(
                DialplanIssue(
                    SourceMark(self.path, mark.line + 1, mark.column + 1), str(exc.problem)
                )
            )
            return None
        entries: _Entries = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag not in _STRINGLIKE_TAGS:
                self.error(
                    key_node, f"expected a name as key in {what}, found {_describe(key_node)}"
                )
                continue
            key = key_node.value
            if key in entries:
                first = self.mark(entries[key][0])
                self.error(
                    key_node, f"duplicate key {key!r} in {what}; first given at line {first.line}"
                )
                continue
            if not free_keys and key not in allowed:
                message = f"unknown key {key!r} in {what}; expected one of: {', '.join(allowed)}"
                close = difflib.get_close_matches(key, allowed, n=1)
                if close:
                    message += f" (did you mean {close[0]!r}?)"
                self.error(key_node, message)
                continue
            entries[key] = (key_node, value_node)
        for key in required:
            if key not in entries:
                self.error(node, f"missing required key {key!r} in {what}")
        return entries

    def sequence(self, node: Node, what: str) -> list[Node] | None:
        if not isinstance(node, SequenceNode):
            self.error(node, f"expected {what} (a list), found {_describe(node)}")
            return None
        return list(node.value)

    def string(self, node: Node, what: str) -> str | None:
        if not isinstance(node, ScalarNode) or node.tag not in _STRINGLIKE_TAGS:
            self.error(node, f"expected {what} (a string), found {_describe(node)}")
            return None
        return str(node.value)

    def name(self, node: Node, what: str) -> str | None:
        value = self.string(node, what)
        if value is None:
            return None
        if not _NAME.match(value):
            self.error(
                node,
                f"expected {what} made of letters, digits, '_' and '-' "
                "(not starting with a digit), "
                f"found {value!r}",
            )
            return None
        return value

    def variable_name(self, node: Node, what: str, assigning: bool = False) -> str | None:
        value = self.string(node, what)
        if value is None:
            return None
        if not _VARIABLE_NAME.match(value):
            self.error(
                node,
                f"expected {what} to be a variable name (letters, digits and '_', parts joined "
                f"by '.', such as 'account.status'), found {value!r}",
            )
            return None
        if assigning and (
            value in CALL_VARIABLES
            or value in NOW_VARIABLES
            or value.startswith(CONFIG_PREFIX)
            or value.startswith("now.")
            or value in ("flow", "step")
        ):
            self.error(node, f"{what}: {value!r} is set by the call itself and cannot be changed")
            return None
        return value

    def boolean(self, node: Node, what: str) -> bool | None:
        if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            self.error(node, f"expected {what} (true or false), found {_describe(node)}")
            return None
        return bool(self._constructor.construct_yaml_bool(node))

    def integer(self, node: Node, what: str, low: int, high: int) -> int | None:
        if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:int":
            self.error(node, f"expected {what} (an integer), found {_describe(node)}")
            return None
        value = int(self._constructor.construct_yaml_int(node))
        if not low <= value <= high:
            self.error(node, f"expected {what} between {low} and {high}, found {value}")
            return None
        return value

    def choice(self, node: Node, what: str, choices: Sequence[str]) -> str | None:
        value = self.string(node, what)
        if value is None:
            return None
        if value not in choices:
            message = f"expected {what} to be one of: {', '.join(choices)}, found {value!r}"
            close = difflib.get_close_matches(value, choices, n=1)
            if close:
                message += f" (did you mean {close[0]!r}?)"
            self.error(node, message)
            return None
        return value

    def template(self, node: Node, what: str) -> Template | None:
        return self._parsed(node, what, parse_template)

    def expression(self, node: Node, what: str) -> Expression | None:
        expression = self._parsed(node, what, parse_expression)
        if expression is not None:
            for literal, offset in expression.compared_literals("intent"):
                self.result.intent_uses.append((literal, self.text_mark(node, offset)))
        return expression

    def _parsed(self, node: Node, what: str, parse: Callable[[str], _Parsed]) -> _Parsed | None:
        """*node*'s string parsed by *parse*, its variable references recorded; errors point into the text."""
        text = self.string(node, what)
        if text is None:
            return None
        try:
            parsed = parse(text)
        except TemplateError as exc:
            self.issues.append(DialplanIssue(self.text_mark(node, exc.offset), f"in {what}: {exc}"))
            return None
        for name, offset in parsed.references:
            self.result.variable_uses.append((name, self.text_mark(node, offset), what))
        return parsed

    def text_mark(self, node: Node, offset: int) -> SourceMark:
        """Where character *offset* of a scalar's value is, when the source spells it verbatim.

        That holds for single-line plain scalars and quoted ones without escapes; otherwise the
        scalar's start is the best position available.
        """
        start, end = node.start_mark, node.end_mark
        buffer = getattr(start, "buffer", None)
        if isinstance(node, ScalarNode) and buffer and start.line == end.line:
            raw = buffer[start.pointer : end.pointer]
            quote = 1 if node.style in ("'", '"') else 0
            if node.style in (None, "'", '"') and raw[quote : len(raw) - quote] == node.value:
                return SourceMark(self.path, start.line + 1, start.column + 1 + quote + offset)
        return self.mark(node)

    def optional(
        self, entries: _Entries, key: str, convert: Callable[[Node], _T | None]
    ) -> _T | None:
        entry = entries.get(key)
        return convert(entry[1]) if entry is not None else None

    def ref(self, node: Node, key: str) -> str | None:
        """A step id of the current flow, checked once every step is known."""
        target = self.name(node, f"'{key}'")
        if target is not None:
            self.result.references.append(
                _Reference(self._flow_name, target, key, self.mark(node))
            )
        return target

    # -- document structure

    def parse(self, text: str) -> _FileResult | None:
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
            message = f"YAML syntax error: {exc.problem}"
            if exc.context:
                message += f" ({exc.context}"
                if exc.context_mark is not None:
                    message += f" at line {exc.context_mark.line + 1}"
                message += ")"
            self.issues.append(DialplanIssue(SourceMark(self.path, line, column), message))
            return None
        except yaml.YAMLError as exc:
            self.issues.append(DialplanIssue(SourceMark(self.path, 1, 1), f"YAML error: {exc}"))
            return None
        if root is None:
            self.issues.append(
                DialplanIssue(
                    SourceMark(self.path, 1, 1),
                    "expected a dialplan (a mapping with keys version, routes, flows), "
                    "found an empty document",
                )
            )
            return None
        top = self.mapping(root, "the dialplan", _TOP_KEYS, required=("version",))
        if top is None:
            return None
        result = self.result
        if "version" in top:
            self._version(top["version"][1])
        if "description" in top:
            self.string(top["description"][1], "'description'")
        defaults = DEFAULT_SETTINGS
        if "settings" in top:
            defaults = self.settings(
                top["settings"][1], "the dialplan's settings", DEFAULT_SETTINGS, whole_flow=True
            )
        if "variables" in top:
            result.defaults.extend(self._variables(top["variables"][1]))
        if "routes" in top:
            self._routes(top["routes"][1], result)
        if "flows" in top:
            self._flows(top["flows"][1], defaults, result)
        self._schema_check(root)
        return result

    def _schema_check(self, root: Node) -> None:
        """Validate against dialplans/schema.json; report what the loader did not already."""
        from agent.dialplan.schema import validate_node

        lines = {issue.mark.line for issue in self.issues}
        for line, column, message in validate_node(root):
            if line not in lines:
                self.issues.append(DialplanIssue(SourceMark(self.path, line, column), message))

    def _version(self, node: Node) -> None:
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:int":
            self.error(
                node, f"expected 'version' to be one of: {supported}, found {_describe(node)}"
            )
            return
        value = int(self._constructor.construct_yaml_int(node))
        if value not in SUPPORTED_VERSIONS:
            self.error(node, f"unsupported version {value}; expected one of: {supported}")

    def _variables(self, node: Node) -> list[tuple[str, Template]]:
        entries = self.mapping(node, "'variables'", (), free_keys=True)
        out: list[tuple[str, Template]] = []
        for name, (key_node, value_node) in (entries or {}).items():
            variable = self.variable_name(key_node, "a variable", assigning=True)
            value = self.template(value_node, f"variable {name!r}")
            if variable is not None:
                self.result.variables.add(variable)
            if variable is not None and value is not None:
                out.append((variable, value))
        return out

    def settings(self, node: Node, what: str, base: Settings, whole_flow: bool) -> Settings:
        entries = self.mapping(node, what, _SETTINGS_KEYS)
        if entries is None:
            return base
        voice = self.optional(entries, "voice", lambda n: self._pattern_string(
            n, "'voice'", _VOICE, "a voice name such as 'kal16'"))
        barge_in: bool | None = None
        dtmf_barge_in: bool | None = None
        if "barge_in" in entries:
            value_node = entries["barge_in"][1]
            if isinstance(value_node, ScalarNode) and value_node.value == "dtmf":
                barge_in, dtmf_barge_in = False, True
            else:
                barge_in = self.boolean(value_node, "'barge_in'")
                dtmf_barge_in = barge_in
        timeout = self.optional(
            entries,
            "no_input_timeout_ms",
            lambda n: self.integer(
                n, "'no_input_timeout_ms'", MIN_NO_INPUT_TIMEOUT_MS, MAX_NO_INPUT_TIMEOUT_MS
            ),
        )
        language = self.optional(entries, "language", lambda n: self._pattern_string(
            n, "'language'", _LANGUAGE, "a language tag such as 'en-US'"))
        asr_model = self.optional(entries, "asr_model", lambda n: self._pattern_string(
            n, "'asr_model'", _MODEL_PIN, "a model version such as 'parakeet-1.1b-en-US@2.17'"))
        endpointing = base.endpointing
        if "endpointing" in entries:
            endpointing = self._endpointing(entries["endpointing"][1], base.endpointing)
        max_duration = base.max_call_duration_s
        if "max_call_duration_s" in entries:
            key_node, value_node = entries["max_call_duration_s"]
            if not whole_flow:
                self.error(
                    key_node,
                    "'max_call_duration_s' applies to a whole call; set it in the flow's or the "
                    "file's settings",
                )
            else:
                max_duration = self.integer(value_node, "'max_call_duration_s'", 10, 86_400)
        timezone = self.optional(entries, "timezone", self._timezone)
        inter_digit = self.optional(
            entries,
            "inter_digit_timeout_ms",
            lambda n: self.integer(n, "'inter_digit_timeout_ms'", 500, 30_000),
        )
        return Settings(
            voice=voice if voice is not None else base.voice,
            barge_in=barge_in if barge_in is not None else base.barge_in,
            no_input_timeout_ms=timeout if timeout is not None else base.no_input_timeout_ms,
            dtmf_barge_in=dtmf_barge_in if dtmf_barge_in is not None else base.dtmf_barge_in,
            language=language if language is not None else base.language,
            asr_model=asr_model if asr_model is not None else base.asr_model,
            endpointing=endpointing,
            max_call_duration_s=max_duration,
            timezone=timezone if timezone is not None else base.timezone,
            inter_digit_timeout_ms=(
                inter_digit if inter_digit is not None else base.inter_digit_timeout_ms
            ),
        )

    def _endpointing(self, node: Node, base: Endpointing) -> Endpointing:
        entries = self.mapping(node, "'endpointing'", _ENDPOINTING_KEYS)
        if entries is None:
            return base
        values = {
            key: self.optional(entries, key, lambda n, k=key: self.integer(n, f"'{k}'", 50, 60_000))
            for key in _ENDPOINTING_KEYS
        }
        return Endpointing(
            end_silence_ms=values["end_silence_ms"] or base.end_silence_ms,
            fast_end_silence_ms=values["fast_end_silence_ms"] or base.fast_end_silence_ms,
            max_speech_ms=values["max_speech_ms"] or base.max_speech_ms,
        )

    def _pattern_string(
        self, node: Node, what: str, pattern: re.Pattern[str], expected: str
    ) -> str | None:
        value = self.string(node, what)
        if value is not None and not pattern.match(value):
            self.error(node, f"expected {what} to be {expected}, found {value!r}")
            return None
        return value

    def _timezone(self, node: Node) -> str | None:
        value = self.string(node, "'timezone'")
        if value is None:
            return None
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            self.error(
                node,
                f"unknown timezone {value!r}; expected an IANA name such as 'America/New_York', "
                "'Europe/Paris' or 'UTC'",
            )
            return None
        return value

    def _routes(self, node: Node, result: _FileResult) -> None:
        items = self.sequence(node, "'routes'")
        if items is None:
            return
        for item in items:
            entries = self.mapping(item, "a route", _ROUTE_KEYS, required=("flow",))
            if entries is None:
                continue
            number = self.optional(entries, "number", lambda n: self._pattern(n, "'number'"))
            caller = self.optional(entries, "caller", lambda n: self._pattern(n, "'caller'"))
            flow = self.optional(entries, "flow", lambda n: self.name(n, "'flow'"))
            priority = self.optional(
                entries, "priority", lambda n: self.integer(n, "'priority'", 0, 1000)
            )
            bad = (
                ("number" in entries and number is None)
                or ("caller" in entries and caller is None)
                or ("priority" in entries and priority is None)
            )
            if flow is None or bad:
                continue
            flow_mark = self.mark(entries["flow"][1])
            result.routes.append(
                Route(
                    flow,
                    number,
                    caller,
                    self.mark(item),
                    priority if priority is not None else DEFAULT_ROUTE_PRIORITY,
                )
            )
            result.route_marks.append((flow, flow_mark))

    def _pattern(self, node: Node, what: str) -> NumberPattern | None:
        text = self.string(node, what)
        if text is None:
            return None
        try:
            return NumberPattern.parse(text)
        except ValueError as exc:
            self.error(node, f"bad pattern in {what}: {exc}")
            return None

    def _flows(self, node: Node, defaults: Settings, result: _FileResult) -> None:
        entries = self.mapping(node, "'flows'", (), free_keys=True)
        if entries is None:
            return
        for name, (key_node, flow_node) in entries.items():
            if not _NAME.match(name):
                self.error(
                    key_node,
                    "expected a flow name made of letters, digits, '_' and '-' "
                    f"(not starting with a digit), found {name!r}",
                )
                continue
            result.declared_flows.add(name)
            flow = self._flow(name, key_node, flow_node, defaults, result)
            if flow is not None:
                result.flows[name] = flow

    def _flow(
        self, name: str, key_node: Node, node: Node, defaults: Settings, result: _FileResult
    ) -> Flow | None:
        what = f"flow {name!r}"
        self._flow_name = name
        entries = self.mapping(node, what, _FLOW_KEYS, required=("steps",))
        if entries is None:
            return None
        settings = defaults
        if "settings" in entries:
            settings = self.settings(
                entries["settings"][1], f"the settings of {what}", defaults, whole_flow=True
            )
        if "description" in entries:
            self.string(entries["description"][1], "'description'")
        variables: list[tuple[str, Template]] = []
        if "variables" in entries:
            variables = self._variables(entries["variables"][1])
        needs_model = False
        if "needs_model" in entries:
            needs_model = bool(self.boolean(entries["needs_model"][1], "'needs_model'"))
        if "steps" not in entries:
            return None
        items = self.sequence(entries["steps"][1], f"the steps of {what}")
        if items is None:
            return None
        if not items:
            self.error(entries["steps"][1], f"{what} has no steps; expected at least one")
            return None
        declared = result.declared_steps.setdefault(name, set())
        first_use: dict[str, Node] = {}
        duplicates: set[int] = set()
        for position, item in enumerate(items):
            id_node = _id_node(item)
            if id_node is None:
                continue
            if id_node.value in first_use:
                first = self.mark(first_use[id_node.value])
                self.error(
                    id_node,
                    f"duplicate step id {id_node.value!r} in {what}; "
                    f"first used at line {first.line}",
                )
                duplicates.add(position)
                continue
            first_use[id_node.value] = id_node
            declared.add(id_node.value)
        steps: list[Step] = []
        broken = False
        for position, item in enumerate(items):
            step = self._step(position + 1, item, settings, needs_model)
            if step is None:
                broken = True
            elif position not in duplicates:
                steps.append(step)
        if broken:
            result.had_errors = True
        return Flow(name, settings, tuple(steps), self.mark(key_node), tuple(variables), needs_model)

    def _step(
        self, position: int, node: Node, base: Settings, needs_model: bool
    ) -> Step | None:
        what = "a step"
        entries = self.mapping(node, what, _STEP_KEYS)
        if entries is None:
            return None
        kinds = [key for key in entries if key in _STEP_KINDS]
        if not kinds:
            self.error(node, f"expected the step to have one of: {', '.join(_STEP_KINDS)}")
            return None
        if len(kinds) > 1:
            second = entries[kinds[1]][0]
            self.error(
                second,
                f"a step does one thing; found both {kinds[0]!r} and {kinds[1]!r} "
                "(split them into two steps)",
            )
            return None
        kind = kinds[0]
        if "next" in entries and kind not in _NEXT_KINDS:
            hint = {
                "transfer": "; use 'on_failure' inside 'transfer'",
                "queue": "; use 'on_failure' inside 'queue'",
                "goto": "; 'goto' already says where to go",
            }.get(kind, "")
            self.error(entries["next"][0], f"'next' is not allowed in a {kind} step{hint}")
        step_id = f"#{position}"
        if "id" in entries:
            given = self.name(entries["id"][1], "'id'")
            if given is None:
                return None
            step_id = given
        settings = base
        if "settings" in entries:
            settings = self.settings(entries["settings"][1], "the step's settings", base, False)
        mark = self.mark(node)
        next_step = None
        if "next" in entries and kind in _NEXT_KINDS:
            next_step = self.ref(entries["next"][1], "next")
        key_node, body = entries[kind]
        if kind == "model" and not needs_model:
            self.error(
                key_node,
                "a 'model' step needs its flow to declare 'needs_model: true' (such a flow "
                "only runs where a dialogue model is configured)",
            )
        parse = getattr(self, f"_{kind}_step")
        step: Step | None = parse(step_id, body, settings, mark, next_step)
        return step

    # -- step kinds

    def _say_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> SayStep | None:
        if isinstance(node, MappingNode):
            entries = self.mapping(node, "'say'", _SAY_KEYS, required=("text",))
            if entries is None or "text" not in entries:
                return None
            text = self.template(entries["text"][1], "'text'")
            voice = self.optional(entries, "voice", lambda n: self._pattern_string(
                n, "'voice'", _VOICE, "a voice name such as 'kal16'"))
            barge = self.optional(entries, "barge_in", lambda n: self.boolean(n, "'barge_in'"))
            if voice is not None:
                settings = _replace(settings, voice=voice)
            if barge is not None:
                settings = _replace(settings, barge_in=barge, dtmf_barge_in=barge)
        else:
            text = self.template(node, "'say'")
        return SayStep(step_id, text, settings, mark, next_step) if text is not None else None

    def _ask_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> AskStep | None:
        entries = self.mapping(node, "'ask'", _ASK_KEYS)
        if entries is None:
            return None
        if "intents" not in entries and "slot" not in entries:
            self.error(node, "expected 'intents', 'slot' or both in 'ask'")
            return None
        prompt = self.optional(entries, "prompt", lambda n: self.template(n, "'prompt'"))
        ok = "prompt" not in entries or prompt is not None
        slot: Slot | None = None
        if "slot" in entries:
            slot = self._slot(entries["slot"][1])
            ok = ok and slot is not None
        speech, dtmf = True, True
        if "input" in entries:
            modes = self._input_modes(entries["input"][1])
            if modes is None:
                ok = False
            else:
                speech, dtmf = "speech" in modes, "dtmf" in modes
        skip_if_set = False
        if "skip_if_set" in entries:
            value = self.boolean(entries["skip_if_set"][1], "'skip_if_set'")
            ok = ok and value is not None
            skip_if_set = bool(value)
            if skip_if_set and slot is None:
                self.error(entries["skip_if_set"][0], "'skip_if_set' needs a 'slot' in the ask")
                ok = False
        intents: list[Intent] = []
        if "intents" in entries:
            intents_node = entries["intents"][1]
            intent_entries = self.mapping(intents_node, "'intents'", (), free_keys=True)
            if intent_entries is None:
                ok = False
            elif not intent_entries:
                self.error(intents_node, "expected at least one intent under 'intents'")
                ok = False
            else:
                dtmf_seen: dict[str, str] = {}
                reserved = self._reserved_keys(slot)
                for name, (key_node, intent_node) in intent_entries.items():
                    intent = self._intent(name, key_node, intent_node)
                    if intent is None:
                        ok = False
                        continue
                    if intent.dtmf is not None:
                        where = intent_entries[name][1]
                        if intent.dtmf in dtmf_seen:
                            self.error(
                                where,
                                f"intent {name!r} uses DTMF {intent.dtmf!r}, already used by "
                                f"intent {dtmf_seen[intent.dtmf]!r}",
                            )
                            ok = False
                        elif intent.dtmf in reserved:
                            self.error(where, f"intent {name!r} uses DTMF {intent.dtmf!r}, "
                                              + reserved[intent.dtmf])
                            ok = False
                        dtmf_seen[intent.dtmf] = name
                    intents.append(intent)
        default_reprompts = (prompt,) * DEFAULT_REPROMPT_COUNT if prompt is not None else ()
        no_input = RepromptPolicy(default_reprompts, None)
        no_match = RepromptPolicy(default_reprompts, None)
        if "no_input" in entries:
            policy = self._policy(entries["no_input"][1], "no_input")
            ok = ok and policy is not None
            no_input = policy or no_input
        if "no_match" in entries:
            policy = self._policy(entries["no_match"][1], "no_match")
            ok = ok and policy is not None
            no_match = policy or no_match
        if not ok:
            return None
        return AskStep(
            step_id, prompt, tuple(intents), no_input, no_match, settings, mark, next_step,
            slot, speech, dtmf, skip_if_set,
        )

    @staticmethod
    def _reserved_keys(slot: Slot | None) -> dict[str, str]:
        if slot is None:
            return {}
        if slot.type == "yes_no":
            why = f"which answers the yes/no slot {slot.name!r} (1 is yes, 2 is no)"
            return {"1": why, "2": why}
        if slot.collects_digits:
            why = (
                f"but this ask collects keypad digits for slot {slot.name!r}; "
                "bind intents to '*' or '#' instead"
            )
            reserved = {d: why for d in "0123456789"}
            if slot.terminator:
                reserved[slot.terminator] = f"which ends the digits of slot {slot.name!r}"
            return reserved
        return {}

    def _input_modes(self, node: Node) -> set[str] | None:
        if isinstance(node, ScalarNode):
            value = self.choice(node, "'input'", ("speech", "dtmf"))
            return {value} if value is not None else None
        items = self.sequence(node, "'input'")
        if items is None:
            return None
        modes: set[str] = set()
        for item in items:
            value = self.choice(item, "an 'input' mode", ("speech", "dtmf"))
            if value is None:
                return None
            modes.add(value)
        if not modes:
            self.error(node, "expected at least one 'input' mode: speech, dtmf")
            return None
        return modes

    def _slot(self, node: Node) -> Slot | None:
        entries = self.mapping(node, "'slot'", _SLOT_KEYS, required=("name", "type"))
        if entries is None or "name" not in entries or "type" not in entries:
            return None
        name = self.variable_name(entries["name"][1], "the slot's 'name'", assigning=True)
        kind = self.choice(entries["type"][1], "the slot's 'type'", SLOT_TYPES)
        limits: dict[str, int | None] = {}
        for key in ("min_length", "max_length"):
            limits[key] = self.optional(entries, key, lambda n, k=key: self.integer(n, f"'{k}'", 1, 64))
        for key in ("min", "max"):
            limits[key] = self.optional(
                entries, key, lambda n, k=key: self.integer(n, f"'{k}'", -(10**12), 10**12)
            )
        terminator: str | None = "#"
        if "terminator" in entries:
            value_node = entries["terminator"][1]
            if _is_null(value_node):
                terminator = None
            else:
                terminator = self.string(value_node, "'terminator'")
                if terminator is not None and terminator not in ("#", "*"):
                    self.error(value_node, f"expected 'terminator' to be '#' or '*', found {terminator!r}")
                    return None
        if name is None or kind is None:
            return None
        if any(k in entries and limits[k] is None for k in limits):
            return None
        if kind not in ("digits", "text") and (
            limits["min_length"] is not None or limits["max_length"] is not None
        ):
            key = "min_length" if "min_length" in entries else "max_length"
            self.error(entries[key][0], f"'{key}' applies to digits and text slots, not {kind}")
            return None
        if kind != "number" and (limits["min"] is not None or limits["max"] is not None):
            key = "min" if "min" in entries else "max"
            self.error(entries[key][0], f"'{key}' applies to number slots, not {kind}")
            return None
        low, high = limits["min_length"], limits["max_length"]
        if low is not None and high is not None and low > high:
            self.error(entries["min_length"][1], f"'min_length' {low} is more than 'max_length' {high}")
            return None
        self.result.variables.add(name)
        return Slot(name, kind, low, high, limits["min"], limits["max"], terminator)

    def _intent(self, name: str, key_node: Node, node: Node) -> Intent | None:
        if not _NAME.match(name):
            self.error(
                key_node,
                "expected an intent name made of letters, digits, '_' and '-' "
                f"(not starting with a digit), found {name!r}",
            )
            return None
        self.result.intents.add(name)
        what = f"intent {name!r}"
        entries = self.mapping(node, what, _INTENT_KEYS)
        if entries is None:
            return None
        ok = True
        examples: list[str] = []
        if "examples" in entries:
            items = self.sequence(entries["examples"][1], f"the examples of {what}")
            if items is None:
                ok = False
            else:
                for item in items:
                    text = self.string(item, f"an example of {what}")
                    if text is None:
                        ok = False
                    elif not text.strip():
                        self.error(item, f"empty example in {what}")
                        ok = False
                    else:
                        examples.append(text)
        synonyms: list[tuple[str, tuple[str, ...]]] = []
        if "synonyms" in entries:
            synonym_entries = self.mapping(entries["synonyms"][1], "'synonyms'", (), free_keys=True)
            if synonym_entries is None:
                ok = False
            for word, (word_node, alternatives_node) in (synonym_entries or {}).items():
                items = self.sequence(alternatives_node, f"the synonyms of {word!r}")
                alternatives = [self.string(i, f"a synonym of {word!r}") for i in items or []]
                if items is None or any(a is None for a in alternatives):
                    ok = False
                    continue
                if not any(word.lower() in e.lower() for e in examples):
                    self.error(word_node, f"synonyms for {word!r}, which no example of {what} uses")
                    ok = False
                synonyms.append((word, tuple(a for a in alternatives if a)))
        dtmf: str | None = None
        if "dtmf" in entries:
            dtmf_node = entries["dtmf"][1]
            value = self.string(dtmf_node, "'dtmf'")
            if value is None:
                ok = False
            elif value not in DTMF_KEYS:
                self.error(
                    dtmf_node,
                    f"expected 'dtmf' to be a single key 0-9, * or #, found {value!r}",
                )
                ok = False
            else:
                dtmf = value
        slots: list[tuple[str, str]] = []
        if "slots" in entries:
            slot_entries = self.mapping(entries["slots"][1], "'slots'", (), free_keys=True)
            if slot_entries is None:
                ok = False
            for slot_name, (slot_key, type_node) in (slot_entries or {}).items():
                variable = self.variable_name(slot_key, "a slot name", assigning=True)
                kind = self.choice(type_node, f"the type of slot {slot_name!r}", SLOT_TYPES)
                if variable is None or kind is None:
                    ok = False
                    continue
                if kind == "text":
                    self.error(type_node, "an intent cannot fill a text slot (it would take the whole sentence)")
                    ok = False
                    continue
                self.result.variables.add(variable)
                slots.append((variable, kind))
        if not examples and dtmf is None and ok:
            self.error(node, f"{what} needs 'examples' or 'dtmf' (or both)")
            ok = False
        goto = None
        if "goto" in entries:
            goto = self.ref(entries["goto"][1], "goto")
            ok = ok and goto is not None
        if not ok:
            return None
        return Intent(
            name, tuple(examples), dtmf, goto, self.mark(key_node), tuple(synonyms), tuple(slots)
        )

    def _policy(self, node: Node, key: str) -> RepromptPolicy | None:
        entries = self.mapping(node, f"'{key}'", _POLICY_KEYS)
        if entries is None:
            return None
        ok = True
        reprompts: list[Template] = []
        if "reprompts" in entries:
            items = self.sequence(entries["reprompts"][1], f"the reprompts of '{key}'")
            if items is None:
                ok = False
            else:
                for item in items:
                    template = self.template(item, f"a reprompt of '{key}'")
                    if template is None:
                        ok = False
                    else:
                        reprompts.append(template)
        retries = self.optional(entries, "retries", lambda n: self.integer(n, "'retries'", 0, 10))
        if "retries" in entries and retries is None:
            ok = False
        then = None
        if "then" in entries:
            then = self.ref(entries["then"][1], "then")
            ok = ok and then is not None
        return RepromptPolicy(tuple(reprompts), then, retries) if ok else None

    def _set_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> SetStep | None:
        entries = self.mapping(node, "'set'", (), free_keys=True)
        if entries is None:
            return None
        if not entries:
            self.error(node, "expected at least one variable under 'set'")
            return None
        ok = True
        assignments: list[tuple[str, Template]] = []
        for name, (key_node, value_node) in entries.items():
            variable = self.variable_name(key_node, "a variable in 'set'", assigning=True)
            value = self.template(value_node, f"the value of {name!r}")
            if variable is None or value is None:
                ok = False
                continue
            self.result.variables.add(variable)
            assignments.append((variable, value))
        return SetStep(step_id, tuple(assignments), settings, mark, next_step) if ok else None

    def _branch_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> BranchStep | None:
        items = self.sequence(node, "'branch' (a list of cases)")
        if items is None:
            return None
        if not items:
            self.error(node, "expected at least one case under 'branch'")
            return None
        ok = True
        cases: list[BranchCase] = []
        for item in items:
            entries = self.mapping(item, "a branch case", _CASE_KEYS, required=("when", "goto"))
            if entries is None or "when" not in entries or "goto" not in entries:
                ok = False
                continue
            when = self.expression(entries["when"][1], "'when'")
            goto = self.ref(entries["goto"][1], "goto")
            if when is None or goto is None:
                ok = False
                continue
            cases.append(BranchCase(when, goto, self.mark(item)))
        return BranchStep(step_id, tuple(cases), settings, mark, next_step) if ok else None

    def _webhook_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> WebhookStep | None:
        entries = self.mapping(
            node, "'webhook'", _WEBHOOK_KEYS, required=("url", "save_as", "on_failure")
        )
        if entries is None or any(k not in entries for k in ("url", "save_as", "on_failure")):
            return None
        ok = True
        url = self.template(entries["url"][1], "'url'")
        if url is not None and not _safe_url(url):
            self.error(
                entries["url"][1],
                "expected 'url' to start with 'http://' or 'https://', or with a "
                "'{{ config.<key> }}' placeholder (the base URL must not come from the caller)",
            )
            ok = False
        method = "POST"
        if "method" in entries:
            method = self.choice(entries["method"][1], "'method'", ("GET", "POST", "PUT")) or ""
            ok = ok and bool(method)
        headers = self._template_pairs(entries, "headers", header_names=True)
        query = self._template_pairs(entries, "query")
        ok = ok and headers is not None and query is not None
        body: JsonValue = None
        if "body" in entries:
            if method == "GET":
                self.error(entries["body"][0], "a GET webhook has no body; use 'query'")
                ok = False
            body = self._json(entries["body"][1])
        timeout = self.optional(entries, "timeout_ms", lambda n: self.integer(n, "'timeout_ms'", 100, 60_000))
        retries = self.optional(entries, "retries", lambda n: self.integer(n, "'retries'", 0, 5))
        backoff = self.optional(
            entries, "retry_backoff_ms", lambda n: self.integer(n, "'retry_backoff_ms'", 0, 10_000)
        )
        ok = ok and all(
            k not in entries or v is not None
            for k, v in (("timeout_ms", timeout), ("retries", retries), ("retry_backoff_ms", backoff))
        )
        save_as = self.variable_name(entries["save_as"][1], "'save_as'", assigning=True)
        fields: tuple[str, ...] | None = None
        if "fields" in entries:
            items = self.sequence(entries["fields"][1], "'fields'")
            names = [self.variable_name(i, "a field") for i in items or []]
            if items is None or any(n is None for n in names):
                ok = False
            else:
                fields = tuple(n for n in names if n)
        on_failure = self.ref(entries["on_failure"][1], "on_failure")
        if save_as is not None:
            self.result.prefixes[save_as] = fields
        if not ok or url is None or save_as is None or on_failure is None or headers is None \
                or query is None:
            return None
        return WebhookStep(
            step_id, url, method, headers, query, body,
            timeout if timeout is not None else 3000,
            retries if retries is not None else 1,
            backoff if backoff is not None else 200,
            save_as, fields or (), on_failure, settings, mark, next_step,
            default_body="body" not in entries,
        )

    def _template_pairs(
        self, entries: _Entries, key: str, header_names: bool = False
    ) -> tuple[tuple[str, Template], ...] | None:
        if key not in entries:
            return ()
        mapping = self.mapping(entries[key][1], f"'{key}'", (), free_keys=True)
        if mapping is None:
            return None
        out: list[tuple[str, Template]] = []
        ok = True
        for name, (name_node, value_node) in mapping.items():
            if header_names and not _HEADER_NAME.match(name):
                self.error(name_node, f"expected an HTTP header name, found {name!r}")
                ok = False
                continue
            value = self.template(value_node, f"{key[:-1] if key.endswith('s') else key} {name!r}")
            if value is None:
                ok = False
                continue
            out.append((name, value))
        return tuple(out) if ok else None

    def _json(self, node: Node) -> JsonValue:
        if isinstance(node, MappingNode):
            entries = self.mapping(node, "a JSON object", (), free_keys=True) or {}
            return JsonObject(tuple((k, self._json(v)) for k, (_, v) in entries.items()))
        if isinstance(node, SequenceNode):
            return JsonArray(tuple(self._json(item) for item in node.value))
        assert isinstance(node, ScalarNode)
        if node.tag == _NULL:
            return None
        if node.tag == "tag:yaml.org,2002:bool":
            return bool(self._constructor.construct_yaml_bool(node))
        if node.tag == "tag:yaml.org,2002:int":
            return int(self._constructor.construct_yaml_int(node))
        if node.tag == "tag:yaml.org,2002:float":
            return float(self._constructor.construct_yaml_float(node))
        return self.template(node, "the webhook body")

    def _hours_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> HoursStep | None:
        entries = self.mapping(node, "'hours'", _HOURS_KEYS, required=("open", "closed"))
        if entries is None or "open" not in entries or "closed" not in entries:
            return None
        ok = True
        timezone = self.optional(entries, "timezone", self._timezone)
        if "timezone" in entries and timezone is None:
            ok = False
        windows = self._open_windows(entries["open"][1])
        holidays: list[Holiday] = []
        if "holidays" in entries:
            for item in self.sequence(entries["holidays"][1], "'holidays'") or []:
                holiday = self._holiday(item)
                if holiday is None:
                    ok = False
                else:
                    holidays.append(holiday)
        closed = self.ref(entries["closed"][1], "closed")
        holiday_step = None
        if "holiday" in entries:
            holiday_step = self.ref(entries["holiday"][1], "holiday")
            ok = ok and holiday_step is not None
        if not ok or windows is None or closed is None:
            return None
        return HoursStep(
            step_id, timezone, windows, tuple(holidays), closed, holiday_step, settings, mark,
            next_step,
        )

    def _open_windows(self, node: Node) -> tuple[OpenWindow, ...] | None:
        entries = self.mapping(node, "'open'", (), free_keys=True)
        if entries is None:
            return None
        windows: list[OpenWindow] = []
        ok = True
        for days_text, (key_node, value_node) in entries.items():
            days = _parse_days(days_text)
            if days is None:
                self.error(
                    key_node,
                    f"expected days such as 'mon-fri', 'sat', 'mon,wed', 'weekdays' or 'daily', "
                    f"found {days_text!r}",
                )
                ok = False
                continue
            if isinstance(value_node, SequenceNode):
                range_nodes = list(value_node.value)
            else:
                range_nodes = [value_node]
            for range_node in range_nodes:
                text = self.string(range_node, "opening hours")
                if text is None:
                    ok = False
                    continue
                if text.strip().lower() == "closed":
                    continue
                parsed = _parse_time_range(text)
                if parsed is None:
                    self.error(
                        range_node,
                        f"expected opening hours like '09:00-17:00' (24-hour, start before end), "
                        f"found {text!r}",
                    )
                    ok = False
                    continue
                windows.extend(OpenWindow(day, parsed[0], parsed[1]) for day in days)
        return tuple(windows) if ok else None

    def _holiday(self, node: Node) -> Holiday | None:
        name = ""
        date_node = node
        if isinstance(node, MappingNode):
            entries = self.mapping(node, "a holiday", _HOLIDAY_KEYS, required=("date",))
            if entries is None or "date" not in entries:
                return None
            date_node = entries["date"][1]
            if "name" in entries:
                name = self.string(entries["name"][1], "'name'") or ""
        if not isinstance(date_node, ScalarNode) or _is_null(date_node):
            self.error(date_node, f"expected a holiday date, found {_describe(date_node)}")
            return None
        text = str(date_node.value)
        match = re.fullmatch(r"(?:(\d{4})-)?(\d{2})-(\d{2})", text)
        if match:
            year = int(match.group(1)) if match.group(1) else None
            month, day = int(match.group(2)), int(match.group(3))
            try:
                _dt.date(year or 2000, month, day)
            except ValueError:
                match = None
        if not match:
            self.error(
                date_node,
                f"expected a holiday date as YYYY-MM-DD (one day) or MM-DD (every year), "
                f"found {text!r}",
            )
            return None
        return Holiday(month, day, year, name)

    def _transfer_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, _next: str | None
    ) -> TransferStep | None:
        if isinstance(node, ScalarNode):
            target = self.template(node, "'transfer'")
            return (
                TransferStep(step_id, target, None, settings, mark) if target is not None else None
            )
        entries = self.mapping(node, "'transfer'", _TRANSFER_KEYS, required=("to",))
        if entries is None or "to" not in entries:
            return None
        target = self.template(entries["to"][1], "'to'")
        mode = "blind"
        if "mode" in entries:
            mode = self.choice(entries["mode"][1], "'mode'", ("blind", "bridged")) or ""
        timeout = self.optional(
            entries, "timeout_ms", lambda n: self.integer(n, "'timeout_ms'", 1000, 300_000)
        )
        if "timeout_ms" in entries and mode == "blind":
            self.error(entries["timeout_ms"][0], "'timeout_ms' applies to bridged transfers only")
            return None
        on_failure = None
        if "on_failure" in entries:
            on_failure = self.ref(entries["on_failure"][1], "on_failure")
            if on_failure is None:
                return None
        if target is None or not mode or ("timeout_ms" in entries and timeout is None):
            return None
        return TransferStep(
            step_id, target, on_failure, settings, mark, mode,
            timeout if timeout is not None else 30_000,
        )

    def _queue_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, _next: str | None
    ) -> QueueStep | None:
        entries = self.mapping(node, "'queue'", _QUEUE_KEYS, required=("name", "uri"))
        if entries is None or "name" not in entries or "uri" not in entries:
            return None
        name = self.name(entries["name"][1], "the queue's 'name'")
        uri = self.template(entries["uri"][1], "'uri'")
        announce = self.optional(entries, "announce", lambda n: self.template(n, "'announce'"))
        on_failure = None
        if "on_failure" in entries:
            on_failure = self.ref(entries["on_failure"][1], "on_failure")
            if on_failure is None:
                return None
        if name is None or uri is None or ("announce" in entries and announce is None):
            return None
        return QueueStep(step_id, name, uri, announce, on_failure, settings, mark)

    def _goto_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, _next: str | None
    ) -> GotoStep | None:
        if isinstance(node, ScalarNode):
            target = self.ref(node, "goto")
            return GotoStep(step_id, target, None, settings, mark) if target else None
        entries = self.mapping(node, "'goto'", _GOTO_KEYS, required=("flow",))
        if entries is None or "flow" not in entries:
            return None
        flow = self.name(entries["flow"][1], "'flow'")
        if flow is None:
            return None
        self.result.flow_refs.append((flow, "flow", self.mark(entries["flow"][1])))
        target = None
        if "step" in entries:
            target = self.name(entries["step"][1], "'step'")
            if target is None:
                return None
            self.result.references.append(
                _Reference(flow, target, "step", self.mark(entries["step"][1]))
            )
        return GotoStep(step_id, target, flow, settings, mark)

    def _return_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, _next: str | None
    ) -> ReturnStep | None:
        if not _is_null(node) and not (isinstance(node, MappingNode) and not node.value):
            self.error(node, f"expected nothing after 'return:', found {_describe(node)}")
            return None
        return ReturnStep(step_id, settings, mark)

    def _hangup_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, _next: str | None
    ) -> HangupStep | None:
        if _is_null(node):
            return HangupStep(step_id, "normal", settings, mark)
        entries = self.mapping(node, "'hangup'", _HANGUP_KEYS)
        if entries is None:
            return None
        reason = "normal"
        if "reason" in entries:
            reason_node = entries["reason"][1]
            value = self.string(reason_node, "'reason'")
            if value is None:
                return None
            if not _REASON.match(value):
                self.error(
                    reason_node,
                    f"expected 'reason' made of letters, digits, '_', '.' and '-', found {value!r}",
                )
                return None
            reason = value
        return HangupStep(step_id, reason, settings, mark)

    def _record_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> RecordStep | None:
        entries = self.mapping(node, "'record'", _RECORD_KEYS, required=("max_ms",))
        if entries is None or "max_ms" not in entries:
            return None
        ok = True
        file = parse_template("{{ call_id }}-{{ step }}.wav")
        if "file" in entries:
            given = self.template(entries["file"][1], "'file'")
            if given is None:
                ok = False
            elif not _safe_file_name(given):
                self.error(
                    entries["file"][1],
                    "expected 'file' to be a file name ending in '.wav', made of letters, digits, "
                    "'_', '-', '+', '.' and placeholders (no '/' or '..'), "
                    f"found {given.source!r}",
                )
                ok = False
            else:
                file = given
        max_ms = self.integer(entries["max_ms"][1], "'max_ms'", 1000, 3_600_000)
        beep = True
        if "beep" in entries:
            value = self.boolean(entries["beep"][1], "'beep'")
            ok = ok and value is not None
            beep = bool(value)
        prompt = self.optional(entries, "prompt", lambda n: self.template(n, "'prompt'"))
        terminator: str | None = "#"
        if "terminator" in entries:
            value_node = entries["terminator"][1]
            if _is_null(value_node):
                terminator = None
            else:
                terminator = self.choice(value_node, "'terminator'", ("#", "*"))
                ok = ok and terminator is not None
        save_as = "recording"
        if "save_as" in entries:
            save_as = self.variable_name(entries["save_as"][1], "'save_as'", assigning=True) or ""
            ok = ok and bool(save_as)
        on_failure = None
        if "on_failure" in entries:
            on_failure = self.ref(entries["on_failure"][1], "on_failure")
            ok = ok and on_failure is not None
        if save_as:
            self.result.variables.update({f"{save_as}.path", f"{save_as}.duration_ms"})
        if not ok or max_ms is None or ("prompt" in entries and prompt is None):
            return None
        return RecordStep(
            step_id, file, max_ms, beep, prompt, terminator, save_as, on_failure, settings, mark,
            next_step,
        )

    def _model_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> ModelStep | None:
        entries = self.mapping(node, "'model'", _MODEL_KEYS, required=("on_failure",))
        if entries is None or "on_failure" not in entries:
            return None
        ok = True
        instructions = self.optional(
            entries, "instructions", lambda n: self.template(n, "'instructions'")
        )
        text = parse_template("{{ input }}")
        if "input" in entries:
            given = self.template(entries["input"][1], "'input'")
            ok = ok and given is not None
            text = given or text
        save_as = "reply"
        if "save_as" in entries:
            save_as = self.variable_name(entries["save_as"][1], "'save_as'", assigning=True) or ""
            ok = ok and bool(save_as)
        say = True
        if "say" in entries:
            value = self.boolean(entries["say"][1], "'say'")
            ok = ok and value is not None
            say = bool(value)
        timeout = self.optional(
            entries, "timeout_ms", lambda n: self.integer(n, "'timeout_ms'", 100, 60_000)
        )
        ok = ok and ("timeout_ms" not in entries or timeout is not None)
        on_failure = self.ref(entries["on_failure"][1], "on_failure")
        if save_as:
            self.result.variables.add(save_as)
        if not ok or on_failure is None or ("instructions" in entries and instructions is None):
            return None
        return ModelStep(
            step_id, instructions, text, save_as, say,
            timeout if timeout is not None else 5000, on_failure, settings, mark, next_step,
        )


def _replace(settings: Settings, **changes: object) -> Settings:
    from dataclasses import replace

    return replace(settings, **changes)  # type: ignore[arg-type]


def _safe_url(url: Template) -> bool:
    first = url.parts[0] if url.parts else ""
    if isinstance(first, str):
        return first.lower().startswith(("http://", "https://"))
    if isinstance(first, Variable):
        return first.name.startswith(CONFIG_PREFIX)
    assert isinstance(first, Placeholder)
    return False


def _safe_file_name(template: Template) -> bool:
    if not template.source.lower().endswith(".wav") or ".." in template.source:
        return False
    return all(_FILE_TEXT.match(part) for part in template.parts if isinstance(part, str))


def _parse_days(text: str) -> tuple[int, ...] | None:
    days: list[int] = []
    for part in text.lower().replace(" ", "").split(","):
        if part in _DAY_ALIASES:
            days.extend(_DAY_ALIASES[part])
            continue
        if "-" in part:
            first, _, last = part.partition("-")
            if first in _WEEKDAY_NAMES and last in _WEEKDAY_NAMES:
                start, end = _WEEKDAY_NAMES.index(first), _WEEKDAY_NAMES.index(last)
                span = range(start, end + 1) if start <= end else [*range(start, 7), *range(0, end + 1)]
                days.extend(span)
                continue
        return None
    return tuple(dict.fromkeys(days)) if days else None


def _parse_time_range(text: str) -> tuple[int, int] | None:
    match = _TIME_RANGE.match(text.strip())
    if not match:
        return None
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    if h1 > 23 or m1 > 59 or m2 > 59 or h2 > 24 or (h2 == 24 and m2 != 0):
        return None
    start, end = h1 * 60 + m1, h2 * 60 + m2
    return (start, end) if start < end else None

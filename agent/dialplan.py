"""Dialplan loading: YAML files in, validated frozen objects out.

A dialplan says which called numbers go to which flow and what each flow does, step by step
(``say``, ``ask``, ``transfer``, ``hangup``). See ``docs/dialplans.md`` for the language.

Files are read once, at the edge, with PyYAML's node composer so every problem is reported as
``path:line:column: message`` (1-based, as editors count). All problems found in a load are
collected into one :class:`DialplanError` instead of stopping at the first. The result,
:class:`Dialplan`, is made of frozen dataclasses; the dialogue engine never sees a raw dict.

Public API: :func:`load_dialplan`, :func:`load_dialplans`, :func:`parse_dialplan`,
:func:`static_prompts`, :func:`prompt_cache_key`, :func:`parse_template`,
:meth:`NumberPattern.parse` and the dataclasses below.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, Union

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "AskStep",
    "CALL_VARIABLES",
    "DEFAULT_SETTINGS",
    "Dialplan",
    "DialplanError",
    "DialplanIssue",
    "Flow",
    "HangupStep",
    "Intent",
    "NumberPattern",
    "RepromptPolicy",
    "Route",
    "SayStep",
    "Settings",
    "SourceMark",
    "Step",
    "Template",
    "TemplateError",
    "TransferStep",
    "Variable",
    "load_dialplan",
    "load_dialplans",
    "parse_dialplan",
    "parse_template",
    "prompt_cache_key",
    "static_prompts",
]

SUPPORTED_VERSIONS = (1,)

CALL_VARIABLES = ("caller", "called", "call_id", "region")
"""Variables every call has; templates may also use ``config.<key>`` (server configuration)."""

CONFIG_PREFIX = "config."

DTMF_KEYS = frozenset("0123456789*#")

MIN_NO_INPUT_TIMEOUT_MS = 100
MAX_NO_INPUT_TIMEOUT_MS = 120_000

DEFAULT_REPROMPT_COUNT = 2
"""Without a ``no_input``/``no_match`` block, an ask repeats its prompt this many times."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_REASON = re.compile(r"[A-Za-z0-9_.-]+\Z")
_VOICE = re.compile(r"[A-Za-z0-9_.-]+\Z")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


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


# --------------------------------------------------------------------------- templates


@dataclass(frozen=True)
class Variable:
    """A ``{{ name }}`` placeholder inside a template; *name* may be dotted (``config.x``)."""

    name: str


TemplatePart = Union[str, Variable]


@dataclass(frozen=True)
class Template:
    """Text with ``{{ name }}`` placeholders, substituted per call (no expressions)."""

    source: str
    parts: tuple[TemplatePart, ...]

    @property
    def is_static(self) -> bool:
        """True when the text has no placeholder (its audio can be synthesised at load)."""
        return not any(isinstance(part, Variable) for part in self.parts)

    @property
    def variables(self) -> tuple[str, ...]:
        """Names of the placeholders, in order of appearance."""
        return tuple(part.name for part in self.parts if isinstance(part, Variable))

    def missing(self, values: Mapping[str, str]) -> tuple[str, ...]:
        """Placeholders for which *values* has no entry."""
        return tuple(name for name in self.variables if name not in values)

    def render(self, values: Mapping[str, str]) -> str:
        """Substitute *values* (flat, dotted keys); a missing variable renders as ""."""
        return "".join(
            values.get(part.name, "") if isinstance(part, Variable) else part for part in self.parts
        )


class TemplateError(ValueError):
    """A template has bad syntax; *offset* is the 0-based character index of the problem."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def _placeholders(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield ``(start, end, name)`` for each ``{{ name }}``; raise TemplateError on bad syntax."""
    position = 0
    while True:
        start = text.find("{{", position)
        if start < 0:
            return
        end = text.find("}}", start + 2)
        if end < 0:
            raise TemplateError(f"unclosed '{{{{' at character {start + 1}; expected '}}}}'", start)
        name = text[start + 2 : end].strip()
        if not _VARIABLE_NAME.match(name):
            raise TemplateError(
                f"expected a variable name inside '{{{{ }}}}' such as '{{{{ caller }}}}' or "
                f"'{{{{ config.transfer_uri }}}}', found {text[start:end + 2]!r}",
                start,
            )
        yield start, end + 2, name
        position = end + 2


def parse_template(text: str) -> Template:
    """Parse ``{{ name }}`` placeholders in *text*; raise :class:`TemplateError` on bad syntax."""
    parts: list[TemplatePart] = []
    position = 0
    for start, end, name in _placeholders(text):
        if start > position:
            parts.append(text[position:start])
        parts.append(Variable(name))
        position = end
    if position < len(text):
        parts.append(text[position:])
    return Template(text, tuple(parts))


def _check_variable(name: str) -> str | None:
    """Return why *name* is not a known call variable, or None when it is."""
    if name in CALL_VARIABLES:
        return None
    if name.startswith(CONFIG_PREFIX):
        return None
    allowed = ", ".join(CALL_VARIABLES)
    if name == "config":
        return (
            f"expected 'config.<key>', found 'config' alone; variables are: {allowed}, config.<key>"
        )
    return f"unknown variable {name!r}; expected one of: {allowed}, config.<key>"


def prompt_cache_key(text: str, voice: str) -> str:
    """Key under which the synthesised audio of *text* spoken by *voice* is cached."""
    digest = hashlib.sha256(f"{voice}\n{text}".encode("utf-8")).hexdigest()[:20]
    return f"{voice}-{digest}"


# --------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class NumberPattern:
    """An Asterisk-style number pattern.

    Without a leading ``_`` the pattern is literal and must equal the whole number. With ``_``:
    ``X`` is 0-9, ``Z`` 1-9, ``N`` 2-9, ``[1-5]``/``[137]`` a set, ``.`` at the end one or more
    of any character, ``!`` at the end zero or more; other characters match themselves, and
    dashes outside ``[]`` are ignored (``_1-800-NXX-XXXX``).
    """

    source: str
    regex: re.Pattern[str] = field(compare=False, repr=False)

    @classmethod
    def parse(cls, source: str) -> NumberPattern:
        """Compile *source*; raise ValueError with the reason when it is not a valid pattern."""
        if not source:
            raise ValueError("empty pattern")
        if any(ch.isspace() for ch in source):
            raise ValueError(f"pattern {source!r} contains whitespace")
        if not source.startswith("_"):
            return cls(source, re.compile(re.escape(source) + r"\Z"))
        body = source[1:]
        regex: list[str] = []
        i = 0
        while i < len(body):
            ch = body[i]
            upper = ch.upper()
            if ch == "-":
                pass
            elif upper == "X":
                regex.append("[0-9]")
            elif upper == "Z":
                regex.append("[1-9]")
            elif upper == "N":
                regex.append("[2-9]")
            elif ch in ".!":
                if body[i + 1 :].replace("-", ""):
                    raise ValueError(f"{ch!r} must be the last character of pattern {source!r}")
                regex.append(".+" if ch == "." else ".*")
            elif ch == "[":
                close = body.find("]", i + 1)
                if close < 0:
                    raise ValueError(f"unclosed '[' in pattern {source!r}")
                regex.append(_character_class(body[i + 1 : close], source))
                i = close
            elif ch == "]":
                raise ValueError(f"']' without '[' in pattern {source!r}")
            else:
                regex.append(re.escape(ch))
            i += 1
        if not regex:
            raise ValueError(f"pattern {source!r} has nothing after the '_'")
        return cls(source, re.compile("".join(regex) + r"\Z", re.DOTALL))

    def matches(self, value: str) -> bool:
        """True when *value* (a called or calling number) matches the whole pattern."""
        return self.regex.match(value) is not None


def _character_class(inner: str, source: str) -> str:
    """Translate the inside of ``[...]`` (digits, ``*``, ``#``, ``+`` and ranges like 1-5)."""
    if not inner:
        raise ValueError(f"empty '[]' in pattern {source!r}")
    members: list[str] = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if not (ch.isdigit() or ch in "*#+"):
            raise ValueError(f"unexpected {ch!r} inside '[]' in pattern {source!r}")
        if i + 1 < len(inner) and inner[i + 1] == "-":
            if i + 2 >= len(inner) or not inner[i + 2].isdigit() or not ch.isdigit():
                raise ValueError(f"bad range inside '[{inner}]' in pattern {source!r}")
            if inner[i + 2] < ch:
                raise ValueError(f"range {ch}-{inner[i + 2]} runs backwards in pattern {source!r}")
            members.append(f"{ch}-{inner[i + 2]}")
            i += 3
            continue
        members.append(re.escape(ch))
        i += 1
    return "[" + "".join(members) + "]"


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Settings:
    """How prompts are spoken and input awaited; set per dialplan file, flow or step."""

    voice: str = "kal16"
    barge_in: bool = True
    no_input_timeout_ms: int = 5000


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
    """One answer an ask accepts: spoken *examples* and/or a DTMF key, and where it leads."""

    name: str
    examples: tuple[str, ...]
    dtmf: str | None
    goto: str | None
    mark: SourceMark


@dataclass(frozen=True)
class RepromptPolicy:
    """Reprompts for silence or unrecognised input; after the last one, go to *then*.

    ``then`` None ends the call (reason ``no_input`` or ``no_match``).
    """

    reprompts: tuple[Template, ...]
    then: str | None


@dataclass(frozen=True)
class AskStep:
    """Say an optional *prompt*, then listen for one of *intents* (speech or DTMF)."""

    id: str
    prompt: Template | None
    intents: tuple[Intent, ...]
    no_input: RepromptPolicy
    no_match: RepromptPolicy
    settings: Settings
    mark: SourceMark
    next: str | None = None

    def intent_for_dtmf(self, digit: str) -> Intent | None:
        """The intent bound to DTMF key *digit*, if any."""
        for intent in self.intents:
            if intent.dtmf == digit:
                return intent
        return None


@dataclass(frozen=True)
class TransferStep:
    """Blind-transfer the call (SIP REFER) to *to*; on failure continue at *on_failure*."""

    id: str
    to: Template
    on_failure: str | None
    settings: Settings
    mark: SourceMark


@dataclass(frozen=True)
class HangupStep:
    """End the call, recording *reason*."""

    id: str
    reason: str
    settings: Settings
    mark: SourceMark


Step = Union[SayStep, AskStep, TransferStep, HangupStep]


@dataclass(frozen=True)
class Flow:
    """A named, ordered list of steps; execution starts at the first."""

    name: str
    settings: Settings
    steps: tuple[Step, ...]
    mark: SourceMark
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

    def successor(self, step: SayStep | AskStep) -> str | None:
        """Where a step continues: its ``next`` if given, else the following step."""
        return step.next if step.next is not None else self.following(step)


@dataclass(frozen=True)
class Route:
    """Send calls whose called (and optionally calling) number match to *flow*."""

    flow: str
    number: NumberPattern | None
    caller: NumberPattern | None
    mark: SourceMark

    def matches(self, called: str, caller: str) -> bool:
        """True when this route applies to a call from *caller* to *called*."""
        if self.number is not None and not self.number.matches(called):
            return False
        if self.caller is not None and not self.caller.matches(caller):
            return False
        return True


@dataclass(frozen=True)
class Dialplan:
    """Routes (ordered, first match wins) and the flows they lead to."""

    routes: tuple[Route, ...]
    flows: Mapping[str, Flow]
    sources: tuple[str, ...]

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


def _templates(dialplan: Dialplan) -> Iterator[Template]:
    for _, template, _ in _spoken_templates(dialplan):
        yield template
    for flow in dialplan.flows.values():
        for step in flow.steps:
            if isinstance(step, TransferStep):
                yield step.to


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


def static_prompts(dialplan: Dialplan) -> set[tuple[str, str]]:
    """Every prompt without placeholders as ``(text, voice)``, for synthesis at load time."""
    return {
        (template.source, settings.voice)
        for _, template, settings in _spoken_templates(dialplan)
        if template.is_static and template.source.strip()
    }


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
    # Names declared, even by flows or steps that had errors (so those errors do not cascade
    # into "unknown step" reports wherever the broken step is referred to).
    declared_flows: set[str] = field(default_factory=set)
    declared_steps: dict[str, set[str]] = field(default_factory=dict)


def _build(sources: Sequence[tuple[str, str]]) -> Dialplan:
    issues: list[DialplanIssue] = []
    routes: list[Route] = []
    flows: dict[str, Flow] = {}
    references: list[_Reference] = []
    route_targets: list[tuple[str, SourceMark]] = []
    declared_flows: set[str] = set()
    declared_steps: dict[str, set[str]] = {}
    for path, text in sources:
        parser = _FileParser(path)
        result = parser.parse(text)
        issues.extend(parser.issues)
        if result is None:
            continue
        routes.extend(result.routes)
        route_targets.extend(result.route_marks)
        references.extend(result.references)
        declared_flows.update(result.declared_flows)
        for name, ids in result.declared_steps.items():
            declared_steps.setdefault(name, set()).update(ids)
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

    for target, mark in route_targets:
        if target not in declared_flows:
            issues.append(DialplanIssue(mark, "'flow' " + _unknown("flow", target, declared_flows)))
    for ref in references:
        ids = declared_steps.get(ref.flow, set())
        if ref.target not in ids:
            where = f" in flow {ref.flow!r}"
            issues.append(
                DialplanIssue(ref.mark, f"'{ref.key}' " + _unknown("step", ref.target, ids, where))
            )
    for flow in flows.values():
        issues.extend(_find_say_loops(flow))
    if sources and not routes and not issues:
        issues.append(
            DialplanIssue(
                SourceMark(sources[0][0], 1, 1), "no routes: add at least one entry under 'routes'"
            )
        )
    if issues:
        raise DialplanError(_sorted_unique(issues, [path for path, _ in sources]))
    return Dialplan(tuple(routes), MappingProxyType(dict(flows)), tuple(p for p, _ in sources))


def _unknown(what: str, name: str, known: Iterable[str], where: str = "") -> str:
    names = sorted(known)
    listed = ", ".join(names) if names else "(none)"
    message = f"refers to unknown {what} {name!r}{where}; expected one of: {listed}"
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def _find_say_loops(flow: Flow) -> list[DialplanIssue]:
    """Report cycles of say steps, which would talk forever without waiting for the caller.

    Each cycle is reported once, at the member written first in the flow.
    """
    issues: list[DialplanIssue] = []
    position = {step.id: i for i, step in enumerate(flow.steps)}
    for start in flow.steps:
        if not isinstance(start, SayStep):
            continue
        seen: list[str] = []
        step: Step = start
        while isinstance(step, SayStep) and step.id not in seen:
            seen.append(step.id)
            following = flow.successor(step)
            if following is None or not flow.has_step(following):
                break
            step = flow.step(following)
        else:
            if step.id == start.id and all(position[s] >= position[start.id] for s in seen):
                cycle = " -> ".join(seen + [start.id])
                issues.append(
                    DialplanIssue(
                        start.mark,
                        f"steps {cycle} repeat forever without asking the caller anything",
                    )
                )
    return issues


def _sorted_unique(issues: Sequence[DialplanIssue], paths: Sequence[str]) -> list[DialplanIssue]:
    order = {path: i for i, path in enumerate(paths)}
    unique = list(dict.fromkeys(issues))
    return sorted(
        unique, key=lambda i: (order.get(i.mark.path, len(order)), i.mark.line, i.mark.column)
    )


_T = TypeVar("_T")

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

_TOP_KEYS = ("version", "settings", "routes", "flows")
_ROUTE_KEYS = ("number", "caller", "flow")
_FLOW_KEYS = ("settings", "steps")
_SETTINGS_KEYS = ("voice", "barge_in", "no_input_timeout_ms")
_STEP_KINDS = ("say", "ask", "transfer", "hangup")
_STEP_KEYS = ("id", "settings", "next") + _STEP_KINDS
_ASK_KEYS = ("prompt", "intents", "no_input", "no_match")
_INTENT_KEYS = ("examples", "dtmf", "goto")
_POLICY_KEYS = ("reprompts", "then")
_TRANSFER_KEYS = ("to", "on_failure")
_HANGUP_KEYS = ("reason",)

_Entries = dict[str, tuple[ScalarNode, Node]]


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
    if node.tag == "tag:yaml.org,2002:null":
        return "nothing (null)"
    return f"{_TAG_NAMES.get(node.tag, node.tag)} {node.value!r}"


class _FileParser:
    """Turns one file's YAML node tree into model objects, collecting issues as it goes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.issues: list[DialplanIssue] = []
        self._constructor = SafeConstructor()

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

    def template(self, node: Node, what: str) -> Template | None:
        text = self.string(node, what)
        if text is None:
            return None
        try:
            template = parse_template(text)
        except TemplateError as exc:
            self.issues.append(DialplanIssue(self.text_mark(node, exc.offset), f"in {what}: {exc}"))
            return None
        ok = True
        for start, _, name in _placeholders(text):
            problem = _check_variable(name)
            if problem is not None:
                self.issues.append(
                    DialplanIssue(self.text_mark(node, start), f"in {what}: {problem}")
                )
                ok = False
        return template if ok else None

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
        result = _FileResult()
        if "version" in top:
            self._version(top["version"][1])
        defaults = DEFAULT_SETTINGS
        if "settings" in top:
            defaults = self.settings(
                top["settings"][1], "the dialplan's settings", DEFAULT_SETTINGS
            )
        if "routes" in top:
            self._routes(top["routes"][1], result)
        if "flows" in top:
            self._flows(top["flows"][1], defaults, result)
        return result

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

    def settings(self, node: Node, what: str, base: Settings) -> Settings:
        entries = self.mapping(node, what, _SETTINGS_KEYS)
        if entries is None:
            return base
        voice = self.optional(entries, "voice", lambda n: self._voice(n))
        barge_in = self.optional(entries, "barge_in", lambda n: self.boolean(n, "'barge_in'"))
        timeout = self.optional(
            entries,
            "no_input_timeout_ms",
            lambda n: self.integer(
                n, "'no_input_timeout_ms'", MIN_NO_INPUT_TIMEOUT_MS, MAX_NO_INPUT_TIMEOUT_MS
            ),
        )
        return Settings(
            voice=voice if voice is not None else base.voice,
            barge_in=barge_in if barge_in is not None else base.barge_in,
            no_input_timeout_ms=timeout if timeout is not None else base.no_input_timeout_ms,
        )

    def _voice(self, node: Node) -> str | None:
        value = self.string(node, "'voice'")
        if value is not None and not _VOICE.match(value):
            self.error(
                node, f"expected 'voice' to be a voice name such as 'kal16', found {value!r}"
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
            bad_pattern = ("number" in entries and number is None) or (
                "caller" in entries and caller is None
            )
            if flow is None or bad_pattern:
                continue
            flow_mark = self.mark(entries["flow"][1])
            result.routes.append(Route(flow, number, caller, self.mark(item)))
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
        entries = self.mapping(node, what, _FLOW_KEYS, required=("steps",))
        if entries is None:
            return None
        settings = defaults
        if "settings" in entries:
            settings = self.settings(entries["settings"][1], f"the settings of {what}", defaults)
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
        for position, item in enumerate(items):
            step = self._step(name, position + 1, item, settings, result)
            if step is not None and position not in duplicates:
                steps.append(step)
        return Flow(name, settings, tuple(steps), self.mark(key_node))

    def _step(
        self, flow: str, position: int, node: Node, base: Settings, result: _FileResult
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
        if "next" in entries and kind not in ("say", "ask"):
            self.error(
                entries["next"][0],
                f"'next' is not allowed in a {kind} step"
                + ("; use 'on_failure' inside 'transfer'" if kind == "transfer" else ""),
            )
        step_id = f"#{position}"
        if "id" in entries:
            given = self.name(entries["id"][1], "'id'")
            if given is None:
                return None
            step_id = given
        settings = base
        if "settings" in entries:
            settings = self.settings(entries["settings"][1], "the step's settings", base)
        mark = self.mark(node)

        def ref(value_node: Node, key: str) -> str | None:
            target = self.name(value_node, f"'{key}'")
            if target is not None:
                result.references.append(_Reference(flow, target, key, self.mark(value_node)))
            return target

        next_step = None
        if "next" in entries and kind in ("say", "ask"):
            next_step = ref(entries["next"][1], "next")
        body = entries[kind][1]
        step: Step | None
        if kind == "say":
            text = self.template(body, "'say'")
            step = SayStep(step_id, text, settings, mark, next_step) if text is not None else None
        elif kind == "ask":
            step = self._ask(step_id, body, settings, mark, next_step, ref)
        elif kind == "transfer":
            step = self._transfer(step_id, body, settings, mark, ref)
        else:
            step = self._hangup(step_id, body, settings, mark)
        return step

    def _ask(
        self,
        step_id: str,
        node: Node,
        settings: Settings,
        mark: SourceMark,
        next_step: str | None,
        ref: Callable[[Node, str], str | None],
    ) -> AskStep | None:
        entries = self.mapping(node, "'ask'", _ASK_KEYS, required=("intents",))
        if entries is None:
            return None
        prompt = self.optional(entries, "prompt", lambda n: self.template(n, "'prompt'"))
        ok = "prompt" not in entries or prompt is not None
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
                for name, (key_node, intent_node) in intent_entries.items():
                    intent = self._intent(name, key_node, intent_node, ref)
                    if intent is None:
                        ok = False
                        continue
                    if intent.dtmf is not None:
                        if intent.dtmf in dtmf_seen:
                            self.error(
                                intent_entries[name][1],
                                f"intent {name!r} uses DTMF {intent.dtmf!r}, already used by "
                                f"intent {dtmf_seen[intent.dtmf]!r}",
                            )
                            ok = False
                        dtmf_seen[intent.dtmf] = name
                    intents.append(intent)
        default_reprompts = (prompt,) * DEFAULT_REPROMPT_COUNT if prompt is not None else ()
        no_input = RepromptPolicy(default_reprompts, None)
        no_match = RepromptPolicy(default_reprompts, None)
        if "no_input" in entries:
            policy = self._policy(entries["no_input"][1], "no_input", ref)
            ok = ok and policy is not None
            no_input = policy or no_input
        if "no_match" in entries:
            policy = self._policy(entries["no_match"][1], "no_match", ref)
            ok = ok and policy is not None
            no_match = policy or no_match
        if not ok or not intents:
            return None
        return AskStep(
            step_id, prompt, tuple(intents), no_input, no_match, settings, mark, next_step
        )

    def _intent(
        self, name: str, key_node: Node, node: Node, ref: Callable[[Node, str], str | None]
    ) -> Intent | None:
        if not _NAME.match(name):
            self.error(
                key_node,
                "expected an intent name made of letters, digits, '_' and '-' "
                f"(not starting with a digit), found {name!r}",
            )
            return None
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
        if not examples and dtmf is None and ok:
            self.error(node, f"{what} needs 'examples' or 'dtmf' (or both)")
            ok = False
        goto = None
        if "goto" in entries:
            goto = ref(entries["goto"][1], "goto")
            ok = ok and goto is not None
        if not ok:
            return None
        return Intent(name, tuple(examples), dtmf, goto, self.mark(key_node))

    def _policy(
        self, node: Node, key: str, ref: Callable[[Node, str], str | None]
    ) -> RepromptPolicy | None:
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
        then = None
        if "then" in entries:
            then = ref(entries["then"][1], "then")
            ok = ok and then is not None
        return RepromptPolicy(tuple(reprompts), then) if ok else None

    def _transfer(
        self,
        step_id: str,
        node: Node,
        settings: Settings,
        mark: SourceMark,
        ref: Callable[[Node, str], str | None],
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
        on_failure = None
        if "on_failure" in entries:
            on_failure = ref(entries["on_failure"][1], "on_failure")
            if on_failure is None:
                return None
        if target is None:
            return None
        return TransferStep(step_id, target, on_failure, settings, mark)

    def _hangup(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark
    ) -> HangupStep | None:
        if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null":
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

"""Dialplan files in, :class:`~agent.dialplan.model.Dialplan` out.

Each file is composed and checked against the schema (:mod:`agent.dialplan.validation`); the
reader below then builds the frozen objects from every part the schema accepted, and checks what
a schema cannot: settings that apply to whole calls, DTMF keys an ask already uses, slot limits
that fit the slot's type, safe webhook URLs and recording names, opening hours and time zones,
templates and conditions that parse. What each file declares and refers to is collected for
:mod:`agent.dialplan.checks`, which resolves it across files.

Kept whole: one reader per construct of the language, each a few lines, in the schema's order.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from dataclasses import replace
from types import MappingProxyType
from typing import Callable, Sequence, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agent.dialplan.checks import (
    Declarations,
    Reference,
    check_intents,
    check_loops,
    check_reachability,
    check_references,
    check_routes,
    check_variables,
    sorted_unique,
)
from agent.dialplan.model import (
    CALL_VARIABLES,
    CONFIG_PREFIX,
    DEFAULT_REPROMPT_COUNT,
    DEFAULT_ROUTE_PRIORITY,
    DEFAULT_SETTINGS,
    NOW_VARIABLES,
    AskStep,
    BranchCase,
    BranchStep,
    Dialplan,
    DialplanError,
    DialplanIssue,
    Endpointing,
    Flow,
    GotoStep,
    HangupStep,
    Holiday,
    HoursStep,
    Intent,
    ModelStep,
    OpenWindow,
    QueueStep,
    RecordStep,
    RepromptPolicy,
    ReturnStep,
    Route,
    SayStep,
    SetStep,
    Settings,
    Slot,
    SourceMark,
    Step,
    TransferStep,
    WebhookStep,
)
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
from agent.dialplan.validation import Document, compose, load_schema

__all__ = ["load_dialplans", "parse_dialplan_texts"]


def load_dialplans(paths: Sequence[str]) -> Dialplan:
    """Load several files as one dialplan (see :func:`agent.dialplan.model.load_dialplans`)."""
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
            issues.append(DialplanIssue(SourceMark(name, 1, 1), f"cannot read file: {exc.strerror}"))
            continue
        try:
            sources.append((name, data.decode("utf-8")))
        except UnicodeDecodeError as exc:
            issues.append(DialplanIssue(SourceMark(name, 1, 1), f"file is not UTF-8 text: {exc.reason}"))
    if issues:
        raise DialplanError(issues)
    return _build(sources)


def parse_dialplan_texts(sources: Sequence[tuple[str, str]]) -> Dialplan:
    """Load several ``(path, text)`` sources as one dialplan."""
    if not sources:
        raise ValueError("no dialplan files given")
    return _build(sources)


def _build(sources: Sequence[tuple[str, str]]) -> Dialplan:
    issues: list[DialplanIssue] = []
    routes: list[Route] = []
    flows: dict[str, Flow] = {}
    merged = Declarations()
    for path, text in sources:
        parser = _FileReader(path)
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

    issues.extend(check_references(merged))
    issues.extend(check_variables(merged))
    issues.extend(check_intents(merged))
    issues.extend(check_routes(routes))
    if not issues and not merged.had_errors and routes:
        # The shape of the flows is only meaningful once every reference resolves.
        issues.extend(check_reachability(routes, flows))
        issues.extend(check_loops(flows))
    if sources and not routes and not issues:
        issues.append(
            DialplanIssue(
                SourceMark(sources[0][0], 1, 1), "no routes: add at least one entry under 'routes'"
            )
        )
    if issues:
        raise DialplanError(sorted_unique(issues, [path for path, _ in sources]))
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




_T = TypeVar("_T")
_Parsed = TypeVar("_Parsed", Template, Expression)

_NULL = "tag:yaml.org,2002:null"

_STEP_KINDS = tuple(k for k in load_schema()["$defs"]["step"]["properties"] if k not in ("id", "settings", "next"))
_NEXT_KINDS = ("say", "ask", "set", "branch", "webhook", "hours", "record", "model")
_FILE_TEXT = re.compile(r"[A-Za-z0-9_.+-]*\Z")

_WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_ALIASES = {
    "daily": tuple(range(7)), "weekdays": tuple(range(5)), "weekends": (5, 6),
    **{name: (i,) for i, name in enumerate(_WEEKDAY_NAMES)},
    **{full: (i,) for i, full in enumerate(
        ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))},
}
_TIME_RANGE = re.compile(r"(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\Z")

_Entries = dict[str, tuple[ScalarNode, Node]]


def _id_node(step: Node) -> ScalarNode | None:
    """The scalar value of a step's ``id`` key, if it has one."""
    if isinstance(step, MappingNode):
        for key_node, value_node in step.value:
            if isinstance(key_node, ScalarNode) and key_node.value == "id":
                return value_node if isinstance(value_node, ScalarNode) else None
    return None


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL


class _FileReader:
    """Builds one file's objects from the parts the schema accepted, collecting issues.

    The schema has checked every key and type; a value it rejected is in ``doc.bad`` and reads
    as None here, so whatever holds it is not built (and nothing is reported twice).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.issues: list[DialplanIssue] = []
        self._constructor = SafeConstructor()
        self.result = Declarations()
        self._flow_name = ""
        self.doc = Document(path, None)

    # -- reporting

    def mark(self, node: Node) -> SourceMark:
        return self.doc.mark(node)

    def error(self, node: Node, message: str) -> None:
        self.issues.append(DialplanIssue(self.mark(node), message))

    # -- reading what the schema accepted

    def bad(self, node: Node) -> bool:
        return id(node) in self.doc.bad

    def mapping(self, node: Node) -> _Entries | None:
        """*node*'s entries by key, first of duplicates (None when the schema rejected it)."""
        if self.bad(node) or not isinstance(node, MappingNode):
            return None
        entries: _Entries = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and not self.bad(key_node):
                entries.setdefault(key_node.value, (key_node, value_node))
        return entries

    def sequence(self, node: Node) -> list[Node] | None:
        if self.bad(node) or not isinstance(node, SequenceNode):
            return None
        return list(node.value)

    def string(self, node: Node) -> str | None:
        if self.bad(node) or not isinstance(node, ScalarNode) or node.tag == _NULL:
            return None
        return str(node.value)

    name = string

    def variable_name(self, node: Node, what: str, assigning: bool = False) -> str | None:
        value = self.string(node)
        if value is None:
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

    def boolean(self, node: Node) -> bool | None:
        if self.bad(node) or not isinstance(node, ScalarNode):
            return None
        return bool(self._constructor.construct_yaml_bool(node))

    def integer(self, node: Node) -> int | None:
        if self.bad(node) or not isinstance(node, ScalarNode):
            return None
        return int(self._constructor.construct_yaml_int(node))

    choice = string

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
        text = self.string(node)
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
        target = self.name(node)
        if target is not None:
            self.result.references.append(
                Reference(self._flow_name, target, key, self.mark(node))
            )
        return target

    # -- document structure

    def parse(self, text: str) -> Declarations | None:
        try:
            self.doc = compose(self.path, text)
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
        root = self.doc.root
        if root is None:
            self.issues.append(
                DialplanIssue(
                    SourceMark(self.path, 1, 1),
                    "expected a dialplan (a mapping with keys version, routes, flows), "
                    "found an empty document",
                )
            )
            return None
        self.issues.extend(DialplanIssue(mark, message) for mark, message in self.doc.problems)
        top = self.mapping(root)
        if top is None:
            return None
        result = self.result
        defaults = DEFAULT_SETTINGS
        if "settings" in top:
            defaults = self.settings(top["settings"][1], DEFAULT_SETTINGS, whole_flow=True)
        if "variables" in top:
            result.defaults.extend(self._variables(top["variables"][1]))
        if "routes" in top:
            self._routes(top["routes"][1], result)
        if "flows" in top:
            self._flows(top["flows"][1], defaults, result)
        return result

    def _variables(self, node: Node) -> list[tuple[str, Template]]:
        entries = self.mapping(node)
        out: list[tuple[str, Template]] = []
        for name, (key_node, value_node) in (entries or {}).items():
            variable = self.variable_name(key_node, "a variable", assigning=True)
            value = self.template(value_node, f"variable {name!r}")
            if variable is not None:
                self.result.variables.add(variable)
            if variable is not None and value is not None:
                out.append((variable, value))
        return out

    def settings(self, node: Node, base: Settings, whole_flow: bool) -> Settings:
        entries = self.mapping(node)
        if entries is None:
            return base
        voice = self.optional(entries, "voice", self.string)
        barge_in: bool | None = None
        dtmf_barge_in: bool | None = None
        if "barge_in" in entries:
            value_node = entries["barge_in"][1]
            if isinstance(value_node, ScalarNode) and value_node.value == "dtmf":
                barge_in, dtmf_barge_in = False, True
            else:
                barge_in = self.boolean(value_node)
                dtmf_barge_in = barge_in
        timeout = self.optional(entries, "no_input_timeout_ms", self.integer)
        language = self.optional(entries, "language", self.string)
        asr_model = self.optional(entries, "asr_model", self.string)
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
                max_duration = self.integer(value_node)
        timezone = self.optional(entries, "timezone", self._timezone)
        inter_digit = self.optional(entries, "inter_digit_timeout_ms", self.integer)
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
        entries = self.mapping(node)
        if entries is None:
            return base
        values = {key: self.optional(entries, key, self.integer)
                  for key in ("end_silence_ms", "fast_end_silence_ms", "max_speech_ms")}
        return Endpointing(
            end_silence_ms=values["end_silence_ms"] or base.end_silence_ms,
            fast_end_silence_ms=values["fast_end_silence_ms"] or base.fast_end_silence_ms,
            max_speech_ms=values["max_speech_ms"] or base.max_speech_ms,
        )

    def _timezone(self, node: Node) -> str | None:
        value = self.string(node)
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

    def _routes(self, node: Node, result: Declarations) -> None:
        items = self.sequence(node)
        if items is None:
            return
        for item in items:
            entries = self.mapping(item)
            if entries is None:
                continue
            number = self.optional(entries, "number", lambda n: self._pattern(n, "'number'"))
            caller = self.optional(entries, "caller", lambda n: self._pattern(n, "'caller'"))
            flow = self.optional(entries, "flow", self.name)
            priority = self.optional(entries, "priority", self.integer)
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
        text = self.string(node)
        if text is None:
            return None
        try:
            return NumberPattern.parse(text)
        except ValueError as exc:
            self.error(node, f"bad pattern in {what}: {exc}")
            return None

    def _flows(self, node: Node, defaults: Settings, result: Declarations) -> None:
        entries = self.mapping(node)
        if entries is None:
            return
        for name, (key_node, flow_node) in entries.items():
            result.declared_flows.add(name)
            flow = self._flow(name, key_node, flow_node, defaults, result)
            if flow is not None:
                result.flows[name] = flow

    def _flow(
        self, name: str, key_node: Node, node: Node, defaults: Settings, result: Declarations
    ) -> Flow | None:
        what = f"flow {name!r}"
        self._flow_name = name
        entries = self.mapping(node)
        if entries is None:
            return None
        settings = defaults
        if "settings" in entries:
            settings = self.settings(entries["settings"][1], defaults, whole_flow=True)
        variables: list[tuple[str, Template]] = []
        if "variables" in entries:
            variables = self._variables(entries["variables"][1])
        needs_model = False
        if "needs_model" in entries:
            needs_model = bool(self.boolean(entries["needs_model"][1]))
        if "steps" not in entries:
            return None
        items = self.sequence(entries["steps"][1])
        if items is None:
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
        entries = self.mapping(node)
        if entries is None:
            return None
        kinds = [key for key in entries if key in _STEP_KINDS]
        if len(kinds) != 1:
            return None  # the schema says which kind is missing or extra
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
            given = self.name(entries["id"][1])
            if given is None:
                return None
            step_id = given
        settings = base
        if "settings" in entries:
            settings = self.settings(entries["settings"][1], base, whole_flow=False)
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
            entries = self.mapping(node)
            if entries is None or "text" not in entries:
                return None
            text = self.template(entries["text"][1], "'text'")
            voice = self.optional(entries, "voice", self.string)
            barge = self.optional(entries, "barge_in", self.boolean)
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
        entries = self.mapping(node)
        if entries is None:
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
            value = self.boolean(entries["skip_if_set"][1])
            ok = ok and value is not None
            skip_if_set = bool(value)
            if skip_if_set and slot is None:
                self.error(entries["skip_if_set"][0], "'skip_if_set' needs a 'slot' in the ask")
                ok = False
        intents: list[Intent] = []
        if "intents" in entries:
            intents_node = entries["intents"][1]
            intent_entries = self.mapping(intents_node)
            if intent_entries is None:
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
            value = self.choice(node)
            return {value} if value is not None else None
        items = self.sequence(node)
        if items is None:
            return None
        modes: set[str] = set()
        for item in items:
            value = self.choice(item)
            if value is None:
                return None
            modes.add(value)
        return modes

    def _slot(self, node: Node) -> Slot | None:
        entries = self.mapping(node)
        if entries is None or "name" not in entries or "type" not in entries:
            return None
        name = self.variable_name(entries["name"][1], "the slot's 'name'", assigning=True)
        kind = self.choice(entries["type"][1])
        limits: dict[str, int | None] = {}
        for key in ("min_length", "max_length"):
            limits[key] = self.optional(entries, key, self.integer)
        for key in ("min", "max"):
            limits[key] = self.optional(entries, key, self.integer)
        terminator: str | None = "#"
        if "terminator" in entries:
            value_node = entries["terminator"][1]
            if _is_null(value_node):
                terminator = None
            else:
                terminator = self.string(value_node)
                if terminator is None:
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
        self.result.intents.add(name)
        what = f"intent {name!r}"
        entries = self.mapping(node)
        if entries is None:
            return None
        ok = True
        examples: list[str] = []
        if "examples" in entries:
            items = self.sequence(entries["examples"][1])
            if items is None:
                ok = False
            else:
                for item in items:
                    text = self.string(item)
                    if text is None:
                        ok = False
                    else:
                        examples.append(text)
        synonyms: list[tuple[str, tuple[str, ...]]] = []
        if "synonyms" in entries:
            synonym_entries = self.mapping(entries["synonyms"][1])
            if synonym_entries is None:
                ok = False
            for word, (word_node, alternatives_node) in (synonym_entries or {}).items():
                items = self.sequence(alternatives_node)
                alternatives = [self.string(i) for i in items or []]
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
            value = self.string(dtmf_node)
            if value is None:
                ok = False
            else:
                dtmf = value
        slots: list[tuple[str, str]] = []
        if "slots" in entries:
            slot_entries = self.mapping(entries["slots"][1])
            if slot_entries is None:
                ok = False
            for slot_name, (slot_key, type_node) in (slot_entries or {}).items():
                variable = self.variable_name(slot_key, "a slot name", assigning=True)
                kind = self.choice(type_node)
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
        entries = self.mapping(node)
        if entries is None:
            return None
        ok = True
        reprompts: list[Template] = []
        if "reprompts" in entries:
            items = self.sequence(entries["reprompts"][1])
            if items is None:
                ok = False
            else:
                for item in items:
                    template = self.template(item, f"a reprompt of '{key}'")
                    if template is None:
                        ok = False
                    else:
                        reprompts.append(template)
        retries = self.optional(entries, "retries", self.integer)
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
        entries = self.mapping(node)
        if entries is None:
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
        items = self.sequence(node)
        if items is None:
            return None
        ok = True
        cases: list[BranchCase] = []
        for item in items:
            entries = self.mapping(item)
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
        entries = self.mapping(node)
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
            method = self.choice(entries["method"][1]) or ""
            ok = ok and bool(method)
        headers = self._template_pairs(entries, "headers")
        query = self._template_pairs(entries, "query")
        ok = ok and headers is not None and query is not None
        body: JsonValue = None
        if "body" in entries:
            if method == "GET":
                self.error(entries["body"][0], "a GET webhook has no body; use 'query'")
                ok = False
            body = self._json(entries["body"][1])
        timeout = self.optional(entries, "timeout_ms", self.integer)
        retries = self.optional(entries, "retries", self.integer)
        backoff = self.optional(entries, "retry_backoff_ms", self.integer)
        ok = ok and all(
            k not in entries or v is not None
            for k, v in (("timeout_ms", timeout), ("retries", retries), ("retry_backoff_ms", backoff))
        )
        save_as = self.variable_name(entries["save_as"][1], "'save_as'", assigning=True)
        fields: tuple[str, ...] | None = None
        if "fields" in entries:
            items = self.sequence(entries["fields"][1])
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

    def _template_pairs(self, entries: _Entries, key: str) -> tuple[tuple[str, Template], ...] | None:
        if key not in entries:
            return ()
        mapping = self.mapping(entries[key][1])
        if mapping is None:
            return None
        out: list[tuple[str, Template]] = []
        ok = True
        for name, (_, value_node) in mapping.items():
            value = self.template(value_node, f"{key[:-1] if key.endswith('s') else key} {name!r}")
            if value is None:
                ok = False
                continue
            out.append((name, value))
        return tuple(out) if ok else None

    def _json(self, node: Node) -> JsonValue:
        if isinstance(node, MappingNode):
            entries = self.mapping(node) or {}
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
        entries = self.mapping(node)
        if entries is None or "open" not in entries or "closed" not in entries:
            return None
        ok = True
        timezone = self.optional(entries, "timezone", self._timezone)
        if "timezone" in entries and timezone is None:
            ok = False
        windows = self._open_windows(entries["open"][1])
        holidays: list[Holiday] = []
        if "holidays" in entries:
            for item in self.sequence(entries["holidays"][1]) or []:
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
        entries = self.mapping(node)
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
                text = self.string(range_node)
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
            entries = self.mapping(node)
            if entries is None or "date" not in entries:
                return None
            date_node = entries["date"][1]
            if "name" in entries:
                name = self.string(entries["name"][1]) or ""
        text = self.string(date_node)
        if text is None:
            return None
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
        entries = self.mapping(node)
        if entries is None or "to" not in entries:
            return None
        target = self.template(entries["to"][1], "'to'")
        mode = "blind"
        if "mode" in entries:
            mode = self.choice(entries["mode"][1]) or ""
        timeout = self.optional(entries, "timeout_ms", self.integer)
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
        entries = self.mapping(node)
        if entries is None or "name" not in entries or "uri" not in entries:
            return None
        name = self.name(entries["name"][1])
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
        entries = self.mapping(node)
        if entries is None or "flow" not in entries:
            return None
        flow = self.name(entries["flow"][1])
        if flow is None:
            return None
        self.result.flow_refs.append((flow, "flow", self.mark(entries["flow"][1])))
        target = None
        if "step" in entries:
            target = self.name(entries["step"][1])
            if target is None:
                return None
            self.result.references.append(
                Reference(flow, target, "step", self.mark(entries["step"][1]))
            )
        return GotoStep(step_id, target, flow, settings, mark)

    def _return_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, _next: str | None
    ) -> ReturnStep | None:
        return ReturnStep(step_id, settings, mark)

    def _hangup_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, _next: str | None
    ) -> HangupStep | None:
        if _is_null(node):
            return HangupStep(step_id, "normal", settings, mark)
        entries = self.mapping(node)
        if entries is None:
            return None
        reason = "normal"
        if "reason" in entries:
            reason_node = entries["reason"][1]
            value = self.string(reason_node)
            if value is None:
                return None
            reason = value
        return HangupStep(step_id, reason, settings, mark)

    def _record_step(
        self, step_id: str, node: Node, settings: Settings, mark: SourceMark, next_step: str | None
    ) -> RecordStep | None:
        entries = self.mapping(node)
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
        max_ms = self.integer(entries["max_ms"][1])
        beep = True
        if "beep" in entries:
            value = self.boolean(entries["beep"][1])
            ok = ok and value is not None
            beep = bool(value)
        prompt = self.optional(entries, "prompt", lambda n: self.template(n, "'prompt'"))
        terminator: str | None = "#"
        if "terminator" in entries:
            value_node = entries["terminator"][1]
            if _is_null(value_node):
                terminator = None
            else:
                terminator = self.choice(value_node)
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
        entries = self.mapping(node)
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
            value = self.boolean(entries["say"][1])
            ok = ok and value is not None
            say = bool(value)
        timeout = self.optional(entries, "timeout_ms", self.integer)
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
"""Dialplan files in, :class:`~agent.dialplan.model.Dialplan` out.

Each file is composed and checked against the schema (:mod:`agent.dialplan.validation`); the
readers (this module for files, settings, routes and flows; :mod:`agent.dialplan.step_reader`
and :mod:`agent.dialplan.ask_reader` for steps) then build the frozen objects from every part
the schema accepted and check what a schema cannot: settings that apply to whole calls, time
zones, number patterns, step ids used twice, ``next`` on steps that never continue. What each
file declares and refers to is resolved across files by :mod:`agent.dialplan.checks`.
"""

from __future__ import annotations

import hashlib
from types import MappingProxyType
from typing import Sequence

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from agent.dialplan.checks import (
    Declarations,
    check_intents,
    check_loops,
    check_reachability,
    check_references,
    check_routes,
    check_variables,
    sorted_unique,
)
from agent.dialplan.model_tools import check_model_tools
from agent.dialplan.model import (
    DEFAULT_ROUTE_PRIORITY,
    DEFAULT_SETTINGS,
    Confirmation,
    Dialplan,
    DialplanError,
    DialplanIssue,
    Endpointing,
    Flow,
    MomentRequest,
    Route,
    Settings,
    Step,
)
from agent.dialplan.templates import NumberPattern, Template
from agent.dialplan.validation import compose, load_schema
from agent.dialplan.node_reader import is_null
from agent.dialplan.step_reader import StepReader
from agent.yamlmarks import Mark

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
            issues.append(DialplanIssue(Mark(name, 1, 1), f"cannot read file: {exc.strerror}"))
            continue
        try:
            sources.append((name, data.decode("utf-8")))
        except UnicodeDecodeError as exc:
            issues.append(DialplanIssue(Mark(name, 1, 1), f"file is not UTF-8 text: {exc.reason}"))
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
    issues.extend(DialplanIssue(mark, message) for mark, message in check_model_tools(flows))
    if not issues and not merged.had_errors and routes:
        # The shape of the flows is only meaningful once every reference resolves.
        issues.extend(check_reachability(routes, flows))
        issues.extend(check_loops(flows))
    if sources and not routes and not issues:
        issues.append(
            DialplanIssue(
                Mark(sources[0][0], 1, 1), "no routes: add at least one entry under 'routes'"
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


_STEP_KINDS = tuple(
    k for k in load_schema()["$defs"]["step"]["properties"] if k not in ("id", "settings", "next")
)
# Steps that continue to a following step, so a 'next' means something.
_NEXT_KINDS = ("say", "ask", "set", "branch", "webhook", "hours", "record", "model")


def _id_node(step: Node) -> ScalarNode | None:
    """The scalar value of a step's ``id`` key, if it has one."""
    if isinstance(step, MappingNode):
        for key_node, value_node in step.value:
            if isinstance(key_node, ScalarNode) and key_node.value == "id":
                return value_node if isinstance(value_node, ScalarNode) else None
    return None


class _FileReader(StepReader):
    """Builds one file's objects from the parts the schema accepted: settings, routes, flows."""

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
            self.issues.append(DialplanIssue(Mark(self.path, line, column), message))
            return None
        except yaml.YAMLError as exc:
            self.issues.append(DialplanIssue(Mark(self.path, 1, 1), f"YAML error: {exc}"))
            return None
        root = self.doc.root
        if root is None:
            self.issues.append(
                DialplanIssue(
                    Mark(self.path, 1, 1),
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
        escalation = base.escalation
        if "escalation" in entries:
            value_node = entries["escalation"][1]
            escalation = None if is_null(value_node) else self.name(value_node)
            if escalation is not None:
                self.escalation_marks.setdefault(escalation, self.mark(value_node))
        confirm = base.confirm
        if "confirm" in entries:
            confirm = self._confirmation(entries["confirm"][1], base.confirm)
        no_match = base.no_match
        if "no_match" in entries:
            no_match = self.person_offer(entries["no_match"][1], base.no_match)
        hold = base.hold
        if "hold" in entries:
            hold = self._moment_request(entries["hold"][1], base.hold)
        system_prompt = self.optional(entries, "system_prompt", self.string)
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
            escalation=escalation,
            confirm=confirm,
            no_match=no_match,
            hold=hold,
            system_prompt=system_prompt if system_prompt is not None else base.system_prompt,
        )

    def _moment_request(self, node: Node, base: MomentRequest) -> MomentRequest:
        """``hold: false``, or ``hold: {prompt, timeout_ms}`` over *base*."""
        if isinstance(node, ScalarNode):
            enabled = self.boolean(node)
            return base if enabled is None else MomentRequest(enabled, base.prompt, base.timeout_ms)
        entries = self.mapping(node)
        if entries is None:
            return base
        prompt = self.optional(entries, "prompt", lambda n: self.template(n, "'prompt'"))
        timeout = self.optional(entries, "timeout_ms", self.integer)
        return MomentRequest(
            True,
            prompt if prompt is not None else base.prompt,
            timeout if timeout is not None else base.timeout_ms,
        )

    def _confirmation(self, node: Node, base: Confirmation) -> Confirmation:
        entries = self.mapping(node)
        if entries is None:
            return base
        min_score = self.optional(entries, "min_score", self.fraction)
        min_confidence = self.optional(entries, "min_confidence", self.fraction)
        reask_after = self.optional(entries, "reask_after_ms", self.integer)
        end = self.optional(entries, "end_prompt", lambda n: self.template(n, "'end_prompt'"))
        transfer = self.optional(
            entries, "transfer_prompt", lambda n: self.template(n, "'transfer_prompt'")
        )
        return Confirmation(
            min_score=min_score if min_score is not None else base.min_score,
            min_confidence=min_confidence if min_confidence is not None else base.min_confidence,
            reask_after_ms=reask_after if reask_after is not None else base.reask_after_ms,
            end_prompt=end if end is not None else base.end_prompt,
            transfer_prompt=transfer if transfer is not None else base.transfer_prompt,
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

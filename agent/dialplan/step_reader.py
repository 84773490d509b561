"""Reading the step kinds other than ``ask``: one method per kind, ``_<kind>_step``.

Beyond the schema: webhook URLs must not come from the caller, a GET has no body, recordings
get safe file names, opening hours and holidays parse, ``timeout_ms`` only on bridged transfers.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import replace

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agent.dialplan.checks import Reference
from agent.dialplan.model import (
    CONFIG_PREFIX,
    BranchCase,
    BranchStep,
    GotoStep,
    HangupStep,
    Holiday,
    HoursStep,
    ModelStep,
    ModelTool,
    OpenWindow,
    QueueStep,
    RecordStep,
    ReturnStep,
    SayStep,
    SetStep,
    Settings,
    TransferStep,
    WebhookStep,
)
from agent.dialplan.templates import (
    JsonArray,
    JsonObject,
    JsonValue,
    Placeholder,
    Template,
    Variable,
    parse_template,
)
from agent.dialplan.node_reader import Entries, is_null
from agent.dialplan.ask_reader import AskReader
from agent.dialplan.model_tools import ARGS_PREFIX, parameters_problem, plain_json
from agent.yamlmarks import Mark

__all__ = ["StepReader"]

_FILE_TEXT = re.compile(r"[A-Za-z0-9_.+-]*\Z")
_WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_ALIASES = {
    "daily": tuple(range(7)), "weekdays": tuple(range(5)), "weekends": (5, 6),
    **{name: (i,) for i, name in enumerate(_WEEKDAY_NAMES)},
    **{full: (i,) for i, full in enumerate(
        ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))},
}
_TIME_RANGE = re.compile(r"(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\Z")


class StepReader(AskReader):
    """Reads every step kind (asks through :class:`AskReader`)."""

    def _say_step(
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
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

    def _set_step(
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
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

    def _template_pairs(self, entries: Entries, key: str) -> tuple[tuple[str, Template], ...] | None:
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
        if is_null(node):
            return None
        if node.tag == "tag:yaml.org,2002:bool":
            return bool(self._constructor.construct_yaml_bool(node))
        if node.tag == "tag:yaml.org,2002:int":
            return int(self._constructor.construct_yaml_int(node))
        if node.tag == "tag:yaml.org,2002:float":
            return float(self._constructor.construct_yaml_float(node))
        return self.template(node, "the webhook body")

    def _hours_step(
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, _next: str | None
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, _next: str | None
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, _next: str | None
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, _next: str | None
    ) -> ReturnStep | None:
        return ReturnStep(step_id, settings, mark)

    def _hangup_step(
        self, step_id: str, node: Node, settings: Settings, mark: Mark, _next: str | None
    ) -> HangupStep | None:
        if is_null(node):
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
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
            if is_null(value_node):
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
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
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
        tools: tuple[ModelTool, ...] | None = ()
        if "tools" in entries:
            tools = self._model_tools(entries["tools"][1])
        rounds = self.optional(entries, "max_tool_rounds", self.integer)
        ok = ok and tools is not None and ("max_tool_rounds" not in entries or rounds is not None)
        if not ok or on_failure is None or ("instructions" in entries and instructions is None):
            return None
        return ModelStep(
            step_id, instructions, text, save_as, say,
            timeout if timeout is not None else 5000, on_failure, settings, mark, next_step,
            tools or (), rounds if rounds is not None else 3,
        )

    def _model_tools(self, node: Node) -> tuple[ModelTool, ...] | None:
        """A model step's ``tools``: step ids, or ``{step, description, parameters}``."""
        if not isinstance(node, SequenceNode):
            return None
        tools: list[ModelTool] = []
        ok = True
        for item in node.value:
            if isinstance(item, ScalarNode):
                name = self.ref(item, "tools")
                if name is None:
                    ok = False
                    continue
                tools.append(ModelTool(name, "", None, self.mark(item)))
                continue
            entries = self.mapping(item)
            if entries is None or "step" not in entries:
                ok = False
                continue
            name = self.ref(entries["step"][1], "tools")
            description = self.optional(entries, "description", self.string) or ""
            parameters = None
            if "parameters" in entries:
                parameters = plain_json(entries["parameters"][1])
                problem = parameters_problem(parameters)
                if problem is not None:
                    self.error(entries["parameters"][1], f"'parameters' of tool {name!r}: {problem}")
                    ok = False
            if name is None:
                ok = False
                continue
            tools.append(ModelTool(name, description, parameters, self.mark(item)))
        if tools:
            self.result.prefixes[ARGS_PREFIX] = None
        return tuple(tools) if ok else None


def _replace(settings: Settings, **changes: object) -> Settings:
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

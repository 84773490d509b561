"""Running a flow's steps for one call: the call's state, and what each step type does.

:class:`FlowRunner` holds one call's state (variables, current flow and step, sub-flow stack,
history) and runs steps from a given one until a step waits for an outcome or the call ends.
:class:`~agent.dialplan.engine.DialogueSession` builds on it with the events a call delivers.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Callable, Mapping
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from agent.dialplan.actions import (
    Action, AskModel, CallWebhook, DialogueEvent, Hangup, Record, Say, Transfer,
    WebhookRequest,
)
from agent.dialplan.asks import listen_for
from agent.dialplan.escalation import Question
from agent.dialplan.model import (
    AskStep,
    BranchStep,
    Dialplan,
    Flow,
    GotoStep,
    HangupStep,
    HoursStep,
    ModelStep,
    QueueStep,
    RecordStep,
    ReturnStep,
    SayStep,
    SetStep,
    Settings,
    Step,
    Template,
    TransferStep,
    WebhookStep,
    prompt_cache_key,
)
from agent.dialplan.templates import render_json, to_text
from agent.secrets import redact, redact_url
from agent.dialplan.variables import CallScope

__all__ = ["FlowRunner", "MAX_HISTORY_TURNS", "MAX_STEPS_PER_EVENT", "MAX_SUBFLOW_DEPTH"]

MAX_STEPS_PER_EVENT = 100
"""Steps one event may run before the engine gives up on a runaway flow and hangs up."""

MAX_SUBFLOW_DEPTH = 16
"""Sub-flows entered with ``goto: {flow: ...}`` that may be open at once."""

MAX_HISTORY_TURNS = 20
"""Conversation turns passed to a dialogue model."""

# What the runner waits for (:attr:`FlowRunner._mode`).
IDLE = "idle"
LISTENING = "listening"
TRANSFERRING = "transferring"
WEBHOOK = "webhook"
RECORDING = "recording"
MODEL = "model"
ENDED = "ended"

_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.+-]")


def _wall_clock() -> datetime:
    return datetime.now(timezone.utc)


class FlowRunner:
    """One call's state in one dialplan, and the execution of its steps.

    *variables* are the call's template values with flat dotted keys. *now* returns the
    current time, timezone-aware (default: the wall clock, read only when a step needs the
    time). Raises ``KeyError`` if *flow* is not in the dialplan.
    """

    def __init__(
        self,
        dialplan: Dialplan,
        flow: str,
        variables: Mapping[str, str],
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self._dialplan = dialplan
        self._entry: Flow = dialplan.flow(flow)
        self._flow: Flow = self._entry
        self._variables: dict[str, str] = dict(variables)
        self._now = now or _wall_clock
        self._scope = self._new_scope()
        self._mode = IDLE
        self._started = False
        self._step: Step | None = None
        self._stack: list[tuple[Flow, str | None]] = []
        self._no_input_count = 0
        self._no_match_count = 0
        self._digits = ""
        self._question: Question | None = None
        self._offered = False
        self._history: list[DialogueEvent] = []
        self._conversation: list[tuple[str, str]] = []
        self._transfer: dict[str, str] | None = None
        self._end_reason = ""

    def _new_scope(self) -> CallScope:
        return CallScope(self._variables, lambda: self._flow.name, lambda: self.state,
                         self._local_now)

    @property
    def state(self) -> str:
        """Id of the current step ("" before the flow starts)."""
        return self._step.id if self._step is not None else ""

    @property
    def ended(self) -> bool:
        """True once a Hangup has been issued (or a bridged transfer connected)."""
        return self._mode == ENDED

    def _local_now(self) -> datetime:
        step = self._step
        settings = step.settings if step is not None else self._flow.settings
        name = step.timezone if isinstance(step, HoursStep) and step.timezone else settings.timezone
        moment = self._now()
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(ZoneInfo(name))

    def _apply_defaults(self, defaults: tuple[tuple[str, Template], ...]) -> None:
        for name, template in defaults:
            if name not in self._variables:
                self._variables[name] = to_text(template.evaluate(self._scope))

    def _record(
        self,
        kind: str,
        text: str = "",
        intent: str | None = None,
        score: float | None = None,
        data: dict[str, str] | None = None,
    ) -> None:
        self._history.append(
            DialogueEvent(kind, self.state, text, intent, score, self._flow.name, data)
        )

    def _run(self, step_id: str | None) -> list[Action]:
        """Execute steps from *step_id* until one waits for something or the call ends."""
        actions: list[Action] = []
        for _ in range(MAX_STEPS_PER_EVENT):
            if step_id is None:
                if not self._stack:
                    actions.append(self._hangup("end_of_flow"))
                    return actions
                flow, step_id = self._stack.pop()
                self._record("return", text=flow.name)
                self._flow = flow
                continue
            step = self._flow.step(step_id)
            self._step = step
            self._record("step")
            step_id = _STEP_HANDLERS[type(step)](self, step, actions)
            if self._mode != IDLE:
                return actions
        actions.append(self._hangup("step_limit"))
        return actions

    # Each step handler appends the step's actions and returns the next step id (None: the
    # flow's end). A step that waits for an outcome changes the mode; the run then stops.

    def _say_step(self, step: SayStep, actions: list[Action]) -> str | None:
        self._say_into(actions, step.text, step.settings)
        return self._flow.successor(step)

    def _ask_step(self, step: AskStep, actions: list[Action]) -> str | None:
        if step.skip_if_set and step.slot is not None and self._variables.get(step.slot.name):
            self._record("skipped", text=self._variables[step.slot.name])
            return self._flow.successor(step)
        self._no_input_count = 0
        self._no_match_count = 0
        self._digits = ""
        self._question = None
        self._offered = False
        if step.prompt is not None:
            self._say_into(actions, step.prompt, step.settings)
        actions.append(listen_for(step))
        self._mode = LISTENING
        return None

    def _set_step(self, step: SetStep, actions: list[Action]) -> str | None:
        assigned: dict[str, str] = {}
        for name, template in step.assignments:
            value = to_text(template.evaluate(self._scope))
            self._variables[name] = value
            assigned[name] = value
        self._record("set", text=", ".join(assigned), data=assigned)
        return self._flow.successor(step)

    def _branch_step(self, step: BranchStep, actions: list[Action]) -> str | None:
        for case in step.cases:
            if case.when.is_true(self._scope):
                self._record("branch", text=case.when.source, data={"goto": case.goto})
                return case.goto
        self._record("branch", text="otherwise")
        return self._flow.successor(step)

    def _webhook_step(self, step: WebhookStep, actions: list[Action]) -> str | None:
        request, problem = webhook_request(step, self._scope, self._variables, self._flow.name)
        if request is None:
            self._variables["webhook.status"] = "failed"
            self._variables["webhook.reason"] = problem
            self._record("webhook_failed", text=redact(problem), data={"reason": redact(problem)})
            return step.on_failure
        self._record("webhook", text=f"{request.method} {redact_url(request.url)}")
        self._mode = WEBHOOK
        actions.append(CallWebhook(request))
        return None

    def _hours_step(self, step: HoursStep, actions: list[Action]) -> str | None:
        status, holiday = step.status(self._local_now())
        self._variables["hours.open"] = "true" if status == "open" else "false"
        self._variables["hours.holiday"] = holiday
        self._record("hours", text=status, data={"status": status, "holiday": holiday})
        if status == "open":
            return self._flow.successor(step)
        if status == "holiday" and step.holiday is not None:
            return step.holiday
        return step.closed

    def _transfer_step(self, step: TransferStep | QueueStep, actions: list[Action]) -> str | None:
        template = step.to if isinstance(step, TransferStep) else step.uri
        target = template.render(self._scope).strip()
        missing = template.missing(self._scope)
        if not target or missing:
            why = f"no transfer target ({', '.join(missing) or 'empty target'})"
            self._record("transfer_failed", text=why)
            self._variables["transfer.result"] = "failed"
            self._variables["transfer.reason"] = why
            self._transfer = {"target": target, "result": "failed", "reason": why}
            return step.on_failure or self._flow.following(step)
        if isinstance(step, QueueStep):
            if step.announce is not None:
                self._say_into(actions, step.announce, step.settings)
            transfer = Transfer(target, "blind", queue=step.name)
        else:
            transfer = Transfer(target, step.mode, step.timeout_ms)
        self._record("transfer", text=target, data={"mode": transfer.mode,
                                                    "queue": transfer.queue or ""})
        self._transfer = {"target": target, "mode": transfer.mode,
                          "queue": transfer.queue or "", "result": "pending"}
        self._mode = TRANSFERRING
        actions.append(transfer)
        return None

    def _goto_step(self, step: GotoStep, actions: list[Action]) -> str | None:
        if step.flow is None:
            self._record("goto", text=step.step or "")
            return step.step
        if len(self._stack) >= MAX_SUBFLOW_DEPTH:
            actions.append(self._hangup("stack_overflow"))
            return None
        self._stack.append((self._flow, self._flow.following(step)))
        target = self._dialplan.flow(step.flow)
        self._record("goto", text=f"{target.name}/{step.step or target.steps[0].id}")
        self._flow = target
        self._apply_defaults(target.variables)
        return step.step or target.steps[0].id

    def _return_step(self, step: ReturnStep, actions: list[Action]) -> str | None:
        if not self._stack:
            actions.append(self._hangup("end_of_flow"))
            return None
        return_flow, return_step = self._stack.pop()
        self._record("return", text=return_flow.name)
        self._flow = return_flow
        return return_step if return_step is not None else self._end_of(return_flow, actions)

    def _record_step(self, step: RecordStep, actions: list[Action]) -> str | None:
        if step.prompt is not None:
            self._say_into(actions, step.prompt, step.settings)
        path = _safe_file_name(step.file.render(self._scope))
        self._record("record", text=path)
        self._mode = RECORDING
        actions.append(Record(path, step.max_ms, step.beep, step.terminator))
        return None

    def _model_step(self, step: ModelStep, actions: list[Action]) -> str | None:
        instructions = step.instructions.render(self._scope) if step.instructions else ""
        if step.settings.system_prompt:
            instructions = "\n\n".join(p for p in (step.settings.system_prompt, instructions) if p)
        text = step.input.render(self._scope)
        self._record("model", text=text)
        self._mode = MODEL
        history = tuple(self._conversation[-MAX_HISTORY_TURNS:])
        actions.append(self._model_ask(step, instructions, text, history))  # type: ignore[attr-defined]
        return None

    def _hangup_step(self, step: HangupStep, actions: list[Action]) -> str | None:
        actions.append(self._hangup(step.reason))
        return None

    def _end_of(self, flow: Flow, actions: list[Action]) -> str | None:
        """A sub-flow returned to the last step of its caller: continue popping, or hang up."""
        if self._stack:
            outer, step_id = self._stack.pop()
            self._flow = outer
            return step_id if step_id is not None else self._end_of(outer, actions)
        actions.append(self._hangup("end_of_flow"))
        return None

    def _say_into(self, actions: list[Action], template: Template, settings: Settings) -> None:
        """Append the Say of *template*, unless it renders to nothing."""
        say = self._say(template, settings)
        if say is not None:
            actions.append(say)

    def _say(self, template: Template, settings: Settings) -> Say | None:
        text = template.render(self._scope)
        if not text.strip():
            return None
        cache_key = prompt_cache_key(text, settings.voice) if template.is_static else None
        self._conversation.append(("agent", text))
        return Say(text, settings.voice, settings.barge_in, cache_key, dtmf_flag(settings),
                   self.state)

    def _hangup(self, reason: str) -> Hangup:
        self._record("hangup", text=reason)
        self._mode = ENDED
        self._end_reason = reason
        return Hangup(reason)


_STEP_HANDLERS: dict[type, Callable[[FlowRunner, Any, list[Action]], str | None]] = {
    SayStep: FlowRunner._say_step,
    AskStep: FlowRunner._ask_step,
    SetStep: FlowRunner._set_step,
    BranchStep: FlowRunner._branch_step,
    WebhookStep: FlowRunner._webhook_step,
    HoursStep: FlowRunner._hours_step,
    TransferStep: FlowRunner._transfer_step,
    QueueStep: FlowRunner._transfer_step,
    GotoStep: FlowRunner._goto_step,
    ReturnStep: FlowRunner._return_step,
    RecordStep: FlowRunner._record_step,
    ModelStep: FlowRunner._model_step,
    HangupStep: FlowRunner._hangup_step,
}


def webhook_request(
    step: WebhookStep, scope: Mapping[str, str], variables: Mapping[str, str], flow: str
) -> tuple[WebhookRequest | None, str]:
    """The HTTP request of a webhook step rendered with *scope*, or None and why not.

    Without a ``query``, a GET carries the call's ids; without a ``body``, other methods send
    the call, *flow*, step and the call's variables (``config.*`` left out) as JSON.
    """
    url = step.url.render(scope).strip()
    if not url.lower().startswith(("http://", "https://")):
        return None, f"bad url {url!r}: expected http:// or https://"
    query = [(name, value.render(scope)) for name, value in step.query]
    if step.method == "GET" and not step.query:
        query = [(k, variables.get(k, "")) for k in ("call_id", "caller", "called")]
    if query:
        url += ("&" if "?" in url else "?") + urlencode(query)
    headers = [(name, value.render(scope)) for name, value in step.headers]
    body: bytes | None = None
    if step.method != "GET":
        if step.default_body:
            payload: object = {
                "call": {k: variables.get(k, "")
                         for k in ("call_id", "caller", "called", "region")},
                "flow": flow,
                "step": step.id,
                "variables": {k: v for k, v in sorted(variables.items())
                              if not k.startswith("config.")},
            }
        else:
            payload = render_json(step.body, scope)
        body = json.dumps(payload, sort_keys=True).encode("utf-8")
        if not any(name.lower() == "content-type" for name, _ in headers):
            headers.append(("Content-Type", "application/json"))
    return WebhookRequest(
        step.id, url, step.method, tuple(headers), body, step.timeout_ms, step.retries,
        step.retry_backoff_ms,
    ), ""


def dtmf_flag(settings: Settings) -> bool | None:
    """A Say's ``dtmf_barge_in``: None when keys interrupt exactly when speech does."""
    return None if settings.dtmf_barge_in == settings.barge_in else settings.dtmf_barge_in


def _safe_file_name(name: str) -> str:
    cleaned = _UNSAFE_FILE_CHARS.sub("_", name).lstrip(".") or "recording"
    if not cleaned.lower().endswith(".wav"):
        cleaned += ".wav"
    return cleaned[:200]

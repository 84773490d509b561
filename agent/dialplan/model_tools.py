"""Functions a ``model`` step offers the dialogue model as tools, and their runs.

A model step's ``tools`` name steps of its flow: a ``webhook`` step (called with the model's
arguments as ``args.<name>``, its answer sent back to the model), a ``hangup``, ``transfer`` or
``queue`` step (destructive: the caller is asked the dialplan's ``confirm`` question first and
the step runs only on a yes; a no goes back to the model). Every outcome, errors included,
goes back to the model as a ``tool`` message, and the model is asked again, at most
``max_tool_rounds`` times in one turn; after that it must answer in words.

:class:`ModelToolsMixin` is the part of :class:`~agent.dialplan.engine.DialogueSession` that
does this (no I/O: it returns actions like the rest of the engine).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

import jsonschema
import yaml

from agent.dialplan.actions import Action, AskModel, CallWebhook, Listen, WebhookResult
from agent.dialplan.model import (
    Flow, HangupStep, ModelStep, ModelTool, QueueStep, TransferStep, WebhookStep,
)
from agent.dialplan.runner import IDLE, LISTENING, MODEL, webhook_request
from agent.dialplan.slots import slot_phrases
from agent.dialplan.templates import to_text
from agent.yamlmarks import Mark

__all__ = [
    "MODEL_TOOL",
    "ModelToolsMixin",
    "PendingCall",
    "ToolTurn",
    "check_model_tools",
    "tool_definitions",
]

#: engine mode: a webhook called by the model is running
MODEL_TOOL = "model_tool"

ARGS_PREFIX = "args"

_DEFAULT_DESCRIPTIONS = {
    HangupStep: "End the call. The caller is asked to confirm first.",
    TransferStep: "Transfer the caller to a person. The caller is asked to confirm first.",
    QueueStep: "Put the caller in the queue for a person. The caller is asked to confirm first.",
}
_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


# ------------------------------------------------------------------ reading and checking

def plain_json(node: Any) -> Any:
    """The plain data of a YAML node (a tool's parameter schema)."""
    return yaml.SafeLoader.construct_object(yaml.SafeLoader(""), node, deep=True)


def parameters_problem(value: Any) -> str | None:
    """Why *value* is not a usable JSON schema for a tool's arguments, or None."""
    if not isinstance(value, dict) or value.get("type") != "object":
        return "expected a JSON schema of type 'object'"
    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        return f"not a valid JSON schema: {exc.message}"
    return None


def check_model_tools(flows: Mapping[str, Flow]) -> Iterator[tuple[Mark, str]]:
    """Every tool of a model step is a webhook, transfer, queue or hangup step, and a webhook
    tool has a description (unknown step ids are reported with the other references)."""
    for flow in flows.values():
        for step in flow.steps:
            if not isinstance(step, ModelStep):
                continue
            for tool in step.tools:
                target = next((s for s in flow.steps if s.id == tool.step), None)
                if target is None:
                    continue
                if not isinstance(target, (WebhookStep, HangupStep, TransferStep, QueueStep)):
                    yield tool.mark, (f"'tools' names step {tool.step!r}, a {type(target).__name__}; "
                                      "expected a webhook, transfer, queue or hangup step")
                elif isinstance(target, WebhookStep) and not tool.description:
                    yield tool.mark, (f"'tools': the webhook tool {tool.step!r} needs a 'description' "
                                      "(what it does, for the model)")


def tool_definitions(step: ModelStep, flow: Flow) -> tuple[dict[str, Any], ...]:
    """The OpenAI ``tools`` entries of *step* (function name = step id)."""
    tools = []
    for tool in step.tools:
        target = flow.step(tool.step)
        description = tool.description or _DEFAULT_DESCRIPTIONS.get(type(target), "")
        tools.append({"type": "function", "function": {
            "name": tool.step, "description": description,
            "parameters": tool.parameters if tool.parameters is not None else _EMPTY_PARAMETERS}})
    return tuple(tools)


# ------------------------------------------------------------------ one turn's tool calls

@dataclass(frozen=True)
class PendingCall:
    """A tool call of the model not yet answered."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolTurn:
    """The tool calls of the current model turn: the messages after the caller's words, the
    rounds used, the calls still to run and the one being run or confirmed."""

    #: the model step's first request of this turn (asked again with the tool messages)
    ask: AskModel | None = None
    followup: tuple[dict[str, Any], ...] = ()
    rounds: int = 0
    pending: tuple[PendingCall, ...] = ()
    current: PendingCall | None = None
    confirming: bool = False
    asked_twice: bool = False


class ModelToolsMixin:
    """Tool calls of a model step (see the module's description); mixed into the engine."""

    _tool_turn: ToolTurn = ToolTurn()

    # attributes of the engine this relies on
    _mode: str
    _step: Any
    _flow: Flow
    _variables: dict[str, str]
    _scope: Any

    def _model_ask(self, step: ModelStep, instructions: str, text: str,
                   history: tuple[tuple[str, str], ...]) -> AskModel:
        """The first AskModel of *step* in this turn, with its tools."""
        tools = tool_definitions(step, self._flow) if step.tools else ()
        ask = AskModel(instructions, text, history, step.timeout_ms, step.settings.language,
                       say=step.say, tools=tools)
        self._tool_turn = ToolTurn(ask=ask)
        return ask

    def on_model_tool_calls(self, calls: Any, said: str = "") -> list[Action]:
        """The model's reply asked to run *calls* (objects with ``id``, ``name`` and
        ``arguments``); *said*: the words of the reply already spoken."""
        step = self._step
        if self._mode != MODEL or not isinstance(step, ModelStep):
            return []
        turn = self._tool_turn
        if turn.rounds >= step.max_tool_rounds or not step.tools:
            return self.on_model_failed(f"the model asked for functions after {turn.rounds} round(s) of them")
        pending = tuple(PendingCall(c.id or f"call_{turn.rounds}_{n}", c.name, c.arguments or "{}")
                        for n, c in enumerate(calls))
        message = {"role": "assistant", "content": said or None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in pending]}
        self._tool_turn = replace(turn, followup=turn.followup + (message,), rounds=turn.rounds + 1,
                                  pending=pending, current=None)
        if said.strip():
            self._conversation.append(("agent", said))  # type: ignore[attr-defined]
        self._record("model_tools", text=", ".join(c.name for c in pending),  # type: ignore[attr-defined]
                     data={"calls": ", ".join(f"{c.id}:{c.name}" for c in pending)[:500]})
        return self._next_tool()

    def _next_tool(self) -> list[Action]:
        step = self._step
        assert isinstance(step, ModelStep)
        turn = self._tool_turn
        if not turn.pending:
            self._mode = MODEL
            self._tool_turn = replace(turn, current=None, confirming=False)
            assert turn.ask is not None
            choice = "none" if turn.rounds >= step.max_tool_rounds else "auto"
            return [replace(turn.ask, followup=turn.followup, tool_choice=choice)]
        call, rest = turn.pending[0], turn.pending[1:]
        self._tool_turn = replace(turn, pending=rest, current=call, confirming=False, asked_twice=False)
        tool = next((t for t in step.tools if t.step == call.name), None)
        if tool is None:
            return self._tool_result(call, {"error": f"unknown function {call.name!r}"})
        try:
            arguments = json.loads(call.arguments or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            return self._tool_result(call, {"error": f"arguments are not a JSON object: {exc}"})
        if tool.parameters is not None:
            try:
                jsonschema.validate(arguments, tool.parameters)
            except jsonschema.ValidationError as exc:
                return self._tool_result(call, {"error": f"invalid arguments: {exc.message}"})
        target = self._flow.step(tool.step)
        if isinstance(target, WebhookStep):
            return self._call_webhook_tool(call, target, arguments)
        return self._confirm_tool(call, target)

    def _tool_result(self, call: PendingCall, content: dict[str, Any]) -> list[Action]:
        """Send *content* back as the result of *call*, then run the next call or ask again."""
        text = json.dumps(content, ensure_ascii=False)
        self._record("model_tool_result", text=f"{call.name}: {text[:300]}",  # type: ignore[attr-defined]
                     data={"call": call.id, "tool": call.name, "ok": "false" if "error" in content else "true"})
        turn = self._tool_turn
        message = {"role": "tool", "tool_call_id": call.id, "content": text}
        self._tool_turn = replace(turn, followup=turn.followup + (message,), current=None, confirming=False)
        self._mode = MODEL
        return self._next_tool()

    # -- webhooks
    def _call_webhook_tool(self, call: PendingCall, step: WebhookStep, arguments: dict[str, Any]) -> list[Action]:
        for name in [n for n in self._variables if n.startswith(ARGS_PREFIX + ".")]:
            del self._variables[name]
        for name, value in arguments.items():
            self._variables[f"{ARGS_PREFIX}.{name}"] = to_text(value)
        request, problem = webhook_request(step, self._scope, self._variables, self._flow.name)
        if request is None:
            return self._tool_result(call, {"error": problem})
        self._record("webhook", text=f"{request.method} {request.url}",  # type: ignore[attr-defined]
                     data={"call": call.id, "tool": call.name})
        self._mode = MODEL_TOOL
        return [CallWebhook(request)]

    def _model_tool_webhook_result(self, result: WebhookResult) -> list[Action]:
        turn = self._tool_turn
        call = turn.current
        step = self._step
        if self._mode != MODEL_TOOL or call is None or not isinstance(step, ModelStep):
            return []
        target = self._flow.step(call.name)
        assert isinstance(target, WebhookStep)
        ok, reason = result.ok, result.reason
        if ok:
            missing = [name for name in target.fields if name not in result.variables]
            if missing:
                ok, reason = False, "missing field(s): " + ", ".join(missing)
        if not ok:
            return self._tool_result(call, {"error": reason or "the webhook failed"})
        prefix = target.save_as + "."
        for name in [n for n in self._variables if n.startswith(prefix)]:
            del self._variables[name]
        for name, value in result.variables.items():
            self._variables[prefix + name] = value
        return self._tool_result(call, {"ok": True, "result": dict(result.variables)})

    # -- hangup, transfer, queue: confirmed by the caller
    def _confirm_tool(self, call: PendingCall, target: Any) -> list[Action]:
        step = self._step
        assert isinstance(step, ModelStep)
        confirm = step.settings.confirm
        prompt = confirm.end_prompt if isinstance(target, HangupStep) else confirm.transfer_prompt
        self._record("question", text="end" if isinstance(target, HangupStep) else "transfer",  # type: ignore[attr-defined]
                     data={"call": call.id, "tool": call.name})
        self._tool_turn = replace(self._tool_turn, confirming=True)
        self._mode = LISTENING
        actions: list[Action] = []
        self._say_into(actions, prompt, step.settings)  # type: ignore[attr-defined]
        settings = step.settings
        actions.append(Listen(settings.no_input_timeout_ms, slot_type="yes_no", max_digits=1,
                              language=settings.language, asr_model=settings.asr_model,
                              endpointing=settings.endpointing, phrases=slot_phrases("yes_no"),
                              step=step.id))
        return actions

    @property
    def model_tool_call(self) -> str:
        """Id of the model's tool call being run or confirmed ("" when none)."""
        call = self._tool_turn.current
        return call.id if call is not None else ""

    @property
    def _confirming_tool(self) -> bool:
        return self._mode == LISTENING and self._tool_turn.confirming and isinstance(self._step, ModelStep)

    def _tool_answer(self, reply: str | None, text: str | None) -> list[Action]:
        """The caller's answer to the confirmation of a destructive tool call."""
        turn = self._tool_turn
        call = turn.current
        assert call is not None
        if text is not None:
            self._record("transcript", text=text)  # type: ignore[attr-defined]
            self._conversation.append(("caller", text))  # type: ignore[attr-defined]
        self._record("answer", text=reply or "neither", data={"call": call.id})  # type: ignore[attr-defined]
        if reply is None and not turn.asked_twice:
            self._tool_turn = replace(turn, asked_twice=True)
            actions = self._confirm_tool(call, self._flow.step(call.name))
            self._tool_turn = replace(self._tool_turn, asked_twice=True)
            return actions
        if reply == "yes":
            self._tool_turn = ToolTurn()
            self._mode = IDLE
            return self._run(call.name)  # type: ignore[attr-defined]
        why = "the caller said no" if reply == "no" else "the caller did not confirm"
        return self._tool_result(call, {"error": f"not done: {why}"})

    def _tool_dtmf(self, digit: str) -> list[Action]:
        return self._tool_answer({"1": "yes", "2": "no"}.get(digit), None)

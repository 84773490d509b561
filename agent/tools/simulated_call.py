"""One call through the real dialogue engine, minus audio (``openclaw-voice dialplan simulate``).

:class:`SimulatedCall` runs the dialplan with :class:`~agent.dialplan.engine.DialogueSession` and
carries out its actions the way the call session would: prompts become text, webhooks are called
for real (:class:`RealWebhooks`) or answered from a mock file
(:class:`~agent.integrations.webhook.MockWebhooks`), transfers, recordings and model replies are
simulated with configurable outcomes. Each input returns :class:`Output` lines: what the agent says
and a ``[flow/step]`` trace of what ran.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from agent.dialplan.engine import (
    Action,
    AskModel,
    CallWebhook,
    DialogueSession,
    Hangup,
    Listen,
    Record,
    Say,
    Transfer,
    WebhookRequest,
    WebhookResult,
    call_variables,
)
from agent.dialplan.model import Dialplan

WebhookExecutor = Callable[[WebhookRequest], WebhookResult]


@dataclass(frozen=True)
class Output:
    """One line of simulator output: *kind* ``say`` (the agent speaks), ``trace`` (what ran),
    ``end`` (the call ended)."""

    kind: str
    text: str

    def render(self) -> str:
        """The line as printed."""
        if self.kind == "say":
            return f"agent: {self.text}"
        return self.text


def parse_now(text: str) -> datetime:
    """Parse an ISO 8601 time; without an offset it is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected an ISO 8601 time such as 2025-03-04T10:00:00-05:00, found {text!r}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


class RealWebhooks:
    """Calls webhooks for real: runs Twisted's reactor in a background thread."""

    def __init__(self) -> None:
        from twisted.internet import reactor

        self._reactor: Any = reactor
        self._thread: threading.Thread | None = None

    def __call__(self, request: WebhookRequest) -> WebhookResult:
        from twisted.internet.threads import blockingCallFromThread

        from agent.integrations.webhook import call_webhook

        if self._thread is None:
            self._thread = threading.Thread(
                target=self._reactor.run, kwargs={"installSignalHandlers": False}, daemon=True
            )
            self._thread.start()
        result: WebhookResult = blockingCallFromThread(
            self._reactor, call_webhook, self._reactor, request
        )
        return result

    def close(self) -> None:
        """Stop the reactor thread if it was started."""
        if self._thread is not None:
            self._reactor.callFromThread(self._reactor.stop)
            self._thread.join(timeout=5)
            self._thread = None


def no_webhooks(request: WebhookRequest) -> WebhookResult:
    return WebhookResult(False, {}, None, "webhooks are off in this simulation (use --webhooks)")


class SimulatedCall:
    """One simulated call: feed it caller input, get back what the agent says and does.

    *transfer*: outcome of transfers, ``succeed`` or a failure reason (``"486 Busy Here"``).
    *model_reply*: what the dialogue model answers (None: no model, the step's failure path).
    """

    def __init__(
        self,
        dialplan: Dialplan,
        number: str = "1000",
        caller: str = "+15550000000",
        now: datetime | None = None,
        webhooks: WebhookExecutor = no_webhooks,
        variables: Mapping[str, str] | None = None,
        transfer: str = "succeed",
        model_reply: str | None = None,
        call_id: str = "sim-call-1",
        flow: str | None = None,
    ) -> None:
        self.dialplan = dialplan
        self.flow = flow or dialplan.route(number, caller)
        self.number = number
        self.caller = caller
        self._now = now
        self.webhooks = webhooks
        self.transfer_outcome = transfer
        self.model_reply = model_reply
        self.transferred_to: str | None = None
        self.end_reason: str | None = None
        self.webhook_calls: list[tuple[WebhookRequest, WebhookResult]] = []
        self._seen = 0
        self.steps_run: list[str] = []
        self.session: DialogueSession | None = None
        if self.flow is not None:
            values = call_variables(caller, number, call_id, "simulator")
            values.update(variables or {})
            self.session = DialogueSession(dialplan, self.flow, values, now=self.now)

    def now(self) -> datetime:
        """The simulated time (fixed when given, else the wall clock)."""
        return self._now if self._now is not None else datetime.now(timezone.utc)

    @property
    def routed(self) -> bool:
        """False when no route takes the number (a real call would get 404)."""
        return self.session is not None

    @property
    def ended(self) -> bool:
        """True once the call is over (hung up, transferred or unrouted)."""
        return self.session is None or self.session.ended or self.end_reason is not None

    @property
    def listening(self) -> Listen | None:
        """The Listen the agent waits on, if any."""
        return self._listen

    _listen: Listen | None = None

    def start(self) -> list[Output]:
        """Answer the call."""
        if self.session is None:
            self.end_reason = "404"
            return [Output("end", f"[no route for {self.number} from {self.caller}: 404 Not Found]")]
        return self._drive(self.session.start())

    def say(self, text: str) -> list[Output]:
        """The caller says *text* (as a final transcript)."""
        if self.session is None or self.ended:
            return []
        return self._drive(self.session.on_transcript(text))

    def dtmf(self, digits: str) -> list[Output]:
        """The caller presses *digits*."""
        if self.session is None or self.ended:
            return []
        return self._drive(self.session.on_dtmf(digits))

    def silence(self) -> list[Output]:
        """The caller says nothing until the no-input timeout."""
        if self.session is None or self.ended:
            return []
        return self._drive(self.session.on_no_input())

    def _drive(self, actions: list[Action]) -> list[Output]:
        assert self.session is not None
        session = self.session
        out: list[Output] = []
        pending = list(actions)
        self._listen = None
        self.steps_run = []
        while pending:
            action = pending.pop(0)
            self._trace(out, until_step=action.step if isinstance(action, Say) else None)
            if isinstance(action, Say):
                out.append(Output("say", action.text))
            elif isinstance(action, Listen):
                self._listen = action
                out.append(Output("trace", f"[{session.current_flow}/{action.step}] listening "
                                           f"({_describe_listen(action)})"))
            elif isinstance(action, Hangup):
                self.end_reason = action.reason
                out.append(Output("end", f"[hangup: {action.reason}]"))
            elif isinstance(action, Transfer):
                pending.extend(self._transfer(action, out))
            elif isinstance(action, CallWebhook):
                result = self.webhooks(action.request)
                self.webhook_calls.append((action.request, result))
                outcome = (f"ok {result.status} ({len(result.variables)} fields)" if result.ok
                           else f"failed: {result.reason}")
                out.append(Output("trace", f"[webhook {action.request.method} "
                                           f"{action.request.url} -> {outcome}]"))
                pending.extend(session.on_webhook_result(result))
            elif isinstance(action, Record):
                duration = min(action.max_ms, 5000)
                path = os.path.join("recordings", action.path)
                out.append(Output("trace", f"[recording to {path}, at most {action.max_ms} ms "
                                           f"(simulated: {duration} ms)]"))
                pending.extend(session.on_record_done(path, duration))
            elif isinstance(action, AskModel):
                if self.model_reply is None:
                    out.append(Output("trace", "[model: none in the simulator (--model-reply)]"))
                    pending.extend(session.on_model_failed("no dialogue model configured"))
                else:
                    out.append(Output("trace", f"[model asked: {action.text!r}]"))
                    pending.extend(session.on_model_reply(self.model_reply))
        self._trace(out)
        if session.ended and self.end_reason is None:
            self.end_reason = "bridged"
        return out

    def _transfer(self, action: Transfer, out: list[Output]) -> list[Action]:
        assert self.session is not None
        kind = f"{action.mode} transfer" + (f" to queue {action.queue}" if action.queue else "")
        if self.transfer_outcome == "succeed":
            self.transferred_to = action.target_uri
            out.append(Output("trace", f"[{kind} to {action.target_uri}: succeeded]"))
            result = self.session.on_transfer_succeeded()
            if not result:
                out.append(Output("end", "[bridged: the caller is talking to the target]"))
            return result
        out.append(Output("trace", f"[{kind} to {action.target_uri}: failed "
                                   f"({self.transfer_outcome})]"))
        return self.session.on_transfer_failed(self.transfer_outcome)

    def _trace(self, out: list[Output], until_step: str | None = None) -> None:
        """Show the engine's new history events; with *until_step*, stop after that step
        begins (so a prompt is printed right after the step that says it)."""
        assert self.session is not None
        history = self.session.history
        if until_step is not None and not any(
            e.kind == "step" and e.step == until_step for e in history[self._seen:]
        ):
            until_step = None
        for event in history[self._seen:]:
            self._seen += 1
            where = f"{event.flow}/{event.step}"
            if event.kind == "step":
                self.steps_run.append(where)
                out.append(Output("trace", f"[{where}]"))
            elif event.kind == "intent":
                out.append(Output("trace", f"  intent {event.intent} ({event.score:.2f})"))
            elif event.kind in ("slot", "set") and event.data:
                pairs = ", ".join(f"{k} = {v!r}" for k, v in event.data.items())
                out.append(Output("trace", f"  {event.kind}: {pairs}"))
            elif event.kind in ("no_match", "no_input", "gave_up", "skipped"):
                out.append(Output("trace", f"  {event.kind.replace('_', ' ')}"
                                           + (f": {event.text}" if event.text else "")))
            elif event.kind in ("branch", "hours", "goto", "return"):
                out.append(Output("trace", f"  {event.kind}: {event.text}"))
            if event.kind == "step" and event.step == until_step:
                return

    def variables(self) -> dict[str, str]:
        """The call's variables now (configuration values left out)."""
        if self.session is None:
            return {}
        return {k: v for k, v in sorted(self.session.variables.items())
                if not k.startswith("config.")}


def _describe_listen(listen: Listen) -> str:
    parts = []
    if listen.speech:
        parts.append("speech")
    if listen.dtmf:
        parts.append("keys" if listen.max_digits <= 1 else f"up to {listen.max_digits} digits"
                     + (f" or {listen.terminator}" if listen.terminator else ""))
    if listen.slot_type:
        parts.append(f"slot {listen.slot_type}")
    return ", ".join(parts) + f"; silence after {listen.no_input_timeout_ms} ms"

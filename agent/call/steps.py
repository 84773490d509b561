"""Dialplan steps that wait on something outside the call: a webhook, the dialogue model, a transfer.

Each one ends with the dialogue's next actions, handed to the session through *finish* (once
the session confirms with *is_current* that the step is still what it is doing) or, when it
fails before it could start, through *failed_at_once* (the session is then still working
through its queue).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.logger import Logger

from agent.app.metrics import AgentMetrics
from agent.call.ports import CallControl, Reactor
from agent.dialplan.model_tools import MODEL_TOOL
from agent.dialplan.engine import Action, AskModel, CallWebhook, DialogueSession, Transfer, WebhookRequest, WebhookResult
from agent.secrets import redact, redact_url

log = Logger(namespace="openclaw.session")


@dataclass(eq=False)
class SpokenReply:
    """A model reply being streamed to the caller: queued after each sentence said, it is the
    session's current action while it waits for the next sentence or the end of the reply."""

    action: AskModel
    #: sentences come in, not yet handed to the session
    waiting: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    reply: Any = None
    error: str | None = None
    deferred: Any = None
    cancelled: bool = False


class ExternalSteps:
    """Starts webhook, model and transfer steps and turns their outcomes into the dialogue's next actions."""

    def __init__(self, reactor: Reactor, control: CallControl, dialogue: Callable[[], DialogueSession],
                 webhooks: Callable[[WebhookRequest], Any] | None, model: Callable[[AskModel], Any] | None,
                 metrics: AgentMetrics | None, log_fields: dict[str, str], *,
                 is_current: Callable[[Any], bool], finish: Callable[[list[Any]], None],
                 failed_at_once: Callable[[list[Action]], None], on_bridged: Callable[[], None],
                 model_stream: Callable[[AskModel, Callable[[str], None]], Any] | None = None) -> None:
        """*on_bridged*: the caller now talks to a bridged target (the agent stops listening).
        *model_stream(action, on_sentence)*: the dialogue model, streamed (fires with a reply
        having ``text``); preferred over *model* for replies that are spoken."""
        self._reactor = reactor
        self._control = control
        self._dialogue = dialogue
        self._webhooks = webhooks
        self._model = model
        self._metrics = metrics
        self._log_fields = log_fields
        self._is_current = is_current
        self._finish = finish
        self._failed_at_once = failed_at_once
        self._on_bridged = on_bridged
        self._model_stream = model_stream
        self._spoken: SpokenReply | None = None
        #: where the call was (last) transferred or bridged to
        self.transfer_target: str | None = None

    # -- webhooks and the dialogue model ----------------------------------------------
    def start_webhook(self, action: CallWebhook) -> None:
        if self._webhooks is None:
            self._reactor.callLater(0, self._webhook_done, WebhookResult(ok=False, reason="no webhook client"), action)
            return
        log.info("call {call_id} webhook {method} {url}", method=action.request.method, url=redact_url(action.request.url),
                 **self._log_fields)
        d = self._webhooks(action.request)
        d.addErrback(lambda f: WebhookResult(ok=False, reason=f.getErrorMessage()))
        d.addCallback(self._webhook_done, action)

    def _webhook_done(self, result: WebhookResult, action: CallWebhook) -> None:
        if not self._is_current(action):
            return
        if self._dialogue().waiting_for == MODEL_TOOL:
            log.info("call {call_id} model tool call {id} ({step}): {outcome}", step=action.request.step,
                     id=self._dialogue().model_tool_call,
                     outcome="ok" if result.ok else f"failed ({result.reason})", **self._log_fields)
            dialogue = self._dialogue()
            seen = len(dialogue.history)
            actions = dialogue.on_webhook_result(result)
            self._log_tool_errors(dialogue, seen, skip=1)
            self._finish(actions)
            return
        log.info("call {call_id} webhook {step}: {outcome}", step=action.request.step,
                 outcome="ok" if result.ok else f"failed ({redact(result.reason)})", **self._log_fields)
        self._finish(self._dialogue().on_webhook_result(result))

    def start_model(self, action: AskModel) -> None:
        if self._model_stream is not None and (action.say or action.tools):
            self._start_streamed_model(action)
            return
        if self._model is None:
            self._failed_at_once(self._dialogue().on_model_failed("no dialogue model configured"))
            return
        d = self._model(action)

        def reply(text: str) -> None:
            if self._is_current(action):
                self._finish(self._dialogue().on_model_reply(text))

        def failed(failure: Any) -> None:
            if self._is_current(action):
                self._finish(self._dialogue().on_model_failed(failure.getErrorMessage()))

        d.addCallbacks(reply, failed)

    # -- a model reply spoken while it streams -----------------------------------------
    def _start_streamed_model(self, action: AskModel) -> None:
        assert self._model_stream is not None
        spoken = SpokenReply(action)

        def on_sentence(text: str) -> None:
            if not spoken.cancelled and action.say:
                spoken.waiting.append(text)
                self._pump(spoken)

        def replied(reply: Any) -> None:
            spoken.reply = reply
            self._pump(spoken)

        def failed(failure: Any) -> None:
            if not spoken.cancelled:
                spoken.error = failure.getErrorMessage()
                self._pump(spoken)

        self._spoken = spoken
        spoken.deferred = self._model_stream(action, on_sentence)
        spoken.deferred.addCallbacks(replied, failed)

    def close(self) -> None:
        """The call is over: stop a model reply still streaming."""
        spoken, self._spoken = self._spoken, None
        if spoken is not None and not spoken.cancelled:
            spoken.cancelled = True
            if spoken.deferred is not None and not spoken.deferred.called:
                spoken.deferred.cancel()

    def continue_model(self, spoken: SpokenReply) -> None:
        """The session reached *spoken* in its queue: say what came meanwhile, or finish."""
        self._pump(spoken)

    def _pump(self, spoken: SpokenReply) -> None:
        if spoken.cancelled or not (self._is_current(spoken.action) or self._is_current(spoken)):
            return  # the session is saying an earlier sentence; it comes back here after it
        dialogue = self._dialogue()
        if spoken.waiting:
            text = " ".join(spoken.waiting)
            spoken.waiting.clear()
            say = dialogue.model_sentence(text)
            if say is None:
                return
            spoken.said.append(text)
            if len(spoken.said) == 1:
                log.info("call {call_id} model: first sentence ({n} chars) to synthesis", n=len(text),
                         **self._log_fields)
            self._finish([say, spoken])
        elif spoken.error is not None:
            log.info("call {call_id} model failed: {reason}", reason=spoken.error, **self._log_fields)
            self._finish(dialogue.on_model_failed(spoken.error))
        elif spoken.reply is not None and getattr(spoken.reply, "tool_calls", ()):
            calls = spoken.reply.tool_calls
            for call in calls:
                log.info("call {call_id} model tool call {id}: {name}({args})", id=call.id, name=call.name,
                         args=call.arguments[:200], **self._log_fields)
            seen = len(dialogue.history)
            actions = dialogue.on_model_tool_calls(calls, said=" ".join(spoken.said))
            self._log_tool_errors(dialogue, seen)
            self._finish(actions)
        elif spoken.reply is not None:
            text = getattr(spoken.reply, "text", spoken.reply)
            self._finish(dialogue.on_model_reply(text, said=bool(spoken.said)) if spoken.said
                         else dialogue.on_model_reply(text))

    def _log_tool_errors(self, dialogue: DialogueSession, seen: int, skip: int = 0) -> None:
        """Log the tool results since event *seen* that are errors (the first *skip* are logged already)."""
        results = [e for e in list(dialogue.history)[seen:] if e.kind == "model_tool_result"][skip:]
        for event in results:
            if event.data and event.data.get("ok") == "false":
                log.info("call {call_id} model tool call {id} ({tool}) not run: {text}", id=event.data.get("call"),
                         tool=event.data.get("tool"), text=event.text, **self._log_fields)

    def interrupt_model(self, spoken: SpokenReply) -> list[Action]:
        """The caller barged in on the streamed reply: stop the model, keep what was said, and
        return the dialogue's next actions."""
        spoken.cancelled = True
        if spoken.deferred is not None and not spoken.deferred.called:
            spoken.deferred.cancel()
        said = " ".join(spoken.said)
        log.info("call {call_id} model reply interrupted after {n} sentence(s)", n=len(spoken.said),
                 **self._log_fields)
        return self._dialogue().on_model_reply(said, said=True, interrupted=True)

    # -- transfers ------------------------------------------------------------------------
    def start_transfer(self, action: Transfer) -> None:
        self.transfer_target = action.target_uri
        if action.mode == "bridged":
            log.info("call {call_id} bridging to {uri}", uri=action.target_uri, **self._log_fields)
            bridge = getattr(self._control, "bridge", None)
            if bridge is None:
                self._failed_at_once(self._dialogue().on_transfer_failed("bridged transfer not supported"))
            else:
                bridge(action.target_uri, action.timeout_ms,
                       lambda ok, reason, a=action: self._on_bridge_result(a, ok, reason))
            return
        log.info("call {call_id} transferring to {uri}", uri=action.target_uri, **self._log_fields)
        if not self._control.transfer(action.target_uri):
            if self._metrics:
                self._metrics.transfers.labels("failed").inc()
            self._failed_at_once(self._dialogue().on_transfer_failed("REFER could not be sent"))

    def on_transfer_status(self, action: Transfer, code: int, reason: str, final: bool) -> None:
        """Progress of a REFER (*action* is the current step)."""
        log.info("call {call_id} transfer progress {code} {reason}", code=code, reason=reason, **self._log_fields)
        if not final and code < 300:
            return
        ok = 200 <= code < 300
        if self._metrics:
            self._metrics.transfers.labels("succeeded" if ok else "failed").inc()
        dialogue = self._dialogue()
        self._finish(dialogue.on_transfer_succeeded() if ok else dialogue.on_transfer_failed(f"{code} {reason}"))

    def _on_bridge_result(self, action: Transfer, ok: bool, reason: str) -> None:
        if not self._is_current(action):
            return
        log.info("call {call_id} bridged transfer: {outcome}", outcome="connected" if ok else reason,
                 **self._log_fields)
        if self._metrics:
            self._metrics.transfers.labels("succeeded" if ok else "failed").inc()
        if ok:
            self._on_bridged()
        dialogue = self._dialogue()
        self._finish(dialogue.on_transfer_succeeded() if ok else dialogue.on_transfer_failed(reason))

"""The dialogue engine: runs one call through a dialplan flow, without any I/O.

:class:`DialogueSession` is a pure state machine. The call session feeds it events and carries
out the actions it returns, in order. It never starts a timer, opens a socket or blocks; time
comes in through the injected ``now`` callable (a timezone-aware ``datetime``), used only by
``hours`` steps, ``now.*`` variables and date slots.

The actions it returns, and the ``on_*`` calls that report their outcomes, are described in
:mod:`agent.dialplan.actions`.

Call record: :attr:`DialogueSession.history` lists every event (steps entered, transcripts,
intents with scores, slots filled, variables set, branch decisions, webhook outcomes, hours
decisions, transfer results, recordings, model replies); :meth:`DialogueSession.call_record`
summarises the path for the call record.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Mapping, Sequence

from agent.dialplan.actions import (
    Action, AskModel, CallWebhook, DialogueEvent, Hangup, Listen, Record, Say, Transfer,
    WebhookRequest, WebhookResult,
)
from agent.dialplan.asks import (
    DTMF_KEYS, intent_named, listen_for, match_intent, peek_match, said_in_words, sure_enough, understand,
)
from agent.dialplan.escalation import END, OFFER, Question
from agent.dialplan.intents import IntentMatch, normalize
from agent.dialplan.moment import asks_for_a_moment
from agent.dialplan.model import (
    AskStep, Dialplan, Intent, ModelStep, QueueStep, RecordStep, RepromptPolicy, Settings,
    Template, TransferStep, WebhookStep,
)
from agent.dialplan.model_tools import MODEL_TOOL, ModelToolsMixin
from agent.dialplan.runner import (
    ENDED, IDLE, LISTENING, MAX_STEPS_PER_EVENT, MAX_SUBFLOW_DEPTH, MODEL, RECORDING,
    TRANSFERRING, WEBHOOK, FlowRunner, dtmf_flag,
)
from agent.dialplan.slots import (
    is_bare_no, is_bare_yes, is_murmur, parse_slot, parse_yes_no, says_yes_outright, slot_phrases, without_yes,
)
from agent.dialplan.variables import call_variables

__all__ = [
    "Action",
    "AskModel",
    "CallWebhook",
    "DialogueEvent",
    "DialogueSession",
    "Hangup",
    "Listen",
    "MAX_STEPS_PER_EVENT",
    "MAX_SUBFLOW_DEPTH",
    "Record",
    "Say",
    "Transfer",
    "WebhookRequest",
    "WebhookResult",
    "call_variables",
]


class DialogueSession(ModelToolsMixin, FlowRunner):
    """One call's progress through one flow of a dialplan.

    *variables* are the call's template values with flat dotted keys (see
    :func:`call_variables`). *now* returns the current time, timezone-aware (default: the wall
    clock, read only when a step needs the time). Raises ``KeyError`` if *flow* is not in the
    dialplan. The session keeps *dialplan* for its whole life, so a reloaded dialplan never
    changes a call in progress.
    """

    def fork(self) -> "DialogueSession":
        """An independent copy of the session in its current state (cheap: the dialplan and
        its steps are immutable and shared). The call session uses it to work out a reply
        speculatively while it waits to be sure the caller has finished."""
        other = copy.copy(self)
        other._variables = dict(self._variables)
        other._stack = list(self._stack)
        other._history = list(self._history)
        other._conversation = list(self._conversation)
        other._transfer = dict(self._transfer) if self._transfer is not None else None
        other._scope = other._new_scope()
        return other

    # ------------------------------------------------------------------ inspection

    @property
    def flow(self) -> str:
        """Name of the flow this call started in."""
        return self._entry.name

    @property
    def current_flow(self) -> str:
        """Name of the flow running now (a sub-flow after ``goto: {flow: ...}``)."""
        return self._flow.name

    @property
    def dialplan(self) -> Dialplan:
        """The dialplan version this call runs (kept across reloads)."""
        return self._dialplan

    @property
    def expects_input(self) -> bool:
        """True while an ask waits for the caller (speech, DTMF or a no-input timeout)."""
        return self._mode == LISTENING

    @property
    def asking_before_acting(self) -> bool:
        """True while the caller's answer to a question that ends or transfers the call ("Do
        you want to end the call?", "Would you like to speak to a person?") is awaited: an
        answer the recogniser heard unclearly is asked again, so it should come with its
        confidence (see :meth:`on_transcript`)."""
        return self._question is not None

    def weighs_confidence(self, text: str) -> bool:
        """Would the answer *text* be judged on the recogniser's confidence (so is worth waiting
        for its final)? Only a yes to a question asked before acting: a no ends and transfers
        nothing, however it was heard."""
        return self.asking_before_acting and parse_yes_no(text) != "no"

    @property
    def waiting_for(self) -> str:
        """What the engine waits for: idle, listening, transferring, webhook, recording,
        model, model_tool (a webhook the model called) or ended."""
        return self._mode

    @property
    def variables(self) -> Mapping[str, str]:
        """The call's variables now (read-only view)."""
        return dict(self._variables)

    @property
    def max_call_duration_ms(self) -> int | None:
        """The flow's call duration limit; call :meth:`on_call_timeout` when it passes."""
        seconds = self._entry.settings.max_call_duration_s
        return seconds * 1000 if seconds is not None else None

    @property
    def phrase_hints(self) -> tuple[str, ...]:
        """What the caller is expected to say in this call (empty: anything); see
        :meth:`Dialplan.phrase_hints`."""
        return self._dialplan.phrase_hints(self._entry.name)

    @property
    def settings(self) -> Settings:
        """The entry flow's settings (language, voice, ASR pin, endpointing, ...)."""
        return self._entry.settings

    @property
    def history(self) -> tuple[DialogueEvent, ...]:
        """What happened so far, for the call record."""
        return tuple(self._history)

    def peek_intent(self, text: str, by_meaning: bool = False) -> IntentMatch | None:
        """The intent *text* selects at the waiting ask, without acting on it.

        For end-of-turn detection, asked on every interim transcript: a partial transcript that
        already completes an intent lets the endpointer accept a shorter silence. By default by
        the examples' words only (sure enough for the shortest silence, and the transcript is not
        embedded); *by_meaning* (asked once the caller is quiet) also by meaning, which the
        endpointer trusts with a longer silence. At a yes/no question (before ending or
        transferring the call, the person offer, a ``yes_no`` slot): ``yes`` or ``no`` for a bare
        answer ("yeah", "okay great", "no thanks"), else None. None when no ask is waiting,
        nothing matches, the words ask for a moment ("hang on"), or the intent would
        end or transfer the call and the words are not exactly one of its examples (a match by
        meaning never is).
        """
        ask = self._listening_ask()
        if ask is not None and self._question is not None:
            return _bare_yes_or_no(text)
        if ask is None or (by_meaning and self._wants_a_moment(ask, text)):
            return None
        match = peek_match(ask, text, lambda intent: self._consequence(ask, intent) is not None, by_meaning)
        if match is None and ask.slot is not None and ask.slot.type == "yes_no":
            return _bare_yes_or_no(text)
        return match

    def call_record(self) -> dict[str, Any]:
        """The call's path through the dialplan, for the call record (JSON-ready)."""
        path: list[str] = []
        intents: list[dict[str, Any]] = []
        variables: dict[str, str] = {}
        webhooks: list[dict[str, Any]] = []
        for event in self._history:
            where = f"{event.flow}/{event.step}"
            if event.kind == "step":
                path.append(where)
            elif event.kind == "intent":
                intents.append({"step": where, "intent": event.intent, "score": event.score,
                                "input": event.text, **(event.data or {})})
            elif event.kind in ("set", "slot") and event.data:
                variables.update(event.data)
            elif event.kind in ("webhook", "webhook_failed"):
                webhooks.append({"step": where, "ok": event.kind == "webhook",
                                 **(event.data or {})})
        return {
            "dialplan": self._dialplan.digest,
            "flow": self._entry.name,
            "path": path,
            "intents": intents,
            "variables_set": variables,
            "webhooks": webhooks,
            "transfer": dict(self._transfer) if self._transfer else None,
            "end_reason": self._end_reason,
        }

    # ------------------------------------------------------------------ events

    def start(self) -> list[Action]:
        """Begin the flow at its first step; later calls return []."""
        if self._started:
            return []
        self._started = True
        self._apply_defaults(self._dialplan.variables)
        self._apply_defaults(self._entry.variables)
        return self._run(self._flow.steps[0].id)

    def on_transcript(self, text: str, confidence: float | None = None,
                      alternatives: Sequence[str] = ()) -> list[Action]:
        """A final recognition result of a whole turn. Ignored unless an ask is waiting.

        *confidence* is the recogniser's (0..1; None: unknown, only the intent score counts).
        An answer that would end or transfer the call is acted on only when both are high
        (the ask's ``confirm`` settings); otherwise the caller is asked to confirm it.
        *alternatives* are the recogniser's other readings of the turn, likeliest first: when
        *text* selects nothing at an ask, one of them may (:func:`match_alternative`); ending
        or transferring the call on one is always confirmed first.
        """
        if self.ended:
            return []
        if self._confirming_tool:
            return self._tool_answer(parse_yes_no(text), text)
        ask = self._listening_ask()
        self._record("transcript" if ask is not None else "ignored", text=text)
        if ask is None:
            return []
        self._conversation.append(("caller", text))
        self._digits = ""
        self._variables["input"] = text
        self._variables["input.mode"] = "speech"
        if self._question is not None:
            return self._answer_question(ask, parse_yes_no(text), text, confidence)
        return self._heard(ask, text, confidence, alternatives)

    def _heard(self, ask: AskStep, text: str, confidence: float | None,
               alternatives: Sequence[str] = ()) -> list[Action]:
        """What the caller said at *ask* (no question open)."""
        if self._wants_a_moment(ask, text):
            return self._give_a_moment(ask)
        understood = understand(ask, text, self._local_now().date(), alternatives)
        if understood is None:
            return self._reprompt_or_give_up(ask, "no_match")
        match = understood.match
        if match is None:
            return self._filled(ask, understood.value)
        intent = intent_named(ask, match)
        kind = self._consequence(ask, intent)
        heard_as = understood.heard_as
        heard = text if heard_as is None else heard_as
        # An intent from another reading (the first selects nothing) is never sure enough to end
        # or transfer the call without asking.
        if kind is not None and (heard_as is not None or not sure_enough(ask, match, confidence)):
            return self._ask_question(ask, Question(kind, intent.goto, intent, match, heard, heard_as=heard_as))
        return self._answered(ask, intent, match, heard, heard_as=heard_as)

    def _wants_a_moment(self, ask: AskStep, text: str) -> bool:
        """A request for a moment ("hang on, let me find my card"), unless the ask's own examples
        say those words (an intent of the dialplan's own wins)."""
        return ask.settings.hold.enabled and asks_for_a_moment(text) and \
            match_intent(ask, text, by_meaning=False) is None

    def _give_a_moment(self, ask: AskStep) -> list[Action]:
        """Say the ``hold`` prompt and listen again, longer; no reprompt is counted."""
        self._record("hold")
        actions: list[Action] = []
        self._say_into(actions, ask.settings.hold.prompt, ask.settings)
        actions.append(replace(listen_for(ask), no_input_timeout_ms=ask.settings.hold.timeout_ms))
        return actions

    def on_dtmf(self, digit: str) -> list[Action]:
        """DTMF: one key (0-9, *, #, A-D) or several in order ("1234#").

        Answers the waiting ask; ignored otherwise.
        """
        if self._confirming_tool:
            return self._tool_dtmf(digit[:1])
        if len(digit) <= 1:
            return self._dtmf_one(digit)[0]
        actions: list[Action] = []
        for i, key in enumerate(digit):
            produced, collecting = self._dtmf_one(key)
            if collecting and i < len(digit) - 1:
                continue  # more keys follow: no need to restart the inter-digit timer
            actions.extend(produced)
        return actions

    def on_no_input(self) -> list[Action]:
        """The Listen timed out without speech. Ignored unless an ask is waiting."""
        if self._confirming_tool:
            return self._tool_answer(None, None)
        ask = self._listening_ask()
        if ask is None:
            return []
        if self._question is not None:
            return self._answer_question(ask, None, None, None)
        if self._digits:
            return self._complete_digits(ask)
        return self._reprompt_or_give_up(ask, "no_input")

    def on_transfer_failed(self, reason: str) -> list[Action]:
        """The transfer was refused or failed; continue at the step's ``on_failure``."""
        step = self._step
        if self._mode != TRANSFERRING or not isinstance(step, (TransferStep, QueueStep)):
            return []
        self._record("transfer_failed", text=reason)
        self._variables["transfer.result"] = "failed"
        self._variables["transfer.reason"] = reason
        if self._transfer is not None:
            self._transfer.update({"result": "failed", "reason": reason})
        self._mode = IDLE
        return self._run(step.on_failure or self._flow.following(step))

    def on_transfer_succeeded(self) -> list[Action]:
        """The transfer was accepted (blind) or connected (bridged)."""
        step = self._step
        if self._mode != TRANSFERRING:
            return []
        self._record("transfer_succeeded")
        self._variables["transfer.result"] = "succeeded"
        if self._transfer is not None:
            self._transfer["result"] = "succeeded"
        if isinstance(step, TransferStep) and step.mode == "bridged":
            self._mode = ENDED
            self._end_reason = "bridged"
            return []
        return [self._hangup("transferred")]

    def on_webhook_result(self, result: WebhookResult) -> list[Action]:
        """The outcome of the CallWebhook; success continues, failure takes ``on_failure``."""
        step = self._step
        if self._mode == MODEL_TOOL:
            return self._model_tool_webhook_result(result)
        if self._mode != WEBHOOK or not isinstance(step, WebhookStep):
            return []
        self._mode = IDLE
        reason = result.reason
        ok = result.ok
        if ok:
            missing = [name for name in step.fields if name not in result.variables]
            if missing:
                ok, reason = False, "missing field(s): " + ", ".join(missing)
        prefix = step.save_as + "."
        for name in [n for n in self._variables if n.startswith(prefix)]:
            del self._variables[name]
        self._variables["webhook.status"] = "ok" if ok else "failed"
        self._variables["webhook.reason"] = "" if ok else reason
        self._variables["webhook.http_status"] = str(result.status) if result.status else ""
        data = {
            "status": str(result.status or ""),
            "attempts": str(result.attempts),
            "elapsed_ms": str(round(result.elapsed_ms)),
        }
        if not ok:
            self._record("webhook_failed", text=reason, data={**data, "reason": reason})
            return self._run(step.on_failure)
        for name, value in result.variables.items():
            self._variables[prefix + name] = value
        self._record("webhook", text=f"{len(result.variables)} field(s)",
                     data={**data, "fields": ", ".join(sorted(result.variables))[:500]})
        return self._run(self._flow.successor(step))

    def on_record_done(self, path: str, duration_ms: int) -> list[Action]:
        """The recording was saved at *path*; continue after the record step."""
        step = self._step
        if self._mode != RECORDING or not isinstance(step, RecordStep):
            return []
        self._mode = IDLE
        values = {f"{step.save_as}.path": path, f"{step.save_as}.duration_ms": str(int(duration_ms))}
        self._variables.update(values)
        self._record("record_done", text=path, data=values)
        return self._run(self._flow.successor(step))

    def on_record_failed(self, reason: str) -> list[Action]:
        """The recording could not be made; continue at ``on_failure`` (else after the step)."""
        step = self._step
        if self._mode != RECORDING or not isinstance(step, RecordStep):
            return []
        self._mode = IDLE
        self._record("record_failed", text=reason)
        return self._run(step.on_failure or self._flow.successor(step))

    def model_sentence(self, text: str) -> Say | None:
        """A sentence of the model's reply, spoken as the current model step says its reply
        (while the rest of it is still coming); None when no model step is waiting."""
        step = self._step
        if self._mode != MODEL or not isinstance(step, ModelStep):
            return None
        return Say(text, step.settings.voice, step.settings.barge_in, None, dtmf_flag(step.settings), step.id)

    def on_model_reply(self, text: str, said: bool = False, interrupted: bool = False) -> list[Action]:
        """The dialogue model answered *text*: store it, say it (unless ``say: false``, or
        *said*: it was spoken sentence by sentence as it came; *interrupted*: the caller cut it
        short, and *text* is what was said)."""
        step = self._step
        if self._mode != MODEL or not isinstance(step, ModelStep):
            return []
        self._mode = IDLE
        self._variables[step.save_as] = text
        data = {step.save_as: text, **({"interrupted": "true"} if interrupted else {})}
        self._record("model_reply", text=text, data=data)
        actions: list[Action] = []
        if said and text.strip():
            self._conversation.append(("agent", text))
        elif step.say and text.strip():
            actions.append(Say(text, step.settings.voice, step.settings.barge_in, None,
                               dtmf_flag(step.settings), step.id))
            self._conversation.append(("agent", text))
        return actions + self._run(self._flow.successor(step))

    def on_model_failed(self, reason: str) -> list[Action]:
        """The model gave no reply (none configured, error, timeout); take ``on_failure``."""
        step = self._step
        if self._mode != MODEL or not isinstance(step, ModelStep):
            return []
        self._mode = IDLE
        self._record("model_failed", text=reason)
        return self._run(step.on_failure)

    def on_call_timeout(self) -> list[Action]:
        """The flow's ``max_call_duration_s`` has passed: end the call."""
        if self.ended or not self._started:
            return []
        return [self._hangup("max_duration")]

    # ------------------------------------------------------------------ answers at an ask

    def _listening_ask(self) -> AskStep | None:
        if self._mode == LISTENING and isinstance(self._step, AskStep):
            return self._step
        return None

    def _dtmf_one(self, digit: str) -> tuple[list[Action], bool]:
        if self.ended:
            return [], False
        ask = self._listening_ask()
        if ask is None or digit not in DTMF_KEYS:
            self._record("ignored", text=f"dtmf {digit}")
            return [], False
        self._record("dtmf", text=digit)
        self._variables["input.mode"] = "dtmf"
        if self._question is not None:
            self._variables["input"] = digit
            reply = {"1": "yes", "2": "no"}.get(digit)
            return self._answer_question(ask, reply, None, None), False
        if not ask.dtmf:
            return self._reprompt_or_give_up(ask, "no_match"), False
        slot = ask.slot
        if slot is not None and slot.collects_digits:
            if digit.isdigit():
                self._digits += digit
                if len(self._digits) >= slot.max_dtmf_digits:
                    return self._complete_digits(ask), False
                return [listen_for(ask, collecting=True)], True
            if digit == slot.terminator:
                if self._digits:
                    return self._complete_digits(ask), False
        if slot is not None and slot.type == "yes_no" and digit in ("1", "2"):
            self._variables["input"] = digit
            return self._filled(ask, "yes" if digit == "1" else "no"), False
        self._variables["input"] = digit
        intent = ask.intent_for_dtmf(digit)
        if intent is None:
            self._digits = ""
            return self._reprompt_or_give_up(ask, "no_match"), False
        self._digits = ""
        return self._answered(ask, intent, IntentMatch(intent.name, 1.0, f"dtmf {digit}"), None), False

    def _complete_digits(self, ask: AskStep) -> list[Action]:
        digits, self._digits = self._digits, ""
        self._variables["input"] = digits
        slot = ask.slot
        assert slot is not None
        value = parse_slot(slot.type, digits, self._local_now().date())
        if value is not None and slot.accepts(value):
            return self._filled(ask, value)
        return self._reprompt_or_give_up(ask, "no_match")

    def _filled(self, ask: AskStep, value: str) -> list[Action]:
        assert ask.slot is not None
        self._variables[ask.slot.name] = value
        self._record("slot", text=value, data={ask.slot.name: value})
        self._mode = IDLE
        return self._run(self._flow.successor(ask))

    def _answered(
        self, ask: AskStep, intent: Intent, match: IntentMatch, text: str | None, heard_as: str | None = None
    ) -> list[Action]:
        self._record("intent", text=match.example, intent=intent.name, score=match.score,
                     data={"heard_as": heard_as} if heard_as is not None else None)
        self._variables["intent"] = intent.name
        self._variables["intent.score"] = str(match.score)
        self._variables["intent.text"] = text if text is not None else match.example
        if text is not None:
            today = None
            for name, kind in intent.slots:
                today = today or self._local_now().date()
                value = parse_slot(kind, text, today)
                if value is not None:
                    self._variables[name] = value
                    self._record("slot", text=value, data={name: value})
        self._mode = IDLE
        return self._run(intent.goto or self._flow.successor(ask))

    def _reprompt_or_give_up(self, ask: AskStep, kind: str) -> list[Action]:
        policy: RepromptPolicy
        if kind == "no_input":
            self._no_input_count += 1
            count, policy = self._no_input_count, ask.no_input
        else:
            self._no_match_count += 1
            count, policy = self._no_match_count, ask.no_match
        self._record(kind)
        if kind == "no_match" and self._should_offer(ask, count):
            self._offered = True
            return self._ask_question(ask, Question(OFFER, ask.settings.escalation))
        if count <= policy.limit:
            self._record("reprompt", text=f"{kind} {count}")
            actions: list[Action] = []
            if policy.reprompts:
                template: Template | None = policy.reprompts[min(count, len(policy.reprompts)) - 1]
            else:
                template = ask.prompt
            if template is not None:
                self._say_into(actions, template, ask.settings)
            actions.append(listen_for(ask))
            return actions
        return self._give_up(ask, policy, kind)

    def _give_up(self, ask: AskStep, policy: RepromptPolicy, kind: str) -> list[Action]:
        self._record("gave_up", text=kind)
        self._mode = IDLE
        if policy.then is None:
            return [self._hangup(kind)]
        return self._run(policy.then)

    # ------------------------------------------------------------------ yes/no questions

    def _consequence(self, ask: AskStep, intent: Intent) -> str | None:
        """END or TRANSFER when *intent* leads straight to a hangup or a transfer."""
        return self._flow.consequence(intent.goto or self._flow.successor(ask))

    def _should_offer(self, ask: AskStep, count: int) -> bool:
        """Offer a person at the policy's count, and always before giving up."""
        if ask.settings.escalation is None or self._offered:
            return False
        offer = ask.no_match.offer or ask.settings.no_match
        if offer.after <= 0:
            return False
        return count == offer.after or count > ask.no_match.limit

    def _question_prompt(self, ask: AskStep, question: Question) -> Template:
        if question.kind == OFFER:
            return (ask.no_match.offer or ask.settings.no_match).prompt
        confirm = ask.settings.confirm
        return confirm.end_prompt if question.kind == END else confirm.transfer_prompt

    def _ask_question(self, ask: AskStep, question: Question) -> list[Action]:
        self._question = question
        self._record("question", text=question.kind,
                     intent=question.intent.name if question.intent else None,
                     score=question.match.score if question.match else None)
        actions: list[Action] = []
        self._say_into(actions, self._question_prompt(ask, question), ask.settings)
        actions.append(_yes_no_listen(ask))
        return actions

    def _answers_the_ask(self, ask: AskStep, text: str) -> bool:
        """Do the words besides the yes in *text* answer *ask* rather than the open question: a
        value for its slot, or an intent that leads elsewhere than the question? (Any words would
        fill a free-text slot: there only an intent counts.)"""
        question = self._question
        assert question is not None
        rest = understand(ask, without_yes(text), self._local_now().date())
        if rest is None:
            return False
        if rest.match is not None:
            return intent_named(ask, rest.match).goto != question.target
        return ask.slot is not None and ask.slot.type != "text"

    def _answer_question(
        self, ask: AskStep, reply: str | None, text: str | None, confidence: float | None
    ) -> list[Action]:
        """The caller's reply to the open question: *reply* yes, no or None (neither)."""
        question = self._question
        assert question is not None
        heard_clearly = confidence is None or confidence >= ask.settings.confirm.min_confidence
        if reply == "yes" and text is not None and not heard_clearly and (
                not is_bare_yes(text) or (question.kind == END and not question.repeated)):
            # A yes word in a sentence heard unclearly ("i want yes i can have a better thing")
            # is not a yes to ending or transferring the call, and a bare yes heard unclearly
            # ends the call only when said again (a backchannel can be heard as "ok"): the
            # question is asked again.
            reply = None
        if reply == "yes" and text is not None and not is_bare_yes(text) and self._answers_the_ask(ask, text):
            # "yeah hi, what's the damage on my checking", "sure, it's two zero one nine"
            self._question = None
            self._record("answer", text="other")
            return self._heard(ask, text, confidence)
        opened = reply == "yes" and text is not None and not says_yes_outright(text)
        if opened:
            # "right, I'll let you get on", "okay, I'll call back later": a word that opens a
            # sentence, or a yes word inside one ("I want to make sure ..."), says no yes to
            # ending or transferring the call; what the sentence asks is heard below ("okay, get
            # me someone" asks for what was offered: a yes).
            reply = None
        if question.kind == OFFER and text is not None:
            # "I need a person, not a machine" accepts the offer, whatever its "not" says; only
            # in the dialplan's words and heard clearly: a misheard answer must not put the caller through.
            match = match_intent(ask, text)
            if match is not None and intent_named(ask, match).goto == question.target \
                    and said_in_words(ask, text, match.name) and heard_clearly:
                reply = "yes"
        if reply is None and text is not None and not is_bare_yes(text) and not is_murmur(text):
            # (A bare yes answers the question even when it is too unclear to act on: at "anything
            # else?" it would also select "something else", and the caller meant the question.
            # So does a murmur: "uh huh" to "Do you want to end the call?" says neither yes nor
            # "something else" by meaning; the question is asked again.)
            match = match_intent(ask, text)
            if match is not None:
                # An answer to the ask instead: asking for the same thing again, in its own words, is a yes.
                intent = intent_named(ask, match)
                if intent.goto == question.target:
                    if (said_in_words(ask, text, match.name) or opened) and (question.kind != OFFER or heard_clearly):
                        reply = "yes"
                else:
                    self._question = None
                    self._record("answer", text="other")
                    return self._heard(ask, text, confidence)
        self._record("answer", text=reply or "neither")
        if reply is None and not question.repeated:
            return self._ask_question(ask, replace(question, repeated=True))
        self._question = None
        if reply == "yes":
            if question.kind == OFFER:
                self._record("escalation", text=question.target or "")
                self._mode = IDLE
                return self._run(question.target)
            assert question.intent is not None and question.match is not None
            return self._answered(ask, question.intent, question.match, question.text, question.heard_as)
        if question.kind == OFFER and self._no_match_count > ask.no_match.limit:
            return self._give_up(ask, ask.no_match, "no_match")
        actions: list[Action] = []
        policy = ask.no_match
        template = ask.prompt
        if question.kind == OFFER and policy.reprompts:
            template = policy.reprompts[min(self._no_match_count, len(policy.reprompts)) - 1]
        if template is not None:
            self._say_into(actions, template, ask.settings)
        actions.append(listen_for(ask))
        return actions


def _bare_yes_or_no(text: str) -> IntentMatch | None:
    """A yes or a no and nothing else, as an answer the end of turn may take ("okay great", "nope")."""
    if is_bare_no(text):
        return IntentMatch("no", 1.0, text)
    if is_bare_yes(text):
        return IntentMatch("yes", 1.0, text)
    return None


def _yes_no_listen(ask: AskStep) -> Listen:
    """The caller's turn for a yes/no question at *ask* (keys 1 and 2 answer it)."""
    return replace(listen_for(ask), slot_type="yes_no", max_digits=1, terminator=None,
                   phrases=slot_phrases("yes_no"), intents=(),
                   reask_after_ms=ask.settings.confirm.reask_after_ms)

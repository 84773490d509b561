"""The dialogue engine: runs one call through a dialplan flow, without any I/O.

:class:`DialogueSession` is a pure state machine. The call session feeds it events and carries
out the actions it returns, in order. It never starts a timer, opens a socket or blocks; time
comes in through the injected ``now`` callable (a timezone-aware ``datetime``), used only by
``hours`` steps, ``now.*`` variables and date slots.

Actions and the inputs that answer them (the call session's contract)
--------------------------------------------------------------------

Actions in one returned list are sequential: each one starts once the one before it has finished
(a ``Say`` when its audio has been played or cut short by barge-in). An action that waits for
an outcome (``Listen``, ``Transfer``, ``CallWebhook``, ``Record``, ``AskModel``) is always last in
its list; the session reports the outcome with the matching ``on_*`` call, which returns the next
actions.

``Say(text, voice, barge_in, cache_key, dtmf_barge_in=None)``
    Speak *text* with *voice*. *cache_key* is set when the text is static (synthesised when the
    dialplan loaded; look it up by ``(text, voice)``). ``barge_in``: caller speech may cut the
    prompt short; ``keys_interrupt`` (``dtmf_barge_in``, None meaning "same as barge_in"): a key
    press may. No input reports back.

``Listen(no_input_timeout_ms, ...)``
    The caller's turn. Start the no-input timer once the prompts before it have played (and
    again whenever the caller stops speaking without a final result); on expiry call
    :meth:`~DialogueSession.on_no_input`. Deliver final transcripts to ``on_transcript(text)``
    and keys to ``on_dtmf(digit)`` (one key or several, e.g. ``"1234#"``). Fields for the
    recogniser: ``speech``/``dtmf`` (which inputs the ask takes), ``phrases`` (example phrases,
    as recognition hints), ``intents``, ``slot_type`` (digits, number, yes_no, date, time, text
    or None), ``max_digits`` and ``terminator`` (keypad entry; the engine itself collects the
    digits, each key re-issues a ``Listen`` whose timeout is the inter-digit timeout and
    ``collecting_digits`` is true), ``language``, ``asr_model`` (a version pin: route the call's
    recognition to a region serving it), ``endpointing`` (an :class:`~agent.dialplan.model.Endpointing`,
    None fields meaning the server default) and ``step``.

``Transfer(target_uri, mode="blind", timeout_ms=30000, queue=None)``
    ``blind``: send SIP REFER to *target_uri*. ``bridged``: dial *target_uri* from the agent
    (ringing at most *timeout_ms*) and connect the caller to it. *queue* names the queue of a
    ``queue`` step (for records and metrics). Report ``on_transfer_succeeded()`` (REFER accepted
    and NOTIFY 2xx; or the bridged leg answered and is connected) or
    ``on_transfer_failed(reason)`` (e.g. ``"486 Busy Here"``, ``"no_answer"``, ``"timeout"``).
    After a blind success the engine returns ``Hangup("transferred")``; after a bridged success
    it returns ``[]`` and is ended: keep the bridge up until either party hangs up.

``CallWebhook(request: WebhookRequest)``
    Call the integrator's HTTP endpoint (``agent.integrations.webhook.call_webhook(reactor, request)`` does
    it, with the request's timeout, retries and backoff) and report
    ``on_webhook_result(result: WebhookResult)``. The engine waits; caller input meanwhile is
    ignored.

``Record(path, max_ms, beep=True, terminator="#")``
    Record the caller into a WAV file named *path* (a bare file name, already sanitised:
    letters, digits, ``_.+-``) under the configured ``recordings_dir``. Play a beep first when
    *beep*; stop after *max_ms*, on the *terminator* key, or when the caller hangs up. Report
    ``on_record_done(path, duration_ms)`` with the file's full path, or
    ``on_record_failed(reason)``.

``AskModel(instructions, text, history, timeout_ms, language)``
    Ask the region's dialogue model for a reply to *text* (the caller's words), given
    *instructions* (the integrator's system prompt, may be empty) and *history* (``(role,
    text)`` pairs, role ``agent`` or ``caller``, oldest first). Report ``on_model_reply(text)``
    or ``on_model_failed(reason)`` (also when no model is configured, or after *timeout_ms*).

``Hangup(reason)``
    End the call (BYE) after the prompts before it have played. *reason* goes to the call
    record and metrics (bounded: step reasons from the dialplan and the engine's own
    ``end_of_flow``, ``no_input``, ``no_match``, ``transferred``, ``step_limit``,
    ``max_duration``, ``stack_overflow``).

``DialogueSession.max_call_duration_ms`` is the flow's limit (or None): when it passes, call
``on_call_timeout()`` (it returns ``[Hangup("max_duration")]``; cancel whatever was in progress).

Timing rules:

* As soon as a list ending in ``Listen`` is returned the engine is at that ask step
  (:attr:`DialogueSession.expects_input` is true), even while the prompts are still playing.
  Input delivered during those prompts therefore answers the ask: a DTMF key pressed during a
  barge-in-able greeting selects the menu option. Whether to deliver input during a prompt that
  is *not* barge-in-able is the call session's decision: it should discard it until that prompt
  has finished.
* Input that arrives when no ask is waiting (during a transfer, webhook, recording, or while
  the prompts before a hangup play) is ignored, and recorded in :attr:`DialogueSession.history`
  as ``ignored``. Speech is never buffered for a later ask.
* Outcomes that do not match what the engine waits for (a webhook result while listening, say)
  are ignored. After the call has ended every event returns ``[]``; no event ever raises.

Call record: :attr:`DialogueSession.history` lists every event (steps entered, transcripts,
intents with scores, slots filled, variables set, branch decisions, webhook outcomes, hours
decisions, transfer results, recordings, model replies); :meth:`DialogueSession.call_record`
summarises the path for the call record.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping, Union
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from agent.dialplan.model import (
    AskStep,
    BranchStep,
    Dialplan,
    Endpointing,
    Flow,
    GotoStep,
    HangupStep,
    HoursStep,
    Intent,
    ModelStep,
    QueueStep,
    RecordStep,
    RepromptPolicy,
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
from agent.dialplan.intents import IntentMatch, IntentMatcher, expand_synonyms
from agent.dialplan.slots import DIGIT_WORDS, WEEKDAYS, parse_slot, strip_slot_words
from agent.dialplan.templates import render_json, to_text

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

MAX_STEPS_PER_EVENT = 100
"""Steps one event may run before the engine gives up on a runaway flow and hangs up."""

MAX_SUBFLOW_DEPTH = 16
"""Sub-flows entered with ``goto: {flow: ...}`` that may be open at once."""

MAX_HISTORY_TURNS = 20
"""Conversation turns passed to a dialogue model."""

DTMF_KEYS = frozenset("0123456789*#ABCD")

_SPOKEN_DIGITS = dict(zip("0123456789", DIGIT_WORDS))



# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Say:
    """Speak *text* with *voice*; *cache_key* is set when the audio is cached at load time.

    *dtmf_barge_in* None means keys interrupt exactly when speech does (*barge_in*).
    """

    text: str
    voice: str
    barge_in: bool
    cache_key: str | None
    dtmf_barge_in: bool | None = None
    step: str = field(default="", compare=False)

    @property
    def keys_interrupt(self) -> bool:
        """True when a key press may cut this prompt short."""
        return self.barge_in if self.dtmf_barge_in is None else self.dtmf_barge_in


@dataclass(frozen=True)
class Listen:
    """The caller's turn, once the preceding prompts have played; times out after the limit."""

    no_input_timeout_ms: int
    speech: bool = True
    dtmf: bool = True
    slot_type: str | None = None
    max_digits: int = 1
    terminator: str | None = None
    collecting_digits: bool = False
    language: str = "en-US"
    asr_model: str | None = None
    endpointing: Endpointing = Endpointing()
    phrases: tuple[str, ...] = field(default=(), compare=False)
    intents: tuple[str, ...] = field(default=(), compare=False)
    step: str = field(default="", compare=False)


@dataclass(frozen=True)
class Transfer:
    """Transfer the call to *target_uri* after the preceding prompts.

    *mode* ``blind`` (SIP REFER) or ``bridged`` (the agent dials and connects, ringing at most
    *timeout_ms*); *queue* names the queue of a ``queue`` step.
    """

    target_uri: str
    mode: str = "blind"
    timeout_ms: int = 30_000
    queue: str | None = None


@dataclass(frozen=True)
class Hangup:
    """End the call after the preceding prompts, recording *reason*."""

    reason: str


@dataclass(frozen=True)
class WebhookRequest:
    """One HTTP call to the integrator's system, fully rendered."""

    step: str
    url: str
    method: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    timeout_ms: int
    retries: int
    retry_backoff_ms: int


@dataclass(frozen=True)
class WebhookResult:
    """What a webhook call came to.

    *variables*: the JSON object's fields flattened to dotted names (``owner.name``), values as
    text; *status*: the last HTTP status (None when no response); *reason*: why it failed
    (``timeout``, ``http 503``, ``bad json: ...``, ``connection refused``, ...).
    """

    ok: bool
    variables: Mapping[str, str] = field(default_factory=dict)
    status: int | None = None
    reason: str = ""
    attempts: int = 1
    elapsed_ms: float = 0.0


@dataclass(frozen=True)
class CallWebhook:
    """Perform *request* and report :meth:`DialogueSession.on_webhook_result`."""

    request: WebhookRequest


@dataclass(frozen=True)
class Record:
    """Record the caller into *path* (a file name under the recordings directory)."""

    path: str
    max_ms: int
    beep: bool = True
    terminator: str | None = "#"


@dataclass(frozen=True)
class AskModel:
    """Ask the dialogue model for a reply to *text*."""

    instructions: str
    text: str
    history: tuple[tuple[str, str], ...]
    timeout_ms: int
    language: str = "en-US"


Action = Union[Say, Listen, Transfer, Hangup, CallWebhook, Record, AskModel]


@dataclass(frozen=True)
class DialogueEvent:
    """One entry of the call record.

    *kind* is one of: ``step`` (a step began), ``transcript``, ``dtmf``, ``intent`` (an answer
    was recognised; *intent* and *score* set), ``slot`` (a value was collected), ``no_match``,
    ``no_input``, ``reprompt``, ``gave_up`` (reprompts exhausted), ``skipped`` (an ask whose
    slot was already set), ``set``, ``branch``, ``goto``, ``return``, ``hours``, ``webhook``,
    ``webhook_failed``, ``transfer``, ``transfer_failed``, ``transfer_succeeded``, ``record``,
    ``record_done``, ``record_failed``, ``model``, ``model_reply``, ``model_failed``,
    ``ignored`` (input while no ask was waiting), ``hangup``. *data* holds details (variables
    set, webhook status, ...).
    """

    kind: str
    step: str
    text: str = ""
    intent: str | None = None
    score: float | None = None
    flow: str = ""
    data: dict[str, str] | None = None


def call_variables(
    caller: str,
    called: str,
    call_id: str,
    region: str = "",
    config: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """Build the flat variable mapping templates read: ``caller`` ... and ``config.<key>``.

    Nested configuration mappings are flattened with dots (``config.speech.voice``); ``None``
    values are left out so a template using them counts as missing.
    """
    variables = {"caller": caller, "called": called, "call_id": call_id, "region": region}

    def flatten(prefix: str, value: object) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                flatten(f"{prefix}.{key}", item)
        elif value is not None:
            variables[prefix] = str(value)

    for key, value in (config or {}).items():
        flatten(f"config.{key}", value)
    return variables


@lru_cache(maxsize=256)
def _matcher(ask: AskStep) -> IntentMatcher:
    """The intent matcher of an ask; DTMF-bound intents also accept the spoken digit."""
    return IntentMatcher(dict(_phrases(ask)))


@lru_cache(maxsize=256)
def _phrases(ask: AskStep) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each intent's phrases: examples, their synonym variants, and spoken DTMF digits."""
    examples: list[tuple[str, tuple[str, ...]]] = []
    for intent in ask.intents:
        phrases = expand_synonyms(intent.examples, dict(intent.synonyms))
        word = _SPOKEN_DIGITS.get(intent.dtmf or "")
        if word is not None:
            phrases += [word, f"option {word}", f"press {word}", f"number {word}"]
        examples.append((intent.name, tuple(phrases)))
    return tuple(examples)


def _wall_clock() -> datetime:
    return datetime.now(timezone.utc)


class _Scope(Mapping[str, str]):
    """The variables a template sees: the call's, plus ``flow``, ``step`` and ``now.*``."""

    def __init__(self, session: DialogueSession) -> None:
        self._session = session

    def __getitem__(self, key: str) -> str:
        session = self._session
        if key in session._variables:
            return session._variables[key]
        if key == "flow":
            return session._flow.name
        if key == "step":
            return session.state
        if key == "now" or key.startswith("now."):
            local = session._local_now()
            parts = {
                "now": local.isoformat(timespec="seconds"),
                "now.date": local.date().isoformat(),
                "now.time": local.strftime("%H:%M"),
                "now.hour": str(local.hour),
                "now.minute": str(local.minute),
                "now.weekday": WEEKDAYS[local.weekday()],
                "now.day": str(local.day),
                "now.month": str(local.month),
                "now.year": str(local.year),
            }
            if key in parts:
                return parts[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._session._variables)

    def __len__(self) -> int:
        return len(self._session._variables)


_IDLE = "idle"
_LISTENING = "listening"
_TRANSFERRING = "transferring"
_WEBHOOK = "webhook"
_RECORDING = "recording"
_MODEL = "model"
_ENDED = "ended"

_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.+-]")


class DialogueSession:
    """One call's progress through one flow of a dialplan.

    *variables* are the call's template values with flat dotted keys (see
    :func:`call_variables`). *now* returns the current time, timezone-aware (default: the wall
    clock, read only when a step needs the time). Raises ``KeyError`` if *flow* is not in the
    dialplan. The session keeps *dialplan* for its whole life, so a reloaded dialplan never
    changes a call in progress.
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
        self._scope = _Scope(self)
        self._mode = _IDLE
        self._started = False
        self._step: Step | None = None
        self._stack: list[tuple[Flow, str | None]] = []
        self._no_input_count = 0
        self._no_match_count = 0
        self._digits = ""
        self._history: list[DialogueEvent] = []
        self._conversation: list[tuple[str, str]] = []
        self._transfer: dict[str, str] | None = None
        self._end_reason = ""

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
        other._scope = _Scope(other)
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
    def state(self) -> str:
        """Id of the current step ("" before :meth:`start`)."""
        return self._step.id if self._step is not None else ""

    @property
    def ended(self) -> bool:
        """True once a Hangup has been issued (or a bridged transfer connected)."""
        return self._mode == _ENDED

    @property
    def expects_input(self) -> bool:
        """True while an ask waits for the caller (speech, DTMF or a no-input timeout)."""
        return self._mode == _LISTENING

    @property
    def waiting_for(self) -> str:
        """What the engine waits for: idle, listening, transferring, webhook, recording,
        model or ended."""
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

    def peek_intent(self, text: str) -> IntentMatch | None:
        """The intent *text* would select at the waiting ask, without acting on it.

        For end-of-turn detection: a partial transcript that already completes an intent lets
        the endpointer accept a shorter silence. None when no ask is waiting or nothing matches.
        """
        ask = self._listening_ask()
        if ask is None:
            return None
        return self._match(ask, text)

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
                                "input": event.text})
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

    def on_transcript(self, text: str) -> list[Action]:
        """A final recognition result. Ignored unless an ask is waiting."""
        if self.ended:
            return []
        ask = self._listening_ask()
        self._record("transcript" if ask is not None else "ignored", text=text)
        if ask is None:
            return []
        self._conversation.append(("caller", text))
        self._digits = ""
        self._variables["input"] = text
        self._variables["input.mode"] = "speech"
        if not ask.speech:
            return self._reprompt_or_give_up(ask, "no_match")
        slot = ask.slot
        if slot is not None and slot.type != "text":
            value = parse_slot(slot.type, text, self._local_now().date())
            if value is not None and slot.accepts(value):
                return self._filled(ask, value)
        match = self._match(ask, text)
        if match is not None:
            return self._answered(ask, _intent_named(ask, match), match, text)
        if slot is not None and slot.type == "text" and text.strip():
            if slot.accepts(text.strip()):
                return self._filled(ask, text.strip())
        return self._reprompt_or_give_up(ask, "no_match")

    def on_dtmf(self, digit: str) -> list[Action]:
        """DTMF: one key (0-9, *, #, A-D) or several in order ("1234#").

        Answers the waiting ask; ignored otherwise.
        """
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
        ask = self._listening_ask()
        if ask is None:
            return []
        if self._digits:
            return self._complete_digits(ask)
        return self._reprompt_or_give_up(ask, "no_input")

    def on_transfer_failed(self, reason: str) -> list[Action]:
        """The transfer was refused or failed; continue at the step's ``on_failure``."""
        step = self._step
        if self._mode != _TRANSFERRING or not isinstance(step, (TransferStep, QueueStep)):
            return []
        self._record("transfer_failed", text=reason)
        self._variables["transfer.result"] = "failed"
        self._variables["transfer.reason"] = reason
        if self._transfer is not None:
            self._transfer.update({"result": "failed", "reason": reason})
        self._mode = _IDLE
        return self._run(step.on_failure or self._flow.following(step))

    def on_transfer_succeeded(self) -> list[Action]:
        """The transfer was accepted (blind) or connected (bridged)."""
        step = self._step
        if self._mode != _TRANSFERRING:
            return []
        self._record("transfer_succeeded")
        self._variables["transfer.result"] = "succeeded"
        if self._transfer is not None:
            self._transfer["result"] = "succeeded"
        if isinstance(step, TransferStep) and step.mode == "bridged":
            self._mode = _ENDED
            self._end_reason = "bridged"
            return []
        return [self._hangup("transferred")]

    def on_webhook_result(self, result: WebhookResult) -> list[Action]:
        """The outcome of the CallWebhook; success continues, failure takes ``on_failure``."""
        step = self._step
        if self._mode != _WEBHOOK or not isinstance(step, WebhookStep):
            return []
        self._mode = _IDLE
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
        if self._mode != _RECORDING or not isinstance(step, RecordStep):
            return []
        self._mode = _IDLE
        values = {f"{step.save_as}.path": path, f"{step.save_as}.duration_ms": str(int(duration_ms))}
        self._variables.update(values)
        self._record("record_done", text=path, data=values)
        return self._run(self._flow.successor(step))

    def on_record_failed(self, reason: str) -> list[Action]:
        """The recording could not be made; continue at ``on_failure`` (else after the step)."""
        step = self._step
        if self._mode != _RECORDING or not isinstance(step, RecordStep):
            return []
        self._mode = _IDLE
        self._record("record_failed", text=reason)
        return self._run(step.on_failure or self._flow.successor(step))

    def on_model_reply(self, text: str) -> list[Action]:
        """The dialogue model answered *text*: store it, say it (unless ``say: false``)."""
        step = self._step
        if self._mode != _MODEL or not isinstance(step, ModelStep):
            return []
        self._mode = _IDLE
        self._variables[step.save_as] = text
        self._record("model_reply", text=text, data={step.save_as: text})
        actions: list[Action] = []
        if step.say and text.strip():
            actions.append(Say(text, step.settings.voice, step.settings.barge_in, None,
                               _dtmf_flag(step.settings), step.id))
            self._conversation.append(("agent", text))
        return actions + self._run(self._flow.successor(step))

    def on_model_failed(self, reason: str) -> list[Action]:
        """The model gave no reply (none configured, error, timeout); take ``on_failure``."""
        step = self._step
        if self._mode != _MODEL or not isinstance(step, ModelStep):
            return []
        self._mode = _IDLE
        self._record("model_failed", text=reason)
        return self._run(step.on_failure)

    def on_call_timeout(self) -> list[Action]:
        """The flow's ``max_call_duration_s`` has passed: end the call."""
        if self.ended or not self._started:
            return []
        return [self._hangup("max_duration")]

    # ------------------------------------------------------------------ engine

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

    def _listening_ask(self) -> AskStep | None:
        if self._mode == _LISTENING and isinstance(self._step, AskStep):
            return self._step
        return None

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

    def _listen(self, ask: AskStep, collecting: bool = False) -> Listen:
        settings = ask.settings
        slot = ask.slot
        digits = slot is not None and (slot.collects_digits or slot.type == "yes_no")
        phrases = tuple(p for _, ps in _phrases(ask) for p in ps)
        return Listen(
            settings.inter_digit_timeout_ms if collecting else settings.no_input_timeout_ms,
            speech=ask.speech,
            dtmf=ask.dtmf,
            slot_type=slot.type if slot is not None else None,
            max_digits=slot.max_dtmf_digits if digits and slot is not None else 1,
            terminator=slot.terminator if slot is not None and slot.collects_digits else None,
            collecting_digits=collecting,
            language=settings.language,
            asr_model=settings.asr_model,
            endpointing=settings.endpointing,
            phrases=phrases,
            intents=tuple(i.name for i in ask.intents),
            step=ask.id,
        )

    @staticmethod
    def _match(ask: AskStep, text: str) -> IntentMatch | None:
        """The intent *text* selects; intents that fill slots are also tried without the
        words of their slot values ("book an appointment tomorrow at 3 pm")."""
        if not ask.intents:
            return None
        matcher = _matcher(ask)
        match = matcher.match(text)
        kinds = sorted({kind for intent in ask.intents for _, kind in intent.slots})
        if match is not None or not kinds:
            return match
        stripped = strip_slot_words(text, kinds)
        if not stripped or stripped == text:
            return None
        match = matcher.match(stripped)
        if match is not None and _intent_named(ask, match).slots:
            return match
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
        if not ask.dtmf:
            return self._reprompt_or_give_up(ask, "no_match"), False
        slot = ask.slot
        if slot is not None and slot.collects_digits:
            if digit.isdigit():
                self._digits += digit
                if len(self._digits) >= slot.max_dtmf_digits:
                    return self._complete_digits(ask), False
                return [self._listen(ask, collecting=True)], True
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
        self._mode = _IDLE
        return self._run(self._flow.successor(ask))

    def _answered(
        self, ask: AskStep, intent: Intent, match: IntentMatch, text: str | None
    ) -> list[Action]:
        self._record("intent", text=match.example, intent=intent.name, score=match.score)
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
        self._mode = _IDLE
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
        if count <= policy.limit:
            self._record("reprompt", text=f"{kind} {count}")
            actions: list[Action] = []
            if policy.reprompts:
                template: Template | None = policy.reprompts[min(count, len(policy.reprompts)) - 1]
            else:
                template = ask.prompt
            say = self._say(template, ask.settings) if template is not None else None
            if say is not None:
                actions.append(say)
            actions.append(self._listen(ask))
            return actions
        self._record("gave_up", text=kind)
        self._mode = _IDLE
        if policy.then is None:
            return [self._hangup(kind)]
        return self._run(policy.then)

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
            step_id = self._execute(step, actions)
            if self._mode != _IDLE:
                return actions
        actions.append(self._hangup("step_limit"))
        return actions

    def _execute(self, step: Step, actions: list[Action]) -> str | None:
        """Run one step, appending its actions; return the next step id (None: flow end).

        A step that waits changes the mode; the caller then stops.
        """
        flow = self._flow
        if isinstance(step, SayStep):
            say = self._say(step.text, step.settings)
            if say is not None:
                actions.append(say)
            return flow.successor(step)
        if isinstance(step, AskStep):
            if step.skip_if_set and step.slot is not None and self._variables.get(step.slot.name):
                self._record("skipped", text=self._variables[step.slot.name])
                return flow.successor(step)
            self._no_input_count = 0
            self._no_match_count = 0
            self._digits = ""
            if step.prompt is not None:
                say = self._say(step.prompt, step.settings)
                if say is not None:
                    actions.append(say)
            actions.append(self._listen(step))
            self._mode = _LISTENING
            return None
        if isinstance(step, SetStep):
            assigned: dict[str, str] = {}
            for name, template in step.assignments:
                value = to_text(template.evaluate(self._scope))
                self._variables[name] = value
                assigned[name] = value
            self._record("set", text=", ".join(assigned), data=assigned)
            return flow.successor(step)
        if isinstance(step, BranchStep):
            for case in step.cases:
                if case.when.is_true(self._scope):
                    self._record("branch", text=case.when.source, data={"goto": case.goto})
                    return case.goto
            self._record("branch", text="otherwise")
            return flow.successor(step)
        if isinstance(step, WebhookStep):
            request, problem = self._webhook_request(step)
            if request is None:
                self._variables["webhook.status"] = "failed"
                self._variables["webhook.reason"] = problem
                self._record("webhook_failed", text=problem, data={"reason": problem})
                return step.on_failure
            self._record("webhook", text=f"{request.method} {request.url}")
            self._mode = _WEBHOOK
            actions.append(CallWebhook(request))
            return None
        if isinstance(step, HoursStep):
            status, holiday = step.status(self._local_now())
            self._variables["hours.open"] = "true" if status == "open" else "false"
            self._variables["hours.holiday"] = holiday
            self._record("hours", text=status, data={"status": status, "holiday": holiday})
            if status == "open":
                return flow.successor(step)
            if status == "holiday" and step.holiday is not None:
                return step.holiday
            return step.closed
        if isinstance(step, (TransferStep, QueueStep)):
            template = step.to if isinstance(step, TransferStep) else step.uri
            target = template.render(self._scope).strip()
            missing = template.missing(self._scope)
            if not target or missing:
                why = f"no transfer target ({', '.join(missing) or 'empty target'})"
                self._record("transfer_failed", text=why)
                self._variables["transfer.result"] = "failed"
                self._variables["transfer.reason"] = why
                self._transfer = {"target": target, "result": "failed", "reason": why}
                return step.on_failure or flow.following(step)
            if isinstance(step, QueueStep):
                if step.announce is not None:
                    say = self._say(step.announce, step.settings)
                    if say is not None:
                        actions.append(say)
                transfer = Transfer(target, "blind", queue=step.name)
            else:
                transfer = Transfer(target, step.mode, step.timeout_ms)
            self._record("transfer", text=target, data={"mode": transfer.mode,
                                                        "queue": transfer.queue or ""})
            self._transfer = {"target": target, "mode": transfer.mode,
                              "queue": transfer.queue or "", "result": "pending"}
            self._mode = _TRANSFERRING
            actions.append(transfer)
            return None
        if isinstance(step, GotoStep):
            if step.flow is None:
                self._record("goto", text=step.step or "")
                return step.step
            if len(self._stack) >= MAX_SUBFLOW_DEPTH:
                actions.append(self._hangup("stack_overflow"))
                return None
            self._stack.append((flow, flow.following(step)))
            target = self._dialplan.flow(step.flow)
            self._record("goto", text=f"{target.name}/{step.step or target.steps[0].id}")
            self._flow = target
            self._apply_defaults(target.variables)
            return step.step or target.steps[0].id
        if isinstance(step, ReturnStep):
            if not self._stack:
                actions.append(self._hangup("end_of_flow"))
                return None
            return_flow, return_step = self._stack.pop()
            self._record("return", text=return_flow.name)
            self._flow = return_flow
            return return_step if return_step is not None else self._end_of(return_flow, actions)
        if isinstance(step, RecordStep):
            if step.prompt is not None:
                say = self._say(step.prompt, step.settings)
                if say is not None:
                    actions.append(say)
            path = _safe_file_name(step.file.render(self._scope))
            self._record("record", text=path)
            self._mode = _RECORDING
            actions.append(Record(path, step.max_ms, step.beep, step.terminator))
            return None
        if isinstance(step, ModelStep):
            instructions = step.instructions.render(self._scope) if step.instructions else ""
            text = step.input.render(self._scope)
            self._record("model", text=text)
            self._mode = _MODEL
            history = tuple(self._conversation[-MAX_HISTORY_TURNS:])
            actions.append(AskModel(instructions, text, history, step.timeout_ms,
                                    step.settings.language))
            return None
        assert isinstance(step, HangupStep)
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

    def _webhook_request(self, step: WebhookStep) -> tuple[WebhookRequest | None, str]:
        scope = self._scope
        url = step.url.render(scope).strip()
        if not url.lower().startswith(("http://", "https://")):
            return None, f"bad url {url!r}: expected http:// or https://"
        query = [(name, value.render(scope)) for name, value in step.query]
        if step.method == "GET" and not step.query:
            query = [(k, self._variables.get(k, "")) for k in ("call_id", "caller", "called")]
        if query:
            url += ("&" if "?" in url else "?") + urlencode(query)
        headers = [(name, value.render(scope)) for name, value in step.headers]
        body: bytes | None = None
        if step.method != "GET":
            if step.default_body:
                payload: object = {
                    "call": {k: self._variables.get(k, "")
                             for k in ("call_id", "caller", "called", "region")},
                    "flow": self._flow.name,
                    "step": step.id,
                    "variables": {k: v for k, v in sorted(self._variables.items())
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

    def _say(self, template: Template, settings: Settings) -> Say | None:
        text = template.render(self._scope)
        if not text.strip():
            return None
        cache_key = prompt_cache_key(text, settings.voice) if template.is_static else None
        self._conversation.append(("agent", text))
        return Say(text, settings.voice, settings.barge_in, cache_key, _dtmf_flag(settings),
                   self.state)

    def _hangup(self, reason: str) -> Hangup:
        self._record("hangup", text=reason)
        self._mode = _ENDED
        self._end_reason = reason
        return Hangup(reason)


def _dtmf_flag(settings: Settings) -> bool | None:
    return None if settings.dtmf_barge_in == settings.barge_in else settings.dtmf_barge_in


def _safe_file_name(name: str) -> str:
    cleaned = _UNSAFE_FILE_CHARS.sub("_", name).lstrip(".") or "recording"
    if not cleaned.lower().endswith(".wav"):
        cleaned += ".wav"
    return cleaned[:200]


def _intent_named(ask: AskStep, match: IntentMatch) -> Intent:
    for intent in ask.intents:
        if intent.name == match.name:
            return intent
    raise KeyError(match.name)  # unreachable: the matcher only knows this ask's intents

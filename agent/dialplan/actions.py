"""The dialogue engine's actions, and the inputs that answer them: the call session's contract.

:class:`~agent.dialplan.engine.DialogueSession` (called "the engine" below) returns lists of
these actions; the call session and the simulator carry them out and report outcomes with the
engine's ``on_*`` calls.

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
    recognition to a region serving it), ``endpointing`` (an
    :class:`~agent.dialplan.model.Endpointing`, None fields meaning the server default) and
    ``step``.

``Transfer(target_uri, mode="blind", timeout_ms=30000, queue=None)``
    ``blind``: send SIP REFER to *target_uri*. ``bridged``: dial *target_uri* from the agent
    (ringing at most *timeout_ms*) and connect the caller to it. *queue* names the queue of a
    ``queue`` step (for records and metrics). Report ``on_transfer_succeeded()`` (REFER accepted
    and NOTIFY 2xx; or the bridged leg answered and is connected) or
    ``on_transfer_failed(reason)`` (e.g. ``"486 Busy Here"``, ``"no_answer"``, ``"timeout"``).
    After a blind success the engine returns ``Hangup("transferred")``; after a bridged success
    it returns ``[]`` and is ended: keep the bridge up until either party hangs up.

``CallWebhook(request: WebhookRequest)``
    Call the integrator's HTTP endpoint (``agent.integrations.webhook.call_webhook(reactor,
    request)`` does it, with the request's timeout, retries and backoff) and report
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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from agent.dialplan.model import Endpointing

__all__ = [
    "Action",
    "AskModel",
    "CallWebhook",
    "DialogueEvent",
    "Hangup",
    "Listen",
    "Record",
    "Say",
    "Transfer",
    "WebhookRequest",
    "WebhookResult",
]


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
    #: at a question before ending or transferring the call: how soon it is said again after an
    #: acknowledgement begun over it (``confirm.reask_after_ms``); None elsewhere
    reask_after_ms: int | None = None
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
    #: the reply is to be spoken (the step's ``say``): it may be streamed to synthesis
    say: bool = True
    #: OpenAI ``tools`` the model may call (the step's ``tools``)
    tools: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    #: ``auto``, or ``none`` once the turn's tool rounds are used up
    tool_choice: str = "auto"
    #: messages after the caller's words: the model's tool calls and their results
    followup: tuple[dict[str, Any], ...] = field(default=(), compare=False)


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

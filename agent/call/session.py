"""One answered call: caller audio → VAD and ASR → dialogue → prompts → playout.

Threads:

* :class:`~agent.call.pipeline.MediaPipeline` runs on pjmedia's clock thread for
  every received frame: VAD plus a non-blocking push into the recognition stream.
  It measures its own work per frame and hands VAD events to the reactor with
  ``callFromThread``.
* :class:`CallSession` runs on the reactor thread. It executes the dialogue's
  actions one after another (a Say finishes when its last frame has gone to
  the bridge), handles DTMF, transfers and teardown, and wires the parts that do
  the rest: the :class:`~agent.call.turns.TurnTaker` (end of the caller's turn),
  the :class:`~agent.call.barge.BargeController` (a voice over a prompt), the
  :class:`~agent.call.reply.PromptPlayer` (one :class:`~agent.call.reply.Reply`
  per prompt) and the :class:`~agent.call.recording.Recorder`.

Speech callbacks arrive on speech-client worker threads and are moved to the
reactor with ``callFromThread``; streamed synthesis audio goes straight into
the (thread-safe) playout buffer so it is never delayed behind the reactor.
All time stamps are the reactor's ``seconds()``.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from agent.app.metrics import AgentMetrics
from agent.call.barge import BargeController
from agent.call.bargein import BargeIn, BargeInConfig
from agent.call.completeness import one_word_among_others
from agent.call.endpointer import (EndOfTurn, EndpointerConfig, TranscriptAssembler, acknowledges_only,
                                   is_acknowledgement, is_backchannel, is_thinking_aloud)
from agent.call.hold import CallHold
from agent.call.pipeline import PERIODIC_VOICE, SIBILANT_DB, MediaPipeline
from agent.call.prosody import ProsodyTracker
from agent.call.ports import CallControl, PromptCache, Reactor, cancel
from agent.call.record import CallInfo, CallOutcome, Turn, call_record
from agent.call.recording import Recorder
from agent.call.steps import ExternalSteps, SpokenReply
from agent.call.reply import PromptPlayer, Reply
from agent.call.turns import Speculation, TurnTaker
from agent.dialplan.engine import (
    Action, AskModel, CallWebhook, DialogueSession, Hangup, Listen, Record, Say, Transfer, WebhookRequest,
)
from agent.speech.api import RecognitionOptions, RecognitionStream, Speech
from media.convert import StreamResampler
from media.frames import SAMPLE_RATE_HZ
from media.playout import PlayoutBuffer, PlayoutEvent, PlayoutEventType
from media.vad import EnergyVad, VadConfig, VadEvent, VadEventType

__all__ = ["CallControl", "CallInfo", "CallSession", "MediaPipeline", "PERIODIC_VOICE", "PromptCache", "Reactor",
           "SIBILANT_DB", "SessionSettings", "Turn"]

log = Logger(namespace="openclaw.session")


@dataclass(frozen=True)
class SessionSettings:
    frame_ms: int = 10
    sample_rate_hz: int = SAMPLE_RATE_HZ
    vad: VadConfig = field(default_factory=VadConfig)
    stop_history_ms: int = 300
    #: send the dialogue's expected phrases as recognition hints
    phrase_hints: bool = True
    #: readings of each recognition result to ask for (1: the likeliest only); words that
    #: select nothing may select an intent by another (docs/speech.md, "Other readings")
    alternatives: int = 4
    #: ask the recogniser to punctuate when a sentence mark shortens a silence
    #: (EndpointerConfig.uses_sentence_marks; config speech.punctuation)
    punctuation: bool = True
    asr_reopen_limit: int = 3
    #: what a caller's voice over an interruptible prompt must be to take the turn
    barge_in: BargeInConfig = field(default_factory=BargeInConfig)
    endpointer: EndpointerConfig = field(default_factory=EndpointerConfig)
    #: the first prompt starts this long after the media does: the caller's side takes a
    #: moment to play what arrives first, and the first syllable of the greeting is lost
    first_prompt_delay_ms: int = 0
    #: an intent match this sure counts as a complete request for endpointing (the dialogue
    #: itself accepts weaker matches once the turn is over)
    complete_min_score: float = 0.9


class CallSession:
    """Runs the dialogue of one call. All methods run on the reactor thread."""

    def __init__(self, call_id: str, dialogue: DialogueSession, speech: Speech, control: CallControl,
                 reactor: Reactor, prompts: PromptCache | None = None, metrics: AgentMetrics | None = None,
                 settings: SessionSettings | None = None,
                 on_ended: Callable[["CallSession"], None] | None = None,
                 webhooks: Callable[[WebhookRequest], Any] | None = None,
                 model: Callable[[AskModel], Any] | None = None,
                 recordings_dir: str = "var/recordings", info: CallInfo | None = None,
                 model_stream: Callable[[AskModel, Callable[[str], None]], Any] | None = None) -> None:
        self.call_id = call_id
        self.info = info or CallInfo()
        self.dialogue = dialogue
        self._speech = speech
        self.control = control
        self._reactor = reactor
        self._metrics = metrics
        self.settings = settings or SessionSettings()
        self._on_ended = on_ended
        self.log_fields = {"call_id": call_id}
        rate_hz = self.settings.sample_rate_hz
        self.playout = PlayoutBuffer(on_event=self._playout_event_from_any_thread, monotonic=reactor.seconds,
                                     sample_rate_hz=rate_hz)
        self.vad = EnergyVad(self.settings.vad, rate_hz)
        self.media = MediaPipeline(reactor, self.vad, self._on_vad_events, metrics, self.settings.frame_ms)
        self.media.playout = self.playout
        self.media.on_onset = self._on_voice_onset
        if self.settings.endpointer.uses_prosody:
            self.media.prosody = ProsodyTracker(self.settings.frame_ms, rate_hz)
        self.speaker = PromptPlayer(reactor, speech, self.playout, prompts, metrics, rate_hz, self._on_tts_error)
        self.transcripts = TranscriptAssembler()
        self.turn_taker = TurnTaker(reactor, self.transcripts, self.settings.endpointer, self._is_complete,
                                    lambda: self.media.last_voiced_at, lambda: self.dialogue, self.speaker, metrics,
                                    on_end_of_turn=self._on_end_of_turn, on_no_input=self._no_input,
                                    prosody=lambda: self.media.prosody.latest if self.media.prosody else None,
                                    is_meant=self._is_meant, rests_on_one_word=self._rests_on_one_word)
        self.hold = CallHold(reactor, self.playout, self.turn_taker, self.log_fields)
        self.barge = BargeController(reactor, self.media, self.playout, self.transcripts, self.settings.barge_in,
                                     _BargeHooks(self), metrics, self.log_fields)
        self.steps = ExternalSteps(reactor, control, lambda: self.dialogue, webhooks, model, metrics,
                                   self.log_fields, is_current=self._is_current, finish=self._finish_step,
                                   failed_at_once=self._step_failed_at_once, on_bridged=self._on_bridged,
                                   model_stream=model_stream)
        self.recorder = Recorder(reactor, self.media, self.playout, recordings_dir, rate_hz, self.log_fields,
                                 on_done=self._record_done)
        #: prompt audio synthesised ahead for the reply being said, by prompt text
        self._prepared: dict[str, list[bytes]] = {}
        #: the prompt a caller's voice interrupted, and the ask after it: said again if the
        #: "interruption" turns out to be only an acknowledgement or a noise
        self._reask: tuple[Action, ...] | None = None
        self._barge_committing = False
        #: when the dialogue last began listening while the caller was talking (or had been, less
        #: than ``rejoin_ms`` before: "oh | kay"); None when the caller was quiet
        self._listened_over_voice_at: float | None = None
        self._pending: deque[Action] = deque()
        self._current: Action | None = None
        #: the prompt being said
        self._reply: Reply | None = None
        self._asr: RecognitionStream | None = None
        self._asr_failures = 0
        self._asr_rate_hz = rate_hz
        #: when the agent last took the caller's turn (seconds)
        self._decided_at: float | None = None
        #: an answer to a question that ends or transfers the call, taken on interim words: the
        #: dialogue hears it with the recogniser's final and its confidence (or without, after
        #: ANSWER_FINAL_WAIT_S)
        self._answer_awaiting_final: EndOfTurn | None = None
        self._answer_timer: IDelayedCall | None = None
        self._awaiting_reply_since: float | None = None
        self._awaiting_trigger = "speech"
        self.turns: list[Turn] = []
        self.ended = False
        self.end_reason = ""
        self.started_at = reactor.seconds()
        #: called after each change of the record (a turn, a prompt, a reply's first audio, a dialogue
        #: event), on the reactor thread: the server journals the running call's record
        self.on_progress: Callable[[], None] | None = None
        self.barge_ins = 0
        #: the codec the call's media runs on (the server sets it when media is active)
        self.codec = ""
        self._max_duration_timer: IDelayedCall | None = None
        self._start_timer: IDelayedCall | None = None

    @property
    def false_interruptions(self) -> int:
        return self.barge.false_interruptions

    @property
    def cut_ins(self) -> int:
        return self.barge.cut_ins

    @property
    def transfer_target(self) -> str | None:
        return self.steps.transfer_target

    @property
    def recordings(self) -> list[str]:
        return self.recorder.recordings

    # -- lifecycle ------------------------------------------------------------
    def start(self, narrowband: bool = False) -> None:
        """Media is flowing: open recognition and run the dialogue's first step.

        *narrowband*: the call's codec carries only telephone bandwidth (G.711).
        The recogniser is then told the truth -- 8 kHz audio -- so it can treat
        it as such instead of as band-limited wideband speech.
        """
        if narrowband:
            self._asr_rate_hz = 8000
            self.media.asr_resampler = StreamResampler(self.settings.sample_rate_hz, 8000)
        self._open_recognition()
        self.turns.append(Turn(started_at=self._reactor.seconds()))
        limit_ms = getattr(self.dialogue, "max_call_duration_ms", None)
        if limit_ms:
            self._max_duration_timer = self._reactor.callLater(limit_ms / 1000.0, self._call_timeout)
        if self.settings.first_prompt_delay_ms > 0:
            self._start_timer = self._reactor.callLater(self.settings.first_prompt_delay_ms / 1000.0,
                                                        self._run, self.dialogue.start())
        else:
            self._run(self.dialogue.start())

    def close(self, reason: str) -> None:
        """Tear everything down (idempotent): streams, timers, queued audio."""
        if self.ended:
            return
        self.ended = True
        self.end_reason = reason
        self.turn_taker.close()
        self.barge.close()
        cancel(self._max_duration_timer)
        cancel(self._start_timer)
        cancel(self._answer_timer)
        self.recorder.close()
        self.steps.close()
        self._cancel_reply_synthesis()
        self.media.asr = None
        if self._asr is not None:
            self._asr.close()
            self._asr = None
        self.playout.flush()
        self._pending.clear()
        self._current = None
        log.info("call {call_id} session closed: {reason}", reason=reason, **self.log_fields)
        if self._on_ended is not None:
            self._on_ended(self)

    # -- inputs ---------------------------------------------------------------
    def on_dtmf(self, digit: str) -> None:
        if self.ended:
            return
        log.info("call {call_id} DTMF {digit}", digit=digit, **self.log_fields)
        if isinstance(self._current, Record):
            if self._current.terminator and digit == self._current.terminator:
                self.recorder.finish("terminator key")
            return
        self._interrupt_prompt(by_key=True)
        if not self.turn_taker.listening and self._current is not None:
            return  # a prompt that may not be interrupted is still playing
        self._begin_turn(dtmf=digit, trigger="dtmf", since=self._reactor.seconds())
        self._run(self.dialogue.on_dtmf(digit))

    def on_hold(self, held: bool) -> None:
        """The caller put the call on hold (True) or took it off hold (see agent/call/hold.py)."""
        if not self.ended:
            self.hold.set(held)

    def on_transfer_status(self, code: int, reason: str, final: bool) -> None:
        if not self.ended and isinstance(self._current, Transfer):
            self.steps.on_transfer_status(self._current, code, reason, final)

    # -- recognition ----------------------------------------------------------
    def _open_recognition(self) -> None:
        try:
            options = RecognitionOptions(
                sample_rate_hz=self._asr_rate_hz, stop_history_ms=self.settings.stop_history_ms,
                phrases=tuple(getattr(self.dialogue, "phrase_hints", ())) if self.settings.phrase_hints else (),
                max_alternatives=self.settings.alternatives,
                punctuation=self.settings.punctuation and self.settings.endpointer.uses_sentence_marks)
            stream = self._speech.open_recognition(
                options,
                on_interim=lambda text: self._reactor.callFromThread(self._on_interim, text),
                on_final=lambda text, conf: self._reactor.callFromThread(self._on_final, text, conf),
                on_error=lambda err: self._reactor.callFromThread(self._on_asr_error, err),
                on_alternatives=(None if self.settings.alternatives <= 1 else
                                 lambda texts: self._reactor.callFromThread(self.transcripts.on_alternatives, texts)))
        except Exception as e:  # speech backend down: the call goes on with DTMF
            self._on_asr_error(e)
            return
        self._asr = stream
        self.media.asr = stream

    def _is_complete(self, text: str) -> bool:
        """Do the words so far already make a request the dialogue understands?"""
        match = self.dialogue.peek_intent(text)
        return match is not None and match.score >= self.settings.complete_min_score

    def _rests_on_one_word(self, text: str) -> bool:
        """Does the request the words make rest on one word of the ask's among others?"""
        match = self.dialogue.peek_intent(text)
        return match is not None and one_word_among_others(match.example, text)

    def _is_meant(self, text: str) -> bool:
        """Do they make one by meaning (not for ending or transferring the call)?"""
        return self.dialogue.peek_intent(text, by_meaning=True) is not None

    def _on_interim(self, text: str) -> None:
        if self.ended:
            return
        turn_text = self.transcripts.on_interim(text)
        if self.barge.on_words(turn_text):
            return
        self.turn_taker.on_words(turn_text)

    def _on_final(self, text: str, confidence: float) -> None:
        if self.ended:
            return
        text = text.strip()
        self._asr_failures = 0
        turn_text, extra = self.transcripts.on_final(text, last_voice_at=self.media.last_voiced_at,
                                                     confidence=confidence)
        log.info("call {call_id} heard {text!r} ({confidence:.2f})", text=text, confidence=confidence,
                 **self.log_fields)
        last_speech_end = self.turn_taker.last_speech_end
        if self._metrics and last_speech_end is not None:
            self._metrics.asr_final_lag.observe(max(0.0, self._reactor.seconds() - last_speech_end))
        if self._answer_awaiting_final is not None:
            self._answer_with_final(text, confidence)
            return
        if extra:
            # The caller went on talking after the agent had taken the turn.
            self.barge.note_cut_in(" ".join(extra))
        if self.barge.on_words(turn_text, final=True):
            return
        if turn_text:
            self.turn_taker.on_words(turn_text)

    def _on_asr_error(self, err: Exception) -> None:
        if self.ended:
            return
        self.media.asr = None
        self._asr = None
        self._asr_failures += 1
        if self._metrics:
            self._metrics.asr_errors.inc()
        log.warn("call {call_id} recognition stream failed ({n}): {err}", n=self._asr_failures, err=err,
                 **self.log_fields)
        # Keep trying for the whole call, backing off; a final result resets the count.
        self._reactor.callLater(min(5.0, 0.2 * self._asr_failures), self._reopen_recognition)

    def _reopen_recognition(self) -> None:
        if not self.ended and self._asr is None:
            self._open_recognition()

    # -- the caller's turn ------------------------------------------------------
    def _on_vad_events(self, events: list[tuple[VadEvent, float]]) -> None:
        if self.ended:
            return
        for event, at in events:
            if event.type is VadEventType.SPEECH_START:
                self.turn_taker.on_speech_start(at)
            else:
                self.barge.on_voice_end()
                self.turn_taker.on_speech_end(at)

    def _on_end_of_turn(self, decision: EndOfTurn) -> None:
        reask, self._reask = self._reask, None
        if reask is not None and (not decision.text or is_backchannel(decision.text)):
            log.info("call {call_id} the interruption was only {text!r}: saying the prompt again",
                     text=decision.text, **self.log_fields)
            self.turn_taker.stop_listening()
            self._run(list(reask))
            return
        if not decision.text:
            log.info("call {call_id} speech without words ignored", **self.log_fields)
            self.turn_taker.restart_no_input()
            return
        began_over_prompt = self._began_over_prompt(decision)
        if self._only_acknowledged(decision.text, began_over_prompt):
            # "I see", "okay", "uh huh" said into the agent's silence answer nothing the ask
            # asked: the agent goes on waiting (no "sorry, I did not understand", no count
            # towards giving up on the caller).
            listen = self.turn_taker.listen
            reask_ms = listen.reask_after_ms if (
                began_over_prompt and listen is not None and is_acknowledgement(decision.text)) else None
            # Begun over a question before ending or transferring, it leaves the caller thinking
            # they answered: with nothing more said, the question comes again soon, not after
            # the whole no-input wait.
            log.info("call {call_id} only an acknowledgement ({text!r}{over}): still listening{reask}",
                     text=decision.text, over=", begun over the question" if began_over_prompt else "",
                     reask=f", asking again in {reask_ms} ms unless more is said" if reask_ms is not None else "",
                     **self.log_fields)
            self.turn_taker.drop_speculation()  # a reply worked out for these words is not wanted
            self.turn_taker.restart_no_input(reask_ms)
            return
        log.info("call {call_id} end of turn ({reason}, {speech:.0f} ms of speech, {silence:.0f} ms silence): "
                 "{text!r}", reason=decision.reason, silence=decision.silence_s * 1000.0,
                 speech=decision.speech_s * 1000.0, text=decision.text, **self.log_fields)
        self._decided_at = decision.decided_at
        self.barge.on_turn_taken(decision.speech_end_at)
        spec = self.turn_taker.take_speculation()
        self._begin_turn(caller_text=decision.text, trigger="speech", since=decision.speech_end_at)
        self.turns[-1].end_of_turn = decision.as_record()
        if decision.confidence is None and self.transcripts.awaiting_final \
                and self.dialogue.weighs_confidence(decision.text):
            # A yes to ending or transferring the call, in interim words: the dialogue acts on a
            # yes only when heard clearly, so it is given the recogniser's final (its
            # confidence), which comes a few hundred ms after the voice.
            if spec is not None:
                self.turn_taker.drop_speculation(spec)
            self._answer_awaiting_final = decision
            self._answer_timer = self._reactor.callLater(ANSWER_FINAL_WAIT_S, self._answer_with_final)
            return
        if spec is not None and spec.answers(decision):
            self._use_speculation(spec)
            return
        if spec is not None:
            self.turn_taker.drop_speculation(spec)
        self._answer(decision.text, decision.confidence, decision.alternatives)

    def _began_over_prompt(self, decision: EndOfTurn) -> bool:
        """Did the turn begin over the prompt before the listening: the caller's voice went on
        (with no pause longer than ``rejoin_ms``) from the prompt into the turn?"""
        over = self._listened_over_voice_at
        return over is not None and \
            decision.speech_started_at - over <= self.settings.barge_in.rejoin_ms / 1000.0

    def _only_acknowledged(self, text: str, began_over_prompt: bool = False) -> bool:
        """Are *text*'s words only an acknowledgement or a hesitation, at an ask that offers
        intents (not a slot, not a model's conversation) and takes none of them from these
        words; or, at a yes/no question, only a hesitation or "I see"? Taken for an answer,
        they would use up the question's one repetition, after which an unclear "ok" ends the
        call (docs/dialplans.md, "Confirmation"). At a question before ending or transferring
        the call, an acknowledgement the caller began while the question was being said
        (*began_over_prompt*: "uh huh, okay" over "Do you want me to put you ...") acknowledges
        the agent talking, not what it asks: it is no yes."""
        listen = self.turn_taker.listen
        if listen is None or listen.collecting_digits:
            return False
        if listen.slot_type == "yes_no":
            return is_thinking_aloud(text) or (
                began_over_prompt and self.dialogue.asking_before_acting and is_acknowledgement(text))
        return acknowledges_only(text, bool(listen.intents), listen.slot_type, self.dialogue.peek_intent)

    def _answer(self, text: str, confidence: float | None, alternatives: tuple[str, ...] = ()) -> None:
        t0 = self._reactor.seconds()
        actions = self.dialogue.on_transcript(text, confidence=confidence, alternatives=alternatives)
        if self._metrics:
            self._metrics.dialogue_step.observe(self._reactor.seconds() - t0)
        self._run(actions)

    def _answer_with_final(self, text: str | None = None, confidence: float | None = None) -> None:
        """The final of an answer taken on interim words came (*text*, *confidence*), or none
        did in time (no arguments): the dialogue hears the answer."""
        cancel(self._answer_timer)
        self._answer_timer = None
        decision, self._answer_awaiting_final = self._answer_awaiting_final, None
        if decision is None or self.ended:
            return
        if not text:
            text, confidence = decision.text, None
            log.info("call {call_id} no final words for the answer {text!r}: taken as heard", text=text,
                     **self.log_fields)
        elif self.turns:
            self.turns[-1].caller_text = text  # the record says what the dialogue heard
        self._answer(text, confidence)

    def _use_speculation(self, spec: Speculation) -> None:
        """The reply was worked out (and its audio started) while the silence was confirmed."""
        self.dialogue = spec.dialogue
        self._prepared = spec.prepared
        if self._metrics:
            self._metrics.speculations.labels("used").inc()
        self._run(list(spec.actions))

    def _no_input(self) -> None:
        if self.ended or self.hold.held:
            return  # on hold: the wait starts afresh on resume
        log.info("call {call_id} no input", **self.log_fields)
        self._begin_turn(trigger="no_input", since=self._reactor.seconds())
        self._awaiting_reply_since = None
        self._run(self.dialogue.on_no_input())

    def _begin_turn(self, *, trigger: str, since: float, caller_text: str = "", dtmf: str = "") -> None:
        self.turn_taker.stop_listening()
        self._awaiting_reply_since = since
        self._awaiting_trigger = trigger
        self.turns.append(Turn(started_at=self._reactor.seconds(), caller_text=caller_text, dtmf=dtmf))

    # -- barge-in ----------------------------------------------------------------
    def _on_voice_onset(self, started_at: float, paused: bool) -> None:
        if not self.ended:
            self.barge.on_voice_onset(started_at, paused)

    def _arm_barge_in(self) -> None:
        current = self._current
        self.barge.arm(isinstance(current, Say) and current.barge_in
                       and any(isinstance(a, (Listen, SpokenReply)) for a in self._pending))

    def _on_barge_in(self, barge: BargeIn) -> None:
        """A caller's voice over the prompt takes the turn."""
        # The caller's turn began with the voice that interrupted (its first onset, even when
        # the VAD reported speech again after a pause in it).
        self.turn_taker.speech_started_at = barge.started_at
        again: list[Action] = [self._current] if self._current is not None else []
        for action in self._pending:
            again.append(action)
            if isinstance(action, Listen):
                break
        self._barge_committing = True
        try:
            interrupted = self._interrupt_prompt()
        finally:
            self._barge_committing = False
        if not interrupted:
            self.playout.resume()
            return
        if again and isinstance(again[0], Say) and isinstance(again[-1], Listen):
            self._reask = tuple(again)
        self.turn_taker.take_interrupting_turn(barge.started_at, self.media.last_voiced_at)

    def _interrupt_prompt(self, by_key: bool = False) -> bool:
        """Barge-in: stop a prompt that allows it and start listening at once."""
        current = self._current
        if not isinstance(current, Say) or not (current.keys_interrupt if by_key else current.barge_in):
            return False
        # Only interrupt when a Listen follows (or a model reply still streaming, which then
        # stops); a closing prompt plays out.
        if not any(isinstance(a, (Listen, SpokenReply)) for a in self._pending):
            return False
        self.barge.drop()
        self.barge_ins += 1
        if self._metrics:
            self._metrics.barge_ins.inc()
        if self.turns:
            self.turns[-1].barge_in = True
        self._cancel_reply_synthesis()
        self._current = None
        self._reply = None
        self.playout.flush()
        while self._pending and not isinstance(self._pending[0], (Listen, SpokenReply)):
            self._pending.popleft()
        if self._pending and isinstance(self._pending[0], SpokenReply):
            follow = self.steps.interrupt_model(self._pending.popleft())
            if any(isinstance(a, Listen) for a in follow):
                while follow and isinstance(follow[0], Say):  # the caller is talking: no prompt first
                    follow.pop(0)
            self._pending.extendleft(reversed(follow))
        log.info("call {call_id} barge-in: prompt stopped", **self.log_fields)
        self.barge.arm(False)
        self._advance()
        return True

    # -- actions --------------------------------------------------------------
    def _run(self, actions: list[Action]) -> None:
        if self.ended:
            return
        self._pending.extend(actions)
        self._advance()

    def _advance(self) -> None:
        self._advance_actions()
        self._arm_barge_in()
        self._progress()

    def _progress(self) -> None:
        if self.on_progress is not None:
            try:
                self.on_progress()
            except Exception:  # noqa: BLE001 - the journal never takes the call down
                log.failure("call {call_id} journal update failed", **self.log_fields)

    def _advance_actions(self) -> None:
        while not self.ended and self._current is None and self._pending:
            action = self._pending.popleft()
            if isinstance(action, Listen):
                caller_turn_began = self.turn_taker.caller_speaking or self._barge_committing
                self.turn_taker.start_listening(action, caller_turn_began=caller_turn_began)
                # The caller was talking as the prompt ended (also a voice still being judged, or
                # one that stopped less than rejoin_ms ago: "oh | kay").
                now = self._reactor.seconds()
                voiced = self.media.last_voiced_at > 0.0 and \
                    now - self.media.last_voiced_at <= self.settings.barge_in.rejoin_ms / 1000.0
                self._listened_over_voice_at = now if (
                    caller_turn_began or self.barge.current is not None or voiced) else None
                continue
            self.turn_taker.stop_listening()
            if isinstance(action, Hangup):
                log.info("call {call_id} hanging up: {reason}", reason=action.reason, **self.log_fields)
                self.control.hangup(f"dialplan: {action.reason}")
                self.close(f"agent hangup: {action.reason}")
                return
            self._current = action
            if isinstance(action, Say):
                self._say(action)
            elif isinstance(action, CallWebhook):
                self.steps.start_webhook(action)
            elif isinstance(action, Record):
                self.recorder.start(action)
            elif isinstance(action, AskModel):
                self.steps.start_model(action)
            elif isinstance(action, SpokenReply):
                self.steps.continue_model(action)
            elif isinstance(action, Transfer):
                self.steps.start_transfer(action)

    def _say(self, say: Say) -> None:
        self._reply = self.speaker.say(say, self._prepared.pop(say.text, None))
        if self.turns:
            self.turns[-1].agent_prompts.append(self._reply)

    def _cancel_reply_synthesis(self) -> None:
        if self._reply is not None:
            self._reply.cancel_synthesis()

    def _on_tts_error(self, err: Exception) -> None:
        if self._metrics:
            self._metrics.tts_errors.inc()
        log.warn("call {call_id} synthesis failed: {err}", err=err, **self.log_fields)

    def _playout_event_from_any_thread(self, event: PlayoutEvent) -> None:
        self._reactor.callFromThread(self._on_playout_event, event)

    def _on_playout_event(self, event: PlayoutEvent) -> None:
        if self.ended:
            return
        if event.type is PlayoutEventType.STARTED and self._awaiting_reply_since is not None:
            latency = max(0.0, event.at_s - self._awaiting_reply_since)
            self._awaiting_reply_since = None
            reply_start = (max(0.0, event.at_s - self._decided_at)
                           if self._decided_at is not None and self._awaiting_trigger == "speech" else None)
            if self.turns:
                self.turns[-1].latency_ms = round(latency * 1000.0, 1)
                if reply_start is not None:
                    self.turns[-1].reply_start_ms = round(reply_start * 1000.0, 1)
            self._progress()
            if self._metrics:
                self._metrics.turn_latency.labels(self._awaiting_trigger).observe(latency)
                if reply_start is not None:
                    self._metrics.reply_start.observe(reply_start)
        if event.type in (PlayoutEventType.FINISHED, PlayoutEventType.FLUSHED):
            self.speaker.ended(event)
        if event.type is not PlayoutEventType.FINISHED:
            return
        if self.recorder.on_segment_finished(event.segment_id):
            return
        reply = self._reply
        if reply is not None and event.segment_id == reply.segment:
            self._reply = None
            reply.synthesis = None
            if isinstance(self._current, Say):
                self._current = None
            self._advance()

    # -- steps, call limit ----------------------------------------------------------
    def _record_done(self, path: str, duration_ms: int, error: str) -> None:
        self._finish_step(self.dialogue.on_record_failed(error) if error
                          else self.dialogue.on_record_done(path, duration_ms))

    def _is_current(self, action: Action) -> bool:
        return not self.ended and self._current is action

    def _finish_step(self, actions: list[Action]) -> None:
        self._current = None
        self._run(actions)

    def _step_failed_at_once(self, actions: list[Action]) -> None:
        self._current = None
        self._pending.extend(actions)

    def _on_bridged(self) -> None:
        # The caller now talks to the target; the agent stops listening and speaking.
        self.media.asr = None

    def _call_timeout(self) -> None:
        self._max_duration_timer = None
        if self.ended:
            return
        log.info("call {call_id} reached its maximum duration", **self.log_fields)
        self._drop_current_work()
        self._run(self.dialogue.on_call_timeout())

    def _drop_current_work(self) -> None:
        """Stop talking and listening and forget the queued actions."""
        self._cancel_reply_synthesis()
        self.playout.flush()
        self._pending.clear()
        self._current = None
        self._reply = None
        self.turn_taker.stop_listening()

    def hang_up(self, reason: str) -> None:
        """Send BYE now and close the session."""
        self.control.hangup(reason)
        self.close(reason)

    def end_politely(self, text: str, voice: str, reason: str) -> None:
        """Drop what the call was doing, say *text*, then hang up (server shutdown, drain).

        A call whose media never started is hung up at once; if anything fails on the
        way, the call is hung up rather than left open."""
        if self.ended:
            return
        if not self.turns:  # media never started: nothing can be heard
            self.hang_up(reason)
            return

        def hang_up_now() -> None:
            log.failure("call {call_id}: goodbye failed; hanging up", **self.log_fields)
            self.hang_up(reason)

        try:
            self._drop_current_work()
        except Exception:
            hang_up_now()
            return

        def goodbye() -> None:
            # A turn later: the flushed prompt's playout event (delivered through
            # callFromThread) must not be taken for the goodbye's.
            try:
                self._run([Say(text, voice, barge_in=False, cache_key=None), Hangup(reason)])
            except Exception:
                hang_up_now()

        self._reactor.callLater(0.05, goodbye)

    # -- record ---------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """The call record: turns with what was said, heard and how fast."""
        outcome = CallOutcome(self.call_id, self.end_reason, self.barge_ins, self.false_interruptions,
                              self.cut_ins, self.transfer_target, self.recordings,
                              [p.as_record() for p in self.barge.pauses])
        return {**call_record(outcome, self.dialogue, self.turns), **self.hold.record()}


#: how long an answer to a question that ends or transfers the call, taken on interim words,
#: waits for the recogniser's final (which comes ~350 ms after the voice: docs/latency.md)
ANSWER_FINAL_WAIT_S = 1.0


class _BargeHooks:
    """The session as the barge-in controller sees it."""

    def __init__(self, session: CallSession) -> None:
        self._session = session

    def prompt_playing(self) -> bool:
        return isinstance(self._session._current, Say)

    def prompt_follows(self) -> bool:
        pending = self._session._pending
        return bool(pending) and isinstance(pending[0], Say)

    def caller_speaking(self) -> bool:
        return self._session.turn_taker.caller_speaking

    def is_request(self, text: str) -> bool:
        return self._session._is_complete(text)

    def is_meant(self, text: str) -> bool:
        return self._session._is_meant(text)

    def interrupt(self, barge: BargeIn) -> None:
        self._session._on_barge_in(barge)

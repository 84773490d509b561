"""One answered call: caller audio → VAD and ASR → dialogue → prompts → playout.

Threads:

* :class:`MediaPipeline` runs on pjmedia's clock thread for every received
  frame: VAD plus a non-blocking push into the recognition stream. It measures
  its own work per frame and hands VAD events to the reactor with
  ``callFromThread``.
* :class:`CallSession` runs on the reactor thread. It executes the dialogue's
  actions one after another (a Say finishes when its last frame has gone to
  the bridge), handles barge-in, DTMF, no-input timers and teardown, and keeps
  the call record.

Speech callbacks arrive on speech-client worker threads and are moved to the
reactor with ``callFromThread``; streamed synthesis audio goes straight into
the (thread-safe) playout buffer so it is never delayed behind the reactor.
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from agent.dialplan.engine import (
    Action, AskModel, CallWebhook, DialogueSession, Hangup, Listen, Record, Say, Transfer, WebhookRequest,
    WebhookResult,
)
from media.convert import StreamResampler
from agent.call.bargein import BargeIn, BargeInConfig, Verdict
from agent.call.endpointer import (
    EndOfTurn, EndpointerConfig, TranscriptAssembler, TranscriptState, TurnEndpointer, is_backchannel,
)
from agent.app.metrics import AgentMetrics
from agent.speech.api import RecognitionOptions, RecognitionStream, Speech, SynthesisStream
from media.frames import SAMPLE_RATE_HZ, duration_ms
from media.frames import duration_ms as duration_ms_of
from media.playout import PlayoutBuffer, PlayoutEvent, PlayoutEventType
from media.trim import LeadingSilenceGate, trim_silence
from media.vad import EnergyVad, VadConfig, VadEvent, VadEventType
from media.voicing import PeriodicityMeter

#: periodicity above which a frame counts as voice rather than noise
PERIODIC_VOICE = 0.45
#: a frame whose energy above 2.5 kHz is this much over its energy below 2 kHz is a sibilant
#: ("s", "sh", the "ch" of "check"): interruptions start with one as often as with a vowel, and
#: it comes 50-70 ms before the vowel; white noise stays under 0 dB, pink noise, coughs and
#: vowels far under (``PeriodicityMeter.sibilance_db``)
SIBILANT_DB = 6.0

log = Logger(namespace="openclaw.session")


class Reactor(Protocol):
    def seconds(self) -> float: ...
    def callLater(self, delay: float, f: Callable[..., Any], *a: Any, **kw: Any) -> IDelayedCall: ...
    def callFromThread(self, f: Callable[..., Any], *a: Any, **kw: Any) -> None: ...


class CallControl(Protocol):
    """What a session may do to its SIP call (reactor thread)."""

    def hangup(self) -> None: ...
    def transfer(self, target_uri: str) -> bool: ...

    def bridge(self, target_uri: str, timeout_ms: int, on_result: Callable[[bool, str], None]) -> None:
        """Dial *target_uri* and connect the caller to it; report (connected, reason) once."""


class PromptCache(Protocol):
    def get(self, text: str, voice: str) -> bytes | None: ...


@dataclass
class Turn:
    """One exchange, for the call record."""

    started_at: float
    caller_text: str = ""
    dtmf: str = ""
    agent_prompts: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: float | None = None
    barge_in: bool = False


@dataclass(frozen=True)
class SessionSettings:
    frame_ms: int = 10
    sample_rate_hz: int = SAMPLE_RATE_HZ
    vad: VadConfig = field(default_factory=VadConfig)
    stop_history_ms: int = 300
    #: send the dialogue's expected phrases as recognition hints
    phrase_hints: bool = True
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


class MediaPipeline:
    """Per-frame work on the clock thread: VAD, then a non-blocking ASR push."""

    def __init__(self, reactor: Reactor, vad: EnergyVad, on_vad: Callable[[list[tuple[VadEvent, float]]], None],
                 metrics: AgentMetrics | None, frame_ms: int,
                 perf_counter: Callable[[], float] = time.perf_counter,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._reactor = reactor
        self._vad = vad
        self._on_vad = on_vad
        self._metrics = metrics
        self._deadline_s = frame_ms / 1000.0
        self._perf = perf_counter
        self._monotonic = monotonic
        self.asr: RecognitionStream | None = None
        #: the reactor sets this while a prompt that caller speech may interrupt is playing;
        #: the clock thread then pauses *playout* the moment a voice starts
        self.barge_armed = False
        self.playout: PlayoutBuffer | None = None
        #: this much periodic sound, or sibilant sound, in a row (consecutive frames) is a
        #: voice's onset
        self.onset_ms = 20.0
        #: a voice starting before this (time.monotonic()) does not pause the prompt; the session
        #: decides what it is: the caller finishing the turn the agent has just taken
        #: (``BargeInConfig.tail_ms``), or the rest of an acknowledgement whose start let the prompt
        #: resume (``BargeIn.resumed_on_onset``)
        self.play_on_until = 0.0
        self._meter = PeriodicityMeter()
        self._frame_ms = float(frame_ms)
        self._run_ms = 0.0
        self._periodic_ms = 0.0
        self._sibilant_ms = 0.0
        self._gap_ms = 0.0
        self._run_started_at = 0.0
        self._onset_sent = False
        self.on_onset: Callable[[float, bool], None] | None = None
        #: when set, received frames are appended here too (a caller message being recorded)
        self.recorder: list[bytes] | None = None
        #: converts bridge audio to the rate the recogniser is told (8 kHz for G.711 calls)
        self.asr_resampler: StreamResampler | None = None
        #: time.monotonic() at the end of the latest voiced frame received
        self.last_voiced_at = 0.0
        self.frames = 0
        self.deadline_misses = 0

    def push_frame(self, pcm: bytes) -> None:
        t0 = self._perf()
        self.frames += 1
        events = self._vad.feed(pcm)
        now = self._monotonic()
        if self._vad.last_frame_voiced:
            self.last_voiced_at = now
            self._voice_onset(pcm, now)
        else:
            self._periodic_ms = self._sibilant_ms = 0.0
            self._gap_ms += self._frame_ms
            if self._gap_ms >= 60.0:
                self._run_ms = 0.0
                self._onset_sent = False
        recorder = self.recorder
        if recorder is not None:
            recorder.append(pcm)
        asr = self.asr
        if asr is not None:
            resampler = self.asr_resampler
            asr.push_audio(resampler.process(pcm) if resampler is not None else pcm, self._vad.level_dbfs)
        if events:
            # Media time → monotonic time of the event itself (not of its detection).
            stamped = [(e, now - (self._vad.now_ms - e.at_ms) / 1000.0) for e in events]
            self._reactor.callFromThread(self._on_vad, stamped)
        spent = self._perf() - t0
        missed = spent > self._deadline_s
        if missed:
            self.deadline_misses += 1
        if self._metrics is not None:
            self._metrics.media_frame_work.observe(spent)
            if missed:
                self._metrics.media_deadline_misses.inc()

    def rearm_onset(self) -> None:
        """Let a voice that is still going on pause the prompt again (called from the reactor
        when a barge-in lets the prompt resume: if the voice was not over after all, the next
        20 ms of it pause the prompt at once)."""
        self._periodic_ms = self._sibilant_ms = 0.0
        self._onset_sent = False

    def _voice_onset(self, pcm: bytes, now: float) -> None:
        """Detect a voice (periodic sound, or a sibilant) starting; pause an interruptible prompt at once."""
        if self._run_ms == 0.0:
            self._run_started_at = now - self._frame_ms / 1000.0
        self._gap_ms = 0.0
        self._run_ms += self._frame_ms
        if self._onset_sent:
            return
        if self._meter.feed(pcm) >= PERIODIC_VOICE:
            self._periodic_ms += self._frame_ms
            self._sibilant_ms = 0.0
        elif self._meter.sibilance_db >= SIBILANT_DB:
            self._sibilant_ms += self._frame_ms
            self._periodic_ms = 0.0
        else:
            self._periodic_ms = self._sibilant_ms = 0.0
        if max(self._periodic_ms, self._sibilant_ms) >= self.onset_ms:
            self._onset_sent = True
            paused = (self.barge_armed and self._run_started_at >= self.play_on_until
                      and self.playout is not None and self.playout.pause())
            if self.on_onset is not None:
                self._reactor.callFromThread(self.on_onset, self._run_started_at, paused)


class CallSession:
    """Runs the dialogue of one call. All methods run on the reactor thread."""

    def __init__(self, call_id: str, dialogue: DialogueSession, speech: Speech, control: CallControl,
                 reactor: Reactor, prompts: PromptCache | None = None, metrics: AgentMetrics | None = None,
                 settings: SessionSettings | None = None,
                 on_ended: Callable[["CallSession"], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 webhooks: Callable[[WebhookRequest], Any] | None = None,
                 model: Callable[[AskModel], Any] | None = None,
                 recordings_dir: str = "var/recordings") -> None:
        self.call_id = call_id
        self.dialogue = dialogue
        self._speech = speech
        self._control = control
        self._reactor = reactor
        self._prompts = prompts
        self._metrics = metrics
        self.settings = settings or SessionSettings()
        self._on_ended = on_ended
        self._monotonic = monotonic
        self.playout = PlayoutBuffer(on_event=self._playout_event_from_any_thread, monotonic=monotonic,
                                     sample_rate_hz=self.settings.sample_rate_hz)
        self.vad = EnergyVad(self.settings.vad, self.settings.sample_rate_hz)
        self.media = MediaPipeline(reactor, self.vad, self._on_vad_events, metrics, self.settings.frame_ms,
                                   monotonic=monotonic)
        self.media.playout = self.playout
        self.media.on_onset = self._on_voice_onset
        self._barge: BargeIn | None = None
        #: the last barge-in that let the prompt resume (a voice back soon continues it), with the
        #: transcript as it was before its words were set aside
        self._resumed: tuple[BargeIn, TranscriptState] | None = None
        #: (text, forked dialogue, its actions, prepared audio by prompt text, synthesis streams)
        self._speculation: tuple[str, DialogueSession, list[Action], dict[str, list[bytes]],
                                 list[SynthesisStream]] | None = None
        self._barge_timer: IDelayedCall | None = None
        self.false_interruptions = 0
        self._prepared: dict[str, list[bytes]] = {}
        #: the prompt a caller's voice interrupted, and the ask after it: said again if the
        #: "interruption" turns out to be only an acknowledgement or a noise
        self._reask: tuple[Action, ...] | None = None
        self._barge_committing = False
        #: playout segment id → its prompt's entry in the call record
        self._prompt_records: dict[int, dict[str, Any]] = {}
        self._pending: deque[Action] = deque()
        self._current: Action | None = None
        self._current_segment: int | None = None
        self._synth: SynthesisStream | None = None
        self._asr: RecognitionStream | None = None
        self._asr_failures = 0
        self._asr_rate_hz = self.settings.sample_rate_hz
        self._listening = False
        self._listen: Listen | None = None
        self._no_input_timer: IDelayedCall | None = None
        self._caller_speaking = False
        self.endpointer = TurnEndpointer(self._is_complete, self.settings.endpointer,
                                         last_voiced_ms=lambda: self.media.last_voiced_at * 1000.0)
        self.transcripts = TranscriptAssembler()
        self._endpoint_timer: IDelayedCall | None = None
        self._decided_at: float | None = None
        self._speech_started_at: float | None = None
        self._last_speech_end: float | None = None
        self.cut_ins = 0
        self._cut_in_noted = False
        #: a voice starting before this is the caller finishing the turn the agent has just taken
        self._tail_until = 0.0
        self._awaiting_reply_since: float | None = None
        self._awaiting_trigger = "speech"
        self.turns: list[Turn] = []
        self.ended = False
        self.end_reason = ""
        self.started_at = reactor.seconds()
        self.barge_ins = 0
        self.transfer_target: str | None = None
        self.log_fields = {"call_id": call_id}
        self._webhooks = webhooks
        self._model = model
        self.recordings_dir = recordings_dir
        self._record: Record | None = None
        self._record_timer: IDelayedCall | None = None
        self._beep_segment: int | None = None
        self._max_duration_timer: IDelayedCall | None = None
        self._start_timer: IDelayedCall | None = None
        self.recordings: list[str] = []

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
        self._cancel_no_input()
        self._cancel_endpoint_timer()
        self.media.barge_armed = False
        for timer in (self._max_duration_timer, self._record_timer, self._barge_timer, self._start_timer):
            if timer is not None and timer.active():
                timer.cancel()
        if self._record is not None:
            self._save_recording("caller hung up")
        if self._synth is not None:
            self._synth.cancel()
            self._synth = None
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
                self._finish_record("terminator key")
            return
        self._interrupt_prompt(by_key=True)
        if not self._listening and self._current is not None:
            return  # a prompt that may not be interrupted is still playing
        self._begin_turn(dtmf=digit, trigger="dtmf", since=self._monotonic())
        self._run(self.dialogue.on_dtmf(digit))

    def on_transfer_status(self, code: int, reason: str, final: bool) -> None:
        if self.ended or not isinstance(self._current, Transfer):
            return
        log.info("call {call_id} transfer progress {code} {reason}", code=code, reason=reason, **self.log_fields)
        if not final and code < 300:
            return
        self._current = None
        if 200 <= code < 300:
            if self._metrics:
                self._metrics.transfers.labels("succeeded").inc()
            self._run(self.dialogue.on_transfer_succeeded())
        else:
            if self._metrics:
                self._metrics.transfers.labels("failed").inc()
            self._run(self.dialogue.on_transfer_failed(f"{code} {reason}"))

    # -- recognition ----------------------------------------------------------
    def _open_recognition(self) -> None:
        try:
            options = RecognitionOptions(
                sample_rate_hz=self._asr_rate_hz, stop_history_ms=self.settings.stop_history_ms,
                phrases=tuple(getattr(self.dialogue, "phrase_hints", ())) if self.settings.phrase_hints else ())
            stream = self._speech.open_recognition(
                options,
                on_interim=lambda text: self._reactor.callFromThread(self._on_interim, text),
                on_final=lambda text, conf: self._reactor.callFromThread(self._on_final, text, conf),
                on_error=lambda err: self._reactor.callFromThread(self._on_asr_error, err))
        except Exception as e:  # speech backend down: the call goes on with DTMF
            self._on_asr_error(e)
            return
        self._asr = stream
        self.media.asr = stream

    def _is_complete(self, text: str) -> bool:
        """Do the words so far already make a request the dialogue understands?"""
        match = self.dialogue.peek_intent(text)
        return match is not None and match.score >= self.settings.complete_min_score

    def _now_ms(self) -> float:
        return self._monotonic() * 1000.0

    def _on_interim(self, text: str) -> None:
        if self.ended:
            return
        turn_text = self.transcripts.on_interim(text)
        if self._barge is not None:
            self._barge.on_words(turn_text, at=self._monotonic())
            self._barge_check()
            if self._barge is not None:
                return
        if self._listening:
            self._speculate(turn_text)
            self._handle_endpoint(self.endpointer.on_transcript(turn_text, self._now_ms()))

    def _on_final(self, text: str, confidence: float) -> None:
        if self.ended:
            return
        text = text.strip()
        self._asr_failures = 0
        turn_text, extra = self.transcripts.on_final(text, last_voice_at=self.media.last_voiced_at)
        log.info("call {call_id} heard {text!r} ({confidence:.2f})", text=text, confidence=confidence,
                 **self.log_fields)
        if self._metrics and self._last_speech_end is not None:
            self._metrics.asr_final_lag.observe(max(0.0, self._monotonic() - self._last_speech_end))
        if extra:
            # The caller went on talking after the agent had taken the turn.
            self._note_cut_in(" ".join(extra))
        if self._barge is not None:
            self._barge.on_words(turn_text, final=True, at=self._monotonic())
            self._barge_check()
            if self._barge is not None:
                return
        if self._listening and turn_text:
            self._speculate(turn_text)
            self._handle_endpoint(self.endpointer.on_transcript(turn_text, self._now_ms()))

    def _handle_endpoint(self, decision: EndOfTurn | None) -> None:
        if decision is None:
            self._schedule_endpoint_poll()
            return
        self._cancel_endpoint_timer()
        self.transcripts.consume()
        if self._metrics:
            self._metrics.endpoint_silence.labels(decision.reason).observe(
                max(0.0, (decision.decided_ms - decision.speech_end_ms) / 1000.0))
        reask, self._reask = self._reask, None
        if reask is not None and (not decision.text or is_backchannel(decision.text)):
            log.info("call {call_id} the interruption was only {text!r}: saying the prompt again",
                     text=decision.text, **self.log_fields)
            self._stop_listening()
            self._run(list(reask))
            return
        if not decision.text:
            log.info("call {call_id} speech without words ignored", **self.log_fields)
            if self._listening and self._listen is not None and not self._caller_speaking:
                self._start_no_input(self._listen.no_input_timeout_ms)
            return
        log.info("call {call_id} end of turn ({reason}, {speech:.0f} ms of speech, {silence:.0f} ms silence): "
                 "{text!r}", reason=decision.reason, silence=decision.decided_ms - decision.speech_end_ms,
                 speech=decision.speech_ms, text=decision.text, **self.log_fields)
        self._decided_at = decision.decided_ms / 1000.0
        self._cut_in_noted = False
        self._tail_until = (decision.speech_end_ms + self.settings.barge_in.tail_ms) / 1000.0
        self.media.play_on_until = max(self.media.play_on_until, self._tail_until)
        spec, self._speculation = self._speculation, None
        self._begin_turn(caller_text=decision.text, trigger="speech", since=decision.speech_end_ms / 1000.0)
        if spec is not None and spec[0] == decision.text:
            # The reply was worked out (and its audio started) while the silence was confirmed.
            self.dialogue, actions = spec[1], spec[2]
            self._prepared = spec[3]
            if self._metrics:
                self._metrics.speculations.labels("used").inc()
            self._run(actions)
            return
        if spec is not None:
            self._drop_speculation(spec)
        t0 = self._monotonic()
        actions = self.dialogue.on_transcript(decision.text)
        if self._metrics:
            self._metrics.dialogue_step.observe(self._monotonic() - t0)
        self._run(actions)

    def _speculate(self, text: str) -> None:
        """The words so far make a request: prepare the reply before the turn is certain."""
        if self._speculation is not None and self._speculation[0] == text:
            return
        if self._speculation is not None:
            self._drop_speculation(self._speculation)
            self._speculation = None
        if not text or not self._is_complete(text):
            return
        t0 = self._monotonic()
        fork = self.dialogue.fork()
        actions = fork.on_transcript(text)
        if self._metrics:
            self._metrics.dialogue_step.observe(self._monotonic() - t0)
        prepared: dict[str, list[bytes]] = {}
        streams: list[SynthesisStream] = []
        first = next((a for a in actions if isinstance(a, Say)), None)
        if first is not None and (self._prompts is None or self._prompts.get(first.text, first.voice) is None):
            chunks: list[bytes] = []
            prepared[first.text] = chunks
            streams.append(self._speech.synthesize_stream(
                first.text, sample_rate_hz=self.settings.sample_rate_hz, voice=first.voice,
                on_audio=chunks.append, on_done=lambda: chunks.append(b""), on_error=lambda e: None))
        self._speculation = (text, fork, actions, prepared, streams)

    def _drop_speculation(self, spec: Any) -> None:
        for stream in spec[4]:
            stream.cancel()
        if self._metrics:
            self._metrics.speculations.labels("discarded").inc()

    def _schedule_endpoint_poll(self) -> None:
        self._cancel_endpoint_timer()
        deadline = self.endpointer.next_deadline_ms()
        if deadline is None or not self._listening:
            return
        delay = max(0.0, deadline / 1000.0 - self._monotonic())
        self._endpoint_timer = self._reactor.callLater(delay, self._poll_endpointer)

    def _poll_endpointer(self) -> None:
        self._endpoint_timer = None
        if self.ended or not self._listening:
            return
        self._handle_endpoint(self.endpointer.poll(self._now_ms()))

    def _cancel_endpoint_timer(self) -> None:
        timer, self._endpoint_timer = self._endpoint_timer, None
        if timer is not None and timer.active():
            timer.cancel()

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

    # -- VAD and barge-in -----------------------------------------------------
    def _on_vad_events(self, events: list[tuple[VadEvent, float]]) -> None:
        if self.ended:
            return
        for event, at in events:
            if event.type is VadEventType.SPEECH_START:
                self._caller_speaking = True
                self._speech_started_at = at
                self._cancel_no_input()
                if self._listening:
                    self.endpointer.on_speech_start(at * 1000.0)
                    self._cancel_endpoint_timer()
            else:
                self._caller_speaking = False
                self._last_speech_end = at
                if self._barge is not None:
                    self._schedule_barge_check(self._barge.config.resume_after_ms / 1000.0)
                if self._listening:
                    self._handle_endpoint(self.endpointer.on_speech_end(at * 1000.0, self._now_ms()))
                    if self._listen is not None and not self.endpointer.in_turn:
                        self._start_no_input(self._listen.no_input_timeout_ms)

    # -- barge-in ----------------------------------------------------------------
    def _arm_barge_in(self) -> None:
        current = self._current
        self.media.barge_armed = (isinstance(current, Say) and current.barge_in
                                  and any(isinstance(a, Listen) for a in self._pending))

    def _on_voice_onset(self, started_at: float, paused: bool) -> None:
        """A voice began (clock thread has already paused an interruptible prompt if *paused*)."""
        if self.ended:
            return
        if not paused:
            if not isinstance(self._current, Say):
                return
            if self._barge is None and self._rejoin(started_at, paused=False):
                return
            if started_at < self._tail_until:
                self._on_turn_tail(started_at)
            return
        if not isinstance(self._current, Say):
            self.playout.resume()
            return
        if self._barge is not None:
            # The same voice, on again after a gap or after the prompt played over it.
            self._barge.on_voice_again()
            self._barge_check()
            return
        if self._rejoin(started_at, paused=True):
            return
        self._barge = BargeIn(started_at, self._is_complete, self.settings.barge_in)
        if self._metrics:
            self._metrics.barge_in_decision.observe(max(0.0, self._monotonic() - started_at))
        log.info("call {call_id} caller's voice: prompt paused", **self.log_fields)
        self._barge_check()

    def _rejoin(self, started_at: float, paused: bool) -> bool:
        """A voice back soon after a barge-in let the prompt resume continues that barge-in: a
        pause inside one interruption, judged whole (*paused*: the media thread paused the
        prompt at its onset); or the rest of an acknowledgement whose start let the prompt
        resume, which it plays on over (not *paused*)."""
        recent = self._resumed
        if recent is None:
            return False
        if not paused and not (recent[0].resumed_on_onset and self.media.barge_armed):
            return False  # a voice the prompt was not paused for continues only an acknowledgement
        self._resumed = None
        if not recent[0].rejoins(started_at):
            return False
        self._barge, words = recent
        counted = not self._barge.tail  # a tail's end was not counted as a false interruption
        self._barge.revive()
        # Its words are this voice's again: the recogniser is still in the same utterance and
        # may revise them ("oh" becoming "ok"), which set aside would leave the barge-in with
        # no words at all.
        self.transcripts.restore(words)
        self._barge.on_words(self.transcripts.text, at=self._monotonic())
        self.false_interruptions -= counted
        if self._barge.talking_over:
            log.info("call {call_id} caller's {text!r} goes on: prompt plays on", text=self._barge.text,
                     **self.log_fields)
        else:
            log.info("call {call_id} caller's voice is back: prompt paused", **self.log_fields)
        self._barge_check()
        return True

    def _on_turn_tail(self, started_at: float) -> None:
        """The caller went on talking just after the agent took the turn and began its reply."""
        self._note_cut_in()
        if not self.media.barge_armed or self._barge is not None:
            return
        self._barge = BargeIn(started_at, self._is_complete, self.settings.barge_in, tail=True)
        self._barge.on_words(self.transcripts.text, at=self._monotonic())
        log.info("call {call_id} caller went on talking as the reply began: reply plays on", **self.log_fields)
        self._barge_check()

    def _note_cut_in(self, extra: str = "") -> None:
        """Count, once per turn taken, the caller talking on after the agent took the turn."""
        if self._cut_in_noted or self._decided_at is None:
            return
        self._cut_in_noted = True
        self.cut_ins += 1
        if self._metrics:
            self._metrics.cut_ins.inc()
        log.info("call {call_id} cut-in: caller went on talking{extra} after the turn was taken",
                 extra=f" ({extra!r})" if extra else "", **self.log_fields)

    def _schedule_barge_check(self, delay_s: float) -> None:
        self._cancel_barge_check()
        self._barge_timer = self._reactor.callLater(max(0.0, delay_s), self._barge_check)

    def _cancel_barge_check(self) -> None:
        if self._barge_timer is not None and self._barge_timer.active():
            self._barge_timer.cancel()
        self._barge_timer = None

    def _barge_check(self) -> None:
        """Ask the barge-in in progress for its verdict and carry it out."""
        self._cancel_barge_check()
        barge = self._barge
        if barge is None or self.ended:
            return
        decision = barge.decide(self._monotonic(), self.media.last_voiced_at, self._caller_speaking)
        if decision.verdict is Verdict.INTERRUPT:
            self._commit_barge_in(decision.why)
            return
        if decision.verdict is Verdict.RESUME:
            self._barge = None
            self._resumed = (barge, self.transcripts.snapshot())
            self.media.rearm_onset()
            spoke_ms = barge.spoke_ms(self.media.last_voiced_at)
            self.transcripts.set_aside(self._monotonic())  # its words are not part of the caller's next turn
            if barge.resumed_on_onset:
                # The rest of the acknowledgement, back within rejoin_ms, does not pause the prompt.
                self.media.play_on_until = max(self.media.play_on_until,
                                               self._monotonic() + barge.config.rejoin_ms / 1000.0)
            self.playout.resume()
            if barge.tail:
                # Never paused for: the end of the caller's own turn, counted as a cut-in.
                log.info("call {call_id} caller's {ms:.0f} ms ({text!r}) after the turn was taken did not "
                         "interrupt; reply played on", ms=spoke_ms, text=barge.text, **self.log_fields)
                return
            self.false_interruptions += 1
            if self._metrics:
                self._metrics.barge_in_outcomes.labels("resumed").inc()
            log.info("call {call_id} caller's {ms:.0f} ms of voice ({text!r}) did not interrupt; prompt "
                     "{how}", ms=spoke_ms, text=barge.text, how="played on" if barge.talking_over else "resumed",
                     **self.log_fields)
            return
        if decision.verdict is Verdict.PAUSE:
            self.playout.pause()
            log.info("call {call_id} caller's voice ({text!r}) goes on: prompt paused again",
                     text=barge.text, **self.log_fields)
        if decision.verdict is Verdict.TALK_OVER and self.playout.paused:
            self.playout.resume()
            log.info("call {call_id} caller's {text!r} is an acknowledgement: prompt plays on",
                     text=barge.text, **self.log_fields)
        if decision.check_in_s is not None:
            self._schedule_barge_check(decision.check_in_s)

    def _commit_barge_in(self, why: str) -> None:
        barge, self._barge = self._barge, None
        self._cancel_barge_check()
        if barge is None:
            return
        # The caller's turn began with the voice that interrupted (its first onset, even when
        # the VAD reported speech again after a pause in it).
        self._speech_started_at = barge.started_at
        if self._metrics:
            self._metrics.barge_in_outcomes.labels("interrupted").inc()
        log.info("call {call_id} barge-in confirmed ({why})", why=why, **self.log_fields)
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
        if self._listening:
            self.endpointer.on_speech_start(barge.started_at * 1000.0)
            if not self._caller_speaking:
                self.endpointer.on_speech_end(self.media.last_voiced_at * 1000.0, self._now_ms())
            self._handle_endpoint(self.endpointer.on_transcript(self.transcripts.text, self._now_ms()))

    def _interrupt_prompt(self, by_key: bool = False) -> bool:
        """Barge-in: stop a prompt that allows it and start listening at once."""
        current = self._current
        if not isinstance(current, Say) or not (current.keys_interrupt if by_key else current.barge_in):
            return False
        # Only interrupt when a Listen follows; a closing prompt plays out.
        if not any(isinstance(a, Listen) for a in self._pending):
            return False
        if self._barge is not None:
            self._barge = None
            self._cancel_barge_check()
        self.barge_ins += 1
        if self._metrics:
            self._metrics.barge_ins.inc()
        if self.turns:
            self.turns[-1].barge_in = True
        if self._synth is not None:
            self._synth.cancel()
            self._synth = None
        self._current = None
        self._current_segment = None
        self.playout.flush()
        while self._pending and not isinstance(self._pending[0], Listen):
            self._pending.popleft()
        log.info("call {call_id} barge-in: prompt stopped", **self.log_fields)
        self.media.barge_armed = False
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

    def _advance_actions(self) -> None:
        while not self.ended and self._current is None and self._pending:
            action = self._pending.popleft()
            if isinstance(action, Say):
                self._stop_listening()
                self._current = action
                self._say(action)
            elif isinstance(action, Listen):
                self._listening = True
                self._listen = action
                if (self._caller_speaking or self._barge_committing) and self._speech_started_at is not None:
                    # Barge-in: the caller's turn began while the prompt played.
                    self.endpointer.on_speech_start(self._speech_started_at * 1000.0)
                else:
                    self.endpointer.reset()
                    self.transcripts.reset()
                    self._start_no_input(action.no_input_timeout_ms)
            elif isinstance(action, CallWebhook):
                self._stop_listening()
                self._current = action
                self._start_webhook(action)
            elif isinstance(action, Record):
                self._stop_listening()
                self._current = action
                self._start_record(action)
            elif isinstance(action, AskModel):
                self._stop_listening()
                self._current = action
                self._start_model(action)
            elif isinstance(action, Transfer) and action.mode == "bridged":
                self._stop_listening()
                self._current = action
                self.transfer_target = action.target_uri
                log.info("call {call_id} bridging to {uri}", uri=action.target_uri, **self.log_fields)
                bridge = getattr(self._control, "bridge", None)
                if bridge is None:
                    self._current = None
                    self._pending.extend(self.dialogue.on_transfer_failed("bridged transfer not supported"))
                else:
                    bridge(action.target_uri, action.timeout_ms,
                           lambda ok, reason, a=action: self._on_bridge_result(a, ok, reason))
            elif isinstance(action, Transfer):
                self._stop_listening()
                self._current = action
                self.transfer_target = action.target_uri
                log.info("call {call_id} transferring to {uri}", uri=action.target_uri, **self.log_fields)
                if not self._control.transfer(action.target_uri):
                    self._current = None
                    if self._metrics:
                        self._metrics.transfers.labels("failed").inc()
                    self._pending.extend(self.dialogue.on_transfer_failed("REFER could not be sent"))
            elif isinstance(action, Hangup):
                self._stop_listening()
                log.info("call {call_id} hanging up: {reason}", reason=action.reason, **self.log_fields)
                self._control.hangup()
                self.close(f"agent hangup: {action.reason}")
                return

    # -- webhooks, recordings, model, bridged transfers, call limit -------------
    def _start_webhook(self, action: CallWebhook) -> None:
        if self._webhooks is None:
            self._reactor.callLater(0, self._webhook_done, WebhookResult(ok=False, reason="no webhook client"), action)
            return
        log.info("call {call_id} webhook {method} {url}", method=action.request.method, url=action.request.url,
                 **self.log_fields)
        d = self._webhooks(action.request)
        d.addErrback(lambda f: WebhookResult(ok=False, reason=f.getErrorMessage()))
        d.addCallback(self._webhook_done, action)

    def _webhook_done(self, result: WebhookResult, action: CallWebhook) -> None:
        if self.ended or self._current is not action:
            return
        log.info("call {call_id} webhook {step}: {outcome}", step=action.request.step,
                 outcome="ok" if result.ok else f"failed ({result.reason})", **self.log_fields)
        self._current = None
        self._run(self.dialogue.on_webhook_result(result))

    def _start_model(self, action: AskModel) -> None:
        if self._model is None:
            self._current = None
            self._pending.extend(self.dialogue.on_model_failed("no dialogue model configured"))
            return
        d = self._model(action)

        def reply(text: str) -> None:
            if not self.ended and self._current is action:
                self._current = None
                self._run(self.dialogue.on_model_reply(text))

        def failed(failure: Any) -> None:
            if not self.ended and self._current is action:
                self._current = None
                self._run(self.dialogue.on_model_failed(failure.getErrorMessage()))

        d.addCallbacks(reply, failed)

    def _on_bridge_result(self, action: Transfer, ok: bool, reason: str) -> None:
        if self.ended or self._current is not action:
            return
        log.info("call {call_id} bridged transfer: {outcome}", outcome="connected" if ok else reason,
                 **self.log_fields)
        self._current = None
        if self._metrics:
            self._metrics.transfers.labels("succeeded" if ok else "failed").inc()
        if ok:
            # The caller now talks to the target; the agent stops listening and speaking.
            self.media.asr = None
            self._run(self.dialogue.on_transfer_succeeded())
        else:
            self._run(self.dialogue.on_transfer_failed(reason))

    def _start_record(self, action: Record) -> None:
        self._record = action
        if action.beep:
            self._beep_segment = self.playout.play(_beep(self.settings.sample_rate_hz))
        else:
            self._begin_capture()

    def _begin_capture(self) -> None:
        if self._record is None:
            return
        self.media.recorder = []
        self._record_timer = self._reactor.callLater(self._record.max_ms / 1000.0, self._finish_record,
                                                     "maximum length")

    def _finish_record(self, why: str) -> None:
        if self._record is None or self.ended:
            return
        timer, self._record_timer = self._record_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        path, duration_ms, error = self._save_recording(why)
        self._current = None
        if error:
            self._run(self.dialogue.on_record_failed(error))
        else:
            self._run(self.dialogue.on_record_done(path, duration_ms))

    def _save_recording(self, why: str) -> tuple[str, int, str]:
        """Write what was captured to the WAV file; returns (path, duration_ms, error)."""
        import os
        import wave

        action, self._record = self._record, None
        frames, self.media.recorder = self.media.recorder or [], None
        assert action is not None
        path = os.path.join(self.recordings_dir, action.path)
        pcm = b"".join(frames)
        duration_ms = int(duration_ms_of(len(pcm), self.settings.sample_rate_hz))
        try:
            os.makedirs(self.recordings_dir, exist_ok=True)
            with wave.open(path, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(self.settings.sample_rate_hz)
                w.writeframes(pcm)
        except OSError as e:
            log.error("call {call_id} recording {path} not written: {err}", path=path, err=e, **self.log_fields)
            return path, duration_ms, f"cannot write {path}: {e.strerror}"
        self.recordings.append(path)
        log.info("call {call_id} recorded {ms} ms to {path} ({why})", ms=duration_ms, path=path, why=why,
                 **self.log_fields)
        return path, duration_ms, ""

    def _call_timeout(self) -> None:
        self._max_duration_timer = None
        if self.ended:
            return
        log.info("call {call_id} reached its maximum duration", **self.log_fields)
        self._drop_current_work()
        self._run(self.dialogue.on_call_timeout())

    def _drop_current_work(self) -> None:
        """Stop talking and listening and forget the queued actions."""
        if self._synth is not None:
            self._synth.cancel()
            self._synth = None
        self.playout.flush()
        self._pending.clear()
        self._current = None
        self._current_segment = None
        self._stop_listening()

    def hang_up(self, reason: str) -> None:
        """Send BYE now and close the session."""
        self._control.hangup()
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

    def _say(self, say: Say) -> None:
        self._say_segment(say)
        if self._current_segment is not None and self.turns and self.turns[-1].agent_prompts:
            record = self.turns[-1].agent_prompts[-1]
            record["segment"] = self._current_segment
            self._prompt_records[self._current_segment] = record

    def _say_segment(self, say: Say) -> None:
        turn = self.turns[-1] if self.turns else None
        record = {"text": say.text, "played_ms": 0.0, "total_ms": None, "interrupted": False}
        if turn is not None:
            turn.agent_prompts.append(record)
        pcm = self._prompts.get(say.text, say.voice) if self._prompts is not None else None
        if self._metrics:
            self._metrics.prompt_cache.labels("hit" if pcm is not None else "miss").inc()
        if pcm is not None:
            self._current_segment = self.playout.play(pcm)
            return
        prepared = self._prepared.pop(say.text, None)
        if prepared is not None and prepared and prepared[-1] == b"":
            # Synthesised speculatively, and complete.
            self._current_segment = self.playout.play(trim_silence(b"".join(prepared), self.settings.sample_rate_hz,
                                                                   tail_ms=300))
            return
        sid = self.playout.open_segment()
        self._current_segment = sid

        def on_error(err: Exception) -> None:
            self.playout.close_segment(sid)
            self._reactor.callFromThread(self._on_tts_error, err)

        gate = LeadingSilenceGate(self.settings.sample_rate_hz)
        requested = self._monotonic()
        metrics = self._metrics

        def on_audio(pcm: bytes) -> None:
            first = not gate.open
            pcm = gate.process(pcm)
            if pcm:
                if first and metrics is not None:
                    metrics.tts_first_audio.observe(self._monotonic() - requested)
                self.playout.append(sid, pcm)

        self._synth = self._speech.synthesize_stream(
            say.text, sample_rate_hz=self.settings.sample_rate_hz, voice=say.voice,
            on_audio=on_audio,
            on_done=lambda: self.playout.close_segment(sid),
            on_error=on_error)

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
            if self.turns:
                self.turns[-1].latency_ms = round(latency * 1000.0, 1)
            if self._metrics:
                self._metrics.turn_latency.labels(self._awaiting_trigger).observe(latency)
                if self._decided_at is not None and self._awaiting_trigger == "speech":
                    self._metrics.reply_start.observe(max(0.0, event.at_s - self._decided_at))
        if event.type in (PlayoutEventType.FINISHED, PlayoutEventType.FLUSHED):
            self._record_played(event)
        if event.type is PlayoutEventType.FINISHED and event.segment_id == self._beep_segment:
            self._beep_segment = None
            self._begin_capture()
            return
        if event.type is PlayoutEventType.FINISHED and event.segment_id == self._current_segment:
            self._current_segment = None
            self._synth = None
            if isinstance(self._current, Say):
                self._current = None
            self._advance()

    def _record_played(self, event: PlayoutEvent) -> None:
        record = self._prompt_records.pop(event.segment_id, None)
        if record is not None:
            record["played_ms"] = round(duration_ms(event.played_bytes, self.settings.sample_rate_hz))
            record["total_ms"] = round(duration_ms(event.total_bytes, self.settings.sample_rate_hz))
            record["interrupted"] = event.type is PlayoutEventType.FLUSHED
            return
        for turn in reversed(self.turns[-2:]):
            for record in reversed(turn.agent_prompts):
                if record["total_ms"] is None and "segment" not in record:
                    record["played_ms"] = round(duration_ms(event.played_bytes, self.settings.sample_rate_hz))
                    record["total_ms"] = round(duration_ms(event.total_bytes, self.settings.sample_rate_hz))
                    record["interrupted"] = event.type is PlayoutEventType.FLUSHED
                    return

    # -- turns and timers -----------------------------------------------------
    def _begin_turn(self, *, trigger: str, since: float, caller_text: str = "", dtmf: str = "") -> None:
        self._stop_listening()
        self._awaiting_reply_since = since
        self._awaiting_trigger = trigger
        self.turns.append(Turn(started_at=self._reactor.seconds(), caller_text=caller_text, dtmf=dtmf))

    def _stop_listening(self) -> None:
        if self._speculation is not None:
            self._drop_speculation(self._speculation)
            self._speculation = None
        self._listening = False
        self._listen = None
        self._cancel_no_input()
        self._cancel_endpoint_timer()
        self.endpointer.reset()

    def _start_no_input(self, timeout_ms: int) -> None:
        self._cancel_no_input()
        self._no_input_timer = self._reactor.callLater(timeout_ms / 1000.0, self._no_input)

    def _cancel_no_input(self) -> None:
        timer, self._no_input_timer = self._no_input_timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _no_input(self) -> None:
        self._no_input_timer = None
        if self.ended or not self._listening:
            return
        log.info("call {call_id} no input", **self.log_fields)
        self._begin_turn(trigger="no_input", since=self._monotonic())
        self._awaiting_reply_since = None
        self._run(self.dialogue.on_no_input())

    # -- record ---------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """The call record: turns with what was said, heard and how fast."""
        return {
            "call_id": self.call_id,
            "end_reason": self.end_reason,
            "barge_ins": self.barge_ins,
            "false_interruptions": self.false_interruptions,
            "cut_ins": self.cut_ins,
            "transfer_target": self.transfer_target,
            "recordings": self.recordings,
            "dialogue": [dataclasses.asdict(e) if dataclasses.is_dataclass(e) else e
                         for e in getattr(self.dialogue, "history", ())],
            "path": self.dialogue.call_record() if hasattr(self.dialogue, "call_record") else None,
            "turns": [
                {"caller": t.caller_text, "dtmf": t.dtmf, "agent": t.agent_prompts,
                 "latency_ms": t.latency_ms, "barge_in": t.barge_in}
                for t in self.turns
            ],
        }


def _beep(sample_rate_hz: int, freq_hz: float = 1000.0, ms: int = 250) -> bytes:
    """The tone played before a recording starts."""
    import math
    import struct

    n = sample_rate_hz * ms // 1000
    return struct.pack(f"<{n}h", *(int(8000 * math.sin(2 * math.pi * freq_hz * i / sample_rate_hz))
                                   for i in range(n)))

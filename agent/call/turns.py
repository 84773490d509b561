"""Taking the caller's turn: endpointing, the no-input timer, and replies prepared ahead.

:class:`TurnTaker` feeds the VAD's speech start/end and the recogniser's words to the
:class:`~agent.call.endpointer.TurnEndpointer`, polls it when its next deadline comes,
and hands each :class:`~agent.call.endpointer.EndOfTurn` to the session. Words that
may end the turn -- finished words, a request of the ask, or any words not left unfinished
once the caller is quiet -- are answered ahead on a fork of the dialogue (a
:class:`Speculation`), whose first prompt starts synthesising at once; the session uses it
if the turn ends on the same words, and it is dropped, unheard, if the caller goes on.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from twisted.internet.interfaces import IDelayedCall

from agent.app.metrics import AgentMetrics
from agent.call.completeness import Completeness
from agent.call.endpointer import EndOfTurn, EndpointerConfig, TranscriptAssembler, TurnEndpointer
from agent.call.prosody import ProsodyReading
from agent.call.ports import Reactor, cancel
from agent.call.reply import PromptPlayer
from agent.dialplan.engine import Action, DialogueSession, Listen, Say
from agent.speech.api import SynthesisStream

#: the no-input timeout waits while the caller's voice is this recent (ms): a voice shorter than
#: the VAD's ``speech_start_ms`` is not yet speech, and a reprompt started then talks over a
#: caller who has just begun (whose words it then loses as a barge-in over it)
NO_INPUT_VOICE_GRACE_MS = 150
#: ... for at most this much longer (ms), so that a line's noise cannot put it off for ever
NO_INPUT_MAX_GRACE_MS = 1000


@dataclass(frozen=True)
class Speculation:
    """A reply worked out before the turn was certain."""

    #: the caller's words it answers
    text: str
    #: the dialogue forked and stepped on those words
    dialogue: DialogueSession
    actions: tuple[Action, ...]
    #: audio synthesised ahead, by prompt text (ends with b"" once complete)
    prepared: dict[str, list[bytes]] = field(default_factory=dict)
    streams: tuple[SynthesisStream, ...] = ()
    #: the recogniser's confidence the dialogue was given with the words
    confidence: float | None = None
    #: and its other readings of them
    alternatives: tuple[str, ...] = ()

    def answers(self, decision: EndOfTurn) -> bool:
        """Was this reply worked out on the words (confidence, other readings) the turn ended with?"""
        return (self.text == decision.text and self.confidence == decision.confidence
                and self.alternatives == decision.alternatives)


class TurnTaker:
    """The caller's turn while the dialogue listens: when it has ended, and what was said."""

    def __init__(self, reactor: Reactor, transcripts: TranscriptAssembler, config: EndpointerConfig,
                 is_complete: Callable[[str], bool], last_voiced_at: Callable[[], float],
                 dialogue: Callable[[], DialogueSession], player: PromptPlayer, metrics: AgentMetrics | None,
                 on_end_of_turn: Callable[[EndOfTurn], None], on_no_input: Callable[[], None],
                 prosody: Callable[[], ProsodyReading | None] | None = None,
                 is_meant: Callable[[str], bool] | None = None,
                 rests_on_one_word: Callable[[str], bool] | None = None) -> None:
        self._reactor = reactor
        self._last_voiced_at = last_voiced_at
        self.transcripts = transcripts
        self.endpointer = TurnEndpointer(is_complete, config, last_voiced_at=last_voiced_at, prosody=prosody,
                                         is_meant=is_meant, rests_on_one_word=rests_on_one_word,
                                         at_yes_no=lambda: self.listen is not None and self.listen.slot_type == "yes_no")
        self._dialogue = dialogue
        self._player = player
        self._metrics = metrics
        self._on_end_of_turn = on_end_of_turn
        self._on_no_input = on_no_input
        self.listening = False
        self.listen: Listen | None = None
        self.speculation: Speculation | None = None
        #: the VAD has the caller speaking
        self.caller_speaking = False
        #: when the caller's current (or latest) voice began, and when the latest one ended
        self.speech_started_at: float | None = None
        self.last_speech_end: float | None = None
        self._endpoint_timer: IDelayedCall | None = None
        #: when the words read as unfinished: the reply worked out shortly before their long
        #: silence would end the turn
        self._ahead_timer: IDelayedCall | None = None
        self._no_input_timer: IDelayedCall | None = None
        #: how long the no-input timeout has waited for a voice the VAD had not yet judged (ms)
        self._no_input_grace_ms = 0

    # -- listening -----------------------------------------------------------------
    def start_listening(self, action: Listen, caller_turn_began: bool) -> None:
        """The dialogue listens. *caller_turn_began*: the caller's voice that interrupted the
        prompt before this is the start of the turn."""
        self.listening = True
        self.listen = action
        if caller_turn_began and self.speech_started_at is not None:
            self.endpointer.on_speech_start(self.speech_started_at)
        else:
            self.endpointer.reset()
            self.transcripts.reset()
            self.start_no_input(action.no_input_timeout_ms)

    def stop_listening(self) -> None:
        self.drop_speculation()
        self.listening = False
        self.listen = None
        self.cancel_no_input()
        self._cancel_endpoint_timer()
        self.endpointer.reset()

    def close(self) -> None:
        self.cancel_no_input()
        self._cancel_endpoint_timer()

    # -- the caller's voice and words ----------------------------------------------
    def on_speech_start(self, at: float) -> None:
        self.caller_speaking = True
        self.speech_started_at = at
        self.cancel_no_input()
        if self.listening:
            self.endpointer.on_speech_start(at)
            self._cancel_endpoint_timer()

    def on_speech_end(self, at: float) -> None:
        self.caller_speaking = False
        self.last_speech_end = at
        if self.listening:
            decision = self.endpointer.on_speech_end(at, self._reactor.seconds())
            if decision is None:
                self._speculate(self.transcripts.text)
            self._handle(decision)
            if self.listen is not None and not self.endpointer.in_turn:
                self.start_no_input(self.listen.no_input_timeout_ms)

    def on_words(self, text: str) -> None:
        """The turn's words so far (from an interim or a final)."""
        if self.listening:
            confidence = self.transcripts.confidence
            self._speculate(text, confidence)
            self._handle(self.endpointer.on_transcript(text, self._reactor.seconds(), confidence,
                                                       sentence_end=self.transcripts.sentence_end))

    def take_interrupting_turn(self, started_at: float, last_voiced_at: float) -> None:
        """A barge-in became the caller's turn: it began at *started_at*; decide on its words."""
        if not self.listening:
            return
        now = self._reactor.seconds()
        self.endpointer.on_speech_start(started_at)
        if not self.caller_speaking:
            self.endpointer.on_speech_end(last_voiced_at, now)
        self._handle(self.endpointer.on_transcript(self.transcripts.text, now))

    def restart_no_input(self, timeout_ms: int | None = None) -> None:
        """Words came to nothing: wait for the caller again (unless they are talking), for the
        listen's no-input timeout or *timeout_ms*."""
        if self.listening and self.listen is not None and not self.caller_speaking:
            self.start_no_input(self.listen.no_input_timeout_ms if timeout_ms is None else timeout_ms)

    # -- speculation ----------------------------------------------------------------
    def take_speculation(self) -> Speculation | None:
        spec, self.speculation = self.speculation, None
        return spec

    def drop_speculation(self, spec: Speculation | None = None) -> None:
        """Cancel *spec* (default: the current one) and count it discarded."""
        if spec is None:
            spec, self.speculation = self.speculation, None
        if spec is None:
            return
        for stream in spec.streams:
            stream.cancel()
        if self._metrics:
            self._metrics.speculations.labels("discarded").inc()

    def _speculate(self, text: str, confidence: float | None = None, unfinished: bool = False) -> None:
        """The words so far may end the turn: prepare the reply before the turn is certain.

        While the caller speaks, only words that would end the turn after the short silence
        are answered ahead; once they are quiet, any words not left unfinished (the reply to
        "my card" is ready if the longer silence confirms it); and, *unfinished*, words left
        unfinished too, shortly before their silence ends the turn (:data:`AHEAD_OF_LONG_SILENCE_S`)."""
        spec = self.speculation
        alternatives = self.transcripts.alternatives if text == self.transcripts.text else ()
        if (spec is not None and spec.text == text and spec.confidence == confidence
                and spec.alternatives == alternatives):
            return
        if not text or not self.listening:
            self.drop_speculation()
            return
        worth = (self.endpointer.likely_end(text) if self.caller_speaking
                 else unfinished or self.endpointer.words(text) is not Completeness.UNFINISHED)
        if not worth:
            self.drop_speculation()
            return
        self.drop_speculation()
        t0 = self._reactor.seconds()
        fork = self._dialogue().fork()
        actions = fork.on_transcript(text, confidence=confidence, alternatives=alternatives)
        if self._metrics:
            self._metrics.dialogue_step.observe(self._reactor.seconds() - t0)
        prepared: dict[str, list[bytes]] = {}
        streams: list[SynthesisStream] = []
        first = next((a for a in actions if isinstance(a, Say)), None)
        ahead = self._player.prepare(first) if first is not None else None
        if first is not None and ahead is not None:
            prepared[first.text], stream = ahead
            streams.append(stream)
        self.speculation = Speculation(text, fork, tuple(actions), prepared, tuple(streams), confidence, alternatives)

    # -- endpointing ----------------------------------------------------------------
    def _handle(self, decision: EndOfTurn | None) -> None:
        if decision is None:
            self._schedule_poll()
            return
        self._cancel_endpoint_timer()
        if decision.text and decision.text == self.transcripts.text:
            decision = replace(decision, alternatives=self.transcripts.alternatives)
        self.transcripts.consume()
        if self._metrics:
            self._metrics.endpoint_silence.labels(decision.reason).observe(max(0.0, decision.silence_s))
        self._on_end_of_turn(decision)

    def _schedule_poll(self) -> None:
        self._cancel_endpoint_timer()
        deadline = self.endpointer.next_deadline()
        if deadline is None or not self.listening:
            return
        delay = max(0.0, deadline - self._reactor.seconds())
        self._endpoint_timer = self._reactor.callLater(delay, self._poll)
        text = self.transcripts.text
        if (delay > AHEAD_OF_LONG_SILENCE_S and text and not self.caller_speaking
                and self.endpointer.words(text) is Completeness.UNFINISHED):
            # words left unfinished ("we can wrap this up by") have no reply worked out while
            # the caller may go on; if the silence lasts, the turn ends on them all the same
            self._ahead_timer = self._reactor.callLater(delay - AHEAD_OF_LONG_SILENCE_S, self._speculate_ahead)

    def _speculate_ahead(self) -> None:
        self._ahead_timer = None
        if self.listening and not self.caller_speaking:
            self._speculate(self.transcripts.text, self.transcripts.confidence, unfinished=True)

    def _poll(self) -> None:
        self._endpoint_timer = None
        if not self.listening:
            return
        self._handle(self.endpointer.poll(self._reactor.seconds()))

    def _cancel_endpoint_timer(self) -> None:
        timer, self._endpoint_timer = self._endpoint_timer, None
        cancel(timer)
        ahead, self._ahead_timer = self._ahead_timer, None
        cancel(ahead)

    # -- no input ---------------------------------------------------------------------
    def start_no_input(self, timeout_ms: int) -> None:
        self.cancel_no_input()
        self._no_input_grace_ms = 0
        self._no_input_timer = self._reactor.callLater(timeout_ms / 1000.0, self._no_input)

    def cancel_no_input(self) -> None:
        timer, self._no_input_timer = self._no_input_timer, None
        cancel(timer)

    def _no_input(self) -> None:
        self._no_input_timer = None
        if not self.listening:
            return
        voice_ms = (self._reactor.seconds() - self._last_voiced_at()) * 1000.0
        if voice_ms < NO_INPUT_VOICE_GRACE_MS and self._no_input_grace_ms < NO_INPUT_MAX_GRACE_MS:
            # The caller's voice may be starting: its speech start (which cancels this) comes once
            # the VAD has heard enough of it. A blip that never becomes speech delays this a little.
            self._no_input_grace_ms += NO_INPUT_VOICE_GRACE_MS
            self._no_input_timer = self._reactor.callLater(NO_INPUT_VOICE_GRACE_MS / 1000.0, self._no_input)
            return
        self._on_no_input()


#: how long before a long silence (``continuation_silence_ms``) ends the turn on words left
#: unfinished the reply to them is worked out: the dialogue's step and a prompt's synthesis take
#: 10-100 ms of a loaded machine, which the reply would otherwise wait at the turn's end
AHEAD_OF_LONG_SILENCE_S = 0.2

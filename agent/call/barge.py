"""Carrying out barge-in: a caller's voice over an interruptible prompt, from its onset to a verdict.

The media thread pauses the prompt at a voice's onset; :class:`BargeController`
starts a :class:`~agent.call.bargein.BargeIn` for it, feeds it the recogniser's
words, asks it for its verdict when it says to (a timer on the reactor) and
carries the verdict out: resume or play on over the prompt, pause it again, or
hand the interruption to the session. It also counts cut-ins (the caller going
on talking after the agent took the turn) and false interruptions, and keeps when and for how
long each voice held the prompt paused (:class:`PromptPause`, in the call record).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from agent.app.metrics import AgentMetrics
from agent.call.bargein import BargeIn, BargeInConfig, Verdict
from agent.call.completeness import HESITATIONS
from agent.call.endpointer import TranscriptAssembler, TranscriptState, words
from agent.call.pipeline import MediaPipeline
from agent.call.ports import Reactor, cancel
from media.playout import PlayoutBuffer

log = Logger(namespace="openclaw.session")


#: at most this many prompt pauses are kept for the call record (the count goes on)
MAX_PAUSES_KEPT = 100


@dataclass(frozen=True)
class PromptPause:
    """A stretch in which a caller's voice held the prompt paused: the prompt's hole."""

    began_at: float    # reactor seconds: when the playout paused
    ended_at: float    # ... when it played again, or when the prompt was stopped
    #: "resumed" (the voice was over and did not interrupt), "played_on" (an acknowledgement
    #: still being said: the prompt played on over it, ducked), "ducked" (still being judged after
    #: ``BargeInConfig.duck_after_ms``: the prompt played on, ducked), "interrupted" (the caller
    #: took the turn), "stopped" (the prompt ended otherwise: a key, the call's end)
    outcome: str
    heard: str = ""
    #: some of the prompt's words were still to come when the pause ended (False: only its
    #: closing silence was left, so the pause was no hole between its words)
    words_after: bool = True

    @property
    def ms(self) -> float:
        return max(0.0, self.ended_at - self.began_at) * 1000.0

    @property
    def hole_ms(self) -> float:
        """The silence the pause put between the prompt's words."""
        return self.ms if self.words_after else 0.0

    def as_record(self) -> dict[str, Any]:
        ms_part = f"{self.began_at % 1.0:.3f}"[1:]
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.began_at)) + ms_part + \
            time.strftime("%z", time.localtime(self.began_at))
        return {"at": stamp, "at_s": round(self.began_at, 3), "ms": round(self.ms),
                "hole_ms": round(self.hole_ms), "outcome": self.outcome, "heard": self.heard}


class BargeHooks(Protocol):
    """What the controller asks of the session."""

    def prompt_playing(self) -> bool:
        """Is a prompt (a Say) the current action?"""

    def caller_speaking(self) -> bool:
        """Does the VAD have the caller speaking?"""

    def is_request(self, text: str) -> bool:
        """Do *text*'s words make a request of the current question?"""

    def is_meant(self, text: str) -> bool:
        """Do they make one by meaning (``BargeInConfig.meaning_min_ms``)?"""

    def prompt_follows(self) -> bool:
        """Is another prompt next after the one playing (not listening, not the call's end)?"""

    def interrupt(self, barge: BargeIn) -> None:
        """The caller's voice takes the turn: stop the prompt and listen."""


class BargeController:
    """The barge-in in progress (at most one), its timer, and what it lets the prompt do."""

    def __init__(self, reactor: Reactor, media: MediaPipeline, playout: PlayoutBuffer,
                 transcripts: TranscriptAssembler, config: BargeInConfig, hooks: BargeHooks,
                 metrics: AgentMetrics | None, log_fields: dict[str, str]) -> None:
        self._reactor = reactor
        self._media = media
        self._playout = playout
        self._transcripts = transcripts
        self._config = config
        self._hooks = hooks
        self._metrics = metrics
        self._log_fields = log_fields
        #: the barge-in being decided
        self.current: BargeIn | None = None
        #: the last barge-in that let the prompt resume (a voice back soon continues it), with the
        #: transcript as it was before its words were set aside
        self._resumed: tuple[BargeIn, TranscriptState] | None = None
        self._timer: IDelayedCall | None = None
        #: brings a prompt ducked after a voice of one word or none back to its level
        self._unduck_timer: IDelayedCall | None = None
        self.false_interruptions = 0
        self.cut_ins = 0
        self._turn_taken = False
        self._cut_in_noted = False
        #: a voice starting before this is the caller finishing the turn the agent has just taken
        self._tail_until = 0.0
        #: the prompt's pauses for callers' voices (the first MAX_PAUSES_KEPT), and the open one's start
        self.pauses: list[PromptPause] = []
        self._paused_since: float | None = None

    # -- inputs from the session ---------------------------------------------------
    def arm(self, armed: bool) -> None:
        """An interruptible prompt with a Listen after it is (or is no longer) playing."""
        self._media.barge_armed = armed
        if self.current is not None:  # a voice still being judged: the prompt now playing may be the last
            self._playout.hold_ducked_end(self._hold_ducked_end())

    def _hold_ducked_end(self) -> bool:
        """Does a prompt that runs out while ducked wait at its end for the verdict? Not when
        another prompt follows: between two of them the wait would be a hole in what the agent
        says ("Your balance is ... | Is there anything else?" held apart for an "uh huh, okay"
        until its final words), and the next one plays on, ducked, instead. The last prompt
        before listening waits, so that the voice is judged before it can be taken for a turn."""
        return not self._hooks.prompt_follows()

    def _duck(self) -> None:
        self._playout.duck(hold_at_end=self._hold_ducked_end())

    def on_turn_taken(self, speech_end_at: float) -> None:
        """The agent took the caller's turn, whose last voice ended at *speech_end_at*."""
        self._turn_taken = True
        self._cut_in_noted = False
        self._tail_until = speech_end_at + self._config.tail_ms / 1000.0
        if self._unduck_timer is not None:  # the reply is at its own level
            self._cancel_unduck()
            self._playout.unduck()
        self._media.play_on_until = max(self._media.play_on_until, self._tail_until)

    def on_words(self, text: str, final: bool = False) -> bool:
        """The turn's words so far; True when a barge-in in progress took them."""
        if self.current is None:
            return False
        self.current.on_words(text, final=final, at=self._reactor.seconds(),
                              confidence=self._transcripts.confidence if final else None)
        self.check()
        return self.current is not None

    def on_voice_end(self) -> None:
        """The VAD reported the end of the caller's voice."""
        if self.current is not None:
            self._schedule_check(self._config.resume_after_ms / 1000.0)

    def on_voice_onset(self, started_at: float, paused: bool) -> None:
        """A voice began (clock thread has already paused an interruptible prompt if *paused*)."""
        if not paused:
            if not self._hooks.prompt_playing():
                return
            if self.current is None and self._rejoin(started_at, paused=False):
                return
            if started_at < self._tail_until:
                self._on_turn_tail(started_at)
            return
        if not self._hooks.prompt_playing():
            self._playout.resume()
            return
        self._pause_began(self._playout.paused_at)
        if self.current is not None:
            # The same voice, on again after a gap or after the prompt played over it.
            self.current.on_voice_again()
            self.check()
            return
        if self._rejoin(started_at, paused=True):
            return
        self.current = BargeIn(started_at, self._hooks.is_request, self._config, is_meant=self._hooks.is_meant)
        if self._metrics:
            self._metrics.barge_in_decision.observe(max(0.0, self._reactor.seconds() - started_at))
        log.info("call {call_id} caller's voice: prompt paused", **self._log_fields)
        self.check()

    def note_cut_in(self, extra: str = "") -> None:
        """Count, once per turn taken, the caller talking on after the agent took the turn."""
        if self._cut_in_noted or not self._turn_taken:
            return
        self._cut_in_noted = True
        self.cut_ins += 1
        if self._metrics:
            self._metrics.cut_ins.inc()
        log.info("call {call_id} cut-in: caller went on talking{extra} after the turn was taken",
                 extra=f" ({extra!r})" if extra else "", **self._log_fields)

    def drop(self) -> None:
        """Forget the barge-in in progress (the prompt it was about has stopped)."""
        self._pause_ended("stopped")
        self._cancel_unduck()
        if self.current is not None:
            self.current = None
            self._cancel_check()

    def close(self) -> None:
        self._media.barge_armed = False
        self._cancel_check()
        self._cancel_unduck()
        self._pause_ended("stopped")

    def _pause_began(self, at: float) -> None:
        if self._paused_since is None:
            self._paused_since = at

    def _pause_ended(self, outcome: str) -> None:
        began, self._paused_since = self._paused_since, None
        if began is None:
            return
        heard = self.current.text if self.current is not None else ""
        pause = PromptPause(began, max(began, self._reactor.seconds()), outcome, heard,
                            words_after=self._playout.words_left())
        if self._metrics:
            self._metrics.prompt_pause.observe(pause.hole_ms / 1000.0)
        if len(self.pauses) < MAX_PAUSES_KEPT:
            self.pauses.append(pause)

    # -- deciding ------------------------------------------------------------------
    def _rejoin(self, started_at: float, paused: bool) -> bool:
        """A voice back soon after a barge-in let the prompt resume continues that barge-in: a
        pause inside one interruption, judged whole (*paused*: the media thread paused the
        prompt at its onset); or the rest of an acknowledgement whose start let the prompt
        resume, which it plays on over (not *paused*)."""
        recent = self._resumed
        if recent is None:
            return False
        if not paused and not (recent[0].resumed_on_onset and self._media.barge_armed):
            return False  # a voice the prompt was not paused for continues only an acknowledgement
        self._resumed = None
        if not recent[0].rejoins(started_at):
            return False
        barge, words = recent
        self.current = barge
        counted = not barge.tail  # a tail's end was not counted as a false interruption
        barge.revive()
        # Its words are this voice's again: the recogniser is still in the same utterance and
        # may revise them ("oh" becoming "ok"), which set aside would leave the barge-in with
        # no words at all.
        self._transcripts.restore(words)
        barge.on_words(self._transcripts.text, at=self._reactor.seconds())
        self.false_interruptions -= counted
        if barge.talking_over:
            if not paused:  # still being judged: ducked, and held at its end (check() ducks a paused one)
                self._duck()
            log.info("call {call_id} caller's {text!r} goes on: prompt plays on, ducked", text=barge.text,
                     **self._log_fields)
        else:
            log.info("call {call_id} caller's voice is back: prompt paused", **self._log_fields)
        self.check()
        return True

    def _on_turn_tail(self, started_at: float) -> None:
        """The caller went on talking just after the agent took the turn and began its reply."""
        self.note_cut_in()
        if not self._media.barge_armed or self.current is not None:
            return
        self.current = BargeIn(started_at, self._hooks.is_request, self._config, tail=True,
                               is_meant=self._hooks.is_meant)
        self.current.on_words(self._transcripts.text, at=self._reactor.seconds())
        log.info("call {call_id} caller went on talking as the reply began: reply plays on", **self._log_fields)
        self.check()

    def _schedule_check(self, delay_s: float) -> None:
        self._cancel_check()
        self._timer = self._reactor.callLater(max(0.0, delay_s), self.check)

    def _cancel_check(self) -> None:
        cancel(self._timer)
        self._timer = None

    def _cancel_unduck(self) -> None:
        cancel(self._unduck_timer)
        self._unduck_timer = None

    def _unduck_later(self) -> None:
        self._unduck_timer = None
        if self.current is None:  # else the voice came back: its verdict sets the level
            self._playout.unduck()

    def check(self) -> None:
        """Ask the barge-in in progress for its verdict and carry it out."""
        self._cancel_check()
        barge = self.current
        if barge is None:
            return
        media = self._media
        now = self._reactor.seconds()
        decision = barge.decide(now, media.last_voiced_at, self._hooks.caller_speaking())
        if decision.verdict is Verdict.INTERRUPT:
            self._commit(decision.why)
            return
        if decision.verdict is Verdict.RESUME:
            self._resume(barge, now)
            return
        if decision.verdict is Verdict.PAUSE:
            self._playout.pause()
            self._pause_began(now)
            log.info("call {call_id} caller's voice ({text!r}) goes on: prompt paused again",
                     text=barge.text, **self._log_fields)
        if decision.verdict is Verdict.TALK_OVER and self._playout.paused:
            # Ducked while it is said: it is still watched, and a voice that began as an
            # acknowledgement ("oh, is there ...") may be an interruption after all, which the
            # caller must not hear the prompt at its own level over. Back to its level at RESUME.
            self._pause_ended("played_on")
            self._duck()
            log.info("call {call_id} caller's {text!r} is an acknowledgement: prompt plays on, ducked "
                     "while it is said", text=barge.text, **self._log_fields)
        check_in_s = decision.check_in_s
        if decision.verdict in (Verdict.WAIT, Verdict.PAUSE) and self._paused_since is not None \
                and self._playout.paused:
            # Still undecided (also after pausing again for a voice the prompt had played on
            # over): a pause much longer would be a hole in the prompt; it plays on underneath
            # the voice, ducked, until the verdict.
            duck_in_s = self._paused_since + self._config.duck_after_ms / 1000.0 - now
            if duck_in_s <= 0.0005:
                self._pause_ended("ducked")
                self._duck()
                log.info("call {call_id} caller's voice ({text!r}) still being judged: prompt plays on, ducked",
                         text=barge.text, **self._log_fields)
            elif check_in_s is None or duck_in_s < check_in_s:
                check_in_s = duck_in_s
        if check_in_s is not None:
            self._schedule_check(check_in_s)

    def _resume(self, barge: BargeIn, now: float) -> None:
        media = self._media
        self._pause_ended("resumed")
        self.current = None
        self._resumed = (barge, self._transcripts.snapshot())
        media.rearm_onset()
        spoke_ms = barge.spoke_ms(media.last_voiced_at)
        self._transcripts.set_aside(now)  # its words are not part of the caller's next turn
        if barge.resumed_on_onset:
            # The rest of the acknowledgement, back within rejoin_ms, does not pause the prompt.
            media.play_on_until = max(media.play_on_until, now + barge.config.rejoin_ms / 1000.0)
        heard = words(barge.text)
        if (len(heard) <= 1 or all(w in HESITATIONS for w in heard)) and not barge.tail \
                and barge.config.word_duck_ms > 0:
            # One word or none, or only hesitations ("oh", "um", "yeah", "uh oh", a first sound):
            # as often the start of a sentence after a breath as all there was; the prompt plays
            # on ducked until the voice has not come back for word_duck_ms, so a caller going on
            # is not met by it at its own level.
            self._playout.duck(hold_at_end=False)
            self._cancel_unduck()
            self._unduck_timer = self._reactor.callLater(barge.config.word_duck_ms / 1000.0, self._unduck_later)
        else:
            self._playout.unduck()
        if barge.tail:
            # Never paused for: the end of the caller's own turn, counted as a cut-in.
            log.info("call {call_id} caller's {ms:.0f} ms ({text!r}) after the turn was taken did not "
                     "interrupt; reply played on", ms=spoke_ms, text=barge.text, **self._log_fields)
            return
        self.false_interruptions += 1
        if self._metrics:
            self._metrics.barge_in_outcomes.labels("resumed").inc()
        log.info("call {call_id} caller's {ms:.0f} ms of voice ({text!r}) did not interrupt; prompt "
                 "{how}", ms=spoke_ms, text=barge.text, how="played on" if barge.talking_over else "resumed",
                 **self._log_fields)

    def _commit(self, why: str) -> None:
        self._pause_ended("interrupted")
        barge, self.current = self.current, None
        self._cancel_check()
        if barge is None:
            return
        if self._metrics:
            self._metrics.barge_in_outcomes.labels("interrupted").inc()
        log.info("call {call_id} barge-in confirmed ({why})", why=why, **self._log_fields)
        self._hooks.interrupt(barge)
        # The prompt was flushed (which ends a duck), or it had ended and the voice is the
        # caller's turn: whatever the agent says next is at its own level.
        self._playout.unduck()

"""TurnTaker on a twisted Clock: when the caller's turn is taken, and the reply prepared ahead."""
from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from agent.call.endpointer import EndOfTurn, EndpointerConfig, TranscriptAssembler
from agent.call.turns import TurnTaker
from agent.dialplan.engine import Listen, Say

REPROMPT = Say("Sorry, I can help with balances and opening hours.", "kal16", True, cache_key=None)


class FakeStream:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakePlayer:
    """Synthesis ahead: records what it was asked to prepare."""

    def __init__(self) -> None:
        self.streams: list[tuple[str, FakeStream]] = []

    def prepare(self, say: Say) -> tuple[list[bytes], FakeStream]:
        stream = FakeStream()
        self.streams.append((say.text, stream))
        return [b"audio"], stream


class FakeDialogue:
    """Answers anything with the reprompt; forks are new fakes that remember what they heard."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, float | None]] = []
        #: the other readings each transcript came with
        self.readings: list[tuple[str, ...]] = []

    def fork(self) -> FakeDialogue:
        return FakeDialogue()

    def on_transcript(self, text: str, confidence: float | None = None, alternatives: tuple[str, ...] = ()) -> list:
        self.heard.append((text, confidence))
        self.readings.append(tuple(alternatives))
        return [REPROMPT, Listen(5000)]


class Harness:
    def __init__(self) -> None:
        self.clock = Clock()
        self.voiced_at = 0.0
        self.player = FakePlayer()
        self.decisions: list[EndOfTurn] = []
        self.transcripts = TranscriptAssembler()
        config = EndpointerConfig(complete_silence_ms=30, finished_silence_ms=30, falling_silence_ms=300,
                                  incomplete_silence_ms=800, continuation_silence_ms=1000)
        self.turns = TurnTaker(self.clock, self.transcripts, config, lambda text: False, lambda: self.voiced_at,
                               FakeDialogue, self.player, None, on_end_of_turn=self.decisions.append,
                               on_no_input=lambda: None)
        self.turns.start_listening(Listen(5000), caller_turn_began=False)

    def speak(self, ms: int) -> None:
        """The caller's voice from now for *ms* (the VAD's start, voiced frames), then quiet."""
        self.turns.on_speech_start(self.clock.seconds())
        self.clock.advance(ms / 1000.0)
        self.voiced_at = self.clock.seconds()

    def words(self, text: str) -> None:
        self.turns.on_words(self.transcripts.on_interim(text))

    def quiet(self) -> None:
        """The VAD reports the end 30 ms after the last voiced frame."""
        self.clock.advance(0.03)
        self.turns.on_speech_end(self.voiced_at)


def test_an_out_of_scope_finished_sentence_is_answered_after_the_short_silence_from_a_reply_prepared_ahead():
    """ "my card was stolen yesterday" matches no intent, but it is a finished sentence: its reply
    (the reprompt) is prepared while the caller is still speaking and the turn ends 30 ms into
    the silence, on the clock, with that prepared reply."""
    h = Harness()
    h.speak(1500)
    h.words("my card was stolen yesterday")
    assert h.turns.speculation is not None and h.player.streams[0][0] == REPROMPT.text
    h.quiet()
    assert len(h.decisions) == 1 and h.decisions[0].reason == "finished"
    assert h.decisions[0].silence_s == pytest.approx(0.03)
    spec = h.turns.take_speculation()
    assert spec is not None and spec.answers(h.decisions[0])


def test_undecided_words_get_a_reply_prepared_once_the_caller_is_quiet_and_dropped_when_they_go_on():
    """ "my card" prepares nothing while spoken; once quiet its reply is prepared during the
    longer silence; when the caller goes on ("was stolen") that reply is cancelled before any
    audio went out, and the turn ends on the whole sentence."""
    h = Harness()
    h.speak(600)
    h.words("my card")
    assert h.turns.speculation is None
    h.quiet()
    first = h.turns.speculation
    assert first is not None and first.text == "my card" and not h.decisions
    h.clock.advance(0.4)  # a 430 ms pause: no decision
    assert not h.decisions
    h.speak(700)
    h.words("my card was stolen")
    assert h.player.streams[0][1].cancelled
    h.quiet()
    assert [d.text for d in h.decisions] == ["my card was stolen"]
    assert h.turns.take_speculation().text == "my card was stolen"


def test_an_unfinished_phrase_is_not_cut_during_a_700_ms_pause_and_prepares_nothing():
    """ "I would like to" then 700 ms of silence: no decision and no reply prepared; the turn
    ends after the rest of the sentence."""
    h = Harness()
    h.speak(900)
    h.words("i would like to")
    h.quiet()
    h.clock.advance(0.67)
    assert not h.decisions and h.turns.speculation is None and not h.player.streams
    h.speak(900)
    h.words("i would like to check how much i have")
    h.quiet()
    assert len(h.decisions) == 1 and h.decisions[0].text == "i would like to check how much i have"


def test_an_unfinished_phrase_ends_after_the_continuation_silence():
    """A caller who stops for good after "I was wondering if" is answered after the
    continuation silence (1 s here), not left waiting, with a reply worked out 200 ms before it
    (none before that: the caller may still go on)."""
    h = Harness()
    h.speak(900)
    h.words("i was wondering if")
    h.quiet()
    h.clock.advance(0.76)
    assert h.turns.speculation is None and not h.player.streams
    h.clock.advance(0.02)
    spec = h.turns.speculation
    assert spec is not None and spec.text == "i was wondering if" and h.player.streams[0][0] == REPROMPT.text
    h.clock.advance(0.18)
    assert not h.decisions
    h.clock.advance(0.01)
    assert len(h.decisions) == 1 and h.decisions[0].reason == "continuation"
    assert h.turns.take_speculation() is spec and spec.answers(h.decisions[0])


def test_a_reply_worked_out_ahead_of_the_long_silence_is_dropped_when_the_caller_goes_on():
    """Words left unfinished get their reply 200 ms before the long silence would end the
    turn; the caller going on after all cancels it, and the turn ends on the whole sentence."""
    h = Harness()
    h.speak(900)
    h.words("i was wondering if")
    h.quiet()
    h.clock.advance(0.85)
    assert h.turns.speculation is not None
    h.speak(800)
    h.words("i was wondering if you could tell me my balance")
    assert h.player.streams[0][1].cancelled
    h.quiet()
    assert [d.text for d in h.decisions] == ["i was wondering if you could tell me my balance"]


def test_the_turn_and_the_reply_prepared_ahead_carry_the_other_readings_they_were_decided_on():
    """The decision carries the recogniser's other readings of its words, the reply prepared
    ahead was worked out with them, and a reading that changes makes a new one."""
    h = Harness()
    h.speak(1500)
    h.transcripts.on_alternatives(("my card was stolen today",))
    h.words("my card was stolen yesterday")
    first = h.turns.speculation
    assert first is not None and first.alternatives == ("my card was stolen today",)
    assert first.dialogue.readings == [("my card was stolen today",)]
    h.transcripts.on_alternatives(("my car was stolen yesterday",))
    h.words("my card was stolen yesterday")
    second = h.turns.speculation
    assert second is not first and second.alternatives == ("my car was stolen yesterday",)
    h.quiet()
    assert h.decisions[0].alternatives == ("my car was stolen yesterday",)
    spec = h.turns.take_speculation()
    assert spec is second and spec.answers(h.decisions[0])
    assert not first.answers(h.decisions[0])

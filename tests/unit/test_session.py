"""CallSession: the per-call pipeline driven with a fake clock, fake speech and fake SIP.

The reactor is twisted.internet.task.Clock (callFromThread runs at once); the
media clock thread is simulated by calling push_frame / pull_frame directly.
"""
from __future__ import annotations

import math
import os
import struct
import textwrap
import time
from typing import Callable

import pytest

from agent.dialplan.engine import DialogueSession
from agent.dialplan.model import load_dialplan
from agent.call.endpointer import EndpointerConfig
from agent.call.session import CallSession, SessionSettings
from media.vad import VadConfig
from tests.fakes import FakeReactor
from tests.unit.test_dialogue_steps import one_ask

FRAME = 320  # 10 ms at 16 kHz
DEFAULT = os.path.join(os.path.dirname(__file__), "..", "..", "dialplans", "default.yaml")


def tone_frame(amplitude: int = 8000) -> bytes:
    return struct.pack("<160h", *(int(amplitude * math.sin(2 * math.pi * 300 * i / 16000)) for i in range(160)))




class FakeStream:
    def __init__(self, **callbacks):
        self.callbacks = callbacks
        self.audio = []
        self.closed = False

    def push_audio(self, pcm, level_dbfs=None):
        self.audio.append(pcm)

    def close(self):
        self.closed = True


class FakeSynthesis:
    def __init__(self, text, on_audio, on_done, on_error):
        self.text, self.on_audio, self.on_done, self.on_error = text, on_audio, on_done, on_error
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class FakeSpeech:
    def __init__(self):
        self.streams: list[FakeStream] = []
        self.syntheses: list[FakeSynthesis] = []

    def open_recognition(self, options, *, on_interim, on_final, on_error, on_alternatives=None):
        s = FakeStream(on_interim=on_interim, on_final=on_final, on_error=on_error, on_alternatives=on_alternatives)
        s.phrases = options.phrases
        s.max_alternatives = options.max_alternatives
        s.punctuation = options.punctuation
        self.streams.append(s)
        return s

    def synthesize_stream(self, text, *, sample_rate_hz, on_audio, on_done, on_error, voice=None):
        s = FakeSynthesis(text, on_audio, on_done, on_error)
        self.syntheses.append(s)
        return s


class FakeControl:
    def __init__(self, transfer_ok=True):
        self.hung_up = 0
        self.hangup_reasons = []
        self.transfers = []
        self.transfer_ok = transfer_ok

    def hangup(self, why=""):
        self.hung_up += 1
        self.hangup_reasons.append(why)

    def transfer(self, uri):
        self.transfers.append(uri)
        return self.transfer_ok


class Prompts:
    """Every static prompt is "cached" as one second of a marker byte derived from its text."""

    def __init__(self):
        self.spoken = {}

    def get(self, text, voice):
        if "{{" in text:
            return None
        return bytes([1 + len(text) % 200]) * (FRAME * 100)


def gave_way(h: "Harness") -> bool:
    """The prompt has given way to the caller's voice: paused, or playing on ducked once the
    voice has been judged for longer than a pause may last."""
    return h.session.playout.paused or h.session.playout.ducked


class Harness:
    def __init__(self, transfer_ok=True, phrase_hints=False, dialplan=DEFAULT):
        self.reactor = FakeReactor()
        self.speech = FakeSpeech()
        self.control = FakeControl(transfer_ok)
        self.reactor.advance(100.0)
        dialplan = load_dialplan(dialplan)
        variables = {"caller": "5551234", "called": "1000", "call_id": "c1", "region": "local",
                     "config.transfer_uri": "sip:desk@127.0.0.1:5070"}
        self.dialogue = DialogueSession(dialplan, "main", variables)
        self.ended = []
        self.session = CallSession("c1", self.dialogue, self.speech, self.control, self.reactor,
                                   prompts=Prompts(), settings=SessionSettings(vad=VadConfig(start_ms=50, end_ms=30),
                                                            phrase_hints=phrase_hints),
                                   on_ended=self.ended.append)
        self.heard: list[str] = []

    def tick(self, frames: int = 1, caller: bytes | None = None) -> None:
        """Advance media time by *frames* 10 ms frames in both directions: each frame is moved
        at the end of its 10 ms, then the reactor runs what fell due by then."""
        for _ in range(frames):
            self.reactor.rightNow += 0.01
            self.session.media.push_frame(caller if caller is not None else bytes(FRAME))
            self.session.playout.pull_frame(FRAME)
            self.reactor.advance(0)

    def play_out(self, max_frames: int = 2000) -> None:
        """Run until the agent has nothing queued."""
        for _ in range(max_frames):
            if not self.session.playout.busy:
                return
            self.tick()
        raise AssertionError("playout never drained")

    def asr_final(self, text: str) -> None:
        self.speech.streams[-1].callbacks["on_final"](text, 0.9)

    def asr_interim(self, text: str) -> None:
        self.speech.streams[-1].callbacks["on_interim"](text)

    def caller_says(self, text: str, frames: int = 40, final: bool = True) -> None:
        """The caller speaks for *frames* x 10 ms; the recogniser's interim then final follow."""
        self.tick(frames // 2, caller=tone_frame())
        self.asr_interim(text)
        self.tick(frames - frames // 2, caller=tone_frame())
        self.tick(30)
        if final:
            self.asr_final(text)

    def said(self) -> list[str]:
        return [p.text for t in self.session.turns for p in t.agent_prompts]


def test_recognition_gets_the_dialplans_phrases_only_when_hints_are_on():
    """speech.phrase_hints: the stream is opened with the flow's expected phrases, else none."""
    for enabled in (False, True):
        h = Harness(phrase_hints=enabled)
        h.session.start()
        phrases = h.speech.streams[0].phrases
        if enabled:
            assert "check my balance" in phrases and "goodbye" in phrases
        else:
            assert phrases == ()


def test_greeting_then_menu_then_listening_with_no_input_reprompt():
    """The greeting and menu play back to back; silence for the no-input timeout gives a reprompt."""
    h = Harness()
    h.session.start()
    assert h.speech.streams, "recognition opens when the call starts"
    h.play_out()
    assert h.said()[0].startswith("Thank you for calling")
    assert h.said()[1].startswith("How can I help you")
    assert h.session.turn_taker.listening
    h.tick(499)
    assert len(h.said()) == 2
    h.tick(2)
    assert h.said()[-1].startswith("I'm sorry, I did not hear you")


def test_no_input_waits_for_a_voice_that_began_just_before_it_and_the_request_is_answered():
    """The caller begins "check my balance" 30 ms before the no-input timeout, too soon for the
    VAD to call it speech (it needs 50 ms here): the reprompt does not start over them; their
    words are the turn. A voice that stops short of speech only puts the reprompt off a little."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.tick(497)
    h.caller_says("check my balance")
    h.tick(3)
    assert not any(t.startswith("I'm sorry, I did not hear you") for t in h.said()), h.said()
    assert any(t.startswith("Your account balance") for t in h.said()), h.said()

    h = Harness()
    h.session.start()
    h.play_out()
    h.tick(497)
    h.tick(3, caller=tone_frame())             # 30 ms: a click, never speech
    h.tick(14)
    assert not any(t.startswith("I'm sorry, I did not hear you") for t in h.said())
    h.tick(3)
    assert h.said()[-1].startswith("I'm sorry, I did not hear you")


def test_spoken_request_gets_the_balance_and_latency_is_measured():
    """A final transcript while listening runs the balance step; latency runs from the last voiced frame."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.tick(30, caller=tone_frame())
    last_voiced = h.reactor.seconds()
    h.tick(25)
    h.asr_final("check my balance")
    h.tick(3)
    assert any(t.startswith("Your account balance") for t in h.said())
    turn = h.session.turns[-1]
    assert turn.caller_text == "check my balance"
    assert turn.latency_ms is not None and 250.0 <= turn.latency_ms <= 300.0


def noise_frame(seed: int) -> bytes:
    import random

    rng = random.Random(seed)
    return struct.pack("<160h", *(int(rng.gauss(0, 4000)) for _ in range(160)))


def test_caller_voice_during_a_prompt_pauses_it_at_once_and_interrupts_it():
    """Barge-in: 20 ms of voice pauses the prompt; an interrupting word ("wait") makes it an
    interruption at once."""
    h = Harness()
    h.session.start()
    h.tick(40)  # part of the greeting
    h.tick(4, caller=tone_frame())
    assert h.session.playout.paused
    assert h.session.playout.pull_frame(FRAME) == bytes(FRAME)
    assert h.session.barge_ins == 0
    h.tick(20, caller=tone_frame())
    assert h.session.barge_ins == 0
    h.asr_interim("wait i need")
    assert h.session.barge_ins == 1
    assert not h.session.playout.busy
    assert h.session.turn_taker.listening
    greeting = h.session.turns[0].agent_prompts[0]
    assert greeting.interrupted and 0 < greeting.played_ms < greeting.total_ms


def test_a_backchannel_pauses_the_prompt_which_then_resumes_where_it_stopped():
    """An acknowledgement of 250 ms the recogniser turns into other short words does not stop
    the prompt: it resumes once the quiet after it is longer than the stop before a consonant."""
    h = Harness()
    h.session.start()
    h.tick(40)
    played_before = h.session.playout.frames_pulled
    h.tick(10, caller=tone_frame())
    h.asr_interim("and they get it")
    h.tick(15, caller=tone_frame())
    assert gave_way(h)
    h.tick(7)
    assert gave_way(h)  # other words: maybe the stop before a consonant
    h.tick(8)
    assert not gave_way(h)
    assert h.session.barge_ins == 0 and h.session.false_interruptions == 1
    h.play_out()
    greeting = h.session.turns[0].agent_prompts[0]
    assert not greeting.interrupted and greeting.played_ms == greeting.total_ms
    assert h.said()[1].startswith("How can I help you")
    assert played_before > 0


def test_a_long_voice_without_words_interrupts_after_1200_ms_and_is_then_asked_again():
    """Humming with no words: the prompt is interrupted after 1.2 s; when the turn ends with no
    words the interrupted prompt is said again instead of a no-match. (The greeting ends under the
    voice, ducked, and hands over to the menu, which the voice interrupts: the menu is said again.)"""
    h = Harness()
    h.session.start()
    h.tick(40)
    h.tick(100, caller=tone_frame())
    assert h.session.barge_ins == 0 and gave_way(h)
    h.tick(25, caller=tone_frame())
    assert h.session.barge_ins == 1
    h.tick(100)  # 800 ms of silence ends the empty turn
    h.tick(100)
    said = h.said()
    assert said[0].startswith("Thank you") and said[1].startswith("How can I help you") and said[2] == said[1], said
    assert not any(t.startswith("I'm sorry") for t in said)


def test_a_noise_burst_does_not_pause_the_prompt():
    """100 ms of loud noise (no pitch) leaves the prompt playing."""
    h = Harness()
    h.session.start()
    h.tick(40)
    for i in range(10):
        h.tick(1, caller=noise_frame(i))
        assert not h.session.playout.paused
    h.tick(30)
    assert h.session.barge_ins == 0 and h.session.false_interruptions == 0


def sibilant_frame(seed: int) -> bytes:
    """10 ms of noise with its energy at 2.6-3.6 kHz: the spectrum of an "s" or "sh"."""
    import random

    rng = random.Random(seed)
    parts = [(f, rng.uniform(0, 2 * math.pi)) for f in range(2600, 3601, 100)]
    return struct.pack("<160h", *(int(sum(1500 * math.sin(2 * math.pi * f * i / 16000 + ph) for f, ph in parts))
                                  for i in range(160)))


def test_a_sibilant_pauses_the_prompt_before_any_vowel():
    """ "ch" of "check": 20 ms of sound with its energy above 2.5 kHz pauses the prompt, as a
    vowel would; loud white noise (the noise burst test) does not."""
    h = Harness()
    h.session.start()
    h.tick(40)
    h.tick(1, caller=sibilant_frame(1))
    assert not h.session.playout.paused
    h.tick(1, caller=sibilant_frame(2))
    assert h.session.playout.paused


def test_periodic_frames_scattered_in_a_noise_do_not_pause_the_prompt_two_in_a_row_do():
    """The onset needs periodic frames in a row: a loud noise that looks periodic in one frame
    out of two leaves the prompt playing (counted in total, 30 ms of it would have paused it);
    two periodic frames in a row pause it."""

    class ScriptedMeter:
        sibilance_db = -math.inf

        def __init__(self, values):
            self.values = list(values)

        def feed(self, pcm):
            return self.values.pop(0)

    h = Harness()
    h.session.start()
    h.tick(40)
    h.session.media._meter = ScriptedMeter([0.9, 0.1] * 4 + [0.9, 0.9])
    for _ in range(8):
        h.tick(1, caller=noise_frame(1))
        assert not h.session.playout.paused
    h.tick(1, caller=noise_frame(2))
    assert not h.session.playout.paused
    h.tick(1, caller=noise_frame(3))
    assert h.session.playout.paused


def test_a_request_over_a_prompt_interrupts_once_the_voice_outlasts_an_acknowledgement():
    """A complete request ("goodbye") heard early keeps the prompt paused and takes the turn as
    soon as the voice goes on for longer than an acknowledgement would (700 ms)."""
    h = Harness()
    h.session.start()
    h.tick(120)  # into the menu prompt
    h.tick(10, caller=tone_frame())
    h.asr_interim("goodbye")
    assert h.session.barge_ins == 0 and gave_way(h)
    h.tick(50, caller=tone_frame())
    assert h.session.barge_ins == 0 and gave_way(h)
    h.tick(15, caller=tone_frame())
    assert h.session.barge_ins == 1
    h.tick(10)
    assert any(t.startswith("Thank you for calling OpenClaw Bank. Goodbye") for t in h.said())


def test_a_short_voice_heard_as_a_request_resumes_the_prompt():
    """An "mm-hmm" of 450 ms that the recogniser hears as "an agent" is not a request to transfer:
    the prompt resumes and the call stays where it was."""
    h = Harness()
    h.session.start()
    h.tick(120)
    h.tick(45, caller=tone_frame())
    h.asr_interim("an agent")
    h.tick(20)
    assert gave_way(h)  # 200 ms of quiet may be a pause inside a sentence
    h.tick(15)
    assert h.session.barge_ins == 0 and h.session.false_interruptions == 1
    assert not gave_way(h)
    h.play_out()
    assert not any("transfer" in t.lower() for t in h.said())


def _said_over_the_menu(h: "Harness", text: str, voice: int) -> int:
    """*text* said over the menu prompt for *voice* x 10 ms, its final words 100 ms after: the
    prompt gives way until they are in, then the voice takes the turn. Returns how many prompts
    had been said before."""
    h.session.start()
    h.tick(120)  # into the menu prompt
    said_before = len(h.said())
    h.tick(10, caller=tone_frame())
    h.asr_interim(text)
    h.tick(voice - 10, caller=tone_frame())
    h.tick(10)
    assert h.session.barge_ins == 0 and gave_way(h)  # waiting for the final words
    h.asr_final(text)
    assert h.session.barge_ins == 1 and h.session.false_interruptions == 0
    h.tick(100)
    assert h.session.turns[0].agent_prompts[-1].interrupted
    return said_before


def test_a_sentence_over_a_prompt_that_is_no_request_is_heard_not_lost():
    """ "My card got swallowed" (800 ms) heard as "my card got swallowed saying": no request of the
    menu and shorter than interruption_min_ms. Once its final words are in, it takes the turn (the
    prompt resuming over it would lose the caller's words) and is answered."""
    h = Harness()
    said_before = _said_over_the_menu(h, "my card got swallowed saying", voice=80)
    assert len(h.said()) == said_before + 1 and h.said()[-1].startswith("I'm sorry")  # answered


def test_a_short_goodbye_by_meaning_over_a_prompt_is_heard_not_lost():
    """ "so long" (500 ms) over the menu: too short for the sentence rule and no example's words,
    but the menu understands it by meaning (a goodbye). Once its final words are in, it takes the
    turn, and the dialogue asks before ending the call."""
    h = Harness()
    _said_over_the_menu(h, "so long", voice=50)
    assert h.said()[-1].startswith("Do you want to end the call")
    assert not h.ended and not h.control.hung_up


def test_an_acknowledgement_recognised_while_it_is_said_lets_the_prompt_play_on_at_once():
    """ "okay" recognised 100 ms into the voice and still heard 60 ms later: the prompt plays
    again, ducked, while the caller is still saying it, and carries on to its end. A voice of
    one word may be the start of a sentence after a breath: the prompt is back at its own level
    once the voice has stayed away for 600 ms (word_duck_ms)."""
    h = Harness()
    h.session.start()
    h.tick(40)
    h.tick(10, caller=tone_frame())
    assert h.session.playout.paused
    h.asr_interim("okay")
    assert h.session.playout.paused  # a first guess could still change
    h.tick(7, caller=tone_frame())
    assert not h.session.playout.paused and h.session.playout.ducked
    before = h.session.playout.frames_pulled
    h.tick(20, caller=tone_frame())
    assert h.session.playout.frames_pulled > before  # audio went out over the caller's voice
    h.tick(20)
    assert h.session.barge_ins == 0 and h.session.false_interruptions == 1
    assert h.session.playout.ducked                  # over 110-140 ms ago
    h.tick(40)
    assert h.session.playout.ducked                  # 510-540 ms ago
    h.tick(15)
    assert not h.session.playout.ducked              # and it did not come back
    h.play_out()
    greeting = h.session.turns[0].agent_prompts[0]
    assert not greeting.interrupted and greeting.played_ms == greeting.total_ms


def test_a_voice_that_began_as_an_acknowledgement_never_has_the_prompt_at_its_level_over_it():
    """ "oh, | wait": "oh" lets the prompt play on, ducked while it is said and after it (one word),
    and the voice back 150 ms later stops the prompt; at no point between the onset and the stop
    does the caller hear the prompt at its own level. After a voice of two acknowledging words
    ("uh huh") the prompt is back at its level as soon as the voice is over."""
    h = _saying_over_the_greeting("oh")
    pl = h.session.playout
    tick, quiet = _ticking_quietly(h)

    tick(7, voiced=True)
    tick(15, voiced=False)
    assert h.session.false_interruptions == 1 and h.session.barge_ins == 0  # "oh" did not interrupt
    tick(6, voiced=True)                     # back: an onset 50 ms on
    h.asr_interim("oh wait")
    assert h.session.barge_ins == 1 and not pl.busy
    assert all(quiet), quiet

    h = _saying_over_the_greeting("uh huh")
    pl = h.session.playout
    h.tick(20, caller=tone_frame())
    assert pl.ducked and not pl.paused
    h.tick(10)
    assert not pl.ducked and not pl.paused and h.session.false_interruptions == 1


def test_a_voice_of_hesitations_alone_leaves_the_prompt_ducked_for_the_words_after_it():
    """ "ah oh" (300 ms) over the greeting, then 300 ms of quiet and the voice back: hesitations
    alone are as often the start of a request as one word is, so the prompt plays on ducked
    after them, and at no point between the onset and the voice's return does the caller hear it
    at its own level."""
    h = _saying_over_the_greeting("ah oh")
    pl = h.session.playout
    tick, quiet = _ticking_quietly(h)

    tick(20, voiced=True)
    tick(30, voiced=False)
    assert h.session.false_interruptions == 1 and h.session.barge_ins == 0 and not pl.paused
    tick(3, voiced=True)
    assert all(quiet), quiet


def _ticking_quietly(h: "Harness") -> tuple[Callable[[int, bool], None], list[bool]]:
    """A ticker of *h*'s 10 ms frames (the caller's voice or quiet) and the list it fills with
    whether the prompt was paused or ducked after each frame."""
    pl = h.session.playout
    quiet: list[bool] = []

    def tick(frames: int, voiced: bool) -> None:
        for _ in range(frames):
            h.tick(1, caller=tone_frame() if voiced else None)
            quiet.append(pl.paused or pl.ducked)
    return tick, quiet


def _saying_over_the_greeting(words: str) -> "Harness":
    """The caller's voice begins 400 ms into the greeting; 100 ms on, the recogniser hears *words*."""
    h = Harness()
    h.session.start()
    h.tick(40)
    h.tick(10, caller=tone_frame())
    h.asr_interim(words)
    return h


def test_an_acknowledgement_that_turns_into_an_interruption_still_stops_the_prompt():
    """ "okay" (prompt plays on), then "okay wait": the prompt stops and the agent listens."""
    h = Harness()
    h.session.start()
    h.tick(40)
    h.tick(10, caller=tone_frame())
    h.asr_interim("okay")
    h.tick(7, caller=tone_frame())
    assert not h.session.playout.paused
    h.tick(20, caller=tone_frame())
    h.asr_interim("okay wait")
    assert h.session.barge_ins == 1
    assert not h.session.playout.busy and h.session.turn_taker.listening


def test_a_long_acknowledgement_leaves_no_hole_longer_than_200_ms_in_the_prompt():
    """ "I see" of 600 ms, first heard as "ah i": the prompt pauses at its onset, plays on ducked
    200 ms later while the words are still unclear, and is back at its own level once the voice
    is over; it never stops and is heard to its end."""
    h = Harness()
    h.session.start()
    h.tick(40)
    pl = h.session.playout
    h.tick(2, caller=tone_frame())
    assert pl.paused
    h.tick(18, caller=tone_frame())
    assert pl.paused                         # 180 ms paused: still a pause
    h.tick(3, caller=tone_frame())
    assert pl.ducked and not pl.paused       # 200 ms: on, ducked
    before = pl.frames_pulled
    h.asr_interim("ah i")
    h.tick(37, caller=tone_frame())
    assert pl.ducked and pl.frames_pulled > before
    h.tick(5)
    h.asr_final("i see")
    h.tick(10)
    assert not pl.ducked and not pl.paused
    assert h.session.barge_ins == 0
    pauses = h.session.record()["prompt_pauses"]
    assert [(p["outcome"], p["ms"]) for p in pauses] == [("ducked", 200)]
    h.play_out()
    greeting = h.session.turns[0].agent_prompts[0]
    assert not greeting.interrupted and greeting.played_ms == greeting.total_ms


def test_a_prompt_paused_again_for_an_acknowledgement_that_goes_on_is_ducked_200_ms_later():
    """ "oh okay" of 1.2 s, first heard as "oh" (the prompt plays on over it, ducked), then as "uh
    uh oh" 750 ms in: the prompt pauses again, and 200 ms later plays on ducked, as after a first
    pause, instead of staying paused until the next words or the 1.2 s verdict."""
    h = Harness()
    h.session.start()
    h.tick(10)  # early enough in the greeting that it does not reach its end (where a ducked
    #             prompt waits for the verdict) by the last check
    pl = h.session.playout
    h.tick(10, caller=tone_frame())
    h.asr_interim("oh")
    h.tick(15, caller=tone_frame())
    assert not pl.paused and pl.ducked       # an acknowledgement's start: plays on over it, ducked
    h.tick(50, caller=tone_frame())
    h.asr_interim("uh uh oh")
    assert pl.paused                         # longer than an acknowledgement, other words
    h.tick(21, caller=tone_frame())
    assert pl.ducked and not pl.paused
    pauses = h.session.record()["prompt_pauses"]
    assert [(p["outcome"], p["ms"]) for p in pauses][-1] == ("ducked", 200)


def test_the_call_record_keeps_each_pause_of_a_prompt_for_a_voice():
    """Each stretch a caller's voice held the prompt paused is in the record with its length
    and what became of it: an "okay" the prompt played on over, a voice still being judged after
    200 ms (the prompt went on ducked), and a "wait" that took the turn."""
    h = Harness()
    h.session.start()
    h.tick(10)
    h.tick(10, caller=tone_frame())          # paused at the onset, 20 ms in
    h.asr_interim("okay")
    h.tick(7, caller=tone_frame())           # held 60 ms: played on
    h.tick(30)
    h.asr_final("okay")
    h.tick(30)                               # too long ago for the next voice to continue it
    h.tick(45, caller=tone_frame())          # ducked 200 ms after it paused the prompt
    assert h.session.playout.ducked and not h.session.playout.paused
    h.asr_interim("an agent")
    h.tick(35)                               # 300 ms of quiet after a request: over
    assert not h.session.playout.ducked
    h.asr_final("an agent")
    h.tick(45)                               # too long ago for the next voice to continue it
    h.tick(10, caller=tone_frame())
    h.asr_interim("wait")
    assert h.session.barge_ins == 1
    pauses = h.session.record()["prompt_pauses"]
    assert [(p["outcome"], p["heard"]) for p in pauses] == [
        ("played_on", "okay"), ("ducked", ""), ("interrupted", "wait")]
    played_on, ducked, interrupted = (p["ms"] for p in pauses)
    assert 120 <= played_on <= 180           # from the onset to "okay" held 60 ms
    assert ducked == 200
    assert 60 <= interrupted <= 100          # from the onset to "wait"
    assert pauses[0]["at_s"] == pytest.approx(100.12, abs=0.001)
    assert pauses[0]["at"].endswith(".120" + time.strftime("%z", time.localtime(100.12)))


def test_a_pause_in_a_prompts_closing_silence_is_no_hole_in_it(monkeypatch):
    """Each prompt ends in 500 ms of silence: "okay" whose onset pauses the greeting in that
    silence holds back none of its words, so the record shows the pause with no hole
    (``hole_ms`` 0), while the same "okay" over the greeting's words is a hole as long as the pause."""
    monkeypatch.setattr(Prompts, "get", lambda self, text, voice: (
        None if "{{" in text else bytes([1 + len(text) % 200]) * (FRAME * 100) + bytes(FRAME * 50)))
    holes = []
    for start_frames in (110, 40):
        h = Harness()
        h.session.start()
        h.tick(start_frames)
        h.tick(10, caller=tone_frame())
        assert h.session.playout.paused
        h.asr_interim("okay")
        h.tick(7, caller=tone_frame())
        h.tick(30)
        h.asr_final("okay")
        h.tick(30)
        pause = h.session.record()["prompt_pauses"][0]
        assert pause["ms"] >= 60, pause
        holes.append((pause["hole_ms"], pause["ms"]))
    (closing_hole, _), (words_hole, words_ms) = holes
    assert closing_hole == 0 and words_hole == words_ms


def test_a_ducked_prompt_that_ends_under_a_voice_hands_over_to_the_next_prompt_not_a_hole():
    """ "uh huh, okay" begun 400 ms before the greeting's end: the greeting is ducked 200 ms
    later and ends under the voice. The menu, which follows it, starts at once, ducked, instead of
    the greeting waiting at its end until the voice's final words (a 400 ms hole between the two
    in this script); the menu, the last prompt before listening, would wait at its end."""
    h = Harness()
    h.session.start()
    pl = h.session.playout
    h.tick(60)
    started_menu_at = None
    for i in range(60, 200):
        h.tick(1, caller=tone_frame() if i < 125 else None)
        if i == 70:
            h.asr_interim("uh")
        if i == 110:
            h.asr_interim("uh huh okay")
        if i == 150:
            assert pl.ducked and not pl.paused   # the menu plays on under the voice, ducked
        if i == 160:
            h.asr_final("uh huh okay")
        if started_menu_at is None and h.said()[-1].startswith("How can I help"):
            started_menu_at = i
        assert not (pl.paused and pl.ducked), i  # never held silent between the two
    assert started_menu_at is not None and started_menu_at <= 120
    assert not pl.ducked and h.session.barge_ins == 0
    assert [(p["outcome"], p["ms"]) for p in h.session.record()["prompt_pauses"]] == [("ducked", 200)]


def _speak(h: "Harness", text: str, voice: int = 40, quiet: int = 30, confidence: float | None = 0.9,
           after: int = 100) -> None:
    """The caller says *text*: 10 frames of voice, the interim, *voice* more frames, *quiet*
    frames of silence, then the final with *confidence* (None: no final), then *after* frames."""
    h.tick(10, caller=tone_frame())
    h.asr_interim(text)
    h.tick(voice, caller=tone_frame())
    h.tick(quiet)
    if confidence is not None:
        h.speech.streams[-1].callbacks["on_final"](text, confidence)
    h.tick(after)


def _reach_the_offer_of_a_person(h: "Harness") -> None:
    """Two answers the menu does not understand: the agent offers a person."""
    h.session.start()
    h.play_out()
    for text in ("purple elephants dance", "green giraffes sing loudly"):
        _speak(h, text)
        h.play_out()
    assert h.said()[-1].endswith("Would you like to speak to a person?")
    assert h.session.dialogue.asking_before_acting


def test_a_yes_to_a_transfer_taken_on_interim_words_waits_for_the_final_and_its_confidence():
    """ "I want- yes, I had another thing", its turn ended on the interim "i want yes but other
    things": the offer of a person is answered only when the final says how clearly that was
    heard (0.3: asked again, nobody put through); a clear yes then transfers."""
    h = Harness()
    _reach_the_offer_of_a_person(h)
    offers = len(h.said())
    _speak(h, "i want yes but other things", voice=50, quiet=100, confidence=None, after=0)
    assert len(h.said()) == offers and not h.control.transfers  # the turn has ended: no final yet
    h.speech.streams[-1].callbacks["on_final"]("i want yes but other thing", 0.3)
    h.tick(5)
    assert h.session.turns[-1].caller_text == "i want yes but other thing"  # what the dialogue heard
    assert len(h.said()) == offers + 1 and h.said()[-1].endswith("speak to a person?")
    assert not h.control.transfers
    h.play_out()
    _speak(h, "yes please", voice=30, quiet=100, confidence=0.92, after=0)
    h.play_out()
    assert h.control.transfers


def test_a_no_to_a_transfer_taken_on_interim_words_is_answered_at_once():
    """ "no thanks" to "Would you like to speak to a person?", its turn ended on interim words:
    a no ends and transfers nothing however clearly it was heard, so the agent answers at once
    instead of waiting a few hundred ms for the recogniser's final."""
    h = Harness()
    _reach_the_offer_of_a_person(h)
    offers = len(h.said())
    _speak(h, "no thanks", voice=50, quiet=100, confidence=None, after=0)
    while len(h.said()) == offers and h.reactor.seconds() < 600:
        h.tick(1)
    assert not h.control.transfers
    assert h.session.turns[-1].reply_start_ms is not None and h.session.turns[-1].reply_start_ms < 100
    assert not h.said()[-1].endswith("speak to a person?")


def _to_the_transfer_question(h: "Harness") -> None:
    """A request for a person heard unclearly at the menu ("i want a live one", by meaning): the
    agent has begun asking "Do you want me to put you through to an agent?"."""
    h.session.start()
    h.play_out()
    _speak(h, "i want a live one", after=0)
    while not (h.said()[-1].endswith("agent?") and h.session.playout.busy) and h.reactor.seconds() < 600:
        h.tick(1)
    assert h.said()[-1].endswith("agent?") and h.session.dialogue.asking_before_acting


def _before_the_transfer_questions_end(frames: int) -> "Harness":
    """A call at the transfer question (:func:`_to_the_transfer_question`) *frames* x 10 ms before
    the question has played out (its length measured on a twin call)."""
    a = Harness()
    _to_the_transfer_question(a)
    length = 0
    while a.session.playout.busy:
        a.tick(1)
        length += 1
    h = Harness()
    _to_the_transfer_question(h)
    h.tick(length - frames)
    return h


def _over_the_transfer_question(h: "Harness", text: str) -> None:
    """A request for a person heard unclearly at the menu ("i want a live one", by meaning): while
    "Do you want me to put you through to an agent?" is said, the caller says *text*, begun 0.4 s
    into the question and going on past its end; the final comes 300 ms after the voice."""
    _to_the_transfer_question(h)
    h.tick(30)
    h.tick(10, caller=tone_frame())
    h.asr_interim(text)
    while h.session.playout.busy:
        h.tick(1, caller=tone_frame())
    h.tick(20, caller=tone_frame())
    h.tick(30)
    h.speech.streams[-1].callbacks["on_final"](text, 0.9)
    h.tick(100)


def test_an_acknowledgement_begun_over_a_transfer_question_is_no_yes():
    """ "uh huh, okay" begun while "Do you want me to put you through to an agent?" was being
    said acknowledges the agent talking, not what it asks: nobody is put through, the agent goes
    on listening, and a clear yes after it transfers."""
    h = Harness()
    _over_the_transfer_question(h, "uh huh okay")
    assert not h.control.transfers and h.said()[-1].endswith("agent?")
    assert h.session.dialogue.asking_before_acting and h.session.turn_taker.listening
    _speak(h, "yes please", voice=30, quiet=100, confidence=0.92, after=0)
    h.play_out()
    assert h.control.transfers


def test_a_transfer_question_acknowledged_over_is_asked_again_a_second_later():
    """After "uh huh okay" begun over the question, the caller believes they answered: with
    nothing more said, the question is said again about a second later (``confirm.reask_after_ms``),
    not after the five-second no-input wait; a clear yes to it then transfers."""
    h = Harness()
    _to_the_transfer_question(h)
    h.tick(30)
    h.tick(10, caller=tone_frame())
    h.asr_interim("uh huh okay")
    while h.session.playout.busy:
        h.tick(1, caller=tone_frame())
    h.tick(20, caller=tone_frame())
    voice_end = h.reactor.seconds()
    asked = len(h.said())
    h.tick(30)
    h.speech.streams[-1].callbacks["on_final"]("uh huh okay", 0.9)
    while len(h.said()) == asked and h.reactor.seconds() - voice_end < 6.0:
        h.tick(1)
    # the ack's turn ends on the finished silence (600 ms), the question comes 1000 ms after
    assert 1.4 <= h.reactor.seconds() - voice_end <= 2.0
    assert h.said()[-1].endswith("agent?")
    assert h.session.dialogue.asking_before_acting and not h.control.transfers
    h.play_out()
    _speak(h, "yes please", voice=30, quiet=100, confidence=0.92, after=0)
    h.play_out()
    assert h.control.transfers


def test_an_acknowledgement_with_a_gap_across_the_end_of_a_transfer_question_is_no_yes():
    """ "oh | okay": its "oh" said over the last 200 ms of "Do you want me to put you through to
    an agent?", its "okay" just after the question ended (the caller quiet, for a moment, as
    listening began): the turn began over the question, and is no yes."""
    h = _before_the_transfer_questions_end(20)
    h.tick(5, caller=tone_frame())
    h.asr_interim("oh")
    h.tick(15, caller=tone_frame())
    assert h.session.playout.busy
    h.tick(12)
    assert not h.session.playout.busy and h.session.turn_taker.listening
    h.tick(20, caller=tone_frame())
    h.asr_interim("oh okay")
    h.tick(30)
    h.speech.streams[-1].callbacks["on_final"]("oh okay", 0.41)
    h.tick(150)
    assert not h.control.transfers and h.said()[-1].endswith("agent?")
    assert h.session.dialogue.asking_before_acting


def test_a_reply_after_a_one_word_voice_at_a_prompts_end_is_at_its_own_level():
    """ "oh" over the last 200 ms of "Do you want me to put you through to an agent?": the question
    plays on ducked after it (one word) and ends; the caller then answers "no", and the menu said
    again is at its own level, not left ducked."""
    h = _before_the_transfer_questions_end(20)
    h.tick(8, caller=tone_frame())
    h.asr_interim("oh")
    h.tick(7, caller=tone_frame())
    h.tick(8)
    assert h.session.playout.ducked            # "oh" is over: one word, the question plays on ducked
    h.tick(20)
    assert not h.session.playout.busy and h.session.turn_taker.listening
    h.caller_says("no")
    while not h.session.playout.busy:
        h.tick(1)
    h.tick(30)
    assert h.said()[-1].startswith("How can I help you"), h.said()
    assert not h.session.playout.ducked and h.session.playout.gain == 1.0


def test_a_yes_begun_over_a_transfer_question_answers_it():
    """A plain "yes" over the question's end is an answer (callers who know what comes do)."""
    h = Harness()
    _over_the_transfer_question(h, "yes")
    h.play_out()
    assert h.control.transfers


def test_an_answer_whose_final_never_comes_is_taken_as_heard():
    """No final within a second of an answer taken on interim words: the dialogue hears the
    interim words (another request here: the hours are said)."""
    h = Harness()
    _reach_the_offer_of_a_person(h)
    offers = len(h.said())
    _speak(h, "what are your opening hours", voice=20, quiet=60, confidence=None, after=0)
    assert len(h.said()) == offers
    h.tick(100)
    assert len(h.said()) > offers and not h.control.transfers
    assert not h.session.dialogue.asking_before_acting


def test_an_acknowledgement_said_into_the_silence_after_a_question_is_not_an_answer():
    """ "I see" after the menu has been asked: no "sorry, I did not understand", nothing
    counted towards giving up; the agent goes on waiting, and a request after it is answered."""
    h = Harness()
    h.session.start()
    h.play_out()
    said = len(h.said())
    for _ in range(3):
        _speak(h, "i see", voice=30, quiet=10, confidence=0.95)
    assert len(h.said()) == said and h.session.turn_taker.listening
    assert not any(e.kind in ("no_match", "gave_up") for e in h.session.dialogue.history)
    _speak(h, "what are your opening hours", quiet=10, confidence=0.95)
    assert h.said()[-2].startswith("We are open")


def _at_the_end_call_question() -> "Harness":
    """A call at the menu whose caller said a goodbye by meaning: asked "Do you want to end the call?"."""
    h = Harness()
    h.session.start()
    h.play_out()
    _speak(h, "okay i'll let you go now", confidence=0.9)  # a goodbye by meaning: confirmed
    h.play_out()
    assert h.said()[-1] == "Do you want to end the call?"
    return h


def test_thinking_aloud_at_a_question_before_ending_is_not_its_answer():
    """ "I see" and "um" after "Do you want to end the call?": the agent goes on waiting, and
    the question keeps its one repetition, so an unclear "ok" (a backchannel can be heard so)
    still has it asked again instead of ending the call; a clear yes then ends it."""
    h = _at_the_end_call_question()
    said = len(h.said())
    for words in ("i see", "um", "oh i see"):
        _speak(h, words, voice=30, quiet=40, confidence=0.95)
    assert len(h.said()) == said and h.session.dialogue.asking_before_acting
    _speak(h, "ok", voice=20, quiet=40, confidence=0.4)
    h.play_out()
    assert h.said()[-1] == "Do you want to end the call?" and len(h.said()) == said + 1
    assert h.control.hung_up == 0
    _speak(h, "yes", voice=20, quiet=40, confidence=0.95)
    h.play_out()
    assert h.control.hung_up == 1


def test_a_yes_alone_ends_the_turn_sooner_at_a_question_than_at_an_ask() -> None:
    """A bare "yeah" is often the start of more at an ask ("yeah, | I have another question")
    and waits answer_silence_ms (500) there; to "Do you want to end the call?" it is most often
    the whole answer and waits yes_no_answer_silence_ms (250)."""
    h = _at_the_end_call_question()
    _speak(h, "yeah", voice=30, quiet=40, confidence=0.95, after=30)
    eot = h.session.turns[-1].as_record()["end_of_turn"]
    assert eot["reason"] == "answer" and 250.0 <= eot["silence_ms"] <= 270.0, eot
    h.play_out()
    assert h.control.hung_up == 1


YES_NO_PLAN = textwrap.dedent(one_ask(
    'prompt: "Would you like a call back?"\nslot: {name: ok, type: yes_no}\n'
    'no_match: {reprompts: ["Please say yes or no."]}\n', after="You said {{ ok }}."))


def test_thinking_aloud_at_a_yes_no_slot_is_no_answer(tmp_path) -> None:
    """ "um" and "I see" at a yes/no ask: no reprompt, nothing counted; the yes after them fills
    the slot."""
    plan = tmp_path / "yes_no.yaml"
    plan.write_text(YES_NO_PLAN)
    h = Harness(dialplan=str(plan))
    h.session.start()
    h.play_out()
    said = len(h.said())
    for words in ("um", "i see"):
        _speak(h, words, voice=30, quiet=40, confidence=0.95)
    assert len(h.said()) == said
    assert not any(e.kind in ("no_match", "reprompt") for e in h.session.dialogue.history)
    _speak(h, "yes", voice=20, quiet=40, confidence=0.95)
    h.play_out()
    assert h.said()[-1] == "You said yes."


def test_final_transcript_during_a_prompt_that_was_not_interrupted_is_ignored():
    """Speech recognised while the agent talks (without barge-in) does not jump the dialogue."""
    h = Harness()
    h.session.start()
    h.tick(2)
    h.asr_final("goodbye")
    h.play_out()
    assert not any("Goodbye" in t for t in h.said())


def test_dtmf_during_menu_selects_hours():
    """DTMF 2 interrupts the menu prompt and plays the opening hours."""
    h = Harness()
    h.session.start()
    h.tick(3)
    h.session.on_dtmf("2")
    h.tick(2)
    assert any("We are open" in t for t in h.said())


def test_goodbye_plays_then_hangs_up_and_tears_down():
    """Saying goodbye plays the closing prompt fully, then hangs up and closes the streams once."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.caller_says("goodbye")
    assert h.control.hung_up == 0
    h.play_out()
    h.tick(2)
    assert h.control.hung_up == 1
    assert h.session.ended and h.ended == [h.session]
    assert h.speech.streams[-1].closed
    h.session.close("again")
    assert h.ended == [h.session]


def test_ending_politely_cuts_the_prompt_says_goodbye_then_hangs_up():
    """Server shutdown mid-prompt: the prompt stops, the goodbye is said in full, then BYE."""
    h = Harness()
    h.session.start()
    h.tick(20)
    assert h.session.playout.busy
    h.session.end_politely("We are closing now. Goodbye.", "kal16", "server stopping")
    h.tick(10)
    said = [p.text for t in h.session.turns for p in t.agent_prompts]
    assert said[-1] == "We are closing now. Goodbye." and said[-2] != said[-1]
    assert h.session.playout.busy and h.control.hung_up == 0
    h.play_out()
    h.tick(2)
    assert h.control.hung_up == 1 and h.session.ended


def test_failed_transfer_says_so_and_returns_to_the_menu():
    """A REFER answered 503 leads to the apology and the menu again."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.session.on_dtmf("3")
    h.play_out()
    assert h.control.transfers == ["sip:desk@127.0.0.1:5070"]
    h.session.on_transfer_status(503, "Service Unavailable", True)
    h.tick(2)
    assert any("could not transfer" in t for t in h.said())
    h.play_out()
    assert h.said()[-1].startswith("How can I help you")


def test_successful_transfer_hangs_up_our_leg():
    """A 200 NOTIFY for the REFER ends the agent's leg of the call."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.session.on_dtmf("3")
    h.play_out()
    h.session.on_transfer_status(200, "OK", True)
    assert h.control.hung_up == 1


def test_streamed_prompt_waits_for_synthesis():
    """A prompt missing from the cache is streamed: it finishes only after synthesis is done."""
    h = Harness()
    h.session.speaker.prompts = None
    h.session.start()
    synth = h.speech.syntheses[-1]
    synth.on_audio(b"\x03" * FRAME * 2)
    h.tick(5)
    assert h.session.playout.underruns >= 1
    assert len(h.said()) == 1
    synth.on_done()
    h.tick(1)
    assert len(h.said()) == 2


def test_hangup_mid_prompt_cancels_synthesis_and_recognition():
    """The caller hanging up during a streamed prompt closes every stream."""
    h = Harness()
    h.session.speaker.prompts = None
    h.session.start()
    h.tick(2)
    h.session.close("disconnected 200")
    assert h.speech.syntheses[-1].cancelled
    assert h.speech.streams[-1].closed
    assert not h.session.playout.busy


def test_complete_request_is_answered_after_a_short_silence():
    """An interim that completes an intent lets the turn end 30 ms after the caller stops."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.tick(20, caller=tone_frame())
    h.asr_interim("check my balance")
    h.tick(20, caller=tone_frame())
    h.tick(2)
    assert not any(t.startswith("Your account balance") for t in h.said())
    h.tick(3)
    assert any(t.startswith("Your account balance") for t in h.said())
    turn = h.session.turns[-1]
    assert turn.caller_text == "check my balance"
    # VAD end-of-speech and the endpointer both need 30 ms of silence; the reply starts on the next frame.
    assert turn.latency_ms is not None and 25.0 <= turn.latency_ms <= 60.0, turn.latency_ms


def _answered_after(h: "Harness", interim: str, latency_ms: float) -> int:
    """At the menu, 400 ms of voice whose words are *interim*: nothing is said until *latency_ms*
    of silence, and the turn is taken within 30 ms after. Returns how many prompts were said
    before the turn."""
    h.session.start()
    h.play_out()
    before = len(h.said())
    h.tick(40, caller=tone_frame())
    h.asr_interim(interim)
    h.tick(int(latency_ms / 10) - 5)
    assert len(h.said()) == before
    h.tick(10)
    turn = h.session.turns[-1]
    assert turn.latency_ms is not None and latency_ms <= turn.latency_ms <= latency_ms + 30.0, turn.latency_ms
    return before


@pytest.mark.parametrize("interim, latency_ms", [("option two", 30.0), ("i want them two", 500.0)])
def test_a_spoken_key_among_other_words_waits_the_answer_silence(interim: str, latency_ms: float) -> None:
    """ "option two" (the menu's key 2) ends the turn 30 ms after the caller stops; the same key
    among other words ("i want them two", as the recogniser may hear "I want someone to ...")
    is taken as the key too, but only after the answer's 500 ms."""
    h = Harness()
    before = _answered_after(h, interim, latency_ms)
    assert any(t.startswith("We are open") for t in h.said()[before:])


def test_the_turn_record_says_why_the_turn_ended_and_what_the_reply_took() -> None:
    """A spoken turn's record names the endpointer's reason, the silence it waited and the speech
    before it, and the time from that decision to the reply's first audio; the record of a turn
    the caller did not speak (the greeting) has neither."""
    h = Harness()
    _answered_after(h, "i want them two", 500.0)
    turn = h.session.turns[-1]
    record = turn.as_record()
    eot = record["end_of_turn"]
    assert eot["reason"] == "one_word"
    assert 500.0 <= eot["silence_ms"] <= 520.0, eot
    assert 350.0 <= eot["speech_ms"] <= 420.0, eot
    assert record["reply_start_ms"] is not None
    assert 0.0 <= record["reply_start_ms"] <= record["latency_ms"] - eot["silence_ms"] + 1.0, record
    assert "end_of_turn" not in h.session.turns[0].as_record()


def test_unfinished_phrase_is_not_cut_during_a_500_ms_pause():
    """ "I would like to" + 500 ms pause + "check my balance": one turn, answered after the whole phrase."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.tick(30, caller=tone_frame())
    h.asr_interim("i would like to")
    h.tick(10, caller=tone_frame())
    h.tick(20)
    h.asr_final("i would like to")
    h.tick(30)  # 500 ms of pause in all
    assert not h.session.turns[-1].caller_text
    assert h.said()[-1].startswith("How can I help you")
    h.caller_says("check my balance")
    assert h.session.turns[-1].caller_text == "i would like to check my balance"
    assert any(t.startswith("Your account balance") for t in h.said())


def test_words_added_after_the_turn_was_taken_count_as_a_cut_in():
    """When the recogniser's final carries words past the ones acted on, a cut-in is recorded."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.caller_says("check my balance", final=False)
    assert any(t.startswith("Your account balance") for t in h.said())
    h.asr_final("check my balance and savings")
    assert h.session.cut_ins == 1


def _voice_set_aside(h: Harness, heard: str) -> None:
    """280 ms of voice over a prompt, heard as *heard* (neither an acknowledgement nor a request):
    the prompt pauses at its onset and resumes once it is over."""
    h.tick(10, caller=tone_frame())
    h.asr_interim(heard)
    h.tick(18, caller=tone_frame())
    h.tick(20)
    assert not h.session.playout.paused and h.session.false_interruptions == 1


def test_a_backchannel_whose_words_the_recogniser_revises_later_is_no_cut_in():
    """An "uh-huh" over the reply, long after the turn was taken, resumes the reply as "huh"; the
    recogniser's final then says "of up": the words are revised, not added to the turn."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.caller_says("check my balance", final=False)
    h.asr_final("check my balance")
    h.tick(100)
    _voice_set_aside(h, "huh")
    h.asr_final("of up")
    assert h.session.cut_ins == 0


def test_a_set_aside_voice_whose_final_comes_late_does_not_stick_to_the_next_one():
    """ "yeah" heard as "you" resumes the prompt; its final then says "you have". The next voice
    over the same prompt, "yeah", is heard as just that -- an acknowledgement the prompt plays on
    over -- not as "have yeah"."""
    h = Harness()
    h.session.start()
    h.tick(40)
    _voice_set_aside(h, "you")
    h.asr_final("you have")
    h.tick(100)
    h.tick(5, caller=tone_frame())
    assert h.session.playout.paused
    h.asr_interim("yeah")
    h.tick(8, caller=tone_frame())
    assert not h.session.playout.paused  # an acknowledgement held 60 ms: the prompt plays on over it
    assert h.session.barge.current is not None and h.session.barge.current.text == "yeah"


def _answer_then_go_on(h: Harness, gap_frames: int) -> None:
    """The caller asks for the balance; the reply starts after the short silence; the caller's
    voice comes back *gap_frames* x 10 ms after their last words."""
    h.session.start()
    h.play_out()
    h.tick(20, caller=tone_frame())
    h.asr_interim("check my balance")
    h.tick(20, caller=tone_frame())
    h.tick(gap_frames)
    assert h.said()[-1].startswith("Your account balance")
    assert not h.session.playout.paused


def test_a_word_added_just_after_the_turn_was_taken_is_a_cut_in_the_reply_plays_on_over():
    """ "check my balance | please": the "please" starts 70 ms after "balance", after the reply
    began -- too soon to be a reaction to it. The reply is not paused for it (a prompt stopping
    in its first syllable for half a second); the cut-in is counted once."""
    h = Harness()
    _answer_then_go_on(h, gap_frames=7)
    reply = h.said()[-1]
    for _ in range(30):
        h.tick(1, caller=tone_frame())
        assert not h.session.playout.paused
    h.asr_interim("check my balance please")
    h.tick(30)
    h.asr_final("check my balance please")
    assert not h.session.playout.paused
    assert h.session.cut_ins == 1  # the final's extra word is the same cut-in
    assert h.session.false_interruptions == 0 and h.session.barge_ins == 0
    h.play_out()
    record = next(p for t in h.session.turns for p in t.agent_prompts if p.text == reply)
    assert not record.interrupted and record.played_ms == record.total_ms
    assert h.said()[-1].startswith("Is there anything else")


def test_a_voice_well_after_the_turn_was_taken_pauses_the_reply_as_a_barge_in():
    """Past the tail window (250 ms after the caller's last words) a voice over the reply is a
    reaction to it: the reply pauses at its onset as any barge-in, and it is not a cut-in."""
    h = Harness()
    _answer_then_go_on(h, gap_frames=30)
    h.tick(3, caller=tone_frame())
    assert h.session.playout.paused
    assert h.session.cut_ins == 0


def test_a_tail_that_goes_on_into_a_new_request_still_stops_the_reply():
    """The reply plays on over words added to the turn only while they could be an
    acknowledgement: a new request that outlasts one stops it and is answered."""
    h = Harness()
    _answer_then_go_on(h, gap_frames=7)
    h.tick(40, caller=tone_frame())
    h.asr_interim("check my balance and what are your opening hours")
    assert not h.session.playout.paused and h.session.barge_ins == 0
    h.tick(40, caller=tone_frame())
    assert h.session.barge_ins == 1 and h.session.cut_ins == 1
    h.tick(10)
    assert h.said()[-1].startswith("We are open")


def test_reply_is_prepared_while_the_silence_is_confirmed():
    """A complete request seen mid-speech is answered from the speculative state; a request
    that changes before the turn ends throws the speculation away."""
    h = Harness()
    h.session.speaker.prompts = None
    h.session.start()
    done = set()
    for _ in range(50):
        for s in h.speech.syntheses:
            if id(s) not in done:
                done.add(id(s))
                s.on_audio(b"\x01" * FRAME * 3)
                s.on_done()
        h.tick(5)
    assert h.session.turn_taker.listening
    h.tick(10, caller=tone_frame())
    h.asr_interim("goodbye")
    spec = h.session.turn_taker.speculation
    assert spec is not None and spec.text == "goodbye"
    prepared = h.speech.syntheses[-1]
    assert prepared.text.startswith("Thank you for calling OpenClaw Bank. Goodbye")
    prepared.on_audio(b"\x02" * FRAME * 3)
    prepared.on_done()
    syntheses_before = len(h.speech.syntheses)
    h.tick(35, caller=tone_frame())  # 450 ms of speech: not a short turn
    h.tick(10)
    assert h.session.dialogue is spec.dialogue
    assert len(h.speech.syntheses) == syntheses_before, "the prepared audio was played, not synthesised again"
    assert h.said()[-1].startswith("Thank you for calling OpenClaw Bank. Goodbye")


def test_speculation_is_discarded_when_the_caller_goes_on():
    """ "check my balance" then more words: the prepared reply is cancelled and not used."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.tick(10, caller=tone_frame())
    h.asr_interim("check my balance")
    first = h.session.turn_taker.speculation
    assert first is not None
    h.tick(10, caller=tone_frame())
    h.asr_interim("check my balance of the savings account")
    assert h.session.turn_taker.speculation is None or h.session.turn_taker.speculation.text != "check my balance"


def test_an_interruption_decided_just_after_the_voice_ended_is_answered():
    """The request's words arrive 60 ms after the caller stopped (the VAD has already said so):
    the interruption is taken and the turn ends at once, not at the caller's next voice."""
    h = Harness()
    h.session.start()
    h.tick(120)
    h.tick(90, caller=tone_frame())
    h.tick(6)
    assert gave_way(h) and h.session.barge_ins == 0
    h.asr_interim("check my balance")
    assert h.session.barge_ins == 1
    h.tick(3)
    assert any(t.startswith("Your account balance") for t in h.said()), h.said()


def test_an_interruption_with_a_pause_in_it_is_judged_whole():
    """ "what are" (400 ms), 150 ms of quiet -- words left unfinished: the prompt, ducked, does
    not come back over the caller's pause -- then "your opening hours": the same barge-in, now a
    long request: the prompt stops and the hours are given."""
    h = Harness()
    h.session.start()
    h.tick(120)
    h.tick(40, caller=tone_frame())
    h.asr_interim("what are")
    h.tick(15)
    assert gave_way(h) and h.session.false_interruptions == 0
    h.tick(30, caller=tone_frame())
    assert gave_way(h)
    h.asr_interim("what are your opening hours")
    assert h.session.barge_ins == 1 and h.session.false_interruptions == 0
    h.tick(10)  # the turn began at the first onset: a long request, answered after 30 ms
    assert any(t.startswith("We are open") for t in h.said()), h.said()
    assert h.session.turns[-1].caller_text.endswith("opening hours")


def test_a_voice_heard_as_an_acknowledgement_that_goes_on_is_still_an_interruption():
    """ "check" first heard as "sure", then a 90 ms stop: the prompt resumes, but the voice goes on
    ("my balance") and pauses it again at once; the whole is a request and interrupts."""
    h = Harness()
    h.session.start()
    h.tick(120)
    h.tick(15, caller=tone_frame())
    h.asr_interim("sure")
    h.tick(9)
    assert not h.session.playout.paused  # resumed: an acknowledgement, and quiet
    h.tick(6, caller=tone_frame())
    assert h.session.playout.paused  # the voice goes on: paused again within 60 ms
    h.tick(58, caller=tone_frame())
    h.asr_interim("check my balance")
    assert h.session.barge_ins == 1 and h.session.false_interruptions == 0
    h.tick(10)
    assert any(t.startswith("Your account balance") for t in h.said()), h.said()


def test_the_first_prompt_waits_the_configured_delay():
    """first_prompt_delay_ms=200: silence for 200 ms after the media starts, then the greeting."""
    h = Harness()
    h.session.settings = SessionSettings(vad=VadConfig(start_ms=50, end_ms=40), first_prompt_delay_ms=200)
    h.session.start()
    h.tick(19)
    assert not h.session.playout.busy and h.said() == []
    h.tick(2)
    assert h.said()[0].startswith("Thank you for calling")


def test_an_acknowledgement_with_a_stop_inside_keeps_its_words_when_the_voice_comes_back():
    """ "o-kay": "oh" then a 80 ms stop (the "k") lets the prompt resume; the voice comes back and
    the recogniser revises "oh" to "ok". The revived barge-in hears "ok", not nothing, and the
    prompt plays on over the rest of the acknowledgement instead of pausing a second time."""
    h = Harness()
    h.session.start()
    h.tick(120)
    h.tick(18, caller=tone_frame())
    h.asr_interim("oh")
    h.tick(8)
    assert not h.session.playout.paused and h.session.false_interruptions == 1
    h.tick(4, caller=tone_frame())
    assert not h.session.playout.paused, "the rest of the acknowledgement: the prompt plays on"
    barge = h.session.barge.current
    assert barge is not None and barge.text == "oh" and barge.talking_over, "the same barge-in, watching"
    assert h.session.false_interruptions == 0
    h.asr_interim("ok")
    assert h.session.barge.current.text == "ok"
    h.tick(18, caller=tone_frame())
    assert not h.session.playout.paused
    h.tick(10)
    assert h.session.barge_ins == 0 and h.session.false_interruptions == 1
    h.play_out()
    assert not h.session.turns[0].agent_prompts[0].interrupted


@pytest.mark.parametrize("confidence, latency_ms", [(None, 600.0), (0.5, 600.0), (0.9, 400.0)])
def test_an_out_of_scope_finished_sentence_gets_its_reprompt_after_the_finished_silence(
        confidence: float | None, latency_ms: float) -> None:
    """ "my card was stolen yesterday" matches no intent of the menu but is a finished sentence:
    the reprompt is prepared during the silence and plays after finished_silence_ms (600 ms),
    not after the 800 ms that words neither finished nor unfinished wait. When the recogniser's
    final for it, 330 ms into the silence, is heard with confidence 0.9 (>= confident_min_confidence),
    after confident_silence_ms (400 ms); with 0.5, or with no final, after 600."""
    h = Harness()
    h.session.start()
    h.play_out()
    before = len(h.said())
    h.tick(40, caller=tone_frame())
    h.asr_interim("my card was stolen yesterday")
    h.tick(33)
    if confidence is not None:
        h.speech.streams[-1].callbacks["on_final"]("my card was stolen yesterday", confidence)
    h.tick(int(latency_ms / 10) - 33 - 5)
    assert len(h.said()) == before
    h.tick(10)
    turn = h.session.turns[-1]
    assert turn.caller_text == "my card was stolen yesterday" and len(h.said()) > before
    assert turn.latency_ms is not None and latency_ms <= turn.latency_ms <= latency_ms + 30.0, turn.latency_ms


@pytest.mark.parametrize("interim, latency_ms", [("My card was stolen yesterday.", 250.0),
                                                 ("My card was stolen yesterday", 600.0),
                                                 ("I would like to.", 800.0)])
def test_a_finished_sentence_the_recogniser_wrote_as_one_gets_its_reply_after_the_sentence_silence(
        interim: str, latency_ms: float) -> None:
    """The stream asks the recogniser to punctuate. "My card was stolen yesterday." (its interim
    ends with a full stop) gets its reprompt after sentence_end_silence_ms (250 ms), not the
    finished sentence's 600; without the mark after 600; unfinished words with a mark still wait
    for the rest (800). The turn's words carry no punctuation."""
    h = Harness()
    before = _answered_after(h, interim, latency_ms)
    assert h.speech.streams[-1].punctuation
    assert h.session.turns[-1].caller_text == interim.lower().rstrip(".") and len(h.said()) > before


@pytest.mark.parametrize("settings", [SessionSettings(endpointer=EndpointerConfig(sentence_end_silence_ms=600)),
                                      SessionSettings(punctuation=False)])
def test_no_punctuation_is_asked_for_when_a_sentence_mark_would_shorten_nothing_or_is_not_wanted(settings):
    """A sentence silence no shorter than the finished sentence's, or speech.punctuation off (or
    auto with hosted regions), and the stream is not asked to punctuate."""
    h = Harness()
    session = CallSession("c2", h.dialogue, h.speech, h.control, h.reactor, prompts=Prompts(), settings=settings)
    session.start()
    assert not h.speech.streams[-1].punctuation


def test_the_dialogue_is_given_the_recognisers_confidence_in_a_final_turn():
    """A turn decided on the recogniser's final results hands its confidence to the dialogue."""
    h = Harness()
    h.session.start()
    h.play_out()
    heard = []
    real = h.session.dialogue.on_transcript
    h.session.dialogue.on_transcript = lambda text, confidence=None, alternatives=(): heard.append(confidence) or real(text, confidence, alternatives)
    h.tick(40, caller=tone_frame())
    h.session._on_final("my balance", 0.73)  # undecided words: the turn ends 800 ms on
    h.tick(90)
    assert heard == [0.73]


def test_the_voice_pitch_is_measured_only_when_a_falling_voice_shortens_a_silence():
    """With the default silences a falling voice changes nothing, so the media thread does not
    measure pitch; a configuration that uses it gets a prosody tracker fed every frame."""
    h = Harness()
    assert h.session.media.prosody is None
    settings = SessionSettings(endpointer=EndpointerConfig(finished_silence_ms=600, falling_finished_silence_ms=200))
    session = CallSession("c2", h.dialogue, h.speech, h.control, h.reactor, settings=settings)
    assert session.media.prosody is not None
    for _ in range(20):
        session.media.push_frame(tone_frame())
    session.media.push_frame(bytes(FRAME))
    assert session.media.prosody.latest is not None


def test_the_journal_hears_of_each_turn_and_its_reply_as_they_happen(tmp_path):
    """on_progress fires when a turn is taken and again when the reply's first audio goes out, so a
    journal written from it holds the caller's words before the reply and the latency after."""
    from agent.app.call_journal import CallJournals, read_journal

    h = Harness()
    journals = CallJournals(str(tmp_path))
    journal = journals.open("c1", {"flow": "main"})
    h.session.on_progress = lambda: journal.progress(h.session.turns, h.session.dialogue.history)
    h.session.start()
    h.play_out()
    h.tick(30, caller=tone_frame())
    h.tick(25)
    h.asr_final("check my balance")
    journals.flush()
    taken = read_journal(journal.path)
    assert taken is not None and taken["turns"][-1]["caller"] == "check my balance"
    h.tick(3)
    journals.flush()
    replied = read_journal(journal.path)
    assert replied is not None and replied["turns"][-1]["latency_ms"] == h.session.turns[-1].latency_ms
    assert any(e["kind"] == "intent" and e["intent"] == "balance" for e in replied["dialogue"]), replied["dialogue"]


def test_the_recognisers_other_readings_reach_the_dialogue_with_the_turn():
    """The stream asks for four readings; an interim that selects nothing, with another reading
    that does, is answered by that reading."""
    h = Harness()
    h.session.start()
    h.play_out()
    stream = h.speech.streams[-1]
    assert stream.max_alternatives == 4 and stream.callbacks["on_alternatives"] is not None
    h.tick(10, caller=tone_frame())
    stream.callbacks["on_alternatives"](("chuck mile ballots please", "check my balance"))
    stream.callbacks["on_interim"]("chuck mile ballots")
    h.tick(40, caller=tone_frame())
    h.tick(100)
    assert any("account balance" in text for text in h.said()), h.said()
    assert h.session.dialogue.call_record()["intents"][-1]["heard_as"] == "check my balance"


def test_one_reading_asked_for_sets_up_no_alternatives():
    h = Harness()
    h.session = CallSession("c2", h.dialogue, h.speech, h.control, h.reactor, prompts=Prompts(),
                            settings=SessionSettings(alternatives=1))
    h.session.start()
    assert h.speech.streams[-1].max_alternatives == 1 and h.speech.streams[-1].callbacks["on_alternatives"] is None

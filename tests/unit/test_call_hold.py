"""Hold and resume of a call, and the other sans-I/O parts of the SIP behaviour: INFO DTMF
bodies, answering after ringing, the playout's hold."""
from __future__ import annotations

from agent.app.answering import answer_call
from media.playout import PlayoutBuffer, PlayoutEventType
from sip.dialog import AnswerSettings
from sip.info_dtmf import dtmf_body_key
from tests.fakes import FakeReactor
from tests.unit.test_session import FRAME, Harness


def test_held_call_says_nothing_and_counts_no_silence_then_goes_on_where_it_stopped():
    """On hold mid-greeting: the greeting stops where it is, no prompt moves and no no-input
    reprompt comes however long the hold; on resume the greeting plays on and the menu follows,
    then the no-input wait starts afresh."""
    h = Harness()
    h.session.start()
    h.tick(50)
    heard_before = h.session.playout.voiced_frames
    assert 0 < heard_before < 100  # the greeting is 100 frames long
    h.session.on_hold(True)
    h.tick(3000)  # 30 s on hold: longer than the whole menu and its 5 s no-input wait
    assert h.session.playout.voiced_frames == heard_before and len(h.said()) == 1
    assert h.session.hold.record() == {"holds": 1, "held_s": 30.0}
    h.session.on_hold(False)
    h.play_out()
    assert h.session.turns[0].agent_prompts[0].played_ms == 1000
    assert h.said()[1].startswith("How can I help you")
    assert h.session.turn_taker.listening
    h.tick(499)
    assert len(h.said()) == 2
    h.tick(2)
    assert h.said()[-1].startswith("I'm sorry, I did not hear you")


def test_hold_while_listening_stops_the_no_input_wait_and_resume_restarts_it():
    """Put on hold 4 s into a 5 s no-input wait: no reprompt while held; after the resume the
    caller gets the full 5 s again."""
    h = Harness()
    h.session.start()
    h.play_out()
    h.tick(400)
    h.session.on_hold(True)
    h.tick(2000)
    assert len(h.said()) == 2
    h.session.on_hold(False)
    h.tick(499)
    assert len(h.said()) == 2
    h.tick(2)
    assert h.said()[-1].startswith("I'm sorry, I did not hear you")
    assert h.session.hold.holds == 1


def test_playout_hold_keeps_queued_audio_and_release_plays_on():
    """hold(): silence out and nothing consumed, even audio queued meanwhile; release() plays on."""
    events = []
    buf = PlayoutBuffer(on_event=events.append)
    buf.play(b"\x01\x02" * FRAME)
    assert buf.pull_frame(FRAME) != bytes(FRAME)
    buf.hold()
    buf.play(b"\x03\x04" * FRAME)
    assert all(buf.pull_frame(FRAME) == bytes(FRAME) for _ in range(10))
    assert [e.type for e in events] == [PlayoutEventType.STARTED]
    buf.release()
    out = b"".join(buf.pull_frame(FRAME) for _ in range(4))
    assert out.count(b"\x03\x04") > 0 and [e.type for e in events].count(PlayoutEventType.FINISHED) == 2


def test_dtmf_body_keys():
    """application/dtmf bodies: one key, Signal= forms, 10/11 for * and #; anything else is no key."""
    assert [dtmf_body_key(b) for b in ("5", "#\r\n", " *", "Signal=9", "11", "10", "a")] == \
        ["5", "#", "*", "9", "#", "*", "A"]
    assert dtmf_body_key("") is None and dtmf_body_key("12") is None and dtmf_body_key("hello") is None


class FakeCall:
    sip_call_id = "c1"

    def __init__(self) -> None:
        self.answers: list[int] = []
        self.disconnected = False
        self.fails_at: int | None = None  # pjsua cannot send this status (SipCall.answer is False)

    def answer(self, status: int, reason: str = "", headers: tuple[tuple[str, str], ...] = ()) -> bool:
        self.answers.append(status)
        return status != self.fails_at


def test_answer_at_once_after_ringing_or_in_early_media():
    """No ringing: 200 at once. ring_ms: 180, then 200 when it is over; early_media: 183 first.
    A call ended while ringing (CANCEL) is not answered."""
    clock = FakeReactor()
    call = FakeCall()
    answer_call(clock, call, AnswerSettings(), ())
    assert call.answers == [200]
    for settings, first in ((AnswerSettings(ring_ms=2000), 180), (AnswerSettings(ring_ms=2000, early_media=True), 183)):
        call = FakeCall()
        answer_call(clock, call, settings, ())
        clock.advance(1.99)
        assert call.answers == [first]
        clock.advance(0.02)
        assert call.answers == [first, 200]
    call = FakeCall()
    answer_call(clock, call, AnswerSettings(ring_ms=2000), ())
    call.disconnected = True
    clock.advance(3)
    assert call.answers == [180]


def test_an_answer_pjsua_cannot_send_is_reported_once():
    """A 200 (at once or after ringing) or a 180 that pjsua cannot send calls on_failed, and a
    failed 180 is not followed by a 200."""
    clock = FakeReactor()
    for settings, fails_at, answers in ((AnswerSettings(), 200, [200]),
                                        (AnswerSettings(ring_ms=500), 200, [180, 200]),
                                        (AnswerSettings(ring_ms=500), 180, [180])):
        call, failed = FakeCall(), []
        call.fails_at = fails_at
        answer_call(clock, call, settings, (), on_failed=lambda: failed.append(True))
        clock.advance(1)
        assert call.answers == answers and failed == [True]

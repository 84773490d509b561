"""A model reply streamed to the caller (fake clock): its first sentence is synthesised while the
model writes on, later sentences follow in order, the dialogue goes on when the reply is over,
a barge-in stops the stream, and an error after nothing was said takes the fallback."""
from __future__ import annotations

from typing import Any

from twisted.internet import defer

from agent.call.session import CallSession, SessionSettings
from agent.dialplan.engine import DialogueSession
from agent.dialplan.model import parse_dialplan
from agent.integrations.chat_stream import ModelError, ModelReply
from media.vad import VadConfig
from tests.unit.test_session import FRAME, FakeControl, FakeReactor, FakeSpeech, tone_frame

DIALPLAN = """
version: 1
routes: [{flow: main}]
flows:
  main:
    needs_model: true
    settings: {system_prompt: "You are the bank's assistant."}
    steps:
      - model: {input: "When are you open?", instructions: "Be brief.", on_failure: sorry}
      - id: q
        ask: {prompt: "Anything else?", slot: {name: question, type: text}}
      - hangup:
      - id: sorry
        say: "Sorry, I cannot answer that."
      - hangup:
"""


class Harness:
    def __init__(self) -> None:
        self.reactor = FakeReactor()
        self.speech = FakeSpeech()
        self.asked: list[Any] = []
        self.cancelled: list[bool] = []
        self.reply: defer.Deferred[Any] = defer.Deferred(lambda d: self.cancelled.append(True))
        self.on_sentence: Any = None
        dialogue = DialogueSession(parse_dialplan(DIALPLAN, "t.yaml"), "main", {"call_id": "c1"})

        def model_stream(action: Any, on_sentence: Any) -> defer.Deferred[Any]:
            self.asked.append(action)
            self.on_sentence = on_sentence
            return self.reply

        self.session = CallSession("c1", dialogue, self.speech, FakeControl(), self.reactor,
                                   settings=SessionSettings(vad=VadConfig(start_ms=50, end_ms=40)),
                                   model_stream=model_stream)

    def tick(self, frames: int = 1, caller: bytes | None = None) -> None:
        for _ in range(frames):
            self.reactor.rightNow += 0.01
            self.session.media.push_frame(caller if caller is not None else bytes(FRAME))
            self.session.playout.pull_frame(FRAME)
            self.reactor.advance(0)

    def synthesised(self) -> list[str]:
        return [s.text for s in self.speech.syntheses]

    def finish_synthesis(self, frames: int = 3) -> None:
        for s in self.speech.syntheses:
            if not getattr(s, "done", False):
                s.done = True
                s.on_audio(b"\x01" * FRAME * frames)
                s.on_done()

    def events(self) -> list[tuple[str, str]]:
        return [(e["kind"], e.get("text", "")) for e in self.session.record()["dialogue"]]


def test_first_sentence_is_synthesised_while_the_model_writes_on() -> None:
    """The first complete sentence goes to synthesis at once; the second waits for it; when the
    reply ends the flow goes on to the ask, and the record keeps the whole reply."""
    h = Harness()
    h.session.start()
    (action,) = h.asked
    assert action.instructions == "You are the bank's assistant.\n\nBe brief." and action.say
    assert h.synthesised() == []
    h.on_sentence("We open at nine.")
    assert h.synthesised() == ["We open at nine."]
    h.on_sentence("We close at five.")
    assert h.synthesised() == ["We open at nine."]  # in order: after the first is played
    h.finish_synthesis()
    h.tick(10)
    assert h.synthesised() == ["We open at nine.", "We close at five."]
    h.reply.callback(ModelReply("We open at nine. We close at five."))
    h.finish_synthesis()
    h.tick(10)
    assert h.synthesised()[-1] == "Anything else?"
    assert ("model_reply", "We open at nine. We close at five.") in h.events()
    assert h.session.dialogue.variables.get("reply") == "We open at nine. We close at five."


def test_a_barge_in_stops_the_stream_and_the_caller_is_heard() -> None:
    """The caller talks over the first sentence: the model's stream is cancelled, the ask's prompt
    is skipped and the agent listens; the record keeps what was said, marked interrupted."""
    h = Harness()
    h.session.start()
    h.on_sentence("Our opening hours depend on the branch you visit.")
    h.speech.syntheses[0].on_audio(b"\x01" * FRAME * 300)
    h.tick(20)
    h.tick(130, caller=tone_frame())
    assert h.session.barge_ins == 1
    assert h.cancelled == [True]
    assert h.session.turn_taker.listening
    assert "Anything else?" not in h.synthesised()
    reply = [e for e in h.session.record()["dialogue"] if e["kind"] == "model_reply"]
    assert reply and reply[0]["text"] == "Our opening hours depend on the branch you visit."
    assert reply[0]["data"]["interrupted"] == "true"


def test_an_error_before_any_sentence_takes_the_fallback() -> None:
    """No sentence and then a timeout: the step's on_failure is said, with the reason recorded."""
    h = Harness()
    h.session.start()
    h.reply.errback(ModelError("no answer within 5000 ms"))
    h.tick(1)
    assert h.synthesised() == ["Sorry, I cannot answer that."]
    assert ("model_failed", "no answer within 5000 ms") in h.events()


def test_hanging_up_stops_the_stream() -> None:
    """The call ends while the model still writes: its stream is cancelled."""
    h = Harness()
    h.session.start()
    h.on_sentence("We open at nine.")
    h.session.close("caller hung up")
    assert h.cancelled == [True]

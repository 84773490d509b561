"""CallSession carrying out webhook, record, bridged-transfer and call-limit actions (fake clock)."""
from __future__ import annotations

import wave

from twisted.internet import defer

from agent.dialplan.engine import DialogueSession, WebhookResult
from agent.dialplan.model import parse_dialplan
from agent.call.session import CallSession, SessionSettings
from media.vad import VadConfig
from tests.unit.test_session import FRAME, FakeControl, FakeReactor, FakeSpeech, tone_frame

DIALPLAN = """
version: 1
routes:
  - flow: main
flows:
  main:
    settings: {max_call_duration_s: 60}
    steps:
      - id: lookup
        webhook:
          url: "http://127.0.0.1:1/lookup"
          save_as: acct
          fields: [name]
          on_failure: failed
      - say: "Hello {{ acct.name }}."
      - id: message
        record:
          prompt: "Leave a message."
          file: "msg-{{ call_id }}.wav"
          max_ms: 2000
      - say: "Got {{ recording.duration_ms }} milliseconds."
      - id: desk
        transfer: {to: "sip:desk@127.0.0.1:5070", mode: bridged, timeout_ms: 5000, on_failure: busy}
      - id: busy
        say: "The desk is busy."
      - hangup: {reason: busy}
      - id: failed
        say: "Lookup failed."
      - hangup: {reason: failed}
"""


class Bridging(FakeControl):
    def __init__(self):
        super().__init__()
        self.bridges = []

    def bridge(self, uri, timeout_ms, on_result):
        self.bridges.append((uri, timeout_ms, on_result))


class StepHarness:
    def __init__(self, tmp_path, webhook_result=None):
        self.reactor = FakeReactor()
        self.speech = FakeSpeech()
        self.control = Bridging()
        self.requests = []
        self.webhook = defer.Deferred()
        dialplan = parse_dialplan(DIALPLAN, "test.yaml")
        self.dialogue = DialogueSession(dialplan, "main", {"caller": "1", "called": "2", "call_id": "c9",
                                                          "region": "local"})

        def webhooks(request):
            self.requests.append(request)
            return self.webhook

        self.session = CallSession("c9", self.dialogue, self.speech, self.control, self.reactor,
                                   settings=SessionSettings(vad=VadConfig(start_ms=50, end_ms=40)),
                                   webhooks=webhooks,
                                   recordings_dir=str(tmp_path))

    def tick(self, frames=1, caller=None):
        for _ in range(frames):
            self.reactor.rightNow += 0.01
            self.session.media.push_frame(caller if caller is not None else bytes(FRAME))
            self.session.playout.pull_frame(FRAME)
            self.reactor.advance(0)

    def synth_all(self):
        """Finish every streamed prompt (nothing is cached here)."""
        for s in self.speech.syntheses:
            if not getattr(s, "done", False):
                s.done = True
                s.on_audio(b"\x01" * FRAME * 3)
                s.on_done()

    def said(self):
        return [p.text for t in self.session.turns for p in t.agent_prompts]


def test_webhook_result_becomes_variables_and_record_writes_a_wav(tmp_path):
    """The webhook's fields reach the next prompt; the caller's message is recorded after a beep."""
    h = StepHarness(tmp_path)
    h.session.start()
    assert h.requests and h.requests[0].url == "http://127.0.0.1:1/lookup"
    h.webhook.callback(WebhookResult(ok=True, variables={"name": "Ann"}, status=200))
    h.tick(1)
    h.synth_all()
    h.tick(5)
    assert h.said()[0] == "Hello Ann."
    h.synth_all()  # "Leave a message."
    h.tick(40)     # prompt, then the 250 ms beep
    h.tick(50, caller=tone_frame())  # half a second of message
    h.session.on_dtmf("#")
    h.tick(1)
    path = tmp_path / "msg-c9.wav"
    with wave.open(str(path)) as w:
        assert w.getframerate() == 16000
        assert 500 <= w.getnframes() * 1000 // 16000 <= 700  # from the end of the beep to the key
    assert h.said()[-1].startswith("Got ")


def test_failed_webhook_takes_the_failure_path(tmp_path):
    """A webhook that fails leads to on_failure."""
    h = StepHarness(tmp_path)
    h.session.start()
    h.webhook.callback(WebhookResult(ok=False, reason="timeout"))
    h.tick(1)
    assert h.said() == ["Lookup failed."]


def test_bridged_transfer_failure_and_hangup_during_recording_keeps_the_message(tmp_path):
    """A busy bridge target takes on_failure; a hang-up mid-recording still writes the file."""
    h = StepHarness(tmp_path)
    h.session.start()
    h.webhook.callback(WebhookResult(ok=True, variables={"name": "Bo"}, status=200))
    h.tick(1)
    h.synth_all()
    h.tick(5)
    h.synth_all()
    h.tick(40)
    h.tick(2000 // 10 + 5, caller=tone_frame())  # the 2 s limit ends the recording
    h.synth_all()
    h.tick(5)
    uri, timeout_ms, on_result = h.control.bridges[0]
    assert (uri, timeout_ms) == ("sip:desk@127.0.0.1:5070", 5000)
    on_result(False, "486 Busy Here")
    h.tick(1)
    assert h.said()[-1] == "The desk is busy."
    assert (tmp_path / "msg-c9.wav").exists()

    h2 = StepHarness(tmp_path)
    h2.session.start()
    h2.webhook.callback(WebhookResult(ok=True, variables={"name": "Cy"}, status=200))
    h2.tick(1)
    h2.synth_all()
    h2.tick(5)
    h2.synth_all()
    h2.tick(40)
    h2.tick(30, caller=tone_frame())
    h2.session.close("disconnected 200")
    assert h2.session.recordings and h2.session.recordings[0].endswith("msg-c9.wav")


def test_call_limit_ends_the_call(tmp_path):
    """After the flow's max_call_duration_s the agent hangs up, whatever it was doing."""
    h = StepHarness(tmp_path)
    h.session.start()  # waiting on the webhook forever
    h.reactor.advance(60.0)
    assert h.control.hung_up == 1
    assert h.session.ended

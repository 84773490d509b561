"""Tools of a model step: the dialplan's webhook, transfer and hangup steps offered to the model,
run when it calls them, their results sent back, destructive ones confirmed by the caller, the
rounds of one turn bounded, and bad declarations refused at file:line."""
from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import defer
from twisted.logger import formatEvent, globalLogPublisher

from agent.call.session import CallSession, SessionSettings
from agent.dialplan.actions import AskModel, CallWebhook, Hangup, Listen, Say, Transfer, WebhookResult
from agent.dialplan.engine import DialogueSession
from agent.dialplan.model import DialplanError, parse_dialplan
from agent.integrations.chat_stream import ChatSettings, ModelReply, ToolCall, chat_payload
from media.vad import VadConfig
from tests.unit.test_session import FRAME, FakeControl, FakeReactor, FakeSpeech

DIALPLAN = """
version: 1
routes: [{flow: main}]
flows:
  main:
    needs_model: true
    steps:
      - id: assistant
        model:
          input: "{{ input }}"
          on_failure: sorry
          max_tool_rounds: 2
          tools:
            - step: balance
              description: "The caller's account balance"
              parameters:
                type: object
                properties: {account: {type: string}}
                required: [account]
            - agent
            - bye
      - id: q
        ask: {prompt: "Anything else?", slot: {name: question, type: text}}
      - hangup:
      - id: balance
        webhook:
          url: "http://127.0.0.1:9/balance"
          method: GET
          query: {account: "{{ args.account }}"}
          save_as: bal
          fields: [amount]
          on_failure: sorry
      - id: agent
        transfer: {to: "sip:agent@127.0.0.1"}
      - id: bye
        hangup: {reason: model_hangup}
      - id: sorry
        say: "Sorry, I cannot answer that."
      - hangup:
"""


def started() -> tuple[DialogueSession, AskModel]:
    dialogue = DialogueSession(parse_dialplan(DIALPLAN, "t.yaml"), "main", {"call_id": "c1", "input": "hi"})
    actions = dialogue.start()
    ask = actions[-1]
    assert isinstance(ask, AskModel)
    return dialogue, ask


def test_the_model_is_offered_the_declared_steps_as_functions() -> None:
    _, ask = started()
    payload = chat_payload(ChatSettings(), ask)
    names = [t["function"]["name"] for t in payload["tools"]]
    assert names == ["balance", "agent", "bye"]
    assert payload["tool_choice"] == "auto"
    balance = payload["tools"][0]["function"]
    assert balance["description"] == "The caller's account balance"
    assert balance["parameters"]["required"] == ["account"]
    assert "confirm" in payload["tools"][2]["function"]["description"]


def test_a_webhook_call_runs_and_its_answer_goes_back_to_the_model() -> None:
    dialogue, _ = started()
    actions = dialogue.on_model_tool_calls([ToolCall("call_1", "balance", '{"account": "42"}')])
    (webhook,) = actions
    assert isinstance(webhook, CallWebhook)
    assert "account=42" in webhook.request.url
    assert dialogue.model_tool_call == "call_1"
    (again,) = dialogue.on_webhook_result(WebhookResult(ok=True, status=200, variables={"amount": "12.50"}))
    assert isinstance(again, AskModel)
    payload = chat_payload(ChatSettings(), again)
    call, result = payload["messages"][-2:]
    assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "balance"
    assert result == {"role": "tool", "tool_call_id": "call_1",
                      "content": json.dumps({"ok": True, "result": {"amount": "12.50"}})}
    assert dialogue.variables["bal.amount"] == "12.50"
    # the model now answers in words: the flow goes on
    after = dialogue.on_model_reply("You have 12.50.")
    assert isinstance(after[0], Say) and after[0].text == "You have 12.50."


def test_webhook_errors_bad_arguments_and_unknown_functions_are_reported_to_the_model() -> None:
    dialogue, _ = started()
    actions = dialogue.on_model_tool_calls([ToolCall("c1", "balance", "{}"), ToolCall("c2", "nosuch", "{}"),
                                            ToolCall("c3", "balance", '{"account": "7"}')])
    (webhook,) = actions  # c1 and c2 fail without I/O, c3 runs
    assert isinstance(webhook, CallWebhook) and "account=7" in webhook.request.url
    (again,) = dialogue.on_webhook_result(WebhookResult(ok=False, reason="timeout after 2000 ms"))
    results = [json.loads(m["content"]) for m in again.followup if m["role"] == "tool"]
    assert "invalid arguments" in results[0]["error"] and "account" in results[0]["error"]
    assert results[1] == {"error": "unknown function 'nosuch'"}
    assert results[2] == {"error": "timeout after 2000 ms"}
    kinds = [(e.kind, e.data.get("call")) for e in dialogue.history if e.kind == "model_tool_result"]
    assert kinds == [("model_tool_result", "c1"), ("model_tool_result", "c2"), ("model_tool_result", "c3")]


def test_a_hangup_is_confirmed_and_done_on_yes() -> None:
    dialogue, _ = started()
    actions = dialogue.on_model_tool_calls([ToolCall("h1", "bye", "{}")], said="Goodbye then.")
    say, listen = actions
    assert isinstance(say, Say) and say.text == "Do you want to end the call?"
    assert isinstance(listen, Listen) and listen.slot_type == "yes_no"
    assert dialogue.expects_input
    (hangup,) = dialogue.on_transcript("yes")
    assert isinstance(hangup, Hangup) and hangup.reason == "model_hangup"
    assert dialogue.ended


def test_a_no_returns_to_the_model_and_silence_twice_too() -> None:
    dialogue, _ = started()
    dialogue.on_model_tool_calls([ToolCall("t1", "agent", "{}")])
    (again,) = dialogue.on_transcript("no thanks")
    assert isinstance(again, AskModel) and not dialogue.ended
    assert json.loads(again.followup[-1]["content"]) == {"error": "not done: the caller said no"}
    say, listen = dialogue.on_model_tool_calls([ToolCall("t2", "agent", "{}")])
    assert "put you through" in say.text
    repeat = dialogue.on_no_input()
    assert isinstance(repeat[-1], Listen)
    (third,) = dialogue.on_no_input()
    assert isinstance(third, AskModel) and third.tool_choice == "none"  # 2 rounds used
    assert json.loads(third.followup[-1]["content"]) == {"error": "not done: the caller did not confirm"}


def test_a_transfer_is_done_on_key_1() -> None:
    dialogue, _ = started()
    dialogue.on_model_tool_calls([ToolCall("t1", "agent", "{}")])
    (transfer,) = dialogue.on_dtmf("1")
    assert isinstance(transfer, Transfer) and transfer.target_uri == "sip:agent@127.0.0.1"


def test_rounds_are_bounded() -> None:
    dialogue, _ = started()
    for n in range(2):
        dialogue.on_model_tool_calls([ToolCall(f"c{n}", "nosuch", "{}")])
    actions = dialogue.on_model_tool_calls([ToolCall("c9", "nosuch", "{}")])
    assert isinstance(actions[0], Say) and actions[0].text == "Sorry, I cannot answer that."
    failed = [e for e in dialogue.history if e.kind == "model_failed"]
    assert failed and "2 round(s)" in failed[0].text


@pytest.mark.parametrize("tools, expected", [
    ("[balanse]", "t.yaml:13:19: 'tools' refers to unknown step 'balanse'"),
    ("[q]", "expected a webhook, transfer, queue or hangup step"),
    ("[{step: balance}]", "needs a 'description'"),
    ("[{step: balance, description: x, parameters: {type: string}}]", "expected a JSON schema of type 'object'"),
])
def test_bad_tool_declarations_are_refused_at_file_line(tools: str, expected: str) -> None:
    text = DIALPLAN.replace("""          tools:
            - step: balance
              description: "The caller's account balance"
              parameters:
                type: object
                properties: {account: {type: string}}
                required: [account]
            - agent
            - bye
""", f"          tools: {tools}\n")
    with pytest.raises(DialplanError) as error:
        parse_dialplan(text, "t.yaml")
    message = str(error.value)
    assert expected in message and "t.yaml:" in message, message


def test_the_session_runs_a_tool_call_and_asks_the_model_again() -> None:
    """Clock-driven call session: the streamed reply ends with a webhook call; the webhook runs,
    the model is asked again with its result, and its spoken answer goes to synthesis."""
    reactor = FakeReactor()
    speech = FakeSpeech()
    replies: list[defer.Deferred[Any]] = []
    asked: list[AskModel] = []
    hooks: list[Any] = []

    def model_stream(action: AskModel, on_sentence: Any) -> defer.Deferred[Any]:
        asked.append(action)
        d: defer.Deferred[Any] = defer.Deferred()
        replies.append(d)
        return d

    def webhooks(request: Any) -> defer.Deferred[Any]:
        hooks.append(request)
        return defer.succeed(WebhookResult(ok=True, status=200, variables={"amount": "3"}))

    dialogue = DialogueSession(parse_dialplan(DIALPLAN, "t.yaml"), "main", {"call_id": "c1", "input": "hi"})
    session = CallSession("c1", dialogue, speech, FakeControl(), reactor,
                          settings=SessionSettings(vad=VadConfig(start_ms=50, end_ms=40)),
                          model_stream=model_stream, webhooks=webhooks)
    session.start()
    logged: list[str] = []

    def observer(event: dict[str, Any]) -> None:
        logged.append(formatEvent(event))

    globalLogPublisher.addObserver(observer)
    try:
        replies[0].callback(ModelReply("", (ToolCall("x0", "balance", '{"acount": "9"}'),
                                            ToolCall("x1", "balance", '{"account": "9"}')), "tool_calls"))
        reactor.advance(0.1)
    finally:
        globalLogPublisher.removeObserver(observer)
    assert any("call c1 model tool call x0 (balance) not run: balance: " in line and "invalid arguments" in line
               for line in logged), logged
    assert any("call c1 model tool call x1 (balance): ok" in line for line in logged), logged
    assert len(hooks) == 1 and "account=9" in hooks[0].url
    assert len(asked) == 2 and asked[1].followup[-1]["tool_call_id"] == "x1"
    assert [e["kind"] for e in session.record()["dialogue"]].count("model_tool_result") == 2



class Streamed:
    """A call session whose model replies are Deferreds fired by the test (fake clock)."""

    def __init__(self, dialplan: str) -> None:
        self.reactor, self.speech, self.control = FakeReactor(), FakeSpeech(), FakeControl()
        self.asked: list[AskModel] = []
        self.sentences: list[Any] = []
        self.replies: list[defer.Deferred[Any]] = []
        dialogue = DialogueSession(parse_dialplan(dialplan, "t.yaml"), "main", {"call_id": "c1", "input": "hi"})
        self.session = CallSession("c1", dialogue, self.speech, self.control, self.reactor,
                                   settings=SessionSettings(vad=VadConfig(start_ms=50, end_ms=40)),
                                   model_stream=self.model_stream)

    def model_stream(self, action: AskModel, on_sentence: Any) -> defer.Deferred[Any]:
        self.asked.append(action)
        self.sentences.append(on_sentence)
        self.replies.append(defer.Deferred())
        return self.replies[-1]

    def play_out(self) -> None:
        for s in self.speech.syntheses:
            if not getattr(s, "done", False):
                s.done = True
                s.on_audio(b"\x01" * FRAME * 3)
                s.on_done()
        for _ in range(20):
            self.reactor.rightNow += 0.01
            self.session.media.push_frame(bytes(FRAME))
            self.session.playout.pull_frame(FRAME)
            self.reactor.advance(0)

    def synthesised(self) -> list[str]:
        return [s.text for s in self.speech.syntheses]


def test_the_session_asks_the_caller_before_a_hangup_the_model_asked_for() -> None:
    """The streamed reply says a sentence, then calls the hangup tool: the sentence is spoken, then
    the confirmation question, and the call is not ended while the question is open."""
    h = Streamed(DIALPLAN)
    h.session.start()
    h.sentences[0]("I can end the call for you.")
    h.play_out()
    h.replies[0].callback(ModelReply("I can end the call for you.", (ToolCall("h1", "bye", "{}"),), "tool_calls"))
    h.play_out()
    assert h.synthesised() == ["I can end the call for you.", "Do you want to end the call?"]
    assert h.session.dialogue.expects_input and not h.session.dialogue.ended
    assert h.control.hung_up == 0


def test_a_step_with_say_false_and_tools_streams_silently() -> None:
    h = Streamed(DIALPLAN.replace("          max_tool_rounds: 2\n", "          max_tool_rounds: 2\n          say: false\n"))
    h.session.start()
    assert len(h.asked) == 1 and h.asked[0].tools and not h.asked[0].say
    h.sentences[0]("Not to be spoken.")
    h.play_out()
    h.replies[0].callback(ModelReply("Not to be spoken."))
    h.play_out()
    assert "Not to be spoken." not in h.synthesised()
    assert h.session.dialogue.variables["reply"] == "Not to be spoken."

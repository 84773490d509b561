"""The streamed dialogue model against a loopback server speaking the real chat-completions
streaming protocol (server-sent ``chat.completion.chunk`` events, ``[DONE]``) at a realistic token
rate: sentences arrive while the model writes, the request carries the key, model, sampling,
system prompt and bounded history, failures are named, a cancel drops the connection, and a
real call hears the model's reply."""
from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
import time
from typing import Any

import pytest

from agent.dialplan.actions import AskModel
from agent.integrations.chat_stream import ChatSettings, ModelError, stream_reply
from tests.integration.conftest import ROOT, run_caller, start_agent, stop_agent
from tests.integration.test_webhook_http import on_reactor, reactor_in_thread

pytestmark = pytest.mark.integration


def load_chat_server() -> Any:
    spec = importlib.util.spec_from_file_location("chat_server", os.path.join(ROOT, "ops", "chat_server.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chat_server"] = module
    spec.loader.exec_module(module)
    return module


chat_server = load_chat_server()
REPLY = "We are open from nine in the morning. We close at five in the afternoon, Monday to Friday."


@pytest.fixture(scope="module")
def chat() -> Any:
    reactor = reactor_in_thread()
    server = chat_server.ChatServer([chat_server.Rule(when="stall", reply=REPLY, stall_after=3),
                                     chat_server.Rule(when="broken", status=500),
                                     chat_server.Rule(reply=REPLY)],
                                    tokens_per_s=40.0, ttft_ms=100.0, api_key="sk-test", reactor=reactor)
    on_reactor(server.listen)
    yield server
    on_reactor(server.port.stopListening)


SETTINGS = ChatSettings(api_key="sk-test", model="llama-3.1-8b-instruct", temperature=0.3, max_tokens=120,
                        history_turns=4)


def ask(text: str, history: int = 0, timeout_ms: int = 2000) -> AskModel:
    lines = tuple(("caller" if i % 2 == 0 else "agent", f"line {i}") for i in range(history))
    return AskModel("You are the bank's assistant.", text, lines, timeout_ms)


def run(chat: Any, action: AskModel, settings: ChatSettings = SETTINGS) -> tuple[Any, list[tuple[float, str]], float]:
    """Stream one reply; (reply or error, [(seconds since start, sentence)], total seconds)."""
    import threading

    sentences: list[tuple[float, str]] = []
    done = threading.Event()
    out: list[Any] = []
    started = time.monotonic()

    def start() -> None:
        d = stream_reply(reactor_in_thread(), chat.url, settings, action,
                         on_sentence=lambda s: sentences.append((time.monotonic() - started, s)))
        d.addBoth(lambda r: (out.append(getattr(r, "value", r)), done.set()))

    reactor_in_thread().callFromThread(start)
    assert done.wait(20.0)
    return out[0], sentences, time.monotonic() - started


def test_sentences_arrive_while_the_model_writes(chat: Any) -> None:
    """At 40 tokens/s the first sentence is handed over well before the reply ends; both
    sentences come in order, and the reply is the whole text."""
    reply, sentences, total = run(chat, ask("when are you open"))
    assert reply.text == REPLY, reply
    assert [s for _, s in sentences] == ["We are open from nine in the morning.",
                                         "We close at five in the afternoon, Monday to Friday."]
    first_at = sentences[0][0]
    assert first_at < total - 0.2, (first_at, total)  # the rest took at least ~10 more tokens


def test_the_request_is_a_streamed_chat_completion_with_credentials(chat: Any) -> None:
    """Bearer key, model name, temperature, max_tokens, stream, the system prompt first, and only
    the last history_turns lines of the conversation."""
    run(chat, ask("hello", history=10))
    sent = chat.requests[-1]
    body = sent["body"]
    assert sent["authorization"] == "Bearer sk-test"
    assert (body["model"], body["temperature"], body["max_tokens"], body["stream"]) == (
        "llama-3.1-8b-instruct", 0.3, 120, True)
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": "You are the bank's assistant."}
    assert [m["content"] for m in messages[1:-1]] == ["line 6", "line 7", "line 8", "line 9"]
    assert messages[-1] == {"role": "user", "content": "hello"}


def test_failures_are_named(chat: Any) -> None:
    """A stalled stream times out, a 500 and a wrong key are HTTP errors with the server's words."""
    stalled, sentences, total = run(chat, ask("stall please", timeout_ms=500))
    assert isinstance(stalled, ModelError) and str(stalled) == "no answer within 500 ms", stalled
    assert total < 3.0 and sentences == []
    broken, _, _ = run(chat, ask("broken"))
    assert isinstance(broken, ModelError) and str(broken).startswith("dialogue model answered HTTP 500"), broken
    wrong, _, _ = run(chat, ask("hello"), ChatSettings(api_key="nope"))
    assert isinstance(wrong, ModelError) and "HTTP 401" in str(wrong) and "invalid api key" in str(wrong), wrong


def test_cancelling_drops_the_connection(chat: Any) -> None:
    """A barge-in cancels the reply after its first sentence: the model server sees the stream
    dropped long before its end, and no sentence is handed over after the cancel."""
    import threading

    sentences: list[str] = []
    stopped = threading.Event()
    dropped_before = len(chat.dropped)

    def start() -> None:
        holder: list[Any] = []

        def on_sentence(text: str) -> None:
            sentences.append(text)
            if len(sentences) == 1:
                holder[0].cancel()

        d = stream_reply(reactor_in_thread(), chat.url, SETTINGS, ask("when are you open"), on_sentence=on_sentence)
        holder.append(d)
        d.addErrback(lambda f: stopped.set())

    reactor_in_thread().callFromThread(start)
    assert stopped.wait(10.0)
    deadline = time.monotonic() + 5.0
    while len(chat.dropped) == dropped_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(chat.dropped) == dropped_before + 1
    assert chat.dropped[-1] < len(chat_server.tokens(REPLY)) - 5, chat.dropped
    time.sleep(0.5)
    assert sentences == ["We are open from nine in the morning."]


DIALPLAN = """\
version: 1
routes: [{flow: main}]
flows:
  main:
    needs_model: true
    settings: {system_prompt: "You answer questions about the bank's opening hours. Be brief."}
    steps:
      - id: q
        ask: {prompt: "Ask me a question.", slot: {name: question, type: text}}
      - model: {input: "{{ question }}", timeout_ms: 3000, on_failure: sorry}
      - hangup:
      - id: sorry
        say: "Sorry, I cannot answer that."
      - hangup:
"""


def test_a_real_call_hears_the_streamed_reply(tmp_path, chat: Any) -> None:
    """Embedded single-region set-up with a top-level dialogue section: the caller's question goes
    to the model with its key, the first sentence is spoken while the rest streams, the caller
    hears the reply, and the call record keeps it."""
    dialplan = tmp_path / "assistant.yaml"
    dialplan.write_text(textwrap.dedent(DIALPLAN))
    config = tmp_path / "config.yaml"
    config.write_text(f"dialogue:\n  url: {chat.url}\n  api_key: {{env: TEST_CHAT_KEY}}\n"
                      "  model: llama-3.1-8b-instruct\n  temperature: 0.2\n")
    os.environ["TEST_CHAT_KEY"] = "sk-test"
    try:
        agent = start_agent(str(tmp_path), "--config", str(config), "--dialplan", str(dialplan))
    finally:
        del os.environ["TEST_CHAT_KEY"]
    try:
        before = len(chat.requests)
        code, report, out = run_caller(agent.uri, "--say", "when are you open")
        assert code == 0, out + agent.log()[-3000:]
        (turn,) = report["turns"]  # type: ignore[misc]
        heard = set(str(turn["agent_text"]).split())
        assert len(heard & {"open", "nine", "morning", "close", "five", "afternoon", "monday", "friday"}) >= 3, report
        sent = chat.requests[before]
        assert sent["authorization"] == "Bearer sk-test" and sent["body"]["model"] == "llama-3.1-8b-instruct"
        assert sent["body"]["messages"][0]["content"].startswith("You answer questions about the bank")
        record = agent.wait_for(lambda: agent.records(), 20.0, "the call record")[-1]
        replies = [e for e in record["dialogue"] if e["kind"] == "model_reply"]
        assert replies and replies[0]["text"] == REPLY, record["dialogue"]
        assert "model: first sentence" in agent.log()
    finally:
        assert stop_agent(agent) == 0

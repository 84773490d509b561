"""The dialogue model over the OpenAI-compatible chat-completions API, streamed (``stream: true``).

:func:`stream_reply` POSTs the conversation through the agent's HTTP client and reads the
server-sent events as they come: each complete sentence of the reply goes to *on_sentence* at
once (so it can be synthesised while the model writes on), tool calls are gathered, and the
Deferred fires with a :class:`ModelReply` when the model is done. Cancelling the Deferred (a
barge-in) drops the connection. A wait over the step's timeout for the first or the next piece
of the reply, an HTTP error, a refused certificate or a malformed stream fail it with
:class:`ModelError`, whose text the call record keeps.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet import defer

from agent.dialplan.engine import AskModel
from agent.integrations.http import TIMEOUT, HttpClient, HttpError
from agent.integrations.streaming_text import SentenceSplitter, SseParser
from agent.integrations.tls import TlsSettings

__all__ = ["ChatSettings", "ModelError", "ModelReply", "ToolCall", "chat_payload", "stream_reply"]

USER_AGENT = b"openclaw-voice-dialogue/1"


class ModelError(Exception):
    """The model gave no usable reply; ``str()`` says why."""


@dataclass(frozen=True)
class ChatSettings:
    """The ``dialogue:`` config section: where the model is and how it is asked."""

    #: chat-completions URL (a region's ``dialogue`` URL takes its place for calls there)
    url: str = ""
    #: sent as ``Authorization: Bearer <api_key>`` (from a secret; "" sends none)
    api_key: str = field(default="", repr=False)
    model: str = "default"
    temperature: float | None = None
    max_tokens: int = 200
    #: the most earlier turns (caller and agent lines) sent with each request
    history_turns: int = 20


@dataclass(frozen=True)
class ToolCall:
    """A function the model asked the agent to run."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelReply:
    """What the model said (all of it) and asked to run."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = ""


def chat_messages(action: AskModel, history_turns: int) -> list[dict[str, Any]]:
    """``messages``: the instructions, the last *history_turns* lines of the conversation, the
    caller's words, then this turn's tool calls and their results."""
    messages: list[dict[str, Any]] = []
    if action.instructions:
        messages.append({"role": "system", "content": action.instructions})
    history = action.history[-history_turns:] if history_turns > 0 else ()
    for role, text in history:
        messages.append({"role": "assistant" if role == "agent" else "user", "content": text})
    messages.append({"role": "user", "content": action.text})
    messages.extend(action.followup)
    return messages


def chat_payload(settings: ChatSettings, action: AskModel, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": settings.model, "messages": chat_messages(action, settings.history_turns),
                               "max_tokens": settings.max_tokens, "stream": True}
    if settings.temperature is not None:
        payload["temperature"] = settings.temperature
    tools = tools if tools is not None else list(action.tools)
    if tools:
        payload["tools"] = tools
        payload["tool_choice"] = action.tool_choice
    return payload


class _ReplyReader:
    """Chunks of the event stream in; sentences out through *on_sentence*; the reply at the end."""

    def __init__(self, on_sentence: Callable[[str], None]) -> None:
        self.events = SseParser()
        self.sentences = SentenceSplitter()
        self.on_sentence = on_sentence
        self.parts: list[str] = []
        self.tools: dict[int, dict[str, str]] = {}
        self.finish_reason = ""
        self.done = False

    def feed(self, data: bytes) -> None:
        for event in self.events.feed(data):
            self._event(event)

    def _event(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
            choice = chunk["choices"][0] if chunk.get("choices") else {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ModelError(f"dialogue model stream is not chat-completion chunks: {data[:80]!r}") from None
        if "error" in chunk:
            raise ModelError(f"dialogue model error: {str(chunk['error'])[:160]}")
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.parts.append(text)
            for sentence in self.sentences.feed(text):
                self.on_sentence(sentence)
        for call in delta.get("tool_calls") or ():
            entry = self.tools.setdefault(int(call.get("index", 0)), {"id": "", "name": "", "arguments": ""})
            entry["id"] = call.get("id") or entry["id"]
            function = call.get("function") or {}
            entry["name"] += function.get("name") or ""
            entry["arguments"] += function.get("arguments") or ""
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])

    def reply(self) -> ModelReply:
        rest = self.sentences.flush()
        if rest:
            self.on_sentence(rest)
        tools = tuple(ToolCall(t["id"], t["name"], t["arguments"]) for _, t in sorted(self.tools.items()))
        return ModelReply("".join(self.parts).strip(), tools, self.finish_reason)


def stream_reply(reactor: Any, url: str, settings: ChatSettings, action: AskModel, *,
                 on_sentence: Callable[[str], None], tools: list[dict[str, Any]] | None = None,
                 agent: Any = None, tls: TlsSettings | None = None) -> defer.Deferred[ModelReply]:
    """Ask the model at *url*; see the module's description. Must run on the reactor thread."""
    client = HttpClient(reactor, agent=agent, user_agent=USER_AGENT, tls=tls,
                        connect_timeout_s=max(action.timeout_ms / 1000.0, 0.1))
    reader = _ReplyReader(on_sentence)
    headers = [("Accept", "text/event-stream")]
    if settings.api_key:
        headers.append(("Authorization", f"Bearer {settings.api_key}"))
    timeout_s = action.timeout_ms / 1000.0
    failed: list[ModelError] = []

    def on_data(data: bytes) -> None:
        if failed:
            return
        try:
            reader.feed(data)
        except ModelError as exc:
            failed.append(exc)
            d.cancel()

    d = client.request_stream("POST", url, on_data=on_data, timeout_s=timeout_s, idle_timeout_s=timeout_s,
                              json=chat_payload(settings, action, tools), headers=headers)

    def done(status: int) -> ModelReply:
        for event in reader.events.close():
            reader._event(event)
        reply = reader.reply()
        if not reply.text and not reply.tool_calls:
            raise ModelError("dialogue model gave an empty reply")
        return reply

    def failure(f: Any) -> Any:
        if failed:
            raise failed[0]
        exc = f.value
        if isinstance(exc, HttpError):
            if exc.kind == TIMEOUT:
                raise ModelError(f"no answer within {action.timeout_ms} ms")
            if exc.status is not None:
                raise ModelError(f"dialogue model answered {exc.reason.replace('http', 'HTTP', 1)}")
            raise ModelError(f"cannot reach the dialogue model: {exc.reason}")
        return f

    d.addCallbacks(done, failure)
    return d

#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server for tests, benches and trying a flow.

It speaks the real streaming protocol: ``POST /v1/chat/completions`` with ``"stream": true``
answers ``text/event-stream`` with one ``data: {chat.completion.chunk}`` event per token, at a
set rate after a set time to first token, then ``data: [DONE]``; without ``stream`` it answers
one ``chat.completion``. ``GET /v1/models`` lists the model. Replies come from rules (the first
whose ``when`` is in the caller's last message, case-insensitive; a rule without ``when``
matches anything), and a rule may ask for a tool call instead of text, or fail (``status``).
After a tool result (the last message has role ``tool``) only rules whose ``after_tool`` names
that function match, and their ``reply`` may use the result's fields (``{amount}``).
Every request is kept (``requests``) so tests can check what the agent sent.

    python ops/chat_server.py --listen 127.0.0.1:8089 --rules rules.yaml --tokens-per-s 40
    rules.yaml:  - {when: "opening hours", reply: "We open at nine. We close at five."}
                 - {when: "balance", tool: balance, arguments: {account: "42"}}
                 - {after_tool: balance, reply: "Your balance is {amount} dollars."}
                 - {tool: hangup, arguments: {}}
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import reactor as global_reactor
from twisted.internet.task import deferLater
from twisted.web import resource, server

_TOKEN = re.compile(r"\s*[^\s]{1,4}|\s+")


def tokens(text: str) -> list[str]:
    """Pieces of about a token each (a word's start with its leading space, 4 characters at most)."""
    return _TOKEN.findall(text)


@dataclass
class Rule:
    reply: str = ""
    when: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    #: stop sending after this many tokens and hold the connection (a stalled model)
    stall_after: int | None = None
    #: matches only right after a result of this function
    after_tool: str | None = None


@dataclass
class ChatServer:
    """The site; ``rules``, ``tokens_per_s`` and ``ttft_ms`` may change between requests."""

    rules: list[Rule]
    tokens_per_s: float = 40.0
    ttft_ms: float = 150.0
    model: str = "scripted"
    api_key: str | None = None
    reactor: Any = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: wall-clock time each streamed reply's first complete sentence was sent (for benches)
    sentence_sent_at: list[float] = field(default_factory=list)
    #: streams the client dropped before their end, and how many tokens each had been sent
    dropped: list[int] = field(default_factory=list)
    port: Any = None

    def rule_for(self, messages: list[dict[str, Any]]) -> Rule:
        if messages and messages[-1].get("role") == "tool":
            return self._after_tool(messages)
        last = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        for rule in self.rules:
            if rule.after_tool is None and (rule.when is None or rule.when.lower() in str(last).lower()):
                return rule
        return Rule(reply="I am not sure.")

    def _after_tool(self, messages: list[dict[str, Any]]) -> Rule:
        result = messages[-1]
        names = {c.get("id"): (c.get("function") or {}).get("name")
                 for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or ()}
        name = names.get(result.get("tool_call_id"))
        for rule in self.rules:
            if rule.after_tool is not None and rule.after_tool == name:
                try:
                    content = json.loads(result.get("content") or "{}")
                    fields = content.get("result") or {}
                    return Rule(reply=rule.reply.format(**fields) if fields else rule.reply)
                except (ValueError, KeyError, IndexError, AttributeError):
                    return Rule(reply="That did not work.")
        return Rule(reply="Done.")

    def site(self) -> server.Site:
        return server.Site(_Root(self))

    def listen(self, port: int = 0, interface: str = "127.0.0.1") -> Any:
        self.reactor = self.reactor or global_reactor
        self.port = self.reactor.listenTCP(port, self.site(), interface=interface)
        return self.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port.getHost().port}/v1/chat/completions"


class _Root(resource.Resource):
    isLeaf = True

    def __init__(self, chat: ChatServer) -> None:
        super().__init__()
        self.chat = chat

    def render_GET(self, request: Any) -> bytes:  # noqa: N802
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"object": "list", "data": [{"id": self.chat.model, "object": "model"}]}).encode()

    def render_POST(self, request: Any) -> Any:  # noqa: N802
        chat = self.chat
        try:
            body = json.loads(request.content.read() or b"{}")
        except ValueError:
            request.setResponseCode(400)
            return b'{"error": {"message": "bad json"}}'
        auth = request.getHeader("authorization")
        chat.requests.append({"body": body, "authorization": auth, "path": request.path.decode()})
        request.setHeader(b"content-type", b"application/json")
        if chat.api_key is not None and auth != f"Bearer {chat.api_key}":
            request.setResponseCode(401)
            return b'{"error": {"message": "invalid api key"}}'
        rule = chat.rule_for(body.get("messages") or [])
        if rule.status != 200:
            request.setResponseCode(rule.status)
            return json.dumps({"error": {"message": f"scripted {rule.status}"}}).encode()
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": rule.reply}
            return json.dumps({"object": "chat.completion", "model": chat.model,
                               "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"cache-control", b"no-cache")
        _stream(chat, request, rule)
        return server.NOT_DONE_YET


def _chunk(chat: ChatServer, delta: dict[str, Any], finish: str | None = None) -> bytes:
    event = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": chat.model,
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _stream(chat: ChatServer, request: Any, rule: Rule) -> None:
    clock = chat.reactor
    gone: list[bool] = []
    pieces = tokens(rule.reply) if rule.tool is None else []
    interval = 1.0 / chat.tokens_per_s if chat.tokens_per_s > 0 else 0.0
    state = {"i": 0, "text": "", "sentence_sent": False}

    def lost(_: Any) -> None:
        gone.append(True)
        chat.dropped.append(state["i"])

    request.notifyFinish().addErrback(lost)

    def send(data: bytes) -> None:
        if not gone:
            request.write(data)

    def first() -> None:
        send(_chunk(chat, {"role": "assistant", "content": ""}))
        step()

    def step() -> None:
        if gone:
            return
        i = state["i"]
        if rule.stall_after is not None and i >= rule.stall_after:
            return  # hold the connection, send nothing more
        if i < len(pieces):
            state["i"] = i + 1
            send(_chunk(chat, {"content": pieces[i]}))
            state["text"] += pieces[i]
            if not state["sentence_sent"] and re.search(r"[.!?](\s|$)", state["text"]):
                state["sentence_sent"] = True
                chat.sentence_sent_at.append(time.time())
            deferLater(clock, interval, step)
            return
        if rule.tool is not None:
            call = {"index": 0, "id": f"call_{len(chat.requests)}", "type": "function",
                    "function": {"name": rule.tool, "arguments": json.dumps(rule.arguments)}}
            send(_chunk(chat, {"tool_calls": [call]}))
            send(_chunk(chat, {}, "tool_calls"))
        else:
            send(_chunk(chat, {}, "stop"))
        send(b"data: [DONE]\n\n")
        if not gone:
            request.finish()

    deferLater(clock, chat.ttft_ms / 1000.0, first)


def load_rules(path: str) -> list[Rule]:
    import yaml

    with open(path, encoding="utf-8") as handle:
        items = yaml.safe_load(handle) or []
    return [Rule(**item) for item in items]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:8089")
    parser.add_argument("--rules", help="YAML list of {when | after_tool, reply | tool, arguments, status}")
    parser.add_argument("--tokens-per-s", type=float, default=40.0)
    parser.add_argument("--ttft-ms", type=float, default=150.0)
    parser.add_argument("--api-key", help="require 'Authorization: Bearer KEY'")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    rules = load_rules(args.rules) if args.rules else [Rule(reply="Hello. This is a scripted reply.")]
    chat = ChatServer(rules, tokens_per_s=args.tokens_per_s, ttft_ms=args.ttft_ms, api_key=args.api_key)
    chat.listen(int(port), host)
    print(f"chat server listening on {chat.url}", flush=True)
    global_reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

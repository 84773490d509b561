"""Ask a region's dialogue model (an OpenAI-compatible chat-completions endpoint) for a reply."""
from __future__ import annotations

import json
from typing import Any

from twisted.internet import defer, error as net_error

from agent.dialplan.engine import AskModel
from agent.integrations.http import TIMEOUT, TLS, HttpClient, HttpError
from agent.integrations.tls import TlsSettings


class ModelError(Exception):
    pass


def chat_messages(action: AskModel) -> list[dict[str, str]]:
    """The chat-completions ``messages`` for *action*: instructions, history, then the caller's words."""
    messages = []
    if action.instructions:
        messages.append({"role": "system", "content": action.instructions})
    for role, text in action.history:
        messages.append({"role": "assistant" if role == "agent" else "user", "content": text})
    messages.append({"role": "user", "content": action.text})
    return messages


@defer.inlineCallbacks
def ask_model(reactor: Any, url: str, action: AskModel, model: str = "default", agent: Any = None,
              tls: TlsSettings | None = None) -> Any:
    """POST the conversation to *url*; fire with the reply text or fail with :class:`ModelError`."""
    client = HttpClient(reactor, agent=agent, connect_timeout_s=action.timeout_ms / 1000.0, tls=tls)
    payload = {"model": model, "messages": chat_messages(action), "max_tokens": 200}
    try:
        response = yield client.request("POST", url, json=payload, timeout_s=action.timeout_ms / 1000.0)
    except HttpError as e:
        if e.kind == TIMEOUT and not isinstance(e.cause, net_error.TimeoutError):  # our timer, not the connect's
            raise ModelError(f"no answer within {action.timeout_ms} ms") from None
        if e.kind == TLS:
            raise ModelError(f"cannot reach the dialogue model: {e.reason}") from None
        raise ModelError(f"cannot reach the dialogue model: {e.cause or e}") from None
    if response.status >= 300:
        raise ModelError(f"dialogue model answered HTTP {response.status}")
    try:
        reply = json.loads(response.body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ModelError("dialogue model answer is not a chat completion") from None
    if not isinstance(reply, str) or not reply.strip():
        raise ModelError("dialogue model gave an empty reply")
    return reply.strip()

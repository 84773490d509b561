"""Ask a region's dialogue model (an OpenAI-compatible chat-completions endpoint) for a reply."""
from __future__ import annotations

import json
from typing import Any

from twisted.internet import defer
from twisted.web.client import Agent, readBody
from twisted.web.http_headers import Headers

from agent.dialplan.engine import AskModel


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
def ask_model(reactor: Any, url: str, action: AskModel, model: str = "default", agent: Any = None) -> Any:
    """POST the conversation to *url*; fire with the reply text or fail with :class:`ModelError`."""
    agent = agent or Agent(reactor, connectTimeout=action.timeout_ms / 1000.0)
    body = json.dumps({"model": model, "messages": chat_messages(action), "max_tokens": 200}).encode()
    from twisted.web.client import FileBodyProducer
    import io

    d = agent.request(b"POST", url.encode(), Headers({b"content-type": [b"application/json"]}),
                      FileBodyProducer(io.BytesIO(body)))
    timer = reactor.callLater(action.timeout_ms / 1000.0, d.cancel)
    try:
        response = yield d
        raw = yield readBody(response)
    except defer.CancelledError:
        raise ModelError(f"no answer within {action.timeout_ms} ms") from None
    except Exception as e:  # noqa: BLE001 -- connection errors of every kind
        raise ModelError(f"cannot reach the dialogue model: {e}") from None
    finally:
        if timer.active():
            timer.cancel()
    if response.code >= 300:
        raise ModelError(f"dialogue model answered HTTP {response.code}")
    try:
        reply = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ModelError("dialogue model answer is not a chat completion") from None
    if not isinstance(reply, str) or not reply.strip():
        raise ModelError("dialogue model gave an empty reply")
    return reply.strip()

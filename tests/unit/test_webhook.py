"""Tests for agent.integrations.webhook without a network: response interpretation, retry timing on a fake
clock with a fake agent, and the mock executor used by the simulator."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import defer, error
from twisted.internet.task import Clock
from twisted.web.client import ResponseNeverReceived

from agent.dialplan.engine import WebhookRequest, WebhookResult
from agent.integrations.webhook import MockWebhooks, call_webhook, flatten_json, interpret_response


def request(**changes: Any) -> WebhookRequest:
    values: dict[str, Any] = dict(
        step="lookup", url="https://api.example/accounts", method="POST",
        headers=(("Authorization", "Bearer t"),), body=b'{"account": "1"}',
        timeout_ms=1000, retries=2, retry_backoff_ms=200,
    )
    values.update(changes)
    return WebhookRequest(**values)


def test_flatten_json_makes_dotted_text_variables() -> None:
    """Nested objects and lists flatten to dotted names; scalars become their text."""
    assert flatten_json({"a": {"b": 1.0, "c": [True, None]}, "d e": 2.5, "9x": "y"}) == {
        "a.b": "1", "a.c.length": "2", "a.c.0": "true", "a.c.1": "", "d_e": "2.5", "_9x": "y",
    }


@pytest.mark.parametrize(
    ("status", "body", "ok", "reason", "variables"),
    [
        (200, b'{"name": "Ann"}', True, "", {"name": "Ann"}),
        (204, b"", True, "", {}),
        (503, b"down", False, "http 503", {}),
        (404, b'{"error": "x"}', False, "http 404", {}),
        (200, b"<html>", False, "bad json: Expecting value: line 1 column 1 (char 0)", {}),
        (200, b"[1, 2]", False, "bad json: expected an object, found list", {}),
    ],
)
def test_interpret_response(status: int, body: bytes, ok: bool, reason: str,
                            variables: dict[str, str]) -> None:
    """2xx with a JSON object (or nothing) succeeds; other statuses and bad JSON fail."""
    result = interpret_response(status, body)
    assert (result.ok, result.reason, dict(result.variables), result.status) == (
        ok, reason, variables, status)


class FakeResponse:
    """Enough of IResponse for readBody."""

    def __init__(self, code: int, body: bytes) -> None:
        self.code = code
        self.phrase = b"Reason"
        self.version = (b"HTTP", 1, 1)
        self.body = body
        self.length = len(body)

    def deliverBody(self, protocol: Any) -> None:
        from twisted.web.client import ResponseDone
        from twisted.python.failure import Failure

        protocol.makeConnection(_NoTransport())
        protocol.dataReceived(self.body)
        protocol.connectionLost(Failure(ResponseDone()))


class _NoTransport:
    def stopProducing(self) -> None:
        pass

    def abortConnection(self) -> None:
        pass

    def loseConnection(self) -> None:
        pass


class ScriptedAgent:
    """An IAgent whose answers are scripted per attempt: a response, an error or 'hang'."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[bytes, bytes, Any, bytes | None]] = []
        self.cancelled = 0

    def request(self, method: bytes, uri: bytes, headers: Any = None, producer: Any = None) -> Any:
        body = None
        if producer is not None:
            chunks: list[bytes] = []
            producer.startProducing(type("C", (), {"write": lambda self, b: chunks.append(b)})())
            body = b"".join(chunks)
        self.requests.append((method, uri, headers, body))
        answer = self.answers.pop(0)
        if answer == "hang":
            def cancel(d: defer.Deferred[Any]) -> None:
                self.cancelled += 1
            return defer.Deferred(cancel)
        if isinstance(answer, Exception):
            return defer.fail(answer)
        return defer.succeed(answer)


def run(clock: Clock, d: defer.Deferred[Any], step_s: float = 0.05, limit_s: float = 30) -> Any:
    results: list[Any] = []
    d.addBoth(results.append)
    elapsed = 0.0
    while not results and elapsed < limit_s:
        clock.advance(step_s)
        elapsed += step_s
    assert results, "the webhook call never finished"
    return results[0]


def test_success_sends_body_and_headers_and_flattens_the_answer() -> None:
    """One attempt: the JSON body and headers go out; fields come back as variables."""
    clock = Clock()
    agent = ScriptedAgent(FakeResponse(200, json.dumps({"balance": 12.5}).encode()))
    result = run(clock, call_webhook(clock, request(), agent))
    assert result == WebhookResult(True, {"balance": "12.5"}, 200, "", 1, 0.0)
    method, uri, headers, body = agent.requests[0]
    assert (method, uri, body) == (b"POST", b"https://api.example/accounts", b'{"account": "1"}')
    assert headers.getRawHeaders(b"Authorization") == [b"Bearer t"]


def test_5xx_is_retried_with_doubling_backoff_then_succeeds() -> None:
    """A 503 then a timeout are retried after 250 ms and 500 ms; the third attempt wins."""
    clock = Clock()
    agent = ScriptedAgent(FakeResponse(503, b""), "hang", FakeResponse(200, b'{"ok": true}'))
    d = call_webhook(clock, request(retry_backoff_ms=250), agent)
    clock.advance(0.125)
    assert len(agent.requests) == 1
    clock.advance(0.125)  # t = 0.25: first retry
    assert len(agent.requests) == 2
    clock.advance(0.5)
    assert agent.cancelled == 0
    clock.advance(0.5)  # t = 1.25: the second attempt times out
    assert agent.cancelled == 1
    clock.advance(0.25)
    assert len(agent.requests) == 2
    clock.advance(0.25)  # t = 1.75: second retry, after twice the backoff
    assert len(agent.requests) == 3
    result = run(clock, d)
    assert result.ok and result.attempts == 3 and result.elapsed_ms == 1750.0


def test_exhausted_retries_report_the_last_reason() -> None:
    """After 1 + retries attempts the result fails with the last problem."""
    clock = Clock()
    agent = ScriptedAgent(error.ConnectionRefusedError(), ResponseNeverReceived([]), "hang")
    result = run(clock, call_webhook(clock, request(), agent))
    assert (result.ok, result.reason, result.attempts) == (False, "timeout", 3)


def test_client_errors_and_bad_json_are_not_retried() -> None:
    """A 4xx or an unreadable body is final: retrying would give the same answer."""
    clock = Clock()
    agent = ScriptedAgent(FakeResponse(404, b"{}"), FakeResponse(200, b"{}"))
    result = run(clock, call_webhook(clock, request(), agent))
    assert (result.ok, result.reason, len(agent.requests)) == (False, "http 404", 1)
    agent = ScriptedAgent(FakeResponse(200, b"nope"), FakeResponse(200, b"{}"))
    result = run(clock, call_webhook(clock, request(), agent))
    assert result.reason.startswith("bad json") and len(agent.requests) == 1


def test_unexpected_errors_become_failure_results() -> None:
    """A programming error in the agent still yields a result, not an exception."""
    clock = Clock()
    agent = ScriptedAgent(ValueError("boom"))
    result = run(clock, call_webhook(clock, request(retries=3), agent))
    assert not result.ok and result.reason == "error: ValueError: boom"
    assert len(agent.requests) == 1


# --------------------------------------------------------------------------- mocks


def test_mock_rules_match_by_step_url_and_body_subset() -> None:
    """The first rule whose step, URL and body subset match answers; others fail clearly."""
    mocks = MockWebhooks.from_data({"webhooks": [
        {"step": "lookup", "body": {"account": "1"}, "response": {"json": {"name": "Ann"}}},
        {"url": "https://api.example/accounts", "fail": "timeout"},
    ]})
    assert mocks(request()).variables == {"name": "Ann"}
    assert mocks(request(body=b'{"account": "2"}')).reason == "timeout"
    missing = mocks(request(url="https://other.example/x", step="other"))
    assert missing.reason == "no mock for POST https://other.example/x"
    assert len(mocks.calls) == 3


def test_mock_times_limits_a_rule_and_raw_bodies_test_bad_json() -> None:
    """'times' lets a later rule take over; a raw body goes through JSON interpretation."""
    mocks = MockWebhooks.from_data([
        {"step": "lookup", "times": 1, "response": {"status": 503}},
        {"step": "lookup", "response": {"body": "not json"}},
    ])
    assert mocks(request()).reason == "http 503"
    assert mocks(request()).reason.startswith("bad json")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"hooks": []}, "m.yaml: unknown key(s) ['hooks']; expected 'webhooks'"),
        ([{"step": "x"}], "m.yaml: webhook rule 1: expected exactly one of 'response' or 'fail'"),
        ([{"stepp": "x", "fail": "t"}], "m.yaml: webhook rule 1: unknown key(s) ['stepp']; "
                                        "expected: step, url, url_regex, method, body, response, "
                                        "fail, times"),
    ],
)
def test_bad_mock_files_are_refused_with_the_reason(data: Any, message: str) -> None:
    """Mistakes in a mock file are named with the file and rule number."""
    with pytest.raises(ValueError) as info:
        MockWebhooks.from_data(data, "m.yaml")
    assert str(info.value) == message

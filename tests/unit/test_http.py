"""The agent's HTTP client (agent.integrations.http) with a scripted IAgent on a fake clock: bodies, bounds,
timeouts and failure reasons; and the region probe's HTTP check that uses it."""
from __future__ import annotations

import json
from typing import Any

from twisted.internet import defer, error
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone

from agent.integrations.http import TIMEOUT, HttpClient, HttpError, HttpResponse
from agent.regions.probe import GrpcProbeTransport, ProbeOutcome


class _Transport:
    def __init__(self) -> None:
        self.stopped = False

    def stopProducing(self) -> None:  # noqa: N802 (Twisted API)
        self.stopped = True


class Response:
    """Enough of IResponse: a code, a length and a body delivered in chunks."""

    def __init__(self, code: int, body: bytes, length: Any = None, chunk: int = 1024) -> None:
        self.code = code
        self.body = body
        self.length = len(body) if length is None else length
        self.chunk = chunk
        self.transport = _Transport()
        self.delivered = False

    def deliverBody(self, protocol: Any) -> None:  # noqa: N802
        self.delivered = True
        protocol.makeConnection(self.transport)
        for i in range(0, len(self.body), self.chunk):
            if self.transport.stopped:
                return
            protocol.dataReceived(self.body[i:i + self.chunk])
        protocol.connectionLost(Failure(ResponseDone()))


class Agent:
    """An IAgent answering each request with the next scripted answer ('hang' never answers)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[bytes, bytes, Any, bytes | None]] = []
        self.cancelled = 0

    def request(self, method: bytes, uri: bytes, headers: Any = None, producer: Any = None) -> Any:
        chunks: list[bytes] = []
        if producer is not None:
            producer.startProducing(type("C", (), {"write": lambda self, b: chunks.append(b)})())
        self.sent.append((method, uri, headers, b"".join(chunks) if producer is not None else None))
        answer = self.answers.pop(0)
        if answer == "hang":
            return defer.Deferred(lambda d: setattr(self, "cancelled", self.cancelled + 1))
        if isinstance(answer, Exception):
            return defer.fail(answer)
        return defer.succeed(answer)


def result_of(d: defer.Deferred[Any]) -> Any:
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "the request has not finished"
    return out[0]


def test_json_body_goes_out_with_its_content_type_and_the_answer_comes_back() -> None:
    """json= is encoded and labelled application/json; the status and body are returned."""
    clock = Clock()
    agent = Agent(Response(201, b'{"id": 7}'))
    client = HttpClient(clock, agent=agent, user_agent=b"test/1")
    response = result_of(client.request("POST", "http://h/x", json={"a": 1}, timeout_s=1.0))
    assert response == HttpResponse(201, b'{"id": 7}')
    method, uri, headers, body = agent.sent[0]
    assert (method, uri, json.loads(body or b"")) == (b"POST", b"http://h/x", {"a": 1})
    assert headers.getRawHeaders(b"content-type") == [b"application/json"]
    assert headers.getRawHeaders(b"User-Agent") == [b"test/1"]
    assert not clock.getDelayedCalls(), "the timeout timer must be cancelled once answered"


def test_a_body_over_the_bound_fails_as_too_large_whether_announced_or_streamed() -> None:
    """A Content-Length over max_body_bytes is refused unread; a body that grows past it is cut off."""
    clock = Clock()
    announced = Response(200, b"x" * 10)
    client = HttpClient(clock, agent=Agent(announced))
    failure = result_of(client.get("http://h/", timeout_s=1.0, max_body_bytes=5))
    assert isinstance(failure.value, HttpError) and failure.value.reason == "response too large"
    assert not failure.value.retryable and failure.value.status == 200
    streamed = Response(200, b"y" * 10, length=object(), chunk=4)  # UNKNOWN_LENGTH
    client = HttpClient(clock, agent=Agent(streamed))
    failure = result_of(client.get("http://h/", timeout_s=1.0, max_body_bytes=5))
    assert failure.value.reason == "response too large" and streamed.transport.stopped


def test_no_answer_within_the_timeout_cancels_and_fails_as_a_retryable_timeout() -> None:
    """The timer covers the whole exchange: at timeout_s the request is cancelled."""
    clock = Clock()
    agent = Agent("hang")
    d = HttpClient(clock, agent=agent).get("http://h/", timeout_s=0.5)
    clock.advance(0.49)
    assert not d.called
    clock.advance(0.02)
    failure = result_of(d)
    assert agent.cancelled == 1
    assert (failure.value.reason, failure.value.kind, failure.value.retryable) == ("timeout", TIMEOUT, True)


def test_connection_errors_are_retryable_and_others_are_final_with_their_reason() -> None:
    """A refused connection may pass; a programming error will not."""
    clock = Clock()
    refused = result_of(HttpClient(clock, agent=Agent(error.ConnectionRefusedError())).get("http://h/", timeout_s=1))
    assert (refused.value.reason, refused.value.retryable) == ("connection refused", True)
    assert isinstance(refused.value.cause, error.ConnectionRefusedError)
    boom = result_of(HttpClient(clock, agent=Agent(ValueError("boom"))).get("http://h/", timeout_s=1))
    assert (boom.value.reason, boom.value.retryable) == ("error: ValueError: boom", False)


def test_bodies_of_skipped_statuses_are_not_read() -> None:
    """skip_body_from_status=500: a 503 comes back with an empty body, its own left unread."""
    clock = Clock()
    answer = Response(503, b"down")
    response = result_of(HttpClient(clock, agent=Agent(answer)).request(
        "GET", "http://h/", timeout_s=1.0, skip_body_from_status=500))
    assert response == HttpResponse(503, b"")
    assert answer.delivered and not answer.transport.stopped


def probe(answer: Any, url: str = "http://model.example/v1/chat/completions",
          advance_s: float = 0.0) -> tuple[list[ProbeOutcome], Agent]:
    clock = Clock()
    agent = Agent(answer)
    transport = GrpcProbeTransport(clock, http=HttpClient(clock, agent=agent))
    outcomes: list[ProbeOutcome] = []
    transport.check(url, 0.5, outcomes.append)
    clock.advance(advance_s)
    return outcomes, agent


def test_dialogue_probe_gets_the_models_resource_and_counts_answers_below_500_as_serving() -> None:
    """GET .../v1/models; a 401 (no API key) is still reachable; a 503 is reachable but not serving."""
    outcomes, agent = probe(Response(401, b"{}"))
    assert agent.sent[0][:2] == (b"GET", b"http://model.example/v1/models")
    assert outcomes == [ProbeOutcome(True, True, 0.0, "")]
    outcomes, _ = probe(Response(503, b""))
    assert outcomes == [ProbeOutcome(True, False, 0.0, "HTTP 503")]


def test_dialogue_probe_reports_a_timeout_and_a_refused_connection_as_lost() -> None:
    """A probe with no answer within its timeout, or refused, is a lost probe named by its cause."""
    outcomes, _ = probe("hang", advance_s=0.5)
    assert outcomes == [ProbeOutcome(False, False, 0.5, "TimeoutError")]
    outcomes, _ = probe(error.ConnectionRefusedError())
    assert outcomes == [ProbeOutcome(False, False, 0.0, "ConnectionRefusedError")]


def test_connections_are_not_logged_one_by_one() -> None:
    """The supervisor reads each worker's /healthz every second: the client's connection factory
    must not log a 'Starting factory' / 'Stopping factory' pair for each of them."""
    from twisted.internet.task import Clock

    client = HttpClient(Clock())
    factory = client.pool._factory(lambda *a: None, "127.0.0.1:1")
    assert factory.noisy is False

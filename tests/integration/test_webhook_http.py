"""Webhooks over real HTTP: agent.integrations.webhook.call_webhook against a twisted.web server on loopback.

The reactor runs on a daemon thread (shared with the other reactor-based integration tests);
each call is made from the test thread with ``blockingCallFromThread``. Timeouts are real but
short (the server simply never answers the slow path; nothing sleeps).
"""

from __future__ import annotations

import json
import textwrap
import threading
from typing import Any, Callable, TypeVar

import pytest

from agent.dialplan.engine import CallWebhook, DialogueSession, Say, WebhookRequest, WebhookResult
from agent.dialplan.model import parse_dialplan
from agent.integrations.webhook import call_webhook

pytestmark = pytest.mark.integration

T = TypeVar("T")

try:  # share one reactor thread with the other integration tests of this process
    from tests.integration.relay_fixtures import reactor_in_thread
except ImportError:  # pragma: no cover - fallback when that helper is not there
    _thread: list[threading.Thread] = []

    def reactor_in_thread() -> Any:
        from twisted.internet import reactor

        if not _thread and not reactor.running:
            thread = threading.Thread(target=reactor.run, kwargs={"installSignalHandlers": False},
                                      name="twisted-reactor", daemon=True)
            thread.start()
            _thread.append(thread)
        return reactor


def on_reactor(fn: Callable[..., T], *args: Any) -> T:
    from twisted.internet import threads

    reactor = reactor_in_thread()
    return threads.blockingCallFromThread(reactor, fn, *args)  # type: ignore[no-any-return]


class Api:
    """The integrator's system: a twisted.web site with one behaviour per path."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = []
        self.flaky_failures = 0
        self.port: Any = None

    def start(self) -> None:
        from twisted.web import resource, server

        api = self

        class Root(resource.Resource):
            isLeaf = True

            def render(self, request: Any) -> Any:
                path = request.path.decode()
                raw = request.content.read()
                body = json.loads(raw) if raw else None
                headers = {k.decode().lower(): v[0].decode()
                           for k, v in request.requestHeaders.getAllRawHeaders()}
                api.requests.append((request.method.decode(), request.uri.decode(), body, headers))
                request.setHeader(b"content-type", b"application/json")
                if path == "/accounts/lookup":
                    account = (body or {}).get("account")
                    if account == "12345678":
                        return json.dumps({"found": True, "name": "Ann", "balance": 1234.5,
                                           "owner": {"city": "Boston"}}).encode()
                    return json.dumps({"found": False}).encode()
                if path == "/slow":
                    return server.NOT_DONE_YET  # never answers
                if path == "/down":
                    request.setResponseCode(503)
                    return b'{"error": "maintenance"}'
                if path == "/flaky":
                    if api.flaky_failures < 1:
                        api.flaky_failures += 1
                        request.setResponseCode(502)
                        return b"bad gateway"
                    return b'{"ok": true}'
                if path == "/html":
                    return b"<html>oops</html>"
                if path == "/who":
                    return json.dumps({"query": request.uri.decode()}).encode()
                request.setResponseCode(404)
                return b"{}"

        reactor = reactor_in_thread()
        self.port = on_reactor(
            lambda: reactor.listenTCP(0, server.Site(Root()), interface="127.0.0.1"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port.getHost().port}"

    def stop(self) -> None:
        if self.port is not None:
            on_reactor(self.port.stopListening)


@pytest.fixture(scope="module")
def api() -> Any:
    server = Api()
    server.start()
    yield server
    server.stop()


def call(request: WebhookRequest) -> WebhookResult:
    reactor = reactor_in_thread()
    return on_reactor(call_webhook, reactor, request)


def req(url: str, body: object = None, timeout_ms: int = 2000, retries: int = 0,
        method: str = "POST") -> WebhookRequest:
    data = json.dumps(body).encode() if body is not None else None
    return WebhookRequest("lookup", url, method, (("X-Test", "1"),), data, timeout_ms, retries, 50)


def test_json_answer_becomes_variables(api: Api) -> None:
    """A 200 JSON object is flattened into variables; the body and headers reached the server."""
    result = call(req(api.url + "/accounts/lookup", {"account": "12345678"}))
    assert result.ok and result.status == 200
    assert result.variables == {"found": "true", "name": "Ann", "balance": "1234.5",
                                "owner.city": "Boston"}
    method, _, body, headers = api.requests[-1]
    assert (method, body) == ("POST", {"account": "12345678"})
    assert headers["x-test"] == "1" and headers["content-length"] == str(len(b'{"account": "12345678"}'))


def test_timeout_fails_after_the_retries(api: Api) -> None:
    """A server that never answers gives 'timeout' after 1 + retries attempts."""
    before = len(api.requests)
    result = call(req(api.url + "/slow", {}, timeout_ms=300, retries=1))
    assert (result.ok, result.reason, result.attempts) == (False, "timeout", 2)
    assert len(api.requests) - before == 2
    assert result.elapsed_ms >= 600


def test_5xx_fails_and_a_flaky_server_is_retried(api: Api) -> None:
    """A steady 503 fails with 'http 503'; a single 502 is retried into a success."""
    down = call(req(api.url + "/down", {}, retries=2))
    assert (down.ok, down.reason, down.status, down.attempts) == (False, "http 503", 503, 3)
    flaky = call(req(api.url + "/flaky", {}, retries=2))
    assert flaky.ok and flaky.attempts == 2 and flaky.variables == {"ok": "true"}


def test_bad_json_and_4xx_fail_without_retry(api: Api) -> None:
    """HTML instead of JSON, or a 404, fail at once with the reason."""
    before = len(api.requests)
    html = call(req(api.url + "/html", {}, retries=2))
    assert not html.ok and html.reason.startswith("bad json:")
    missing = call(req(api.url + "/nothing", {}, retries=2))
    assert (missing.ok, missing.reason) == (False, "http 404")
    assert len(api.requests) - before == 2


def test_connection_refused_fails(api: Api) -> None:
    """Nothing listening: the call fails (refused, or timed out while connecting)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = call(req(f"http://127.0.0.1:{port}/x", {}, timeout_ms=2000))
    assert not result.ok and result.reason in ("connection refused", "timeout")


FLOW = """\
    version: 1
    variables: {account: ""}
    routes: [{flow: main}]
    flows:
      main:
        steps:
          - id: lookup
            webhook:
              url: "{{ config.api }}%s"
              body: {account: "{{ account }}"}
              timeout_ms: 300
              retries: 1
              retry_backoff_ms: 50
              save_as: acct
              on_failure: sorry
          - say: "Hello {{ acct.name }} from {{ acct.owner.city }}."
          - hangup:
          - id: sorry
            say: "Sorry: {{ webhook.reason }}."
    """


def run_flow(api: Api, path: str, account: str = "12345678") -> list[str]:
    """Run the dialogue, executing its CallWebhook for real, and return what it says."""
    plan = parse_dialplan(textwrap.dedent(FLOW % path))
    session = DialogueSession(plan, "main", {"account": account, "config.api": api.url})
    (action,) = session.start()
    assert isinstance(action, CallWebhook)
    actions = session.on_webhook_result(call(action.request))
    return [a.text for a in actions if isinstance(a, Say)]


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/accounts/lookup", "Hello Ann from Boston."),
        ("/slow", "Sorry: timeout."),
        ("/down", "Sorry: http 503."),
        ("/html", "Sorry: bad json: Expecting value: line 1 column 1 (char 0)."),
    ],
)
def test_dialogue_takes_the_fallback_path_on_real_failures(api: Api, path: str, said: str) -> None:
    """Through the engine: success continues; timeout, 5xx and bad JSON take on_failure."""
    assert run_flow(api, path) == [said]


def test_get_webhook_sends_the_call_identity(api: Api) -> None:
    """A GET without 'query' sends call_id, caller and called as query parameters."""
    plan = parse_dialplan(textwrap.dedent("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - webhook: {url: "{{ config.api }}/who", method: GET, save_as: r, on_failure: x}
              - id: x
                say: "{{ r.query }}"
        """))
    session = DialogueSession(plan, "main", {"config.api": api.url, "call_id": "c1",
                                             "caller": "+1555", "called": "2000"})
    (action,) = session.start()
    result = call(action.request)
    assert result.variables["query"] == "/who?call_id=c1&caller=%2B1555&called=2000"

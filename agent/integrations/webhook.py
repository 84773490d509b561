"""Webhook executors: carry out the dialogue's :class:`~agent.dialplan.engine.CallWebhook` actions.

* :func:`call_webhook` performs the HTTP request with :class:`agent.integrations.http.HttpClient`:
  a JSON body (POST/PUT) or query (GET), a timeout per attempt, retries with exponential
  backoff after a timeout, a connection error or a 5xx answer. Its Deferred always fires with a
  :class:`~agent.dialplan.engine.WebhookResult` (never errbacks): success carries the response JSON
  object's fields flattened into dotted variables (``{"owner": {"name": "Ann"}}`` gives
  ``owner.name = "Ann"``); failure carries a short *reason* (``timeout``, ``http 503``,
  ``bad json: ...``, ``connection refused``, ...) that the dialplan can read as
  ``webhook.reason``.
* :class:`MockWebhooks` answers requests from rules in a YAML/JSON file, for the simulator and
  scripted flow tests, through the same response interpretation as the real executor.

The reactor is a parameter (tests drive a real loopback server, or a fake agent with
``twisted.internet.task.Clock``); nothing here imports the global reactor.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml
from twisted.internet import defer
from twisted.internet.task import deferLater

from agent.dialplan.engine import WebhookRequest, WebhookResult
from agent.integrations.http import DEFAULT_MAX_BODY_BYTES, HttpClient, HttpError, failure_reason
from agent.integrations.tls import TlsSettings

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_VARIABLES",
    "MockRule",
    "MockWebhooks",
    "WebhookRequest",
    "WebhookResult",
    "call_webhook",
    "flatten_json",
    "interpret_response",
]

MAX_BODY_BYTES = DEFAULT_MAX_BODY_BYTES
"""Largest response body read; a larger one is a failure (``response too large``)."""

MAX_VARIABLES = 500
"""Most variables one response may set (the rest are dropped)."""

MAX_VALUE_CHARS = 4000
USER_AGENT = b"openclaw-voice-webhook/1"


def flatten_json(value: Any, prefix: str = "", out: dict[str, str] | None = None,
                 depth: int = 0) -> dict[str, str]:
    """Flatten a JSON value into ``dotted.name -> text`` (lists by index: ``items.0.id``).

    Booleans become ``true``/``false``, null becomes empty text, numbers their shortest text.
    Keys that are not variable-name safe are rewritten (non-alphanumerics become ``_``).
    """
    out = {} if out is None else out
    if len(out) >= MAX_VARIABLES:
        return out
    if isinstance(value, Mapping) and depth < 8:
        if prefix and not value:
            out[prefix] = ""
        for key, item in value.items():
            name = re.sub(r"[^A-Za-z0-9_]", "_", str(key)) or "_"
            if name[0].isdigit():
                name = "_" + name
            flatten_json(item, f"{prefix}.{name}" if prefix else name, out, depth + 1)
        return out
    if isinstance(value, list) and depth < 8:
        if prefix:
            out[f"{prefix}.length"] = str(len(value))
        for i, item in enumerate(value[:100]):
            flatten_json(item, f"{prefix}.{i}" if prefix else str(i), out, depth + 1)
        return out
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = ""
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    elif isinstance(value, (Mapping, list)):
        text = json.dumps(value)
    else:
        text = str(value)
    out[prefix or "value"] = text[:MAX_VALUE_CHARS]
    return out


def interpret_response(status: int, body: bytes, attempts: int = 1,
                       elapsed_ms: float = 0.0) -> WebhookResult:
    """Turn an HTTP answer into a result: 2xx with a JSON object (or no body) succeeds."""
    if not 200 <= status < 300:
        return WebhookResult(False, {}, status, f"http {status}", attempts, elapsed_ms)
    if not body.strip():
        return WebhookResult(True, {}, status, "", attempts, elapsed_ms)
    try:
        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        reason = f"bad json: {str(exc)[:120]}"
        return WebhookResult(False, {}, status, reason, attempts, elapsed_ms)
    if not isinstance(document, dict):
        reason = f"bad json: expected an object, found {type(document).__name__}"
        return WebhookResult(False, {}, status, reason, attempts, elapsed_ms)
    return WebhookResult(True, flatten_json(document), status, "", attempts, elapsed_ms)


@defer.inlineCallbacks
def call_webhook(reactor: Any, request: WebhookRequest, agent: Any = None,  # type: ignore[no-untyped-def]
                 tls: TlsSettings | None = None):
    """Perform *request*; the Deferred fires with a :class:`WebhookResult` (never fails).

    *agent* is an ``IAgent`` (default: a non-persistent ``twisted.web.client.Agent`` on
    *reactor*, verifying ``https://`` servers against *tls*). A refused certificate fails at
    once with its reason (``tls: ...``), without retries. Attempts: 1 + ``request.retries``; each limited to ``request.timeout_ms``;
    retry after timeouts, connection errors and 5xx, waiting ``retry_backoff_ms`` and doubling.
    """
    client = HttpClient(reactor, agent=agent, persistent=False, user_agent=USER_AGENT,
                        connect_timeout_s=max(request.timeout_ms / 1000.0, 0.1), tls=tls)
    started = reactor.seconds()
    headers = [("Accept", "application/json"), *request.headers]
    attempts = 1 + max(0, request.retries)
    last_reason, last_status = "no attempt", None
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            delay = request.retry_backoff_ms * (2 ** (attempt - 2)) / 1000.0
            yield deferLater(reactor, delay, lambda: None)
        try:
            response = yield client.request(request.method, request.url, timeout_s=request.timeout_ms / 1000.0,
                                            body=request.body, headers=headers, max_body_bytes=MAX_BODY_BYTES,
                                            skip_body_from_status=500)
        except HttpError as exc:
            last_reason, last_status = exc.reason, exc.status
            if exc.retryable:
                continue
            break  # not a passing network problem: retrying will not help
        except Exception as exc:  # noqa: BLE001 - every failure becomes a result
            last_reason, last_status = failure_reason(exc), None
            break
        if response.status >= 500:
            last_reason, last_status = f"http {response.status}", response.status
            continue
        elapsed = (reactor.seconds() - started) * 1000.0
        return interpret_response(response.status, response.body, attempt, elapsed)
    elapsed = (reactor.seconds() - started) * 1000.0
    return WebhookResult(False, {}, last_status, last_reason, attempt, elapsed)


# --------------------------------------------------------------------------- mocks


@dataclass(frozen=True)
class MockRule:
    """One canned answer: which requests it matches and what they get."""

    step: str | None = None
    url: str | None = None
    url_regex: str | None = None
    method: str | None = None
    body: Mapping[str, Any] | None = None
    status: int = 200
    json_body: Any = None
    raw_body: str | None = None
    fail: str | None = None
    times: int | None = None

    def matches(self, request: WebhookRequest) -> bool:
        """True when *request* fits every condition this rule sets."""
        if self.step is not None and request.step != self.step:
            return False
        base_url = request.url.split("?", 1)[0]
        if self.url is not None and self.url not in (request.url, base_url):
            return False
        if self.url_regex is not None and not re.search(self.url_regex, request.url):
            return False
        if self.method is not None and self.method.upper() != request.method:
            return False
        if self.body is not None:
            try:
                sent = json.loads(request.body or b"null")
            except ValueError:
                return False
            if not _subset(self.body, sent):
                return False
        return True

    def answer(self) -> WebhookResult:
        """The result this rule gives."""
        if self.fail is not None:
            return WebhookResult(False, {}, None, self.fail, 1, 0.0)
        if self.raw_body is not None:
            body = self.raw_body.encode("utf-8")
        elif self.json_body is not None:
            body = json.dumps(self.json_body).encode("utf-8")
        else:
            body = b""
        return interpret_response(self.status, body)


def _subset(expected: Any, actual: Any) -> bool:
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _subset(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            _subset(e, a) for e, a in zip(expected, actual)
        )
    return str(expected) == str(actual) if not isinstance(expected, bool) else expected == actual


_RULE_KEYS = ("step", "url", "url_regex", "method", "body", "response", "fail", "times")
_RESPONSE_KEYS = ("status", "json", "body")


@dataclass
class MockWebhooks:
    """Answers webhook requests from rules, first match wins; unmatched requests fail.

    A file holds ``webhooks:`` (a list of rules)::

        webhooks:
          - step: lookup_account            # the webhook step's id (optional)
            url: https://bank.example/lookup  # exact URL, query string optional (optional)
            body: {account: "12345678"}     # the JSON body must contain these (optional)
            response: {status: 200, json: {balance: 1234.5, name: Ann}}
          - step: lookup_account
            fail: timeout                   # or: response: {status: 503}
                                            #  or: response: {body: "not json"}

    A rule with ``times: N`` answers N requests, then the next matching rule answers.
    """

    rules: list[MockRule]
    calls: list[WebhookRequest] = field(default_factory=list)
    _used: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: str) -> MockWebhooks:
        """Read rules from a YAML (or JSON) file; ValueError names the file on a bad rule."""
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        return cls.from_data(document, path)

    @classmethod
    def from_data(cls, document: Any, source: str = "<mocks>") -> MockWebhooks:
        """Build from parsed data (``{"webhooks": [...]}`` or the list itself)."""
        if isinstance(document, Mapping):
            unknown = set(document) - {"webhooks"}
            if unknown:
                raise ValueError(f"{source}: unknown key(s) {sorted(unknown)}; expected 'webhooks'")
            document = document.get("webhooks") or []
        if not isinstance(document, list):
            raise ValueError(f"{source}: expected a list of webhook rules under 'webhooks'")
        return cls([_rule(item, source, i + 1) for i, item in enumerate(document)])

    def __call__(self, request: WebhookRequest) -> WebhookResult:
        """Answer *request* (and remember it in :attr:`calls`)."""
        self.calls.append(request)
        for index, rule in enumerate(self.rules):
            if not rule.matches(request):
                continue
            used = self._used.get(index, 0)
            if rule.times is not None and used >= rule.times:
                continue
            self._used[index] = used + 1
            return rule.answer()
        return WebhookResult(False, {}, None, f"no mock for {request.method} {request.url}", 1, 0.0)


def _rule(item: Any, source: str, number: int) -> MockRule:
    where = f"{source}: webhook rule {number}"
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: expected a mapping")
    unknown = set(item) - set(_RULE_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; expected: {', '.join(_RULE_KEYS)}")
    if ("response" in item) == ("fail" in item):
        raise ValueError(f"{where}: expected exactly one of 'response' or 'fail'")
    response = item.get("response") or {}
    if not isinstance(response, Mapping) or set(response) - set(_RESPONSE_KEYS):
        raise ValueError(f"{where}: 'response' takes: {', '.join(_RESPONSE_KEYS)}")
    raw = response.get("body")
    if raw is not None and not isinstance(raw, str):
        raw = json.dumps(raw)
    return MockRule(
        step=item.get("step"),
        url=item.get("url"),
        url_regex=item.get("url_regex"),
        method=item.get("method"),
        body=item.get("body"),
        status=int(response.get("status", 200)),
        json_body=response.get("json"),
        raw_body=raw,
        fail=str(item["fail"]) if "fail" in item else None,
        times=int(item["times"]) if "times" in item else None,
    )


def mock_rules(rules: Iterable[Mapping[str, Any]]) -> MockWebhooks:
    """Shorthand for tests: ``mock_rules([{"step": "x", "response": {...}}])``."""
    return MockWebhooks.from_data(list(rules))

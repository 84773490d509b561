"""Webhooks over HTTPS: call_webhook against twisted.web over TLS on loopback, signed by a CA made in
the test. A valid certificate works; a wrong host name, an unknown CA or a missing client
certificate is refused with a clear reason, and the flow takes its fallback -- also in a real call
through the server."""
from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from agent.dialplan.engine import CallWebhook, DialogueSession, Say, WebhookRequest, WebhookResult
from agent.dialplan.model import parse_dialplan
from agent.integrations.tls import TlsSettings
from agent.integrations.webhook import call_webhook
from tests.integration.conftest import run_caller, start_agent, stop_agent
from tests.integration.test_webhook_http import on_reactor, reactor_in_thread
from tests.tls_certs import TestCA

pytestmark = pytest.mark.integration


class HttpsApi:
    """A JSON API over TLS; ``client_ca`` set: clients must show a certificate it signed."""

    def __init__(self, certificate: str, client_ca: str | None = None) -> None:
        from twisted.internet import ssl
        from twisted.web import resource, server

        api = self
        self.requests: list[str] = []

        class Root(resource.Resource):
            isLeaf = True

            def render(self, request: Any) -> bytes:
                api.requests.append(request.path.decode())
                request.setHeader(b"content-type", b"application/json")
                return json.dumps({"name": "Ann", "balance": 1234.5}).encode()

        with open(certificate, "rb") as handle:
            private = ssl.PrivateCertificate.loadPEM(handle.read())
        if client_ca is not None:
            with open(client_ca, "rb") as handle:
                options = private.options(ssl.Certificate.loadPEM(handle.read()))
        else:
            options = private.options()
        reactor = reactor_in_thread()
        self.port = on_reactor(lambda: reactor.listenSSL(0, server.Site(Root()), options, interface="127.0.0.1"))

    def url(self, host: str = "localhost") -> str:
        return f"https://{host}:{self.port.getHost().port}"

    def stop(self) -> None:
        on_reactor(self.port.stopListening)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = str(tmp_path_factory.mktemp("pki"))
    ca = TestCA(directory)
    other = TestCA(directory, "Unknown CA")
    server = ca.issue("localhost", dns=("localhost",))
    servers = {"ok": HttpsApi(server.both), "mtls": HttpsApi(server.both, client_ca=ca.pem)}
    yield {"ca": ca, "other": other, "client": ca.issue("agent client", client=True),
           "stranger": other.issue("stranger client", client=True), **servers}
    for s in servers.values():
        s.stop()


def call(url: str, tls: TlsSettings | None, retries: int = 2) -> WebhookResult:
    request = WebhookRequest("lookup", url + "/accounts/lookup", "POST", (), b"{}", 3000, retries, 50)
    return on_reactor(call_webhook, reactor_in_thread(), request, None, tls)


def test_a_certificate_from_the_configured_ca_is_accepted(pki: dict[str, Any]) -> None:
    """With the test CA as the bundle, the server's certificate for localhost is accepted."""
    result = call(pki["ok"].url(), TlsSettings(ca_bundle=pki["ca"].pem))
    assert result.ok, result
    assert result.variables == {"name": "Ann", "balance": "1234.5"}


def test_certificates_are_verified_by_default(pki: dict[str, Any]) -> None:
    """No CA bundle configured: the system's trust store does not know the test CA, so the
    handshake is refused at once (no retries) and the server never sees a request."""
    before = len(pki["ok"].requests)
    result = call(pki["ok"].url(), None)
    assert not result.ok and result.attempts == 1, result
    assert result.reason.startswith("tls: ") and "certificate verify failed" in result.reason, result.reason
    assert len(pki["ok"].requests) == before


def test_an_unknown_ca_is_refused(pki: dict[str, Any]) -> None:
    """A bundle holding another CA only: refused as an unknown issuer."""
    result = call(pki["ok"].url(), TlsSettings(ca_bundle=pki["other"].pem))
    assert not result.ok and "certificate verify failed" in result.reason, result.reason


def test_a_wrong_host_name_is_refused(pki: dict[str, Any]) -> None:
    """The certificate names localhost; dialled as 127.0.0.1 it does not match."""
    result = call(pki["ok"].url("127.0.0.1"), TlsSettings(ca_bundle=pki["ca"].pem))
    assert not result.ok and result.attempts == 1, result
    assert result.reason.startswith("tls: host name mismatch"), result.reason
    assert "127.0.0.1" in result.reason


def test_client_certificate(pki: dict[str, Any]) -> None:
    """A server asking for a client certificate: the configured one (signed by its CA) is
    accepted; none, or one from another CA, is refused."""
    ca = pki["ca"].pem
    client, stranger = pki["client"], pki["stranger"]
    assert call(pki["mtls"].url(), TlsSettings(ca_bundle=ca, client_cert=client.cert, client_key=client.key)).ok
    assert call(pki["mtls"].url(), TlsSettings(ca_bundle=ca, client_cert=client.both)).ok
    for tls in (TlsSettings(ca_bundle=ca), TlsSettings(ca_bundle=ca, client_cert=stranger.both)):
        result = call(pki["mtls"].url(), tls, retries=0)
        assert not result.ok and result.reason != "", result


FLOW = """\
    version: 1
    routes: [{flow: main}]
    flows:
      main:
        steps:
          - webhook:
              url: "{{ config.api }}/accounts/lookup"
              body: {account: "1"}
              timeout_ms: 3000
              save_as: acct
              on_failure: sorry
          - say: "Hello {{ acct.name }}."
          - hangup:
          - id: sorry
            say: "Sorry, the lookup failed."
          - hangup:
    """


def test_the_flow_takes_its_fallback_on_a_refused_certificate(pki: dict[str, Any]) -> None:
    """Through the dialogue engine: a refused certificate takes on_failure, and the reason is in
    the call's record of the step."""
    plan = parse_dialplan(textwrap.dedent(FLOW))
    said = {}
    for name, url in (("ok", pki["ok"].url()), ("wrong host", pki["ok"].url("127.0.0.1"))):
        session = DialogueSession(plan, "main", {"config.api": url})
        (action,) = session.start()
        assert isinstance(action, CallWebhook)
        actions = session.on_webhook_result(call_webhook_now(action.request, TlsSettings(ca_bundle=pki["ca"].pem)))
        said[name] = [a.text for a in actions if isinstance(a, Say)]
    assert said == {"ok": ["Hello Ann."], "wrong host": ["Sorry, the lookup failed."]}


def call_webhook_now(request: WebhookRequest, tls: TlsSettings) -> WebhookResult:
    return on_reactor(call_webhook, reactor_in_thread(), request, None, tls)


def test_a_real_call_uses_https_and_records_a_refusal(tmp_path, pki: dict[str, Any]) -> None:
    """The server, configured with the test CA, greets with the name the HTTPS webhook returned;
    pointed at a host name the certificate does not carry, the call takes the fallback and the
    call record and the log say why."""
    dialplan = tmp_path / "https.yaml"
    dialplan.write_text(textwrap.dedent(FLOW))
    config = tmp_path / "config.yaml"
    config.write_text(f"http:\n  ca_bundle: {pki['ca'].pem}\nvariables:\n  api: {pki['ok'].url()}\n")
    agent = start_agent(str(tmp_path), "--config", str(config), "--dialplan", str(dialplan))
    try:
        code, report, out = run_caller(agent.uri)
        assert code == 0, out
        assert report.get("answered") and report.get("greeting"), report
        record = agent.wait_for(lambda: agent.records(), 20.0, "the call record")[-1]
        assert "Hello Ann." in json.dumps(record), record
        kinds = [e["kind"] for e in record["dialogue"]]
        assert "webhook" in kinds and "webhook_failed" not in kinds, record["dialogue"]
    finally:
        assert stop_agent(agent) == 0
    config.write_text(f"http:\n  ca_bundle: {pki['ca'].pem}\nvariables:\n  api: {pki['ok'].url('127.0.0.1')}\n")
    agent = start_agent(str(tmp_path), "--config", str(config), "--dialplan", str(dialplan))
    try:
        code, report, out = run_caller(agent.uri)
        assert code == 0, out
        assert report.get("answered") and report.get("greeting"), report
        record = agent.wait_for(lambda: agent.records(), 20.0, "the call record")[-1]
        assert "Sorry, the lookup failed." in json.dumps(record) and "Hello" not in json.dumps(record), record
        failed = [e for e in record["dialogue"] if e["kind"] == "webhook_failed"]
        assert failed and failed[0]["text"].startswith("tls: host name mismatch"), record["dialogue"]
        assert "failed (tls: host name mismatch" in agent.log()
    finally:
        assert stop_agent(agent) == 0

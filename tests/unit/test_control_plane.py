"""The admin bearer check and where each HTTP page listens (agent/app/control_plane.py)."""
from __future__ import annotations

from dataclasses import replace

from twisted.internet.address import IPv4Address
from twisted.web.resource import Resource
from twisted.web.test.requesthelper import DummyRequest

from agent.app.config import AdminSettings, ServerConfig, StatusSettings
from agent.app.control_plane import BearerGuarded, listen_pages, refuse_admin

TOKEN = "admin-token-0123456789"


def _request(auth: bytes | None = None, peer: str = "127.0.0.1") -> DummyRequest:
    request = DummyRequest([b"drain"])
    request.method = b"POST"
    request.client = IPv4Address("TCP", peer, 40000)
    if auth is not None:
        request.requestHeaders.setRawHeaders(b"authorization", [auth])
    return request


def test_no_token_presented_gets_401_with_a_bearer_challenge() -> None:
    request = _request()
    body = refuse_admin(request, TOKEN, loopback_only=False)
    assert request.responseCode == 401
    assert request.responseHeaders.getRawHeaders(b"www-authenticate") == [b'Bearer realm="openclaw-voice"']
    assert body is not None and TOKEN.encode() not in body


def test_wrong_token_gets_401_invalid_token() -> None:
    request = _request(b"Bearer not-the-token")
    assert refuse_admin(request, TOKEN, loopback_only=False) is not None
    assert request.responseCode == 401
    assert b'error="invalid_token"' in request.responseHeaders.getRawHeaders(b"www-authenticate")[0]


def test_basic_auth_is_not_a_bearer_token() -> None:
    request = _request(b"Basic " + TOKEN.encode())
    assert refuse_admin(request, TOKEN, loopback_only=False) is not None
    assert request.responseCode == 401


def test_right_token_passes() -> None:
    request = _request(b"Bearer " + TOKEN.encode())
    assert refuse_admin(request, TOKEN, loopback_only=False) is None


def test_no_configured_token_refuses_everyone() -> None:
    request = _request(b"Bearer ")
    assert refuse_admin(request, "", loopback_only=False) is not None
    assert request.responseCode == 403


def test_shared_public_listener_serves_admin_to_loopback_only() -> None:
    request = _request(b"Bearer " + TOKEN.encode(), peer="192.0.2.7")
    assert refuse_admin(request, TOKEN, loopback_only=True) is not None
    assert request.responseCode == 403


class _Drain(Resource):
    isLeaf = True
    calls = 0

    def render_POST(self, request):  # noqa: N802
        _Drain.calls += 1
        return b"drained"


def test_guard_runs_the_command_only_with_the_token() -> None:
    guarded = BearerGuarded(_Drain(), TOKEN, loopback_only=False)
    before = _Drain.calls
    guarded.render(_request(b"Bearer wrong"))
    assert _Drain.calls == before
    assert guarded.render(_request(b"Bearer " + TOKEN.encode())) == b"drained"
    assert _Drain.calls == before + 1


def _listened(config: ServerConfig) -> dict[tuple[str, int], set[bytes]]:
    seen: dict[tuple[str, int], set[bytes]] = {}

    def listen(port, site, host):  # type: ignore[no-untyped-def]
        seen[(host, port)] = set(site.resource.children)
        return (host, port)

    pages = {name: Resource() for name in ("metrics", "healthz", "regions", "admin")}
    listen_pages(None, config, pages, listen=listen)
    return seen


def test_defaults_are_one_loopback_listener() -> None:
    assert ServerConfig().metrics.host == "127.0.0.1"
    assert _listened(ServerConfig()) == {("127.0.0.1", 9464): {b"metrics", b"healthz", b"regions", b"admin"}}


def test_metrics_status_and_admin_each_on_their_own_address() -> None:
    config = ServerConfig()
    config = replace(config, metrics=replace(config.metrics, host="0.0.0.0", port=9100),
                     status=StatusSettings(host="10.0.0.5", port=8080),
                     admin=AdminSettings(token=TOKEN, host="127.0.0.1", port=9101))
    assert _listened(config) == {("0.0.0.0", 9100): {b"metrics"}, ("10.0.0.5", 8080): {b"healthz", b"regions"},
                                 ("127.0.0.1", 9101): {b"admin"}}


def test_the_admin_token_comes_from_the_environment_with_or_without_a_config(tmp_path, monkeypatch) -> None:
    from agent.app.config import load_config

    monkeypatch.setenv("OPENCLAW_ADMIN_TOKEN", TOKEN)
    assert load_config(None).admin.token == TOKEN
    path = tmp_path / "c.yaml"
    path.write_text("sip: {port: 5070}\n")
    assert load_config(str(path)).admin.token == TOKEN
    path.write_text("admin: {token: other-token-value}\n")
    assert load_config(str(path)).admin.token == "other-token-value"

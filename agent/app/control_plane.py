"""The control plane's HTTP side: the bearer token of ``/admin/*`` and the listeners of each page.

``/metrics``, ``/healthz`` + ``/regions`` and ``/admin/*`` each have a host and port in the config
(``metrics``, ``status``, ``admin``); pages given the same address share one listener. Everything
listens on loopback unless the config says otherwise (docs/configuration.md, "Control plane").
"""
from __future__ import annotations

import hmac
from typing import Any, Callable

from twisted.web.resource import Resource
from twisted.web.server import Site

REALM = "openclaw-voice"


def _is_loopback(peer: str) -> bool:
    return peer.startswith("127.") or peer in ("::1", "localhost") or peer.startswith("::ffff:127.")


def refuse_admin(request: Any, token: str, *, loopback_only: bool) -> bytes | None:
    """The error body when *request* may not run an admin command (the code is set), else None.

    A missing or wrong ``Authorization: Bearer`` gets 401 and ``WWW-Authenticate: Bearer``; the
    token is compared in constant time. *loopback_only*: admin shares a listener with pages meant
    for other hosts (metrics scraped from elsewhere), so only loopback peers are served.
    """
    request.setHeader(b"content-type", b"application/json")
    if loopback_only:
        peer = str(getattr(request.getClientAddress(), "host", ""))
        if not _is_loopback(peer):
            request.setResponseCode(403)
            return (b'{"error": "admin commands are accepted from loopback only on this listener; '
                    b'give admin its own host and port to reach it from elsewhere"}\n')
    if not token:
        request.setResponseCode(403)
        return b'{"error": "no admin token is configured (admin.token or OPENCLAW_ADMIN_TOKEN)"}\n'
    header = (request.getHeader(b"authorization") or b"").strip()
    scheme, _, presented = header.partition(b" ")
    if scheme.lower() != b"bearer" or not presented.strip():
        request.setResponseCode(401)
        request.setHeader(b"www-authenticate", f'Bearer realm="{REALM}"'.encode())
        return b'{"error": "admin commands need Authorization: Bearer <token>"}\n'
    if not hmac.compare_digest(presented.strip(), token.encode("utf-8")):
        request.setResponseCode(401)
        request.setHeader(b"www-authenticate", f'Bearer realm="{REALM}", error="invalid_token"'.encode())
        return b'{"error": "invalid admin token"}\n'
    return None


class BearerGuarded(Resource):
    """Wraps a leaf admin resource: every method first passes :func:`refuse_admin`."""

    isLeaf = True

    def __init__(self, inner: Resource, token: str, loopback_only: bool) -> None:
        super().__init__()
        self._inner = inner
        self._token = token
        self._loopback_only = loopback_only

    def render(self, request: Any) -> Any:
        refused = refuse_admin(request, self._token, loopback_only=self._loopback_only)
        if refused is not None:
            return refused
        return self._inner.render(request)


def listen_pages(reactor: Any, config: Any, pages: dict[str, Resource],
                 listen: Callable[[int, Site, str], Any] | None = None) -> list[Any]:
    """Listen for *pages* (``metrics``, ``healthz``, ``regions``, ``admin``) where *config* puts them.

    Returns the listening ports, the metrics one first. The admin page is wrapped in the bearer
    check; when it shares the metrics listener and that listener is not on loopback, only loopback
    peers may use it.
    """
    listen = listen or (lambda port, site, host: reactor.listenTCP(port, site, interface=host))
    metrics = (config.metrics.host, config.metrics.port)
    status = (config.status.host, config.status.port) if config.status.port is not None else metrics
    admin = (config.admin.host, config.admin.port) if config.admin.port is not None else metrics
    where = {"metrics": metrics, "healthz": status, "regions": status, "admin": admin}
    roots: dict[tuple[str, int], Resource] = {}
    for name, resource in pages.items():
        address = where.get(name, metrics)
        if name == "admin":
            shared = address == metrics and not _is_loopback(metrics[0])
            resource = BearerGuarded(resource, config.admin.token, loopback_only=shared)
        roots.setdefault(address, Resource()).putChild(name.encode(), resource)
    ports = []
    for (host, port), root in sorted(roots.items(), key=lambda item: item[0] != metrics):
        ports.append(listen(port, Site(root), host))
    return ports

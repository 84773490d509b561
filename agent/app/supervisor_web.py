"""The supervisor's HTTP pages: ``/metrics`` (every worker's and its own), ``/healthz`` and ``/admin``."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from agent.app.control_plane import refuse_admin

if TYPE_CHECKING:
    from agent.app.supervisor import Supervisor

log = Logger(namespace="openclaw.supervisor")


class MetricsPage(Resource):
    isLeaf = True

    def __init__(self, sup: "Supervisor") -> None:
        super().__init__()
        self._sup = sup

    def render_GET(self, request: Any) -> Any:  # noqa: N802 (twisted.web API)
        d = self._sup.scrape()

        def done(body: bytes) -> None:
            request.setHeader(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
            request.write(body)
            request.finish()

        def failed(f: Any) -> None:
            log.failure("scrape failed", f)
            request.setResponseCode(500)
            request.finish()

        d.addCallbacks(done, failed)
        return NOT_DONE_YET


class HealthPage(Resource):
    isLeaf = True

    def __init__(self, sup: "Supervisor") -> None:
        super().__init__()
        self._sup = sup

    def render_GET(self, request: Any) -> bytes:  # noqa: N802
        body = self._sup.health()
        request.setResponseCode(200 if body["status"] in ("ok", "degraded") else 503)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(body).encode() + b"\n"


class AdminPage(Resource):
    """``POST /admin/drain`` (the node) and ``POST /admin/workers/I/drain`` (one worker).

    Bearer token required (agent/app/control_plane.py); from loopback only unless the supervisor's
    listener itself is on loopback.
    """

    isLeaf = True

    def __init__(self, sup: "Supervisor", token: str = "") -> None:
        super().__init__()
        self._sup = sup
        self._token = token

    def render_POST(self, request: Any) -> bytes:  # noqa: N802
        refused = refuse_admin(request, self._token, loopback_only=not self._sup.settings.metrics_host.startswith("127."))
        if refused is not None:
            return refused
        path = [p.decode() for p in request.postpath if p]
        if path == ["drain"]:
            self._sup.reactor.callLater(0, self._sup.drain)
            return b'{"action": "drain", "started": true}\n'
        if len(path) == 3 and path[0] == "workers" and path[2] == "drain" and path[1].isdigit():
            ok = self._sup.drain_worker(int(path[1]))
            request.setResponseCode(200 if ok else 404)
            return json.dumps({"action": "drain", "worker": int(path[1]), "started": ok}).encode() + b"\n"
        request.setResponseCode(404)
        return b'{"error": "expected POST /admin/drain or /admin/workers/I/drain"}\n'



def supervisor_site_root(sup: "Supervisor", admin_token: str = "") -> Resource:
    """The resource tree the supervisor serves on its metrics port."""
    root = Resource()
    root.putChild(b"metrics", MetricsPage(sup))
    root.putChild(b"healthz", HealthPage(sup))
    root.putChild(b"admin", AdminPage(sup, admin_token))
    return root

"""The supervisor's HTTP pages: ``/metrics`` (every worker's and its own), ``/healthz`` and ``/admin``."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from agent.app.readiness import node_readiness

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
        if [p for p in request.postpath if p] == [b"ready"]:  # GSLB readiness (agent/app/readiness.py)
            sup = self._sup
            r = node_readiness(state=sup.state, front=sup.front.status if sup.front is not None else None,
                               front_running=sup.front is not None and sup.front.running,
                               workers=[(w.healthy, w.health) for w in sup.workers],
                               capacity_per_worker=sup.settings.capacity)
            request.setResponseCode(200 if r.ready else 503)
            request.setHeader(b"content-type", b"application/json")
            request.setHeader(b"cache-control", b"no-store")
            return json.dumps(r.body()).encode() + b"\n"
        body = self._sup.health()
        request.setResponseCode(200 if body["status"] in ("ok", "degraded") else 503)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(body).encode() + b"\n"


class AdminPage(Resource):
    """``POST /admin/drain`` (the node) and ``POST /admin/workers/I/drain`` (one worker).

    The bearer check is agent/app/control_plane.py's, around this resource.
    """

    isLeaf = True

    def __init__(self, sup: "Supervisor") -> None:
        super().__init__()
        self._sup = sup

    def render_POST(self, request: Any) -> bytes:  # noqa: N802
        request.setHeader(b"content-type", b"application/json")
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



def supervisor_pages(sup: "Supervisor") -> dict[str, Resource]:
    """The supervisor's pages, by name, for agent/app/control_plane.py's listen_pages."""
    return {"metrics": MetricsPage(sup), "healthz": HealthPage(sup), "admin": AdminPage(sup)}

"""The server's own web resources: ``/healthz`` and ``/admin`` (next to ``/metrics`` and ``/regions``)."""
from __future__ import annotations

import json
import os
from typing import Any, Protocol

from twisted.web.resource import Resource

from agent.app.readiness import server_readiness


class ServerState(Protocol):
    """What the resources read of the server and ask it to do."""

    ready: bool
    stopping: bool
    draining: bool
    worker_id: int | None
    capacity: int
    speech_uri: str
    drain_timeout_s: float | None

    @property
    def sessions(self) -> dict[str, Any]: ...
    @property
    def prompts(self) -> Any: ...
    def drain(self, timeout_s: float | None = None) -> bool: ...
    def end_calls_politely(self) -> None: ...


class Health(Resource):
    isLeaf = True

    def __init__(self, server: ServerState) -> None:
        super().__init__()
        self._server = server

    def render_GET(self, request: Any) -> bytes:  # noqa: N802 (twisted.web API)
        s = self._server
        if [p for p in request.postpath if p] == [b"ready"]:  # GSLB readiness (agent/app/readiness.py)
            r = server_readiness(ready=s.ready, stopping=s.stopping, draining=s.draining,
                                 active_calls=len(s.sessions), capacity=s.capacity)
            request.setResponseCode(200 if r.ready else 503)
            request.setHeader(b"content-type", b"application/json")
            request.setHeader(b"cache-control", b"no-store")
            return json.dumps({**r.body(), "worker": s.worker_id}).encode() + b"\n"
        ok = s.ready and not s.stopping and not s.draining
        status = "ok" if ok else ("stopping" if s.stopping else "draining" if s.draining else "starting")
        body = {
            "status": status,
            "worker": s.worker_id,
            "pid": os.getpid(),
            "active_calls": len(s.sessions),
            "capacity": s.capacity,
            "speech_backend": s.speech_uri,
            "prompts_cached": len(s.prompts),
        }
        request.setResponseCode(200 if ok else 503)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(body).encode()


class Admin(Resource):
    """``POST /admin/drain``, ``POST /admin/end-calls``: see docs/scaling.md (the bearer check is
    agent/app/control_plane.py's, around this resource)."""

    isLeaf = True

    def __init__(self, server: ServerState) -> None:
        super().__init__()
        self._server = server

    def _regions(self, request: Any) -> bytes:
        """``/admin/regions...``: a model-version rollout's commands (agent/regions/rollout_admin.py)."""
        admin = getattr(self._server, "region_admin", None)
        if admin is None:
            request.setResponseCode(404)
            return b'{"error": "this node has no speech regions (speech.regions) to roll out to"}\n'
        return admin.render(request, [p.decode() for p in request.postpath[1:] if p])  # type: ignore[no-any-return]

    def render_GET(self, request: Any) -> bytes:  # noqa: N802 (twisted.web API)
        request.setHeader(b"content-type", b"application/json")
        if request.postpath[:1] == [b"regions"]:
            return self._regions(request)
        request.setResponseCode(405)
        return b'{"error": "admin commands are POSTs; GET /admin/regions reads the regions\' rollout state"}\n'

    def render_POST(self, request: Any) -> bytes:  # noqa: N802 (twisted.web API)
        request.setHeader(b"content-type", b"application/json")
        action = request.postpath[0].decode() if request.postpath else ""
        s = self._server
        if action == "regions":
            return self._regions(request)
        if action == "drain":
            started = s.drain(s.drain_timeout_s)
        elif action == "end-calls":
            started = True
            s.end_calls_politely()
        else:
            request.setResponseCode(404)
            return b'{"error": "unknown admin command; expected drain or end-calls"}\n'
        return json.dumps({"action": action, "started": started, "active_calls": len(s.sessions)}).encode() + b"\n"

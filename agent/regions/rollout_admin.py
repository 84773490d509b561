"""A node's side of a model-version rollout: ``/admin/regions`` (behind the admin bearer token).

The rollout controller (:mod:`agent.regions.rollout`, ``openclaw-voice models rollout``) moves
one region at a time and tells every node what it does:

``GET  /admin/regions``                    every region: rollout state, health, versions, calls in it
``POST /admin/regions/NAME/drain``         no new calls or failovers into NAME; its calls go on
``POST /admin/regions/NAME/undrain``       take new calls again (a drain given up before the switch)
``POST /admin/regions/NAME/switch``        NAME's servers change version now: it serves no version,
                                           what its endpoints reported is forgotten (and asked again
                                           at each GET while it switches, when the node discovers
                                           versions)
``POST /admin/regions/NAME/serve``         body ``{"versions": ["asr:V", ...]}``: NAME serves these now
                                           (they replace its configured versions of the same kinds)
                                           and takes calls again

State changes go through :class:`agent.regions.selector.RegionSelector` (``drain_region``,
``begin_switch``, ``finish_switch``), so ``/regions``, the metrics and every call's failover see
them at once. Everything runs on the reactor thread (twisted.web renders there).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

from twisted.logger import Logger

from agent.regions.selector import RegionSelector, version_kind

log = Logger(namespace="openclaw.regions")

ACTIONS = ("drain", "undrain", "switch", "serve")
_VERSION = re.compile(r"^[a-z][a-z0-9_-]*:\S+$")


def parse_versions(value: Any) -> tuple[str, ...]:
    """``["asr:V", ...]`` checked: each ``KIND:NAME`` with no spaces; raise ``ValueError`` saying why."""
    if not isinstance(value, list) or not value:
        raise ValueError('expected "versions": a non-empty list such as ["asr:conformer-en-US-2.2"]')
    for v in value:
        if not isinstance(v, str) or not _VERSION.match(v):
            raise ValueError(f"version {v!r} is not KIND:NAME (e.g. asr:conformer-en-US-2.2)")
    return tuple(value)


def replace_kinds(configured: frozenset[str], new: tuple[str, ...]) -> frozenset[str]:
    """*configured* with its versions of every kind in *new* replaced by *new*."""
    kinds = {version_kind(v) for v in new}
    return frozenset(v for v in configured if version_kind(v) not in kinds) | frozenset(new)


class RegionRolloutAdmin:
    """Renders ``/admin/regions`` for one node (``now``: the reactor's clock; ``calls_in(region)``:
    ids of the node's calls whose speech is in the region now; ``discover_now()``: ask every
    endpoint's versions again, None when the node does not discover versions)."""

    def __init__(self, selector: RegionSelector, now: Callable[[], float], calls_in: Callable[[str], list[str]],
                 discover_now: Callable[[], None] | None = None) -> None:
        self._selector = selector
        self._now = now
        self._calls_in = calls_in
        self._discover_now = discover_now

    def status(self) -> dict[str, Any]:
        """Every region's state. While a region is switching, each read also asks the endpoints'
        versions again (when the node discovers them), so a rollout's health wait sees the new
        servers' versions a poll later rather than a discovery interval later."""
        s = self._selector
        if self._discover_now is not None and any(s.rollout_state(r) == "switching" for r in s.region_names):
            self._discover_now()
        regions = []
        for view in s.view(self._now()):
            regions.append({
                "name": view.name,
                "rollout": s.rollout_state(view.name),
                "health": view.state,
                "up": view.up,
                "versions": sorted(view.versions),
                "configured": sorted(s.spec(view.name).model_versions),
                "reported": {k: sorted(v) for k, v in sorted(s.reported_versions(view.name).items())},
                "active_calls": len(self._calls_in(view.name)),
                "active_streams": view.active_streams,
            })
        return {"discovers_versions": self._discover_now is not None, "regions": regions}

    def render(self, request: Any, path: list[str]) -> bytes:
        """Answer *request* for the path below ``/admin/regions`` (sets the status code)."""
        request.setHeader(b"content-type", b"application/json")
        method = request.method.decode() if isinstance(request.method, bytes) else str(request.method)
        if method == "GET" and not path:
            return self._json(request, 200, self.status())
        if method != "POST" or len(path) != 2 or path[1] not in ACTIONS:
            return self._json(request, 404, {"error": "expected GET /admin/regions or POST /admin/regions/NAME/"
                                                      + "|".join(ACTIONS)})
        name, action = path
        if name not in self._selector.region_names:
            return self._json(request, 404, {"error": f"unknown region {name!r}; regions: "
                                                      + ", ".join(self._selector.region_names)})
        s = self._selector
        if action == "drain":
            s.drain_region(name)
        elif action == "undrain":
            s.undrain_region(name)
        elif action == "switch":
            s.begin_switch(name)
        else:
            try:
                body = json.loads(request.content.read() or b"{}")
                versions = parse_versions(body.get("versions") if isinstance(body, dict) else None)
            except ValueError as exc:  # json errors are ValueErrors too
                return self._json(request, 400, {"error": f"serve: {exc}"})
            s.finish_switch(name, replace_kinds(s.spec(name).model_versions, versions))
        state = s.rollout_state(name)
        calls = len(self._calls_in(name))
        log.info("region {region}: {action} (rollout state {state}, versions {versions}, {calls} calls in it)",
                 region=name, action=action, state=state, versions=",".join(sorted(s.versions(name))) or "-",
                 calls=calls)
        return self._json(request, 200, {"region": name, "action": action, "rollout": state,
                                         "versions": sorted(s.versions(name)), "active_calls": calls})

    @staticmethod
    def _json(request: Any, code: int, body: dict[str, Any]) -> bytes:
        request.setResponseCode(code)
        return json.dumps(body).encode() + b"\n"

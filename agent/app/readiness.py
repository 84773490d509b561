"""Readiness for a global load balancer: ``GET /healthz/ready`` answers 200 only while new calls can land.

A DNS GSLB (PowerDNS ``ifurlup``, docs/deployment.md) treats any non-2xx answer or a timeout as
"down" and stops returning the node's address. ``/healthz`` says how the node is; this says whether
it should be sent calls now: ready (started, not draining, not stopping), its SIP front alive, and
at least one free call slot. Pure functions over what the server and the supervisor already know.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass(frozen=True)
class Readiness:
    """The verdict and why: ``reasons`` is empty when ready."""

    ready: bool
    reasons: tuple[str, ...]
    free_slots: int
    capacity: int
    active_calls: int
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"ready": self.ready, "status": "ready" if self.ready else "not_ready",
                "reasons": list(self.reasons), "free_slots": self.free_slots,
                "capacity": self.capacity, "active_calls": self.active_calls, **self.extra}


def server_readiness(*, ready: bool, stopping: bool, draining: bool, active_calls: int,
                     capacity: int) -> Readiness:
    """A single ``serve`` process (or one worker): its SIP stack is its front."""
    reasons = []
    if stopping:
        reasons.append("stopping")
    elif draining:
        reasons.append("draining")
    elif not ready:
        reasons.append("starting")
    free = max(0, capacity - active_calls)
    if free == 0:
        reasons.append("no_free_slot")
    return Readiness(not reasons, tuple(reasons), free, capacity, active_calls)


def node_readiness(*, state: str, front: str | None, front_running: bool,
                   workers: Iterable[tuple[bool, dict[str, Any]]], capacity_per_worker: int) -> Readiness:
    """A supervisor: *state* is its own (starting, ready, draining, stopping, stopped); *front* the
    status of its Kamailio child (None without ``--front``); *workers* (healthy, last ``/healthz``
    body) of each worker. Free slots count only workers that answer healthy and are not draining."""
    reasons = []
    if state != "ready":
        reasons.append(state)
    if front is not None and (not front_running or front != "ready"):
        reasons.append("front_down")
    free = active = up = 0
    for healthy, health in workers:
        if not healthy or health.get("status") != "ok":
            continue
        up += 1
        cap = int(health.get("capacity") or capacity_per_worker)
        calls = int(health.get("active_calls") or 0)
        active += calls
        free += max(0, cap - calls)
    if up == 0:
        reasons.append("no_worker_up")
    elif free == 0:
        reasons.append("no_free_slot")
    return Readiness(not reasons, tuple(reasons), free, capacity_per_worker * up, active,
                     {"workers_up": up})

"""``/healthz/ready``: 200 only while a GSLB should send the node new calls, 503 with the reasons otherwise."""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from twisted.web.test.requesthelper import DummyRequest

from agent.app.readiness import node_readiness, server_readiness
from agent.app.supervisor_web import HealthPage
from agent.app.web import Health


def render(resource: Any, *path: bytes) -> tuple[int, dict[str, Any]]:
    request = DummyRequest([b"healthz", *path])
    request.postpath = list(path)
    body = resource.render_GET(request)
    return request.responseCode or 200, json.loads(body)


def server(**kw: Any) -> SimpleNamespace:
    state = dict(ready=True, stopping=False, draining=False, worker_id=None, capacity=4, speech_uri="x",
                 drain_timeout_s=None, sessions={}, prompts={})
    state.update(kw)
    return SimpleNamespace(**state)


def test_a_ready_process_with_a_free_slot_is_ready() -> None:
    """Started, not draining, 1 of 4 calls: 200, three free slots."""
    code, body = render(Health(server(sessions={"c1": object()})), b"ready")
    assert code == 200
    assert body["ready"] is True and body["reasons"] == [] and body["free_slots"] == 3


@pytest.mark.parametrize("kw, reason", [
    (dict(ready=False), "starting"),
    (dict(draining=True), "draining"),
    (dict(stopping=True, draining=True), "stopping"),
    (dict(sessions={str(i): object() for i in range(4)}), "no_free_slot"),
])
def test_a_process_that_cannot_take_a_call_answers_503_with_why(kw: dict[str, Any], reason: str) -> None:
    """Each way of not being able to take a new call is a 503 naming it."""
    code, body = render(Health(server(**kw)), b"ready")
    assert code == 503
    assert body["ready"] is False and reason in body["reasons"]


def test_plain_healthz_is_unchanged_by_a_full_process() -> None:
    """/healthz stays 200 when full (the process is fine); only /healthz/ready says no capacity."""
    full = server(sessions={str(i): object() for i in range(4)})
    assert render(Health(full))[0] == 200
    assert render(Health(full), b"ready")[0] == 503


def worker(status: str = "ok", calls: int = 0, healthy: bool = True) -> tuple[bool, dict[str, Any]]:
    return healthy, {"status": status, "active_calls": calls, "capacity": 4}


def test_a_node_is_ready_while_its_front_runs_and_one_worker_has_room() -> None:
    """Two workers, one full: the other's free slots keep the node ready."""
    r = node_readiness(state="ready", front="ready", front_running=True,
                       workers=[worker(calls=4), worker(calls=1)], capacity_per_worker=4)
    assert r.ready and r.free_slots == 3 and r.active_calls == 5


@pytest.mark.parametrize("kw, reason", [
    (dict(state="draining"), "draining"),
    (dict(state="starting"), "starting"),
    (dict(front_running=False, front="exited"), "front_down"),
    (dict(front="starting"), "front_down"),
    (dict(workers=[worker(calls=4), worker(calls=4)]), "no_free_slot"),
    (dict(workers=[worker(healthy=False), worker(status="draining")]), "no_worker_up"),
])
def test_a_node_that_cannot_take_a_call_is_not_ready(kw: dict[str, Any], reason: str) -> None:
    """Draining, a dead Kamailio, every worker full or down: not ready, with the reason."""
    args: dict[str, Any] = dict(state="ready", front="ready", front_running=True,
                                workers=[worker(), worker()], capacity_per_worker=4)
    args.update(kw)
    r = node_readiness(**args)
    assert not r.ready and reason in r.reasons


def test_the_supervisor_page_serves_node_readiness() -> None:
    """The supervisor's /healthz/ready reads its state, its Kamailio child and its workers' last health."""
    front = SimpleNamespace(status="ready", running=True)
    sup = SimpleNamespace(state="ready", front=front, settings=SimpleNamespace(capacity=4),
                          workers=[SimpleNamespace(healthy=True, health={"status": "ok", "active_calls": 2,
                                                                         "capacity": 4})])
    code, body = render(HealthPage(sup), b"ready")  # type: ignore[arg-type]
    assert (code, body["free_slots"], body["workers_up"]) == (200, 2, 1)
    front.running, front.status = False, "exited"
    code, body = render(HealthPage(sup), b"ready")  # type: ignore[arg-type]
    assert code == 503 and body["reasons"] == ["front_down"]

"""A worker's drain, keepalive answers and polite end (``AgentServer``), with a fake clock and fake calls."""
from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock

from agent.app.config import ServerConfig
from agent.app.server import GOODBYE_PROMPT, GOODBYE_TIMEOUT_S, AgentServer
from agent.regions.selector import RegionSelector, RegionSpec
from sip.message import parse_request


def request(method: str, call_id: str = "c1@test") -> Any:
    return parse_request(
        f"{method} sip:1000@127.0.0.1:5160 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-1\r\n"
        "From: <sip:5550100@127.0.0.1>;tag=a\r\nTo: <sip:1000@127.0.0.1>\r\n"
        f"Call-ID: {call_id}\r\nCSeq: 1 {method}\r\nContent-Length: 0\r\n\r\n")


class FakeControl:
    def __init__(self) -> None:
        self.hung_up = False

    def hangup(self) -> None:
        self.hung_up = True


class FakeSession:
    """Stands in for CallSession: records the goodbye and ends when told."""

    def __init__(self, server: AgentServer, call_id: str) -> None:
        self.call_id = call_id
        self.server = server
        self.goodbyes: list[tuple[str, str]] = []
        self._control = FakeControl()
        self.ended = False

    def end_politely(self, text: str, voice: str, reason: str) -> None:
        self.goodbyes.append((text, voice))

    def hang_up(self, reason: str) -> None:
        self._control.hangup()
        self.close(reason)

    def close(self, reason: str) -> None:
        if not self.ended:
            self.ended = True
            self.server.sessions.pop(self.call_id, None)
            self.server._check_idle()


def make_server() -> tuple[AgentServer, Clock, list[str]]:
    clock = Clock()
    server = AgentServer(ServerConfig(), clock)
    server.ready = True
    idle: list[str] = []
    server.on_idle = lambda: idle.append("idle")
    return server, clock, idle


def test_keepalive_options_get_200_until_the_worker_drains() -> None:
    """OPTIONS (Kamailio's probe) is left to pjsua (200) while the worker takes calls; 503 + Retry-After
    once it drains, so the balancer stops sending new calls."""
    server, _clock, _idle = make_server()
    assert server.options_status(request("OPTIONS")) is None
    server.sessions["busy"] = FakeSession(server, "busy")  # type: ignore[assignment]
    server.drain()
    refusal = server.options_status(request("OPTIONS"))
    assert refusal is not None and refusal.status == 503
    assert dict(refusal.headers)["Retry-After"] == str(server.config.sip.retry_after_s)


def test_a_draining_worker_refuses_new_invites_and_counts_them() -> None:
    """New INVITEs during a drain get 503 + Retry-After and count as rejected_draining."""
    server, _clock, _idle = make_server()
    server.sessions["busy"] = FakeSession(server, "busy")  # type: ignore[assignment]
    server.drain()
    refusal = server.admit(request("INVITE", "new@test"))
    assert refusal is not None and refusal.status == 503 and "Retry-After" in dict(refusal.headers)
    assert server.metrics.calls.labels("rejected_draining")._value.get() == 1
    assert server.metrics.draining._value.get() == 1


def test_drain_with_no_calls_is_idle_at_once() -> None:
    """Nothing in progress: the process can stop immediately."""
    server, _clock, idle = make_server()
    assert server.drain(30.0) is True
    assert idle == ["idle"]
    assert server.drain(30.0) is False


def test_drain_waits_for_calls_to_end_by_themselves() -> None:
    """Calls in progress go on; idle only when the last one has ended; no goodbye is said."""
    server, clock, idle = make_server()
    a, b = FakeSession(server, "a"), FakeSession(server, "b")
    server.sessions.update({"a": a, "b": b})  # type: ignore[dict-item]
    server.drain(300.0)
    clock.advance(100)
    a.close("caller hung up")
    assert idle == []
    b.close("caller hung up")
    assert idle == ["idle"]
    assert a.goodbyes == [] and b.goodbyes == []


def test_drain_timeout_says_goodbye_then_forces_the_stragglers() -> None:
    """After the drain timeout each call gets the goodbye prompt; one still up GOODBYE_TIMEOUT_S later is
    hung up; then the worker is idle."""
    server, clock, idle = make_server()
    a, b = FakeSession(server, "a"), FakeSession(server, "b")
    server.sessions.update({"a": a, "b": b})  # type: ignore[dict-item]
    server.drain(60.0)
    clock.advance(59)
    assert a.goodbyes == []
    clock.advance(1.5)
    assert a.goodbyes == [(GOODBYE_PROMPT, server.config.speech.voice)] and len(b.goodbyes) == 1
    a.close("agent hangup: server stopping")  # a's goodbye finished
    clock.advance(GOODBYE_TIMEOUT_S)
    assert b._control.hung_up and b.ended
    assert idle == ["idle"]
    assert server.metrics.calls_ended_by_server.labels("goodbye")._value.get() == 2
    assert server.metrics.calls_ended_by_server.labels("forced")._value.get() == 1


def test_a_second_stop_request_hangs_up_at_once() -> None:
    """end_calls_politely twice (a second SIGTERM): every call is hung up without waiting."""
    server, _clock, idle = make_server()
    a = FakeSession(server, "a")
    server.sessions["a"] = a  # type: ignore[assignment]
    server.end_calls_politely()
    assert a.goodbyes and not a.ended
    server.end_calls_politely()
    assert a._control.hung_up and a.ended and idle == ["idle"]


def test_an_admission_pjsua_answered_itself_frees_its_slot_for_the_next_invite() -> None:
    """INVITEs the gate admits but pjsua answers itself (488 for a codec it cannot use: no call is
    created) hold no slot once the next INVITE comes, even within the same poll of the stack:
    twice the capacity of them, one after another, are all admitted."""
    server, clock, _idle = make_server()
    server.selector = RegionSelector([RegionSpec("local", ("127.0.0.1:9",), ("127.0.0.1:9",), capacity=64)])
    server.selector.on_probe_response("127.0.0.1:9", clock.seconds(), 0.001)
    refusals = [server.admit(request("INVITE", f"nocodec-{i}@test")) for i in range(2 * server.capacity)]
    assert refusals == [None] * (2 * server.capacity)
    assert server.metrics.calls.labels("rejected_capacity")._value.get() == 0

"""The supervisor's plans (ports, restarts, dispatcher list, metrics merge) and its process state
machine, driven with a fake clock and a fake process spawner."""
from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from agent.app.supervisor import (
    RestartPolicy, Supervisor, SupervisorSettings, dispatcher_list, merge_metrics, parse_dispatcher_states,
    parse_kamailio_stats, plan_workers,
)


def plans(count: int = 2, **kw: Any) -> list[Any]:
    args = dict(host="127.0.0.1", sip_port=5060, worker_port=None, metrics_port=9464, rtp_port=4000,
                rtp_port_range=200, call_records="var/calls")
    args.update(kw)
    return plan_workers(count, **args)


def test_workers_get_distinct_sip_metrics_and_rtp_ports() -> None:
    """Worker i: SIP port+100+i, metrics 9465+i, an equal slice of the RTP range; records stay shared."""
    p = plans(3, rtp_port_range=150)
    assert [w.sip_port for w in p] == [5160, 5161, 5162]
    assert [w.metrics_port for w in p] == [9465, 9466, 9467]
    assert [(w.rtp_port, w.rtp_port_range) for w in p] == [(4000, 50), (4050, 50), (4100, 50)]
    assert {w.call_records for w in p} == {"var/calls"}
    assert p[1].sip_uri == "sip:127.0.0.1:5161"


def test_a_jsonl_records_file_becomes_one_file_per_worker() -> None:
    """Call records of several processes must not interleave: NAME.jsonl -> NAME.wI.jsonl."""
    p = plans(2, call_records="/var/log/calls.jsonl")
    assert [w.call_records for w in p] == ["/var/log/calls.w0.jsonl", "/var/log/calls.w1.jsonl"]


def test_workers_bound_to_every_interface_are_dispatched_on_loopback() -> None:
    """A worker on 0.0.0.0 is reached by Kamailio at 127.0.0.1."""
    assert plans(1, host="0.0.0.0")[0].sip_uri == "sip:127.0.0.1:5160"


@pytest.mark.parametrize("kw, message", [
    (dict(count=9, rtp_port_range=100), "gives each of 9 workers 11 RTP ports"),
    (dict(count=2, worker_port=5059), "include the public SIP port 5060"),
    (dict(count=2, worker_port=4100), "lies inside the RTP range 4000-4199"),
    (dict(count=2, worker_port=65535), "run past 65535"),
    (dict(count=0), "at least 1"),
])
def test_conflicting_ports_are_refused_with_the_reason(kw: dict[str, Any], message: str) -> None:
    """Plans that would collide are refused before anything starts."""
    count = kw.pop("count")
    with pytest.raises(ValueError, match=message):
        plans(count, **kw)


def test_restart_delay_doubles_up_to_its_cap() -> None:
    """0.5 s, 1 s, 2 s, ... never above max_delay_s."""
    policy = RestartPolicy(initial_delay_s=0.5, factor=2.0, max_delay_s=5.0)
    assert [policy.delay_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_dispatcher_list_names_every_worker_in_set_one() -> None:
    """One dispatcher line per worker: set id, SIP URI, flags, priority, attributes."""
    text = dispatcher_list(plans(2))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["1 sip:127.0.0.1:5160 0 0 duid=w0;worker=0", "1 sip:127.0.0.1:5161 0 0 duid=w1;worker=1"]


def test_kamcmd_outputs_are_parsed() -> None:
    """Kamailio's view of the workers and its script counters, from kamcmd's text output."""
    out = """{
        NRSETS: 1
        RECORDS: {
            SET: {
                ID: 1
                TARGETS: {
                    DEST: {
                        URI: sip:127.0.0.1:5161
                        FLAGS: IP
                        PRIORITY: 0
                    }
                    DEST: {
                        URI: sip:127.0.0.1:5160
                        FLAGS: AP
                    }
"""
    assert parse_dispatcher_states(out) == {"sip:127.0.0.1:5161": "IP", "sip:127.0.0.1:5160": "AP"}
    stats = "script:openclaw_dispatched = 12\nscript:openclaw_rejected_all_busy = 4\nscript:other = 9\n"
    assert parse_kamailio_stats(stats) == {"dispatched": 12.0, "rejected_all_busy": 4.0}


WORKER_METRICS = """# HELP openclaw_calls_total Inbound calls by outcome
# TYPE openclaw_calls_total counter
openclaw_calls_total{{outcome="answered"}} {answered}
# HELP openclaw_turn_latency_seconds Turn latency
# TYPE openclaw_turn_latency_seconds histogram
openclaw_turn_latency_seconds_bucket{{trigger="speech",le="0.15"}} {fast}
openclaw_turn_latency_seconds_bucket{{trigger="speech",le="+Inf"}} 3.0
openclaw_turn_latency_seconds_count{{trigger="speech"}} 3.0
openclaw_turn_latency_seconds_sum{{trigger="speech"}} 0.9
# HELP openclaw_active_calls Calls in progress
# TYPE openclaw_active_calls gauge
openclaw_active_calls {active}
"""


def test_worker_metrics_merge_into_one_family_each_with_a_worker_label() -> None:
    """Two workers' expositions become one family per metric (valid exposition), samples labelled."""
    from prometheus_client import CollectorRegistry, generate_latest

    texts = {"0": WORKER_METRICS.format(answered=5.0, fast=2.0, active=1.0),
             "1": WORKER_METRICS.format(answered=7.0, fast=1.0, active=3.0)}
    families = merge_metrics(texts)
    assert sorted(f.name for f in families) == ["openclaw_active_calls", "openclaw_calls",
                                                "openclaw_turn_latency_seconds"]
    registry = CollectorRegistry()

    class Fixed:
        def collect(self) -> list[Any]:
            return families

    registry.register(Fixed())  # type: ignore[arg-type]
    body = generate_latest(registry).decode()
    assert body.count("# TYPE openclaw_calls_total counter") == 1
    parsed = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(body) for s in f.samples}
    assert parsed[("openclaw_calls_total", (("outcome", "answered"), ("worker", "1")))] == 7.0
    assert parsed[("openclaw_turn_latency_seconds_bucket", (("le", "0.15"), ("trigger", "speech"),
                                                            ("worker", "0")))] == 2.0
    assert parsed[("openclaw_active_calls", (("worker", "0"),))] == 1.0


# -- the supervisor with a fake clock and fake processes -----------------------------------

class FakeTransport:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.signals: list[int] = []

    def signalProcess(self, signum: int) -> None:  # noqa: N802 (Twisted API)
        self.signals.append(signum)


class Harness:
    def __init__(self, workers: int = 2, **kw: Any) -> None:
        self.clock = Clock()
        self.spawned: list[tuple[Any, list[str], FakeTransport]] = []
        settings = SupervisorSettings(
            workers=plans(workers), worker_argv=["python", "-m", "agent.app.cli", "serve"], capacity=4,
            public_host="127.0.0.1", public_port=5060, metrics_host="127.0.0.1", metrics_port=9464,
            run_dir=kw.pop("run_dir"), embedded_speech=False, drain_timeout_s=30.0, kill_after_s=20.0,
            restart=RestartPolicy(initial_delay_s=0.5, factor=2.0, max_delay_s=4.0, stable_after_s=60.0), **kw)
        self.sup = Supervisor(settings, self.clock, spawn=self._spawn, fetch=lambda url, t: (200, b'{"status": "ok"}'),
                              run=lambda argv: "", in_thread=lambda f, *a: defer.maybeDeferred(f, *a),
                              killpg=self._killpg)
        self.done = False
        self.sup.on_done = lambda: setattr(self, "done", True)

    def _spawn(self, proto: Any, exe: str, argv: list[str], env: dict[str, str]) -> FakeTransport:
        t = FakeTransport(1000 + len(self.spawned))
        self.spawned.append((proto, argv, t))
        return t

    def _killpg(self, pid: int, signum: int) -> None:
        for _proto, _argv, t in self.spawned:
            if t.pid == pid:
                t.signals.append(signum)

    def ready_all(self) -> None:
        for proto, argv, _t in self.spawned:
            proto.childDataReceived(1, b"2026 [openclaw.server#info] ready: SIP on 127.0.0.1:5160 (capacity 4)\n")

    def proto_of(self, worker: int) -> tuple[Any, FakeTransport]:
        child = self.sup.workers[worker].child
        for proto, _argv, t in reversed(self.spawned):
            if t is child.transport:
                return proto, t
        raise AssertionError("not running")

    def exit(self, worker: int, code: int | None = None, sig: int | None = None) -> None:
        proto, _ = self.proto_of(worker)
        reason = ProcessDone(0) if code == 0 else ProcessTerminated(exitCode=code, signal=sig)
        proto.processEnded(Failure(reason))


@pytest.fixture
def harness(tmp_path: Any) -> Harness:
    h = Harness(run_dir=str(tmp_path))
    d = h.sup.start()
    h.clock.advance(0.1)
    h.ready_all()
    h.clock.advance(0.5)
    assert d.called and h.sup.state == "ready"
    return h


def test_workers_start_with_their_own_ports_and_identity(harness: Harness) -> None:
    """Each worker gets --worker-id, its SIP/metrics/RTP ports and capacity on its command line."""
    argv = harness.spawned[1][1]
    joined = " ".join(argv)
    for part in ("--worker-id 1", "--port 5161", "--metrics-port 9466", "--rtp-port 4100", "--rtp-port-range 100",
                 "--capacity 4", "--metrics-host 127.0.0.1"):
        assert part in joined, joined
    assert (tmp := harness.sup.dispatcher_list_path) and open(tmp).read().count("sip:127.0.0.1:516") == 2


def test_a_dead_worker_is_restarted_with_growing_backoff(harness: Harness) -> None:
    """SIGKILLed again and again: restarted after 0.5 s, 1 s, 2 s; each restart counted as a crash."""
    sup, clock = harness.sup, harness.clock
    for expected_delay in (0.5, 1.0, 2.0):
        spawned = len(harness.spawned)
        harness.exit(0, sig=9)
        assert sup.workers[0].child.status == "backoff"
        clock.advance(expected_delay - 0.01)
        assert len(harness.spawned) == spawned, "restarted too early"
        clock.advance(0.02)
        assert len(harness.spawned) == spawned + 1
    assert sup.workers[0].child.restarts == 3
    value = sup.registry.get_sample_value("openclaw_worker_restarts_total", {"worker": "0", "reason": "crashed"})
    assert value == 3.0
    assert "signal SIGKILL" in sup.health()["workers"][0]["last_exit"]


def test_a_worker_that_ran_stably_restarts_at_the_initial_delay(harness: Harness) -> None:
    """After 60 s up, a crash is not 'consecutive': the backoff starts over."""
    harness.exit(1, code=1)
    harness.clock.advance(0.5)
    harness.ready_all()
    harness.clock.advance(120)
    spawned = len(harness.spawned)
    harness.exit(1, code=1)
    harness.clock.advance(0.51)
    assert len(harness.spawned) == spawned + 1


def test_sigterm_drains_workers_then_stops_after_the_last_exits(harness: Harness) -> None:
    """Drain: SIGUSR1 to every worker, no restarts, done only once every worker has exited."""
    import signal

    sup = harness.sup
    sup.drain()
    assert sup.state == "draining"
    for w in (0, 1):
        assert harness.proto_of(w)[1].signals == [signal.SIGUSR1]
    spawned = len(harness.spawned)
    harness.exit(0, code=0)
    harness.clock.advance(5)
    assert len(harness.spawned) == spawned, "a draining node must not restart workers"
    assert not harness.done
    harness.exit(1, code=0)
    assert harness.done and sup.state == "stopped"


def test_drain_timeout_then_second_sigterm_escalate(harness: Harness) -> None:
    """After drain_timeout_s the workers get SIGTERM (goodbye, BYE); a further SIGTERM kills them."""
    import signal

    sup = harness.sup
    sup.drain()
    harness.clock.advance(29.9)
    assert harness.proto_of(0)[1].signals == [signal.SIGUSR1]
    harness.clock.advance(0.2)
    assert harness.proto_of(0)[1].signals == [signal.SIGUSR1, signal.SIGTERM]
    sup.drain()  # another SIGTERM
    assert harness.proto_of(0)[1].signals[-1] == signal.SIGKILL


def test_a_hung_worker_is_killed_and_restarted(harness: Harness) -> None:
    """A ready worker whose /healthz fails for 15 s is killed (then restarted like any crash)."""
    import signal

    harness.sup._fetch = lambda url, t: (_ for _ in ()).throw(OSError("timed out"))  # type: ignore[assignment]
    for _ in range(10):
        harness.clock.advance(1.0)
    assert signal.SIGKILL not in harness.proto_of(0)[1].signals
    for _ in range(7):
        harness.clock.advance(1.0)
    assert harness.proto_of(0)[1].signals == [signal.SIGKILL]


def test_scrape_merges_every_running_worker_and_counts_the_ones_it_cannot_read(harness: Harness) -> None:
    """/metrics: worker 0 answers and is merged with a worker label; worker 1 refuses and counts a scrape
    error; the supervisor's own families come first."""
    def fetch(url: str, timeout_s: float) -> Any:
        if url.endswith(":9465/metrics"):
            return defer.succeed((200, WORKER_METRICS.format(answered=5.0, fast=2.0, active=1.0).encode()))
        return defer.fail(OSError("connection refused"))

    harness.sup._fetch = fetch  # type: ignore[assignment]
    results: list[Any] = []
    harness.sup.scrape().addBoth(results.append)
    body = results[0].decode()
    parsed = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(body) for s in f.samples}
    assert parsed[("openclaw_calls_total", (("outcome", "answered"), ("worker", "0")))] == 5.0
    assert not any(dict(labels).get("worker") == "1" and name == "openclaw_calls_total"
                   for name, labels in parsed)
    assert parsed[("openclaw_worker_scrape_errors_total", (("worker", "1"),))] == 1.0
    assert body.index("openclaw_worker_up") < body.index("openclaw_calls_total")

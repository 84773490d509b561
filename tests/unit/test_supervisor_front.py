"""What the supervisor tells Kamailio about its workers (``kamcmd dispatcher.set_state``), with a fake
clock, fake processes and a recorded ``kamcmd``."""
from __future__ import annotations

import os
from typing import Any

from twisted.internet import defer
from twisted.internet.error import ProcessTerminated
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from agent.app.supervisor import RestartPolicy, Supervisor, SupervisorSettings
from tests.unit.test_supervisor import FakeTransport, plans

READY = b"2026 [openclaw.server#info] ready: SIP on 127.0.0.1:5160 (capacity 4)\n"


class FrontHarness:
    """Two workers behind a (fake) Kamailio; every kamcmd command line is recorded."""

    def __init__(self, run_dir: str) -> None:
        self.clock = Clock()
        self.run_dir = run_dir
        self.spawned: list[tuple[Any, list[str], FakeTransport]] = []
        self.kamcmd: list[list[str]] = []
        settings = SupervisorSettings(
            workers=plans(2), worker_argv=["python", "-m", "agent.app.cli", "serve"], capacity=4,
            public_host="127.0.0.1", public_port=5060, metrics_host="127.0.0.1", metrics_port=9464,
            run_dir=run_dir, front="kamailio", embedded_speech=False,
            restart=RestartPolicy(initial_delay_s=0.5, factor=2.0, max_delay_s=4.0, stable_after_s=60.0))
        self.sup = Supervisor(settings, self.clock, spawn=self._spawn, fetch=lambda url, t: (200, b'{"status": "ok"}'),
                              run=self._run, in_thread=lambda f, *a: defer.maybeDeferred(f, *a),
                              killpg=lambda pid, sig: None)

    def _spawn(self, proto: Any, exe: str, argv: list[str], env: dict[str, str]) -> FakeTransport:
        t = FakeTransport(1000 + len(self.spawned))
        self.spawned.append((proto, argv, t))
        if "kamailio" in argv:  # Kamailio opens its control socket
            open(os.path.join(self.run_dir, "kamailio.ctl"), "w").close()
        return t

    def _run(self, argv: list[str]) -> str:
        self.kamcmd.append(argv)
        return "URI: sip:127.0.0.1:5160 FLAGS: AP\nURI: sip:127.0.0.1:5161 FLAGS: AP\n"

    def proto_of(self, worker: int) -> Any:
        child = self.sup.workers[worker].child
        return next(p for p, _a, t in reversed(self.spawned) if t is child.transport)

    def set_states(self) -> list[tuple[str, str]]:
        """(state, uri) of every ``dispatcher.set_state`` sent so far."""
        return [(a[a.index("dispatcher.set_state") + 1], a[-1]) for a in self.kamcmd if "dispatcher.set_state" in a]


def test_a_restarted_worker_is_marked_up_as_soon_as_it_is_ready(tmp_path: Any) -> None:
    """kill -9 of worker 0: Kamailio is told it is down at once; its replacement is told up the moment it
    says ready (not at Kamailio's next probe) -- and not before, while it is still starting."""
    h = FrontHarness(str(tmp_path))
    d = h.sup.start()
    h.clock.advance(0.1)
    for proto, _argv, _t in list(h.spawned):
        proto.childDataReceived(1, READY)
    h.clock.advance(0.5)
    assert d.called and h.sup.state == "ready"
    assert h.set_states() == [], "workers that started with the node need no notice"
    uri = h.sup.workers[0].plan.sip_uri

    h.proto_of(0).processEnded(Failure(ProcessTerminated(exitCode=None, signal=9)))
    assert h.set_states() == [("ip", uri)]
    h.clock.advance(0.6)  # restarted after the 0.5 s backoff
    assert h.sup.workers[0].child.status == "starting"
    h.clock.advance(3.0)
    assert h.set_states() == [("ip", uri)], "a worker still starting must not be marked up"
    h.proto_of(0).childDataReceived(1, READY)
    assert h.set_states() == [("ip", uri), ("ap", uri)]
    assert h.sup.workers[1].child.restarts == 0

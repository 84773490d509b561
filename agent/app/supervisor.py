"""``openclaw-voice serve --workers N``: worker processes under one supervisor.

One process holds at most 4 calls (the pjsua2 wheel's compiled limit) and runs
Python on one core, so a node serves more calls with several *workers*, each a
full SIP user agent on its own port, behind a SIP load balancer (Kamailio's
dispatcher module; ``--front kamailio`` starts it here). The supervisor:

* starts ONE embedded speech server (unless speech regions are configured) and
  hands its address to every worker as the region ``local``;
* starts N workers (``serve --worker-id i`` with their own SIP, RTP and metrics
  ports and call-record files), restarts one that dies with exponential
  backoff (pjsua2 aborts the whole process on misuse), and polls their health;
* optionally runs Kamailio with a dispatcher list generated from the workers,
  and tells it at once when a worker dies, and when a restarted one is ready
  (``dispatcher.set_state``), instead of waiting for its keepalive probes;
* serves one ``/metrics`` covering every worker (each worker's samples with a
  ``worker`` label, plus its own), ``/healthz`` with per-worker health, and
  ``POST /admin/drain`` (whole node) / ``POST /admin/workers/I/drain`` (one
  worker: it finishes its calls, exits, and a fresh one replaces it);
* drains on SIGTERM: workers answer keepalives and INVITEs with 503 so the
  balancer sends no new calls, calls in progress finish, then every process
  exits. A second SIGTERM, or ``--drain-timeout``, ends calls politely
  (goodbye prompt, then BYE).

The planning pieces (:func:`plan_workers`, :class:`RestartPolicy`,
:func:`dispatcher_list`, :func:`merge_metrics`) are pure and live in
:mod:`agent.app.supervisor_plan`; the child processes in :mod:`agent.app.supervisor_child`;
the pages in :mod:`agent.app.supervisor_web`; the entry point in
:mod:`agent.app.supervisor_main`. :class:`Supervisor` takes its reactor, process spawner
and HTTP fetch as parameters.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import Metric
from twisted.internet import defer, threads
from twisted.internet.task import deferLater
from twisted.logger import Logger

from agent.app.config import PACKAGE_ROOT
from agent.app.front_access import FrontAccessList, front_defines
from agent.app.supervisor_child import LAUNCHER, Child, ChildProtocol, Spawner, run_command
from agent.app.supervisor_plan import (
    MIN_RTP_PORTS_PER_WORKER, WORKER_MAX_CALLS, MetricFamilies, RestartPolicy, WorkerPlan, dispatcher_list,
    merge_metrics, parse_all, parse_dispatcher_states, parse_kamailio_stats, plan_workers,
)
from agent.integrations.http import HttpClient
from sip.guard import AccessSettings

__all__ = [
    "DEFAULT_KAMAILIO_CFG", "MIN_RTP_PORTS_PER_WORKER", "WORKER_MAX_CALLS", "Child", "RestartPolicy", "Supervisor",
    "SupervisorSettings", "WorkerPlan", "WorkerState", "dispatcher_list", "merge_metrics", "parse_dispatcher_states",
    "parse_kamailio_stats", "plan_workers",
]

log = Logger(namespace="openclaw.supervisor")

DEFAULT_KAMAILIO_CFG = os.path.join(PACKAGE_ROOT, "ops", "kamailio", "kamailio.cfg")
#: largest /metrics or /healthz body read from a worker
MAX_WORKER_BODY_BYTES = 16 << 20


@dataclass
class WorkerState:
    plan: WorkerPlan
    child: Child
    health: dict[str, Any] = field(default_factory=dict)
    healthy: bool = False
    #: when its health check began failing while it was up (hang detection)
    unhealthy_since: float | None = None


# -- the supervisor -----------------------------------------------------------------

@dataclass(frozen=True)
class SupervisorSettings:
    workers: list[WorkerPlan]
    #: argv of one worker, without the per-worker options
    worker_argv: list[str]
    capacity: int
    public_host: str
    public_port: int
    metrics_host: str
    metrics_port: int
    run_dir: str
    front: str = "none"
    kamailio_cfg: str = DEFAULT_KAMAILIO_CFG
    kamailio_bin: str = "kamailio"
    kamcmd_bin: str = "kamcmd"
    retry_after_s: int = 5
    #: start the embedded speech server (no regions and no --speech-uri configured)
    embedded_speech: bool = True
    #: the embedded speech server decodes hinted streams beside the general model too
    general_alongside_hints: bool = False
    #: how the embedded speech server hears words that are not the hints (``--open-speech``)
    open_speech: str = "whisper"
    drain_timeout_s: float = 300.0
    #: after the polite end began, processes still running this long are killed
    kill_after_s: float = 20.0
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    health_interval_s: float = 1.0
    #: a ready worker whose health check fails this long is hung: it is killed and restarted
    hang_timeout_s: float = 15.0
    ready_timeout_s: float = 180.0
    log_format: str = "text"
    #: tell Kamailio at once when a worker process ends (else only its probes notice)
    notify_front: bool = True
    ping_interval_s: int = 1
    #: sip.access of the config: the front enforces the same ACL and bans (agent/app/front_access.py)
    access: AccessSettings = field(default_factory=AccessSettings)
    #: extra Kamailio -A NAME=VALUE defines (--kamailio-define)
    kamailio_defines: tuple[tuple[str, str], ...] = ()


class Supervisor:
    def __init__(self, settings: SupervisorSettings, reactor: Any, spawn: Spawner | None = None,
                 fetch: Callable[[str, float], tuple[int, bytes]] | None = None,
                 run: Callable[[list[str]], str] | None = None,
                 in_thread: Callable[..., defer.Deferred[Any]] | None = None,
                 killpg: Callable[[int, int], None] | None = None) -> None:
        self.settings = settings
        self.reactor = reactor
        self._in_thread = in_thread or threads.deferToThread
        self._killpg = killpg or os.killpg
        self._spawn = spawn or (lambda proto, exe, argv, env: reactor.spawnProcess(proto, exe, argv, env=env))
        self._fetch = fetch or http_fetcher(reactor)
        self._run = run or run_command
        self.registry = CollectorRegistry()
        r = self.registry
        self.m_worker_up = Gauge("openclaw_worker_up", "1 while the worker process answers its health check ready",
                                 ["worker"], registry=r)
        self.m_worker_restarts = Counter("openclaw_worker_restarts_total",
                                         "Worker processes started again after one ended", ["worker", "reason"],
                                         registry=r)
        self.m_helper_restarts = Counter("openclaw_helper_restarts_total",
                                         "Kamailio or speech-server processes started again after one ended",
                                         ["process"], registry=r)
        self.m_draining = Gauge("openclaw_supervisor_draining", "1 while the node drains", registry=r)
        self.m_front_up = Gauge("openclaw_front_up", "1 while the supervisor's Kamailio runs", registry=r)
        self.m_scrape_errors = Counter("openclaw_worker_scrape_errors_total",
                                       "Worker /metrics the supervisor could not read", ["worker"], registry=r)
        self.m_workers = Gauge("openclaw_workers", "Worker processes configured", registry=r)
        self.m_workers.set(len(settings.workers))
        for plan in settings.workers:
            for reason in ("crashed", "exited"):
                self.m_worker_restarts.labels(str(plan.index), reason)
            self.m_worker_up.labels(str(plan.index)).set(0)
        for name in ("kamailio", "speech-server"):
            self.m_helper_restarts.labels(name)
        self.workers: list[WorkerState] = []
        self.speech: Child | None = None
        self.speech_address = ""
        self.front: Child | None = None
        self.access_list: FrontAccessList | None = None
        self.state = "starting"
        self.ending = False
        self.exit_code = 0
        self.on_done: Callable[[], None] = lambda: None
        self.front_stats: dict[str, float] = {}
        self._speech_ready: defer.Deferred[str] | None = None
        self._timers: list[Any] = []
        self._health_call: Any = None
        self._last_output: dict[str, str] = {}

    # -- start ----------------------------------------------------------------------
    @defer.inlineCallbacks
    def start(self) -> Any:
        s = self.settings
        os.makedirs(s.run_dir, exist_ok=True)
        if s.embedded_speech:
            self.speech_address = yield self._start_speech()
            log.info("speech backend: embedded speech server at {uri} (shared by {n} workers)",
                     uri=self.speech_address, n=len(s.workers))
        for plan in s.workers:
            child = Child(f"worker {plan.index}", self._worker_argv(plan), self._env(),
                          on_line=self._child_line, on_exit=self._child_exit)
            self.workers.append(WorkerState(plan, child))
            self._start_child(child)
        self._health_call = self.reactor.callLater(0.5, self._poll_health)
        deadline = self.reactor.seconds() + s.ready_timeout_s
        while self.reactor.seconds() < deadline and not all(w.child.status == "ready" for w in self.workers):
            if self.state != "starting":
                return
            yield deferLater(self.reactor, 0.2, lambda: None)
        not_ready = [w.plan.index for w in self.workers if w.child.status != "ready"]
        if not_ready:
            log.warn("workers {ids} not ready after {s:.0f} s; going on without them", ids=not_ready,
                     s=s.ready_timeout_s)
        self._write_dispatcher_list()
        if s.front == "kamailio":
            if s.access.enabled:
                self.access_list = FrontAccessList(
                    s.access, os.path.join(s.run_dir, "trusted.list"), self.reactor,
                    lambda: self._in_thread(self._run, [s.kamcmd_bin, "-s", f"unix:{self.ctl_socket}",
                                                        "permissions.addressReload"]))
                yield self.access_list.start()
            if os.path.exists(self.ctl_socket):
                os.unlink(self.ctl_socket)  # left by a Kamailio that was killed
            self.front = Child("kamailio", self._kamailio_argv(), self._env(), on_line=self._child_line,
                               on_exit=self._child_exit)
            self._start_child(self.front)
            yield self._wait_front_ready()
            if self.access_list is not None:
                self.access_list.running = True
        self.state = "ready"
        front = f", kamailio on {s.public_host}:{s.public_port}" if self.front else ""
        log.info("supervisor ready: {n} workers on SIP ports {first}-{last} (capacity {cap} each){front}, "
                 "metrics on {mhost}:{mport}", n=len(self.workers), first=s.workers[0].sip_port,
                 last=s.workers[-1].sip_port, cap=s.capacity, front=front, mhost=s.metrics_host,
                 mport=s.metrics_port)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["OPENCLAW_PARENT_PID"] = str(os.getpid())
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _worker_argv(self, plan: WorkerPlan) -> list[str]:
        s = self.settings
        argv = list(s.worker_argv) + [
            "--worker-id", str(plan.index), "--host", plan.host, "--port", str(plan.sip_port),
            "--metrics-host", "127.0.0.1", "--metrics-port", str(plan.metrics_port),
            "--capacity", str(s.capacity), "--rtp-port", str(plan.rtp_port),
            "--rtp-port-range", str(plan.rtp_port_range), "--call-records", plan.call_records,
            "--drain-timeout", str(s.drain_timeout_s), "--log-format", s.log_format,
        ]
        if self.speech_address:
            argv += ["--embedded-speech", self.speech_address]
        if s.front == "kamailio" and s.access.enabled:
            # The worker believes the caller's address Kamailio sends in X-OpenClaw-Source.
            argv += ["--front-source", s.public_host if s.public_host not in ("", "0.0.0.0") else "127.0.0.1"]
        return argv

    def _kamailio_argv(self) -> list[str]:
        s = self.settings
        defines = {
            "DISPATCHER_LIST": f'"{self.dispatcher_list_path}"',
            "CTL_SOCKET": f'"unix:{self.ctl_socket}"',
            "RETRY_AFTER_S": str(s.retry_after_s),
            "PING_INTERVAL_S": str(s.ping_interval_s),
            "CHILDREN": "2",
        }
        argv = [s.kamailio_bin, "-DD", "-E", "-f", s.kamailio_cfg, "-m", "32", "-M", "4",
                "-P", os.path.join(s.run_dir, "kamailio.pid")]
        if s.public_host in ("", "0.0.0.0"):
            defines["SIP_PORT"] = str(s.public_port)
        else:
            defines["LISTEN"] = f"udp:{s.public_host}:{s.public_port}"
        if self.access_list is not None:
            defines.update(front_defines(s.access, self.access_list.path))
        defines.update(s.kamailio_defines)
        for name, value in defines.items():
            argv += ["-A", f"{name}={value}"]
        return argv

    @property
    def dispatcher_list_path(self) -> str:
        return os.path.join(self.settings.run_dir, "dispatcher.list")

    @property
    def ctl_socket(self) -> str:
        return os.path.join(self.settings.run_dir, "kamailio.ctl")

    def _write_dispatcher_list(self) -> None:
        tmp = self.dispatcher_list_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(dispatcher_list(w.plan for w in self.workers))
        os.replace(tmp, self.dispatcher_list_path)

    def _start_speech(self) -> defer.Deferred[str]:
        listen = f"127.0.0.1:{self.speech_address.rsplit(':', 1)[1]}" if self.speech_address else "127.0.0.1:0"
        self.speech = self.speech or Child("speech-server", [], self._env(), on_line=self._child_line,
                                           on_exit=self._child_exit)
        self.speech.argv = [sys.executable, "-m", "agent.speech.server", "--listen", listen,
                            "--open-speech", "general" if self.settings.general_alongside_hints
                            else self.settings.open_speech]
        self._speech_ready = defer.Deferred()
        self._start_child(self.speech)
        return self._speech_ready

    def _start_child(self, child: Child) -> None:
        child.restart_timer = None
        child.killpg = self._killpg
        child.status = "starting"
        child.started_at = self.reactor.seconds()
        argv = [sys.executable, "-c", LAUNCHER, str(os.getpid())] + child.argv
        child.transport = self._spawn(ChildProtocol(child), sys.executable, argv, child.env)
        child.pid = getattr(child.transport, "pid", None)
        log.info("{name} started (pid {pid})", name=child.name, pid=child.pid)

    @defer.inlineCallbacks
    def _wait_front_ready(self) -> Any:
        deadline = self.reactor.seconds() + 15.0
        while self.reactor.seconds() < deadline:
            if self.front is None or not self.front.running:
                raise RuntimeError(f"kamailio exited: {self.front.last_exit if self.front else ''}")
            if os.path.exists(self.ctl_socket):
                try:
                    out = yield self._in_thread(self._run, [self.settings.kamcmd_bin, "-s",
                                                                   f"unix:{self.ctl_socket}", "dispatcher.list"])
                except Exception:  # noqa: BLE001 -- not listening yet
                    out = ""
                if "URI:" in out:
                    self.front.status = "ready"
                    self.m_front_up.set(1)
                    return
            yield deferLater(self.reactor, 0.2, lambda: None)
        raise RuntimeError("kamailio did not answer on its control socket within 15 s")

    # -- output and exits ------------------------------------------------------------
    def _child_line(self, child: Child, line: str) -> None:
        if not line:
            return
        if child is self.speech and self._speech_ready is not None and not self._speech_ready.called:
            m = re.search(r"listening on (\S+)", line)
            if m:
                self.speech.status = "ready"
                self._speech_ready.callback(m.group(1))
        if child.status == "starting" and "ready: SIP on" in line:
            child.status = "ready"
            child_ready = self.reactor.seconds() - child.started_at
            log.info("{name} ready in {s:.1f} s", name=child.name, s=child_ready)
        if "ready: SIP on" in line and child.restarts and self.state == "ready":
            worker = self._worker_of(child)
            if (worker is not None and self.front is not None and self.front.running
                    and self.settings.notify_front):
                # a restarted worker takes calls at once, not at Kamailio's next probe
                self._front_set_state(worker.plan, "ap")
        if child is not self.front and ('"GET /healthz' in line or '"GET /metrics' in line):
            return  # the supervisor's own polling
        if self.settings.log_format == "json":
            sys.stdout.write(line + "\n")
        else:
            sys.stdout.write(f"[{child.name}] {line}\n")
        sys.stdout.flush()

    def _child_exit(self, child: Child, code: int | None, sig: int | None) -> None:
        # Restarts are decided here (see agent.app.supervisor_child for why not procmon).
        how = f"signal {signal.Signals(sig).name}" if sig else f"status {code}"
        uptime = self.reactor.seconds() - child.started_at
        child.last_exit = how
        child.status = "exited"
        worker = self._worker_of(child)
        if worker is not None:
            worker.healthy = False
            self.m_worker_up.labels(str(worker.plan.index)).set(0)
            if (self.front is not None and self.front.running and self.settings.notify_front
                    and self.state in ("starting", "ready")):
                self._front_set_state(worker.plan, "ip")
        if child is self.front:
            self.m_front_up.set(0)
        if child is self.speech and self._speech_ready is not None and not self._speech_ready.called:
            self._speech_ready.errback(RuntimeError(f"embedded speech server exited ({how})"))
        if self.state in ("draining", "stopping"):
            log.info("{name} exited ({how})", name=child.name, how=how)
            self._check_stopped()
            return
        clean = code == 0  # a worker that drained (POST /admin/workers/I/drain) and exited
        if uptime >= self.settings.restart.stable_after_s or clean:
            child.failures = 0
        child.failures += 0 if clean else 1
        delay = 0.0 if clean else self.settings.restart.delay_s(child.failures)
        reason = "exited" if clean else "crashed"
        log.warn("{name} {reason} ({how}) after {up:.1f} s; restarting in {d:.1f} s", name=child.name,
                 reason="ended" if clean else "died", how=how, up=uptime, d=delay)
        child.status = "backoff"
        child.restart_timer = self.reactor.callLater(delay, self._restart, child, reason)

    def _restart(self, child: Child, reason: str) -> None:
        child.restart_timer = None
        if self.state in ("draining", "stopping"):
            child.status = "exited"
            self._check_stopped()
            return
        child.restarts += 1
        worker = self._worker_of(child)
        if worker is not None:
            self.m_worker_restarts.labels(str(worker.plan.index), reason).inc()
            child.argv = self._worker_argv(worker.plan)
            self._start_child(child)
        elif child is self.speech:
            self.m_helper_restarts.labels("speech-server").inc()
            d = self._start_speech()
            d.addErrback(lambda f: None)
        elif child is self.front:
            self.m_helper_restarts.labels("kamailio").inc()
            self._start_child(child)
            self._wait_front_ready().addErrback(lambda f: log.warn("kamailio: {err}", err=f.getErrorMessage()))

    def _worker_of(self, child: Child) -> WorkerState | None:
        for w in self.workers:
            if w.child is child:
                return w
        return None

    def _front_set_state(self, plan: WorkerPlan, state: str) -> None:
        argv = [self.settings.kamcmd_bin, "-s", f"unix:{self.ctl_socket}", "dispatcher.set_state", state, "1",
                plan.sip_uri]
        d = self._in_thread(self._run, argv)
        how = "up" if state.startswith("a") else "down"
        d.addCallback(lambda out: log.info("kamailio: worker {i} ({uri}) marked {how}", i=plan.index,
                                           uri=plan.sip_uri, how=how))
        d.addErrback(lambda f: log.warn("kamailio: cannot mark worker {i} {how}: {err}", i=plan.index, how=how,
                                        err=f.getErrorMessage()))

    # -- health ---------------------------------------------------------------------
    def _poll_health(self) -> None:
        self._health_call = None
        if self.state == "stopped":
            return
        ds = [self._check_worker(w) for w in self.workers if w.child.running]
        d = defer.DeferredList(ds, consumeErrors=True)
        d.addBoth(lambda _: self._schedule_health())

    def _schedule_health(self) -> None:
        if self.state != "stopped":
            self._health_call = self.reactor.callLater(self.settings.health_interval_s, self._poll_health)

    def _check_worker(self, w: WorkerState) -> defer.Deferred[None]:
        url = f"http://127.0.0.1:{w.plan.metrics_port}/healthz"
        d = defer.maybeDeferred(self._fetch, url, 1.0)

        def got(result: tuple[int, bytes]) -> None:
            status, body = result
            try:
                w.health = json.loads(body)
            except ValueError:
                w.health = {}
            w.healthy = status == 200
            w.unhealthy_since = None
            if w.healthy and w.child.status == "starting":
                w.child.status = "ready"
            if w.health.get("status") == "draining" and w.child.status == "ready":
                w.child.status = "draining"
            self.m_worker_up.labels(str(w.plan.index)).set(1 if w.healthy else 0)

        def failed(_f: Any) -> None:
            w.healthy = False
            self.m_worker_up.labels(str(w.plan.index)).set(0)
            if w.child.status != "ready" or not w.child.running:
                return
            now = self.reactor.seconds()
            if w.unhealthy_since is None:
                w.unhealthy_since = now
            elif now - w.unhealthy_since >= self.settings.hang_timeout_s:
                log.warn("worker {i} has not answered its health check for {s:.0f} s: killing it",
                         i=w.plan.index, s=now - w.unhealthy_since)
                w.unhealthy_since = None
                w.child.signal("KILL")

        d.addCallbacks(got, failed)
        return d

    def health(self) -> dict[str, Any]:
        now = self.reactor.seconds()
        workers = []
        for w in self.workers:
            c = w.child
            workers.append({
                "worker": w.plan.index, "pid": c.pid, "status": c.status, "healthy": w.healthy,
                "sip": w.plan.address, "metrics_port": w.plan.metrics_port,
                "active_calls": w.health.get("active_calls"), "capacity": w.health.get("capacity"),
                "restarts": c.restarts, "last_exit": c.last_exit,
                "uptime_s": round(now - c.started_at, 1) if c.running else None,
            })
        body: dict[str, Any] = {
            "status": self.state if self.state != "ready" else (
                "ok" if all(w.healthy for w in self.workers) else
                "degraded" if any(w.healthy for w in self.workers) else "down"),
            "workers": workers,
            "capacity": self.settings.capacity * len(self.workers),
            "active_calls": sum(int(w.health.get("active_calls") or 0) for w in self.workers if w.healthy),
            "speech_backend": self.speech_address,
        }
        if self.front is not None:
            body["front"] = {"process": "kamailio", "status": self.front.status, "pid": self.front.pid,
                             "listen": f"{self.settings.public_host}:{self.settings.public_port}",
                             "restarts": self.front.restarts}
        return body

    def front_states(self) -> dict[str, str]:
        """Kamailio's view of the workers: {sip uri: dispatcher flags} (blocking; use in a thread)."""
        if self.front is None:
            return {}
        return parse_dispatcher_states(self._run([self.settings.kamcmd_bin, "-s", f"unix:{self.ctl_socket}",
                                                  "dispatcher.list"]))

    # -- metrics --------------------------------------------------------------------
    @defer.inlineCallbacks
    def scrape(self) -> Any:
        """One exposition covering the supervisor and every worker (a Deferred firing with bytes).

        The workers are read on the reactor thread; parsing, merging and ``kamcmd`` run in a thread.
        """
        running = [w for w in self.workers if w.child.running]
        urls = [f"http://127.0.0.1:{w.plan.metrics_port}/metrics" for w in running]
        results = yield defer.DeferredList([defer.maybeDeferred(self._fetch, url, 2.0) for url in urls],
                                           consumeErrors=True)
        texts: dict[str, str] = {}
        for w, (ok, result) in zip(running, results):
            if ok and result[0] == 200:
                texts[str(w.plan.index)] = result[1].decode("utf-8", "replace")
            else:  # timeouts, refused, an error status
                self.m_scrape_errors.labels(str(w.plan.index)).inc()
        body = yield self._in_thread(self._exposition, texts)
        return body

    def _exposition(self, texts: dict[str, str]) -> bytes:
        """The supervisor's own metrics, then every worker's merged (blocking; use in a thread)."""
        good, bad = parse_all(texts)
        for key in bad:
            self.m_scrape_errors.labels(key).inc()
        if self.front is not None and self.front.running:
            try:
                self.front_stats = parse_kamailio_stats(self._run(
                    [self.settings.kamcmd_bin, "-s", f"unix:{self.ctl_socket}", "stats.get_statistics",
                     "script:"]))
            except Exception:  # noqa: BLE001
                pass
        own = generate_latest(self.registry)
        merged = CollectorRegistry()
        families = merge_metrics(good)
        if self.front is not None:
            front = Metric("openclaw_front_rejected", "Requests the Kamailio front refused or dropped itself",
                           "counter")
            for key, reason in (("rejected_all_busy", "all_workers_busy"), ("rejected_no_worker", "no_worker_up"),
                                ("rejected_flood", "flood"), ("rejected_scanner", "scanner"),
                                ("rejected_untrusted", "untrusted"),
                                ("rejected_banned", "banned"), ("rejected_method", "method"),
                                ("rejected_multipart", "multipart")):  # kamailio.cfg: update_stat("openclaw_<key>")
                front.add_sample("openclaw_front_rejected_total", {"reason": reason}, self.front_stats.get(key, 0.0))
            dispatched = Metric("openclaw_front_dispatched", "INVITEs the Kamailio front dispatched", "counter")
            dispatched.add_sample("openclaw_front_dispatched_total", {}, self.front_stats.get("dispatched", 0.0))
            bans = Metric("openclaw_front_auth_bans", "Sources the Kamailio front banned after failed "
                          "authentications", "counter")
            bans.add_sample("openclaw_front_auth_bans_total", {}, self.front_stats.get("auth_bans", 0.0))
            families += [front, dispatched, bans]
        merged.register(MetricFamilies(families))  # type: ignore[arg-type]
        return own + generate_latest(merged)

    # -- drain and stop ---------------------------------------------------------------
    def drain(self) -> None:
        """First SIGTERM: workers take no new calls; exit once their calls have ended."""
        if self.state in ("draining", "stopping", "stopped"):
            self.end_calls()
            return
        self.state = "draining"
        self.m_draining.set(1)
        running = [w for w in self.workers if w.child.running]
        log.info("draining: {n} worker(s) finish their calls and exit (calls still up in {t:.0f} s get a goodbye)",
                 n=len(running), t=self.settings.drain_timeout_s)
        for w in self.workers:
            c = w.child
            if c.restart_timer is not None and c.restart_timer.active():
                c.restart_timer.cancel()
                c.restart_timer = None
                c.status = "exited"
            if c.running:
                # A worker still starting has no signal handlers yet: SIGTERM ends it cleanly.
                c.signal("USR1" if c.status in ("ready", "draining") else "TERM")
                if c.status == "ready":
                    c.status = "draining"
        self._timers.append(self.reactor.callLater(self.settings.drain_timeout_s, self.end_calls))
        self._check_stopped()

    def reload(self) -> None:
        """SIGHUP: every running worker reloads its dialplans."""
        for w in self.workers:
            if w.child.status in ("ready", "draining"):
                w.child.signal("HUP")

    def drain_worker(self, index: int) -> bool:
        """Drain one worker (it exits when idle and a fresh one replaces it)."""
        for w in self.workers:
            if w.plan.index == index and w.child.running and w.child.status == "ready":
                w.child.signal("USR1")
                w.child.status = "draining"
                return True
        return False

    def end_calls(self) -> None:
        """Second SIGTERM or drain timeout: workers end calls politely (goodbye, BYE), then exit."""
        if self.ending:
            log.info("ending now: killing what is left")
            self._kill_all()
            return
        self.ending = True
        if self.state == "starting" or self.state == "ready":
            self.state = "draining"
            self.m_draining.set(1)
        log.info("ending calls: goodbye prompt, then BYE, on every worker")
        for w in self.workers:
            w.child.signal("TERM")
        self._timers.append(self.reactor.callLater(self.settings.kill_after_s, self._kill_all))
        self._check_stopped()

    def _kill_all(self) -> None:
        for c in self._children():
            if c.running:
                log.warn("{name} still running: SIGKILL", name=c.name)
                c.signal("KILL", group=True)

    def _children(self) -> list[Child]:
        out = [w.child for w in self.workers]
        out += [c for c in (self.front, self.speech) if c is not None]
        return out

    def _check_stopped(self) -> None:
        if self.state == "draining" and not any(w.child.running for w in self.workers):
            self.state = "stopping"
            log.info("all workers have exited: stopping kamailio and the speech server")
            for c in (self.front, self.speech):
                if c is not None:
                    if c.restart_timer is not None and c.restart_timer.active():
                        c.restart_timer.cancel()
                        c.restart_timer = None
                    c.signal("TERM")
            self._timers.append(self.reactor.callLater(10.0, self._kill_all))
        if self.state == "stopping" and not any(c.running for c in self._children()):
            self.state = "stopped"
            self.m_draining.set(0)
            for t in self._timers:
                if t.active():
                    t.cancel()
            if self._health_call is not None and self._health_call.active():
                self._health_call.cancel()
            log.info("supervisor stopped")
            self.on_done()


def http_fetcher(reactor: Any) -> Callable[[str, float], defer.Deferred[tuple[int, bytes]]]:
    """``fetch(url, timeout_s)`` over the agent's HTTP client: fires with (status, body) of any status."""
    client = HttpClient(reactor)

    def fetch(url: str, timeout_s: float) -> defer.Deferred[tuple[int, bytes]]:
        d = client.get(url, timeout_s=timeout_s, max_body_bytes=MAX_WORKER_BODY_BYTES)
        return d.addCallback(lambda response: (response.status, response.body))

    return fetch

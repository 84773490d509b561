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
  and tells it at once when a worker dies (``dispatcher.set_state``) instead of
  waiting for its keepalive probes;
* serves one ``/metrics`` covering every worker (each worker's samples with a
  ``worker`` label, plus its own), ``/healthz`` with per-worker health, and
  ``POST /admin/drain`` (whole node) / ``POST /admin/workers/I/drain`` (one
  worker: it finishes its calls, exits, and a fresh one replaces it);
* drains on SIGTERM: workers answer keepalives and INVITEs with 503 so the
  balancer sends no new calls, calls in progress finish, then every process
  exits. A second SIGTERM, or ``--drain-timeout``, ends calls politely
  (goodbye prompt, then BYE).

The planning pieces (:func:`plan_workers`, :class:`RestartPolicy`,
:func:`dispatcher_list`, :func:`merge_metrics`) are pure; :class:`Supervisor`
takes its reactor and process spawner as parameters.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer, protocol, threads
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from agent.app.config import PACKAGE_ROOT, ServerConfig

log = Logger(namespace="openclaw.supervisor")

#: calls one worker can hold (pjsua2-python is compiled with PJSUA_MAX_CALLS = 4)
WORKER_MAX_CALLS = 4
#: RTP ports one worker needs at least: RTP + RTCP per call, and room to skip busy ones
MIN_RTP_PORTS_PER_WORKER = 12
DEFAULT_KAMAILIO_CFG = os.path.join(PACKAGE_ROOT, "ops", "kamailio", "kamailio.cfg")

# Children die with the supervisor (PR_SET_PDEATHSIG survives exec): a supervisor
# killed with SIGKILL must not leave workers holding the SIP ports. Each child gets
# its own session, so a signal to the supervisor's process group (Ctrl-C in a
# terminal, `timeout`) reaches only the supervisor, which drains the workers.
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "os.setsid()\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


# -- plans (pure) -------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerPlan:
    """Where worker *index* listens and writes."""

    index: int
    host: str
    sip_port: int
    metrics_port: int
    rtp_port: int
    rtp_port_range: int
    call_records: str

    @property
    def address(self) -> str:
        """host:port the balancer sends to (loopback when the worker binds every interface)."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"{host}:{self.sip_port}"

    @property
    def sip_uri(self) -> str:
        return f"sip:{self.address}"


def plan_workers(count: int, *, host: str, sip_port: int, worker_port: int | None, metrics_port: int,
                 rtp_port: int, rtp_port_range: int, call_records: str) -> list[WorkerPlan]:
    """Ports and files of *count* workers; raises ValueError naming the conflict.

    Worker i listens for SIP on ``worker_port + i`` (default ``sip_port + 100``),
    serves metrics on ``metrics_port + 1 + i`` (the supervisor has
    ``metrics_port``), and gets an equal slice of the configured RTP range.
    A ``.jsonl`` call-record file becomes one file per worker (``NAME.wI.jsonl``);
    a directory stays shared and each worker writes its own per-day files.
    """
    if count < 1:
        raise ValueError(f"--workers must be at least 1, got {count}")
    base = worker_port if worker_port is not None else sip_port + 100
    per_worker = rtp_port_range // count
    if per_worker < MIN_RTP_PORTS_PER_WORKER:
        raise ValueError(f"sip.rtp_port_range {rtp_port_range} gives each of {count} workers {per_worker} RTP "
                         f"ports; each needs at least {MIN_RTP_PORTS_PER_WORKER}")
    sip_ports = range(base, base + count)
    metrics_ports = range(metrics_port + 1, metrics_port + 1 + count)
    if sip_ports[-1] > 65535 or metrics_ports[-1] > 65535 or rtp_port + rtp_port_range > 65536:
        raise ValueError(f"worker ports run past 65535 (SIP {base}+{count}, metrics {metrics_port + 1}+{count})")
    if sip_port in sip_ports:
        raise ValueError(f"worker SIP ports {base}-{sip_ports[-1]} include the public SIP port {sip_port}; "
                         f"choose another --worker-port")
    rtp = range(rtp_port, rtp_port + rtp_port_range)
    clash = [p for p in sip_ports if p in rtp]
    if clash:
        raise ValueError(f"worker SIP port {clash[0]} lies inside the RTP range {rtp_port}-{rtp[-1]}")
    plans = []
    for i in range(count):
        records = call_records
        if records.endswith(".jsonl"):
            records = f"{records[:-len('.jsonl')]}.w{i}.jsonl"
        plans.append(WorkerPlan(i, host, sip_ports[i], metrics_ports[i], rtp_port + i * per_worker, per_worker,
                                records))
    return plans


@dataclass(frozen=True)
class RestartPolicy:
    """Delay before restarting a process that exited: exponential, reset once it ran stably."""

    initial_delay_s: float = 0.5
    factor: float = 2.0
    max_delay_s: float = 30.0
    #: a process that ran this long before exiting starts again from the initial delay
    stable_after_s: float = 60.0

    def delay_s(self, consecutive_failures: int) -> float:
        """Delay before the restart after the *consecutive_failures*-th quick failure (1-based)."""
        n = max(1, consecutive_failures)
        return min(self.max_delay_s, self.initial_delay_s * self.factor ** (n - 1))


def dispatcher_list(plans: Iterable[WorkerPlan], set_id: int = 1) -> str:
    """Kamailio dispatcher list file naming every worker (``setid uri flags priority attrs``)."""
    lines = ["# OpenClaw Voice workers (written by openclaw-voice serve --workers N)",
             "# setid destination flags priority attributes"]
    for p in plans:
        lines.append(f"{set_id} {p.sip_uri} 0 0 duid=w{p.index};worker={p.index}")
    return "\n".join(lines) + "\n"


def parse_dispatcher_states(kamcmd_output: str) -> dict[str, str]:
    """{uri: flags} from ``kamcmd dispatcher.list`` (flags: AP active, IP inactive, DX disabled...)."""
    states: dict[str, str] = {}
    for m in re.finditer(r"URI:\s*(\S+)\s+FLAGS:\s*(\S+)", kamcmd_output):
        states[m.group(1)] = m.group(2)
    return states


def parse_kamailio_stats(kamcmd_output: str) -> dict[str, float]:
    """{name: value} from ``kamcmd stats.get_statistics script:`` (``script:openclaw_name = 3``)."""
    out: dict[str, float] = {}
    for m in re.finditer(r"script:openclaw_(\w+)\s*=\s*(\d+)", kamcmd_output):
        out[m.group(1)] = float(m.group(2))
    return out


def merge_metrics(texts: dict[str, str], label: str = "worker") -> list[Metric]:
    """Metric families of several processes' /metrics, each sample labelled ``label=<key>``.

    Families with the same name are merged into one (a scrape may hold each
    family once). A text that does not parse is skipped entirely; the caller
    counts it.
    """
    merged: dict[str, Metric] = {}
    for key, text in texts.items():
        for family in text_string_to_metric_families(text):
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                labels = dict(s.labels)
                labels[label] = key
                target.add_sample(s.name, labels, s.value, s.timestamp, s.exemplar)
    return list(merged.values())


def _parse_all(texts: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    good: dict[str, str] = {}
    bad: list[str] = []
    for key, text in texts.items():
        try:
            list(text_string_to_metric_families(text))
        except Exception:  # noqa: BLE001 -- the parser raises ValueError and others
            bad.append(key)
            continue
        good[key] = text
    return good, bad


# -- child processes ------------------------------------------------------------------

class _ChildProtocol(protocol.ProcessProtocol):
    """Relays a child's output to the log, line by line, and reports when it ends."""

    def __init__(self, child: "Child") -> None:
        self._child = child
        self._buf = {1: b"", 2: b""}

    def childDataReceived(self, fd: int, data: bytes) -> None:  # noqa: N802 (Twisted API)
        buf = self._buf.get(fd, b"") + data
        *lines, rest = buf.split(b"\n")
        self._buf[fd] = rest
        for line in lines:
            self._child._line(line.decode("utf-8", "replace").rstrip())

    def processEnded(self, reason: Any) -> None:  # noqa: N802
        for fd, rest in self._buf.items():
            if rest:
                self._child._line(rest.decode("utf-8", "replace").rstrip())
        value = reason.value
        code = getattr(value, "exitCode", None)
        sig = getattr(value, "signal", None)
        self._child._ended(code, sig)


Spawner = Callable[[protocol.ProcessProtocol, str, list[str], dict[str, str]], Any]


@dataclass
class Child:
    """One supervised process (a worker, Kamailio, or the speech server)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    #: "stopped" → "starting" → "ready" → ("draining") → "exited" / "backoff"
    status: str = "stopped"
    pid: int | None = None
    started_at: float = 0.0
    restarts: int = 0
    failures: int = 0
    last_exit: str = ""
    transport: Any = None
    restart_timer: Any = None
    killpg: Callable[[int, int], None] = field(default=os.killpg, repr=False)
    on_line: Callable[["Child", str], None] = field(default=lambda child, line: None, repr=False)
    on_exit: Callable[["Child", int | None, int | None], None] = field(default=lambda child, code, sig: None,
                                                                       repr=False)

    def _line(self, line: str) -> None:
        self.on_line(self, line)

    def _ended(self, code: int | None, sig: int | None) -> None:
        self.transport = None
        self.pid = None
        self.on_exit(self, code, sig)

    @property
    def running(self) -> bool:
        return self.transport is not None

    def signal(self, name: str, group: bool = False) -> bool:
        """Send SIG*name* to the process (*group*: to its whole process group, e.g. Kamailio's children)."""
        if self.transport is None:
            return False
        signum = int(getattr(signal, "SIG" + name))  # Twisted maps only a few names itself
        try:
            if group and self.pid:
                self.killpg(self.pid, signum)  # each child leads its own session (see _LAUNCHER)
            else:
                self.transport.signalProcess(signum)
            return True
        except Exception:  # noqa: BLE001 -- ProcessExitedAlready and OSError
            return False


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
        self._fetch = fetch or _http_get
        self._run = run or _run_command
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
            yield _sleep(self.reactor, 0.2)
        not_ready = [w.plan.index for w in self.workers if w.child.status != "ready"]
        if not_ready:
            log.warn("workers {ids} not ready after {s:.0f} s; going on without them", ids=not_ready,
                     s=s.ready_timeout_s)
        self._write_dispatcher_list()
        if s.front == "kamailio":
            if os.path.exists(self.ctl_socket):
                os.unlink(self.ctl_socket)  # left by a Kamailio that was killed
            self.front = Child("kamailio", self._kamailio_argv(), self._env(), on_line=self._child_line,
                               on_exit=self._child_exit)
            self._start_child(self.front)
            yield self._wait_front_ready()
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
        self.speech.argv = [sys.executable, "-m", "agent.speech.server", "--listen", listen]
        self._speech_ready = defer.Deferred()
        self._start_child(self.speech)
        return self._speech_ready

    def _start_child(self, child: Child) -> None:
        child.restart_timer = None
        child.killpg = self._killpg
        child.status = "starting"
        child.started_at = self.reactor.seconds()
        argv = [sys.executable, "-c", _LAUNCHER, str(os.getpid())] + child.argv
        child.transport = self._spawn(_ChildProtocol(child), sys.executable, argv, child.env)
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
            yield _sleep(self.reactor, 0.2)
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
        if child is not self.front and ('"GET /healthz' in line or '"GET /metrics' in line):
            return  # the supervisor's own polling
        if self.settings.log_format == "json":
            sys.stdout.write(line + "\n")
        else:
            sys.stdout.write(f"[{child.name}] {line}\n")
        sys.stdout.flush()

    def _child_exit(self, child: Child, code: int | None, sig: int | None) -> None:
        how = f"signal {signal.Signals(sig).name}" if sig else f"status {code}"
        uptime = self.reactor.seconds() - child.started_at
        child.last_exit = how
        was = child.status
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
        d.addCallback(lambda out: log.info("kamailio: worker {i} ({uri}) marked down", i=plan.index,
                                           uri=plan.sip_uri))
        d.addErrback(lambda f: log.warn("kamailio: cannot mark worker {i} down: {err}", i=plan.index,
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
        d = self._in_thread(self._fetch, url, 1.0)

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
    def scrape(self) -> bytes:
        """One exposition covering the supervisor and every worker (blocking; use in a thread)."""
        texts: dict[str, str] = {}
        for w in self.workers:
            if not w.child.running:
                continue
            try:
                status, body = self._fetch(f"http://127.0.0.1:{w.plan.metrics_port}/metrics", 2.0)
            except Exception:  # noqa: BLE001 -- URLError, timeouts, refused
                self.m_scrape_errors.labels(str(w.plan.index)).inc()
                continue
            if status == 200:
                texts[str(w.plan.index)] = body.decode("utf-8", "replace")
            else:
                self.m_scrape_errors.labels(str(w.plan.index)).inc()
        good, bad = _parse_all(texts)
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
            front = Metric("openclaw_front_rejected", "INVITEs the Kamailio front refused itself", "counter")
            for key, reason in (("rejected_all_busy", "all_workers_busy"), ("rejected_no_worker", "no_worker_up"),
                                ("rejected_flood", "flood")):  # kamailio.cfg: update_stat("openclaw_<key>")
                front.add_sample("openclaw_front_rejected_total", {"reason": reason}, self.front_stats.get(key, 0.0))
            dispatched = Metric("openclaw_front_dispatched", "INVITEs the Kamailio front dispatched", "counter")
            dispatched.add_sample("openclaw_front_dispatched_total", {}, self.front_stats.get("dispatched", 0.0))
            families += [front, dispatched]
        merged.register(_Families(families))  # type: ignore[arg-type]
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


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def _sleep(reactor: Any, seconds: float) -> defer.Deferred[None]:
    d: defer.Deferred[None] = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d


def _http_get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _run_command(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, timeout=5, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:1] + argv[3:])}: exit {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace').strip()[:200]}")
    return proc.stdout.decode(errors="replace")


# -- HTTP -----------------------------------------------------------------------------

class _MetricsPage(Resource):
    isLeaf = True

    def __init__(self, sup: Supervisor) -> None:
        super().__init__()
        self._sup = sup

    def render_GET(self, request: Any) -> Any:  # noqa: N802 (twisted.web API)
        d = threads.deferToThread(self._sup.scrape)

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


class _HealthPage(Resource):
    isLeaf = True

    def __init__(self, sup: Supervisor) -> None:
        super().__init__()
        self._sup = sup

    def render_GET(self, request: Any) -> bytes:  # noqa: N802
        body = self._sup.health()
        request.setResponseCode(200 if body["status"] in ("ok", "degraded") else 503)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(body).encode() + b"\n"


class _AdminPage(Resource):
    """``POST /admin/drain`` (the node) and ``POST /admin/workers/I/drain`` (one worker); loopback only."""

    isLeaf = True

    def __init__(self, sup: Supervisor) -> None:
        super().__init__()
        self._sup = sup

    def render_POST(self, request: Any) -> bytes:  # noqa: N802
        request.setHeader(b"content-type", b"application/json")
        peer = str(getattr(request.getClientAddress(), "host", ""))
        if not (peer.startswith("127.") or peer == "::1"):
            request.setResponseCode(403)
            return b'{"error": "admin commands are accepted from loopback only"}\n'
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


# -- entry point ---------------------------------------------------------------------

def settings_from_args(args: Any, config: ServerConfig) -> SupervisorSettings:
    """Supervisor settings from ``serve`` options and the loaded config; ValueError on conflicts."""
    sip = config.sip
    host = args.host or sip.host
    port = args.port if args.port is not None else sip.port
    capacity = args.capacity if args.capacity is not None else sip.capacity
    if capacity > WORKER_MAX_CALLS:
        raise ValueError(f"--capacity {capacity} is per worker, and one worker holds at most {WORKER_MAX_CALLS} calls")
    metrics_port = args.metrics_port if args.metrics_port is not None else config.metrics.port
    rtp_port = args.rtp_port if getattr(args, "rtp_port", None) is not None else sip.rtp_port
    rtp_range = args.rtp_port_range if getattr(args, "rtp_port_range", None) is not None else sip.rtp_port_range
    records = args.call_records if args.call_records is not None else config.call_records
    worker_host = args.worker_host or host
    plans = plan_workers(args.workers, host=worker_host, sip_port=port, worker_port=args.worker_port,
                         metrics_port=metrics_port, rtp_port=rtp_port, rtp_port_range=rtp_range,
                         call_records=records)
    worker_argv = [sys.executable, "-m", "agent.app.cli", "serve"]
    if args.config:
        worker_argv += ["--config", os.path.abspath(args.config)]
    for d in args.dialplan or ():
        worker_argv += ["--dialplan", os.path.abspath(d)]
    if args.speech_uri:
        worker_argv += ["--speech-uri", args.speech_uri]
    embedded = not (args.speech_uri or config.speech.regions)
    run_dir = os.path.abspath(args.run_dir or os.path.join("var", "run", f"openclaw-{port}"))
    drain = args.drain_timeout if args.drain_timeout is not None else 300.0
    return SupervisorSettings(
        workers=plans, worker_argv=worker_argv, capacity=capacity, public_host=host, public_port=port,
        metrics_host=args.metrics_host or config.metrics.host, metrics_port=metrics_port, run_dir=run_dir,
        front=args.front, kamailio_cfg=os.path.abspath(args.kamailio_cfg or DEFAULT_KAMAILIO_CFG),
        retry_after_s=sip.retry_after_s, embedded_speech=embedded, drain_timeout_s=drain,
        log_format=args.log_format,
        notify_front=os.environ.get("OPENCLAW_FRONT_NOTIFY", "1") != "0")


def main_supervise(args: Any) -> int:
    from twisted.logger import (
        FilteringLogObserver, LogLevel, LogLevelFilterPredicate, globalLogBeginner, jsonFileLogObserver,
        textFileLogObserver,
    )

    from dataclasses import replace

    from agent.app.config import load_config
    from agent.dialplan.model import DialplanError, load_dialplans
    from agent.yamlmarks import ConfigError

    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"openclaw-voice: invalid config:\n{e}", file=sys.stderr)
        return 2
    if args.dialplan:
        config = replace(config, dialplans=tuple(args.dialplan))
    try:
        load_dialplans(list(config.dialplans))  # refuse here rather than in N crash-looping workers
    except (DialplanError, ConfigError) as e:
        print(f"openclaw-voice: invalid dialplan:\n{e}", file=sys.stderr)
        return 2
    try:
        settings = settings_from_args(args, config)
    except ValueError as e:
        print(f"openclaw-voice: {e}", file=sys.stderr)
        return 2
    if settings.front == "kamailio":
        import shutil

        for binary in (settings.kamailio_bin, settings.kamcmd_bin):
            if shutil.which(binary) is None:
                print(f"openclaw-voice: --front kamailio needs {binary} (Debian package kamailio; "
                      f"ops/bootstrap.sh install)", file=sys.stderr)
                return 2
        if not os.path.exists(settings.kamailio_cfg):
            print(f"openclaw-voice: no Kamailio config at {settings.kamailio_cfg}", file=sys.stderr)
            return 2

    observer = jsonFileLogObserver(sys.stdout) if args.log_format == "json" else textFileLogObserver(sys.stdout)
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
    globalLogBeginner.beginLoggingTo([FilteringLogObserver(observer, [predicate])], redirectStandardIO=False)

    from twisted.internet import reactor

    sup = Supervisor(settings, reactor)
    status = {"code": 0}

    def done() -> None:
        if reactor.running:
            reactor.stop()

    sup.on_done = done
    root = Resource()
    root.putChild(b"metrics", _MetricsPage(sup))
    root.putChild(b"healthz", _HealthPage(sup))
    root.putChild(b"admin", _AdminPage(sup))

    def failed(failure: Any) -> None:
        log.failure("supervisor failed to start", failure)
        status["code"] = 1
        sup.drain()
        sup.end_calls()

    def started() -> None:
        try:
            reactor.listenTCP(settings.metrics_port, Site(root), interface=settings.metrics_host)
        except Exception as e:  # noqa: BLE001 -- CannotListenError
            log.error("cannot serve metrics on {host}:{port}: {err}", host=settings.metrics_host,
                      port=settings.metrics_port, err=e)
            status["code"] = 1
            reactor.stop()
            return
        sup.start().addErrback(failed)

    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        log.info("signal {sig}", sig=name)
        reactor.callFromThread(sup.drain)

    def on_hup(_signum: int, _frame: Any) -> None:
        log.info("SIGHUP: workers reload their dialplans")
        reactor.callFromThread(sup.reload)

    def install_handlers() -> None:
        # After reactor.run() has installed its own (it must, to reap children).
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, on_hup)

    reactor.callWhenRunning(install_handlers)
    reactor.callWhenRunning(started)
    reactor.run()
    return status["code"]

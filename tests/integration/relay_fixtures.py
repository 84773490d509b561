"""Simulated regions on loopback: embedded speech servers behind ops/relay.py relays.

Shared by the region integration tests and ops/bench/regions. A region is a relay
(delay, jitter, loss, blackhole on command) in front of a real speech server process;
the Twisted reactor runs on a daemon thread so the real prober and failover streams
can be driven from plain test code through :func:`on_reactor`.
"""
from __future__ import annotations

import importlib.util
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def load_relay_module() -> ModuleType:
    """ops/relay.py as a module (ops/ is not a package)."""
    name = "openclaw_ops_relay"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "ops" / "relay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def start_speech_server(decode_processes: int = 1, timeout_s: float = 90.0, *, listen: str = "127.0.0.1:0",
                        extra_args: tuple[str, ...] = (), log_path: str | None = None,
                        ) -> tuple[subprocess.Popen[str], str]:
    """``python -m agent.speech.server --listen 127.0.0.1:0``; returns (process, address).
    *extra_args* go to the server (e.g. ``--asr-model``); its log (stderr) is appended to
    *log_path* when given."""
    log = open(log_path, "a") if log_path else None  # noqa: SIM115 (the child holds it)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.speech.server", "--listen", listen,
             "--decode-processes", str(decode_processes), *extra_args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=log if log is not None else subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        if log is not None:
            log.close()
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout_s)
    except queue.Empty:
        proc.kill()
        raise AssertionError(f"speech server printed no listening line within {timeout_s} s") from None
    match = re.fullmatch(r"speech server listening on (127\.0\.0\.1:\d+)( \(.*\))?\n", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"unexpected first line from speech server: {line!r}")
    return proc, match.group(1)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class SimRegion:
    """One simulated region: ``relay.address`` is what the agent dials."""

    name: str
    relay: Any
    server: subprocess.Popen[str] | None
    server_address: str

    @property
    def address(self) -> str:
        return str(self.relay.address)


@dataclass
class SimRegions:
    regions: dict[str, SimRegion] = field(default_factory=dict)

    def __getitem__(self, name: str) -> SimRegion:
        return self.regions[name]

    def close(self) -> None:
        for r in self.regions.values():
            r.relay.stop()
            if r.server is not None:
                stop_process(r.server)


def start_regions(delays_ms: dict[str, float], *, jitter_ms: float = 0.0, shared_server: bool = False) -> SimRegions:
    """One relay per region with the given one-way delay; one speech server each (or one
    shared by all relays when ``shared_server``)."""
    relay_mod = load_relay_module()
    sims = SimRegions()
    shared: tuple[subprocess.Popen[str], str] | None = None
    try:
        for name, delay in delays_ms.items():
            if shared_server:
                if shared is None:
                    shared = start_speech_server()
                proc, address = (shared[0] if not sims.regions else None), shared[1]
            else:
                proc, address = start_speech_server()
            relay = relay_mod.Relay("127.0.0.1:0", address, delay_ms=delay, jitter_ms=jitter_ms).start()
            sims.regions[name] = SimRegion(name, relay, proc, address)
    except BaseException:
        sims.close()
        raise
    return sims


_reactor_thread: threading.Thread | None = None


def reactor_in_thread() -> Any:
    """The global Twisted reactor, running on a daemon thread (started once per process)."""
    global _reactor_thread
    from twisted.internet import reactor

    if _reactor_thread is None and not reactor.running:
        _reactor_thread = threading.Thread(
            target=reactor.run, kwargs={"installSignalHandlers": False}, name="twisted-reactor", daemon=True
        )
        _reactor_thread.start()
    return reactor


def on_reactor(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` on the reactor thread and return its result (Deferreds are waited for)."""
    from twisted.internet import threads

    reactor = reactor_in_thread()
    return threads.blockingCallFromThread(reactor, fn, *args, **kwargs)  # type: ignore[no-any-return]

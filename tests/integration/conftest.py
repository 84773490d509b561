"""Real processes on loopback: the agent server, SIPp, the test caller, dumpcap."""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.dirname(sys.executable)
OPENCLAW = os.path.join(VENV_BIN, "openclaw-voice")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


#: ports are handed out below the kernel's ephemeral range: a port a process binds as port 0 (the
#: agent's embedded speech server, SIPp, the test caller) can then never be one a test chose for
#: something else, as happened when both came from that range ("Address already in use"). Above
#: the agents' RTP ports (4000-4199 by default), below test_workers' blocks (20000 and up)
_PORTS_FROM, _PORTS_TO = 10000, min(20000, max(_ephemeral_low(), 11000))
_handed_out: set[int] = set()


def port_block(count: int, low: int, high: int,
               kinds: tuple[int, ...] = (socket.SOCK_DGRAM, socket.SOCK_STREAM)) -> int:
    """First port of *count* consecutive ports in [low, high) free for *kinds* on 127.0.0.1 now,
    none handed out before by this process."""
    for _ in range(1000):
        base = random.randrange(low, high - count + 1)
        ports = range(base, base + count)
        if _handed_out.intersection(ports):
            continue
        socks: list[socket.socket] = []
        try:
            for port in ports:
                for kind in kinds:
                    s = socket.socket(socket.AF_INET, kind)
                    socks.append(s)
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        _handed_out.update(ports)
        return base
    raise AssertionError(f"no {count} free ports in {low}-{high}")


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A loopback port free for *kind*, below the ephemeral range."""
    return port_block(1, _PORTS_FROM, _PORTS_TO, (kind,))


def free_media_ports() -> int:
    """A base for SIPp's ``-mp``: it binds that port and the three after it (audio and video,
    RTP and RTCP), so all four must be free, not only the first."""
    return port_block(4, _PORTS_FROM, _PORTS_TO, (socket.SOCK_DGRAM,))


def free_sip_port() -> int:
    """A port free for both UDP (SIP) and TCP."""
    return port_block(1, _PORTS_FROM, _PORTS_TO)


def read_metrics(port: int, timeout_s: float = 5.0) -> dict[str, float]:
    """Samples of ``/metrics`` on *port* as {'name{labels}': value}."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s).read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def read_health(port: int) -> dict[str, object]:
    """``/healthz`` on *port* (its JSON body whatever the status code)."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
    except urllib.error.HTTPError as e:
        body = e.read()
    return json.loads(body)


def wait_until(predicate, timeout_s: float, what: str, log: Callable[[], str], interval_s: float = 0.1):  # type: ignore[no-untyped-def]
    """Poll *predicate* until it returns something true (returned); fail with the tail of *log*."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n--- log ---\n{log()[-5000:]}")


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    sip_port: int
    metrics_port: int
    log_path: str
    records_path: str
    speech_uri: str = ""

    @property
    def uri(self) -> str:
        return f"sip:1000@127.0.0.1:{self.sip_port}"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def metrics(self) -> dict[str, float]:
        """Samples of /metrics as {'name{labels}': value}."""
        return read_metrics(self.metrics_port)

    def health(self) -> dict[str, object]:
        return read_health(self.metrics_port)

    def records(self) -> list[dict[str, object]]:
        if not os.path.exists(self.records_path):
            return []
        with open(self.records_path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def wait_for(self, predicate, timeout_s: float = 20.0, what: str = "condition"):  # type: ignore[no-untyped-def]
        return wait_until(predicate, timeout_s, what, self.log)


def start_agent(tmp_path: str, *extra: str, capacity: int = 4, ready_timeout_s: float = 90.0) -> AgentProcess:
    sip_port, metrics_port = free_sip_port(), free_port(socket.SOCK_STREAM)
    log_path = os.path.join(tmp_path, f"agent-{sip_port}.log")
    records = os.path.join(tmp_path, f"calls-{sip_port}.jsonl")
    logf = open(log_path, "wb")
    proc = subprocess.Popen(
        [OPENCLAW, "serve", "--host", "127.0.0.1", "--port", str(sip_port), "--metrics-port", str(metrics_port),
         "--capacity", str(capacity), "--call-records", records, *extra],
        stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT)
    agent = AgentProcess(proc, sip_port, metrics_port, log_path, records)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        text = agent.log()
        if "ready: SIP on" in text:
            m = re.search(r"speech backend: \S+ (?:speech server|\S+) at (\S+)", text)
            m = m or re.search(r"speech backend: .* at (\S+)", text)
            agent.speech_uri = m.group(1) if m else ""
            return agent
        if proc.poll() is not None:
            raise AssertionError(f"agent exited with {proc.returncode}:\n{text[-4000:]}")
        time.sleep(0.2)
    stop_agent(agent)
    raise AssertionError(f"agent not ready in {ready_timeout_s} s:\n{agent.log()[-4000:]}")


def stop_agent(agent: AgentProcess) -> int:
    if agent.proc.poll() is None:
        agent.proc.send_signal(signal.SIGTERM)
        try:
            agent.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait()
    return agent.proc.returncode


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """One agent server process (capacity 4, default dialplan) for a test module."""
    a = start_agent(str(tmp_path_factory.mktemp("agent")))
    yield a
    code = stop_agent(a)
    assert code == 0, f"agent exited with {code} on SIGTERM:\n{a.log()[-3000:]}"
    assert "Traceback" not in a.log(), a.log()[-6000:]


#: the demo line's balance prompt, "Your account balance is one hundred twenty three dollars and
#: forty five cents.", less its common words
BALANCE_WORDS = frozenset({"account", "balance", "hundred", "twenty", "dollar", "dollars", "forty", "cents"})


def heard_balance(text: str) -> bool:
    """Did a caller's recogniser hear the balance prompt in *text*? On a loaded machine it drops
    words ("balance") and mishears others ("one dollar and forty three cents"): any three will do."""
    return len(set(text.split()) & BALANCE_WORDS) >= 3


def run_caller(uri: str, *args: str, timeout_s: float = 120.0) -> tuple[int, dict[str, object], str]:
    """Run ``openclaw-voice call --json``; return (exit status, report, stderr)."""
    proc = subprocess.run([OPENCLAW, "call", uri, "--json", *args], capture_output=True, timeout=timeout_s,
                          cwd=ROOT)
    out = proc.stdout.decode(errors="replace")
    report: dict[str, object] = {}
    for line in out.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
    return proc.returncode, report, out + proc.stderr.decode(errors="replace")


def run_sipp(scenario: str, target: str, *args: str, timeout_s: float = 120.0,
             cwd: str = ROOT) -> subprocess.CompletedProcess[bytes]:
    sipp = shutil.which("sipp")
    assert sipp, "sipp (Debian package sip-tester) is not installed; run ops/bootstrap.sh"
    return subprocess.run([sipp, "-sf", scenario, "-i", "127.0.0.1", "-p", str(free_port()), "-nostdin",
                           "-timeout", f"{int(timeout_s)}s", "-timeout_error", *args, target],
                          capture_output=True, timeout=timeout_s + 30, cwd=cwd)


class Capture:
    """dumpcap on the loopback interface, writing classic pcap."""

    def __init__(self, path: str, bpf: str) -> None:
        self.path = path
        dumpcap = shutil.which("dumpcap") or "/usr/bin/dumpcap"
        self._err = open(path + ".log", "wb")
        self.proc = subprocess.Popen([dumpcap, "-q", "-i", "lo", "-P", "-w", path, "-f", bpf],
                                     stdout=subprocess.DEVNULL, stderr=self._err)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with open(path + ".log", "rb") as f:
                if b"Capturing on" in f.read():
                    break
            if self.proc.poll() is not None:
                raise AssertionError(f"dumpcap failed: {open(path + '.log').read()}")
            time.sleep(0.05)
        time.sleep(0.3)

    def stop(self) -> str:
        time.sleep(0.3)
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=15)
        self._err.close()
        return self.path

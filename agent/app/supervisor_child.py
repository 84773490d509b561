"""The supervisor's child processes: how each is launched, its output relayed line by line, and signalled.

Hand-written rather than ``twisted.runner.procmon``: procmon fixes its own log protocol and uptime-based
restart delay, and cannot hold restarts while the node drains or restart a drained worker at once.
"""
from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet import protocol

# Children die with the supervisor (PR_SET_PDEATHSIG survives exec): a supervisor
# killed with SIGKILL must not leave workers holding the SIP ports. Each child gets
# its own session, so a signal to the supervisor's process group (Ctrl-C in a
# terminal, `timeout`) reaches only the supervisor, which drains the workers.
LAUNCHER = (
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


class ChildProtocol(protocol.ProcessProtocol):
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
                self.killpg(self.pid, signum)  # each child leads its own session (see LAUNCHER)
            else:
                self.transport.signalProcess(signum)
            return True
        except Exception:  # noqa: BLE001 -- ProcessExitedAlready and OSError
            return False


def run_command(argv: list[str]) -> str:
    """Run a short command (``kamcmd``) and return its output; RuntimeError names a failure (blocking)."""
    proc = subprocess.run(argv, capture_output=True, timeout=5, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:1] + argv[3:])}: exit {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace').strip()[:200]}")
    return proc.stdout.decode(errors="replace")

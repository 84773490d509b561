#!/usr/bin/env python3
"""A simulated region's speech server as a deployment sees it: started, restarted on another model
version, stopped; used as the ``--apply`` hook of ``openclaw-voice models rollout`` by
ops/bench/rollout and tests/integration/test_rollout.py.

    python ops/bench/rollout_region.py start   --state DIR --region R --port P --asr-model NAME
    python ops/bench/rollout_region.py restart --state DIR --region R --asr-model NAME
    python ops/bench/rollout_region.py stop    --state DIR --region R

The server (``python -m agent.speech.server``) runs detached, its pid in ``DIR/R.pid``, its port in
``DIR/R.port``; its log (one ``stream kind=... call_id=... version=...`` line per stream) is
appended to ``DIR/R.log`` across restarts. ``restart`` stops it gracefully (SIGTERM: NOT_SERVING,
1 s grace) and starts the new version on the same port, returning once it listens.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
PYTHON = VENV_PYTHON if os.path.exists(VENV_PYTHON) else sys.executable


def _path(state: str, region: str, ext: str) -> str:
    return os.path.join(state, f"{region}.{ext}")


def start(state: str, region: str, port: int, asr_model: str, timeout_s: float = 90.0) -> int:
    """Start the region's server on *port*; return its pid once it prints its listening line."""
    os.makedirs(state, exist_ok=True)
    out_path = _path(state, region, "out")
    with open(_path(state, region, "log"), "a") as log, open(out_path, "w") as out:
        log.write(f"{time.time():.3f} starting asr:{asr_model} on port {port}\n")
        log.flush()
        proc = subprocess.Popen(
            [PYTHON, "-m", "agent.speech.server", "--listen", f"127.0.0.1:{port}", "--decode-processes", "1",
             "--max-workers", "16", "--asr-model", asr_model],
            cwd=ROOT, stdout=out, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    with open(_path(state, region, "pid"), "w") as f:
        f.write(str(proc.pid))
    with open(_path(state, region, "port"), "w") as f:
        f.write(str(port))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(out_path) as f:
            if "listening on" in f.read():
                return proc.pid
        if proc.poll() is not None:
            raise SystemExit(f"speech server of region {region} exited with {proc.returncode}; see "
                             f"{_path(state, region, 'log')}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"speech server of region {region} did not listen within {timeout_s:g} s")


def stop(state: str, region: str, timeout_s: float = 20.0) -> None:
    try:
        with open(_path(state, region, "pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # a child of this process (start, then stop in the same process) must be reaped
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("start", "restart", "stop"))
    p.add_argument("--state", required=True)
    p.add_argument("--region", required=True)
    p.add_argument("--port", type=int)
    p.add_argument("--asr-model", default="pocketsphinx-en-US")
    args = p.parse_args(argv)
    if args.action == "stop":
        stop(args.state, args.region)
        return 0
    port = args.port
    if args.action == "restart":
        with open(_path(args.state, args.region, "port")) as f:
            port = int(f.read().strip())
        stop(args.state, args.region)
    if port is None:
        p.error("start needs --port")
    pid = start(args.state, args.region, port, args.asr_model)
    print(f"region {args.region}: asr:{args.asr_model} on 127.0.0.1:{port} (pid {pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""pjsua reuses a call id at once: an ended call's pjsua2 object must never touch the next call.

The project's SIP stack runs in tests/integration/stack_driver.py, whose polling the test
pauses, so that SIPp's BYE for one call and the INVITE of the next reach pjsua in the same
``libHandleEvents``: with all four pjsua slots busy, the new call then gets the id the BYE has
just freed, while the ended call's object is still alive. Real pjsua2, real SIP over loopback.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from tests.integration.conftest import ROOT, free_port, free_sip_port

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp is not installed")]

HOLD = os.path.join(ROOT, "ops", "sipp", "caller-hold.xml")


class Driver:
    def __init__(self) -> None:
        self.port = free_sip_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.stack_driver", str(self.port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=ROOT)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.expect(lambda m: m.get("ready"), 30.0, "the stack to start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            self.lines.put(msg)

    def expect(self, pred: Any, timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                msg = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if "event" in msg:
                self.events.append(msg)
            if pred(msg):
                return msg
        raise AssertionError(f"timed out waiting for {what}; events: {self.events}")

    def command(self, cmd: str, key: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd.encode() + b"\n")
        self.proc.stdin.flush()
        return self.expect(lambda m: key in m, 10.0, cmd)

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                msg = self.lines.get(timeout=0.05)
            except queue.Empty:
                continue
            if "event" in msg:
                self.events.append(msg)

    def stop(self) -> str:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=15)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")


def sipp(tag: str, port: int, hold_ms: int, calls: int = 1) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sipp", "-sf", HOLD, "-i", "127.0.0.1", "-p", str(free_port()), "-nostdin", "-s", "1000",
         "-m", str(calls), "-l", str(calls), "-r", "20", "-d", str(hold_ms), "-cid_str", f"{tag}-%u-%p@%s",
         "-timeout", "60s", "-timeout_error", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)


def test_a_call_given_the_id_of_a_call_ended_in_the_same_poll_is_neither_hung_up_nor_orphaned() -> None:
    """Four calls fill pjsua's four slots; call A's BYE and call E's INVITE are queued while polling is
    paused and then handled in one poll, so E takes A's slot while A's pjsua2 object still exists.
    E must stay up until its caller hangs up (no BYE from the agent: SIPp fails a call on an
    unexpected BYE), its DISCONNECTED must reach the stack exactly once, and pjsua must be empty
    at the end. The stack must report that it held A's object back (the race really happened)."""
    driver = Driver()
    holders = a = e = None
    try:
        holders = sipp("hold", driver.port, 25000, calls=3)
        for _ in range(3):
            driver.expect(lambda m: m.get("event") == "confirmed", 20.0, "three holders answered")
        a = sipp("A", driver.port, 3000)
        driver.expect(lambda m: m.get("event") == "confirmed" and m["call_id"].startswith("A-"), 20.0,
                      "call A answered")
        confirmed_at = time.monotonic()
        driver.command("pause", "paused")
        time.sleep(max(0.0, confirmed_at + 3.6 - time.monotonic()))  # A's BYE is waiting in the socket
        e = sipp("E", driver.port, 2000)
        time.sleep(0.8)  # so is E's INVITE
        driver.command("poll", "polled")
        state = driver.command("state", "state")["state"]
        driver.command("resume", "resumed")

        assert a.wait(timeout=30) == 0, a.stderr.read().decode()[-2000:] if a.stderr else ""
        assert e.wait(timeout=30) == 0, ("call E failed (an unexpected BYE from the agent?): "
                                         + (e.stderr.read().decode()[-2000:] if e.stderr else ""))
        driver.expect(lambda m: m.get("event") == "disconnected" and m["call_id"].startswith("E-"), 20.0,
                      "E's DISCONNECTED")
        assert holders.wait(timeout=40) == 0
        driver.drain(1.0)
        final = driver.command("state", "state")["state"]
    finally:
        for p in (holders, a, e):
            if p is not None and p.poll() is None:
                p.kill()
        stderr = driver.stop()

    # The race happened: in that one poll A ended and E arrived in the slot A had.
    e_slot = next(m["slot"] for m in driver.events if m.get("event") == "incoming" and m["call_id"].startswith("E-"))
    a_slot = next(m["slot"] for m in driver.events if m.get("event") == "incoming" and m["call_id"].startswith("A-"))
    assert e_slot == a_slot
    assert any(c["call_id"].startswith("E-") for c in state["calls"]), state
    assert not any(c["call_id"].startswith("A-") for c in state["calls"]), state
    assert state["deferred_releases"] >= 1, state
    # Every call ended exactly once, and nothing is left in pjsua or in the stack.
    ended = [m for m in driver.events if m.get("event") == "disconnected"]
    assert sorted(m["call_id"].split("-")[0] for m in ended) == ["A", "E", "hold", "hold", "hold"], ended
    assert all(m["times"] == 1 for m in ended)
    assert not [m for m in driver.events if m.get("event") == "hangup"], driver.events
    assert final["calls"] == [] and final["pjsua"] == {} and final["graveyard"] == 0, final
    assert "Assertion" not in stderr, stderr[-2000:]

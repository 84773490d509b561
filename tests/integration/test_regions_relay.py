"""ops/relay.py, the userspace network emulator of the simulated regions, over loopback:
an echo server behind a relay, timed with generous bounds (lower bounds are what the
relay guarantees; upper bounds only catch a relay that ignores its settings)."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.relay_fixtures import REPO_ROOT, load_relay_module

pytestmark = pytest.mark.integration


@pytest.fixture()
def echo() -> Iterator[str]:
    """A TCP echo server on loopback; yields its address."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue

            def handle(c: socket.socket = conn) -> None:
                with c:
                    while True:
                        try:
                            data = c.recv(65536)
                        except OSError:
                            return
                        if not data:
                            return
                        c.sendall(data)

            threading.Thread(target=handle, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    srv.close()


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def round_trip(s: socket.socket, payload: bytes = b"ping") -> float:
    start = time.monotonic()
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += s.recv(65536)
    assert got == payload
    return time.monotonic() - start


def relay(target: str, **kw: Any) -> Any:
    return load_relay_module().Relay("127.0.0.1:0", target, **kw).start()


def test_delay_adds_to_the_round_trip_and_changes_at_runtime(echo: str) -> None:
    """30 ms each way gives >= 60 ms of RTT; set(delay_ms=100) makes it >= 200 ms."""
    r = relay(echo, delay_ms=30)
    try:
        with connect(r.address) as s:
            rtts = [round_trip(s) for _ in range(3)]
            assert 0.060 <= min(rtts) < 0.5
            r.set(delay_ms=100)
            assert 0.200 <= round_trip(s) < 1.0
    finally:
        r.stop()


def test_blackhole_holds_bytes_without_reset_and_releases_them_in_order(echo: str) -> None:
    """While blackholed nothing comes back and the connection is not reset; lifting it
    delivers what was held, in order."""
    r = relay(echo)
    try:
        with connect(r.address) as s:
            round_trip(s)
            r.blackhole(True)
            s.sendall(b"one")
            s.sendall(b"two")
            s.settimeout(0.5)
            with pytest.raises(socket.timeout):
                s.recv(10)
            r.blackhole(False)
            s.settimeout(5)
            got = b""
            while len(got) < 6:
                got += s.recv(10)
            assert got == b"onetwo"
    finally:
        r.stop()


def test_new_connection_during_a_blackhole_gets_nothing_until_it_lifts(echo: str) -> None:
    """A connection opened into a blackhole is accepted but silent, like a dead route."""
    r = relay(echo)
    try:
        r.blackhole(True)
        with connect(r.address) as s:
            s.sendall(b"hello")
            s.settimeout(0.5)
            with pytest.raises(socket.timeout):
                s.recv(10)
            r.blackhole(False)
            s.settimeout(5)
            assert s.recv(10) == b"hello"
    finally:
        r.stop()


def test_reset_closes_connections_with_rst(echo: str) -> None:
    """reset() aborts every relayed connection; the client sees a reset, not a timeout."""
    r = relay(echo)
    try:
        with connect(r.address) as s:
            round_trip(s)
            r.reset()
            s.settimeout(5)
            with pytest.raises(ConnectionResetError):
                s.recv(10)  # a graceful close would return b"" instead
    finally:
        r.stop()


def test_loss_holds_chunks_for_the_retransmission_stall(echo: str) -> None:
    """With loss 1.0 every chunk waits loss_stall_ms (here 150 ms) in each direction."""
    r = relay(echo, loss=1.0, loss_stall_ms=150)
    try:
        with connect(r.address) as s:
            assert round_trip(s) >= 0.300
        assert r.stats()["loss_stalls"]["up"] >= 1
    finally:
        r.stop()


def test_control_port_and_cli(echo: str) -> None:
    """The CLI relay prints its addresses; `relay.py ctl` sets delay and blackhole."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "ops" / "relay.py"), "--target", echo, "--control", "127.0.0.1:0"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        parts = line.split()
        assert line.startswith("relay listening on ") and parts[5] == echo
        address, control = parts[3], parts[-1].rstrip(")")
        ctl = [sys.executable, str(REPO_ROOT / "ops" / "relay.py"), "ctl", control]
        out = subprocess.run([*ctl, "set", "delay_ms=40"], capture_output=True, text=True, timeout=10)
        assert '"delay_ms": 40.0' in out.stdout
        with connect(address) as s:
            assert round_trip(s) >= 0.080
            subprocess.run([*ctl, "blackhole", "on"], check=True, capture_output=True, timeout=10)
            s.sendall(b"x")
            s.settimeout(0.5)
            with pytest.raises(socket.timeout):
                s.recv(1)
        bad = subprocess.run([*ctl, "explode"], capture_output=True, text=True, timeout=10)
        assert "unknown command" in bad.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=10)

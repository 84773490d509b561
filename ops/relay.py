#!/usr/bin/env python3
"""Userspace TCP relay that emulates a network path: delay, jitter, loss, blackhole.

The kernel here has no ``netem``, so simulated regions put this relay between the agent
and a speech server (gRPC is HTTP/2 over TCP). Standard library only.

Emulation, per direction (``up`` = client → target, ``down`` = target → client):

* **delay / jitter**: every chunk read is delivered ``delay_ms`` ± a uniform
  ``jitter_ms`` later, never before the chunk read before it (TCP keeps order, so
  jitter shows as bursts, not reordering). A round trip through the relay therefore
  gains ``up.delay_ms + down.delay_ms`` (``set(delay_ms=75)`` adds 150 ms of RTT).
* **loss** (``loss`` = share 0..1): TCP never loses bytes, it retransmits; a lost segment
  shows up as head-of-line blocking until the retransmission. So a chunk "lost" with
  probability ``loss`` is held an extra ``loss_stall_ms`` (default 200 ms, Linux's
  minimum RTO) and everything behind it waits too.
* **blackhole**: bytes are read and held, nothing is forwarded, no RST or FIN is sent,
  new connections are accepted but get nothing (like a route that silently drops
  packets; a peer sees only timeouts). Lifting it delivers what was held, in order
  (like TCP retransmissions after the path heals).
* **reset**: closes every relayed connection (RST), e.g. a crashed middlebox.

Use it as a library (``Relay(listen, target, delay_ms=..., jitter_ms=...).start()``, then
``set(...)``, ``blackhole(True)``, ``reset()``, ``stop()``; it runs its own asyncio loop on a
daemon thread) or as a tool:

    python ops/relay.py --listen 127.0.0.1:7000 --target 127.0.0.1:50051 \\
        --delay-ms 40 --jitter-ms 5 --control 127.0.0.1:7001

It prints ``relay listening on 127.0.0.1:7000 -> 127.0.0.1:50051 (control 127.0.0.1:7001)``.
The control port speaks one JSON object per line and answers one per line::

    {"cmd": "set", "delay_ms": 75, "jitter_ms": 10, "loss": 0.02, "direction": "both"}
    {"cmd": "blackhole", "on": true}
    {"cmd": "reset"}
    {"cmd": "target", "address": "127.0.0.1:50052"}
    {"cmd": "stats"}

``python ops/relay.py ctl 127.0.0.1:7001 blackhole on`` (or ``off``, ``reset``, ``stats``,
``set delay_ms=75 jitter_ms=10``) sends one command. SIGUSR1 toggles the blackhole.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

READ_BYTES = 65536
#: a blackholed direction stops reading once it holds this much (the sender's TCP then stalls)
MAX_HELD_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class PathSettings:
    """One direction of the emulated path."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    loss_stall_ms: float = 200.0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.jitter_ms < 0 or self.loss_stall_ms < 0:
            raise ValueError("delay_ms, jitter_ms and loss_stall_ms must be 0 or more")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"loss must be between 0 and 1, got {self.loss}")


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class _Pipe:
    """One direction of one connection: read, stamp a delivery time, write when due."""

    def __init__(self, relay: Relay, direction: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.relay = relay
        self.direction = direction
        self.reader = reader
        self.writer = writer
        self.queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        self.held = 0
        self.last_due = 0.0
        self.room = asyncio.Event()
        self.room.set()

    async def read_loop(self) -> None:
        try:
            while True:
                await self.room.wait()
                data = await self.reader.read(READ_BYTES)
                if not data:
                    break
                self.relay.bytes_in[self.direction] += len(data)
                p = self.relay.path(self.direction)
                now = time.monotonic()
                extra = p.delay_ms + (random.uniform(-p.jitter_ms, p.jitter_ms) if p.jitter_ms else 0.0)
                if p.loss and random.random() < p.loss:
                    extra += p.loss_stall_ms
                    self.relay.stalls[self.direction] += 1
                due = max(self.last_due, now + max(0.0, extra) / 1000.0)
                self.last_due = due
                self.held += len(data)
                if self.held > MAX_HELD_BYTES:
                    self.room.clear()
                self.queue.put_nowait((due, data))
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.queue.put_nowait(None)

    async def write_loop(self) -> None:
        try:
            while True:
                item = await self.queue.get()
                if item is None:
                    break
                due, data = item
                while True:
                    await self.relay._open.wait()  # blackholed: hold
                    if self.relay._blackholed:  # set from another thread, the event not cleared yet
                        await asyncio.sleep(0.001)
                        continue
                    wait = due - time.monotonic()
                    if wait <= 0:
                        break
                    await asyncio.sleep(wait)
                self.writer.write(data)
                self.held -= len(data)
                if self.held <= MAX_HELD_BYTES:
                    self.room.set()
                self.relay.bytes_out[self.direction] += len(data)
                await self.writer.drain()
            if self.writer.can_write_eof():
                self.writer.write_eof()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass


class Relay:
    """A TCP relay with an emulated path; thread-safe control from any thread."""

    def __init__(
        self,
        listen: str,
        target: str,
        *,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        loss: float = 0.0,
        loss_stall_ms: float = 200.0,
        control: str | None = None,
        seed: int | None = None,
    ) -> None:
        self._listen = _split(listen)
        self.target = target
        _split(target)
        p = PathSettings(delay_ms, jitter_ms, loss, loss_stall_ms)
        self._paths = {"up": p, "down": p}
        self._control_listen = _split(control) if control else None
        if seed is not None:
            random.seed(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._control_server: asyncio.base_events.Server | None = None
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._blackholed = False
        self._open: asyncio.Event
        self.address = ""
        self.control_address = ""
        self.bytes_in = {"up": 0, "down": 0}
        self.bytes_out = {"up": 0, "down": 0}
        self.stalls = {"up": 0, "down": 0}
        self.connections = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Relay:
        """Listen (port 0 = any free port; see :attr:`address`) on a daemon thread."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_servers())
            except BaseException as exc:  # report bind errors to start()
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name=f"relay-{self._listen[1]}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    async def _start_servers(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        host, port = self._listen
        self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        sock = self._server.sockets[0].getsockname()
        self.address = f"{sock[0]}:{sock[1]}"
        if self._control_listen is not None:
            chost, cport = self._control_listen
            self._control_server = await asyncio.start_server(self._control, chost, cport, reuse_address=True)
            csock = self._control_server.sockets[0].getsockname()
            self.control_address = f"{csock[0]}:{csock[1]}"

    def stop(self) -> None:
        """Close every connection and the listening sockets; wait for the thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    async def _shutdown(self) -> None:
        for server in (self._server, self._control_server):
            if server is not None:
                server.close()
        self._reset_all(abort=True)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- control (any thread) -------------------------------------------------------------
    def path(self, direction: str) -> PathSettings:
        return self._paths[direction]

    def set(
        self,
        *,
        delay_ms: float | None = None,
        jitter_ms: float | None = None,
        loss: float | None = None,
        loss_stall_ms: float | None = None,
        direction: str = "both",
    ) -> None:
        """Change the path now; chunks already read keep their delivery time."""
        if direction not in ("both", "up", "down"):
            raise ValueError(f"direction must be both, up or down, got {direction!r}")
        changes = {
            k: v
            for k, v in (("delay_ms", delay_ms), ("jitter_ms", jitter_ms), ("loss", loss), ("loss_stall_ms", loss_stall_ms))
            if v is not None
        }
        for d in ("up", "down") if direction == "both" else (direction,):
            self._paths[d] = replace(self._paths[d], **changes)

    def blackhole(self, on: bool = True) -> None:
        """Hold every byte (no RST) until called with False."""
        self._blackholed = on
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._open.clear if on else self._open.set)

    @property
    def blackholed(self) -> bool:
        return self._blackholed

    def reset(self) -> None:
        """Reset (RST) every relayed connection."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._reset_all, True)

    def set_target(self, target: str) -> None:
        """New connections go to ``target``; existing ones keep theirs."""
        _split(target)
        self.target = target

    def stats(self) -> dict[str, Any]:
        return {
            "listen": self.address,
            "target": self.target,
            "blackhole": self._blackholed,
            "up": asdict(self._paths["up"]),
            "down": asdict(self._paths["down"]),
            "connections": self.connections,
            "open_connections": len(self._conns),
            "bytes_in": dict(self.bytes_in),
            "bytes_out": dict(self.bytes_out),
            "loss_stalls": dict(self.stalls),
        }

    # -- relaying -------------------------------------------------------------------------
    def _reset_all(self, abort: bool) -> None:
        for client_writer, target_writer in list(self._conns):
            for w in (client_writer, target_writer):
                if w is None:
                    continue
                try:
                    sock = w.get_extra_info("socket")
                    if abort and sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    w.transport.abort() if abort else w.close()
                except Exception:
                    pass
        self._conns.clear()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        entry: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (client_writer, None)
        self._conns.add(entry)
        try:
            # A blackholed path never reaches the target: hold the client until it heals.
            await self._open.wait()
            host, port = _split(self.target)
            try:
                target_reader, target_writer = await asyncio.open_connection(host, port)
            except OSError:
                client_writer.transport.abort()
                return
            self._conns.discard(entry)
            entry = (client_writer, target_writer)
            self._conns.add(entry)
            for w in (client_writer, target_writer):
                sock = w.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            up = _Pipe(self, "up", client_reader, target_writer)
            down = _Pipe(self, "down", target_reader, client_writer)
            tasks = [self._spawn(t) for t in (up.read_loop(), up.write_loop(), down.read_loop(), down.write_loop())]
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._conns.discard(entry)
            for w in entry:
                if w is not None:
                    try:
                        w.close()
                    except Exception:
                        pass

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                try:
                    answer = self.command(json.loads(line))
                except (ValueError, TypeError, KeyError) as exc:
                    answer = {"ok": False, "error": str(exc)}
                writer.write((json.dumps(answer) + "\n").encode())
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def command(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Apply one control message (see the module docstring); returns the answer."""
        cmd = msg.get("cmd")
        if cmd == "set":
            self.set(
                delay_ms=msg.get("delay_ms"),
                jitter_ms=msg.get("jitter_ms"),
                loss=msg.get("loss"),
                loss_stall_ms=msg.get("loss_stall_ms"),
                direction=msg.get("direction", "both"),
            )
        elif cmd == "blackhole":
            self.blackhole(bool(msg.get("on", True)))
        elif cmd == "reset":
            self.reset()
        elif cmd == "target":
            self.set_target(str(msg["address"]))
        elif cmd != "stats":
            raise ValueError(f"unknown command {cmd!r}")
        return {"ok": True, **self.stats()}


def send_command(control: str, msg: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
    """Send one control message to a relay's control port and return its answer."""
    host, port = _split(control)
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall((json.dumps(msg) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            part = s.recv(65536)
            if not part:
                break
            buf += part
    return json.loads(buf)


def _ctl(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: relay.py ctl HOST:PORT blackhole on|off | reset | stats | set KEY=VALUE...", file=sys.stderr)
        return 2
    control, cmd, *rest = argv
    msg: dict[str, Any] = {"cmd": cmd}
    if cmd == "blackhole":
        msg["on"] = (rest[0] if rest else "on").lower() in ("on", "1", "true", "yes")
    elif cmd == "target":
        msg["address"] = rest[0]
    elif cmd == "set":
        for item in rest:
            key, _, value = item.partition("=")
            msg[key] = value if key == "direction" else float(value)
    print(json.dumps(send_command(control, msg)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] == "ctl":
        return _ctl(args_in[1:])
    parser = argparse.ArgumentParser(prog="relay.py", description="TCP relay with delay, jitter, loss and blackhole.")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to accept on (port 0 = any)")
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay added in each direction")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="uniform ± jitter added to the delay")
    parser.add_argument("--loss", type=float, default=0.0, help="share of chunks held for --loss-stall-ms (0..1)")
    parser.add_argument("--loss-stall-ms", type=float, default=200.0, help="retransmission stall of a lost chunk")
    parser.add_argument("--control", default=None, help="HOST:PORT for the JSON-line control port")
    parser.add_argument("--blackhole", action="store_true", help="start blackholed")
    args = parser.parse_args(args_in)
    relay = Relay(
        args.listen,
        args.target,
        delay_ms=args.delay_ms,
        jitter_ms=args.jitter_ms,
        loss=args.loss,
        loss_stall_ms=args.loss_stall_ms,
        control=args.control,
    ).start()
    if args.blackhole:
        relay.blackhole(True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: relay.blackhole(not relay.blackholed))
    control = f" (control {relay.control_address})" if relay.control_address else ""
    print(f"relay listening on {relay.address} -> {relay.target}{control}", flush=True)
    while not stop.wait(0.5):
        pass
    relay.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

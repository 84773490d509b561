"""The embedded speech server, run as a child process of ``serve`` when no speech region is configured."""
from __future__ import annotations

import re
from typing import Any

from twisted.internet import defer, protocol
from twisted.logger import Logger

log = Logger(namespace="openclaw.server")


class SpeechServerProcess(protocol.ProcessProtocol):
    """The embedded speech server as a child process; fires ``ready`` with its address."""

    def __init__(self) -> None:
        self.ready: defer.Deferred[str] = defer.Deferred()
        self.ended: defer.Deferred[None] = defer.Deferred()
        self._buf = b""

    def outReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted API)
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            text = line.decode("utf-8", "replace").strip()
            m = re.search(r"listening on (\S+)", text)
            if m and not self.ready.called:
                self.ready.callback(m.group(1))
            if text:
                log.info("speech-server: {line}", line=text)

    def errReceived(self, data: bytes) -> None:  # noqa: N802
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                log.info("speech-server: {line}", line=line.strip())

    def processEnded(self, reason: Any) -> None:  # noqa: N802
        if not self.ready.called:
            self.ready.errback(RuntimeError(f"embedded speech server exited: {reason.value}"))
        self.ended.callback(None)

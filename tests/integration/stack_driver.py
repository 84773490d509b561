"""The project's SIP stack (sip/pjsua.py, real pjsua2 on loopback) in a process whose polling a test
controls, so that SIP messages can be made to reach pjsua together, in one ``libHandleEvents``.

    python -m tests.integration.stack_driver PORT

Answers every call with 200 and keeps it until the caller hangs up. Reads commands on stdin, one a
line, and writes one JSON object a line on stdout (events as they happen, and answers):

    pause    stop polling pjsua (SIP messages wait in the socket)     -> {"paused": true}
    poll     one poll: libHandleEvents(0), then what follows it        -> {"polled": N}
    resume   poll every 5 ms again                                      -> {"resumed": true}
    state    the stack's calls, pjsua's call table, graveyard, counts   -> {"state": {...}}
    quit     stop the stack and exit

Events: {"event": "incoming"|"confirmed"|"media"|"disconnected"|"hangup", "call_id": ..., ...}.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from twisted.internet import reactor, stdio
from twisted.protocols.basic import LineReceiver

from sip.api import SipConfig
from sip.gate import Rejection
from sip.message import SipRequest
from sip.pjsua import SipCall, SipStack


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Handler:
    def __init__(self) -> None:
        self.ended: dict[str, int] = {}

    def admit(self, request: SipRequest) -> Rejection | None:
        return None

    def options_status(self, request: SipRequest) -> Rejection | None:
        return None

    def incoming_call(self, call: SipCall) -> None:
        cid = call.sip_call_id
        emit({"event": "incoming", "call_id": cid, "slot": call.pjsua_slot()[0]})
        call.callbacks.on_confirmed = lambda: emit({"event": "confirmed", "call_id": cid})
        call.callbacks.on_media_active = lambda: emit({"event": "media", "call_id": cid})

        def disconnected(code: int, reason: str) -> None:
            self.ended[cid] = self.ended.get(cid, 0) + 1
            emit({"event": "disconnected", "call_id": cid, "code": code, "reason": reason,
                  "times": self.ended[cid]})

        call.callbacks.on_disconnected = disconnected
        call.answer(200)


class Commands(LineReceiver):
    delimiter = b"\n"

    def __init__(self, stack: SipStack) -> None:
        self.stack = stack

    def lineReceived(self, line: bytes) -> None:  # noqa: N802 (Twisted API)
        cmd = line.decode().strip()
        poller = self.stack._poller
        if cmd == "pause":
            if poller is not None and poller.running:
                poller.stop()
            emit({"paused": True})
        elif cmd == "poll":
            self.stack._poll()
            emit({"polled": self.stack.polls})
        elif cmd == "resume":
            if poller is not None and not poller.running:
                poller.start(self.stack.config.poll_interval_s, now=True)
            emit({"resumed": True})
        elif cmd == "state":
            calls = [{"call_id": c.sip_call_id, "slot": c.pjsua_slot()[0], "confirmed": c.confirmed,
                      "disconnected": c.disconnected} for c in self.stack.calls]
            emit({"state": {"calls": calls, "pjsua": {str(k): bool(v) for k, v in self.stack.pjsua_calls().items()},
                            "graveyard": len(self.stack._graveyard),
                            "deferred_releases": self.stack.deferred_releases}})
        elif cmd == "quit":
            self.stack.stop()
            reactor.stop()


def main() -> None:
    port = int(sys.argv[1])
    stack = SipStack(SipConfig(host="127.0.0.1", port=port, rtp_port=0, log_level=0), reactor, Handler())
    stack.on_hangup = lambda what, why: emit({"event": "hangup", "what": what, "why": why})

    def start() -> None:
        stack.start()
        stdio.StandardIO(Commands(stack))
        emit({"ready": True, "port": stack.bound_port})

    reactor.callWhenRunning(start)
    reactor.run()


if __name__ == "__main__":
    main()

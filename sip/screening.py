"""What the admission gates ask before pjsua: who may call (sip.guard) and the doors (sip.doors), logged and counted.

:class:`sip.pjsua.SipStack` registers the gate modules (sip/gate.py) and hands
their decisions here; nothing in this module touches pjsua2.
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.logger import Logger

from sip.doors import DoorSettings, Reduced, bad_content_length, screen_doors, unsupported_media
from sip.guard import InboundGuard
from sip.message import SipRequest, parse_request
from sip.rejection import Rejection, ReplaceBody

log = Logger(namespace="openclaw.sip")


class RequestScreen:
    """The access and doors decisions on a request's text and source address; *on_refused* counts each."""

    def __init__(self, clock: Any, guard: InboundGuard | None, doors: DoorSettings | None,
                 on_refused: Callable[[str], None] = lambda reason: None) -> None:
        self.clock = clock
        self.guard = guard
        self.doors = doors or DoorSettings()
        self.on_refused = on_refused

    def access(self, request: SipRequest, peer: str) -> Rejection | None:
        """sip.access on an out-of-dialog request (None: go on)."""
        if self.guard is None:
            return None
        verdict = self.guard.screen(request, peer, self.clock.seconds())
        if verdict.log:
            log.info("{method} {call_id} from {source} refused ({reason}): {why}", method=request.method,
                     call_id=request.call_id, source=verdict.source, reason=verdict.reason, why=verdict.log)
        return verdict.rejection

    def other(self, raw: str, peer: str) -> Rejection | None:
        """An out-of-dialog request that is neither INVITE nor OPTIONS: only a banned source's is dropped."""
        try:
            request = parse_request(raw)
        except ValueError:
            return None
        return None if request.to_tag else self.access(request, peer)

    def door(self, raw: str, peer: str) -> Rejection | ReplaceBody | None:
        """Any request, in or out of a dialog: multipart bodies and unserved methods (sip/doors.py)."""
        try:
            request = parse_request(raw)
        except ValueError:
            return None  # pjsip answers (or drops) it as it would have
        verdict = (None if request.method == "ACK" else bad_content_length(raw)) or screen_doors(request, self.doors)
        if verdict is None:
            return None
        if isinstance(verdict, Reduced):
            log.info("{method} {call_id}: multipart body reduced to its SDP part", method=request.method,
                     call_id=request.call_id)
            self.on_refused("multipart_reduced")
            return ReplaceBody("application", "sdp", verdict.sdp, unsupported_media())
        self.on_refused({415: "unsupported_media", 400: "bad_content_length"}.get(verdict.status, "method_not_allowed"))
        log.info("{method} {call_id} from {source} refused: {status} {reason}", method=request.method[:20],
                 call_id=request.call_id[:80], source=peer, status=verdict.status, reason=verdict.reason)
        return verdict

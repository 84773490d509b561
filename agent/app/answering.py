"""Answering an admitted call: at once, after ringing (180), or in early media (183 with SDP).

With ``sip.answer.ring_ms`` the caller hears ringing (``180 Ringing``) for that long before
the ``200 OK``; a CANCEL meanwhile ends the call (pjsua answers ``487``) and the session
closes with it. With ``early_media`` the agent sends ``183 Session Progress`` with its SDP:
the media starts then, and with it the dialogue (an announcement before the answer), and
the ``200 OK`` follows after ``ring_ms``.
"""
from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from sip.dialog import AnswerSettings

log = Logger(namespace="openclaw.server")


def answer_call(reactor: Any, call: Any, settings: AnswerSettings, headers: tuple[tuple[str, str], ...]) -> None:
    """Answer *call* (a :class:`sip.pjsua.SipCall`) as *settings* say; *headers* go on every response."""
    if settings.ring_ms <= 0 and not settings.early_media:
        call.answer(200, headers=headers)
        return
    provisional = 183 if settings.early_media else 180
    call.answer(provisional, headers=headers)
    log.info("call {call_id}: {code} sent, answering in {ms} ms", call_id=call.sip_call_id, code=provisional,
             ms=settings.ring_ms)

    def answer() -> None:
        if not call.disconnected:  # a CANCEL (or the caller giving up) ended it while ringing
            call.answer(200, headers=headers)

    reactor.callLater(settings.ring_ms / 1000.0, answer)

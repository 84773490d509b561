"""Answering an admitted call: at once, after ringing (180), or in early media (183 with SDP).

With ``sip.answer.ring_ms`` the caller hears ringing (``180 Ringing``) for that long before
the ``200 OK``; a CANCEL meanwhile ends the call (pjsua answers ``487``) and the session
closes with it. With ``early_media`` the agent sends ``183 Session Progress`` with its SDP:
the media starts then, and with it the dialogue (an announcement before the answer), and
the ``200 OK`` follows after ``ring_ms``.
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.logger import Logger

from sip.dialog import AnswerSettings

log = Logger(namespace="openclaw.server")


def answer_call(reactor: Any, call: Any, settings: AnswerSettings, headers: tuple[tuple[str, str], ...],
                on_failed: Callable[[], None] = lambda: None) -> None:
    """Answer *call* (a :class:`sip.pjsua.SipCall`) as *settings* say; *headers* go on every response.
    *on_failed*: pjsua could not send one of the answers to a call still there."""

    def send(code: int) -> bool:
        if not call.answer(code, headers=headers) and not call.disconnected:
            on_failed()
            return False
        return True

    if settings.ring_ms <= 0 and not settings.early_media:
        send(200)
        return
    provisional = 183 if settings.early_media else 180
    if not send(provisional):
        return
    log.info("call {call_id}: {code} sent, answering in {ms} ms", call_id=call.sip_call_id, code=provisional,
             ms=settings.ring_ms)

    def answer() -> None:
        if not call.disconnected:  # a CANCEL (or the caller giving up) ended it while ringing
            send(200)

    reactor.callLater(settings.ring_ms / 1000.0, answer)

"""The pjsua2 adapter: with its helper :mod:`sip.pjsua_transports`, the only importer of pjsua2.

(Over 600 lines: one pjsua2 adapter, whose callbacks and their guards belong together.)

(Over 600 lines: every pjsua2 object's lifetime -- calls, ports, the endpoint -- is kept here together.)

Threading model (see docs/architecture.md):

* The pjsua2 endpoint runs with no worker threads (``threadCnt = 0``,
  ``mainThreadOnly = True``); :class:`SipStack` polls it from the Twisted
  reactor with ``libHandleEvents(0)``. Every SIP callback therefore runs on the
  reactor thread, and every pjsua2 API is called from the reactor thread.
* The null audio device clocks the conference bridge on pjmedia's clock
  thread. :class:`_MediaPort` callbacks run there: they only move bytes between
  the bridge and the thread-safe :class:`FrameSink` / :class:`FrameSource`
  objects the application supplies, and never call pjsua2.
* pjsua2 aborts the whole process on misuse (a C assertion), so every callback
  checks ids and state before touching pjsua2 and catches all exceptions.

Admission happens before pjsua allocates a call: :class:`sip.gate.AdmissionGate`
(a pjsip module registered through ctypes) sees each out-of-dialog INVITE first and
can answer it statelessly; :class:`SipStack` parses the request and asks the
application's :class:`CallHandler`.
"""
from __future__ import annotations

import gc
import os
import weakref
from typing import Callable

import pjsua2 as pj
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from sip import calltable
from sip.api import CallCallbacks, CallHandler, FrameSink, FrameSource, SipConfig
from sip.lifecycle import CallLifecycle
from sip.doors import DoorSettings
from sip.gate import DOORS_PRIORITY, AdmissionGate, Rejection
from sip.guard import InboundGuard
from sip.screening import RequestScreen
from sip.info_dtmf import InfoDtmfModule
from sip.message import SipRequest, parse_request
from sip.pjsua_transports import create_transports, set_session_timers, set_srtp
from sip.transport import sdp_offers_srtp, srtp_refusal

__all__ = ["CODEC_IDS", "PJSUA_MAX_CALLS", "CallCallbacks", "CallHandler", "FrameSink", "FrameSource", "Rejection",
           "SipCall", "SipConfig", "SipStack"]

log = Logger(namespace="openclaw.sip")

#: pjsua2-python is compiled with PJSUA_MAX_CALLS = 4.
PJSUA_MAX_CALLS = 4

CODEC_IDS = {
    "PCMU": "PCMU/8000",
    "PCMA": "PCMA/8000",
    "G722": "G722/16000",
}


#: media states of a call the far end holds (sendonly: REMOTE_HOLD; inactive: NONE)
_HELD = (pj.PJSUA_CALL_MEDIA_REMOTE_HOLD, pj.PJSUA_CALL_MEDIA_NONE)


def raise_clock_threads(priority: int) -> int:
    """Set this process's pjmedia clock threads (pjlib names them "clock") to SCHED_FIFO
    *priority* (0: leave them alone); the number set. Each refusal is logged, and so is finding
    none. A thread at a fixed real-time priority runs as soon as its tick is due instead of
    waiting for a core that the decoding workers' bursts hold; it sleeps between ticks, so it
    cannot starve them. Linux only (``/proc``)."""
    found = raised = 0
    if priority <= 0:
        return raised
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="ascii", errors="replace") as f:
                if f.read().strip() != "clock":
                    continue
            found += 1
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(priority))
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        except (OSError, AttributeError) as exc:
            log.warn("pjmedia clock thread {tid} left at normal priority: SCHED_FIFO {priority} refused ({exc})",
                     tid=tid, priority=priority, exc=exc)
            continue
        log.info("pjmedia clock thread {tid} runs at SCHED_FIFO {priority}", tid=tid, priority=priority)
        raised += 1
    if not found:
        log.warn("no pjmedia clock thread found: the agent's audio is paced at normal priority")
    return raised


class _MediaPort(pj.AudioMediaPort):
    """Moves PCM between the conference bridge and the application (clock thread).

    A port is registered with the conference bridge once and then lent to one
    call after another (see ``SipStack._acquire_port``): pjmedia removes a port
    from the bridge asynchronously, on a later clock tick, so destroying one
    while calls are running races the clock thread (a use-after-free that
    crashed the process now and then when several calls ended together).
    Between calls the port is unbound: it drops what it receives and sends
    silence.
    """

    def __init__(self, name: str, fmt: pj.MediaFormatAudio) -> None:
        super().__init__()
        #: (sink, source) while lent to a call; replaced in one assignment so
        #: the clock thread sees either the old pair or the new one
        self._binding: tuple[FrameSink, FrameSource] | None = None
        self.frames_in = 0
        self.frames_out = 0
        self.createPort(name, fmt)

    def bind(self, sink: FrameSink, source: FrameSource) -> None:
        self.frames_in = self.frames_out = 0
        self._binding = (sink, source)

    def unbind(self) -> None:
        self._binding = None

    def onFrameReceived(self, frame: pj.MediaFrame) -> None:  # noqa: N802 (pjsua2 API)
        # getattr: at shutdown the clock thread may call a port whose Python side is being
        # torn down (its attributes already gone) before pjmedia has let go of it.
        binding = getattr(self, "_binding", None)
        if binding is None:
            return
        try:
            if frame.type == pj.PJMEDIA_FRAME_TYPE_AUDIO and frame.size:
                self.frames_in += 1
                binding[0].push_frame(bytes(frame.buf))
        except Exception:  # never let an exception cross into C++
            log.failure("media sink failed")

    def onFrameRequested(self, frame: pj.MediaFrame) -> None:  # noqa: N802 (pjsua2 API)
        binding = getattr(self, "_binding", None)
        if binding is None:
            frame.type = pj.PJMEDIA_FRAME_TYPE_NONE
            frame.size = 0
            return
        try:
            data = binding[1].pull_frame(frame.size)
            frame.type = pj.PJMEDIA_FRAME_TYPE_AUDIO
            frame.buf = pj.ByteVector(data)
            frame.size = len(data)
            self.frames_out += 1
        except Exception:
            log.failure("media source failed")


class _PjCall(pj.Call):
    def __init__(self, owner: "SipCall", acc: pj.Account, call_id: int = pj.PJSUA_INVALID_ID) -> None:
        super().__init__(acc, call_id)
        self._owner = owner

    def onCallState(self, prm: pj.OnCallStateParam) -> None:  # noqa: N802
        self._owner._on_state()

    def onCallMediaState(self, prm: pj.OnCallMediaStateParam) -> None:  # noqa: N802
        self._owner._on_media_state()

    def onCallSdpCreated(self, prm: pj.OnCallSdpCreatedParam) -> None:  # noqa: N802
        self._owner._on_sdp(prm.sdp.wholeSdp, prm.remSdp.wholeSdp)

    def onCallTsxState(self, prm: pj.OnCallTsxStateParam) -> None:  # noqa: N802
        if self._owner.request is None:  # an outbound call learns from the answer whether it got SRTP
            try:
                e = prm.e
                if e.type == pj.PJSIP_EVENT_TSX_STATE and e.body.tsxState.type == pj.PJSIP_EVENT_RX_MSG:
                    self._owner._on_answer_message(e.body.tsxState.src.rdata.wholeMsg)
            except Exception:
                log.failure("reading a response of an outbound call")

    def onDtmfDigit(self, prm: pj.OnDtmfDigitParam) -> None:  # noqa: N802
        self._owner._on_dtmf(prm.digit)

    def onCallTransferStatus(self, prm: pj.OnCallTransferStatusParam) -> None:  # noqa: N802
        self._owner._on_transfer_status(prm.statusCode, prm.reason, bool(prm.finalNotify))
        prm.cont = not prm.finalNotify


class SipCall:
    """One call leg, inbound or outbound. Use only on the reactor thread."""

    def __init__(self, stack: "SipStack", request: SipRequest | None) -> None:
        self._stack = stack
        self.request = request
        self.callbacks = CallCallbacks()
        self._pj: _PjCall | None = None
        self._port: _MediaPort | None = None
        self._media: pj.AudioMedia | None = None
        self._sink: FrameSink | None = None
        self._source: FrameSource | None = None
        #: answered, confirmed, ended: in whatever order pjsua reports them (sip/lifecycle.py)
        self.life = CallLifecycle(stack._reactor, outbound=request is None,
                                  on_ack_timeout=lambda: self.hangup(why=self.life.ack_timeout_reason))
        self._final_stats: dict[str, int] = {}
        self.sip_call_id = request.call_id if request else ""
        self.codec = ""
        self.last_status = 0
        #: the speech region serving the call (sent on later legs as X-OpenClaw-Region)
        self.region = ""
        #: the SDP this side last sent, and whether it keys SRTP (RFC 4568 a=crypto)
        self.local_sdp = ""
        self.srtp = False
        #: the far end has the call on hold
        self.held = False
        #: the call's audio goes to another call (bridged transfer), not to the agent
        self._bridged = False

    # -- attributes -----------------------------------------------------
    @property
    def disconnected(self) -> bool:
        return self.life.ended

    @property
    def confirmed(self) -> bool:
        return self.life.confirmed

    @property
    def answered(self) -> bool:
        """A 2xx answer went out."""
        return self.life.answered

    @property
    def hangup_reason(self) -> str:
        """Why the agent hung this call up (empty: it did not)."""
        return self.life.hangup_reason

    @property
    def called(self) -> str:
        return self.request.called if self.request else ""

    @property
    def caller(self) -> str:
        return self.request.caller if self.request else ""

    def header(self, name: str) -> str | None:
        return self.request.header(name) if self.request else None

    def pjsua_slot(self) -> tuple[int, int]:
        """(pjsua call id, address of this call's pjsua2 object): what pjsua's table should show."""
        pjc = self._pj
        if pjc is None:
            return (-1, 0)
        try:
            return (pjc.getId(), int(pjc.this))
        except Exception:  # noqa: BLE001
            return (-1, 0)

    def lost(self, why: str) -> None:
        """pjsua no longer reports this call (the reconciler found it): end it here, once.

        When pjsua still holds the call with nobody receiving its events, it is hung up first;
        a slot pjsua now reports to another call is left alone."""
        if self.disconnected:
            return
        slot, _owner = self.pjsua_slot()
        if slot >= 0 and self._stack.pjsua_calls().get(slot) == 0:
            self.hangup(why=why)
        self._end(0, why)
    @property
    def transport(self) -> str:
        """The SIP transport an inbound call came over (udp, tcp, tls; '' when not known)."""
        via = (self.header("via") or "").split(None, 1)
        return via[0].rsplit("/", 1)[-1].lower() if via and via[0].upper().startswith("SIP/2.0/") else ""

    # -- actions (reactor thread) ---------------------------------------
    def attach_media(self, sink: FrameSink, source: FrameSource) -> None:
        """Route audio to *sink* and from *source* once media is active."""
        self._sink, self._source = sink, source
        self._connect_media()

    def answer(self, status: int = 200, reason: str = "", headers: tuple[tuple[str, str], ...] = ()) -> bool:
        """Send a response to the INVITE; False when pjsua refused to (the call is then not answered)."""
        if self._pj is None or self.disconnected:
            return False
        prm = pj.CallOpParam(True)
        prm.statusCode = status
        if reason:
            prm.reason = reason
        _add_headers(prm, headers)
        try:
            self._pj.answer(prm)
        except pj.Error as e:
            log.warn("call {call_id} answer {status} failed: {err}", status=status, err=e.info(),
                     call_id=self.sip_call_id)
            return False
        self.life.answer_sent(status)
        return True

    def hangup(self, status: int = 0, reason: str = "", why: str = "") -> None:
        """End the call: BYE once answered (after the ACK), a final response or CANCEL before.

        *why* says who decided it (dialplan, timeout, shutdown, ...); every hangup is logged with
        it and the call id, and a call that already ended is left alone (its pjsua slot may
        belong to another call by now)."""
        if self._pj is None:
            return
        what = self.life.hangup(why)
        if what is None:
            return
        if what == "response":
            what = f"{status or 603} response"
        self._note_hangup(what)
        prm = pj.CallOpParam(True)
        if status:
            prm.statusCode = status
        if reason:
            prm.reason = reason
        try:
            self._pj.hangup(prm)
        except pj.Error as e:
            log.warn("call {call_id} hangup failed: {err}", err=e.info(), call_id=self.sip_call_id)

    def _note_hangup(self, what: str) -> None:
        log.info("call {call_id} hanging up ({what}): {why}", call_id=self.sip_call_id, what=what,
                 why=self.hangup_reason)
        if self._stack.on_hangup is not None:
            _safe(self._stack.on_hangup, what, self.hangup_reason)

    def transfer(self, target_uri: str, headers: tuple[tuple[str, str], ...] = ()) -> bool:
        """Blind transfer with REFER; progress arrives at ``on_transfer_status``."""
        if self._pj is None or self.disconnected:
            return False
        prm = pj.CallOpParam(True)
        _add_headers(prm, headers)
        try:
            self._pj.xfer(target_uri, prm)
            return True
        except pj.Error as e:
            log.warn("REFER to {uri} failed: {err}", uri=target_uri, err=e.info(), call_id=self.sip_call_id)
            return False

    def bridge_to(self, other: "SipCall") -> bool:
        """Connect this call's audio with *other*'s (both directions) and stop the agent's own.

        Used for a bridged transfer; returns False when either call has no active audio.
        """
        if self._media is None or other._media is None or self.disconnected or other.disconnected:
            return False
        try:
            if self._port is not None:
                self._media.stopTransmit(self._port)
                self._port.stopTransmit(self._media)
            self._bridged = True
            self._media.startTransmit(other._media)
            other._media.startTransmit(self._media)
        except pj.Error as e:
            log.warn("bridge failed: {err}", err=e.info(), call_id=self.sip_call_id)
            return False
        return True

    def send_dtmf(self, digits: str) -> None:
        if self._pj is None or self.disconnected:
            return
        try:
            self._pj.dialDtmf(digits)
        except pj.Error as e:
            log.warn("DTMF failed: {err}", err=e.info(), call_id=self.sip_call_id)

    def rtp_stats(self) -> dict[str, int]:
        """Counters of the call's audio stream: packets, losses and what the jitter buffer held
        (empty when there is no stream). Once the call has ended: the last ones read."""
        if self._pj is None or self.disconnected or self._media is None:
            return dict(self._final_stats)
        try:
            st = self._pj.getStreamStat(0)
            jb = st.jbuf
            return {"rx_packets": st.rtcp.rxStat.pkt, "tx_packets": st.rtcp.txStat.pkt,
                    "rx_lost": st.rtcp.rxStat.loss, "jb_avg_delay_ms": jb.avgDelayMsec,
                    "jb_max_delay_ms": jb.maxDelayMsec, "jb_discarded": jb.discard, "jb_empty": jb.empty}
        except pj.Error:
            return {}

    def keep_stats(self) -> None:
        """Read the stream's counters now, so that they outlive the stream: pjsua frees it
        before telling of the call's end, so the stack reads them every second meanwhile."""
        stats = self.rtp_stats()
        if stats:
            self._final_stats = stats

    # -- pjsua2 callbacks (reactor thread) --------------------------------
    def _on_state(self) -> None:
        if self._pj is None:
            return
        try:
            ci = self._pj.getInfo()
        except pj.Error:
            return
        self.last_status = ci.lastStatusCode
        if not self.sip_call_id:
            self.sip_call_id = ci.callIdString
        if ci.state == pj.PJSIP_INV_STATE_CONFIRMED and self.life.on_confirmed():
            _safe(self.callbacks.on_confirmed)
        elif ci.state == pj.PJSIP_INV_STATE_DISCONNECTED and not self.disconnected:
            self._end(ci.lastStatusCode, ci.lastReason)

    def _end(self, code: int, reason: str) -> None:
        """The call is over (pjsua said so, or the reconciler found it gone): exactly once."""
        if not self.life.on_ended(code):
            return
        if self.life.ack_timed_out_in_stack:  # pjsua's BYE went out: the agent's hangup, logged and counted as one
            self._note_hangup("BYE")
        elif self.life.ended_without_ack:
            log.warn("call {call_id} ended without an ACK for the 200 ({code} {reason})",
                     call_id=self.sip_call_id, code=code, reason=reason)
        self._release_media()
        _safe(self.callbacks.on_disconnected, code, reason)
        self._stack._forget(self)

    def _on_media_state(self) -> None:
        if self._pj is None or self.disconnected:
            return
        try:
            ci = self._pj.getInfo()
        except pj.Error:
            return
        for i, mi in enumerate(ci.media):
            if mi.type == pj.PJMEDIA_TYPE_AUDIO and mi.status == pj.PJSUA_CALL_MEDIA_ACTIVE:
                try:
                    self._media = self._pj.getAudioMedia(i)
                    self.codec = self._pj.getStreamInfo(i).codecName
                except pj.Error as e:
                    log.warn("no audio media: {err}", err=e.info(), call_id=self.sip_call_id)
                    return
                self._connect_media()  # again after a re-INVITE: the stream may be a new one
                if self.held:
                    self.held = False
                    _safe(self.callbacks.on_hold, False)
                _safe(self.callbacks.on_media_active)
                return
            if mi.type == pj.PJMEDIA_TYPE_AUDIO and mi.status in _HELD and self.confirmed:
                self._hold_media()
                return

    def _hold_media(self) -> None:
        """The far end holds the call (sendonly/inactive): cut the session off its audio (music
        on hold is not the caller speaking) until the media is active again."""
        media, self._media = self._media, None
        if media is not None and self._port is not None:
            for src, dst in ((media, self._port), (self._port, media)):
                try:
                    src.stopTransmit(dst)
                except pj.Error:
                    pass
        if not self.held:
            self.held = True
            _safe(self.callbacks.on_hold, True)

    def _connect_media(self) -> None:
        if self._media is None or self._sink is None or self._source is None or self._bridged:
            return
        port = self._port
        if port is None:
            port = self._stack._acquire_port()
            port.bind(self._sink, self._source)
            self._port = port
        try:
            self._media.startTransmit(port)
            port.startTransmit(self._media)
        except pj.Error as e:
            log.warn("connecting call audio failed: {err}", err=e.info(), call_id=self.sip_call_id)

    def _release_media(self) -> None:
        port, self._port = self._port, None
        media, self._media = self._media, None
        if port is None:
            return
        port.unbind()
        if media is not None and not self.disconnected:
            # A call that ended has had its stream removed from the bridge, and
            # with it every connection; a live one (stack shutdown) is cut here.
            for src, dst in ((media, port), (port, media)):
                try:
                    src.stopTransmit(dst)
                except pj.Error:
                    pass
        self._stack._return_port(port)

    def _on_sdp(self, local: str, remote: str) -> None:
        # An inbound call's answer carries a=crypto only when SRTP was agreed; an outbound
        # call's offer is settled by the answer it gets (_on_answer_message).
        self.local_sdp = local
        self.srtp = sdp_offers_srtp(local) is True and (not remote or sdp_offers_srtp(remote) is True)

    def _on_answer_message(self, text: str) -> None:
        head, _, body = text.replace("\r\n", "\n").partition("\n\n")
        if head.startswith("SIP/2.0 2") and " INVITE" in head and sdp_offers_srtp(body) is not None:
            self.srtp = sdp_offers_srtp(body) is True

    def _on_dtmf(self, digit: str) -> None:
        if not self.disconnected:
            _safe(self.callbacks.on_dtmf, digit)

    def _on_transfer_status(self, code: int, reason: str, final: bool) -> None:
        if not self.disconnected:
            _safe(self.callbacks.on_transfer_status, code, reason, final)


class _Account(pj.Account):
    def __init__(self, stack: "SipStack") -> None:
        super().__init__()
        self._stack = stack

    def onIncomingCall(self, prm: pj.OnIncomingCallParam) -> None:  # noqa: N802
        self._stack._on_incoming(self, prm)

    def onRegState(self, prm: pj.OnRegStateParam) -> None:  # noqa: N802
        self._stack._on_reg_state(prm.code, prm.reason, prm.expiration)


class SipStack:
    """A pjsua2 endpoint, its UDP transport and account, polled by the reactor."""

    def __init__(self, config: SipConfig, reactor: IReactorTime, handler: CallHandler | None = None,
                 on_registration: Callable[[int, str, int], None] | None = None,
                 guard: InboundGuard | None = None, doors: DoorSettings | None = None,
                 on_refused: Callable[[str], None] = lambda reason: None) -> None:
        self.config = config
        #: who may call (sip.guard) and the doors (sip.doors), asked by the gate modules
        self.screen = RequestScreen(reactor, guard, doors, on_refused)
        self._doors_gate: AdmissionGate | None = None
        self._reactor = reactor
        self._handler = handler
        self._on_registration = on_registration
        self._ep: pj.Endpoint | None = None
        self._account: _Account | None = None
        self._calls: dict[int, SipCall] = {}
        #: pjsua2 Call objects of ended calls, released only while their pjsua slot is free
        #: (see _release_ended_calls)
        self._graveyard: list[_PjCall] = []
        #: how often an ended call's object had to wait because pjsua had reused its slot
        self.deferred_releases = 0
        #: polls of the endpoint so far (what pjsua does for one received request happens within one)
        self.polls = 0
        #: told of every hangup the agent makes: (what is sent, why)
        self.on_hangup: Callable[[str, str], None] | None = None
        #: media ports not lent to a call; all of them live until stop()
        self._idle_ports: list[_MediaPort] = []
        self._ports: list[_MediaPort] = []
        self._all_calls: weakref.WeakSet[SipCall] = weakref.WeakSet()
        self._poller: LoopingCall | None = None
        self._stats_poller: LoopingCall | None = None
        self._gate: AdmissionGate | None = None
        self._info_dtmf: InfoDtmfModule | None = None
        self.bound_port = 0
        #: the port each SIP transport listens on, by name (udp, tcp, tls)
        self.bound_ports: dict[str, int] = {}

    @property
    def calls(self) -> list[SipCall]:
        return list(self._calls.values())

    def pjsua_calls(self) -> dict[int, int]:
        """pjsua's own call table: {call id: address of the pjsua2 object it reports to (0: none)}.

        pjsua2 has no call enumeration: :mod:`sip.calltable` reads pjsua's C API."""
        return calltable.pjsua_calls(PJSUA_MAX_CALLS) if self._ep is not None else {}

    def slots_in_use(self) -> int:
        """pjsua's call slots taken, by live calls or by calls pjsua is still ending."""
        return calltable.slots_in_use(PJSUA_MAX_CALLS) if self._ep is not None else 0

    def hangup_unknown(self, slot: int, why: str) -> None:
        """Hang up a call pjsua holds in *slot* that no SipCall of this stack stands for."""
        if self._ep is None or slot not in self.pjsua_calls():
            return
        log.warn("pjsua call {slot} is unknown to the agent: hanging it up ({why})", slot=slot, why=why)
        calltable.hangup(slot)

    def start(self) -> None:
        ep = pj.Endpoint()
        ep.libCreate()
        epc = pj.EpConfig()
        epc.uaConfig.threadCnt = 0
        epc.uaConfig.mainThreadOnly = True
        epc.uaConfig.maxCalls = PJSUA_MAX_CALLS
        epc.uaConfig.userAgent = self.config.user_agent
        epc.logConfig.level = self.config.log_level
        epc.logConfig.consoleLevel = self.config.log_level
        med = epc.medConfig
        med.clockRate = self.config.clock_rate_hz
        med.sndClockRate = self.config.clock_rate_hz
        med.audioFramePtime = self.config.frame_ms
        med.noVad = True
        med.ecTailLen = 0
        med.quality = 4
        for attr, value in (("jbInit", self.config.jb_init_ms), ("jbMinPre", self.config.jb_min_pre_ms),
                            ("jbMaxPre", self.config.jb_max_pre_ms), ("jbMax", self.config.jb_max_ms)):
            setattr(med, attr, value)
        # The null sound device's clock thread lives as long as the endpoint: pjsua would close it
        # a second after the last call and start a new one (at normal priority) for the next.
        med.sndAutoCloseTime = -1
        ep.libInit(epc)
        self.bound_ports = create_transports(ep, self.config)
        self.bound_port = next(iter(self.bound_ports.values()))
        ep.audDevManager().setNullDev()
        raise_clock_threads(self.config.clock_thread_priority)
        self._set_codecs(ep)
        ep.libStart()
        self._ep = ep
        if self._handler is not None:
            self._gate = AdmissionGate(self._admit, self._options, self.screen.other if self.screen.guard else None)
            door = self.screen.door
            self._doors_gate = AdmissionGate(door, door, door, priority=DOORS_PRIORITY, name=b"mod-openclaw-doors")
            self._info_dtmf = InfoDtmfModule(self._gate._raw_message, self._on_info_key)
        self._account = self._create_account()
        self._poller = LoopingCall(self._poll)
        self._poller.clock = self._reactor
        self._poller.start(self.config.poll_interval_s, now=True)
        self._stats_poller = LoopingCall(self._keep_stats)
        self._stats_poller.clock = self._reactor
        self._stats_poller.start(1.0, now=False)

    def _set_codecs(self, ep: pj.Endpoint) -> None:
        wanted = [CODEC_IDS[c] for c in self.config.codecs if c in CODEC_IDS]
        for info in ep.codecEnum2():
            cid = info.codecId
            prio = 0
            for rank, want in enumerate(wanted):
                if cid.lower().startswith(want.lower()):
                    prio = 250 - rank * 10
            ep.codecSetPriority(cid, prio)
        # RFC 4733 telephone-events are always offered by pjsua.

    def _create_account(self) -> _Account:
        acfg = pj.AccountConfig()
        reg = self.config.registration
        host = self.config.public_address or (self.config.host if self.config.host not in ("", "0.0.0.0") else "127.0.0.1")
        acfg.idUri = reg.aor if reg else f"sip:{self.config.user}@{host}:{self.bound_port}"
        if reg:
            acfg.regConfig.registrarUri = reg.registrar_uri
            acfg.regConfig.timeoutSec = reg.expires_s
            acfg.regConfig.retryIntervalSec = 30
            if reg.username:
                acfg.sipConfig.authCreds.append(pj.AuthCredInfo("digest", reg.realm, reg.username, 0, reg.password))
        else:
            acfg.regConfig.registerOnAdd = False
        # No ICE, no TURN (pjnath advisories, SECURITY.md): an offer's ICE attributes are ignored.
        acfg.natConfig.iceEnabled = acfg.natConfig.turnEnabled = False
        set_srtp(acfg.mediaConfig, self.config.srtp)
        set_session_timers(acfg.callConfig, self.config.session_timers)
        acfg.mediaConfig.transportConfig.port = self.config.rtp_port
        acfg.mediaConfig.transportConfig.portRange = self.config.rtp_port_range if self.config.rtp_port else 0
        if self.config.host not in ("", "0.0.0.0"):
            acfg.mediaConfig.transportConfig.boundAddress = self.config.host
        acc = _Account(self)
        acc.create(acfg, True)
        return acc

    def stop(self) -> None:
        """Hang up every call and destroy the endpoint."""
        if self._ep is None:
            return
        if self._poller is not None and self._poller.running:
            self._poller.stop()
        if self._stats_poller is not None and self._stats_poller.running:
            self._stats_poller.stop()
        live = [c for c in self._calls.values() if not c.disconnected]
        for call in live:
            call.life.hangup_reason = call.hangup_reason or "shutdown: the SIP stack is stopping"
            log.info("call {call_id} hanging up: {why}", call_id=call.sip_call_id, why=call.hangup_reason)
        try:
            self._ep.hangupAllCalls()
            for _ in range(50):
                self._ep.libHandleEvents(10)
                if not self._calls:
                    break
        except pj.Error:
            pass
        # Every pjsua2 Call object must be destroyed while the library is still
        # up: a Call destroyed after libDestroy() trips a pjsua assertion that
        # aborts the process.
        for call in list(self._all_calls):
            call._release_media()
            call._pj = None
        self._calls.clear()
        self._graveyard.clear()
        # Every media port goes now, while the bridge exists (no loop variable
        # may keep one alive past libDestroy()).
        while self._ports:
            self._ports.pop().unbind()
        self._idle_ports.clear()
        # What the server froze out of the collector's reach at start (agent/app/serve.py) must be
        # collectable again: a pjsua2 object left in a frozen cycle would outlive libDestroy().
        gc.unfreeze()
        gc.collect()
        self._graveyard.clear()
        if self._account is not None:
            try:
                self._account.shutdown()
            except pj.Error:
                pass
            self._account = None
        if self._gate is not None:
            self._gate.unregister()
        if self._doors_gate is not None:
            self._doors_gate.unregister()
        if self._info_dtmf is not None:
            self._info_dtmf.unregister()
        self._ep.libDestroy()
        self._ep = None

    def make_call(self, uri: str, headers: tuple[tuple[str, str], ...] = ()) -> SipCall:
        """Place an outbound call (used by the test caller and bridged transfers)."""
        assert self._account is not None
        call = SipCall(self, None)
        self._all_calls.add(call)
        pjc = _PjCall(call, self._account)
        call._pj = pjc
        prm = pj.CallOpParam(True)
        _add_headers(prm, headers)
        pjc.makeCall(uri, prm)
        self._calls[pjc.getId()] = call
        return call

    # -- internals ----------------------------------------------------------
    def _acquire_port(self) -> _MediaPort:
        """An idle media port, or a new one registered with the bridge."""
        if self._idle_ports:
            return self._idle_ports.pop()
        fmt = pj.MediaFormatAudio()
        fmt.init(pj.PJMEDIA_FORMAT_PCM, self.config.clock_rate_hz, 1, self.config.frame_ms * 1000, 16)
        port = _MediaPort(f"media{len(self._ports)}", fmt)
        self._ports.append(port)
        return port

    def _return_port(self, port: _MediaPort) -> None:
        if port in self._ports and port not in self._idle_ports:
            self._idle_ports.append(port)

    def _poll(self) -> None:
        if self._ep is None:
            return
        self.polls += 1
        try:
            self._ep.libHandleEvents(0)
        except pj.Error as e:
            log.warn("libHandleEvents: {err}", err=e.info())
        if self._graveyard:
            self._release_ended_calls()

    def _release_ended_calls(self) -> None:
        """Drop the pjsua2 objects of ended calls whose pjsua slot is free.

        pjsua reuses a call id (slot) as soon as a call has ended: at capacity the next INVITE
        gets the slot just freed, often in the same ``libHandleEvents``. pjsua2's ``~Call()``
        clears the user data of the slot its object *had* and hangs up whatever call is active
        there, so an old object destroyed after its slot was reused cut off the new call (a BYE
        nobody asked for) and orphaned it from its callbacks (no DISCONNECTED, no session
        close, no call record, a slot counted as busy for ever). An object is therefore
        destroyed only here, between polls, while no call occupies its slot.
        """
        keep: list[_PjCall] = []
        for pjc in self._graveyard:
            try:
                reused = pjc.isActive()
            except Exception:  # noqa: BLE001 -- never let a release fail the poll
                reused = False
            if reused:
                if not getattr(pjc, "_deferred", False):
                    pjc._deferred = True
                    self.deferred_releases += 1
                    log.debug("pjsua slot {slot} reused before the ended call's object was released",
                              slot=pjc.getId())
                keep.append(pjc)
        self._graveyard = keep

    def _keep_stats(self) -> None:
        for call in self.calls:
            if call.confirmed and not call.disconnected:
                call.keep_stats()

    def _on_incoming(self, acc: _Account, prm: pj.OnIncomingCallParam) -> None:
        try:
            request = parse_request(prm.rdata.wholeMsg)
        except ValueError:
            request = None
        stale = self._calls.get(prm.callId)
        if stale is not None and not stale.disconnected:
            # pjsua gives a call id only to a call that has ended: the call still filed under it
            # missed its DISCONNECTED. End it now (session closed, record written), once.
            log.warn("call {call_id} ended without pjsua saying so: its call id {slot} went to a new call",
                     call_id=stale.sip_call_id, slot=prm.callId)
            stale._end(0, "call id reused by pjsua")
        call = SipCall(self, request)
        self._all_calls.add(call)
        pjc = _PjCall(call, acc, prm.callId)
        call._pj = pjc
        self._calls[prm.callId] = call
        if self._handler is None:
            call.answer(603, "Decline")
            return
        try:
            self._handler.incoming_call(call)
        except Exception:
            log.failure("incoming call handler failed", call_id=call.sip_call_id)
            call.answer(500, "Server Internal Error")

    def _forget(self, call: SipCall) -> None:
        for key, value in list(self._calls.items()):
            if value is call:
                del self._calls[key]
        # The pjsua2 object goes to the graveyard now (never destroyed inside its own callback,
        # nor while its slot holds another call: see _release_ended_calls); the SipCall, which
        # sessions and records may keep, no longer reaches it.
        pjc, call._pj = call._pj, None
        if pjc is not None:
            self._graveyard.append(pjc)

    def _on_info_key(self, call_id: str, key: str) -> bool:
        """A key from an ``application/dtmf`` INFO (see sip/info_dtmf.py): to its call, if any."""
        for call in self.calls:
            if call.sip_call_id == call_id and not call.disconnected:
                call._on_dtmf(key)
                return True
        return False

    def _on_reg_state(self, code: int, reason: str, expiration: int) -> None:
        if self._on_registration is not None:
            _safe(self._on_registration, code, reason, expiration)

    def _options(self, raw: str, peer: str = "") -> Rejection | None:
        if self._handler is None:
            return None
        try:
            request = parse_request(raw)
        except ValueError:
            return None  # pjsua answers (or drops) it as it would have
        if request.method != "OPTIONS" or request.to_tag:
            return None
        if (screened := self.screen.access(request, peer)) is not None:
            return screened
        decide = getattr(self._handler, "options_status", None)
        return decide(request) if callable(decide) else None

    def _admit(self, raw: str, peer: str = "") -> Rejection | None:
        if self._handler is None:
            return None
        try:
            request = parse_request(raw)
        except ValueError as e:
            return Rejection(400, f"Bad Request ({e})"[:120])
        if request.method != "INVITE" or request.to_tag:
            return None
        if (screened := self.screen.access(request, peer)) is not None:
            return screened
        refused = self._srtp_refusal(request)
        return refused if refused is not None else self._handler.admit(request)

    def _srtp_refusal(self, request: SipRequest) -> Rejection | None:
        """Mandatory SRTP: a plain RTP offer (or one over a hop that is not TLS when keys must
        travel over TLS) gets 488 here, before pjsua allocates a call for it."""
        why = srtp_refusal(self.config.srtp, request.header("via") or "", request.body)
        if why is None:
            return None
        log.info("call {call_id} from {caller} refused: 488 ({why})", call_id=request.call_id,
                 caller=request.caller, why=why)
        return Rejection(488, f"Not Acceptable Here ({why})", (("Warning", f'399 openclaw "{why}"'),))


def _add_headers(prm: pj.CallOpParam, headers: tuple[tuple[str, str], ...]) -> None:
    for name, value in headers:
        h = pj.SipHeader()
        h.hName = name
        h.hValue = value
        prm.txOption.headers.append(h)


def _safe(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception:
        log.failure("call callback failed")


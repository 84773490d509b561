"""What the SIP adapter (:mod:`sip.pjsua`) offers the application, declared without pjsua2."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from sip.gate import Rejection
from sip.message import SipRequest
from sip.registration import RegistrationConfig
from sip.dialog import SessionTimerSettings
from sip.transport import SrtpSettings, TlsSettings

if TYPE_CHECKING:
    from sip.pjsua import SipCall


@dataclass(frozen=True)
class SipConfig:
    host: str = "0.0.0.0"
    port: int = 5060
    public_address: str = ""
    codecs: tuple[str, ...] = ("PCMU", "PCMA", "G722")
    clock_rate_hz: int = 16000
    frame_ms: int = 10
    jb_init_ms: int = -1
    jb_min_pre_ms: int = -1
    jb_max_pre_ms: int = -1
    jb_max_ms: int = -1
    #: SCHED_FIFO priority of pjmedia's clock thread, set at start (0: left alone)
    clock_thread_priority: int = 0
    user_agent: str = "OpenClaw-Voice"
    #: user part of this endpoint's own SIP URI (when not registering)
    user: str = "agent"
    log_level: int = 1
    registration: RegistrationConfig | None = None
    poll_interval_s: float = 0.005
    #: first RTP port (0: any free port) and how many ports to try from it
    rtp_port: int = 4000
    rtp_port_range: int = 200
    #: SIP transports to listen on (udp, tcp, tls); TCP's port (0: ``port``); TLS and SRTP
    transports: tuple[str, ...] = ("udp",)
    tcp_port: int = 0
    tls: TlsSettings = field(default_factory=TlsSettings)
    srtp: SrtpSettings = field(default_factory=SrtpSettings)
    #: RFC 4028 session timers of every call
    session_timers: SessionTimerSettings = field(default_factory=SessionTimerSettings)


class FrameSink(Protocol):
    """Receives caller audio; called on pjmedia's clock thread. Must not block."""

    def push_frame(self, pcm: bytes) -> None: ...


class FrameSource(Protocol):
    """Supplies agent audio; called on pjmedia's clock thread. Must not block."""

    def pull_frame(self, nbytes: int) -> bytes: ...


class CallHandler(Protocol):
    """What the application implements; everything is called on the reactor thread."""

    def admit(self, request: SipRequest) -> Rejection | None:
        """Decide on an out-of-dialog INVITE before pjsua allocates a call."""

    def incoming_call(self, call: "SipCall") -> None:
        """A new call; answer or reject it."""

    def options_status(self, request: SipRequest) -> Rejection | None:
        """Decide on an out-of-dialog OPTIONS (a load balancer's keepalive).

        None lets pjsua answer ``200 OK``; a :class:`Rejection` (``503`` while
        draining) is answered statelessly, so the balancer stops sending calls.
        """


@dataclass
class CallCallbacks:
    """Per-call hooks the application sets; all run on the reactor thread."""

    on_media_active: Callable[[], None] = lambda: None
    on_dtmf: Callable[[str], None] = lambda digit: None
    on_transfer_status: Callable[[int, str, bool], None] = lambda code, reason, final: None
    on_disconnected: Callable[[int, str], None] = lambda code, reason: None
    on_confirmed: Callable[[], None] = lambda: None
    #: the far end put the call on hold (True: sendonly/inactive media) or resumed it (False)
    on_hold: Callable[[bool], None] = lambda held: None

"""Part of the pjsua2 adapter: SIP transports (UDP, TCP, TLS), SRTP and session-timer settings.

Only :mod:`sip.pjsua` uses it; it turns :mod:`sip.transport`'s settings into pjsua2's.
"""
from __future__ import annotations

import pjsua2 as pj

from sip.api import SipConfig
from sip.dialog import SessionTimerSettings
from sip.transport import SrtpSettings, TlsSettings

_TYPES = {"udp": pj.PJSIP_TRANSPORT_UDP, "tcp": pj.PJSIP_TRANSPORT_TCP, "tls": pj.PJSIP_TRANSPORT_TLS}
#: TLS 1.2 and, should the library's OpenSSL have it, 1.3 (the wheel's 1.0.2 has not)
_TLS_PROTOCOLS = {"1.2": pj.PJ_SSL_SOCK_PROTO_TLS1_2 | pj.PJ_SSL_SOCK_PROTO_TLS1_3}
_SRTP_USE = {"off": pj.PJMEDIA_SRTP_DISABLED, "optional": pj.PJMEDIA_SRTP_OPTIONAL,
             "mandatory": pj.PJMEDIA_SRTP_MANDATORY}


def tls_config(tls: TlsSettings) -> pj.TlsConfig:
    """pjsua2's TlsConfig: TLS 1.2 (nothing older), this side's certificate, whom it trusts."""
    cfg = pj.TlsConfig()
    cfg.proto = _TLS_PROTOCOLS[tls.min_version]
    cfg.method = pj.PJSIP_TLSV1_2_METHOD
    if tls.ca_file:
        cfg.CaListFile = tls.ca_file
    if tls.certificate_file:
        cfg.certFile = tls.certificate_file
    if tls.private_key_file:
        cfg.privKeyFile = tls.private_key_file
    if tls.private_key_password:
        cfg.password = tls.private_key_password
    cfg.verifyServer = tls.verify_server
    cfg.verifyClient = tls.client_certificate in ("verify", "require")
    cfg.requireClientCert = tls.client_certificate == "require"
    return cfg


def create_transports(ep: pj.Endpoint, config: SipConfig) -> dict[str, int]:
    """Create the configured SIP transports; returns each one's bound port by name."""
    ports: dict[str, int] = {}
    for name in config.transports:
        tcfg = pj.TransportConfig()
        if name == "tls":
            tcfg.port = config.tls.port
            tcfg.tlsConfig = tls_config(config.tls)
        elif name == "tcp":
            tcfg.port = config.tcp_port or ports.get("udp", config.port)
        else:
            tcfg.port = config.port
        if config.host not in ("", "0.0.0.0"):
            tcfg.boundAddress = config.host
        if config.public_address:
            tcfg.publicAddress = config.public_address
        tid = ep.transportCreate(_TYPES[name], tcfg)
        ports[name] = int(ep.transportGetInfo(tid).localName.rsplit(":", 1)[-1])
    return ports


def set_srtp(media: pj.AccountMediaConfig, srtp: SrtpSettings) -> None:
    """SRTP keyed by SDES only (RFC 4568), with the configured policy."""
    media.srtpUse = _SRTP_USE[srtp.policy]
    media.srtpSecureSignaling = 1 if srtp.require_tls else 0
    if srtp.policy != "off":
        keyings = pj.IntVector()
        keyings.append(pj.PJMEDIA_SRTP_KEYING_SDES)
        media.srtpOpt.keyings = keyings


_TIMER_USE = {"off": pj.PJSUA_SIP_TIMER_INACTIVE, "optional": pj.PJSUA_SIP_TIMER_OPTIONAL,
              "required": pj.PJSUA_SIP_TIMER_REQUIRED, "always": pj.PJSUA_SIP_TIMER_ALWAYS}


def set_session_timers(call: pj.AccountCallConfig, timers: SessionTimerSettings) -> None:
    """RFC 4028 session timers: pjsip refreshes (or expects refreshes) and sends BYE when a
    session interval passes unrefreshed."""
    call.timerUse = _TIMER_USE[timers.mode]
    call.timerSessExpiresSec = timers.expires_s
    call.timerMinSESec = timers.min_se_s

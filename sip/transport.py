"""SIP transports, TLS and SRTP settings, and the SDP check of SRTP offers (no pjsua2 import).

The config loader builds these; :mod:`sip.pjsua` turns them into pjsua2 transports and
account media settings. See docs/configuration.md (``sip.transports``, ``sip.tls``,
``sip.srtp``) and docs/sip-trunk.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: SIP transports the server can listen on
TRANSPORTS = ("udp", "tcp", "tls")
#: what the server asks of a TLS client's certificate
CLIENT_CERTIFICATE_MODES = ("ignore", "verify", "require")
#: the oldest TLS version accepted. Only 1.2: the pjsua2 wheel links OpenSSL 1.0.2, which has
#: no TLS 1.3 (a TLS 1.3-only client gets a handshake failure)
TLS_VERSIONS = ("1.2",)
SRTP_POLICIES = ("off", "optional", "mandatory")


@dataclass(frozen=True)
class TlsSettings:
    """The TLS transport: its port, this server's certificate and who it trusts."""

    port: int = 5061
    #: PEM certificate (chain) presented to peers, and its private key
    certificate_file: str = ""
    private_key_file: str = ""
    private_key_password: str = ""
    #: PEM CA bundle used to verify peers' certificates ("" : the system's defaults)
    ca_file: str = ""
    #: ignore: no client certificate asked; verify: a presented one must verify;
    #: require: a client without a valid certificate is refused
    client_certificate: str = "ignore"
    #: outbound TLS (transfers, the test caller): check the far end's certificate and name
    verify_server: bool = True
    min_version: str = "1.2"


@dataclass(frozen=True)
class SrtpSettings:
    """SRTP keyed by SDES (RFC 4568 ``a=crypto`` lines in the SDP)."""

    #: off: plain RTP only; optional: SRTP when the caller offers it; mandatory: SRTP or 488
    policy: str = "off"
    #: use SRTP only when the signalling hop is TLS (SDES keys travel in the SDP)
    require_tls: bool = False


_MEDIA_LINE = re.compile(r"^m=audio\s+\d+(?:/\d+)?\s+(\S+)", re.MULTILINE)
_CRYPTO_LINE = re.compile(r"^a=crypto:\s*\d+\s+\S+\s+inline:", re.MULTILINE)


def sdp_offers_srtp(sdp: str) -> bool | None:
    """Whether an SDP offer's audio can be SRTP keyed by SDES (None: no SDP at all).

    An audio line with a secure profile (``RTP/SAVP``, ``RTP/SAVPF``) or any ``a=crypto``
    line with an inline key counts; a plain ``RTP/AVP`` offer without crypto does not.
    """
    text = sdp.replace("\r\n", "\n")
    if not text.strip():
        return None
    profiles = _MEDIA_LINE.findall(text)
    if any(p.upper().startswith("RTP/SAVP") for p in profiles):
        return True
    return bool(_CRYPTO_LINE.search(text))


def srtp_refusal(srtp: SrtpSettings, top_via: str, sdp: str) -> str | None:
    """Why an INVITE (its top Via, its SDP) must be refused 488 under *srtp* (None: it need not).

    Only ``mandatory`` refuses: a plain RTP offer, or, with ``require_tls``, an offer that did
    not come over TLS. An INVITE without SDP is let through (the agent's answer offers SRTP).
    """
    if srtp.policy != "mandatory":
        return None
    if srtp.require_tls and not top_via.strip().upper().startswith("SIP/2.0/TLS"):
        return "SRTP keys only over TLS"
    if sdp_offers_srtp(sdp) is False:
        return "SRTP required"
    return None

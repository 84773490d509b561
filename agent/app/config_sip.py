"""The ``sip.transports``, ``tcp_port``, ``tls``, ``srtp``, ``answer`` and ``session_timers`` keys.

Read into :mod:`sip.transport`'s and :mod:`sip.dialog`'s frozen settings; errors name file:line like the rest of
:mod:`agent.app.config`. See docs/configuration.md and docs/sip-trunk.md.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from sip.dialog import SESSION_TIMER_MODES, AnswerSettings, SessionTimerSettings
from sip.transport import CLIENT_CERTIFICATE_MODES, SRTP_POLICIES, TLS_VERSIONS, TRANSPORTS, SrtpSettings, TlsSettings

if TYPE_CHECKING:
    from agent.app.config import _Reader

#: the keys of ``sip`` this module reads
TRANSPORT_KEYS = ("transports", "tcp_port", "tls", "srtp", "answer", "session_timers")


def _one_of(choices: tuple[str, ...]) -> Any:
    return lambda v: None if v in choices else f"expected one of {', '.join(choices)}, got {v!r}"


def read_transport_keys(r: "_Reader", base: str) -> dict[str, Any]:
    """SipSettings fields from the ``sip`` mapping *r*; relative file names are relative to *base*."""
    errors = r.errors
    out: dict[str, Any] = {}
    transports = r.strings("transports", ("udp",))
    bad = [t for t in transports if t not in TRANSPORTS]
    if bad or not transports or len(set(transports)) != len(transports):
        errors.append((r.values["transports"].mark,
                       f"config.sip.transports: expected a list of distinct transports from {', '.join(TRANSPORTS)}"
                       f"{', got ' + ', '.join(map(repr, bad)) if bad else ''}"))
        transports = ("udp",)
    out["transports"] = tuple(transports)
    out["tcp_port"] = r.get("tcp_port", int, 0, lambda v: None if 0 <= v <= 65535 else "expected a port number "
                                                                                          "0-65535 (0: sip.port)")
    tls = TlsSettings()
    if (rt := r.sub("tls")) is not None:
        rt.check_keys(("port", "certificate", "private_key", "private_key_password", "ca_file",
                       "client_certificate", "verify_server", "min_version"))

        def path(key: str) -> str:
            value = rt.get(key, str, "")
            return os.path.join(base, value) if value and not os.path.isabs(value) else value

        tls = TlsSettings(
            port=rt.get("port", int, tls.port, lambda v: None if 0 <= v <= 65535 else "expected a port number 0-65535"),
            certificate_file=path("certificate"), private_key_file=path("private_key"),
            private_key_password=rt.get("private_key_password", str, ""), ca_file=path("ca_file"),
            client_certificate=rt.get("client_certificate", str, tls.client_certificate,
                                      _one_of(CLIENT_CERTIFICATE_MODES)),
            verify_server=rt.get("verify_server", bool, tls.verify_server),
            min_version=rt.get("min_version", str, tls.min_version, _one_of(TLS_VERSIONS)))
        for key, value in (("certificate", tls.certificate_file), ("private_key", tls.private_key_file),
                           ("ca_file", tls.ca_file)):
            if value and not os.path.isfile(value):
                errors.append((rt.values[key].mark, f"config.sip.tls.{key}: no such file: {value}"))
        if tls.client_certificate != "ignore" and not tls.ca_file:
            errors.append((rt.values["client_certificate"].mark,
                           "config.sip.tls.client_certificate: verifying clients needs 'ca_file' "
                           "(the CAs that sign their certificates)"))
    if "tls" in transports and not (tls.certificate_file and tls.private_key_file):
        node = r.values.get("tls") or r.values["transports"]
        errors.append((node.mark, "config.sip.tls: the tls transport needs 'certificate' and 'private_key' "
                                  "(PEM files)"))
    out["tls"] = tls
    srtp = SrtpSettings()
    if (rs := r.sub("srtp")) is not None:
        rs.check_keys(("policy", "require_tls"))
        policy_node = rs.values.get("policy")
        if policy_node is not None and policy_node.value is False:
            policy_node.value = "off"  # YAML 1.1 reads a bare off as false
        srtp = SrtpSettings(policy=rs.get("policy", str, srtp.policy, _one_of(SRTP_POLICIES)),
                            require_tls=rs.get("require_tls", bool, srtp.require_tls))
        if srtp.policy == "mandatory" and srtp.require_tls and "tls" not in transports:
            errors.append((rs.node.mark, "config.sip.srtp: mandatory SRTP with require_tls needs the tls "
                                         "transport in sip.transports (no call could be set up)"))
    out["srtp"] = srtp
    answer = AnswerSettings()
    if (ra := r.sub("answer")) is not None:
        ra.check_keys(("ring_ms", "early_media"))
        answer = AnswerSettings(ring_ms=ra.get("ring_ms", int, 0, lambda v: None if 0 <= v <= 60000
                                                else "expected 0-60000 (ms of ringing before the answer)"),
                                early_media=ra.get("early_media", bool, False))
    out["answer"] = answer
    timers = SessionTimerSettings()
    if (rs := r.sub("session_timers")) is not None:
        rs.check_keys(("mode", "expires_s", "min_se_s"))
        mode_node = rs.values.get("mode")
        if mode_node is not None and mode_node.value is False:
            mode_node.value = "off"  # YAML 1.1 reads a bare off as false
        min_se = rs.get("min_se_s", int, timers.min_se_s,
                        lambda v: None if v >= 90 else "expected 90 or more (RFC 4028's smallest Min-SE)")
        expires = rs.get("expires_s", int, timers.expires_s,
                         lambda v: None if v >= min_se else f"expected at least min_se_s ({min_se})")
        timers = SessionTimerSettings(mode=rs.get("mode", str, timers.mode, _one_of(SESSION_TIMER_MODES)),
                                      expires_s=expires, min_se_s=min_se)
    out["session_timers"] = timers
    return out

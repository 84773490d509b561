"""The sip.transports / sip.tls / sip.srtp keys, and the SDP check behind mandatory SRTP."""
from __future__ import annotations

import pytest

from agent.app.config import load_config
from agent.yamlmarks import ConfigError
from sip.transport import SrtpSettings, TlsSettings, sdp_offers_srtp


def _load(tmp_path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return load_config(str(p))


def test_defaults_are_udp_without_srtp(tmp_path) -> None:
    """No transport keys: UDP only, SRTP off, TLS 1.2 minimum if TLS is ever turned on."""
    cfg = _load(tmp_path, "sip:\n  port: 5070\n")
    assert cfg.sip.transports == ("udp",) and cfg.sip.srtp == SrtpSettings() and cfg.sip.tls.min_version == "1.2"


def test_tls_paths_are_relative_to_the_config_file_and_off_means_off(tmp_path) -> None:
    """Certificate paths resolve next to the config; a bare YAML `off` is the policy, not false."""
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("x")
    cfg = _load(tmp_path, "sip:\n  transports: [udp, tls]\n  tls:\n    certificate: cert.pem\n"
                          "    private_key: key.pem\n    ca_file: ca.pem\n    client_certificate: require\n"
                          "    min_version: 1.2\n  srtp:\n    policy: off\n")
    assert cfg.sip.tls == TlsSettings(certificate_file=str(tmp_path / "cert.pem"),
                                      private_key_file=str(tmp_path / "key.pem"), ca_file=str(tmp_path / "ca.pem"),
                                      client_certificate="require", min_version="1.2")
    assert cfg.sip.srtp.policy == "off"


def test_transport_errors_name_the_line(tmp_path) -> None:
    """Unknown transport, tls without a certificate, a missing file, a bad policy, TLS 1.3 (which
    the wheel's OpenSSL lacks): all reported."""
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "sip:\n  transports: [udp, sctp, tls]\n  tls:\n    ca_file: nowhere.pem\n"
                        "    client_certificate: verify\n    min_version: 1.3\n  srtp:\n    policy: always\n")
    text = str(e.value)
    assert "config.sip.tls.min_version: expected one of 1.2, got '1.3'" in text
    assert ":2:15: config.sip.transports: expected a list of distinct transports from udp, tcp, tls, got 'sctp'" in text
    assert "config.sip.tls.ca_file: no such file: " in text
    assert "config.sip.srtp.policy: expected one of off, optional, mandatory, got 'always'" in text
    with pytest.raises(ConfigError, match="the tls transport needs 'certificate' and 'private_key'"):
        _load(tmp_path, "sip:\n  transports: [tls]\n")
    with pytest.raises(ConfigError, match="mandatory SRTP with require_tls needs the tls transport"):
        _load(tmp_path, "sip:\n  srtp:\n    policy: mandatory\n    require_tls: true\n")


def test_sdp_offers_srtp() -> None:
    """SAVP profiles or an inline a=crypto key are SRTP offers; plain AVP is not; no SDP is None."""
    plain = "v=0\r\nm=audio 4000 RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"
    assert sdp_offers_srtp(plain) is False
    assert sdp_offers_srtp(plain.replace("RTP/AVP", "RTP/SAVP")) is True
    assert sdp_offers_srtp(plain + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9\r\n")
    assert sdp_offers_srtp("") is None


def test_answer_and_session_timer_keys(tmp_path) -> None:
    """sip.answer and sip.session_timers are read (a bare `off` mode is the mode, not false)."""
    from sip.dialog import AnswerSettings, SessionTimerSettings

    cfg = _load(tmp_path, "sip:\n  answer:\n    ring_ms: 2000\n    early_media: true\n"
                          "  session_timers:\n    mode: off\n    expires_s: 600\n    min_se_s: 120\n")
    assert cfg.sip.answer == AnswerSettings(ring_ms=2000, early_media=True)
    assert cfg.sip.session_timers == SessionTimerSettings(mode="off", expires_s=600, min_se_s=120)
    assert _load(tmp_path, "sip: {}\n").sip.session_timers == SessionTimerSettings()
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "sip:\n  answer:\n    ring_ms: -1\n  session_timers:\n    mode: sometimes\n"
                        "    min_se_s: 30\n    expires_s: 60\n")
    text = str(e.value)
    assert "config.sip.answer.ring_ms: expected 0-60000" in text
    assert "config.sip.session_timers.mode: expected one of off, optional, required, always" in text
    assert "config.sip.session_timers.min_se_s: expected 90 or more" in text


def test_srtp_refusal() -> None:
    """Only mandatory refuses: a plain offer; with require_tls, anything not over TLS; no SDP passes."""
    from sip.transport import srtp_refusal

    plain = "v=0\r\nm=audio 4000 RTP/AVP 0\r\n"
    keyed = "v=0\r\nm=audio 4000 RTP/SAVP 0\r\n"
    udp, tls = "SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1", "SIP/2.0/TLS 10.0.0.1:5061;branch=z9hG4bK1"
    assert srtp_refusal(SrtpSettings("optional"), udp, plain) is None
    assert srtp_refusal(SrtpSettings("mandatory"), udp, plain) == "SRTP required"
    assert srtp_refusal(SrtpSettings("mandatory"), udp, keyed) is None
    assert srtp_refusal(SrtpSettings("mandatory"), udp, "") is None
    assert srtp_refusal(SrtpSettings("mandatory", require_tls=True), udp, keyed) == "SRTP keys only over TLS"
    assert srtp_refusal(SrtpSettings("mandatory", require_tls=True), tls, keyed) is None
    assert srtp_refusal(SrtpSettings("mandatory", require_tls=True), tls, plain) == "SRTP required"


def test_workers_cannot_share_a_tls_or_fixed_tcp_port(tmp_path) -> None:
    """`serve --workers 2` with the tls transport (or a fixed tcp_port) is refused with the reason,
    instead of workers failing to bind one port."""
    import argparse

    from agent.app.supervisor_main import settings_from_args

    for name in ("c.pem", "k.pem"):
        (tmp_path / name).write_text("x")
    cfg = _load(tmp_path, "sip:\n  transports: [udp, tls]\n  tls:\n    certificate: c.pem\n    private_key: k.pem\n")
    args = argparse.Namespace(host=None, port=None, capacity=None, metrics_port=None, rtp_port=None,
                              rtp_port_range=None, call_records=None, worker_host=None, worker_port=None,
                              workers=2, config=None, dialplan=None, speech_uri=None)
    with pytest.raises(ValueError, match="which 2 workers cannot share"):
        settings_from_args(args, cfg)
    with pytest.raises(ValueError, match="which 2 workers cannot share"):
        settings_from_args(args, _load(tmp_path, "sip:\n  tcp_port: 5070\n"))

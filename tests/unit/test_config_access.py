"""config: the sip.access section (who may call) is parsed into AccessSettings, errors with positions."""
from __future__ import annotations

import hashlib

import pytest

from agent.app.config import load_config
from agent.yamlmarks import ConfigError
from sip.guard import DigestUser


def test_access_section_is_parsed(tmp_path):  # type: ignore[no-untyped-def]
    """Every key of sip.access lands in AccessSettings; numbers may be integers or decimals."""
    ha1 = hashlib.md5(b"pbx:openclaw:pw").hexdigest()
    p = tmp_path / "c.yaml"
    p.write_text(f"""\
sip:
  access:
    trusted_sources: [203.0.113.0/24, sip.carrier.example]
    front_sources: [127.0.0.1]
    resolve_interval_s: 60
    untrusted: drop
    auth:
      realm: pbx
      users:
        - {{user: alice, password: s3cret}}
        - {{user: pbx, ha1: {ha1}}}
      algorithms: [SHA-256, MD5]
      nonce_ttl_s: 120
      retry_interval_s: 0.5
    bans: {{after_failures: 4, window_s: 30, ban_s: 900}}
""")
    a = load_config(str(p)).sip.access
    assert a.enabled
    assert a.trusted_sources == ("203.0.113.0/24", "sip.carrier.example") and a.front_sources == ("127.0.0.1",)
    assert (a.resolve_interval_s, a.untrusted, a.realm) == (60.0, "drop", "pbx")
    assert a.users == (DigestUser("alice", password="s3cret"), DigestUser("pbx", ha1=ha1))
    assert a.algorithms == ("SHA-256", "MD5")
    assert (a.nonce_ttl_s, a.retry_interval_s) == (120.0, 0.5)
    assert (a.ban_after_failures, a.ban_window_s, a.ban_s) == (4, 30.0, 900.0)


def test_access_is_off_by_default() -> None:
    """No sip.access: the guard is off (every INVITE reaches admission, as before)."""
    assert not load_config(None).sip.access.enabled


def test_access_errors_name_the_line(tmp_path):  # type: ignore[no-untyped-def]
    """Bad sources, actions, users, hashes and algorithms are each reported at file:line:column."""
    p = tmp_path / "c.yaml"
    p.write_text("""\
sip:
  access:
    trusted_sources: [10.0.0.0/40]
    untrusted: ignore
    auth:
      users:
        - {user: alice}
        - {user: bob, ha1: xyz}
      algorithms: [SHA-512]
    bans: {after_failures: 0, ban_s: soon}
""")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    text = str(e.value)
    assert ":3:22: config.sip.access.trusted_sources: expected an IP address, a CIDR" in text
    assert ":4:16: config.sip.access.untrusted: expected reject (403) or drop" in text
    assert ":7:11: config.sip.access.auth.users[0]: expected 'user' and one of 'password' or 'ha1'" in text
    assert ":8:28: config.sip.access.auth.users[1].ha1: expected 32 (MD5) or 64 (SHA-256) hex digits" in text
    assert ":9:19: config.sip.access.auth.algorithms: unknown 'SHA-512'; expected MD5 or SHA-256" in text
    assert ":10:28: config.sip.access.bans.after_failures: expected a positive integer" in text
    assert ":10:38: config.sip.access.bans.ban_s: expected a number, got a string" in text


def test_doors_section(tmp_path):  # type: ignore[no-untyped-def]
    """sip.doors: multipart reject (default) or sdp_only with a size bound; other values are errors."""
    assert load_config(None).sip.doors.multipart == "reject"
    p = tmp_path / "c.yaml"
    p.write_text("sip:\n  doors:\n    multipart: sdp_only\n    multipart_max_bytes: 2048\n")
    d = load_config(str(p)).sip.doors
    assert (d.multipart, d.multipart_max_bytes) == ("sdp_only", 2048)
    p.write_text("sip:\n  doors:\n    multipart: accept\n    size: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert ":3:16: config.sip.doors.multipart: expected reject (415) or sdp_only" in str(e.value)
    assert "unknown key 'size' in config.sip.doors" in str(e.value)

"""sip.guard: trusted sources, digest authentication and failure bans, driven with plain times."""
from __future__ import annotations

import hashlib

import pytest

from sip.guard import (
    SOURCE_HEADER, AccessSettings, DigestAuthenticator, DigestUser, FailureBans, InboundGuard, TrustedSources,
    digest_response, parse_authorization, parse_source,
)
from sip.message import parse_request
from sip.rejection import DROP

SECRET = b"k" * 32


def invite(authorization: str | None = None, extra: str = "", method: str = "INVITE") -> str:
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    return (f"{method} sip:100@198.51.100.1 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1\r\n"
            f"From: <sip:alice@192.0.2.7>;tag=a\r\nTo: <sip:100@198.51.100.1>\r\nCall-ID: c1\r\n"
            f"CSeq: 1 {method}\r\n{auth}{extra}Content-Length: 0\r\n\r\n")


def answer(challenge_value: str, user: str, password: str, realm: str = "openclaw", method: str = "INVITE",
           uri: str = "sip:100@198.51.100.1") -> str:
    """A client's Authorization for a WWW-Authenticate value (qop=auth)."""
    p = parse_authorization(challenge_value)
    alg = p.get("algorithm", "MD5")
    h = hashlib.md5 if alg == "MD5" else hashlib.sha256
    ha1 = h(f"{user}:{realm}:{password}".encode()).hexdigest()
    resp = digest_response(alg, ha1, p["nonce"], method, uri, "auth", "00000001", "xyz")
    return (f'Digest username="{user}", realm="{p["realm"]}", nonce="{p["nonce"]}", uri="{uri}", '
            f'response="{resp}", algorithm={alg}, qop=auth, nc=00000001, cnonce="xyz"')


def guard(**kw: object) -> InboundGuard:
    return InboundGuard(AccessSettings(**kw), secret=SECRET)  # type: ignore[arg-type]


def test_rfc7616_example_responses() -> None:
    """The response formula reproduces RFC 7616 §3.9.1 for MD5 and SHA-256."""
    nonce = "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v"
    cnonce = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"
    user = DigestUser("Mufasa", password="Circle of Life")
    for alg, want in (("MD5", "8ca523f5e9506fed4657c9700eebdbec"),
                      ("SHA-256", "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1")):
        ha1 = user.ha1_for(alg, "http-auth@example.org")
        assert ha1 is not None
        assert digest_response(alg, ha1, nonce, "GET", "/dir/index.html", "auth", "00000001", cnonce) == want


def test_sources_parse_ips_cidrs_and_names() -> None:
    """Config sources: IPs and CIDRs become networks, names stay names, garbage is a clear error."""
    assert str(parse_source("203.0.113.0/24")) == "203.0.113.0/24"
    assert str(parse_source("2001:db8::1")) == "2001:db8::1/128"
    assert parse_source("SIP.Carrier.example.") == "sip.carrier.example"
    with pytest.raises(ValueError, match="expected an IP address, a CIDR"):
        parse_source("10.0.0.0/33 x")


def test_trusted_sources_match_networks_and_resolved_names() -> None:
    """A source is trusted when in a configured network or among a name's current addresses."""
    t = TrustedSources(["10.1.0.0/16", "sip.carrier.example"])
    assert t.contains("10.1.2.3") and not t.contains("10.2.0.1")
    assert not t.contains("192.0.2.5")
    t.set_addresses("sip.carrier.example", ["192.0.2.5", "not-an-ip"])
    assert t.contains("192.0.2.5") and t.contains("::ffff:10.1.0.9")
    t.set_addresses("sip.carrier.example", ["192.0.2.6"])
    assert not t.contains("192.0.2.5") and t.contains("192.0.2.6")
    assert not t.contains("")


def test_nothing_configured_lets_everything_through() -> None:
    """Without sources or users the guard is off (the default, as before)."""
    g = guard()
    assert g.screen(parse_request(invite()), "192.0.2.7", 0.0).rejection is None


def test_untrusted_invite_gets_403_or_is_dropped_and_counted() -> None:
    """An INVITE from outside the trusted sources: 403 by default, nothing with untrusted: drop."""
    reasons: list[str] = []
    g = guard(trusted_sources=("127.0.0.1",))
    g.on_refused = reasons.append
    assert g.screen(parse_request(invite()), "127.0.0.1", 0.0).rejection is None
    v = g.screen(parse_request(invite()), "127.0.0.2", 0.0)
    assert v.rejection is not None and v.rejection.status == 403 and v.reason == "untrusted"
    g = guard(trusted_sources=("127.0.0.1",), untrusted="drop")
    assert g.screen(parse_request(invite()), "127.0.0.2", 0.0).rejection is DROP
    assert reasons == ["untrusted"]


def test_options_from_untrusted_source_is_not_refused() -> None:
    """Only INVITEs need trust: a keepalive OPTIONS from elsewhere is answered as before."""
    g = guard(trusted_sources=("127.0.0.1",))
    assert g.screen(parse_request(invite(method="OPTIONS")), "127.0.0.2", 0.0).rejection is None


def test_digest_challenge_then_correct_credentials_pass() -> None:
    """No credentials: 401 with a nonce per algorithm; the right answer (MD5 or SHA-256) is let through."""
    g = guard(users=(DigestUser("alice", password="s3cret"),), algorithms=("SHA-256", "MD5"))
    v = g.screen(parse_request(invite()), "192.0.2.7", 100.0)
    assert v.rejection is not None and v.rejection.status == 401 and v.reason == "auth_challenge"
    values = [value for name, value in v.rejection.headers if name == "WWW-Authenticate"]
    assert [parse_authorization(x)["algorithm"] for x in values] == ["SHA-256", "MD5"]
    assert all('qop="auth"' in x and 'realm="openclaw"' in x for x in values)
    for value in values:
        ok = g.screen(parse_request(invite(answer(value, "alice", "s3cret"))), "192.0.2.7", 101.0)
        assert ok.rejection is None


def test_ha1_credentials_work_for_their_algorithm_only() -> None:
    """A user given as an MD5 HA1 authenticates with MD5 and not with SHA-256."""
    ha1 = hashlib.md5(b"bob:openclaw:pw").hexdigest()
    g = guard(users=(DigestUser("bob", ha1=ha1),), algorithms=("MD5", "SHA-256"))
    values = [v for _, v in g.screen(parse_request(invite()), "192.0.2.7", 0.0).rejection.headers]  # type: ignore[union-attr]
    assert g.screen(parse_request(invite(answer(values[0], "bob", "pw"))), "192.0.2.7", 0.0).rejection is None
    v = g.screen(parse_request(invite(answer(values[1], "bob", "pw"))), "192.0.2.8", 0.0)
    assert v.rejection is not None and v.rejection.status == 401 and v.reason == "auth_failed"


@pytest.mark.parametrize("mutate, why", [
    (lambda a: a.replace('username="alice"', 'username="mallory"'), "user"),
    (lambda a: a.replace('realm="openclaw"', 'realm="other"'), "realm"),
    (lambda a: a.replace('response="', 'response="0'), "response"),
    (lambda a: a.replace('nonce="', 'nonce="1'), "nonce"),
    (lambda a: a.replace("qop=auth", "qop=auth-int"), "qop"),
    (lambda a: "Basic YWxpY2U6czNjcmV0", "malformed"),
])
def test_wrong_credentials_are_refused_with_a_new_challenge(mutate, why) -> None:  # type: ignore[no-untyped-def]
    """Each way credentials can be wrong gets a fresh 401 and says why in the log text."""
    g = guard(users=(DigestUser("alice", password="s3cret"),))
    value = g.screen(parse_request(invite()), "192.0.2.7", 0.0).rejection.headers[0][1]  # type: ignore[union-attr]
    v = g.screen(parse_request(invite(mutate(answer(value, "alice", "s3cret")))), "192.0.2.7", 1.0)
    assert v.rejection is not None and v.rejection.status == 401
    assert v.reason == "auth_failed" and f"({why})" in v.log


def test_expired_nonce_gets_a_stale_challenge_not_a_failure() -> None:
    """Right credentials on an expired nonce: 401 with stale=true, and no failure is counted."""
    g = guard(users=(DigestUser("alice", password="s3cret"),), nonce_ttl_s=30.0, ban_after_failures=1)
    value = g.screen(parse_request(invite()), "192.0.2.7", 0.0).rejection.headers[0][1]  # type: ignore[union-attr]
    v = g.screen(parse_request(invite(answer(value, "alice", "s3cret"))), "192.0.2.7", 31.0)
    assert v.rejection is not None and v.rejection.status == 401 and v.reason == "auth_stale"
    assert "stale=true" in v.rejection.headers[0][1]
    assert not g.bans.banned("192.0.2.7", 31.0)


def test_another_process_nonce_is_refused() -> None:
    """A nonce signed with another secret does not verify (nonces cannot be forged)."""
    other = DigestAuthenticator("openclaw", [DigestUser("alice", password="s3cret")], ("MD5",), 300, b"x" * 32)
    g = guard(users=(DigestUser("alice", password="s3cret"),))
    value = other.challenge(0.0).headers[0][1]
    v = g.screen(parse_request(invite(answer(value, "alice", "s3cret"))), "192.0.2.7", 1.0)
    assert v.reason == "auth_failed" and "(nonce)" in v.log


def test_retry_too_soon_after_a_failure_is_dropped() -> None:
    """After a failure the source waits retry_interval_s; an earlier try is dropped, even a right one."""
    g = guard(users=(DigestUser("alice", password="s3cret"),), retry_interval_s=1.0, ban_after_failures=10)
    value = g.screen(parse_request(invite()), "192.0.2.7", 0.0).rejection.headers[0][1]  # type: ignore[union-attr]
    good = invite(answer(value, "alice", "s3cret"))
    bad = invite(answer(value, "alice", "wrong"))
    assert g.screen(parse_request(bad), "192.0.2.7", 1.0).reason == "auth_failed"
    v = g.screen(parse_request(good), "192.0.2.7", 1.5)
    assert v.rejection is DROP and v.reason == "auth_rate_limited"
    assert g.screen(parse_request(good), "192.0.2.7", 2.6).rejection is None


def test_repeated_failures_ban_the_source_for_ban_s() -> None:
    """ban_after_failures failures within the window ban the source: every request dropped until ban_s passes."""
    banned: list[str] = []
    g = guard(users=(DigestUser("alice", password="s3cret"),), retry_interval_s=0.0, ban_after_failures=3,
              ban_window_s=10.0, ban_s=60.0)
    g.on_banned = banned.append
    value = g.screen(parse_request(invite()), "192.0.2.7", 0.0).rejection.headers[0][1]  # type: ignore[union-attr]
    bad = parse_request(invite(answer(value, "alice", "wrong")))
    good = parse_request(invite(answer(value, "alice", "s3cret")))
    assert [g.screen(bad, "192.0.2.7", t).reason for t in (1.0, 2.0, 3.0)] == ["auth_failed", "auth_failed", "banned"]
    assert banned == ["192.0.2.7"]
    for request in (good, parse_request(invite(method="OPTIONS")), parse_request(invite(method="REGISTER"))):
        assert g.screen(request, "192.0.2.7", 30.0).rejection is DROP
    assert g.screen(good, "192.0.2.9", 30.0).rejection is None  # another source is not affected
    assert g.bans.banned_count(30.0) == 1
    value = g.screen(parse_request(invite()), "192.0.2.7", 64.0).rejection.headers[0][1]  # type: ignore[union-attr]
    assert g.screen(parse_request(invite(answer(value, "alice", "s3cret"))), "192.0.2.7", 64.0).rejection is None
    assert g.bans.banned_count(64.0) == 0


def test_failures_outside_the_window_do_not_add_up() -> None:
    """Failures spread wider than ban_window_s never ban."""
    bans = FailureBans(after_failures=3, window_s=10.0, ban_s=60.0)
    assert not any(bans.fail("a", t) for t in (0.0, 6.0, 12.0, 18.0, 24.0))
    assert bans.fail("a", 25.0) is True


def test_ban_memory_is_bounded() -> None:
    """A spray of sources cannot grow the failure table past max_sources."""
    bans = FailureBans(after_failures=5, window_s=10.0, ban_s=60.0, max_sources=100)
    for i in range(1000):
        bans.fail(f"10.0.{i // 256}.{i % 256}", 0.0)
    assert len(bans._failures) == 100


def test_trusted_front_vouches_for_the_caller_address() -> None:
    """Behind Kamailio the X-OpenClaw-Source header names the caller; from anyone else it is ignored."""
    g = guard(trusted_sources=("192.0.2.0/24",), front_sources=("127.0.0.1",))
    spoof = parse_request(invite(extra=f"{SOURCE_HEADER}: 192.0.2.7\r\n"))
    assert g.screen(spoof, "127.0.0.1", 0.0).rejection is None
    assert g.screen(spoof, "203.0.113.9", 0.0).rejection.status == 403  # type: ignore[union-attr]
    bad = parse_request(invite(extra=f"{SOURCE_HEADER}: 203.0.113.9\r\n"))
    assert g.screen(bad, "127.0.0.1", 0.0).rejection.status == 403  # type: ignore[union-attr]

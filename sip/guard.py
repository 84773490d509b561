"""Who may call: trusted sources, digest authentication and failure bans, decided without I/O.

:class:`InboundGuard` screens each out-of-dialog request the admission gate
(:mod:`sip.gate`) sees, given its source address and the time, and returns what
to do: let it through, refuse it (``403``, a ``401`` digest challenge) or drop
it without an answer. It never reads a clock or a socket, so every rule is
tested with plain numbers (tests/unit/test_sip_guard.py). Names of trusted
sources are resolved elsewhere (:mod:`sip.guard_names`) and handed in.
Digest is hand-written (RFC 7616 / RFC 2617, ~60 lines): no maintained
library verifies the server side of SIP digest.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from sip.rejection import DROP, Rejection
from sip.message import SipRequest

#: header a trusted front proxy (Kamailio) sets to the caller's address
SOURCE_HEADER = "X-OpenClaw-Source"

ALGORITHMS = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}
_HA1_LENGTHS = {32: "MD5", 64: "SHA-256"}


@dataclass(frozen=True)
class DigestUser:
    """A user allowed to call with digest credentials: a password or a ready HA1 hash."""

    user: str
    password: str = ""
    #: hex H(user:realm:password); its length says the algorithm (32: MD5, 64: SHA-256)
    ha1: str = ""

    def ha1_for(self, algorithm: str, realm: str) -> str | None:
        if self.password:
            return _hash(algorithm, f"{self.user}:{realm}:{self.password}")
        if _HA1_LENGTHS.get(len(self.ha1)) == algorithm:
            return self.ha1.lower()
        return None


@dataclass(frozen=True)
class AccessSettings:
    """``sip.access`` in the config (docs/security.md)."""

    #: IPs, CIDRs and DNS names whose INVITEs are let through without credentials
    trusted_sources: tuple[str, ...] = ()
    resolve_interval_s: float = 300.0
    #: what an INVITE from elsewhere (without digest users configured) gets: reject (403) or drop
    untrusted: str = "reject"
    realm: str = "openclaw"
    users: tuple[DigestUser, ...] = ()
    #: offered in this order (one WWW-Authenticate each, RFC 8760)
    algorithms: tuple[str, ...] = ("MD5",)
    nonce_ttl_s: float = 300.0
    #: a source that just failed may try again only after this long (earlier tries are dropped)
    retry_interval_s: float = 1.0
    ban_after_failures: int = 5
    ban_window_s: float = 60.0
    ban_s: float = 600.0
    #: addresses of a front proxy (Kamailio) whose X-OpenClaw-Source header is believed
    front_sources: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.trusted_sources or self.users)


def _hash(algorithm: str, text: str) -> str:
    return ALGORITHMS[algorithm](text.encode("utf-8")).hexdigest()


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_source(text: str) -> Network | str:
    """An IP or CIDR as a network, else the text itself (a DNS name to resolve); ValueError if neither."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        pass
    name = text.strip().rstrip(".")
    if not re.fullmatch(r"(?=.{1,253}$)([A-Za-z0-9_]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z]"
                        r"[A-Za-z0-9-]{0,62}", name):
        raise ValueError(f"expected an IP address, a CIDR (203.0.113.0/24) or a DNS name, got {text!r}")
    return name.lower()


class TrustedSources:
    """Static networks plus the current addresses of DNS names (updated by a resolver)."""

    def __init__(self, sources: Iterable[str]) -> None:
        self.networks: list[Network] = []
        self.names: dict[str, frozenset[str]] = {}
        for text in sources:
            parsed = parse_source(text)
            if isinstance(parsed, str):
                self.names[parsed] = frozenset()
            else:
                self.networks.append(parsed)

    def set_addresses(self, name: str, addresses: Iterable[str]) -> None:
        """What *name* resolves to now (a failed lookup should keep the last answer: do not call)."""
        good = set()
        for a in addresses:
            try:
                good.add(str(ipaddress.ip_address(a)))
            except ValueError:
                continue
        self.names[name] = frozenset(good)

    def contains(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self.networks):
            return True
        text = str(ip)
        return any(text in addrs for addrs in self.names.values())


class FailureBans:
    """fail2ban in process: too many failures from one source within a window ban it for a while.

    Memory is bounded: at most *max_sources* sources are tracked (the oldest are forgotten).
    """

    def __init__(self, after_failures: int, window_s: float, ban_s: float, max_sources: int = 10000) -> None:
        self.after_failures = after_failures
        self.window_s = window_s
        self.ban_s = ban_s
        self.max_sources = max_sources
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._banned: OrderedDict[str, float] = OrderedDict()

    def banned(self, source: str, now: float) -> bool:
        until = self._banned.get(source)
        if until is None:
            return False
        if now >= until:
            del self._banned[source]
            return False
        return True

    def last_failure(self, source: str) -> float | None:
        times = self._failures.get(source)
        return times[-1] if times else None

    def fail(self, source: str, now: float) -> bool:
        """Count a failure; True when it bans *source* (its failures are then forgotten)."""
        times = self._failures.pop(source, None) or deque()
        while times and now - times[0] > self.window_s:
            times.popleft()
        times.append(now)
        if len(times) >= self.after_failures:
            self._banned.pop(source, None)
            self._banned[source] = now + self.ban_s
            while len(self._banned) > self.max_sources:
                self._banned.popitem(last=False)
            return True
        self._failures[source] = times
        while len(self._failures) > self.max_sources:
            self._failures.popitem(last=False)
        return False

    def succeed(self, source: str) -> None:
        self._failures.pop(source, None)

    def banned_count(self, now: float) -> int:
        for source in [s for s, until in self._banned.items() if now >= until]:
            del self._banned[source]
        return len(self._banned)


def digest_response(algorithm: str, ha1: str, nonce: str, method: str, uri: str, qop: str | None = None,
                    nc: str = "", cnonce: str = "") -> str:
    """The ``response`` a client with *ha1* sends (RFC 7616 §3.4.1; RFC 2069 form without qop)."""
    ha2 = _hash(algorithm, f"{method}:{uri}")
    if qop == "auth":
        return _hash(algorithm, f"{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}")
    return _hash(algorithm, f"{ha1}:{nonce}:{ha2}")


_PARAM_RE = re.compile(r'([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]+)')


def parse_authorization(value: str) -> dict[str, str]:
    """The parameters of a ``Digest`` Authorization value (names lower-cased); ValueError otherwise."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        raise ValueError(f"expected Digest credentials, got scheme {scheme[:20]!r}")
    params: dict[str, str] = {}
    for m in _PARAM_RE.finditer(rest):
        v = m.group(2)
        if v.startswith('"'):
            v = re.sub(r"\\(.)", r"\1", v[1:-1])
        params[m.group(1).lower()] = v
    return params


class DigestAuthenticator:
    """Server side of SIP digest (RFC 7616 / RFC 2617): challenges and verifies, stateless nonces.

    A nonce is ``<issue time in ms, hex>.<HMAC of it>``: anyone can see when it was
    issued, only this process can make one, so no nonce table is kept.
    """

    def __init__(self, realm: str, users: Iterable[DigestUser], algorithms: tuple[str, ...],
                 nonce_ttl_s: float, secret: bytes | None = None) -> None:
        self.realm = realm
        self.users = {u.user: u for u in users}
        self.algorithms = algorithms
        self.nonce_ttl_s = nonce_ttl_s
        self._secret = secret if secret is not None else os.urandom(32)

    def nonce(self, now: float) -> str:
        stamp = format(int(now * 1000), "x")
        return f"{stamp}.{self._sign(stamp)}"

    def _sign(self, stamp: str) -> str:
        return hmac.new(self._secret, stamp.encode(), hashlib.sha256).hexdigest()[:32]

    def challenge(self, now: float, stale: bool = False) -> Rejection:
        nonce = self.nonce(now)
        headers = tuple(
            ("WWW-Authenticate", f'Digest realm="{self.realm}", nonce="{nonce}", algorithm={alg}, qop="auth"'
                                 + (", stale=true" if stale else ""))
            for alg in self.algorithms)
        return Rejection(401, "Unauthorized", headers)

    def check(self, method: str, authorization: str, now: float) -> str:
        """``ok``, ``stale`` (a good answer to an expired nonce) or why the credentials fail."""
        try:
            p = parse_authorization(authorization)
        except ValueError:
            return "malformed"
        algorithm = p.get("algorithm", "MD5").upper()
        if algorithm not in self.algorithms:
            return "algorithm"
        if p.get("realm") != self.realm:
            return "realm"
        user = self.users.get(p.get("username", ""))
        if user is None:
            return "user"
        ha1 = user.ha1_for(algorithm, self.realm)
        if ha1 is None:
            return "user"
        nonce = p.get("nonce", "")
        stamp, _, sig = nonce.partition(".")
        if not sig or not hmac.compare_digest(sig, self._sign(stamp)):
            return "nonce"
        qop = p.get("qop")
        if qop not in (None, "auth"):
            return "qop"
        expected = digest_response(algorithm, ha1, nonce, method, p.get("uri", ""), qop,
                                   p.get("nc", ""), p.get("cnonce", ""))
        if not hmac.compare_digest(expected, p.get("response", "").lower()):
            return "response"
        try:
            issued_s = int(stamp, 16) / 1000
        except ValueError:
            return "nonce"
        if not 0 <= now - issued_s <= self.nonce_ttl_s:
            return "stale"
        return "ok"


@dataclass
class Screening:
    """What the guard decided: *rejection* None lets the request through; *reason* labels the metric."""

    rejection: Rejection | None
    reason: str = ""
    source: str = ""
    log: str = ""


@dataclass
class InboundGuard:
    """Screens out-of-dialog requests by source (trusted / banned) and digest credentials."""

    settings: AccessSettings
    secret: bytes | None = None
    trusted: TrustedSources = field(init=False)
    bans: FailureBans = field(init=False)
    digest: DigestAuthenticator | None = field(init=False)
    #: called with each refusal's reason (a metric label)
    on_refused: Callable[[str], None] = lambda reason: None
    #: called with a source when it gets banned
    on_banned: Callable[[str], None] = lambda source: None

    def __post_init__(self) -> None:
        s = self.settings
        self.trusted = TrustedSources(s.trusted_sources)
        self.fronts = TrustedSources(s.front_sources)
        self.bans = FailureBans(s.ban_after_failures, s.ban_window_s, s.ban_s)
        self.digest = (DigestAuthenticator(s.realm, s.users, s.algorithms, s.nonce_ttl_s, self.secret)
                       if s.users else None)

    def source_of(self, request: SipRequest, peer: str) -> str:
        """The caller's address: the packet's, or the one a trusted front vouches for."""
        if self.fronts.networks or self.fronts.names:
            if self.fronts.contains(peer):
                claimed = (request.header(SOURCE_HEADER) or "").strip()
                try:
                    return str(ipaddress.ip_address(claimed))
                except ValueError:
                    return peer
        return peer

    def screen(self, request: SipRequest, peer: str, now: float) -> Screening:
        source = self.source_of(request, peer)
        if not self.settings.enabled:
            return Screening(None, source=source)
        if self.bans.banned(source, now):
            return self._refuse(DROP, "banned", source)
        if request.method != "INVITE":
            return Screening(None, source=source)
        if self.trusted.contains(source):
            return Screening(None, source=source)
        if self.digest is None:
            action = DROP if self.settings.untrusted == "drop" else Rejection(403, "Forbidden")
            return self._refuse(action, "untrusted", source, "source not trusted")
        authorization = request.header("authorization")
        if authorization is None:
            return self._refuse(self.digest.challenge(now), "auth_challenge", source)
        last = self.bans.last_failure(source)
        if last is not None and now - last < self.settings.retry_interval_s:
            if self.bans.fail(source, now):
                self.on_banned(source)
                return self._refuse(DROP, "banned", source, "too many failed authentications: banned")
            return self._refuse(DROP, "auth_rate_limited", source, "retried too soon after a failure")
        verdict = self.digest.check(request.method, authorization, now)
        if verdict == "ok":
            self.bans.succeed(source)
            return Screening(None, source=source)
        if verdict == "stale":
            return self._refuse(self.digest.challenge(now, stale=True), "auth_stale", source)
        if self.bans.fail(source, now):
            self.on_banned(source)
            return self._refuse(DROP, "banned", source, f"failed authentication ({verdict}): banned")
        return self._refuse(self.digest.challenge(now), "auth_failed", source, f"failed authentication ({verdict})")

    def _refuse(self, rejection: Rejection, reason: str, source: str, why: str = "") -> Screening:
        self.on_refused(reason)
        return Screening(rejection, reason, source, why)

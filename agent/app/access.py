"""Wires ``sip.access`` (who may call) into a server: the guard, its metrics and its DNS refresher."""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from twisted.logger import Logger

from sip.guard import AccessSettings, InboundGuard
from sip.guard_names import TrustedNameResolver

log = Logger(namespace="openclaw.server")

#: labels of openclaw_sip_refused_total (docs/metrics.md)
REFUSAL_REASONS = ("untrusted", "banned", "auth_challenge", "auth_failed", "auth_stale", "auth_rate_limited",
                   "unsupported_media", "method_not_allowed", "multipart_reduced", "bad_content_length")


class ServerAccess:
    """The guard of one server process, counted in *registry*."""

    def __init__(self, settings: AccessSettings, reactor: Any, registry: CollectorRegistry) -> None:
        self.refused = Counter("openclaw_sip_refused_total",
                               "SIP requests refused or dropped before pjsua, by reason",
                               ["reason"], registry=registry)
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason)
        self.bans = Counter("openclaw_sip_bans_total", "Sources banned after repeated failed authentication",
                            registry=registry)
        self.guard = InboundGuard(settings, on_refused=lambda reason: self.refused.labels(reason).inc(),
                                  on_banned=self._banned)
        self.banned_sources = Gauge("openclaw_sip_banned_sources", "Sources banned at the moment",
                                    registry=registry)
        self.banned_sources.set_function(lambda: self.guard.bans.banned_count(reactor.seconds()))
        self.resolver = TrustedNameResolver(self.guard.trusted, reactor, settings.resolve_interval_s)
        if settings.enabled:
            log.info("SIP access: {n} trusted sources, {u} digest users, untrusted INVITEs: {action}",
                     n=len(settings.trusted_sources), u=len(settings.users),
                     action="challenged" if settings.users else settings.untrusted)

    def _banned(self, source: str) -> None:
        self.bans.inc()
        log.warn("SIP source {source} banned for {s:.0f} s after repeated failed authentication",
                 source=source, s=self.guard.settings.ban_s)

    def start(self) -> None:
        self.resolver.start()

    def stop(self) -> None:
        self.resolver.stop()

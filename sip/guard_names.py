"""Keeps the DNS names among the trusted SIP sources resolved (a LoopingCall on the reactor's resolver).

A name's addresses are replaced by each successful lookup; a failed or empty
lookup keeps the last answer (a DNS hiccup must not shut a carrier out).
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.internet.interfaces import IResolutionReceiver
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from sip.guard import TrustedSources

log = Logger(namespace="openclaw.sip")


@implementer(IResolutionReceiver)
class _Collect:
    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.done: defer.Deferred[list[str]] = defer.Deferred()

    def resolutionBegan(self, resolution: Any) -> None:  # noqa: N802
        pass

    def addressResolved(self, address: Any) -> None:  # noqa: N802
        self.addresses.append(address.host)

    def resolutionComplete(self) -> None:  # noqa: N802
        self.done.callback(self.addresses)


class TrustedNameResolver:
    """Re-resolves every name of *sources* each *interval_s* through ``reactor.nameResolver``."""

    def __init__(self, sources: TrustedSources, reactor: Any, interval_s: float,
                 on_change: Callable[[], None] = lambda: None) -> None:
        """*on_change* is called after a lookup changed a name's addresses."""
        self.sources = sources
        self.reactor = reactor
        self.interval_s = interval_s
        self.on_change = on_change
        self._loop: LoopingCall | None = None

    def start(self, now: bool = True) -> None:
        if not self.sources.names:
            return
        self._loop = LoopingCall(self.refresh)
        self._loop.clock = self.reactor
        self._loop.start(self.interval_s, now=now).addErrback(
            lambda f: log.failure("trusted source resolution stopped", f))

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def refresh(self) -> defer.Deferred[None]:
        return defer.gatherResults([self._resolve(name) for name in list(self.sources.names)]).addCallback(
            lambda _: None)

    def _resolve(self, name: str) -> defer.Deferred[None]:
        receiver = _Collect()
        self.reactor.nameResolver.resolveHostName(receiver, name, 0)

        def got(addresses: list[str]) -> None:
            if not addresses:
                log.warn("trusted SIP source {name} did not resolve; keeping {old}", name=name,
                         old=sorted(self.sources.names.get(name, ())))
                return
            old = self.sources.names.get(name)
            self.sources.set_addresses(name, addresses)
            if old != self.sources.names[name]:
                log.info("trusted SIP source {name} is {addresses}", name=name,
                         addresses=sorted(self.sources.names[name]))
                self.on_change()

        return receiver.done.addCallback(got)

"""sip.guard_names: trusted DNS names are re-resolved on the reactor's clock; failures keep the last answer."""
from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IHostnameResolver
from zope.interface import implementer

from sip.guard import TrustedSources
from sip.guard_names import TrustedNameResolver
from tests.fakes import FakeReactor


@implementer(IHostnameResolver)
class FakeNameResolver:
    """Answers each lookup from a table (an empty list: the lookup found nothing)."""

    def __init__(self) -> None:
        self.table: dict[str, list[str]] = {}
        self.lookups: list[str] = []

    def resolveHostName(self, receiver: Any, hostName: str, portNumber: int = 0, addressTypes: Any = None,  # noqa: N802,N803
                        transportSemantics: str = "TCP") -> Any:  # noqa: N803
        self.lookups.append(hostName)
        receiver.resolutionBegan(None)
        for host in self.table.get(hostName, []):
            receiver.addressResolved(IPv4Address("TCP", host, portNumber))
        receiver.resolutionComplete()
        return None


def test_names_are_resolved_at_start_and_every_interval() -> None:
    """A carrier's name is trusted for what it resolves to now, and follows its changes."""
    reactor = FakeReactor()
    reactor.nameResolver = FakeNameResolver()  # type: ignore[attr-defined]
    reactor.nameResolver.table["sip.carrier.example"] = ["192.0.2.10", "192.0.2.11"]
    sources = TrustedSources(["10.0.0.0/8", "sip.carrier.example"])
    r = TrustedNameResolver(sources, reactor, interval_s=300)
    r.start()
    assert sources.contains("192.0.2.11") and sources.contains("10.1.1.1")
    reactor.nameResolver.table["sip.carrier.example"] = ["192.0.2.20"]
    reactor.advance(299)
    assert sources.contains("192.0.2.11")
    reactor.advance(1)
    assert sources.contains("192.0.2.20") and not sources.contains("192.0.2.11")
    reactor.nameResolver.table["sip.carrier.example"] = []  # DNS failure: keep the last answer
    reactor.advance(300)
    assert sources.contains("192.0.2.20")
    assert reactor.nameResolver.lookups == ["sip.carrier.example"] * 3
    r.stop()
    reactor.advance(600)
    assert len(reactor.nameResolver.lookups) == 3


def test_no_names_no_lookups() -> None:
    """Only addresses configured: nothing is looked up."""
    reactor = FakeReactor()
    reactor.nameResolver = FakeNameResolver()  # type: ignore[attr-defined]
    TrustedNameResolver(TrustedSources(["192.0.2.1"]), reactor, 1).start()
    reactor.advance(10)
    assert reactor.nameResolver.lookups == []

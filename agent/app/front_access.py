"""``sip.access`` in the Kamailio front: its defines, and the trusted-source list it reads (permissions module).

The supervisor writes the list (group 1 of a permissions ``address_file``: the
configured networks and what the DNS names resolve to now), keeps the names
resolved and has Kamailio reload the list when they change. See docs/security.md.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from sip.guard import AccessSettings, TrustedSources
from sip.guard_names import TrustedNameResolver

log = Logger(namespace="openclaw.supervisor")


def front_defines(access: AccessSettings, address_list: str) -> dict[str, str]:
    """Kamailio ``-A`` defines that turn on the ACL and the failure bans of ops/kamailio/kamailio.cfg."""
    if not access.enabled:
        return {}
    defines = {
        "WITH_ACCESS": "1",
        "ADDRESS_LIST": f'"{address_list}"',
        "AUTH_BAN_AFTER": str(access.ban_after_failures),
        "HT_AUTHFAIL": f'"authfail=>size=8;autoexpire={math.ceil(access.ban_window_s)};"',
        "HT_AUTHBAN": f'"authban=>size=8;autoexpire={math.ceil(access.ban_s)};"',
    }
    if access.users:
        defines["WITH_DIGEST"] = "1"
    if access.untrusted == "drop":
        defines["UNTRUSTED_DROP"] = "1"
    return defines


def address_list(sources: TrustedSources) -> str:
    """The permissions module's address file: ``1 ADDRESS PREFIX`` per trusted network or resolved address."""
    lines = ["# Written by openclaw-voice serve --front kamailio from sip.access.trusted_sources."]
    for net in sources.networks:
        lines.append(f"1 {net.network_address} {net.prefixlen}")
    for name, addresses in sorted(sources.names.items()):
        for a in sorted(addresses):
            lines.append(f"1 {a} {128 if ':' in a else 32}  # {name}")
    return "\n".join(lines) + "\n"


class FrontAccessList:
    """Keeps RUN_DIR/trusted.list current; *reload* tells a running Kamailio to read it again."""

    def __init__(self, access: AccessSettings, path: str, reactor: Any,
                 reload: Callable[[], defer.Deferred[Any]]) -> None:
        self.path = path
        self.sources = TrustedSources(access.trusted_sources)
        self._reload = reload
        self.running = False
        self.resolver = TrustedNameResolver(self.sources, reactor, access.resolve_interval_s,
                                            on_change=self._changed)

    @defer.inlineCallbacks
    def start(self) -> Any:
        """Resolve the names once, write the list (before Kamailio starts), then keep it current."""
        if self.sources.names:
            yield self.resolver.refresh()
        self.write()
        self.resolver.start(now=False)

    def stop(self) -> None:
        self.resolver.stop()

    def write(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(address_list(self.sources))
        os.replace(tmp, self.path)

    def _changed(self) -> None:
        self.write()
        if self.running:
            self._reload().addCallbacks(
                lambda _: log.info("kamailio: trusted source list reloaded"),
                lambda f: log.warn("kamailio: cannot reload the trusted source list: {err}",
                                   err=f.getErrorMessage()))

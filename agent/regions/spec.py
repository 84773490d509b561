"""A region of the routing config: its endpoints, model versions, capacity and home-caller hints."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = ["RegionSpec", "normalise_prefix"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")


def normalise_prefix(prefix: str) -> str:
    """The digits of an E.164 country-code prefix (``"+44"`` gives ``"44"``); ValueError if it is not one."""
    digits = prefix[1:] if prefix.startswith("+") else prefix
    if not digits.isdigit():
        raise ValueError(f"home prefix {prefix!r} is not an E.164 country-code prefix (digits, optional '+')")
    return digits


@dataclass(frozen=True)
class RegionSpec:
    """One region: its speech endpoints (``host:port``, several instances allowed), its
    optional dialogue endpoint (an OpenAI-compatible chat-completions URL), the model
    versions it serves, how many concurrent speech streams this node may open there, and
    the caller hints that make it a caller's home region (E.164 country-code prefixes such
    as ``"+44"``; source networks in CIDR notation).

    Raises ``ValueError`` with a precise message when a field is invalid.
    """

    name: str
    asr_endpoints: tuple[str, ...]
    tts_endpoints: tuple[str, ...]
    dialogue_endpoint: str | None = None
    model_versions: frozenset[str] = frozenset()
    capacity: int = 64
    home_prefixes: tuple[str, ...] = ()
    home_networks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"region name {self.name!r}: expected 1-63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
            )
        for kind, endpoints in (("asr_endpoints", self.asr_endpoints), ("tts_endpoints", self.tts_endpoints)):
            if isinstance(endpoints, str) or not endpoints:
                raise ValueError(f"region {self.name}: {kind} must be a non-empty list of host:port")
            for address in endpoints:
                if not _ADDRESS.match(address):
                    raise ValueError(f"region {self.name}: {kind} entry {address!r} is not host:port")
        if self.dialogue_endpoint is not None and not re.match(r"^https?://", self.dialogue_endpoint):
            raise ValueError(f"region {self.name}: dialogue_endpoint {self.dialogue_endpoint!r} is not an http(s) URL")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity < 1:
            raise ValueError(f"region {self.name}: capacity must be a positive integer, got {self.capacity!r}")
        for version in self.model_versions:
            if not isinstance(version, str) or not version:
                raise ValueError(f"region {self.name}: model versions must be non-empty strings, got {version!r}")
        for prefix in self.home_prefixes:
            try:
                normalise_prefix(prefix)
            except ValueError as exc:
                raise ValueError(f"region {self.name}: {exc}") from None
        for network in self.home_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"region {self.name}: home network {network!r} is not an IP network (CIDR)") from None
        object.__setattr__(self, "model_versions", frozenset(self.model_versions))
        object.__setattr__(self, "asr_endpoints", tuple(self.asr_endpoints))
        object.__setattr__(self, "tts_endpoints", tuple(self.tts_endpoints))

    @property
    def speech_endpoints(self) -> tuple[str, ...]:
        """ASR and TTS endpoints, each address once."""
        return tuple(dict.fromkeys(self.asr_endpoints + self.tts_endpoints))

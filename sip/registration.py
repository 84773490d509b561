"""What registering with a SIP registrar or trunk needs (no pjsua2 import: the config loader uses it)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RegistrationConfig:
    """Register this agent with a SIP registrar / trunk (digest credentials optional)."""

    registrar_uri: str
    aor: str
    username: str = ""
    password: str = ""
    realm: str = "*"
    expires_s: int = 300

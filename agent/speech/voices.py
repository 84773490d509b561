"""Voice names: the agent names voices as Riva does (``English-US.Male-1``); the embedded speech
server speaks them with its flite voices. The flite names (``kal16``, ...) still work with the
embedded server, for configs and dialplans written before."""
from __future__ import annotations

import re

#: the default voice of prompts (a Riva voice name)
DEFAULT_VOICE = "English-US.Male-1"

#: the embedded engine's own voices (flite)
FLITE_VOICES: tuple[str, ...] = ("kal16", "kal", "rms", "awb", "slt")

#: Riva voice names the embedded server serves, and the flite voice that speaks each
RIVA_VOICES: dict[str, str] = {
    "English-US.Male-1": "kal16",
    "English-US.Male-2": "rms",
    "English-US.Male-3": "awb",
    "English-US.Female-1": "slt",
}

_RIVA_ENGLISH = re.compile(r"^English-US([.\-_](?P<rest>.*))?$")


def flite_voice(name: str) -> str | None:
    """The flite voice that speaks *name* (a Riva voice name or a flite one; "" is the default),
    or None when the embedded engine has no such voice. Other ``English-US.*`` names (Riva's
    emotional variants, ``English-US-Male-1``) get the flite voice of their gender."""
    if not name:
        return RIVA_VOICES[DEFAULT_VOICE]
    if name in FLITE_VOICES:
        return name
    canonical = name.replace("English-US-", "English-US.", 1)
    if canonical in RIVA_VOICES:
        return RIVA_VOICES[canonical]
    m = _RIVA_ENGLISH.match(name)
    if m is None:
        return None
    return RIVA_VOICES["English-US.Female-1"] if "female" in (m.group("rest") or "").lower() \
        else RIVA_VOICES[DEFAULT_VOICE]


def riva_name(flite: str) -> str:
    """The Riva voice name the embedded server lists for a flite voice (the flite name if none)."""
    for riva, voice in RIVA_VOICES.items():
        if voice == flite:
            return riva
    return flite

"""What admission knows of a call before pjsua creates it: its flow, dialplan and speech region."""
from __future__ import annotations

import re
from dataclasses import dataclass

from agent.dialplan.model import Dialplan
from agent.regions.selector import Selection
from sip.message import SipRequest


@dataclass
class Admitted:
    flow: str
    dialplan: Dialplan
    selection: Selection | None = None
    pinned: tuple[str, ...] = ()
    need_dialogue: bool = False
    source_ip: str | None = None


def flow_needs(dialplan: Dialplan, flow: str) -> tuple[tuple[str, ...], bool]:
    """(pinned model versions, needs a dialogue model) of *flow*."""
    pinned: tuple[str, ...] = ()
    try:
        model = dialplan.flow(flow).settings.asr_model
    except (KeyError, AttributeError):
        model = None
    if model:
        pinned = (f"asr:{model}",)
    needs = getattr(dialplan, "needs_model", None)
    return pinned, bool(needs(flow)) if callable(needs) else False


def flow_speech(dialplan: Dialplan, flow: str) -> tuple[str | None, str]:
    """(language, Riva ASR model name) of *flow*: a pinned ``asr_model`` ``NAME@VERSION`` is
    routed by the whole pin and asks the recogniser for model ``NAME``."""
    try:
        settings = dialplan.flow(flow).settings
    except (KeyError, AttributeError):
        return None, ""
    model = (settings.asr_model or "").split("@", 1)[0]
    return settings.language, model


def source_ip(request: SipRequest) -> str | None:
    """The caller's address from the top Via (received= when a proxy or NAT rewrote it)."""
    via = request.header("via") or ""
    m = re.search(r"received=([0-9a-fA-F.:]+)", via)
    if m:
        return m.group(1)
    m = re.search(r"SIP/2\.0/\w+\s+\[?([0-9a-fA-F.:]+?)\]?(?::\d+)?(?:;|\s|$)", via)
    return m.group(1) if m else None

"""The call record: what was said, heard and how fast, turn by turn."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.call.reply import Reply


class RtpStatistics(Protocol):
    def rtp_stats(self) -> dict[str, Any]: ...


class SpeechRecord(Protocol):
    """The speech a call used, as the server closes and records it."""

    def close(self) -> None: ...
    def record(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class CallInfo:
    """What the server knows of a call when it hands it to a session (for routing and the record)."""

    caller: str = ""
    called: str = ""
    flow: str = ""
    region: str = ""
    dialplan_digest: str = ""
    #: the call's SIP leg (its RTP statistics go into the record)
    sip_call: RtpStatistics | None = None
    #: the region-aware speech the session talks to (closed and recorded when the call ends)
    regional_speech: SpeechRecord | None = None


@dataclass
class Turn:
    """One exchange, for the call record."""

    started_at: float
    caller_text: str = ""
    dtmf: str = ""
    agent_prompts: list[Reply] = field(default_factory=list)
    latency_ms: float | None = None
    barge_in: bool = False
    #: why and when the caller's turn was taken to be over (spoken turns only): the endpointer's
    #: reason, the silence it waited after the caller's last voice and the speech before it (ms)
    end_of_turn: dict[str, Any] | None = None
    #: from that decision to the reply's first audio (ms): what the reply itself took
    reply_start_ms: float | None = None

    def as_record(self) -> dict[str, Any]:
        record = {"caller": self.caller_text, "dtmf": self.dtmf, "agent": [p.as_record() for p in self.agent_prompts],
                  "latency_ms": self.latency_ms, "barge_in": self.barge_in}
        if self.end_of_turn is not None:
            record["end_of_turn"] = self.end_of_turn
            record["reply_start_ms"] = self.reply_start_ms
        return record


@dataclass(frozen=True)
class CallOutcome:
    """The session's counts at the end of a call."""

    call_id: str
    end_reason: str
    barge_ins: int
    false_interruptions: int
    cut_ins: int
    transfer_target: str | None
    recordings: list[str]
    #: each pause of a prompt for a caller's voice (``PromptPause.as_record``)
    prompt_pauses: list[dict[str, Any]] = field(default_factory=list)


def call_record(outcome: CallOutcome, dialogue: Any, turns: list[Turn]) -> dict[str, Any]:
    """The session's part of the call record (the server adds the SIP and speech parts)."""
    return {
        "call_id": outcome.call_id,
        "end_reason": outcome.end_reason,
        "barge_ins": outcome.barge_ins,
        "false_interruptions": outcome.false_interruptions,
        "cut_ins": outcome.cut_ins,
        "prompt_pauses": outcome.prompt_pauses,
        "transfer_target": outcome.transfer_target,
        "recordings": outcome.recordings,
        "dialogue": [dataclasses.asdict(e) if dataclasses.is_dataclass(e) else e
                     for e in getattr(dialogue, "history", ())],
        "path": dialogue.call_record() if hasattr(dialogue, "call_record") else None,
        "turns": [t.as_record() for t in turns],
    }

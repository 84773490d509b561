"""One prompt being said: a :class:`Reply` handle, and the :class:`PromptPlayer` that starts one.

A prompt's audio comes from the prompt cache, from audio synthesised ahead while the
caller's turn was being confirmed, or from streamed synthesis appended to a playout
segment as it arrives (on a speech-client thread, straight into the thread-safe
playout buffer). The reply knows its segment, its synthesis stream, and -- once the
segment has finished or was flushed -- how much of it the caller heard.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from agent.app.metrics import AgentMetrics
from agent.call.ports import PromptCache, Reactor
from agent.dialplan.engine import Say
from agent.speech.api import Speech, SynthesisStream
from media.frames import duration_ms
from media.playout import PlayoutBuffer, PlayoutEvent, PlayoutEventType
from media.trim import LeadingSilenceGate, trim_silence

#: synthesised-ahead audio keeps this much of its trailing silence
_PREPARED_TAIL_MS = 300


@dataclass(eq=False)
class Reply:
    """One prompt being said, from its first queued audio to the end of its playout segment."""

    text: str
    segment: int | None = None
    #: what the caller heard of it (set when its segment finished or was flushed)
    played_ms: float = 0.0
    total_ms: int | None = None
    #: flushed before it had played out (a barge-in, a key, the call ending)
    interrupted: bool = False
    synthesis: SynthesisStream | None = field(default=None, repr=False)

    def finish(self, event: PlayoutEvent, sample_rate_hz: int) -> None:
        """Its segment finished playing or was flushed."""
        self.played_ms = round(duration_ms(event.played_bytes, sample_rate_hz))
        self.total_ms = round(duration_ms(event.total_bytes, sample_rate_hz))
        self.interrupted = event.type is PlayoutEventType.FLUSHED

    def cancel_synthesis(self) -> None:
        stream, self.synthesis = self.synthesis, None
        if stream is not None:
            stream.cancel()

    def as_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"text": self.text, "played_ms": self.played_ms, "total_ms": self.total_ms,
                                  "interrupted": self.interrupted}
        if self.segment is not None:
            record["segment"] = self.segment
        return record


class PromptPlayer:
    """Queues prompts on the playout buffer and keeps the replies whose segments have not ended."""

    def __init__(self, reactor: Reactor, speech: Speech, playout: PlayoutBuffer, prompts: PromptCache | None,
                 metrics: AgentMetrics | None, sample_rate_hz: int,
                 on_tts_error: Callable[[Exception], None]) -> None:
        self._reactor = reactor
        self._speech = speech
        self._playout = playout
        #: cached audio of the dialplan's static prompts (None: every prompt is synthesised)
        self.prompts = prompts
        self._metrics = metrics
        self._rate_hz = sample_rate_hz
        self._on_tts_error = on_tts_error
        self._replies: dict[int, Reply] = {}

    def cached(self, say: Say) -> bytes | None:
        return self.prompts.get(say.text, say.voice) if self.prompts is not None else None

    def say(self, say: Say, prepared: list[bytes] | None = None) -> Reply:
        """Start playing *say*: cached audio, else *prepared* audio if it is complete, else streamed."""
        reply = Reply(say.text)
        pcm = self.cached(say)
        if self._metrics:
            self._metrics.prompt_cache.labels("hit" if pcm is not None else "miss").inc()
        if pcm is not None:
            reply.segment = self._playout.play(pcm)
        elif prepared and prepared[-1] == b"":
            # Synthesised ahead, and complete.
            reply.segment = self._playout.play(trim_silence(b"".join(prepared), self._rate_hz,
                                                            tail_ms=_PREPARED_TAIL_MS))
        else:
            reply.segment = self._stream(say, reply)
        self._replies[reply.segment] = reply
        return reply

    def prepare(self, say: Say) -> tuple[list[bytes], SynthesisStream] | None:
        """Synthesise *say* ahead (unless cached): its chunks, ending with b"" once complete."""
        if self.cached(say) is not None:
            return None
        chunks: list[bytes] = []
        stream = self._speech.synthesize_stream(
            say.text, sample_rate_hz=self._rate_hz, voice=say.voice,
            on_audio=chunks.append, on_done=lambda: chunks.append(b""), on_error=lambda e: None)
        return chunks, stream

    def ended(self, event: PlayoutEvent) -> Reply | None:
        """A segment finished or was flushed: the reply it was, now knowing what was played."""
        reply = self._replies.pop(event.segment_id, None)
        if reply is not None:
            reply.finish(event, self._rate_hz)
        return reply

    def _stream(self, say: Say, reply: Reply) -> int:
        playout = self._playout
        sid = playout.open_segment()
        reply.segment = sid
        self._replies[sid] = reply

        def on_error(err: Exception) -> None:
            playout.close_segment(sid)
            self._reactor.callFromThread(self._on_tts_error, err)

        gate = LeadingSilenceGate(self._rate_hz)
        clock = self._reactor
        requested = clock.seconds()
        metrics = self._metrics

        def on_audio(pcm: bytes) -> None:
            first = not gate.open
            pcm = gate.process(pcm)
            if pcm:
                if first and metrics is not None:
                    metrics.tts_first_audio.observe(clock.seconds() - requested)
                playout.append(sid, pcm)

        reply.synthesis = self._speech.synthesize_stream(
            say.text, sample_rate_hz=self._rate_hz, voice=say.voice,
            on_audio=on_audio, on_done=lambda: playout.close_segment(sid), on_error=on_error)
        return sid

"""The speech interface, declared once: what a call session, the failover layer and the per-endpoint
client agree on. No ``riva`` or ``grpc`` here (see :mod:`agent.speech.client`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol


@dataclass(frozen=True)
class RecognitionOptions:
    """What a recognition stream is asked for (the same at every layer that opens one)."""

    #: rate of the pcm16 mono audio that will be pushed
    sample_rate_hz: int
    #: trailing silence that ends an utterance (None: the server's default)
    stop_history_ms: int | None = None
    interim_results: bool = True
    #: what the caller is expected to say, sent as a boosted ``speech_contexts`` hint
    #: (the embedded engine then decodes with a model of just these)
    phrases: tuple[str, ...] = ()


class RecognitionStream(Protocol):
    def push_audio(self, pcm16: bytes, level_dbfs: float | None = None) -> None: ...
    def close(self) -> None: ...


class SynthesisStream(Protocol):
    def cancel(self) -> None: ...


class Speech(Protocol):
    """Streaming recognition and synthesis, as a call session uses them."""

    def open_recognition(self, options: RecognitionOptions, *, on_interim: Callable[[str], None],
                         on_final: Callable[[str, float], None],
                         on_error: Callable[[Exception], None]) -> RecognitionStream: ...

    def synthesize_stream(self, text: str, *, sample_rate_hz: int, on_audio: Callable[[bytes], None],
                          on_done: Callable[[], None], on_error: Callable[[Exception], None],
                          voice: str | None = None) -> SynthesisStream: ...


class SpeechEndpointClient(Protocol):
    """What the failover layer needs of one endpoint's client (:class:`agent.speech.client.SpeechClient`):
    :class:`Speech`, plus the final result's audio positions and a close."""

    def open_recognition(self, options: RecognitionOptions, *, on_interim: Callable[[str], None],
                         on_final: Callable[[str, float], None], on_error: Callable[[Exception], None],
                         on_final_marks: Callable[[float | None, float], None] | None = None,
                         ) -> RecognitionStream: ...

    def synthesize_stream(self, text: str, *, sample_rate_hz: int, on_audio: Callable[[bytes], None],
                          on_done: Callable[[], None], on_error: Callable[[Exception], None],
                          voice: str | None = None) -> SynthesisStream: ...

    def close(self) -> None: ...

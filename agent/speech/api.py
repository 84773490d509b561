"""The speech interface, declared once: what a call session, the failover layer and the per-endpoint
client agree on. No ``riva`` or ``grpc`` here (see :mod:`agent.speech.client`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol


@dataclass(frozen=True)
class SpeechConnection:
    """How to reach one speech endpoint: TLS and the request metadata every RPC carries.

    *root_ca* / *client_cert* / *client_key* are PEM file paths; TLS is on when *use_ssl* is
    or any of them is set. *metadata* (``authorization: Bearer ...``, ``function-id: ...``)
    holds secrets: it is left out of ``repr()`` (only its keys show).
    """

    use_ssl: bool = False
    root_ca: str = ""
    client_cert: str = ""
    client_key: str = ""
    metadata: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def secure(self) -> bool:
        return self.use_ssl or bool(self.root_ca or self.client_cert or self.client_key)

    @property
    def metadata_keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.metadata)


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
    #: BCP-47 language of the caller's speech (None: the client's default, en-US)
    language_code: str | None = None
    #: Riva model name (``RecognitionConfig.model``; "": the server picks)
    model: str = ""
    #: the call this stream serves, sent as ``x-openclaw-call-id`` request metadata ("": none)
    call_id: str = ""
    #: readings of each result to ask for (Riva ``max_alternatives``); the others than the
    #: first reach ``on_alternatives``
    max_alternatives: int = 1
    #: ask the recogniser to punctuate (Riva ``enable_automatic_punctuation``): a transcript that
    #: ends with a full stop or a question mark was heard as a whole sentence (docs/latency.md)
    punctuation: bool = False


class RecognitionStream(Protocol):
    def push_audio(self, pcm16: bytes, level_dbfs: float | None = None) -> None: ...
    def close(self) -> None: ...


class SynthesisStream(Protocol):
    def cancel(self) -> None: ...


class Speech(Protocol):
    """Streaming recognition and synthesis, as a call session uses them."""

    def open_recognition(self, options: RecognitionOptions, *, on_interim: Callable[[str], None],
                         on_final: Callable[[str, float], None],
                         on_error: Callable[[Exception], None],
                         on_alternatives: Callable[[tuple[str, ...]], None] | None = None,
                         ) -> RecognitionStream: ...

    def synthesize_stream(self, text: str, *, sample_rate_hz: int, on_audio: Callable[[bytes], None],
                          on_done: Callable[[], None], on_error: Callable[[Exception], None],
                          voice: str | None = None) -> SynthesisStream: ...


class SpeechEndpointClient(Protocol):
    """What the failover layer needs of one endpoint's client (:class:`agent.speech.client.SpeechClient`):
    :class:`Speech`, plus the final result's audio positions and a close."""

    def open_recognition(self, options: RecognitionOptions, *, on_interim: Callable[[str], None],
                         on_final: Callable[[str, float], None], on_error: Callable[[Exception], None],
                         on_final_marks: Callable[[float | None, float], None] | None = None,
                         on_alternatives: Callable[[tuple[str, ...]], None] | None = None,
                         ) -> RecognitionStream: ...

    def synthesize_stream(self, text: str, *, sample_rate_hz: int, on_audio: Callable[[bytes], None],
                          on_done: Callable[[], None], on_error: Callable[[Exception], None],
                          voice: str | None = None, language_code: str | None = None,
                          call_id: str = "") -> SynthesisStream: ...

    def close(self) -> None: ...

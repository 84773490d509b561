"""Riva speech recognition (``nvidia.riva.asr.RivaSpeechRecognition``) on pocketsphinx.

Parses and validates a request's ``RecognitionConfig``, converts the client's audio to the
model's 16 kHz pcm16, and streams the hypotheses of a :class:`RecognitionEngine`'s session
back as Riva results.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import grpc
from riva.client.proto import riva_asr_pb2, riva_asr_pb2_grpc
from riva.client.proto.riva_audio_pb2 import AudioEncoding

from agent.speech.server.endpointing import EndpointingParams
from agent.speech.server.recognizer import MODEL_RATE_HZ, FinalHypothesis, RecognitionEvent
from agent.speech.server.rpc import LANGUAGE_CODE, ConfigError, EngineUnavailable, abort, check_language, log_stream
from media import convert

ASR_SERVICE_NAME = "nvidia.riva.asr.RivaSpeechRecognition"
ASR_MODEL_NAME = "pocketsphinx-en-US"
MIN_INPUT_RATE_HZ = 8000
MAX_INPUT_RATE_HZ = 96000
MAX_HINT_PHRASES = 5000
#: readings a result carries at most (``max_alternatives`` above it is served as this)
MAX_ALTERNATIVES = 5


@dataclass(frozen=True)
class RecognitionSettings:
    encoding: int
    sample_rate_hz: int
    endpointing: EndpointingParams
    interim_results: bool
    word_time_offsets: bool
    #: phrase hints (``speech_contexts``); empty: the general language model
    phrases: tuple[str, ...] = ()
    #: readings per result (``max_alternatives``; only Whisper's words have more than one)
    max_alternatives: int = 1
    #: punctuate (``enable_automatic_punctuation``): only Whisper's words get a mark, a sentence's
    #: end when Whisper is sure of it (agent.speech.server.open_speech)
    punctuation: bool = False


def parse_recognition_config(config: riva_asr_pb2.RecognitionConfig, *, interim_results: bool,
                             model_name: str = ASR_MODEL_NAME) -> RecognitionSettings:
    """Validate a ``RecognitionConfig`` (*model_name*: the model this server serves); raise
    :class:`ConfigError` with the reason."""
    if config.encoding not in (AudioEncoding.LINEAR_PCM, AudioEncoding.MULAW, AudioEncoding.ALAW):
        name = AudioEncoding.Name(config.encoding) if config.encoding in AudioEncoding.values() else str(config.encoding)
        raise ConfigError(f"unsupported encoding {name}; use LINEAR_PCM, MULAW or ALAW")
    rate = config.sample_rate_hertz
    if not MIN_INPUT_RATE_HZ <= rate <= MAX_INPUT_RATE_HZ:
        raise ConfigError(
            f"sample_rate_hertz must be between {MIN_INPUT_RATE_HZ} and {MAX_INPUT_RATE_HZ}, got {rate}"
        )
    check_language(config.language_code, "RecognitionConfig")
    if config.audio_channel_count > 1:
        raise ConfigError(f"only mono audio is supported, got audio_channel_count={config.audio_channel_count}")
    if config.model and config.model != model_name:
        raise ConfigError(f"model {config.model!r} is not available; this server has {model_name!r}")
    endpointing = EndpointingParams.from_proto(
        config.endpointing_config if config.HasField("endpointing_config") else None
    )
    phrases = tuple(p for ctx in config.speech_contexts if ctx.boost >= 0 for p in ctx.phrases if p.strip())
    if len(phrases) > MAX_HINT_PHRASES:
        raise ConfigError(f"at most {MAX_HINT_PHRASES} speech_contexts phrases are accepted, got {len(phrases)}")
    if config.max_alternatives < 0:
        raise ConfigError(f"max_alternatives must not be negative, got {config.max_alternatives}")
    return RecognitionSettings(
        encoding=config.encoding,
        sample_rate_hz=rate,
        endpointing=endpointing,
        interim_results=interim_results,
        word_time_offsets=config.enable_word_time_offsets,
        phrases=phrases,
        # 0 means 1, as in Riva; more than MAX_ALTERNATIVES are not searched for
        max_alternatives=min(MAX_ALTERNATIVES, max(1, config.max_alternatives)),
        punctuation=config.enable_automatic_punctuation,
    )


class InputAudioConverter:
    """Decodes G.711 if needed and resamples the client's audio to 16 kHz pcm16."""

    def __init__(self, encoding: int, sample_rate_hz: int) -> None:
        self._encoding = encoding
        self._resampler = convert.StreamResampler(sample_rate_hz, MODEL_RATE_HZ)

    def convert(self, data: bytes) -> bytes:
        if self._encoding == AudioEncoding.MULAW:
            pcm = convert.ulaw_to_pcm16(data)
        elif self._encoding == AudioEncoding.ALAW:
            pcm = convert.alaw_to_pcm16(data)
        else:
            pcm = data
        return self._resampler.process(pcm)


class AudioClock:
    """Seconds of client audio received on a stream (Riva's ``audio_processed``)."""

    def __init__(self, settings: RecognitionSettings) -> None:
        bytes_per_sample = 2 if settings.encoding == AudioEncoding.LINEAR_PCM else 1
        self._bytes_per_second = bytes_per_sample * settings.sample_rate_hz
        self._bytes = 0

    def consume(self, audio: bytes) -> None:
        self._bytes += len(audio)

    @property
    def seconds(self) -> float:
        return self._bytes / self._bytes_per_second


# --------------------------------------------------------------------------------------
# Recognition engines: where decoding runs (agent.speech.server.workers)
# --------------------------------------------------------------------------------------


class RecognitionSession(Protocol):
    """One stream's recognizer: raw client audio in, hypotheses out."""

    def process(self, audio: bytes) -> list[RecognitionEvent]: ...

    def finish(self) -> list[RecognitionEvent]: ...

    def close(self) -> None: ...


class RecognitionEngine(Protocol):
    """Opens recognition sessions."""

    def open(self, settings: RecognitionSettings) -> RecognitionSession: ...

    def close(self) -> None: ...


def _streaming_result(
    event: RecognitionEvent, audio_processed_s: float
) -> riva_asr_pb2.StreamingRecognizeResponse:
    result = riva_asr_pb2.StreamingRecognitionResult(channel_tag=1, audio_processed=audio_processed_s)
    alt = result.alternatives.add()
    alt.transcript = event.transcript
    if isinstance(event, FinalHypothesis):
        result.is_final = True
        alt.confidence = event.confidence
        for w in event.words:
            alt.words.add(start_time=w.start_ms, end_time=w.end_ms, word=w.word, confidence=w.confidence)
    else:
        result.is_final = False
        result.stability = event.stability
    _add_alternatives(result, event)
    return riva_asr_pb2.StreamingRecognizeResponse(results=[result])


def _add_alternatives(result: riva_asr_pb2.StreamingRecognitionResult | riva_asr_pb2.SpeechRecognitionResult,
                      event: RecognitionEvent) -> None:
    """The event's other readings after its first: words only (no confidence, no word times)."""
    for text in event.alternatives:
        result.alternatives.add(transcript=text)


class RivaAsrServicer(riva_asr_pb2_grpc.RivaSpeechRecognitionServicer):
    """Riva speech recognition on pocketsphinx, reported as the model *model_name* (a deployment
    names its version in it, e.g. ``pocketsphinx-en-US-2``: docs/regions.md, "Rollouts")."""

    def __init__(self, engine: RecognitionEngine, model_name: str = ASR_MODEL_NAME) -> None:
        self._engine = engine
        self.model_name = model_name

    def _open(self, settings: RecognitionSettings, context: grpc.ServicerContext) -> RecognitionSession:
        try:
            return self._engine.open(settings)
        except EngineUnavailable as exc:
            abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))

    def StreamingRecognize(  # noqa: N802 (gRPC method name)
        self,
        request_iterator: Iterator[riva_asr_pb2.StreamingRecognizeRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[riva_asr_pb2.StreamingRecognizeResponse]:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("streaming_request") != "streaming_config":
            abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "the first StreamingRecognizeRequest must carry streaming_config",
            )
        try:
            settings = parse_recognition_config(
                first.streaming_config.config, interim_results=first.streaming_config.interim_results,
                model_name=self.model_name,
            )
        except ConfigError as exc:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        log_stream(context, "asr", f"asr:{self.model_name}")
        clock = AudioClock(settings)
        session = self._open(settings, context)
        try:
            for request in request_iterator:
                kind = request.WhichOneof("streaming_request")
                if kind == "streaming_config":
                    abort(
                        context,
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "streaming_config is only allowed in the first StreamingRecognizeRequest",
                    )
                if kind != "audio_content" or not request.audio_content:
                    continue
                clock.consume(request.audio_content)
                try:
                    events = session.process(request.audio_content)
                except EngineUnavailable as exc:
                    abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
                for event in events:
                    yield _streaming_result(event, clock.seconds)
            try:
                events = session.finish()
            except EngineUnavailable as exc:
                abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
            for event in events:
                yield _streaming_result(event, clock.seconds)
        finally:
            session.close()

    def Recognize(  # noqa: N802
        self, request: riva_asr_pb2.RecognizeRequest, context: grpc.ServicerContext
    ) -> riva_asr_pb2.RecognizeResponse:
        try:
            settings = parse_recognition_config(request.config, interim_results=False, model_name=self.model_name)
        except ConfigError as exc:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        clock = AudioClock(settings)
        clock.consume(request.audio)
        session = self._open(settings, context)
        try:
            events = session.process(request.audio) + session.finish()
        except EngineUnavailable as exc:
            abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        finally:
            session.close()
        response = riva_asr_pb2.RecognizeResponse()
        for event in events:
            if not isinstance(event, FinalHypothesis):
                continue
            result = response.results.add(channel_tag=1, audio_processed=clock.seconds)
            alt = result.alternatives.add(transcript=event.transcript, confidence=event.confidence)
            for w in event.words:
                alt.words.add(start_time=w.start_ms, end_time=w.end_ms, word=w.word, confidence=w.confidence)
            _add_alternatives(result, event)
        return response

    def GetRivaSpeechRecognitionConfig(  # noqa: N802
        self, request: riva_asr_pb2.RivaSpeechRecognitionConfigRequest, context: grpc.ServicerContext
    ) -> riva_asr_pb2.RivaSpeechRecognitionConfigResponse:
        response = riva_asr_pb2.RivaSpeechRecognitionConfigResponse()
        if request.model_name in ("", self.model_name):
            cfg = response.model_config.add(model_name=self.model_name)
            cfg.parameters["language_code"] = LANGUAGE_CODE
            cfg.parameters["type"] = "online"
            cfg.parameters["sample_rate"] = str(MODEL_RATE_HZ)
        return response

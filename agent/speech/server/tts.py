"""Riva speech synthesis (``nvidia.riva.tts.RivaSpeechSynthesis``) on flite.

Text is split into sentences, each synthesised with flite, resampled and encoded to the
request's format, and streamed in chunks as soon as its sentence is ready.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import grpc
from riva.client.proto import riva_tts_pb2, riva_tts_pb2_grpc
from riva.client.proto.riva_audio_pb2 import AudioEncoding

from agent.speech.server import flite
from agent.speech.server.rpc import LANGUAGE_CODE, ConfigError, abort, check_language, log_stream
from agent.speech.voices import RIVA_VOICES, flite_voice, riva_name
from media import convert

TTS_SERVICE_NAME = "nvidia.riva.tts.RivaSpeechSynthesis"
TTS_CHUNK_MS = 100
TTS_DEFAULT_RATE_HZ = 16000
TTS_MIN_RATE_HZ = 8000
TTS_MAX_RATE_HZ = 48000

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;:])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Split text at sentence punctuation followed by space, and at line breaks."""
    return [part.strip() for part in _SENTENCE_SPLIT.split(text) if part and part.strip()]


def resolve_voice(voice_name: str) -> str:
    """Map a Riva ``voice_name`` (or a flite one) to a flite voice; raise :class:`ConfigError` if unknown."""
    voice = flite_voice(voice_name)
    if voice is None:
        raise ConfigError(
            f"voice_name {voice_name!r} is not available; use one of {', '.join(RIVA_VOICES)} "
            f"(or English-US.*, or a flite voice: {', '.join(flite.VOICES)})"
        )
    return voice


@dataclass(frozen=True)
class SynthesisSettings:
    text: str
    voice: str
    encoding: int
    sample_rate_hz: int


def parse_synthesis_request(request: riva_tts_pb2.SynthesizeSpeechRequest) -> SynthesisSettings:
    """Validate a ``SynthesizeSpeechRequest``; raise :class:`ConfigError` with the reason."""
    if not request.text.strip():
        raise ConfigError("text must not be empty")
    if request.language_code:
        check_language(request.language_code, "SynthesizeSpeechRequest")
    if request.encoding not in (AudioEncoding.LINEAR_PCM, AudioEncoding.MULAW, AudioEncoding.ALAW):
        name = AudioEncoding.Name(request.encoding) if request.encoding in AudioEncoding.values() else str(request.encoding)
        raise ConfigError(f"unsupported encoding {name}; use LINEAR_PCM, MULAW or ALAW")
    rate = request.sample_rate_hz or TTS_DEFAULT_RATE_HZ
    if not TTS_MIN_RATE_HZ <= rate <= TTS_MAX_RATE_HZ:
        raise ConfigError(f"sample_rate_hz must be between {TTS_MIN_RATE_HZ} and {TTS_MAX_RATE_HZ}, got {rate}")
    return SynthesisSettings(
        text=request.text, voice=resolve_voice(request.voice_name), encoding=request.encoding, sample_rate_hz=rate
    )


def _encode_output(pcm: bytes, encoding: int) -> bytes:
    if encoding == AudioEncoding.MULAW:
        return convert.pcm16_to_ulaw(pcm)
    if encoding == AudioEncoding.ALAW:
        return convert.pcm16_to_alaw(pcm)
    return pcm


def synthesize_chunks(settings: SynthesisSettings, chunk_ms: int = TTS_CHUNK_MS) -> Iterator[bytes]:
    """Yield encoded audio for ``settings.text`` sentence by sentence, ``chunk_ms`` at a time."""
    resampler: convert.StreamResampler | None = None
    chunk_bytes = settings.sample_rate_hz * chunk_ms // 1000 * 2
    carry = b""
    for sentence in split_sentences(settings.text):
        pcm, native_rate = flite.synthesize(sentence, settings.voice)
        if resampler is None:
            resampler = convert.StreamResampler(native_rate, settings.sample_rate_hz)
        pcm = carry + resampler.process(pcm)
        whole = len(pcm) - len(pcm) % chunk_bytes
        for start in range(0, whole, chunk_bytes):
            yield _encode_output(pcm[start : start + chunk_bytes], settings.encoding)
        carry = pcm[whole:]
    if carry:
        yield _encode_output(carry, settings.encoding)


class RivaTtsServicer(riva_tts_pb2_grpc.RivaSpeechSynthesisServicer):
    """Riva speech synthesis on flite; each voice is reported as the model ``flite-<voice>`` +
    *model_suffix* (a deployment names its version there, e.g. ``-2``)."""

    def __init__(self, model_suffix: str = "") -> None:
        self.model_suffix = model_suffix

    def Synthesize(  # noqa: N802
        self, request: riva_tts_pb2.SynthesizeSpeechRequest, context: grpc.ServicerContext
    ) -> riva_tts_pb2.SynthesizeSpeechResponse:
        try:
            settings = parse_synthesis_request(request)
        except ConfigError as exc:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        audio = b"".join(synthesize_chunks(settings, chunk_ms=1000))
        response = riva_tts_pb2.SynthesizeSpeechResponse(audio=audio)
        response.meta.text = request.text
        response.meta.processed_text = request.text
        return response

    def SynthesizeOnline(  # noqa: N802
        self,
        request_iterator: Iterable[riva_tts_pb2.SynthesizeSpeechRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[riva_tts_pb2.SynthesizeSpeechResponse]:
        received = False
        for request in request_iterator:
            received = True
            try:
                settings = parse_synthesis_request(request)
            except ConfigError as exc:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            log_stream(context, "tts", f"tts:flite-{settings.voice}{self.model_suffix}")
            for chunk in synthesize_chunks(settings):
                if not context.is_active():
                    return
                yield riva_tts_pb2.SynthesizeSpeechResponse(audio=chunk)
        if not received:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "SynthesizeOnline needs at least one request")

    def GetRivaSynthesisConfig(  # noqa: N802
        self, request: riva_tts_pb2.RivaSynthesisConfigRequest, context: grpc.ServicerContext
    ) -> riva_tts_pb2.RivaSynthesisConfigResponse:
        response = riva_tts_pb2.RivaSynthesisConfigResponse()
        for voice in flite.VOICES:
            model_name = f"flite-{voice}{self.model_suffix}"
            if request.model_name and request.model_name != model_name:
                continue
            cfg = response.model_config.add(model_name=model_name)
            cfg.parameters["language_code"] = LANGUAGE_CODE
            cfg.parameters["voice_name"] = riva_name(voice)
            cfg.parameters["flite_voice"] = voice
            cfg.parameters["sample_rate"] = "8000" if voice == "kal" else "16000"
        return response

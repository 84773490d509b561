"""Speech client: streaming recognition and synthesis over NVIDIA Riva's gRPC API.

This is the only agent module (besides the embedded server, :mod:`agent.speech.server`) that imports ``riva`` or
``grpc``. It speaks to a real Riva server or to the embedded one identically, through
``riva.client`` (``Auth``, ``ASRService``, ``SpeechSynthesisService``) and the standard
``grpc.health.v1`` service (from ``grpcio-health-checking``; ``riva.client.health`` must not
be imported alongside it, both register the same proto names).

Threading: every recognition and synthesis stream runs its RPC on its own worker thread,
and **its callbacks are invoked on that worker thread**, never on the caller's; wrap them
(e.g. with ``reactor.callFromThread``) before touching reactor state, and do not let them
wait for the thread that will call ``close()``/``cancel()`` (closing waits for a callback
already running to return). ``push_audio`` is
safe to call from any thread (e.g. the media clock thread) and never blocks on the
network: audio waits in a bounded queue, and when the queue is full the oldest chunk is
dropped and counted in :attr:`RecognitionStream.dropped_chunks`. After ``close()`` /
``cancel()`` returns, no callback of that stream runs any more.

Errors reach ``on_error`` as :class:`SpeechError`, whose ``retryable`` says whether the
same request may succeed if retried (possibly elsewhere): gRPC ``UNAVAILABLE``,
``DEADLINE_EXCEEDED``, ``RESOURCE_EXHAUSTED`` and ``ABORTED`` are retryable.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Callable

import grpc
import riva.client
from grpc_health.v1 import health_pb2, health_pb2_grpc
from riva.client.proto import riva_asr_pb2, riva_tts_pb2

from agent.speech.api import RecognitionOptions, SpeechConnection

log = logging.getLogger("openclaw.speech")

RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)

DEFAULT_QUEUE_CHUNKS = 250  # 5 s of 20 ms frames
MAX_COALESCED_BYTES = 32_000  # one request carries at most ~1 s of 16 kHz pcm16
JOIN_TIMEOUT_S = 5.0
#: ``speech_contexts`` boost of phrase hints (Riva's word boosting takes roughly 0..100)
PHRASE_BOOST = 20.0


class SpeechError(Exception):
    """A speech request failed; ``retryable`` says whether trying again may succeed."""

    def __init__(self, message: str, *, retryable: bool, code: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.code = code

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, what: str) -> SpeechError:
        status = error.code() if isinstance(error, grpc.Call) else None
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        name = status.name if status is not None else None
        return cls(
            f"{what} failed: {name or 'error'}: {details}",
            retryable=status in RETRYABLE_CODES,
            code=name,
        )


class _CallbackGate:
    """Runs callbacks unless closed; closing waits for a callback in progress to return."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, fn: Callable[..., None], *args: object) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                fn(*args)
            except Exception:
                log.exception("speech callback %r raised", fn)


class RecognitionStream:
    """One ``StreamingRecognize`` RPC; audio in with :meth:`push_audio`, results via callbacks."""

    def __init__(
        self,
        asr: riva.client.ASRService,
        streaming_config: riva_asr_pb2.StreamingRecognitionConfig,
        *,
        on_interim: Callable[[str], None],
        on_final: Callable[[str, float], None],
        on_error: Callable[[Exception], None],
        max_queue_chunks: int = DEFAULT_QUEUE_CHUNKS,
        on_final_marks: Callable[[float | None, float], None] | None = None,
        extra_metadata: tuple[tuple[str, str], ...] = (),
        on_alternatives: Callable[[tuple[str, ...]], None] | None = None,
    ) -> None:
        self._asr = asr
        self._extra_metadata = extra_metadata
        self._on_final_marks = on_final_marks
        self._on_alternatives = on_alternatives
        self._config = streaming_config
        self._on_interim = on_interim
        self._on_final = on_final
        self._on_error = on_error
        self._queue: deque[bytes] = deque()
        self._max_queue_chunks = max_queue_chunks
        self._cond = threading.Condition()
        self._input_ended = False
        self._gate = _CallbackGate()
        self._call: grpc.Call | None = None
        self._call_lock = threading.Lock()
        self._done = threading.Event()
        self.dropped_chunks = 0
        self._thread = threading.Thread(target=self._run, name="speech-recognition", daemon=True)
        self._thread.start()

    def push_audio(self, pcm16: bytes, level_dbfs: float | None = None) -> None:
        """Queue audio for the server. Thread-safe; never waits for the network.

        *level_dbfs* (the chunk's level, for streams that track voicing) is not needed here."""
        if not pcm16:
            return
        with self._cond:
            if self._input_ended:
                return
            if len(self._queue) >= self._max_queue_chunks:
                self._queue.popleft()
                self.dropped_chunks += 1
            self._queue.append(pcm16)
            self._cond.notify()

    def end_input(self) -> None:
        """Half-close: send what is queued, then end the request stream. Finals still arrive."""
        with self._cond:
            self._input_ended = True
            self._cond.notify()

    def close(self) -> None:
        """Cancel the RPC and stop the worker; no callback runs after this returns."""
        self._gate.close()
        self.end_input()
        with self._call_lock:
            call = self._call
        if call is not None:
            call.cancel()
        if threading.current_thread() is not self._thread:
            self._thread.join(JOIN_TIMEOUT_S)

    def wait_done(self, timeout_s: float) -> bool:
        """Wait until the RPC has ended (server finished, error or close); True if it has."""
        return self._done.wait(timeout_s)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _requests(self) -> Iterator[riva_asr_pb2.StreamingRecognizeRequest]:
        yield riva_asr_pb2.StreamingRecognizeRequest(streaming_config=self._config)
        while True:
            with self._cond:
                while not self._queue and not self._input_ended:
                    self._cond.wait()
                if not self._queue:
                    return
                parts = [self._queue.popleft()]
                size = len(parts[0])
                while self._queue and size + len(self._queue[0]) <= MAX_COALESCED_BYTES:
                    size += len(self._queue[0])
                    parts.append(self._queue.popleft())
            yield riva_asr_pb2.StreamingRecognizeRequest(audio_content=b"".join(parts))

    def _run(self) -> None:
        try:
            metadata = list(self._asr.auth.get_auth_metadata()) + list(self._extra_metadata)
            call = self._asr.stub.StreamingRecognize(self._requests(), metadata=metadata)
            with self._call_lock:
                self._call = call
            if self._gate.closed:
                call.cancel()
            for response in call:
                self._dispatch(response)
        except grpc.RpcError as exc:
            if not self._gate.closed:
                self._gate.run(self._on_error, SpeechError.from_rpc_error(exc, "streaming recognition"))
        except Exception as exc:  # a bug or a broken channel; report, do not kill the thread silently
            self._gate.run(self._on_error, SpeechError(f"streaming recognition failed: {exc!r}", retryable=False))
        finally:
            # Release gRPC's request thread if it is still waiting for audio.
            with self._cond:
                self._input_ended = True
                self._queue.clear()
                self._cond.notify_all()
            self._done.set()

    def _dispatch(self, response: riva_asr_pb2.StreamingRecognizeResponse) -> None:
        interim_parts: list[str] = []
        interim_others: tuple[str, ...] = ()
        for result in response.results:
            if not result.alternatives:
                continue
            alternative = result.alternatives[0]
            text = alternative.transcript.strip()
            if result.is_final:
                if text:
                    if self._on_final_marks is not None:
                        words = alternative.words
                        end_s = max(w.end_time for w in words) / 1000.0 if words else None
                        self._gate.run(self._on_final_marks, end_s, float(result.audio_processed))
                    if self._on_alternatives is not None:
                        self._gate.run(self._on_alternatives, _other_readings(result))
                    self._gate.run(self._on_final, text, float(alternative.confidence))
            elif text:
                interim_parts.append(text)
                interim_others = _other_readings(result)
        if interim_parts:
            if self._on_alternatives is not None:
                # Other readings of one interim result; none for words joined from several.
                self._gate.run(self._on_alternatives, interim_others if len(interim_parts) == 1 else ())
            self._gate.run(self._on_interim, " ".join(interim_parts))


def _other_readings(result: riva_asr_pb2.StreamingRecognitionResult) -> tuple[str, ...]:
    """A result's alternatives after its first, as words (empty ones left out)."""
    return tuple(t for t in (a.transcript.strip() for a in result.alternatives[1:]) if t)


class SynthesisStream:
    """One ``SynthesizeOnline`` RPC; audio arrives through ``on_audio`` until ``on_done``."""

    def __init__(
        self,
        tts: riva.client.SpeechSynthesisService,
        text: str,
        *,
        sample_rate_hz: int,
        voice: str | None,
        language_code: str,
        on_audio: Callable[[bytes], None],
        on_done: Callable[[], None],
        on_error: Callable[[Exception], None],
        extra_metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._tts = tts
        self._extra_metadata = extra_metadata
        self._text = text
        self._sample_rate_hz = sample_rate_hz
        self._voice = voice
        self._language_code = language_code
        self._on_audio = on_audio
        self._on_done = on_done
        self._on_error = on_error
        self._gate = _CallbackGate()
        self._call: grpc.Call | None = None
        self._call_lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="speech-synthesis", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Stop the synthesis; no callback runs after this returns."""
        self._gate.close()
        with self._call_lock:
            call = self._call
        if call is not None:
            call.cancel()

    def wait_done(self, timeout_s: float) -> bool:
        """Wait until the RPC has ended; True if it has."""
        return self._done.wait(timeout_s)

    def _run(self) -> None:
        try:
            if self._gate.closed:
                return
            if self._extra_metadata:
                # riva's synthesize_online sends only the client's own metadata: the same request by hand
                request = riva_tts_pb2.SynthesizeSpeechRequest(
                    text=self._text, language_code=self._language_code,
                    encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hz=self._sample_rate_hz)
                if self._voice is not None:
                    request.voice_name = self._voice
                metadata = list(self._tts.auth.get_auth_metadata()) + list(self._extra_metadata)
                call = self._tts.stub.SynthesizeOnline(iter([request]), metadata=metadata)
            else:
                call = self._tts.synthesize_online(
                    self._text,
                    voice_name=self._voice,
                    language_code=self._language_code,
                    encoding=riva.client.AudioEncoding.LINEAR_PCM,
                    sample_rate_hz=self._sample_rate_hz,
                )
            with self._call_lock:
                self._call = call
            if self._gate.closed:
                call.cancel()
            for response in call:
                if response.audio:
                    self._gate.run(self._on_audio, response.audio)
            self._gate.run(self._on_done)
        except grpc.RpcError as exc:
            if not self._gate.closed:
                self._gate.run(self._on_error, SpeechError.from_rpc_error(exc, "streaming synthesis"))
        except Exception as exc:
            self._gate.run(self._on_error, SpeechError(f"streaming synthesis failed: {exc!r}", retryable=False))
        finally:
            self._done.set()


#: request metadata naming the call a stream serves (the embedded server logs it per stream)
CALL_ID_METADATA = "x-openclaw-call-id"


def call_metadata(call_id: str) -> tuple[tuple[str, str], ...]:
    """The per-stream metadata of *call_id* (none for "")."""
    return ((CALL_ID_METADATA, call_id),) if call_id else ()


def open_channel(uri: str, connection: SpeechConnection | None) -> grpc.Channel:
    """A gRPC channel to *uri*: TLS (root CA, client certificate) when *connection* asks for it.

    The channel carries no metadata: every RPC passes ``connection.metadata`` itself (gRPC
    refuses call credentials on a plaintext channel, and a TLS one would send them twice).
    """
    c = connection or SpeechConnection()
    return riva.client.auth.create_channel(c.root_ca or None, c.client_cert or None, c.client_key or None,
                                           c.secure, uri)


def rpc_error_text(error: grpc.RpcError) -> str:
    """``CODE: details`` of a failed RPC (``UNAUTHENTICATED: missing or wrong authorization``)."""
    if not isinstance(error, grpc.Call):
        return type(error).__name__
    code = error.code()
    details = (error.details() or "").strip()
    name = code.name if code is not None else "error"
    return f"{name}: {details[:200]}" if details else name


class SpeechClient:
    """Client for one Riva-compatible speech endpoint (``uri`` is ``host:port``).

    *connection* gives TLS and the metadata (API key, function id) sent with every RPC.
    """

    def __init__(self, uri: str, *, use_ssl: bool = False, language_code: str = "en-US",
                 connection: SpeechConnection | None = None) -> None:
        self.uri = uri
        self.language_code = language_code
        connection = connection or SpeechConnection(use_ssl=use_ssl)
        self.connection = connection
        self._auth = riva.client.Auth(uri=uri, use_ssl=connection.secure,
                                      ssl_root_cert=connection.root_ca or None,
                                      ssl_client_cert=connection.client_cert or None,
                                      ssl_client_key=connection.client_key or None)
        # Sent by hand with every RPC (riva's services and this module pass get_auth_metadata()).
        self._auth.metadata = list(connection.metadata)
        self._asr = riva.client.ASRService(self._auth)
        self._tts = riva.client.SpeechSynthesisService(self._auth)
        self._health = health_pb2_grpc.HealthStub(self._auth.channel)
        self._streams: weakref.WeakSet[RecognitionStream | SynthesisStream] = weakref.WeakSet()
        self._streams_lock = threading.Lock()

    def _track(self, stream: RecognitionStream | SynthesisStream) -> None:
        with self._streams_lock:
            self._streams.add(stream)

    def check_health(self, timeout_s: float = 1.0) -> bool:
        """True if the server answers the overall ``grpc.health.v1`` check with SERVING."""
        try:
            response = self._health.Check(
                health_pb2.HealthCheckRequest(service=""),
                timeout=timeout_s,
                metadata=self._auth.get_auth_metadata(),
            )
        except grpc.RpcError:
            return False
        return bool(response.status == health_pb2.HealthCheckResponse.SERVING)

    def wait_ready(self, timeout_s: float) -> None:
        """Poll health until SERVING; raise ``TimeoutError`` after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"speech server {self.uri} not ready after {timeout_s:.1f} s")
            if self.check_health(timeout_s=min(remaining, 1.0)):
                return
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def open_recognition(
        self,
        options: RecognitionOptions,
        *,
        on_interim: Callable[[str], None],
        on_final: Callable[[str, float], None],
        on_error: Callable[[Exception], None],
        on_final_marks: Callable[[float | None, float], None] | None = None,
        on_alternatives: Callable[[tuple[str, ...]], None] | None = None,
    ) -> RecognitionStream:
        """Start a streaming recognition of pcm16 mono audio described by *options*.

        ``on_final_marks(last_word_end_s, audio_processed_s)``, when given, runs right
        before ``on_final`` of the same result (word time offsets are then requested); it
        tells where in the stream a final ends. ``on_alternatives(readings)``, when given, runs
        right before each ``on_interim`` and ``on_final`` with the result's other readings
        (``options.max_alternatives``; often none). Callbacks run on the stream's worker thread.
        """
        config = riva_asr_pb2.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM,
            sample_rate_hertz=options.sample_rate_hz,
            language_code=options.language_code or self.language_code,
            model=options.model,
            max_alternatives=max(1, options.max_alternatives),
            audio_channel_count=1,
            enable_word_time_offsets=on_final_marks is not None,
            enable_automatic_punctuation=options.punctuation,
        )
        if options.stop_history_ms is not None:
            config.endpointing_config.stop_history = options.stop_history_ms
        if options.phrases:
            config.speech_contexts.add(phrases=list(options.phrases), boost=PHRASE_BOOST)
        streaming_config = riva_asr_pb2.StreamingRecognitionConfig(config=config,
                                                                   interim_results=options.interim_results)
        stream = RecognitionStream(
            self._asr, streaming_config, on_interim=on_interim, on_final=on_final, on_error=on_error,
            on_final_marks=on_final_marks, extra_metadata=call_metadata(options.call_id),
            on_alternatives=on_alternatives,
        )
        self._track(stream)
        return stream

    def synthesize(self, text: str, *, sample_rate_hz: int, voice: str | None = None, timeout_s: float = 10.0,
                   language_code: str | None = None) -> bytes:
        """Synthesize ``text`` to pcm16 mono at ``sample_rate_hz`` (blocking); raises :class:`SpeechError`."""
        future = self._tts.synthesize(
            text,
            voice_name=voice,
            language_code=language_code or self.language_code,
            encoding=riva.client.AudioEncoding.LINEAR_PCM,
            sample_rate_hz=sample_rate_hz,
            future=True,
        )
        try:
            return bytes(future.result(timeout=timeout_s).audio)
        except grpc.FutureTimeoutError as exc:
            future.cancel()
            raise SpeechError(f"synthesis timed out after {timeout_s} s", retryable=True, code="DEADLINE_EXCEEDED") from exc
        except grpc.RpcError as exc:
            raise SpeechError.from_rpc_error(exc, "synthesis") from exc

    def synthesize_stream(
        self,
        text: str,
        *,
        sample_rate_hz: int,
        on_audio: Callable[[bytes], None],
        on_done: Callable[[], None],
        on_error: Callable[[Exception], None],
        voice: str | None = None,
        language_code: str | None = None,
        call_id: str = "",
    ) -> SynthesisStream:
        """Start ``SynthesizeOnline``; pcm16 chunks go to ``on_audio`` on the worker thread.
        *call_id* goes with the request as ``x-openclaw-call-id`` metadata."""
        synthesis = SynthesisStream(
            self._tts,
            text,
            sample_rate_hz=sample_rate_hz,
            voice=voice,
            language_code=language_code or self.language_code,
            on_audio=on_audio,
            on_done=on_done,
            on_error=on_error,
            extra_metadata=call_metadata(call_id),
        )
        self._track(synthesis)
        return synthesis

    def close(self) -> None:
        """Close every stream opened by this client (no callbacks after this returns), then the channel."""
        with self._streams_lock:
            streams = list(self._streams)
        for stream in streams:
            if isinstance(stream, RecognitionStream):
                stream.close()
            else:
                stream.cancel()
        self._auth.channel.close()

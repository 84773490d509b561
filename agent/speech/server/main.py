"""Embedded speech server: NVIDIA Riva's gRPC speech API backed by pocketsphinx and flite.

The agent talks to it exactly as to a real Riva deployment (same protos, same ``riva.client``
calls, same ``grpc.health.v1`` check). This module starts and stops the server; recognition
is in :mod:`~agent.speech.server.asr` (engines in :mod:`~agent.speech.server.workers`, the
core in :mod:`~agent.speech.server.recognizer`), synthesis in :mod:`~agent.speech.server.tts`.
What the services accept and how they behave: docs/speech.md.

Run standalone with ``python -m agent.speech.server --listen 127.0.0.1:50051``; it prints
``speech server listening on HOST:PORT`` and stops cleanly on SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from riva.client.proto import riva_asr_pb2_grpc, riva_tts_pb2_grpc

from agent.speech.server import flite
from agent.speech.server.security import TokenInterceptor, server_credentials
# Re-exported: the server's parts are imported from here by tests, benches and tools.
from agent.speech.server.asr import (  # noqa: F401
    ASR_MODEL_NAME,
    ASR_SERVICE_NAME,
    MAX_HINT_PHRASES,
    MAX_INPUT_RATE_HZ,
    MIN_INPUT_RATE_HZ,
    AudioClock,
    InputAudioConverter,
    RecognitionEngine,
    RecognitionSession,
    RecognitionSettings,
    RivaAsrServicer,
    parse_recognition_config,
)
from agent.speech.server.decoders import (  # noqa: F401
    BACKGROUND_WORDS,
    DEFAULT_OPEN_SPEECH,
    OPEN_SPEECH_MODES,
    DecoderPool,
    HintModels,
)
from agent.speech.server.endpointing import (  # noqa: F401
    END_OF_SPEECH,
    END_OF_UTTERANCE_FIRST_PASS,
    FRAME_MS,
    START_OF_SPEECH,
    EndpointingParams,
    UtteranceEndpointer,
)
from agent.speech.server.recognizer import (  # noqa: F401
    DECODER_OPTIONS,
    FLUSH_AFTER_MS,
    FLUSH_MIN_VOICE_MS,
    FLUSH_PAD_MS,
    FRAME_BYTES,
    INTERIM_INTERVAL_MS,
    MAX_UTTERANCE_MS,
    MODEL_CMN,
    MODEL_RATE_HZ,
    PREROLL_PAD_MS,
    STEP_BYTES,
    STEP_MS,
    TELEPHONE_CMN,
    TELEPHONE_RATE_HZ,
    FinalHypothesis,
    InterimHypothesis,
    RecognitionEvent,
    UtteranceRecognizer,
    VoicedFrameClassifier,
    WordTiming,
    new_decoder,
)
from agent.speech.server.rpc import LANGUAGE_CODE, ConfigError, EngineUnavailable  # noqa: F401
from agent.speech.server.tts import (  # noqa: F401
    TTS_CHUNK_MS,
    TTS_DEFAULT_RATE_HZ,
    TTS_MAX_RATE_HZ,
    TTS_MIN_RATE_HZ,
    TTS_SERVICE_NAME,
    RivaTtsServicer,
    SynthesisSettings,
    parse_synthesis_request,
    resolve_voice,
    split_sentences,
    synthesize_chunks,
)
from agent.speech.server.workers import (  # noqa: F401
    LocalRecognitionEngine,
    LocalRecognitionSession,
    ProcessRecognitionEngine,
    RemoteRecognitionSession,
)

log = logging.getLogger("openclaw.speech_server")


def _split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"listen address must be HOST:PORT, got {listen!r}")
    return host, int(port)


class SpeechServer:
    """A running speech server; see :func:`start_speech_server`."""

    def __init__(
        self,
        server: grpc.Server,
        health_servicer: health.HealthServicer,
        engine: RecognitionEngine,
        host: str,
        port: int,
    ) -> None:
        self._server = server
        self._health = health_servicer
        self.engine = engine
        self.host = host
        self.port = port
        self._stop_lock = threading.Lock()
        self._stopped = False

    @property
    def address(self) -> str:
        """``HOST:PORT`` a client can dial (wildcard hosts become loopback)."""
        host = self.host
        if host in ("0.0.0.0", "", "*"):
            host = "127.0.0.1"
        elif host in ("[::]", "::"):
            host = "[::1]"
        return f"{host}:{self.port}"

    def stop(self, grace: float | None = None) -> None:
        """Stop serving: health turns NOT_SERVING, RPCs get ``grace`` seconds, workers exit."""
        with self._stop_lock:
            first = not self._stopped
            self._stopped = True
        if first:
            self._health.enter_graceful_shutdown()
        self._server.stop(grace).wait()
        if first:
            self.engine.close()

    def wait(self) -> None:
        """Block until the server has stopped."""
        self._server.wait_for_termination()


def default_decode_processes() -> int:
    """One decode worker per CPU, at most four."""
    return max(1, min(os.cpu_count() or 1, 4))


def start_speech_server(
    listen: str = "127.0.0.1:50051",
    max_workers: int = 32,
    *,
    decode_processes: int | None = None,
    prewarm_decoders: int = 2,
    max_idle_decoders: int = 8,
    general_alongside_hints: bool = False,
    credentials: grpc.ServerCredentials | None = None,
    auth_token: str | None = None,
    open_speech: str | None = None,
    asr_model: str = ASR_MODEL_NAME,
    tts_model_suffix: str = "",
) -> SpeechServer:
    """Start decode workers, load the default voice and serve on ``listen`` (port 0 = any free port).

    ``max_workers`` bounds concurrent RPCs: each open recognition or synthesis stream holds
    one gRPC thread. ``decode_processes`` worker processes decode speech (default: one per
    CPU, at most 4); 0 decodes in the gRPC threads instead. Each decoding place pre-builds
    ``prewarm_decoders`` decoders and keeps up to ``max_idle_decoders``. With
    *open_speech* how words that are not the phrase hints are heard (``decoders.OPEN_SPEECH_MODES``):
    ``whisper`` (the default) transcribes an utterance with Whisper tiny.en whenever the hint
    decoder's words do not read as the hints, ``general`` (also ``general_alongside_hints``)
    decodes a hinted stream beside the general pocketsphinx model too (about 1.7 times the
    general model's CPU per stream), ``hints`` keeps the hint decoder's words (docs/speech.md).
    *credentials* serve TLS instead of plaintext
    (:func:`agent.speech.server.security.server_credentials`); *auth_token* makes every RPC
    need ``authorization: Bearer <token>``. *asr_model* / *tts_model_suffix*: the model names it
    reports and accepts (``asr:<asr_model>``, ``tts:flite-<voice><suffix>`` as versions), so
    servers standing for regions can serve different versions. Raises
    ``RuntimeError`` if the address cannot be bound.
    """
    host, _ = _split_listen(listen)
    if max_workers < 1:
        raise ValueError(f"max_workers must be at least 1, got {max_workers}")
    mode = open_speech or ("general" if general_alongside_hints else DEFAULT_OPEN_SPEECH)
    if mode not in OPEN_SPEECH_MODES:
        raise ValueError(f"open_speech must be one of {', '.join(OPEN_SPEECH_MODES)}, got {mode!r}")
    processes = default_decode_processes() if decode_processes is None else decode_processes
    if processes < 0:
        raise ValueError(f"decode_processes must be 0 or more, got {processes}")
    engine: RecognitionEngine
    if processes == 0:
        pool = DecoderPool(max_idle=max_idle_decoders)
        pool.prewarm(prewarm_decoders)
        engine = LocalRecognitionEngine(pool, open_speech=mode)
    else:
        engine = ProcessRecognitionEngine(
            processes, prewarm_per_process=prewarm_decoders, max_idle_per_process=max_idle_decoders,
            open_speech=mode,
        )
    try:
        flite.load_voice(flite.DEFAULT_VOICE)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="speech-rpc"),
            options=[("grpc.so_reuseport", 0)],
            interceptors=[TokenInterceptor(auth_token)] if auth_token else None,
        )
        riva_asr_pb2_grpc.add_RivaSpeechRecognitionServicer_to_server(RivaAsrServicer(engine, asr_model), server)
        riva_tts_pb2_grpc.add_RivaSpeechSynthesisServicer_to_server(RivaTtsServicer(tts_model_suffix), server)
        health_servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        try:
            bound = (server.add_secure_port(listen, credentials) if credentials is not None
                     else server.add_insecure_port(listen))
        except RuntimeError as exc:
            raise RuntimeError(f"cannot listen on {listen}: {exc}") from exc
        if not bound:
            raise RuntimeError(f"cannot listen on {listen}")
        for name in ("", ASR_SERVICE_NAME, TTS_SERVICE_NAME):
            health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        server.start()
    except BaseException:
        engine.close()
        raise
    return SpeechServer(server, health_servicer, engine, host, bound)


def run(listen: str, max_workers: int = 32, decode_processes: int | None = None,
        general_alongside_hints: bool = False, credentials: grpc.ServerCredentials | None = None,
        auth_token: str | None = None, open_speech: str | None = None, asr_model: str = ASR_MODEL_NAME,
        tts_model_suffix: str = "") -> int:
    """Serve on ``listen`` until SIGTERM or SIGINT; print one ``listening`` line; return 0."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    # Started by `openclaw-voice serve`: exit with the parent even if it was killed outright.
    parent = int(os.environ.get("OPENCLAW_PARENT_PID", "0") or 0)
    try:
        server = start_speech_server(listen, max_workers, decode_processes=decode_processes,
                                     general_alongside_hints=general_alongside_hints,
                                     credentials=credentials, auth_token=auth_token, open_speech=open_speech,
                                     asr_model=asr_model, tts_model_suffix=tts_model_suffix)
        extras = [word for word, on in (("TLS", credentials is not None), ("token required", bool(auth_token))) if on]
        if asr_model != ASR_MODEL_NAME or tts_model_suffix:
            extras.append(f"asr:{asr_model}, tts:flite-*{tts_model_suffix}")
        print(f"speech server listening on {server.address}" + (f" ({', '.join(extras)})" if extras else ""),
              flush=True)
        try:
            while not stop.wait(0.5):
                if parent and os.getppid() != parent:
                    print("parent process gone; stopping", flush=True)
                    break
        finally:
            server.stop(grace=1.0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m agent.speech.server [--listen HOST:PORT] [--max-workers N] [--decode-processes N]
    [--open-speech whisper|general|hints]``."""
    parser = argparse.ArgumentParser(
        prog="python -m agent.speech.server", description="Riva-compatible speech server (pocketsphinx + flite)."
    )
    parser.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT to listen on (port 0 = any)")
    parser.add_argument("--max-workers", type=int, default=32, help="concurrent RPC limit (threads)")
    parser.add_argument(
        "--decode-processes", type=int, default=None, help="decode worker processes (default: CPUs, max 4; 0 = in-process)"
    )
    parser.add_argument(
        "--general-alongside-hints", action="store_true",
        help="the same as --open-speech general",
    )
    parser.add_argument(
        "--open-speech", choices=OPEN_SPEECH_MODES, default=None,
        help="how words that are not the phrase hints are heard: whisper (default: Whisper tiny.en), "
             "general (the general pocketsphinx model alongside) or hints (the hint decoder alone)",
    )
    parser.add_argument("--tls-cert", help="serve TLS with this PEM certificate (chain)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-client-ca", help="require client certificates signed by this PEM CA (mutual TLS)")
    parser.add_argument("--auth-token-env", metavar="NAME",
                        help="require 'authorization: Bearer <token>' on every RPC, the token read from "
                             "environment variable NAME")
    parser.add_argument("--auth-token-file", metavar="FILE", help="... or from FILE")
    parser.add_argument("--asr-model", default=ASR_MODEL_NAME, metavar="NAME",
                        help=f"the recognition model name reported and accepted (default {ASR_MODEL_NAME}; "
                             "e.g. pocketsphinx-en-US-2 to stand for another version)")
    parser.add_argument("--tts-model-suffix", default="", metavar="SUFFIX",
                        help="appended to every synthesis model name flite-<voice> (e.g. -2)")
    args = parser.parse_args(argv)
    if not args.asr_model.strip() or any(ch.isspace() for ch in args.asr_model):
        parser.error(f"--asr-model must be a name without spaces, got {args.asr_model!r}")
    if any(ch.isspace() for ch in args.tts_model_suffix):
        parser.error(f"--tts-model-suffix must have no spaces, got {args.tts_model_suffix!r}")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_client_ca and not args.tls_cert):
        parser.error("--tls-cert and --tls-key go together (and --tls-client-ca needs them)")
    credentials = None
    if args.tls_cert:
        try:
            credentials = server_credentials(args.tls_cert, args.tls_key, args.tls_client_ca)
        except OSError as exc:
            parser.error(f"cannot read TLS files: {exc}")
    token = None
    if args.auth_token_env:
        token = os.environ.get(args.auth_token_env, "").strip()
        if not token:
            parser.error(f"--auth-token-env: environment variable {args.auth_token_env} is not set")
    elif args.auth_token_file:
        try:
            with open(args.auth_token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as exc:
            parser.error(f"--auth-token-file: {exc}")
        if not token:
            parser.error(f"--auth-token-file: {args.auth_token_file} is empty")
    return run(args.listen, args.max_workers, args.decode_processes, args.general_alongside_hints,
               credentials=credentials, auth_token=token, open_speech=args.open_speech, asr_model=args.asr_model,
               tts_model_suffix=args.tts_model_suffix)

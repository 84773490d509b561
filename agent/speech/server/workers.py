"""Where decoding runs: in the calling (gRPC) thread, or in decode worker processes.

pocketsphinx holds the GIL while it decodes, so by default streams are decoded in spawned
worker processes (:class:`ProcessRecognitionEngine`); each request is one pipe round trip.
:class:`LocalRecognitionEngine` decodes in the gRPC threads instead.
"""
from __future__ import annotations

import itertools
import logging
import multiprocessing
import multiprocessing.context
import os
import queue
import signal
import threading
from multiprocessing.connection import Connection
from typing import cast

from agent.speech.server.asr import InputAudioConverter, RecognitionSettings
from agent.speech.server.biasing import BiasedDecoder
from agent.speech.server.decoders import DecoderPool, HintModels
from agent.speech.server.open_speech import OpenSpeechDecoder
from agent.speech.server.recognizer import (
    MODEL_CMN,
    TELEPHONE_CMN,
    TELEPHONE_RATE_HZ,
    RecognitionEvent,
    UtteranceDecoder,
    UtteranceRecognizer,
)
from agent.speech.server.rpc import EngineUnavailable

log = logging.getLogger("openclaw.speech_server")


class LocalRecognitionSession:
    """Converts and decodes in the calling thread, with a decoder borrowed from ``pool``."""

    def __init__(self, settings: RecognitionSettings, pool: DecoderPool, hints: HintModels | None = None) -> None:
        self._hint_pool = hints.pool_for(settings.phrases) if hints is not None and settings.phrases else None
        self._pool = pool
        self._converter = InputAudioConverter(settings.encoding, settings.sample_rate_hz)
        self._hint_decoder = self._hint_pool.acquire() if self._hint_pool is not None else None
        mode = hints.open_speech if hints is not None else "hints"
        paired = self._hint_pool is not None and self._hint_pool.judge is not None and mode == "general"
        # A hinted stream needs the general model's decoder only when it is decoded alongside.
        self._decoder = self._pool.acquire() if self._hint_decoder is None or paired else None
        cmninit = TELEPHONE_CMN if settings.sample_rate_hz <= TELEPHONE_RATE_HZ else MODEL_CMN
        for decoder in (self._decoder, self._hint_decoder):
            if decoder is not None:
                # A new caller: forget the previous stream's noise estimate and channel (cepstral
                # mean); rebuilding the feature extraction is cheap.
                decoder.config["cmninit"] = cmninit
                decoder.reinit_feat()
        recognised: UtteranceDecoder
        if self._decoder is None:
            assert self._hint_decoder is not None
            recognised = self._hint_decoder
        elif paired:
            assert self._hint_decoder is not None and self._hint_pool is not None and self._hint_pool.judge is not None
            recognised = BiasedDecoder(self._hint_decoder, self._decoder, self._hint_pool.judge)
        else:
            recognised = self._decoder
        if mode == "whisper":
            assert hints is not None
            judge = self._hint_pool.judge if self._hint_pool is not None and self._hint_decoder is not None else None
            recognised = OpenSpeechDecoder(recognised, hints.transcriber(), judge, settings.max_alternatives,
                                           punctuate=settings.punctuation)
        self._recognizer = UtteranceRecognizer(
            recognised,
            settings.endpointing,
            interim_results=settings.interim_results,
            word_time_offsets=settings.word_time_offsets,
        )
        self._closed = False

    def process(self, audio: bytes) -> list[RecognitionEvent]:
        return self._recognizer.process(self._converter.convert(audio))

    def finish(self) -> list[RecognitionEvent]:
        return self._recognizer.finish()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._recognizer.abort()
            if self._decoder is not None:
                self._pool.release(self._decoder)
            if self._hint_pool is not None and self._hint_decoder is not None:
                self._hint_pool.release(self._hint_decoder)


class LocalRecognitionEngine:
    """Decodes in the gRPC worker threads of this process (all streams share one GIL)."""

    def __init__(self, pool: DecoderPool, *, general_alongside: bool = False, open_speech: str | None = None) -> None:
        self.pool = pool
        self.hints = HintModels(general_alongside=general_alongside, open_speech=open_speech)

    def open(self, settings: RecognitionSettings) -> LocalRecognitionSession:
        return LocalRecognitionSession(settings, self.pool, self.hints)

    def close(self) -> None:
        pass


def _decode_worker_main(conn: Connection, prewarm: int, max_idle: int, open_speech: str = "hints") -> None:
    """Body of a decode worker process: serve session requests from ``conn`` until EOF.

    Requests are ``(op, session_id, arg)`` with op ``open`` (arg: RecognitionSettings),
    ``audio`` (arg: bytes), ``finish``, ``close`` or ``stop`` (exit); ``open``, ``audio`` and
    ``finish`` are answered with ``(session_id, ok, events_or_error_text)``.
    """
    # A group-wide SIGINT/SIGTERM is for the parent, which stops its workers after a graceful
    # gRPC shutdown; a worker also exits when the parent's end of the pipe closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pool = DecoderPool(max_idle=max_idle)
    pool.prewarm(prewarm)
    hints = HintModels(open_speech=open_speech)
    hints.prewarm()
    sessions: dict[int, LocalRecognitionSession] = {}
    try:
        conn.send(("ready", os.getpid()))
        while True:
            op, sid, arg = conn.recv()
            try:
                if op == "open":
                    sessions[sid] = LocalRecognitionSession(arg, pool, hints)
                    reply: object = []
                elif op == "audio":
                    reply = sessions[sid].process(arg)
                elif op == "finish":
                    reply = sessions[sid].finish()
                elif op == "close":
                    session = sessions.pop(sid, None)
                    if session is not None:
                        session.close()
                    continue
                elif op == "stop":
                    break
                else:
                    raise ValueError(f"unknown decode worker request {op!r}")
            except Exception as exc:  # reported to the stream, the worker keeps serving
                conn.send((sid, False, f"{type(exc).__name__}: {exc}"))
                continue
            conn.send((sid, True, reply))
    except (EOFError, OSError):
        pass


_WORKER_EXITED = object()


class _DecodeWorker:
    """Parent-side handle of one decode worker process."""

    def __init__(self, index: int, ctx: multiprocessing.context.SpawnContext, prewarm: int, max_idle: int,
                 open_speech: str = "hints") -> None:
        self.index = index
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_decode_worker_main,
            args=(child_conn, prewarm, max_idle, open_speech),
            name=f"speech-decode-{index}",
            daemon=True,
        )
        self.process.start()
        child_conn.close()
        self._conn = parent_conn
        self._send_lock = threading.Lock()
        self._waiters: dict[int, queue.SimpleQueue[object]] = {}
        self._waiters_lock = threading.Lock()
        self.sessions = 0
        self.alive = False

    def wait_ready(self, timeout_s: float) -> None:
        try:
            if not self._conn.poll(timeout_s):
                raise EngineUnavailable(f"decode worker {self.index} not ready after {timeout_s:.0f} s")
            message = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise EngineUnavailable(f"decode worker {self.index} exited during start-up") from exc
        if not (isinstance(message, tuple) and message[0] == "ready"):
            raise EngineUnavailable(f"decode worker {self.index} sent {message!r} instead of ready")
        self.alive = True
        threading.Thread(target=self._read_replies, name=f"speech-decode-{self.index}-reader", daemon=True).start()

    def register(self, sid: int) -> queue.SimpleQueue[object]:
        replies: queue.SimpleQueue[object] = queue.SimpleQueue()
        with self._waiters_lock:
            self._waiters[sid] = replies
        if not self.alive:
            replies.put(_WORKER_EXITED)
        return replies

    def unregister(self, sid: int) -> None:
        with self._waiters_lock:
            self._waiters.pop(sid, None)

    def send(self, message: tuple[str, int, object]) -> None:
        with self._send_lock:
            if not self.alive:
                raise EngineUnavailable(f"decode worker {self.index} has exited")
            try:
                self._conn.send(message)
            except (OSError, ValueError) as exc:
                self._mark_dead()
                raise EngineUnavailable(f"decode worker {self.index} has exited") from exc

    def _read_replies(self) -> None:
        while True:
            try:
                sid, ok, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._waiters_lock:
                replies = self._waiters.get(sid)
            if replies is not None:
                replies.put((ok, payload))
        self._mark_dead()

    def _mark_dead(self) -> None:
        if self.alive:
            log.warning("decode worker %d (pid %s) exited", self.index, self.process.pid)
        self.alive = False
        with self._waiters_lock:
            waiters = list(self._waiters.values())
        for replies in waiters:
            replies.put(_WORKER_EXITED)

    def stop(self, timeout_s: float) -> None:
        with self._send_lock:
            self.alive = False
            try:
                self._conn.send(("stop", 0, None))
            except (OSError, ValueError):
                pass
        self.process.join(timeout_s)
        self._conn.close()
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout_s)


class RemoteRecognitionSession:
    """A session whose decoder lives in a decode worker process; each call is one round trip."""

    def __init__(
        self,
        engine: ProcessRecognitionEngine,
        worker: _DecodeWorker,
        sid: int,
        settings: RecognitionSettings,
        reply_timeout_s: float,
    ) -> None:
        self._engine = engine
        self._worker = worker
        self._sid = sid
        self._timeout_s = reply_timeout_s
        self._replies = worker.register(sid)
        self._closed = False
        self._call("open", settings)

    def _call(self, op: str, arg: object = None) -> list[RecognitionEvent]:
        self._worker.send((op, self._sid, arg))
        try:
            reply = self._replies.get(timeout=self._timeout_s)
        except queue.Empty:
            raise EngineUnavailable(
                f"decode worker {self._worker.index} did not answer within {self._timeout_s:.0f} s"
            ) from None
        if reply is _WORKER_EXITED:
            raise EngineUnavailable(f"decode worker {self._worker.index} exited")
        ok, payload = cast("tuple[bool, object]", reply)
        if not ok:
            raise RuntimeError(f"decode worker error: {payload}")
        return cast("list[RecognitionEvent]", payload)

    def process(self, audio: bytes) -> list[RecognitionEvent]:
        return self._call("audio", audio)

    def finish(self) -> list[RecognitionEvent]:
        return self._call("finish")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._worker.send(("close", self._sid, None))
        except EngineUnavailable:
            pass
        self._worker.unregister(self._sid)
        self._engine.session_closed(self._worker)


class ProcessRecognitionEngine:
    """Decodes in ``processes`` worker processes (spawned), so decoding is not bound by this
    process's GIL and does not delay gRPC I/O. A stream goes to the worker with the fewest
    open sessions; a worker that dies fails its streams with UNAVAILABLE and is replaced.
    """

    def __init__(
        self,
        processes: int,
        *,
        prewarm_per_process: int,
        max_idle_per_process: int,
        start_timeout_s: float = 120.0,
        reply_timeout_s: float = 30.0,
        general_alongside: bool = False,
        open_speech: str | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self._ctx = multiprocessing.get_context("spawn")
        self._prewarm = prewarm_per_process
        self._max_idle = max_idle_per_process
        self._open_speech = open_speech or ("general" if general_alongside else "hints")
        self._start_timeout_s = start_timeout_s
        self._reply_timeout_s = reply_timeout_s
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        self._respawning: set[int] = set()
        self._workers = [self._spawn(i) for i in range(processes)]
        try:
            for worker in self._workers:
                worker.wait_ready(start_timeout_s)
        except BaseException:
            for worker in self._workers:
                worker.stop(1.0)
            raise

    def _spawn(self, index: int) -> _DecodeWorker:
        return _DecodeWorker(index, self._ctx, self._prewarm, self._max_idle, self._open_speech)

    @property
    def worker_pids(self) -> list[int | None]:
        with self._lock:
            return [w.process.pid for w in self._workers]

    def open(self, settings: RecognitionSettings) -> RemoteRecognitionSession:
        with self._lock:
            if self._closed:
                raise EngineUnavailable("speech server is shutting down")
            for worker in self._workers:
                if not worker.alive and worker.index not in self._respawning:
                    self._respawning.add(worker.index)
                    threading.Thread(target=self._replace, args=(worker.index,), daemon=True).start()
            alive = [w for w in self._workers if w.alive]
            if not alive:
                raise EngineUnavailable("no decode worker is running")
            worker = min(alive, key=lambda w: w.sessions)
            worker.sessions += 1
            sid = next(self._ids)
        try:
            return RemoteRecognitionSession(self, worker, sid, settings, self._reply_timeout_s)
        except BaseException:
            worker.unregister(sid)
            self.session_closed(worker)
            raise

    def session_closed(self, worker: _DecodeWorker) -> None:
        with self._lock:
            worker.sessions -= 1

    def _replace(self, index: int) -> None:
        try:
            worker = self._spawn(index)
            worker.wait_ready(self._start_timeout_s)
        except Exception:
            log.exception("could not restart decode worker %d", index)
            with self._lock:
                self._respawning.discard(index)
            return
        with self._lock:
            self._respawning.discard(index)
            if self._closed:
                old = None
            else:
                old = self._workers[index]
                self._workers[index] = worker
        if old is None:
            worker.stop(1.0)
        else:
            old.stop(1.0)
            log.info("decode worker %d restarted (pid %s)", index, worker.process.pid)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._workers)
        for worker in workers:
            worker.stop(5.0)

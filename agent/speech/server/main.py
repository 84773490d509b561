"""Embedded speech server: NVIDIA Riva's gRPC speech API backed by pocketsphinx and flite.

The agent talks to this server exactly as it talks to a real Riva deployment (same
protos, same ``riva.client`` calls, same ``grpc.health.v1`` check), so the agent cannot
tell the two apart. Services:

``nvidia.riva.asr.RivaSpeechRecognition``
    ``StreamingRecognize``, ``Recognize``, ``GetRivaSpeechRecognitionConfig``.
``nvidia.riva.tts.RivaSpeechSynthesis``
    ``SynthesizeOnline``, ``Synthesize``, ``GetRivaSynthesisConfig``.
``grpc.health.v1.Health``
    SERVING for ``""`` and for both service names while the server runs.

Streaming recognition semantics (one stream carries a whole call, i.e. many utterances):

* The first request must carry ``streaming_config``, later ones only ``audio_content``;
  anything else aborts with ``INVALID_ARGUMENT``. Accepted input: ``LINEAR_PCM``
  (16-bit little-endian), ``MULAW`` or ``ALAW`` (``ENCODING_UNSPECIFIED`` is rejected),
  mono, ``language_code`` ``en-US``, ``sample_rate_hertz`` 8000..96000 (resampled to the
  model's 16 kHz), ``model`` empty or ``pocketsphinx-en-US``.
* Audio is decoded 10 ms at a time as it arrives (inside an utterance) and classified in
  20 ms frames for the endpointing. A frame is *voiced* when its level reaches -55 dBFS
  and pocketsphinx's WebRTC-style VAD says speech; the VAD adapts to steady line noise
  within ~100 ms, so hiss does not hold an utterance open.
* Endpointing follows Riva's ``EndpointingConfig`` with voiced/unvoiced frames standing in
  for the acoustic model's non-blank/blank tokens. An utterance starts when
  ``start_threshold`` of the last ``start_history`` ms are voiced (defaults 200 ms, 0.3);
  the decoder is fed from ``start_history`` + 200 ms before that point so onsets are not
  clipped. It ends when ``stop_threshold`` of the last ``stop_history`` ms are unvoiced
  (defaults **800 ms**, as in Riva, and 0.98): the final result then arrives
  ``stop_history`` ms of audio after the last voiced frame. When ``stop_history_eou`` is
  set (and shorter than ``stop_history``), Riva's two-pass end of utterance is emulated:
  after that much trailing silence an interim result with ``stability=1.0`` is sent once
  (re-armed when speech resumes). Unset, zero or negative fields take the defaults;
  thresholds above 1 are ``INVALID_ARGUMENT``. An utterance longer than 30 s is cut and
  finalised.
* With ``interim_results`` the hypothesis is checked every 20 ms of in-utterance audio and
  an interim result (``is_final=False``) is sent when it changed. ``stability`` is 0.1 plus
  0.8 times the fraction of words unchanged from the previous interim (so 0.1..0.9).
* The last word of a request is not held back by the decoder's look-ahead. pocketsphinx
  names a word only once the frames after it are in (the cepstra's delta window and the
  word's last states): on its own it said "check my about" until ~100 ms of audio after a
  kal16 voice's "balance" ended. So once the voice has dropped away for ``FLUSH_AFTER_MS``
  (30 ms, by the agent's energy rule: under -45 dBFS or 30 dB under the utterance's loudest
  10 ms) in an utterance that has had ``FLUSH_MIN_VOICE_MS`` (250 ms) of voice, the decoder
  is fed ``FLUSH_PAD_MS`` (40 ms) more of that quiet audio and the hypothesis checked:
  "balance" at 60 ms instead, and in the bench corpus the complete request 20-60 ms sooner
  for most kal16 turns. The padding stands in for the quiet that follows it: that much of
  it is not decoded, so after a real end the decoder has heard exactly the stream's audio,
  and a stop inside a sentence (a flush comes in most of them) is lengthened only by what
  the quiet did not make up for; word times leave the padding out. Without that, "... the
  downtown branch" came out "... downtown friend", and a stream replayed to another region
  from the silence before it (see :mod:`agent.speech.failover`) decoded other words than
  the original. Over the 769 utterances of 55 recorded bench calls the finals were the
  same but six ("are you open today" as "... to that" four times: the padding fell in the
  stop before the "t"; "um" as "mhm" twice); with the general model 14 of 50 flite
  sentences came out exact (13 without). 60 ms of padding, or a flush after less voice,
  changed more (an "okay" heard as "oh can" in the "k"); digital silence as padding made
  "mhm" "them"; a flush after 20 ms, before the agent's endpointer has its 30 ms of
  silence, let a stop inside "balance" complete the request (answered 110 ms before the
  caller's end in a bench run).
* ``speech_contexts`` (phrase hints): the phrases of every context with ``boost`` >= 0
  (at most 5,000 phrases) replace the general 130k-word language model for that stream
  by a trigram model of those phrases plus common request wording ("I would like to",
  "can you tell me", ...; see :mod:`agent.speech.server.phrase_lm`) and, as unigrams, the 1,000
  commonest words of the general model, with a dictionary of just those words. Words the pronunciation dictionary lacks are left out. For the few dozen
  phrases of a dialplan this is both more accurate and several times cheaper to decode,
  and the last word of a turn is recognised ~100 ms sooner. Without hints the general
  model decodes.
* Every stream starts from the same front-end state, whatever stream its pooled decoder
  decoded before: no noise estimate, and a cepstral mean that for audio of 8 kHz or less
  (G.711 telephone audio) is one measured on 8 kHz speech upsampled to 16 kHz
  (``TELEPHONE_CMN``), above that the model's own. Both then adapt to the stream's audio.
  Carried over from the previous stream instead, a call's first words were recognised with the
  previous caller's channel (and, for the first call after start-up, with the wideband mean:
  its "mm-hmm" was heard as "the", "them").
* Each utterance with a non-empty hypothesis yields one final result (``is_final=True``)
  with ``confidence`` (mean pocketsphinx word posterior, 0..1) and, when
  ``enable_word_time_offsets``, word times in ms from the start of the stream. Half-closing
  the stream finalises pending speech. Every result has ``channel_tag=1`` and
  ``audio_processed`` = seconds of input audio consumed so far; one alternative is returned.
* Decoding runs in decode worker processes (spawned at start-up; by default one per CPU,
  at most 4), not in the gRPC threads: pocketsphinx holds the GIL while it decodes, and
  with decoding in-process four simultaneously talking streams already delayed each
  other's results by 0.1-0.8 s. A stream is bound to the worker with the fewest open
  streams; each request is one pipe round trip. A worker that dies fails its streams with
  ``UNAVAILABLE`` and is replaced. Building a decoder takes ~0.4 s and ~95 MB, so each
  worker pre-builds two and keeps up to eight for reuse. ``decode_processes=0`` decodes in
  the gRPC threads instead.

pocketsphinx settings: ``fwdflat=False`` (the second pass made finals ~150 ms slower),
``bestpath=True`` (lattice best path: about 6 ms at ``end_utt`` even for 14 s utterances,
gives word posteriors for ``confidence`` and recognised the flite test set slightly
better than without), ``maxhmmpf=2000``/``maxwpf=10`` (halve the per-frame cost with no
loss on the test set).

Synthesis: ``voice_name`` may be a flite voice (``kal16``, ``kal``, ``rms``, ``awb``,
``slt``), empty, or any ``English-US...`` name (all map to ``kal16``); others are
``INVALID_ARGUMENT``, as are empty text, a language other than ``en-US``, an encoding
other than ``LINEAR_PCM``/``MULAW``/``ALAW`` and a rate outside 8000..48000 (0 means
16000). ``SynthesizeOnline`` splits the text into sentences, synthesises each with flite
and streams it in chunks of at most 100 ms, the first as soon as the first sentence is
ready.

Run standalone with ``python -m agent.speech.server --listen 127.0.0.1:50051``; it prints
``speech server listening on HOST:PORT`` and stops cleanly on SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import logging
import math
import multiprocessing
import multiprocessing.context
import os
import queue
import re
import signal
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Callable, NoReturn, Protocol, cast

import grpc
import pocketsphinx
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from riva.client.proto import riva_asr_pb2, riva_asr_pb2_grpc, riva_tts_pb2, riva_tts_pb2_grpc
from riva.client.proto.riva_audio_pb2 import AudioEncoding

from agent.speech.server import flite, phrase_lm
from media import convert as audio_util
from media.vad import EnergyVad, VadConfig

log = logging.getLogger("openclaw.speech_server")

ASR_SERVICE_NAME = "nvidia.riva.asr.RivaSpeechRecognition"
TTS_SERVICE_NAME = "nvidia.riva.tts.RivaSpeechSynthesis"
ASR_MODEL_NAME = "pocketsphinx-en-US"
LANGUAGE_CODE = "en-US"

MODEL_RATE_HZ = 16000
#: input at this rate or below is telephone audio (G.711), upsampled to MODEL_RATE_HZ
TELEPHONE_RATE_HZ = 8000
#: the cepstral mean (13 coefficients) a stream of telephone audio starts from: the mean, over
#: flite's five voices (kal16, kal, rms, awb, slt), of six everyday sentences each, at 8 kHz
#: upsampled to 16 kHz, as the decoder's live mean ended up after them. Started from it, a
#: stream recognised 18 of 30 first utterances (six requests, five voices) and 12 of 12
#: acknowledgements right with phrase hints, 11 and 5 with the general model; started from
#: the model's own mean (MODEL_CMN, a wideband one, 10 units lower in c0), 16 and 10, 7 and 6
TELEPHONE_CMN = "49.88,9.14,3.42,11.69,-0.20,2.15,3.05,1.13,-10.95,4.08,-2.32,6.21,-1.13"
#: the model's initial cepstral mean (pocketsphinx's default ``cmninit``), for wideband input
MODEL_CMN = pocketsphinx.Config()["cmninit"]
FRAME_MS = 20
FRAME_BYTES = MODEL_RATE_HZ * FRAME_MS // 1000 * 2
#: audio is decoded 10 ms at a time as it arrives (the endpointing works on 20 ms frames)
STEP_MS = 10
STEP_BYTES = MODEL_RATE_HZ * STEP_MS // 1000 * 2
PREROLL_PAD_MS = 200
INTERIM_INTERVAL_MS = 20
#: once the voice has dropped away for this long inside an utterance (the agent's energy rule:
#: under -45 dBFS or 30 dB under the utterance's loudest 10 ms) ...
FLUSH_AFTER_MS = 30
#: ... in an utterance with at least this much voice so far (a request's last word, not the start
#: of an acknowledgement or a short noise) ...
FLUSH_MIN_VOICE_MS = 250
#: ... the decoder is fed this much more of the current (quiet) 10 ms, repeated, and the
#: hypothesis checked: the feature pipeline's look-ahead and the last phone's states then
#: pass, and the last word shows up ~40 ms sooner (see the module doc)
FLUSH_PAD_MS = 40
MAX_UTTERANCE_MS = 30_000
MIN_INPUT_RATE_HZ = 8000
MAX_INPUT_RATE_HZ = 96000
MAX_HINT_PHRASES = 5000
#: everyday words a phrase-hint model also knows (see agent.speech.server.phrase_lm.build_arpa)
BACKGROUND_WORDS = 1000

TTS_CHUNK_MS = 100
TTS_DEFAULT_RATE_HZ = 16000
TTS_MIN_RATE_HZ = 8000
TTS_MAX_RATE_HZ = 48000

DECODER_OPTIONS: dict[str, object] = {
    "fwdflat": False,
    "bestpath": True,
    "maxhmmpf": 2000,
    "maxwpf": 10,
    "loglevel": "FATAL",
}


class ConfigError(ValueError):
    """A request's configuration is invalid; reported to the client as INVALID_ARGUMENT."""


# --------------------------------------------------------------------------------------
# Endpointing (sans-I/O)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointingParams:
    """Riva ``EndpointingConfig`` values after defaults are applied (ms and 0..1 ratios)."""

    start_history_ms: int = 200
    start_threshold: float = 0.3
    stop_history_ms: int = 800
    stop_threshold: float = 0.98
    stop_history_eou_ms: int = 0
    stop_threshold_eou: float = 0.98

    @classmethod
    def from_proto(cls, cfg: riva_asr_pb2.EndpointingConfig | None) -> EndpointingParams:
        """Apply defaults for absent, zero or negative fields; reject thresholds above 1."""
        default = cls()
        if cfg is None:
            return default

        def history(name: str, fallback: int) -> int:
            if cfg.HasField(name) and getattr(cfg, name) > 0:
                return int(getattr(cfg, name))
            return fallback

        def threshold(name: str, fallback: float) -> float:
            if not cfg.HasField(name):
                return fallback
            value = float(getattr(cfg, name))
            if value > 1.0:
                raise ConfigError(f"endpointing_config.{name} must be between 0.0 and 1.0, got {value}")
            return value if value > 0.0 else fallback

        params = cls(
            start_history_ms=history("start_history", default.start_history_ms),
            start_threshold=threshold("start_threshold", default.start_threshold),
            stop_history_ms=history("stop_history", default.stop_history_ms),
            stop_threshold=threshold("stop_threshold", default.stop_threshold),
            stop_history_eou_ms=history("stop_history_eou", default.stop_history_eou_ms),
            stop_threshold_eou=threshold("stop_threshold_eou", default.stop_threshold_eou),
        )
        return params


START_OF_SPEECH = "start"
END_OF_UTTERANCE_FIRST_PASS = "eou"
END_OF_SPEECH = "end"


def _frames_for(ms: int) -> int:
    return max(1, math.ceil(ms / FRAME_MS))


class UtteranceEndpointer:
    """Decides start and end of utterances from a sequence of voiced/unvoiced 20 ms frames.

    Pure: no audio, no clock. :meth:`push` returns ``START_OF_SPEECH``,
    ``END_OF_UTTERANCE_FIRST_PASS``, ``END_OF_SPEECH`` or ``None`` for each frame.
    """

    def __init__(self, params: EndpointingParams) -> None:
        self.params = params
        self._start_frames = _frames_for(params.start_history_ms)
        self._start_needed = max(1, math.ceil(params.start_threshold * self._start_frames - 1e-9))
        self._stop_frames = _frames_for(params.stop_history_ms)
        self._stop_needed = max(1, math.ceil(params.stop_threshold * self._stop_frames - 1e-9))
        eou_ms = params.stop_history_eou_ms
        self._eou_frames = _frames_for(eou_ms) if 0 < eou_ms < params.stop_history_ms else 0
        self._eou_needed = max(1, math.ceil(params.stop_threshold_eou * self._eou_frames - 1e-9))
        self._start_window: deque[bool] = deque(maxlen=self._start_frames)
        self._stop_window: deque[bool] = deque(maxlen=self._stop_frames)
        self._eou_fired = False
        self.in_speech = False
        self.speech_frames = 0

    @property
    def start_history_frames(self) -> int:
        return self._start_frames

    def push(self, voiced: bool) -> str | None:
        """Account one frame; return the endpoint event it causes, if any."""
        if not self.in_speech:
            self._start_window.append(voiced)
            if sum(self._start_window) >= self._start_needed:
                self.in_speech = True
                self.speech_frames = len(self._start_window)
                self._start_window.clear()
                self._stop_window.clear()
                self._eou_fired = False
                return START_OF_SPEECH
            return None
        self.speech_frames += 1
        self._stop_window.append(voiced)
        if voiced:
            self._eou_fired = False
        window = self._stop_window
        if len(window) >= self._stop_frames and len(window) - sum(window) >= self._stop_needed:
            self.reset()
            return END_OF_SPEECH
        if self._eou_frames and not self._eou_fired and len(window) >= self._eou_frames:
            recent = list(window)[-self._eou_frames :]
            if len(recent) - sum(recent) >= self._eou_needed:
                self._eou_fired = True
                return END_OF_UTTERANCE_FIRST_PASS
        return None

    def reset(self) -> None:
        """Forget the current utterance (used after a forced end)."""
        self.in_speech = False
        self.speech_frames = 0
        self._start_window.clear()
        self._stop_window.clear()
        self._eou_fired = False


class VoicedFrameClassifier:
    """Voiced/unvoiced decision for one 20 ms pcm16 frame at 16 kHz.

    A frame is voiced when its level reaches ``min_level_dbfs`` and pocketsphinx's
    WebRTC-style VAD (which adapts to steady noise within ~100 ms) says speech.
    """

    def __init__(self, *, vad_mode: int = pocketsphinx.Vad.LOOSE, min_level_dbfs: float = -55.0) -> None:
        self._vad = pocketsphinx.Vad(vad_mode, MODEL_RATE_HZ, FRAME_MS / 1000)
        if self._vad.frame_bytes != FRAME_BYTES:
            raise RuntimeError(f"VAD frame is {self._vad.frame_bytes} bytes, expected {FRAME_BYTES}")
        self.min_level_dbfs = min_level_dbfs

    def is_voiced(self, frame: bytes) -> bool:
        if audio_util.rms_dbfs(frame) < self.min_level_dbfs:
            return False
        return bool(self._vad.is_speech(frame))


# --------------------------------------------------------------------------------------
# Recognition core
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WordTiming:
    word: str
    start_ms: int
    end_ms: int
    confidence: float


@dataclass(frozen=True)
class InterimHypothesis:
    transcript: str
    stability: float


@dataclass(frozen=True)
class FinalHypothesis:
    transcript: str
    confidence: float
    words: tuple[WordTiming, ...] = field(default=())


RecognitionEvent = InterimHypothesis | FinalHypothesis


def new_decoder() -> pocketsphinx.Decoder:
    """Build a pocketsphinx decoder for the bundled en-US model (slow: ~0.4 s, ~95 MB)."""
    return pocketsphinx.Decoder(**DECODER_OPTIONS)


def _clean_word(word: str) -> str | None:
    if not word or word.startswith("<") or word.startswith("[") or word.startswith("++"):
        return None
    paren = word.find("(")
    return word[:paren] if paren > 0 else word


def _stability(previous: str, current: str) -> float:
    prev_words = previous.split()
    cur_words = current.split()
    if not cur_words:
        return 0.1
    common = 0
    for a, b in zip(prev_words, cur_words):
        if a != b:
            break
        common += 1
    return round(0.1 + 0.8 * common / len(cur_words), 3)


class UtteranceRecognizer:
    """Turns a 16 kHz pcm16 stream into interim and final hypotheses, utterance by utterance.

    Owns the endpointing and the decoder's utterance lifecycle; does no I/O. Feed audio of
    any length with :meth:`process`; call :meth:`finish` at end of input.
    """

    def __init__(
        self,
        decoder: pocketsphinx.Decoder,
        params: EndpointingParams,
        *,
        interim_results: bool,
        word_time_offsets: bool,
        classifier: VoicedFrameClassifier | None = None,
    ) -> None:
        self._decoder = decoder
        self._endpointer = UtteranceEndpointer(params)
        self._classifier = classifier or VoicedFrameClassifier()
        self._interim_results = interim_results
        self._word_time_offsets = word_time_offsets
        self._pending = bytearray()
        self._first_step: bytes | None = None
        preroll_frames = self._endpointer.start_history_frames + PREROLL_PAD_MS // FRAME_MS
        self._preroll: deque[bytes] = deque(maxlen=preroll_frames)
        self._frames_seen = 0
        self._utterance_start_frame = 0
        self._in_utterance = False
        self._frames_since_check = 0
        self._last_interim = ""
        self._interim_frames = _frames_for(INTERIM_INTERVAL_MS)
        self._max_frames = MAX_UTTERANCE_MS // FRAME_MS
        # When the voice drops away (10 ms resolution, the agent's rule), for the flush.
        self._tail = EnergyVad(VadConfig(), sample_rate_hz=MODEL_RATE_HZ)
        self._flushed_voice_end_ms = 0.0
        #: for each 10 ms frame the decoder was fed in this utterance, the utterance's 10 ms of
        #: audio it was (a flush's padding: the audio it repeats)
        self._audio_frame_of: list[int] = []
        #: 10 ms of the utterance's audio consumed (decoded or stood in for by padding)
        self._audio_frames = 0
        #: padding not yet made up for by skipping the quiet audio that followed it (ms)
        self._pad_debt_ms = 0
        self._utterance_voice_ms = 0.0
        self.flushes = 0

    @property
    def in_utterance(self) -> bool:
        return self._in_utterance

    def process(self, pcm16k: bytes) -> list[RecognitionEvent]:
        """Consume audio; return the interim and final hypotheses it produced, in order."""
        self._pending += pcm16k
        events: list[RecognitionEvent] = []
        offset = 0
        while len(self._pending) - offset >= STEP_BYTES:
            step = bytes(self._pending[offset : offset + STEP_BYTES])
            offset += STEP_BYTES
            self._process_step(step, events)
        del self._pending[:offset]
        return events

    def finish(self) -> list[RecognitionEvent]:
        """End of input: finalise pending speech (a partial last step is zero-padded)."""
        events: list[RecognitionEvent] = []
        if self._pending and self._in_utterance:
            self._decode(bytes(self._pending) + b"\0" * (STEP_BYTES - len(self._pending)))
        self._pending.clear()
        self._first_step = None
        if self._in_utterance:
            final = self._end_utterance()
            if final is not None:
                events.append(final)
        return events

    def abort(self) -> None:
        """Drop any utterance in progress, leaving the decoder reusable."""
        if self._in_utterance:
            self._in_utterance = False
            self._decoder.end_utt()
        self._endpointer.reset()
        self._pending.clear()
        self._first_step = None

    def _process_step(self, step: bytes, events: list[RecognitionEvent]) -> None:
        """10 ms of audio: decoded at once inside an utterance (and flushed when the voice has
        just dropped away); every second step completes a 20 ms frame for the endpointing."""
        self._tail.feed(step)
        if self._in_utterance:
            if self._tail.last_frame_voiced:
                self._utterance_voice_ms += STEP_MS
                self._pad_debt_ms = 0
            if self._pad_debt_ms > 0:
                # The quiet went on: the padding stood in for this step, which is not decoded.
                self._pad_debt_ms -= STEP_MS
                self._audio_frames += 1
            else:
                self._decode(step)
            if self._interim_results and self._flush_due():
                self._flush(step)
                self._emit_interim(events, stability=None)
        if self._first_step is None:
            self._first_step = step
            return
        frame = self._first_step + step
        self._first_step = None
        self._process_frame(frame, events)

    def _process_frame(self, frame: bytes, events: list[RecognitionEvent]) -> None:
        """A 20 ms frame for the endpointing (its audio is decoded already if in an utterance)."""
        self._frames_seen += 1
        voiced = self._classifier.is_voiced(frame)
        if not self._in_utterance:
            self._preroll.append(frame)
        event = self._endpointer.push(voiced)
        if event == START_OF_SPEECH:
            self._start_utterance()
            return
        if not self._in_utterance:
            return
        self._frames_since_check += 1
        if event == END_OF_SPEECH or self._endpointer.speech_frames >= self._max_frames:
            if event != END_OF_SPEECH:
                self._endpointer.reset()
            final = self._end_utterance()
            if final is not None:
                events.append(final)
        elif event == END_OF_UTTERANCE_FIRST_PASS and self._interim_results:
            self._emit_interim(events, stability=1.0)
        elif self._interim_results and self._frames_since_check >= self._interim_frames:
            self._emit_interim(events, stability=None)

    def _emit_interim(self, events: list[RecognitionEvent], stability: float | None) -> None:
        self._frames_since_check = 0
        interim = self._interim(stability)
        if interim is not None:
            events.append(interim)

    def _flush_due(self) -> bool:
        """The voice dropped away FLUSH_AFTER_MS ago (once per drop; voice re-arms it)."""
        voice_end = self._tail.last_voiced_end_ms
        return (self._utterance_voice_ms >= FLUSH_MIN_VOICE_MS and voice_end > self._flushed_voice_end_ms
                and self._tail.now_ms - voice_end >= FLUSH_AFTER_MS)

    def _flush(self, step: bytes) -> None:
        """Feed the decoder FLUSH_PAD_MS more of *step* (quiet audio), so the hypothesis
        includes the word the voice just ended with. The pause is that much longer for the
        decoder; word times are corrected for it."""
        self._flushed_voice_end_ms = self._tail.last_voiced_end_ms
        self.flushes += 1
        for _ in range(FLUSH_PAD_MS // STEP_MS):
            self._decode(step, padding=True)
        self._pad_debt_ms = FLUSH_PAD_MS

    def _decode(self, audio: bytes, padding: bool = False) -> None:
        """Feed the decoder *audio* (whole 10 ms frames): the utterance's next audio, or
        (*padding*) a repeat of the audio before it."""
        self._decoder.process_raw(audio, False, False)
        n = len(audio) // STEP_BYTES
        if padding:
            self._audio_frame_of.extend([self._audio_frames - 1] * n)
        else:
            self._audio_frame_of.extend(range(self._audio_frames, self._audio_frames + n))
            self._audio_frames += n

    def _start_utterance(self) -> None:
        self._decoder.start_utt()
        self._in_utterance = True
        self._utterance_start_frame = self._frames_seen - len(self._preroll)
        self._frames_since_check = 0
        self._audio_frame_of = []
        self._audio_frames = 0
        self._utterance_voice_ms = 0.0
        self._pad_debt_ms = 0
        self._last_interim = ""
        for buffered in self._preroll:
            self._decode(buffered)
        self._preroll.clear()

    def _current_hypothesis(self) -> str:
        hyp = self._decoder.hyp()
        return " ".join(hyp.hypstr.split()) if hyp is not None else ""

    def _interim(self, stability: float | None) -> InterimHypothesis | None:
        text = self._current_hypothesis()
        if not text:
            return None
        if stability is None:
            if text == self._last_interim:
                return None
            stability = _stability(self._last_interim, text)
        self._last_interim = text
        return InterimHypothesis(transcript=text, stability=stability)

    def _audio_frame(self, decoder_frame: int) -> int:
        """The utterance's 10 ms of audio that the decoder's frame *decoder_frame* came from."""
        frames = self._audio_frame_of
        return frames[min(decoder_frame, len(frames) - 1)] if frames else decoder_frame

    def _end_utterance(self) -> FinalHypothesis | None:
        self._in_utterance = False
        self._decoder.end_utt()
        text = self._current_hypothesis()
        if not text:
            return None
        origin_ms = self._utterance_start_frame * FRAME_MS
        words: list[WordTiming] = []
        for seg in self._decoder.seg():
            word = _clean_word(seg.word)
            if word is None:
                continue
            # pocketsphinx frames are 10 ms.
            words.append(
                WordTiming(
                    word=word,
                    start_ms=origin_ms + self._audio_frame(seg.start_frame) * 10,
                    end_ms=origin_ms + (self._audio_frame(seg.end_frame) + 1) * 10,
                    confidence=float(min(1.0, max(0.0, seg.prob))),
                )
            )
        if words:
            confidence = sum(w.confidence for w in words) / len(words)
        else:
            hyp = self._decoder.hyp()
            confidence = float(min(1.0, max(0.0, hyp.prob))) if hyp is not None else 0.0
        return FinalHypothesis(
            transcript=text,
            confidence=round(confidence, 4),
            words=tuple(words) if self._word_time_offsets else (),
        )


class DecoderPool:
    """Reusable pocketsphinx decoders, so a new stream does not pay ~0.4 s to build one."""

    def __init__(self, max_idle: int, factory: Callable[[], pocketsphinx.Decoder] = new_decoder) -> None:
        self._factory = factory
        self._max_idle = max_idle
        self._idle: list[pocketsphinx.Decoder] = []
        self._lock = threading.Lock()
        self.created = 0
        self.in_use = 0

    def prewarm(self, count: int) -> None:
        """Build decoders until ``count`` are idle (blocking)."""
        while True:
            with self._lock:
                if len(self._idle) >= min(count, self._max_idle):
                    return
            decoder = self._factory()
            with self._lock:
                self.created += 1
                self._idle.append(decoder)

    def acquire(self) -> pocketsphinx.Decoder:
        with self._lock:
            self.in_use += 1
            if self._idle:
                return self._idle.pop()
        try:
            decoder = self._factory()
        except BaseException:
            with self._lock:
                self.in_use -= 1
            raise
        with self._lock:
            self.created += 1
        return decoder

    def release(self, decoder: pocketsphinx.Decoder) -> None:
        with self._lock:
            self.in_use -= 1
            if len(self._idle) < self._max_idle:
                self._idle.append(decoder)

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)


class HintModels:
    """Decoder pools for phrase-hint language models, one per distinct hint set.

    A hint decoder is built from an ARPA model of the phrases and a dictionary of only
    their words (~30 ms; with the full dictionary pocketsphinx needs ~20 s to index a new
    model). The most recently used ``max_sets`` hint sets keep their pools.
    """

    def __init__(self, max_sets: int = 8, max_idle: int = 4) -> None:
        self._max_sets = max_sets
        self._max_idle = max_idle
        self._pools: dict[str, DecoderPool] = {}
        self._lock = threading.Lock()
        self._pronunciations: dict[str, list[str]] | None = None
        self._background_words: dict[str, float] | None = None

    def pool_for(self, phrases: tuple[str, ...]) -> DecoderPool | None:
        """The pool of decoders for *phrases*, or None when none of their words is pronounceable."""
        key = hashlib.sha1("\n".join(sorted(set(phrases))).encode()).hexdigest()
        with self._lock:
            pool = self._pools.pop(key, None)
            if pool is None:
                known = self._dictionary().__contains__
                hinted = phrase_lm.sentences(phrases, known)
                if not hinted:
                    return None
                sents = (hinted + phrase_lm.sentences(phrase_lm.CARRIER_PHRASES, known)
                         + phrase_lm.sentences(phrase_lm.ACKNOWLEDGEMENTS, known) * phrase_lm.ACKNOWLEDGEMENT_WEIGHT)
                background = self.background_words()
                arpa = phrase_lm.build_arpa(sents, background)
                words = sorted({w for sent in sents for w in sent} | set(background))
                pool = DecoderPool(self._max_idle, factory=lambda: self._build(arpa, words))
            self._pools[key] = pool  # most recent last
            while len(self._pools) > self._max_sets:
                self._pools.pop(next(iter(self._pools)))
            return pool

    def prewarm(self) -> None:
        """Read the dictionary and the background words now rather than at the first hinted stream."""
        self.background_words()

    def background_words(self) -> dict[str, float]:
        """The ``BACKGROUND_WORDS`` commonest words of the general model, with their probabilities
        (computed once; do not modify)."""
        if self._background_words is None:
            model_dir = os.path.join(pocketsphinx.get_model_path(), "en-us")
            logmath = pocketsphinx.LogMath()
            general = pocketsphinx.NGramModel(pocketsphinx.Config(loglevel="FATAL"), logmath,
                                              os.path.join(model_dir, "en-us.lm.bin"))
            scored = sorted(((general.prob([w]), w) for w in self._dictionary() if "_" not in w), reverse=True)
            self._background_words = {w: logmath.exp(score) for score, w in scored[:BACKGROUND_WORDS]}
        return self._background_words

    def _dictionary(self) -> dict[str, list[str]]:
        if self._pronunciations is None:
            entries: dict[str, list[str]] = {}
            path = os.path.join(pocketsphinx.get_model_path(), "en-us", "cmudict-en-us.dict")
            with open(path, encoding="utf-8") as f:
                for line in f:
                    head = line.split(" ", 1)[0]
                    entries.setdefault(head.split("(", 1)[0], []).append(line if line.endswith("\n") else line + "\n")
            self._pronunciations = entries
        return self._pronunciations

    def _build(self, arpa: str, words: list[str]) -> pocketsphinx.Decoder:
        dictionary = self._dictionary()
        with tempfile.TemporaryDirectory(prefix="openclaw-hints-") as tmp:
            lm_path, dict_path = os.path.join(tmp, "hints.arpa"), os.path.join(tmp, "hints.dict")
            with open(lm_path, "w", encoding="utf-8") as f:
                f.write(arpa)
            with open(dict_path, "w", encoding="utf-8") as f:
                for word in words:
                    f.writelines(dictionary[word])
            return pocketsphinx.Decoder(lm=lm_path, dict=dict_path, **DECODER_OPTIONS)


# --------------------------------------------------------------------------------------
# Input audio and request validation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecognitionSettings:
    encoding: int
    sample_rate_hz: int
    endpointing: EndpointingParams
    interim_results: bool
    word_time_offsets: bool
    #: phrase hints (``speech_contexts``); empty: the general language model
    phrases: tuple[str, ...] = ()


def _check_language(code: str, what: str) -> None:
    if code.lower() != LANGUAGE_CODE.lower():
        raise ConfigError(f"{what}: language_code {code!r} is not available; this server has {LANGUAGE_CODE!r}")


def parse_recognition_config(config: riva_asr_pb2.RecognitionConfig, *, interim_results: bool) -> RecognitionSettings:
    """Validate a ``RecognitionConfig``; raise :class:`ConfigError` with the reason."""
    if config.encoding not in (AudioEncoding.LINEAR_PCM, AudioEncoding.MULAW, AudioEncoding.ALAW):
        name = AudioEncoding.Name(config.encoding) if config.encoding in AudioEncoding.values() else str(config.encoding)
        raise ConfigError(f"unsupported encoding {name}; use LINEAR_PCM, MULAW or ALAW")
    rate = config.sample_rate_hertz
    if not MIN_INPUT_RATE_HZ <= rate <= MAX_INPUT_RATE_HZ:
        raise ConfigError(
            f"sample_rate_hertz must be between {MIN_INPUT_RATE_HZ} and {MAX_INPUT_RATE_HZ}, got {rate}"
        )
    _check_language(config.language_code, "RecognitionConfig")
    if config.audio_channel_count > 1:
        raise ConfigError(f"only mono audio is supported, got audio_channel_count={config.audio_channel_count}")
    if config.model and config.model != ASR_MODEL_NAME:
        raise ConfigError(f"model {config.model!r} is not available; this server has {ASR_MODEL_NAME!r}")
    endpointing = EndpointingParams.from_proto(
        config.endpointing_config if config.HasField("endpointing_config") else None
    )
    phrases = tuple(p for ctx in config.speech_contexts if ctx.boost >= 0 for p in ctx.phrases if p.strip())
    if len(phrases) > MAX_HINT_PHRASES:
        raise ConfigError(f"at most {MAX_HINT_PHRASES} speech_contexts phrases are accepted, got {len(phrases)}")
    return RecognitionSettings(
        encoding=config.encoding,
        sample_rate_hz=rate,
        endpointing=endpointing,
        interim_results=interim_results,
        word_time_offsets=config.enable_word_time_offsets,
        phrases=phrases,
    )


class InputAudioConverter:
    """Decodes G.711 if needed and resamples the client's audio to 16 kHz pcm16."""

    def __init__(self, encoding: int, sample_rate_hz: int) -> None:
        self._encoding = encoding
        self._resampler = audio_util.StreamResampler(sample_rate_hz, MODEL_RATE_HZ)

    def convert(self, data: bytes) -> bytes:
        if self._encoding == AudioEncoding.MULAW:
            pcm = audio_util.ulaw_to_pcm16(data)
        elif self._encoding == AudioEncoding.ALAW:
            pcm = audio_util.alaw_to_pcm16(data)
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
# Recognition engines: where decoding runs
# --------------------------------------------------------------------------------------


class EngineUnavailable(RuntimeError):
    """Decoding cannot proceed (worker process gone or unresponsive); reported as UNAVAILABLE."""


class RecognitionSession(Protocol):
    """One stream's recognizer: raw client audio in, hypotheses out."""

    def process(self, audio: bytes) -> list[RecognitionEvent]: ...

    def finish(self) -> list[RecognitionEvent]: ...

    def close(self) -> None: ...


class RecognitionEngine(Protocol):
    """Opens recognition sessions."""

    def open(self, settings: RecognitionSettings) -> RecognitionSession: ...

    def close(self) -> None: ...


class LocalRecognitionSession:
    """Converts and decodes in the calling thread, with a decoder borrowed from ``pool``."""

    def __init__(self, settings: RecognitionSettings, pool: DecoderPool, hints: HintModels | None = None) -> None:
        hint_pool = hints.pool_for(settings.phrases) if hints is not None and settings.phrases else None
        self._pool = hint_pool or pool
        self._converter = InputAudioConverter(settings.encoding, settings.sample_rate_hz)
        self._decoder = self._pool.acquire()
        # A new caller: forget the previous stream's noise estimate and channel (cepstral mean);
        # rebuilding the feature extraction takes ~0.05 ms.
        self._decoder.config["cmninit"] = (TELEPHONE_CMN if settings.sample_rate_hz <= TELEPHONE_RATE_HZ
                                           else MODEL_CMN)
        self._decoder.reinit_feat()
        self._recognizer = UtteranceRecognizer(
            self._decoder,
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
            self._pool.release(self._decoder)


class LocalRecognitionEngine:
    """Decodes in the gRPC worker threads of this process (all streams share one GIL)."""

    def __init__(self, pool: DecoderPool) -> None:
        self.pool = pool
        self.hints = HintModels()

    def open(self, settings: RecognitionSettings) -> LocalRecognitionSession:
        return LocalRecognitionSession(settings, self.pool, self.hints)

    def close(self) -> None:
        pass


def _decode_worker_main(conn: Connection, prewarm: int, max_idle: int) -> None:
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
    hints = HintModels()
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

    def __init__(self, index: int, ctx: multiprocessing.context.SpawnContext, prewarm: int, max_idle: int) -> None:
        self.index = index
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_decode_worker_main,
            args=(child_conn, prewarm, max_idle),
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
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self._ctx = multiprocessing.get_context("spawn")
        self._prewarm = prewarm_per_process
        self._max_idle = max_idle_per_process
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
        return _DecodeWorker(index, self._ctx, self._prewarm, self._max_idle)

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


# --------------------------------------------------------------------------------------
# gRPC servicers
# --------------------------------------------------------------------------------------


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


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
    return riva_asr_pb2.StreamingRecognizeResponse(results=[result])


class RivaAsrServicer(riva_asr_pb2_grpc.RivaSpeechRecognitionServicer):
    """Riva speech recognition on pocketsphinx."""

    def __init__(self, engine: RecognitionEngine) -> None:
        self._engine = engine

    def _open(self, settings: RecognitionSettings, context: grpc.ServicerContext) -> RecognitionSession:
        try:
            return self._engine.open(settings)
        except EngineUnavailable as exc:
            _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))

    def StreamingRecognize(  # noqa: N802 (gRPC method name)
        self,
        request_iterator: Iterator[riva_asr_pb2.StreamingRecognizeRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[riva_asr_pb2.StreamingRecognizeResponse]:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("streaming_request") != "streaming_config":
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "the first StreamingRecognizeRequest must carry streaming_config",
            )
        try:
            settings = parse_recognition_config(
                first.streaming_config.config, interim_results=first.streaming_config.interim_results
            )
        except ConfigError as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        clock = AudioClock(settings)
        session = self._open(settings, context)
        try:
            for request in request_iterator:
                kind = request.WhichOneof("streaming_request")
                if kind == "streaming_config":
                    _abort(
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
                    _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
                for event in events:
                    yield _streaming_result(event, clock.seconds)
            try:
                events = session.finish()
            except EngineUnavailable as exc:
                _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
            for event in events:
                yield _streaming_result(event, clock.seconds)
        finally:
            session.close()

    def Recognize(  # noqa: N802
        self, request: riva_asr_pb2.RecognizeRequest, context: grpc.ServicerContext
    ) -> riva_asr_pb2.RecognizeResponse:
        try:
            settings = parse_recognition_config(request.config, interim_results=False)
        except ConfigError as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        clock = AudioClock(settings)
        clock.consume(request.audio)
        session = self._open(settings, context)
        try:
            events = session.process(request.audio) + session.finish()
        except EngineUnavailable as exc:
            _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
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
        return response

    def GetRivaSpeechRecognitionConfig(  # noqa: N802
        self, request: riva_asr_pb2.RivaSpeechRecognitionConfigRequest, context: grpc.ServicerContext
    ) -> riva_asr_pb2.RivaSpeechRecognitionConfigResponse:
        response = riva_asr_pb2.RivaSpeechRecognitionConfigResponse()
        if request.model_name in ("", ASR_MODEL_NAME):
            cfg = response.model_config.add(model_name=ASR_MODEL_NAME)
            cfg.parameters["language_code"] = LANGUAGE_CODE
            cfg.parameters["type"] = "online"
            cfg.parameters["sample_rate"] = str(MODEL_RATE_HZ)
        return response


# --- synthesis -------------------------------------------------------------------------

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;:])\s+|\n+")
_RIVA_VOICE = re.compile(r"^English-US([.\-_].*)?$")


def split_sentences(text: str) -> list[str]:
    """Split text at sentence punctuation followed by space, and at line breaks."""
    return [part.strip() for part in _SENTENCE_SPLIT.split(text) if part and part.strip()]


def resolve_voice(voice_name: str) -> str:
    """Map a Riva ``voice_name`` to a flite voice; raise :class:`ConfigError` if unknown."""
    if not voice_name:
        return flite.DEFAULT_VOICE
    if voice_name in flite.VOICES:
        return voice_name
    if _RIVA_VOICE.match(voice_name):
        return flite.DEFAULT_VOICE
    raise ConfigError(
        f"voice_name {voice_name!r} is not available; use one of {', '.join(flite.VOICES)} or English-US.*"
    )


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
        _check_language(request.language_code, "SynthesizeSpeechRequest")
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
        return audio_util.pcm16_to_ulaw(pcm)
    if encoding == AudioEncoding.ALAW:
        return audio_util.pcm16_to_alaw(pcm)
    return pcm


def synthesize_chunks(settings: SynthesisSettings, chunk_ms: int = TTS_CHUNK_MS) -> Iterator[bytes]:
    """Yield encoded audio for ``settings.text`` sentence by sentence, ``chunk_ms`` at a time."""
    resampler: audio_util.StreamResampler | None = None
    chunk_bytes = settings.sample_rate_hz * chunk_ms // 1000 * 2
    carry = b""
    for sentence in split_sentences(settings.text):
        pcm, native_rate = flite.synthesize(sentence, settings.voice)
        if resampler is None:
            resampler = audio_util.StreamResampler(native_rate, settings.sample_rate_hz)
        pcm = carry + resampler.process(pcm)
        whole = len(pcm) - len(pcm) % chunk_bytes
        for start in range(0, whole, chunk_bytes):
            yield _encode_output(pcm[start : start + chunk_bytes], settings.encoding)
        carry = pcm[whole:]
    if carry:
        yield _encode_output(carry, settings.encoding)


class RivaTtsServicer(riva_tts_pb2_grpc.RivaSpeechSynthesisServicer):
    """Riva speech synthesis on flite."""

    def Synthesize(  # noqa: N802
        self, request: riva_tts_pb2.SynthesizeSpeechRequest, context: grpc.ServicerContext
    ) -> riva_tts_pb2.SynthesizeSpeechResponse:
        try:
            settings = parse_synthesis_request(request)
        except ConfigError as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
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
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            for chunk in synthesize_chunks(settings):
                if not context.is_active():
                    return
                yield riva_tts_pb2.SynthesizeSpeechResponse(audio=chunk)
        if not received:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "SynthesizeOnline needs at least one request")

    def GetRivaSynthesisConfig(  # noqa: N802
        self, request: riva_tts_pb2.RivaSynthesisConfigRequest, context: grpc.ServicerContext
    ) -> riva_tts_pb2.RivaSynthesisConfigResponse:
        response = riva_tts_pb2.RivaSynthesisConfigResponse()
        for voice in flite.VOICES:
            model_name = f"flite-{voice}"
            if request.model_name and request.model_name != model_name:
                continue
            cfg = response.model_config.add(model_name=model_name)
            cfg.parameters["language_code"] = LANGUAGE_CODE
            cfg.parameters["voice_name"] = voice
            cfg.parameters["sample_rate"] = "8000" if voice == "kal" else "16000"
        return response


# --------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------


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
) -> SpeechServer:
    """Start decode workers, load the default voice and serve on ``listen`` (port 0 = any free port).

    ``max_workers`` bounds concurrent RPCs: each open recognition or synthesis stream holds
    one gRPC thread. ``decode_processes`` worker processes decode speech (default: one per
    CPU, at most 4); 0 decodes in the gRPC threads instead. Each decoding place pre-builds
    ``prewarm_decoders`` decoders and keeps up to ``max_idle_decoders``. Raises
    ``RuntimeError`` if the address cannot be bound.
    """
    host, _ = _split_listen(listen)
    if max_workers < 1:
        raise ValueError(f"max_workers must be at least 1, got {max_workers}")
    processes = default_decode_processes() if decode_processes is None else decode_processes
    if processes < 0:
        raise ValueError(f"decode_processes must be 0 or more, got {processes}")
    engine: RecognitionEngine
    if processes == 0:
        pool = DecoderPool(max_idle=max_idle_decoders)
        pool.prewarm(prewarm_decoders)
        engine = LocalRecognitionEngine(pool)
    else:
        engine = ProcessRecognitionEngine(
            processes, prewarm_per_process=prewarm_decoders, max_idle_per_process=max_idle_decoders
        )
    try:
        flite.load_voice(flite.DEFAULT_VOICE)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="speech-rpc"),
            options=[("grpc.so_reuseport", 0)],
        )
        riva_asr_pb2_grpc.add_RivaSpeechRecognitionServicer_to_server(RivaAsrServicer(engine), server)
        riva_tts_pb2_grpc.add_RivaSpeechSynthesisServicer_to_server(RivaTtsServicer(), server)
        health_servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        try:
            bound = server.add_insecure_port(listen)
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


def run(listen: str, max_workers: int = 32, decode_processes: int | None = None) -> int:
    """Serve on ``listen`` until SIGTERM or SIGINT; print one ``listening`` line; return 0."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    # Started by `openclaw-voice serve`: exit with the parent even if it was killed outright.
    parent = int(os.environ.get("OPENCLAW_PARENT_PID", "0") or 0)
    try:
        server = start_speech_server(listen, max_workers, decode_processes=decode_processes)
        print(f"speech server listening on {server.address}", flush=True)
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
    """``python -m agent.speech.server [--listen HOST:PORT] [--max-workers N] [--decode-processes N]``."""
    parser = argparse.ArgumentParser(
        prog="python -m agent.speech.server", description="Riva-compatible speech server (pocketsphinx + flite)."
    )
    parser.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT to listen on (port 0 = any)")
    parser.add_argument("--max-workers", type=int, default=32, help="concurrent RPC limit (threads)")
    parser.add_argument(
        "--decode-processes", type=int, default=None, help="decode worker processes (default: CPUs, max 4; 0 = in-process)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    return run(args.listen, args.max_workers, args.decode_processes)


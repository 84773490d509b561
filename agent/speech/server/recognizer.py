"""The recognition core: a 16 kHz pcm16 stream in, interim and final hypotheses out (no I/O).

:class:`UtteranceRecognizer` owns the endpointing and a pocketsphinx decoder's utterance
lifecycle; audio is decoded 10 ms at a time as it arrives and classified in 20 ms frames.
The flush, word times and the decoder settings are explained in docs/speech.md.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import pocketsphinx

from agent.speech.server.endpointing import (
    END_OF_SPEECH,
    END_OF_UTTERANCE_FIRST_PASS,
    FRAME_MS,
    START_OF_SPEECH,
    EndpointingParams,
    UtteranceEndpointer,
    frames_for,
)
from media import convert
from media.vad import EnergyVad, VadConfig
from media.voicing import VoicingDetector

MODEL_RATE_HZ = 16000
#: input at this rate or below is telephone audio (G.711), upsampled to MODEL_RATE_HZ
TELEPHONE_RATE_HZ = 8000
#: the cepstral mean (13 coefficients) a stream of telephone audio starts from: the mean, over
#: flite's five voices (kal16, kal, rms, awb, slt), of six everyday sentences each, at 8 kHz
#: upsampled to 16 kHz, as the decoder's live mean ended up after them (docs/speech.md)
TELEPHONE_CMN = "49.88,9.14,3.42,11.69,-0.20,2.15,3.05,1.13,-10.95,4.08,-2.32,6.21,-1.13"
#: the model's initial cepstral mean (pocketsphinx's default ``cmninit``), for wideband input
MODEL_CMN = pocketsphinx.Config()["cmninit"]
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
#: pass, so the last word shows up before the following quiet has been heard
FLUSH_PAD_MS = 40
MAX_UTTERANCE_MS = 30_000

#: see docs/speech.md for why each
DECODER_OPTIONS: dict[str, object] = {
    "fwdflat": False,
    "bestpath": True,
    "maxhmmpf": 2000,
    "maxwpf": 10,
    "loglevel": "FATAL",
}


class UtteranceDecoder(Protocol):
    """What the recogniser needs of a decoder: a ``pocketsphinx.Decoder``, two of them judged
    together (agent.speech.server.biasing.BiasedDecoder), or one with Whisper for open speech
    (agent.speech.server.open_speech.OpenSpeechDecoder, which also has ``checkpoint()``,
    ``on_voice()``, ``after_gap()`` and ``voicing()``)."""

    def start_utt(self) -> None: ...

    def process_raw(self, audio: bytes, no_search: bool = False, full_utt: bool = False) -> None: ...

    def end_utt(self) -> None: ...

    def hyp(self) -> Any: ...

    def seg(self) -> Any: ...


class VoicedFrameClassifier:
    """Voiced/unvoiced decision for one 20 ms pcm16 frame at 16 kHz (a :class:`VoicingDetector`).

    Its own algorithm because it stands in for Riva's acoustic model in the endpointing, so
    it judges the sound's spectrum (a WebRTC-style VAD), not its level alone.

    A frame is voiced when its level reaches ``min_level_dbfs`` and pocketsphinx's
    WebRTC-style VAD (which adapts to steady noise) says speech.
    """

    def __init__(self, *, vad_mode: int = pocketsphinx.Vad.LOOSE, min_level_dbfs: float = -55.0) -> None:
        self._vad = pocketsphinx.Vad(vad_mode, MODEL_RATE_HZ, FRAME_MS / 1000)
        if self._vad.frame_bytes != FRAME_BYTES:
            raise RuntimeError(f"VAD frame is {self._vad.frame_bytes} bytes, expected {FRAME_BYTES}")
        self.min_level_dbfs = min_level_dbfs

    def voiced(self, frame: bytes) -> bool:
        if convert.rms_dbfs(frame) < self.min_level_dbfs:
            return False
        return bool(self._vad.is_speech(frame))


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
    #: other readings of the same audio, likeliest first (Riva's further ``alternatives``)
    alternatives: tuple[str, ...] = ()


@dataclass(frozen=True)
class FinalHypothesis:
    transcript: str
    confidence: float
    words: tuple[WordTiming, ...] = field(default=())
    alternatives: tuple[str, ...] = ()


RecognitionEvent = InterimHypothesis | FinalHypothesis


def new_decoder() -> pocketsphinx.Decoder:
    """Build a pocketsphinx decoder for the bundled en-US model (slow, and large: pool them)."""
    return pocketsphinx.Decoder(**DECODER_OPTIONS)


def clean_word(word: str) -> str | None:
    """A pocketsphinx segment's word without its pronunciation variant ("to(3)": "to"); None for
    silence, fillers and the utterance's start and end ("<sil>", "[NOISE]", "++BREATH++", "<s>")."""
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
        decoder: UtteranceDecoder,
        params: EndpointingParams,
        *,
        interim_results: bool,
        word_time_offsets: bool,
        classifier: VoicingDetector | None = None,
    ) -> None:
        self._decoder = decoder
        #: a decoder with a second opinion (agent.speech.server.open_speech) makes it here
        self._checkpoint: Callable[[], None] | None = getattr(decoder, "checkpoint", None)
        #: ... and is told of voice after it (its sentence mark was made before that voice)
        self._on_voice: Callable[[], None] | None = getattr(decoder, "on_voice", None)
        #: a checkpoint was made and no voice has come since (told once, not every voiced step)
        self._checkpoint_unvoiced = False
        self._endpointer = UtteranceEndpointer(params)
        self._classifier = classifier or VoicedFrameClassifier()
        self._interim_results = interim_results
        self._word_time_offsets = word_time_offsets
        self._pending = bytearray()
        self._first_step: bytes | None = None
        preroll_frames = self._endpointer.start_history_frames + PREROLL_PAD_MS // FRAME_MS
        self._preroll: deque[bytes] = deque(maxlen=preroll_frames)
        self._frames_seen = 0
        #: the 20 ms frame the last utterance ended at (None: none yet)
        self._last_end_frame: int | None = None
        #: a decoder that reads an utterance with the one before it in mind is told the gap
        self._after_gap: Callable[[float | None], None] | None = getattr(decoder, "after_gap", None)
        #: ... and one that weighs its words against the caller's voice is told, before the
        #: utterance's end, which of the 10 ms it decoded were voiced (the flush's rule, below)
        self._voicing: Callable[[list[bool]], None] | None = getattr(decoder, "voicing", None)
        self._utterance_start_frame = 0
        self._in_utterance = False
        self._frames_since_check = 0
        self._last_interim = ""
        self._interim_frames = frames_for(INTERIM_INTERVAL_MS)
        self._max_frames = MAX_UTTERANCE_MS // FRAME_MS
        # When the voice drops away (10 ms resolution, the agent's rule), for the flush.
        self._tail = EnergyVad(VadConfig(), sample_rate_hz=MODEL_RATE_HZ)
        #: for a decoder with ``voicing()``: the last steps' voicing (the preroll's), and each
        #: step's of this utterance by its 10 ms of audio
        self._recent_voiced: deque[bool] = deque(maxlen=2 * preroll_frames)
        self._utterance_voiced: list[bool] = []
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
        step_voiced = self._tail.voiced(step)
        if self._voicing is not None:
            (self._utterance_voiced if self._in_utterance else self._recent_voiced).append(step_voiced)
        if self._in_utterance:
            if step_voiced:
                self._utterance_voice_ms += STEP_MS
                self._pad_debt_ms = 0
                if self._checkpoint_unvoiced:
                    self._checkpoint_unvoiced = False
                    assert self._on_voice is not None
                    self._on_voice()
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
        voiced = self._classifier.voiced(frame)
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
        if self._checkpoint is not None:
            self._checkpoint()
            self._checkpoint_unvoiced = self._on_voice is not None

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
        if self._after_gap is not None:
            last = self._last_end_frame
            self._after_gap(None if last is None else (self._utterance_start_frame - last) * FRAME_MS)
        self._frames_since_check = 0
        self._audio_frame_of = []
        self._audio_frames = 0
        self._utterance_voice_ms = 0.0
        self._pad_debt_ms = 0
        self._checkpoint_unvoiced = False
        self._last_interim = ""
        if self._voicing is not None:
            self._utterance_voiced = list(self._recent_voiced)[-2 * len(self._preroll):]
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
        return InterimHypothesis(transcript=text, stability=stability, alternatives=self._alternatives())

    def _audio_frame(self, decoder_frame: int) -> int:
        """The utterance's 10 ms of audio that the decoder's frame *decoder_frame* came from."""
        frames = self._audio_frame_of
        return frames[min(decoder_frame, len(frames) - 1)] if frames else decoder_frame

    def _end_utterance(self) -> FinalHypothesis | None:
        self._in_utterance = False
        self._last_end_frame = self._frames_seen
        if self._checkpoint is not None and self._tail.last_voiced_end_ms > self._flushed_voice_end_ms:
            self._checkpoint()  # voice since the last flush (or none was made): the second opinion is stale
        if self._voicing is not None:
            voiced = self._utterance_voiced  # (finish()'s zero-padded last part is no step: unvoiced)
            self._voicing([a < len(voiced) and voiced[a] for a in self._audio_frame_of])
        self._decoder.end_utt()
        text = self._current_hypothesis()
        if not text:
            return None
        origin_ms = self._utterance_start_frame * FRAME_MS
        words: list[WordTiming] = []
        for seg in self._decoder.seg():
            word = clean_word(seg.word)
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
            alternatives=self._alternatives(),
        )

    def _alternatives(self) -> tuple[str, ...]:
        """The decoder's other readings of its current words (a decoder with a second opinion
        may have some: agent.speech.server.open_speech)."""
        return tuple(getattr(self._decoder, "alternatives", ()))

"""The embedded recogniser's flush when the voice drops away (agent.speech.server.recognizer.UtteranceRecognizer).

A fake decoder records what it is fed; the frames are synthetic (a tone is voice, zeros are
silence), classified by level, so each test states exactly where the voice ends.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from agent.speech.server.recognizer import (
    FLUSH_AFTER_MS, FLUSH_PAD_MS, FRAME_BYTES, FRAME_MS, STEP_BYTES, STEP_MS, EndpointingParams,
    FinalHypothesis, InterimHypothesis, UtteranceRecognizer)

RATE = 16000


def tone(ms: int, dbfs: float = -20.0) -> bytes:
    amp = 32767 * 10 ** (dbfs / 20) * math.sqrt(2)
    n = RATE * ms // 1000
    return struct.pack(f"<{n}h", *(int(amp * math.sin(2 * math.pi * 220 * i / RATE)) for i in range(n)))


def silence(ms: int) -> bytes:
    return bytes(RATE * ms // 1000 * 2)


class LevelClassifier:
    """Voiced when the frame is not digital silence (stands in for the WebRTC VAD)."""

    def voiced(self, frame: bytes) -> bool:
        return any(frame)


@dataclass
class Seg:
    word: str
    start_frame: int
    end_frame: int
    prob: float = 1.0


@dataclass
class Hyp:
    hypstr: str
    prob: float = 1.0


class FakeDecoder:
    """Counts the 10 ms frames it decodes; its hypothesis names how many it has seen; its one
    word spans every frame of the utterance."""

    def __init__(self) -> None:
        self.frames = 0
        self.fed: list[bytes] = []

    def start_utt(self) -> None:
        self.frames = 0

    def end_utt(self) -> None:
        pass

    def process_raw(self, frame: bytes, no_search: bool, full_utt: bool) -> None:
        assert len(frame) in (STEP_BYTES, FRAME_BYTES)
        self.fed.append(frame)
        self.frames += len(frame) // STEP_BYTES  # pocketsphinx frames are 10 ms

    def hyp(self) -> Hyp:
        return Hyp(f"w{self.frames}")

    def seg(self) -> list[Seg]:
        return [Seg("word", 0, self.frames - 1)]


def run(audio: bytes, *, interim_results: bool = True) -> tuple[UtteranceRecognizer, FakeDecoder, list]:
    decoder = FakeDecoder()
    rec = UtteranceRecognizer(decoder, EndpointingParams(stop_history_ms=300), interim_results=interim_results,
                              word_time_offsets=True, classifier=LevelClassifier())
    events = []
    for i in range(0, len(audio), 320):  # 10 ms at a time, as the agent sends
        events += [(i // 32 + 10, e) for e in rec.process(audio[i:i + 320])]
    events += [(None, e) for e in rec.finish()]
    return rec, decoder, events


def test_a_request_that_ends_is_flushed_once_right_after_the_voice_drops() -> None:
    rec, decoder, events = run(silence(200) + tone(600) + silence(500))
    assert rec.flushes == 1
    # Interims come every 20 ms frame (the fake's hypothesis always changes), two 10 ms steps
    # apart; the flush's comes as soon as the voice (which ends at 800 ms) has been gone
    # FLUSH_AFTER_MS, one step plus the padding after the one before.
    interims = [(at, int(e.transcript[1:])) for at, e in events if isinstance(e, InterimHypothesis)]
    steps = [(at, n - m) for (_, m), (at, n) in zip(interims, interims[1:])]
    assert (800 + FLUSH_AFTER_MS, (STEP_MS + FLUSH_PAD_MS) // STEP_MS) in steps, steps
    assert [n for _, n in steps].count((STEP_MS + FLUSH_PAD_MS) // STEP_MS) == 1


def test_word_times_leave_the_padding_out() -> None:
    _, _, events = run(silence(200) + tone(600) + silence(500))
    final = [e for _, e in events if isinstance(e, FinalHypothesis)]
    assert len(final) == 1
    word = final[0].words[0]
    # The utterance's audio ends with the 300 ms of silence that ended it (plus the 20 ms
    # frame the endpointer needed); the flush's 40 ms are not counted.
    assert word.end_ms == 200 + 600 + 300


def test_short_voice_is_not_flushed() -> None:
    """An acknowledgement's start or a short noise is left to the decoder's own pace."""
    rec, _, _ = run(silence(200) + tone(200) + silence(500))
    assert rec.flushes == 0


def test_each_drop_of_the_voice_is_flushed_once() -> None:
    rec, _, _ = run(silence(200) + tone(400) + silence(120) + tone(300) + silence(500))
    assert rec.flushes == 2


def test_no_flush_without_interim_results() -> None:
    rec, _, _ = run(silence(200) + tone(600) + silence(500), interim_results=False)
    assert rec.flushes == 0


def _decoded_frames(audio: bytes, monkeypatch, flush: bool) -> int:
    if not flush:
        monkeypatch.setattr("agent.speech.server.recognizer.FLUSH_AFTER_MS", 10 ** 9)
    _, decoder, _ = run(audio)
    monkeypatch.undo()
    return decoder.frames


def test_the_quiet_after_a_flush_makes_up_for_its_padding(monkeypatch) -> None:
    """The padding stands in for the quiet that follows: that much of it is not decoded, so
    after a real end the decoder has heard exactly the stream's audio, and a stop inside a
    sentence is lengthened only by the padding the quiet did not make up for."""
    end = silence(200) + tone(600) + silence(500)
    assert _decoded_frames(end, monkeypatch, True) == _decoded_frames(end, monkeypatch, False)
    stop = silence(200) + tone(400) + silence(50) + tone(300) + silence(500)
    # the flush comes 30 ms into the 50 ms stop; 20 ms of the stop's quiet is left to skip
    extra = (FLUSH_PAD_MS - 20) // STEP_MS
    assert _decoded_frames(stop, monkeypatch, True) == _decoded_frames(stop, monkeypatch, False) + extra

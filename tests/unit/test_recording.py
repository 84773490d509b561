"""Recordings stream to their WAV file as they are made: bounded memory, a whole file at any time."""
from __future__ import annotations

import os
import wave

from agent.call.recording import FLUSH_INTERVAL_S, Recorder
from agent.dialplan.actions import Record
from tests.fakes import FakeReactor

RATE = 16000
FRAME = b"\x10\x00" * (RATE // 100)     # 10 ms


class _Media:
    recorder = None


class _Playout:
    def play(self, pcm: bytes) -> int:
        return 7


def _recorder(tmp_path, done: list) -> tuple[FakeReactor, _Media, Recorder]:
    reactor, media = FakeReactor(), _Media()
    rec = Recorder(reactor, media, _Playout(), str(tmp_path), RATE, {"call_id": "c1"},  # type: ignore[arg-type]
                   on_done=lambda *a: done.append(a))
    return reactor, media, rec


def _frames_on_disk(path: str) -> int:
    with wave.open(path, "rb") as w:
        return w.getnframes()


def test_frames_reach_the_file_while_recording_and_memory_stays_bounded(tmp_path) -> None:
    done: list = []
    reactor, media, rec = _recorder(tmp_path, done)
    rec.start(Record("msg.wav", max_ms=120_000, beep=False))
    most_buffered = 0
    for _ in range(60 * 100):                      # a minute of caller audio, 10 ms at a time
        media.recorder.append(FRAME)
        most_buffered = max(most_buffered, rec.buffered_bytes)
        reactor.advance(0.01)
    assert most_buffered <= len(FRAME) * (FLUSH_INTERVAL_S * 100 + 1)
    path = os.path.join(str(tmp_path), "msg.wav")
    # Mid-call, the file on disk is a valid WAV holding what was flushed (all but < 0.5 s).
    assert _frames_on_disk(path) >= (60 - FLUSH_INTERVAL_S) * RATE
    rec.finish("terminator key")
    assert done == [(path, 60_000, "")]
    assert _frames_on_disk(path) == 60 * RATE
    assert media.recorder is None


def test_hang_up_during_the_beep_leaves_an_empty_recording(tmp_path) -> None:
    done: list = []
    _, media, rec = _recorder(tmp_path, done)
    rec.start(Record("beep.wav", max_ms=5000, beep=True))
    rec.close()
    path = os.path.join(str(tmp_path), "beep.wav")
    assert rec.recordings == [path] and _frames_on_disk(path) == 0


def test_unwritable_directory_is_an_error_not_a_crash(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done: list = []
    reactor, media, rec = _recorder(str(blocker), done)
    rec.start(Record("m.wav", max_ms=1000, beep=False))
    assert media.recorder is None
    reactor.advance(1.0)
    assert len(done) == 1 and done[0][2].startswith("cannot write") and rec.recordings == []

"""Recording a caller's message (a dialplan ``record`` step): beep, capture, WAV file."""
from __future__ import annotations

import math
import os
import struct
import wave
from typing import Callable

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from agent.call.pipeline import MediaPipeline
from agent.call.ports import Reactor, cancel
from agent.dialplan.engine import Record
from media.frames import duration_ms
from media.playout import PlayoutBuffer

log = Logger(namespace="openclaw.session")


def beep(sample_rate_hz: int, freq_hz: float = 1000.0, ms: int = 250) -> bytes:
    """The tone played before a recording starts."""
    n = sample_rate_hz * ms // 1000
    return struct.pack(f"<{n}h", *(int(8000 * math.sin(2 * math.pi * freq_hz * i / sample_rate_hz))
                                   for i in range(n)))


class Recorder:
    """One recording at a time: the beep, the caller's frames (from the media thread), the file."""

    def __init__(self, reactor: Reactor, media: MediaPipeline, playout: PlayoutBuffer, recordings_dir: str,
                 sample_rate_hz: int, log_fields: dict[str, str],
                 on_done: Callable[[str, int, str], None]) -> None:
        """*on_done(path, duration_ms, error)*: a recording ended by its terminator key or its length."""
        self._reactor = reactor
        self._media = media
        self._playout = playout
        self.recordings_dir = recordings_dir
        self._rate_hz = sample_rate_hz
        self._log_fields = log_fields
        self._on_done = on_done
        self._action: Record | None = None
        self._timer: IDelayedCall | None = None
        self._beep_segment: int | None = None
        #: the files written during the call
        self.recordings: list[str] = []

    def start(self, action: Record) -> None:
        self._action = action
        if action.beep:
            self._beep_segment = self._playout.play(beep(self._rate_hz))
        else:
            self._begin_capture()

    def on_segment_finished(self, segment_id: int) -> bool:
        """A playout segment finished; True when it was the beep (capture begins)."""
        if segment_id != self._beep_segment:
            return False
        self._beep_segment = None
        self._begin_capture()
        return True

    def finish(self, why: str) -> None:
        """The terminator key or the maximum length ended the recording: save it and report."""
        if self._action is None:
            return
        timer, self._timer = self._timer, None
        cancel(timer)
        path, ms, error = self._save(why)
        self._on_done(path, ms, error)

    def close(self) -> None:
        """The call ended: keep what was captured."""
        cancel(self._timer)
        if self._action is not None:
            self._save("caller hung up")

    def _begin_capture(self) -> None:
        if self._action is None:
            return
        self._media.recorder = []
        self._timer = self._reactor.callLater(self._action.max_ms / 1000.0, self.finish, "maximum length")

    def _save(self, why: str) -> tuple[str, int, str]:
        """Write what was captured to the WAV file; returns (path, duration_ms, error)."""
        action, self._action = self._action, None
        frames, self._media.recorder = self._media.recorder or [], None
        assert action is not None
        path = os.path.join(self.recordings_dir, action.path)
        pcm = b"".join(frames)
        ms = int(duration_ms(len(pcm), self._rate_hz))
        try:
            os.makedirs(self.recordings_dir, exist_ok=True)
            with wave.open(path, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(self._rate_hz)
                w.writeframes(pcm)
        except OSError as e:
            log.error("call {call_id} recording {path} not written: {err}", path=path, err=e, **self._log_fields)
            return path, ms, f"cannot write {path}: {e.strerror}"
        self.recordings.append(path)
        log.info("call {call_id} recorded {ms} ms to {path} ({why})", ms=ms, path=path, why=why,
                 **self._log_fields)
        return path, ms, ""

"""Recording a caller's message (a dialplan ``record`` step): beep, capture streamed to a WAV file."""
from __future__ import annotations

import math
import os
import struct
import wave
from typing import BinaryIO, Callable

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import LoopingCall
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


#: how often the captured frames go from memory to the WAV file (what memory holds at most)
FLUSH_INTERVAL_S = 0.5


class Recorder:
    """One recording at a time: the beep, the caller's frames (from the media thread), the file.

    The WAV file is opened when capture begins and the frames go to it every
    :data:`FLUSH_INTERVAL_S` (its header rewritten each time, so the file is whole up to the last
    flush even if the process dies): memory holds half a second of audio, whatever the length.
    """

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
        self._frames: list[bytes] = []
        self._file: BinaryIO | None = None
        self._wav: wave.Wave_write | None = None
        self._flusher: LoopingCall | None = None
        self._bytes_written = 0
        self._error = ""
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

    @property
    def current_path(self) -> str | None:
        """The file being recorded now (retention must not remove it)."""
        return self._path() if self._action is not None else None

    @property
    def buffered_bytes(self) -> int:
        """Captured audio not yet in the file."""
        return sum(len(f) for f in self._frames)

    def _path(self) -> str:
        assert self._action is not None
        return os.path.join(self.recordings_dir, self._action.path)

    def _begin_capture(self) -> None:
        if self._action is None:
            return
        self._bytes_written, self._error = 0, ""
        self._begin_file(self._path())
        self._frames = []
        self._media.recorder = self._frames if self._wav is not None else None
        if self._wav is not None:
            self._flusher = LoopingCall(self._flush)
            self._flusher.clock = self._reactor  # type: ignore[assignment]
            self._flusher.start(FLUSH_INTERVAL_S, now=False)
        self._timer = self._reactor.callLater(self._action.max_ms / 1000.0, self.finish, "maximum length")

    def _begin_file(self, path: str) -> None:
        """Open the WAV file (its header written, no frames yet)."""
        try:
            os.makedirs(self.recordings_dir, exist_ok=True)
            self._file = open(path, "wb")
            self._wav = wave.open(self._file, "wb")
            self._wav.setnchannels(1)
            self._wav.setsampwidth(2)
            self._wav.setframerate(self._rate_hz)
            self._wav.writeframes(b"")
        except OSError as e:
            self._error = f"cannot write {path}: {e.strerror}"
            log.error("call {call_id} recording {path} not written: {err}", path=path, err=e, **self._log_fields)
            self._close_file()

    def _flush(self) -> None:
        """Move the captured frames to the file (the media thread appends at the list's end meanwhile)."""
        n = len(self._frames)
        if n == 0 or self._wav is None:
            return
        chunk = b"".join(self._frames[:n])
        del self._frames[:n]
        try:
            self._wav.writeframes(chunk)
            assert self._file is not None
            self._file.flush()
            self._bytes_written += len(chunk)
        except (OSError, ValueError) as e:
            self._error = f"cannot write {self._path()}: {getattr(e, 'strerror', None) or e}"
            log.error("call {call_id} recording stopped: {err}", err=self._error, **self._log_fields)
            self._media.recorder = None
            self._stop_flusher()
            self._close_file()

    def _stop_flusher(self) -> None:
        flusher, self._flusher = self._flusher, None
        if flusher is not None and flusher.running:
            flusher.stop()

    def _close_file(self) -> None:
        wav, self._wav = self._wav, None
        f, self._file = self._file, None
        try:
            if wav is not None:
                wav.close()
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
        except (OSError, ValueError) as e:
            self._error = self._error or f"cannot write {self._path()}: {getattr(e, 'strerror', None) or e}"
        finally:
            if f is not None:
                f.close()

    def _save(self, why: str) -> tuple[str, int, str]:
        """Write the rest of what was captured and close the file; returns (path, duration_ms, error)."""
        path = self._path() if self._action is not None else ""
        if self._action is not None and self._flusher is None and self._wav is None and not self._error:
            self._begin_file(path)    # ended before capture began (during the beep): an empty file
        self._media.recorder = None
        self._stop_flusher()
        self._flush()
        self._close_file()
        self._frames = []
        self._action = None
        ms = int(duration_ms(self._bytes_written, self._rate_hz))
        if self._error:
            return path, ms, self._error
        self.recordings.append(path)
        log.info("call {call_id} recorded {ms} ms to {path} ({why})", ms=ms, path=path, why=why,
                 **self._log_fields)
        return path, ms, ""

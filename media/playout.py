"""Per-call playout buffer between the agent (reactor thread) and the
conference bridge (pjmedia's clock thread).

The agent queues *segments* (one prompt or one streamed reply each); the
bridge pulls fixed-size frames and gets silence when nothing is queued.
A lock guards the queue for microseconds only; the clock thread never waits on
anything else. What was actually played is counted per segment, so the agent
knows how much of a prompt the caller heard, and a flush (barge-in) reports it.
"""
from __future__ import annotations

import enum
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable


class PlayoutEventType(enum.Enum):
    STARTED = "started"      # the segment's first frame went to the bridge
    FINISHED = "finished"    # its last frame went out (and no more audio is coming)
    FLUSHED = "flushed"      # it was dropped by a flush before it finished


@dataclass(frozen=True)
class PlayoutEvent:
    type: PlayoutEventType
    segment_id: int
    played_bytes: int
    total_bytes: int
    #: time.monotonic() on the thread that produced the event
    at_s: float


@dataclass
class _Segment:
    segment_id: int
    chunks: deque[bytes] = field(default_factory=deque)
    offset: int = 0           # bytes consumed of chunks[0]
    queued_bytes: int = 0
    played_bytes: int = 0
    complete: bool = False    # no more audio will be appended
    started: bool = False


class PlayoutBuffer:
    """Thread-safe queue of audio segments, pulled frame by frame."""

    def __init__(self, on_event: Callable[[PlayoutEvent], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._segments: deque[_Segment] = deque()
        self._by_id: dict[int, _Segment] = {}
        self._next_id = 1
        self._on_event = on_event or (lambda event: None)
        self._monotonic = monotonic
        self.underruns = 0
        self.frames_pulled = 0
        self.voiced_frames = 0
        self._paused = False

    # -- reactor side ---------------------------------------------------
    def open_segment(self) -> int:
        with self._lock:
            seg = _Segment(self._next_id)
            self._next_id += 1
            self._segments.append(seg)
            self._by_id[seg.segment_id] = seg
            return seg.segment_id

    def append(self, segment_id: int, pcm: bytes) -> None:
        if not pcm:
            return
        with self._lock:
            seg = self._by_id.get(segment_id)
            if seg is None or seg.complete:
                return
            seg.chunks.append(pcm)
            seg.queued_bytes += len(pcm)

    def close_segment(self, segment_id: int) -> None:
        """No more audio will be appended; FINISHED follows once it has played."""
        events: list[PlayoutEvent] = []
        with self._lock:
            seg = self._by_id.get(segment_id)
            if seg is None:
                return
            seg.complete = True
            if seg.played_bytes >= seg.queued_bytes and self._segments and self._segments[0] is seg:
                events.append(self._finish(seg))
        for e in events:
            self._on_event(e)

    def play(self, pcm: bytes) -> int:
        """Queue a whole segment at once; return its id."""
        sid = self.open_segment()
        self.append(sid, pcm)
        self.close_segment(sid)
        return sid

    def pause(self) -> bool:
        """Hold the queued audio where it is and send silence (a possible interruption).

        Thread-safe; returns False when nothing is playing."""
        with self._lock:
            if not self._segments or self._paused:
                return False
            self._paused = True
            return True

    def resume(self) -> None:
        """Continue a paused segment exactly where it stopped."""
        with self._lock:
            self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def flush(self) -> list[PlayoutEvent]:
        """Drop everything queued (barge-in). Returns a FLUSHED event per segment."""
        now = self._monotonic()
        with self._lock:
            self._paused = False
            dropped = list(self._segments)
            self._segments.clear()
            self._by_id.clear()
        events = [PlayoutEvent(PlayoutEventType.FLUSHED, s.segment_id, s.played_bytes, s.queued_bytes, now)
                  for s in dropped]
        for e in events:
            self._on_event(e)
        return events

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._segments)

    # -- clock-thread side ------------------------------------------------
    def pull_frame(self, nbytes: int) -> bytes:
        """Next *nbytes* of audio, or silence. Never blocks beyond the lock."""
        events: list[PlayoutEvent] = []
        out = bytearray()
        with self._lock:
            self.frames_pulled += 1
            while len(out) < nbytes and self._segments and not self._paused:
                seg = self._segments[0]
                if not seg.started and seg.chunks:
                    seg.started = True
                    events.append(PlayoutEvent(PlayoutEventType.STARTED, seg.segment_id, 0,
                                               seg.queued_bytes, self._monotonic()))
                while len(out) < nbytes and seg.chunks:
                    chunk = seg.chunks[0]
                    take = min(nbytes - len(out), len(chunk) - seg.offset)
                    out += chunk[seg.offset: seg.offset + take]
                    seg.offset += take
                    seg.played_bytes += take
                    if seg.offset >= len(chunk):
                        seg.chunks.popleft()
                        seg.offset = 0
                if not seg.chunks:
                    if seg.complete:
                        events.append(self._finish(seg))
                        continue
                    if seg.started and len(out) < nbytes:
                        self.underruns += 1  # streaming audio did not arrive in time
                    break
            if out:
                self.voiced_frames += 1
        for e in events:
            self._on_event(e)
        if len(out) < nbytes:
            out += bytes(nbytes - len(out))
        return bytes(out)

    def _finish(self, seg: _Segment) -> PlayoutEvent:
        # Caller holds the lock.
        if self._segments and self._segments[0] is seg:
            self._segments.popleft()
        self._by_id.pop(seg.segment_id, None)
        return PlayoutEvent(PlayoutEventType.FINISHED, seg.segment_id, seg.played_bytes,
                            seg.queued_bytes, self._monotonic())

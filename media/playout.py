"""Per-call playout buffer between the agent (reactor thread) and the
conference bridge (pjmedia's clock thread).

The agent queues *segments* (one prompt or one streamed reply each); the
bridge pulls fixed-size frames and gets silence when nothing is queued.
A lock guards the queue for microseconds only; the clock thread never waits on
anything else. What was actually played is counted per segment, so the agent
knows how much of a prompt the caller heard, and a flush (barge-in) reports it.
A pause (a caller's voice over the prompt) fades the audio out over one frame and a resume
fades it back in, skipping the silence the pause stood in for (:meth:`PlayoutBuffer.resume`).
A duck lowers the prompt's gain over a short ramp and lets it play on underneath (a voice still
being judged once the pause would leave a hole); an unduck ramps it back up. The gain moves
sample by sample, so neither leaves a gap nor a jump in the audio (:meth:`PlayoutBuffer.duck`).
"""
from __future__ import annotations

import enum
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from media.convert import rms_dbfs
from media.frames import BYTES_PER_SAMPLE
from media.trim import fade

#: a prompt frame under this level is silence between its words or sentences (see
#: :meth:`PlayoutBuffer.resume`)
QUIET_DBFS = -50.0
#: a resumed prompt shortens its next silence only if it comes within this much audio
SKIP_LOOKAHEAD_S = 0.2
#: a ducked prompt's gain: 24 dB down puts a prompt's loudest 20 ms (-19 to -23 dBFS) under
#: -40 dBFS, well under a caller's voice (-10 to -20 dBFS): the agent has given way, yet the prompt
#: is still there, faint, and keeps its time (docs/latency.md)
DUCK_DB = -24.0
#: how fast a duck lowers the prompt and how gently an unduck brings it back
DUCK_RAMP_MS = 5.0
UNDUCK_RAMP_MS = 40.0


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
                 monotonic: Callable[[], float] = time.monotonic, sample_rate_hz: int = 16000) -> None:
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
        self._paused_at = 0.0
        #: the line is on hold: nothing is played, nothing moves, until release()
        self._held = False
        self._bytes_per_s = sample_rate_hz * BYTES_PER_SAMPLE
        #: bytes of prompt silence a resume skipped, in total
        self.skipped_bytes = 0
        #: after a resume: how much of the prompt's next silence may still be skipped, how much
        #: audio may still come before it, and whether that silence has begun
        self._skip_credit = 0
        self._skip_lookahead = 0
        self._skipping = False
        #: a pause fades the frame it interrupts out, a resume fades its first frame in: a prompt
        #: cut mid-word at full level clicks
        self._fade_out = False
        self._fade_in = False
        #: the prompt's gain now (linear), where it is ramping to, and by how much per sample
        self._gain = 1.0
        self._gain_target = 1.0
        self._gain_step = 0.0
        #: a ducked segment waits at its end instead of ending (see :meth:`duck`)
        self._hold_at_end = True

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
            self._paused_at = self._monotonic()
            self._skip_credit = 0
            self._fade_out = self._segments[0].started
            return True

    def resume(self) -> None:
        """Continue a paused segment where it stopped, less the silence the pause stood in for.

        The caller has just had a silence as long as the pause. The next silence of the prompt
        (its frames under QUIET_DBFS), if it comes within SKIP_LOOKAHEAD_S of audio (the end of
        the word it paused in), is shortened by as much as the pause lasted: paused at the end of
        a sentence, the prompt goes on with the next one instead of pausing a second time. Words
        are never skipped."""
        with self._lock:
            if not self._paused:
                return
            self._paused = False
            self._fade_in = not self._fade_out  # a pause that did not play its fade needs none in
            self._fade_out = False
            self._skip_credit = round((self._monotonic() - self._paused_at) * self._bytes_per_s)
            self._skip_lookahead = round(SKIP_LOOKAHEAD_S * self._bytes_per_s)
            self._skipping = False

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def paused_at(self) -> float:
        """When the playout last paused (on its *monotonic* clock)."""
        return self._paused_at

    def duck(self, depth_db: float = DUCK_DB, ramp_ms: float = DUCK_RAMP_MS, hold_at_end: bool = True) -> bool:
        """Lower the prompt by *depth_db* over *ramp_ms* (unless it is already lowered) and let it
        play on underneath, resumed if paused. Thread-safe; returns False when nothing is playing.

        *hold_at_end*: a segment that runs out while ducked waits at its end for :meth:`unduck`
        (a voice still being judged); False lets it end (a voice already judged)."""
        with self._lock:
            if not self._segments:
                return False
            self._hold_at_end = hold_at_end
            if self._gain_target >= 1.0:
                self._ramp_to(10.0 ** (depth_db / 20.0), ramp_ms)
        self.resume()
        return True

    def hold_ducked_end(self, hold: bool) -> None:
        """Whether a segment that runs out while ducked waits at its end (see :meth:`duck`):
        not when another prompt follows it, which then plays on, ducked, in its place."""
        with self._lock:
            self._hold_at_end = hold

    def unduck(self, ramp_ms: float = UNDUCK_RAMP_MS) -> None:
        """Bring a ducked prompt back to its own level over *ramp_ms* (and resume it if paused)."""
        self.resume()
        with self._lock:
            if self._gain_target < 1.0:
                self._ramp_to(1.0, ramp_ms)

    @property
    def ducked(self) -> bool:
        """Is the prompt lowered, or being lowered (not yet ramping back up)?"""
        return self._gain_target < 1.0

    @property
    def gain(self) -> float:
        """The prompt's gain on the next sample (linear, 1.0 = its own level)."""
        return self._gain

    def _ramp_to(self, target: float, ramp_ms: float) -> None:
        # Caller holds the lock.
        samples = max(1, round(ramp_ms * self._bytes_per_s / BYTES_PER_SAMPLE / 1000.0))
        self._gain_target = target
        self._gain_step = (target - self._gain) / samples

    def hold(self) -> None:
        """The call is on hold: send silence and keep every queued segment as it is (audio
        queued meanwhile waits too) until :meth:`release`. Independent of pause/resume."""
        with self._lock:
            self._held = True

    def release(self) -> None:
        """Off hold: play on from where the hold stopped (the first frame faded in)."""
        with self._lock:
            if not self._held:
                return
            self._held = False
            self._fade_in = bool(self._segments and self._segments[0].started and not self._paused)

    @property
    def held(self) -> bool:
        return self._held

    def flush(self) -> list[PlayoutEvent]:
        """Drop everything queued (barge-in). Returns a FLUSHED event per segment."""
        now = self._monotonic()
        with self._lock:
            self._paused = False
            self._skip_credit = 0
            self._fade_out = self._fade_in = False
            self._gain = self._gain_target = 1.0
            self._gain_step = 0.0
            dropped = list(self._segments)
            self._segments.clear()
            self._by_id.clear()
        events = [PlayoutEvent(PlayoutEventType.FLUSHED, s.segment_id, s.played_bytes, s.queued_bytes, now)
                  for s in dropped]
        for e in events:
            self._on_event(e)
        return events

    def words_left(self) -> bool:
        """Is any queued audio still to be heard: a 20 ms frame at QUIET_DBFS or louder, or a
        segment that more audio may still come to? False when all that is left of the prompt
        is its closing silence (a pause there holds back none of its words). Thread-safe."""
        with self._lock:
            if any(not seg.complete for seg in self._segments):
                return True
            rests = [(list(seg.chunks), seg.offset) for seg in self._segments]
        frame = self._bytes_per_s // 50
        for chunks, offset in rests:
            pcm = memoryview(b"".join(chunks))[offset:]
            # the prompt's next word usually comes within a few frames: stop at the first one
            if any(rms_dbfs(pcm[i:i + frame]) >= QUIET_DBFS for i in range(0, len(pcm) - 1, frame)):
                return True
        return False

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
            if self._held:
                return bytes(nbytes)
            fade_up: bool | None = None
            if self._paused and self._fade_out and self._segments:
                # The pause fades out the frame it came in: that frame is played, going quiet.
                self._fade_out = False
                seg = self._segments[0]
                out += self._take(seg, nbytes)
                fade_up = False
                if not seg.chunks and seg.complete:
                    events.append(self._finish(seg))
            elif self._fade_in and not self._paused and self._segments:
                self._fade_in = False
                fade_up = True
            while len(out) < nbytes and self._segments and not self._paused:
                seg = self._segments[0]
                if not seg.started and seg.chunks:
                    seg.started = True
                    events.append(PlayoutEvent(PlayoutEventType.STARTED, seg.segment_id, 0,
                                               seg.queued_bytes, self._monotonic()))
                if self._skip_credit and not out:
                    self._skip_quiet(seg, nbytes)
                out += self._take(seg, nbytes - len(out))
                if not seg.chunks:
                    if seg.complete and self._gain_target < 1.0 and self._hold_at_end:
                        # A ducked prompt does not end under the caller's voice: it waits at its
                        # end, where a silence is no hole, until the voice is judged (an
                        # interruption then stops it whole, an acknowledgement lets it end).
                        self._paused = True
                        self._paused_at = self._monotonic()
                        break
                    if seg.complete:
                        events.append(self._finish(seg))
                        continue
                    if seg.started and len(out) < nbytes:
                        self.underruns += 1  # streaming audio did not arrive in time
                    break
            if out:
                self.voiced_frames += 1
                if fade_up is not None:
                    out = bytearray(fade(bytes(out), up=fade_up))
                if self._gain != 1.0 or self._gain_target != 1.0:
                    out = bytearray(self._apply_gain(bytes(out)))
        for e in events:
            self._on_event(e)
        if len(out) < nbytes:
            out += bytes(nbytes - len(out))
        return bytes(out)

    def _apply_gain(self, pcm: bytes) -> bytes:
        """*pcm* scaled by the gain, which moves towards its target by one step a sample.
        Caller holds the lock."""
        samples = np.frombuffer(pcm[: len(pcm) // BYTES_PER_SAMPLE * BYTES_PER_SAMPLE], dtype="<i2")
        gains = np.full(len(samples), self._gain_target)
        if self._gain != self._gain_target and self._gain_step:
            ramp_left = max(0, round((self._gain_target - self._gain) / self._gain_step))
            k = min(len(samples), ramp_left)
            gains[:k] = self._gain + self._gain_step * np.arange(1, k + 1)
            self._gain = float(gains[k - 1]) if k else self._gain
            if k == ramp_left:
                self._gain = self._gain_target
        else:
            self._gain = self._gain_target
        scaled = np.clip(np.rint(samples * gains), -32768, 32767).astype("<i2")
        return scaled.tobytes() + pcm[len(samples) * BYTES_PER_SAMPLE:]

    def _skip_quiet(self, seg: _Segment, nbytes: int) -> None:
        """After a resume: drop the quiet frames ahead, within the credit (see :meth:`resume`).
        Caller holds the lock."""
        while self._skip_credit >= nbytes:
            ahead = self._peek(seg, nbytes)
            if len(ahead) < nbytes:
                return  # not queued yet (a streamed prompt): look again at the next frame
            if rms_dbfs(ahead) < QUIET_DBFS:
                self._take(seg, nbytes)
                self._skip_credit -= nbytes
                self.skipped_bytes += nbytes
                self._skipping = True
                continue
            if self._skipping or self._skip_lookahead <= 0:
                self._skip_credit = 0  # the silence is over, or none came soon enough
            else:
                self._skip_lookahead -= nbytes
            return
        self._skip_credit = 0

    @staticmethod
    def _take(seg: _Segment, nbytes: int) -> bytes:
        """Up to *nbytes* of the segment's queued audio, counted as played. Caller holds the lock."""
        out = bytearray()
        while len(out) < nbytes and seg.chunks:
            chunk = seg.chunks[0]
            take = min(nbytes - len(out), len(chunk) - seg.offset)
            out += chunk[seg.offset: seg.offset + take]
            seg.offset += take
            seg.played_bytes += take
            if seg.offset >= len(chunk):
                seg.chunks.popleft()
                seg.offset = 0
        return bytes(out)

    @staticmethod
    def _peek(seg: _Segment, nbytes: int) -> bytes:
        """Up to *nbytes* of the segment's queued audio, left queued. Caller holds the lock."""
        out = bytearray()
        offset = seg.offset
        for chunk in seg.chunks:
            out += chunk[offset: offset + nbytes - len(out)]
            offset = 0
            if len(out) >= nbytes:
                break
        return bytes(out)

    def _finish(self, seg: _Segment) -> PlayoutEvent:
        # Caller holds the lock.
        if self._segments and self._segments[0] is seg:
            self._segments.popleft()
        self._by_id.pop(seg.segment_id, None)
        return PlayoutEvent(PlayoutEventType.FINISHED, seg.segment_id, seg.played_bytes,
                            seg.queued_bytes, self._monotonic())

"""The sans-I/O core of mid-call speech failover: settings, events, what to replay and when a
recognition stream has stalled (no clock, no network: times and audio go in, decisions come out).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

BYTES_PER_SAMPLE = 2


@dataclass(frozen=True)
class FailoverSettings:
    #: voiced audio with no result for this long = stall suspected (also the synthesis gap)
    stall_timeout_ms: int = 400
    #: a suspected stall moves the call after this long even while probes still succeed
    hard_stall_timeout_ms: int = 1500
    #: a synthesis request with no audio for this long is stalled
    tts_first_audio_timeout_ms: int = 800
    #: the server's default trailing silence, when the session does not set stop_history_ms
    default_stop_history_ms: int = 800
    #: buffer kept from this long after the last word of a final (inside the ending silence)
    final_margin_ms: int = 150
    #: caller audio kept for replay at most (the recogniser cuts utterances at 30 s)
    max_buffer_ms: int = 35_000
    #: unvoiced audio kept before the first voiced audio in a replay
    preroll_ms: int = 400
    #: the prober's interval (confirmation: the region's probes unanswered for interval + RTT + 100 ms)
    probe_interval_ms: int = 250
    #: how often streams check for stalls
    check_interval_ms: int = 25
    #: moves per stream before its error reaches the session
    max_failovers: int = 3


@dataclass(frozen=True)
class FailoverEvent:
    """One move of one stream of a call (``to_region`` None: no region was left)."""

    call_id: str
    kind: str  # "asr" or "tts"
    from_region: str
    to_region: str | None
    reason: str
    at: float


class ReplayBuffer:
    """Caller audio since the last final, addressed by global byte offsets.

    Offsets count every byte the caller pushed. Leading unvoiced audio beyond
    ``preroll_bytes`` before the first voiced chunk is dropped as it ages (silence need
    not be replayed); past ``max_bytes`` the oldest audio goes and, if it was voiced,
    is counted in :attr:`lost_voiced_bytes`.
    """

    def __init__(self, *, max_bytes: int, preroll_bytes: int) -> None:
        self._chunks: deque[tuple[int, bytes, bool]] = deque()
        self._max = max_bytes
        self._preroll = preroll_bytes
        self.end = 0
        self._size = 0
        self._voiced_bytes = 0
        self.lost_voiced_bytes = 0
        self.lost_voiced_chunks = 0

    @property
    def start(self) -> int:
        return self._chunks[0][0] if self._chunks else self.end

    @property
    def size(self) -> int:
        return self._size

    def append(self, pcm: bytes, voiced: bool) -> None:
        self._chunks.append((self.end, pcm, voiced))
        self.end += len(pcm)
        self._size += len(pcm)
        if voiced:
            self._voiced_bytes += len(pcm)
        self._trim()

    def discard_before(self, offset: int) -> None:
        """Forget audio before ``offset`` (a chunk straddling it is cut)."""
        offset -= offset % BYTES_PER_SAMPLE
        while self._chunks and self._chunks[0][0] < offset:
            start, pcm, voiced = self._chunks.popleft()
            self._size -= len(pcm)
            if voiced:
                self._voiced_bytes -= len(pcm)
            if start + len(pcm) > offset:
                rest = pcm[offset - start :]
                self._chunks.appendleft((offset, rest, voiced))
                self._size += len(rest)
                if voiced:
                    self._voiced_bytes += len(rest)
                break
        self._trim()

    def _pop_head(self) -> None:
        _, pcm, voiced = self._chunks.popleft()
        self._size -= len(pcm)
        if voiced:
            self._voiced_bytes -= len(pcm)

    def _trim(self) -> None:
        while self._size > self._max and self._chunks:
            _, pcm, voiced = self._chunks[0]
            if voiced:
                self.lost_voiced_bytes += len(pcm)
                self.lost_voiced_chunks += 1
            self._pop_head()
        # leading silence beyond the preroll: not needed for a replay
        while len(self._chunks) > 1:
            start, pcm, voiced = self._chunks[0]
            if voiced:
                break
            first_voiced = next((s for s, _, v in self._chunks if v), None) if self._voiced_bytes else None
            horizon = first_voiced if first_voiced is not None else self.end
            if horizon - (start + len(pcm)) < self._preroll:
                break
            self._pop_head()

    def has_voiced(self) -> bool:
        return self._voiced_bytes > 0

    def replay(self) -> tuple[int, bytes]:
        """``(offset of the first byte, audio)`` to feed a new stream."""
        return self.start, b"".join(pcm for _, pcm, _ in self._chunks)


class StallDetector:
    """Decides from result timing whether a recognition stream has stalled (times in s)."""

    def __init__(self, *, stall_timeout_s: float, stop_history_s: float) -> None:
        self.stall_timeout_s = stall_timeout_s
        self.stop_history_s = stop_history_s
        self._first_unanswered_voiced: float | None = None
        self._last_voiced: float | None = None
        self._last_response: float | None = None
        self._in_utterance = False

    def reset(self, now: float, awaiting: bool) -> None:
        """A new stream opened at ``now``; ``awaiting``: it was fed voiced audio (a replay)."""
        self._first_unanswered_voiced = now if awaiting else None
        self._last_voiced = now if awaiting else None
        self._last_response = now
        self._in_utterance = False

    def on_audio(self, now: float, voiced: bool) -> None:
        if voiced:
            # Unanswered voice counts only while it goes on: a noise burst, then seconds of
            # quiet, then new speech is not "speaking for seconds without a result".
            gap = self.stall_timeout_s
            if (self._first_unanswered_voiced is None
                    or (self._last_voiced is not None and now - self._last_voiced > gap)):
                self._first_unanswered_voiced = now
            self._last_voiced = now

    def on_response(self, now: float, final: bool) -> None:
        self._last_response = now
        self._first_unanswered_voiced = None
        self._in_utterance = not final

    def check(self, now: float, rtt_s: float = 0.0) -> tuple[str, float, bool] | None:
        """``(reason, since, hard)`` when a result is overdue, else None.

        ``hard``: the suspicion may move the stream on its own after a hard timeout from
        ``since``; otherwise only when the region's probes confirm the path is dead."""
        deadline_s = self.stall_timeout_s + rtt_s
        f = self._first_unanswered_voiced
        if f is not None and self._last_voiced is not None:
            if self._last_voiced - f >= self.stall_timeout_s and now - f >= deadline_s:
                return "no_result_while_speaking", f, True
        if self._in_utterance:
            since = max(self._last_voiced or 0.0, self._last_response or 0.0)
            if now - since >= self.stop_history_s + deadline_s:
                return "no_final", since, True
            # An utterance is under way, so results (interims, then a final) are due; a
            # pause in speech or its end does not change that. Only with a dead path.
            last = self._last_response or 0.0
            if now - last >= deadline_s:
                return "no_result_in_utterance", last, False
        return None

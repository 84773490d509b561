"""Mid-call failover of recognition and synthesis streams (agent/speech/failover.py).

Fake per-endpoint clients stand in for the Riva streams; a fake clock drives stall
detection; region health is fed into a real RegionSelector by hand ("probes answered"
or not). Audio: 20 ms chunks of 16 kHz pcm16, voiced (a -20 dBFS tone) or silent.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Callable

import pytest
from twisted.internet.task import Clock, LoopingCall

from agent.regions.selector import RegionSelector, RegionSpec, Selection
from agent.speech.client import RecognitionOptions, SpeechError
from agent.speech.failover import (
    FailoverEvent,
    FailoverSettings,
    RegionalSpeech,
    ReplayBuffer,
    SpeechClientPool,
    StallDetector,
    VoicingMeter,
)
from tests.fakes import FakeReactor

RATE = 16000
CHUNK = 640  # 20 ms
VOICED = struct.pack("<320h", *(int(3000 * math.sin(2 * math.pi * 440 * i / RATE)) for i in range(320)))
SILENT = b"\0" * CHUNK




class FakeRecognition:
    def __init__(self, address: str, kw: dict[str, Any]) -> None:
        self.address = address
        self.kw = kw
        self.pushed: list[bytes] = []
        self.input_ended = False
        self.closed = False
        self.done = False

    @property
    def audio(self) -> bytes:
        return b"".join(self.pushed)

    def push_audio(self, pcm: bytes) -> None:
        self.pushed.append(pcm)

    def end_input(self) -> None:
        self.input_ended = True

    def close(self) -> None:
        self.closed = True
        self.done = True

    # the server side
    def interim(self, text: str) -> None:
        self.kw["on_interim"](text)

    def final(self, text: str, end_s: float | None, processed_s: float) -> None:
        self.kw["on_final_marks"](end_s, processed_s)
        self.kw["on_final"](text, 0.9)

    def fail(self, retryable: bool = True) -> None:
        self.done = True
        self.kw["on_error"](SpeechError("streaming recognition failed: UNAVAILABLE", retryable=retryable, code="UNAVAILABLE"))


class FakeSynthesis:
    def __init__(self, address: str, text: str, kw: dict[str, Any]) -> None:
        self.address = address
        self.text = text
        self.kw = kw
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def audio(self, pcm: bytes) -> None:
        self.kw["on_audio"](pcm)

    def finish(self) -> None:
        self.kw["on_done"]()

    def fail(self) -> None:
        self.kw["on_error"](SpeechError("streaming synthesis failed: UNAVAILABLE", retryable=True))


class FakeClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self.recognitions: list[FakeRecognition] = []
        self.syntheses: list[FakeSynthesis] = []

    def open_recognition(self, options: Any, **kw: Any) -> FakeRecognition:
        stream = FakeRecognition(self.address, {"options": options, **kw})
        self.recognitions.append(stream)
        return stream

    def synthesize_stream(self, text: str, **kw: Any) -> FakeSynthesis:
        stream = FakeSynthesis(self.address, text, kw)
        self.syntheses.append(stream)
        return stream

    def close(self) -> None:
        pass


class World:
    """Regions a (20 ms), b (60 ms), c (100 ms); probes answered for the names in ``alive``."""

    def __init__(self, names: tuple[str, ...] = ("a", "b", "c"), settings: FailoverSettings | None = None) -> None:
        self.clock = FakeReactor()
        self.rtt = {"a": 0.02, "b": 0.06, "c": 0.1}
        self.selector = RegionSelector([RegionSpec(n, (f"{n}:1",), (f"{n}:1",)) for n in names])
        self.alive = set(names)
        self.clients = {f"{n}:1": FakeClient(f"{n}:1") for n in names}
        self.pool = SpeechClientPool(factory=lambda address: self.clients[address])  # type: ignore[arg-type,return-value]
        self.events: list[FailoverEvent] = []
        self._probe()
        self._loop = LoopingCall(self._probe)
        self._loop.clock = self.clock
        self._loop.start(0.25, now=False)
        selection = self.selector.select(None, None, now=self.clock.seconds())
        assert isinstance(selection, Selection) and selection.region == "a"
        self.speech = RegionalSpeech(
            self.clock, self.selector, self.pool, selection, call_id="c1",
            settings=settings or FailoverSettings(), on_failover=self.events.append,
        )
        self.interims: list[str] = []
        self.finals: list[str] = []
        self.errors: list[Exception] = []

    def _probe(self) -> None:
        for n in self.alive:
            self.selector.on_probe_response(f"{n}:1", self.clock.seconds(), self.rtt[n])

    def client(self, name: str) -> FakeClient:
        return self.clients[f"{name}:1"]

    def open(self, **kw: Any) -> Any:
        return self.speech.open_recognition(
            RecognitionOptions(sample_rate_hz=RATE, stop_history_ms=kw.pop("stop_history_ms", 500), **kw),
            on_interim=self.interims.append,
            on_final=lambda text, conf: self.finals.append(text), on_error=self.errors.append,
        )

    def talk(self, stream: Any, chunks: list[bytes], *, each: Callable[[int], None] | None = None) -> None:
        """Push 20 ms chunks in real (fake) time."""
        for i, chunk in enumerate(chunks):
            stream.push_audio(chunk)
            if each is not None:
                each(i)
            self.clock.advance(0.02)

    def run(self, seconds: float) -> None:
        for _ in range(int(round(seconds / 0.01))):
            self.clock.advance(0.01)


def tone(n: int) -> list[bytes]:
    return [VOICED] * n


def quiet(n: int) -> list[bytes]:
    return [SILENT] * n


# -- pure parts ------------------------------------------------------------------------------


def test_replay_buffer_discards_through_a_final_and_trims_old_silence() -> None:
    """discard_before cuts a straddling chunk; leading silence beyond the preroll goes."""
    buf = ReplayBuffer(max_bytes=10 * CHUNK, preroll_bytes=2 * CHUNK)
    buf.append(VOICED, True)
    buf.append(VOICED, True)
    buf.discard_before(CHUNK + 100)
    assert (buf.start, buf.size) == (CHUNK + 100, CHUNK - 100)
    buf.discard_before(2 * CHUNK)
    for _ in range(5):
        buf.append(SILENT, False)
    assert buf.size == 2 * CHUNK  # only the preroll of silence is kept
    buf.append(VOICED, True)
    origin, audio = buf.replay()
    assert audio == SILENT * 2 + VOICED
    assert origin == buf.end - len(audio)


def test_replay_buffer_overflow_counts_lost_voiced_audio() -> None:
    """Past max_bytes the oldest audio goes; voiced audio lost that way is counted."""
    buf = ReplayBuffer(max_bytes=3 * CHUNK, preroll_bytes=CHUNK)
    for _ in range(5):
        buf.append(VOICED, True)
    assert buf.size == 3 * CHUNK
    assert buf.lost_voiced_chunks == 2


def test_voicing_meter_hears_speech_not_silence_or_steady_hiss() -> None:
    """A tone is voiced; digital silence is not; steady hiss stops counting once the floor adapts."""
    meter = VoicingMeter(sample_rate_hz=RATE)
    assert meter.voiced(VOICED)
    assert not meter.voiced(SILENT)
    assert meter.voiced(SILENT, level_dbfs=-20.0)  # a level measured by the caller wins
    hiss = struct.pack("<320h", *((i * 7919) % 400 - 200 for i in range(320)))  # about -48 dBFS
    results = [meter.voiced(hiss) for _ in range(400)]
    assert not any(results[-50:])


def test_stall_detector_speech_without_results() -> None:
    """400 ms of voiced audio with no result is a stall; a result in between resets it."""
    d = StallDetector(stall_timeout_s=0.4, stop_history_s=0.5)
    for i in range(15):
        d.on_audio(i * 0.02, True)
    assert d.check(0.3) is None
    d.on_response(0.3, final=False)
    for i in range(15, 40):
        d.on_audio(i * 0.02, True)
    assert d.check(0.78) == ("no_result_while_speaking", 0.3, True)
    assert d.check(0.78, rtt_s=0.2) is None  # a far region gets its RTT on top


def test_stall_detector_missing_final() -> None:
    """In an utterance, results are due 400 ms after the last one (a dead path confirms);
    the final is due stop_history + 400 ms after the last voiced audio in any case."""
    d = StallDetector(stall_timeout_s=0.4, stop_history_s=0.5)
    d.on_audio(0.0, True)
    d.on_response(0.1, final=False)
    d.on_audio(0.2, True)
    for i in range(50):
        d.on_audio(0.22 + i * 0.02, False)
    assert d.check(0.49) is None
    assert d.check(0.51) == ("no_result_in_utterance", 0.1, False)  # only with a dead path
    assert d.check(1.11) == ("no_final", 0.2, True)
    d.on_response(1.05, final=True)
    assert d.check(5.0) is None


# -- recognition -----------------------------------------------------------------------------


def test_retryable_error_moves_to_the_next_region_and_replays_since_the_last_final() -> None:
    """Region a fails after one final and the start of a second utterance: b gets the
    audio from just after the final's last word (trimmed to the preroll) and then the
    live audio; the first final is not delivered again; load moves with the stream."""
    w = World()
    stream = w.open()
    w.talk(stream, tone(10) + quiet(40))
    a = w.client("a").recognitions[0]
    a.final("hello", end_s=0.2, processed_s=0.8)
    w.talk(stream, tone(5))
    a.fail()
    assert [e.to_region for e in w.events] == ["b"]
    b = w.client("b").recognitions[0]
    assert b.audio == SILENT * 20 + VOICED * 5  # 400 ms preroll of the 650 ms of silence kept, then the speech
    w.talk(stream, tone(2))
    assert b.audio.endswith(VOICED * 7)
    assert w.finals == ["hello"]
    b.final("world", end_s=0.6, processed_s=0.9)
    assert w.finals == ["hello", "world"]
    assert w.selector.active_streams("a") == 0 and w.selector.active_streams("b") == 1
    assert w.selector.failovers == {("a", "b"): 1}
    assert w.speech.record()["regions"] == ["a", "b"]
    assert stream.region == "b"
    assert w.errors == []


def test_results_from_the_old_region_after_a_move_are_dropped() -> None:
    """A final that the failed stream still produces after the move is never delivered:
    its audio was replayed and the new region reports it once."""
    w = World()
    stream = w.open()
    w.talk(stream, tone(20))
    a = w.client("a").recognitions[0]
    a.fail()
    a.final("stale", end_s=0.3, processed_s=0.4)
    a.interim("stale")
    assert w.finals == [] and w.interims == []
    w.client("b").recognitions[0].final("fresh", end_s=0.3, processed_s=0.5)
    assert w.finals == ["fresh"]


def test_stall_while_speaking_with_dead_probes_moves_within_half_a_second() -> None:
    """Region a goes silent (no results, probes unanswered) while the caller speaks: the
    stream moves within ~400 ms plus RTT and check interval, and no audio is lost."""
    w = World()
    stream = w.open()
    a = w.client("a").recognitions[0]
    w.talk(stream, tone(20), each=lambda i: a.interim("so far") if i % 10 == 9 else None)
    w.alive.discard("a")
    blackhole_at = w.clock.seconds()
    moved_at: list[float] = []
    w.talk(stream, tone(50), each=lambda i: moved_at.append(w.clock.seconds()) if w.events and not moved_at else None)
    assert moved_at, "no failover"
    assert moved_at[0] - blackhole_at <= 0.5
    b = w.client("b").recognitions[0]
    assert b.audio.count(VOICED) == 70  # everything since the stream opened (no final yet)
    assert w.events[0].reason.endswith("probes unanswered")


def test_suspected_stall_with_probes_answering_waits_for_the_hard_timeout() -> None:
    """No results while speaking but region a's probes still answer (a hung recogniser
    or speech it has no words for): the move waits for hard_stall_timeout_ms (1.5 s)."""
    w = World()
    stream = w.open()
    w.talk(stream, tone(60))
    assert w.events == []
    w.talk(stream, tone(25))
    assert len(w.events) == 1 and "for 1.5 s" in w.events[0].reason


def test_silence_is_never_a_stall() -> None:
    """Thirty seconds of silence with no results and region a's probes gone quiet: no move
    (a dead region is left by ejection, tested below, not by a silent caller)."""
    w = World()
    stream = w.open()
    w.alive.discard("a")
    w.talk(stream, quiet(1500))
    assert w.events == []


def test_speech_with_regular_interims_is_not_a_stall() -> None:
    """Three seconds of speech answered by an interim every 250 ms never looks stalled."""
    w = World()
    stream = w.open()
    a = w.client("a").recognitions[0]
    w.alive.discard("a")
    w.talk(stream, tone(150), each=lambda i: a.interim(f"word {i}") if i % 12 == 11 else None)
    assert w.events == []


def test_path_dying_after_the_caller_stopped_moves_an_utterance_under_way() -> None:
    """The caller finished a sentence (interims seen, no final yet) and region a dies:
    with its probes unanswered the stream moves ~400 ms after the last result, not only
    when the final is overdue, and replays the utterance."""
    w = World()
    stream = w.open()
    a = w.client("a").recognitions[0]
    w.talk(stream, tone(15), each=lambda i: a.interim("check my") if i == 10 else None)
    w.alive.discard("a")
    w.talk(stream, quiet(40))
    assert len(w.events) == 1 and w.events[0].reason == "stall (no_result_in_utterance), probes unanswered"
    assert w.events[0].at - 0.2 <= 0.5
    assert w.client("b").recognitions[0].audio.count(VOICED) == 15


def test_missing_final_with_probes_answering_moves_after_the_hard_timeout() -> None:
    """Interims came, the caller stopped, the final never comes, but the region's probes
    answer (a hung recogniser): the stream moves once the final is overdue and the hard
    timeout has passed, never because of a mere pause."""
    w = World()
    stream = w.open()
    a = w.client("a").recognitions[0]
    w.talk(stream, tone(15), each=lambda i: a.interim("check my") if i == 10 else None)
    w.talk(stream, quiet(70))
    assert w.events == []  # last voiced 0.28 s + 1.5 s not reached at 1.7 s
    w.talk(stream, quiet(10))
    assert len(w.events) == 1 and w.events[0].reason.startswith("stall (no_final) for 1.5 s")


def test_ejected_region_moves_an_idle_stream_too() -> None:
    """The prober ejects region a while the caller is silent: the stream moves at the next check."""
    w = World()
    stream = w.open()
    w.talk(stream, quiet(10))
    for _ in range(3):
        w.selector.on_probe_failure("a:1", w.clock.seconds())
    w.run(0.05)
    assert [(e.from_region, e.to_region) for e in w.events] == [("a", "b")]
    assert "region a down" in w.events[0].reason
    assert len(w.client("b").recognitions) == 1


def test_non_retryable_error_reaches_the_session_without_a_move() -> None:
    """INVALID_ARGUMENT-like errors would fail anywhere: they are reported, not failed over."""
    w = World()
    stream = w.open()
    w.client("a").recognitions[0].fail(retryable=False)
    assert w.events == [] and len(w.errors) == 1
    assert stream.done and w.selector.active_streams("a") == 0


def test_no_region_left_reports_a_retryable_error() -> None:
    """With the only region failed the session gets a retryable error and the move is
    counted as to 'none'."""
    w = World(names=("a",))
    w.open()
    w.client("a").recognitions[0].fail()
    assert len(w.errors) == 1 and getattr(w.errors[0], "retryable", False)
    assert w.selector.failovers == {("a", "none"): 1}


def test_stream_ending_without_error_before_end_of_input_moves() -> None:
    """A region stream that just ends (server restarted cleanly) is failed over too."""
    w = World()
    stream = w.open()
    w.talk(stream, tone(3))
    w.client("a").recognitions[0].done = True
    w.run(0.05)
    assert [e.to_region for e in w.events] == ["b"]
    assert not stream.done


def test_end_input_is_forwarded_and_done_follows_the_region_stream() -> None:
    """end_input half-closes the current region stream (and one opened after a move)."""
    w = World()
    stream = w.open()
    w.talk(stream, tone(25))
    stream.end_input()
    a = w.client("a").recognitions[0]
    assert a.input_ended
    a.fail()
    b = w.client("b").recognitions[0]
    assert b.input_ended and b.audio.count(VOICED) == 25
    b.done = True
    w.run(0.05)
    assert stream.wait_done(0)
    assert w.selector.active_streams("b") == 0


def test_close_releases_the_slot_and_silences_callbacks() -> None:
    """After close() no result reaches the session and the region slot is free."""
    w = World()
    stream = w.open()
    a = w.client("a").recognitions[0]
    assert w.selector.active_streams("a") == 1
    stream.close()
    assert a.closed and w.selector.active_streams("a") == 0
    a.final("late", end_s=None, processed_s=0.1)
    assert w.finals == []
    w.run(1.0)
    assert w.events == []


def test_move_limit_then_error() -> None:
    """After max_failovers moves the next failure goes to the session."""
    w = World(settings=FailoverSettings(max_failovers=1))
    w.open()
    w.client("a").recognitions[0].fail()
    w.client("b").recognitions[0].fail()
    assert len(w.events) == 1 and len(w.errors) == 1


# -- synthesis -------------------------------------------------------------------------------


def collect_synthesis(w: World, text: str = "Your balance is one hundred dollars.") -> tuple[Any, list[bytes], list[str], list[Exception]]:
    audio: list[bytes] = []
    done: list[str] = []
    errors: list[Exception] = []
    stream = w.speech.synthesize_stream(text, sample_rate_hz=RATE, on_audio=audio.append,
                                        on_done=lambda: done.append("done"), on_error=errors.append)
    return stream, audio, done, errors


def test_synthesis_error_mid_prompt_resumes_in_the_next_region_without_repeating() -> None:
    """a delivers 3 of 5 chunks and fails; b synthesises the same text and the first 3
    chunks' bytes are skipped: the caller gets each chunk once, in order."""
    w = World()
    stream, audio, done, errors = collect_synthesis(w)
    chunks = [bytes([i]) * 3200 for i in range(5)]
    a = w.client("a").syntheses[0]
    for c in chunks[:3]:
        a.audio(c)
    a.fail()
    b = w.client("b").syntheses[0]
    assert b.text == a.text
    for c in chunks:
        b.audio(c)
    b.finish()
    w.run(0.05)
    assert b"".join(audio) == b"".join(chunks)
    assert done == ["done"] and errors == []
    assert stream.region == "b" and w.selector.active_streams("b") == 0


def test_synthesis_with_no_first_audio_from_a_dead_region_moves() -> None:
    """No audio 800 ms + RTT after the request and probes unanswered: moved to b."""
    w = World()
    collect_synthesis(w)
    w.alive.discard("a")
    w.run(0.8)
    assert w.events == []
    w.run(0.1)
    assert [(e.kind, e.to_region) for e in w.events] == [("tts", "b")]


def test_synthesis_cancel_stops_callbacks_and_frees_the_slot() -> None:
    """cancel() cancels the region stream; later audio is dropped."""
    w = World()
    stream, audio, done, _ = collect_synthesis(w)
    a = w.client("a").syntheses[0]
    stream.cancel()
    a.audio(b"x" * 10)
    a.finish()
    assert audio == [] and done == [] and a.cancelled
    assert w.selector.active_streams("a") == 0


def test_a_call_moved_by_recognition_synthesises_in_its_new_region() -> None:
    """After the recognition stream moved the call to b, new prompts go to b."""
    w = World()
    w.open()
    w.client("a").recognitions[0].fail()
    collect_synthesis(w)
    assert len(w.client("b").syntheses) == 1 and w.client("a").syntheses == []
    assert w.speech.region == "b"


def test_second_stream_failing_in_the_old_region_follows_the_call() -> None:
    """A synthesis still in a when recognition already moved the call to b goes to b,
    without counting a second region failure."""
    w = World()
    w.open()
    stream, *_ = collect_synthesis(w)
    w.client("a").recognitions[0].fail()
    w.client("a").syntheses[0].fail()
    assert stream.region == "b"
    assert w.selector.failovers == {("a", "b"): 1}


@pytest.mark.parametrize(
    "end_s,processed_s,kept_from_s", [(None, 0.8, 0.7), (0.25, 0.8, 0.4), (0.1, 0.8, 0.35), (0.78, 0.8, 0.8)]
)
def test_buffer_start_after_a_final(end_s: float | None, processed_s: float, kept_from_s: float) -> None:
    """The buffer restarts at last word end + 150 ms, not before audio_processed -
    stop_history (500 ms) + 50 ms, not after audio_processed; without word times at
    audio_processed - 100 ms."""
    w = World(settings=FailoverSettings(preroll_ms=10_000))
    stream = w.open()
    w.talk(stream, tone(10) + quiet(40))
    w.client("a").recognitions[0].final("x", end_s=end_s, processed_s=processed_s)
    w.client("a").recognitions[0].fail()
    replayed = w.client("b").recognitions[0].audio
    assert len(replayed) == pytest.approx((1.0 - kept_from_s) * RATE * 2, abs=2)


def test_new_stream_after_every_region_failed_goes_to_one_that_is_usable() -> None:
    """Both regions' streams failed (the session got an error); b then reports
    NOT_SERVING: the session's reopened stream goes to a, which is healthy again."""
    w = World(names=("a", "b"))
    w.open()
    w.client("a").recognitions[0].fail()
    w.client("b").recognitions[0].fail()
    assert len(w.errors) == 1 and w.speech.region == "b"
    w.selector.on_status("b:1", w.clock.seconds(), serving=False)
    stream = w.open()
    assert stream.region == "a" and len(w.client("a").recognitions) == 2
    assert w.speech.record()["regions"] == ["a", "b", "a"]


def test_region_that_cannot_be_opened_during_a_move_reports_an_error() -> None:
    """If opening the stream in the next region raises, the session gets a retryable
    error and no slot stays taken."""
    w = World(names=("a", "b"))
    w.open()

    def broken(**kw: Any) -> Any:
        raise RuntimeError("bad endpoint")

    w.client("b").open_recognition = broken  # type: ignore[method-assign]
    w.client("a").recognitions[0].fail()
    assert len(w.errors) == 1 and getattr(w.errors[0], "retryable", False)
    assert w.selector.active_streams("a") == 0 and w.selector.active_streams("b") == 0


def test_a_noise_burst_then_quiet_then_speech_is_not_a_stall() -> None:
    """150 ms of sound the recogniser ignores, two seconds of quiet, then speech answered by
    interims: the unanswered burst does not add up with the later speech into a stall."""
    w = World()
    stream = w.open()
    a = w.client("a").recognitions[0]
    w.talk(stream, tone(8))
    w.talk(stream, quiet(100))
    w.talk(stream, tone(30), each=lambda i: a.interim(f"word {i}") if i % 10 == 9 else None)
    assert w.events == []


def test_a_suspected_stall_with_no_other_region_keeps_the_stream() -> None:
    """The only region answers late (probes slow, no results while the caller talks): the call
    keeps its stream rather than losing recognition, and nothing is counted as a move."""
    w = World(names=("a",))
    stream = w.open()
    w.alive.discard("a")  # probes go unanswered for a while (a busy server)
    w.talk(stream, tone(40))
    assert w.errors == [] and w.events == []
    assert w.selector.failovers == {}
    a = w.client("a").recognitions[0]
    w.alive.add("a")
    a.final("check my balance", 0.8, 0.8)
    assert w.finals == ["check my balance"]


def test_stall_checks_run_on_the_reactor_clock_and_survive_a_failing_check() -> None:
    """The checks tick every check_interval_ms of the injected clock (none before the first
    interval, none after close), and one check that raises does not end the checking."""
    w = World()
    stream = w.open()
    ticks: list[float] = []
    region_down = w.speech._region_down

    def checked_region(address: str, now: float) -> bool:  # the first thing every check asks
        ticks.append(now)
        if len(ticks) == 1:
            raise RuntimeError("a check failed")
        return region_down(address, now)

    w.speech._region_down = checked_region  # type: ignore[method-assign]
    w.run(0.02)
    assert ticks == []
    w.run(0.1)
    assert len(ticks) == 4  # at 25, 50, 75 and 100 ms
    stream.close()
    w.run(0.1)
    assert len(ticks) == 4


def test_the_calls_language_and_model_go_with_every_stream_in_every_region() -> None:
    """A call in en-GB with a pinned model: recognition options carry both, synthesis the
    language -- in the first region and after a move to the next."""
    w = World()
    w.speech.language_code, w.speech.asr_model = "en-GB", "parakeet-1.1b-en-US"
    stream = w.open()
    w.talk(stream, tone(5))
    first = w.client("a").recognitions[0].kw["options"]
    assert (first.language_code, first.model) == ("en-GB", "parakeet-1.1b-en-US")
    w.client("a").recognitions[0].fail()
    moved = w.client("b").recognitions[0].kw["options"]
    assert (moved.language_code, moved.model) == ("en-GB", "parakeet-1.1b-en-US")
    collect_synthesis(w)
    assert w.client("b").syntheses[0].kw["language_code"] == "en-GB"


def test_other_readings_follow_the_stream_and_not_an_old_region() -> None:
    """A session asking for other readings gets the current region's, in order with the results
    they belong to; the failed region's late ones are dropped like its results."""
    w = World()
    heard: list[tuple[str, object]] = []
    stream = w.speech.open_recognition(
        RecognitionOptions(sample_rate_hz=RATE, stop_history_ms=500, max_alternatives=3),
        on_interim=lambda text: heard.append(("interim", text)),
        on_final=lambda text, conf: heard.append(("final", text)), on_error=w.errors.append,
        on_alternatives=lambda texts: heard.append(("readings", texts)))
    w.talk(stream, tone(20))
    a = w.client("a").recognitions[0]
    assert a.kw["options"].max_alternatives == 3
    a.kw["on_alternatives"](("check my balance",))
    a.interim("chuck my ballot")
    w.run(0.01)
    assert heard == [("readings", ("check my balance",)), ("interim", "chuck my ballot")]
    a.fail()
    a.kw["on_alternatives"](("stale",))
    w.run(0.01)
    b = w.client("b").recognitions[0]
    b.kw["on_alternatives"](())
    b.final("check my balance", end_s=0.3, processed_s=0.5)
    w.run(0.01)
    assert heard[2:] == [("readings", ()), ("final", "check my balance")]


def test_a_session_not_asking_for_other_readings_gives_the_regions_no_callback() -> None:
    w = World()
    w.open()
    assert w.client("a").recognitions[0].kw["on_alternatives"] is None

"""Region routing against three simulated regions: real embedded speech servers, each
behind an ops/relay.py relay on loopback, probed by the real RegionProber on a running
Twisted reactor; calls' speech through RegionalSpeech with real gRPC streams.
"""
from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent.speech.server import flite
from media import convert
from agent.regions.probe import RegionProber
from agent.regions.selector import NoRegion, RegionSelector, RegionSpec, Selection
from agent.speech.client import RecognitionOptions, SpeechClient
from agent.speech.failover import FailoverEvent, RegionalSpeech, SpeechClientPool
from tests.integration.relay_fixtures import (
    SimRegions,
    load_relay_module,
    on_reactor,
    reactor_in_thread,
    start_regions,
    start_speech_server,
    stop_process,
)

pytestmark = pytest.mark.integration

RATE = 16000
CHUNK = 640  # 20 ms
DELAYS_MS = {"a": 5.0, "b": 20.0, "c": 45.0}  # one way: RTT 10, 40, 90 ms
PHRASES = ("check my balance", "please tell me the opening hours of the downtown branch")


def speech(text: str) -> bytes:
    pcm, rate = flite.synthesize(text, "kal16")
    return convert.resample(pcm, rate, RATE)


def silence(seconds: float) -> bytes:
    return b"\0\0" * int(RATE * seconds)


CALLER_AUDIO = silence(0.5) + speech(PHRASES[0]) + silence(1.0) + speech(PHRASES[1]) + silence(1.2)


@pytest.fixture(scope="module")
def sims() -> Iterator[SimRegions]:
    regions = start_regions(DELAYS_MS)
    yield regions
    regions.close()


@pytest.fixture()
def world(sims: SimRegions) -> Iterator[dict[str, Any]]:
    """A fresh selector + prober over the module's regions; relays reset afterwards."""
    reactor = reactor_in_thread()
    specs = [
        RegionSpec(n, (s.address,), (s.address,), model_versions=frozenset({"v1", "v2"} if n == "c" else {"v1"}))
        for n, s in sims.regions.items()
    ]
    selector = RegionSelector(specs)
    prober = RegionProber(reactor, selector, discover_versions=True)
    on_reactor(prober.start)
    on_reactor(lambda: prober.ready)
    wait_for(lambda: on_reactor(pick, selector, reactor) == "a", 10.0, "region a preferred")
    pool = SpeechClientPool()
    yield {"reactor": reactor, "selector": selector, "prober": prober, "pool": pool}
    on_reactor(prober.stop)
    pool.close()
    for name, s in sims.regions.items():
        s.relay.blackhole(False)
        s.relay.set(delay_ms=DELAYS_MS[name], jitter_ms=0.0, loss=0.0)


def pick(selector: RegionSelector, reactor: Any, pinned: tuple[str, ...] = ()) -> str | None:
    result = selector.select(None, None, pinned, now=reactor.seconds())
    return result.region if isinstance(result, Selection) else None


def wait_for(predicate: Any, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - start


def recognise(world: dict[str, Any], audio: bytes, *, blackhole: Any = None, at_s: float | None = None) -> dict[str, Any]:
    """Stream ``audio`` in real time through a call's RegionalSpeech; optionally blackhole
    ``blackhole`` (a relay) once ``at_s`` seconds of audio have been pushed."""
    reactor, selector, pool = world["reactor"], world["selector"], world["pool"]
    events: list[FailoverEvent] = []
    finals: list[str] = []
    errors: list[Exception] = []

    def open_call() -> tuple[RegionalSpeech, Any]:
        selection = selector.select(None, None, now=reactor.seconds())
        assert isinstance(selection, Selection)
        call = RegionalSpeech(reactor, selector, pool, selection, call_id="it", on_failover=events.append)
        stream = call.open_recognition(RecognitionOptions(sample_rate_hz=RATE, stop_history_ms=500),
                                       on_interim=lambda t: None,
                                       on_final=lambda t, c: finals.append(t), on_error=errors.append)
        return call, stream

    call, stream = on_reactor(open_call)
    start = time.monotonic()
    blackholed_at = None
    for i in range(0, len(audio), CHUNK):
        stream.push_audio(audio[i : i + CHUNK])
        pushed_s = (i + CHUNK) / (RATE * 2)
        if blackhole is not None and blackholed_at is None and at_s is not None and pushed_s >= at_s:
            blackhole.blackhole(True)
            blackholed_at = reactor.seconds()
        time.sleep(max(0.0, start + pushed_s - time.monotonic()))
    stream.end_input()
    assert stream.wait_done(20.0), "recognition did not finish"
    on_reactor(call.close)
    return {"finals": finals, "errors": errors, "events": events, "call": call, "stream": stream,
            "blackholed_at": blackholed_at}


def test_nearest_region_is_chosen_and_holds(world: dict[str, Any]) -> None:
    """With RTTs of 10, 40 and 90 ms through the relays, new calls go to a, and keep going
    there for two seconds of live probing; /regions-level RTTs are ordered like the relays."""
    selector, reactor = world["selector"], world["reactor"]
    seen = set()
    for _ in range(20):
        seen.add(on_reactor(pick, selector, reactor))
        time.sleep(0.1)
    assert seen == {"a"}
    views = {v.name: v for v in on_reactor(lambda: selector.view(reactor.seconds()))}
    assert views["a"].rtt_s < views["b"].rtt_s < views["c"].rtt_s
    assert 0.040 <= views["b"].rtt_s < 0.150
    assert "asr:pocketsphinx-en-US" in views["a"].versions  # discovered from the server


def test_blackhole_mid_utterance_loses_no_words_and_duplicates_none(world: dict[str, Any], sims: SimRegions) -> None:
    """Region a is blackholed in the middle of the caller's second sentence: the stream
    moves to b, the buffered audio is replayed, and the transcript is word for word the
    one of the same audio without failover; no chunk was lost."""
    baseline = recognise(world, CALLER_AUDIO)
    assert baseline["events"] == [] and baseline["errors"] == []
    assert len(baseline["finals"]) == 2
    # the second sentence starts at 0.5 + len(first) + 1.0 s; blackhole 1 s into it
    at_s = 0.5 + len(speech(PHRASES[0])) / (RATE * 2) + 1.0 + 1.0
    moved = recognise(world, CALLER_AUDIO, blackhole=sims["a"].relay, at_s=at_s)
    assert moved["errors"] == []
    assert [(e.from_region, e.to_region) for e in moved["events"]] == [("a", "b")]
    assert moved["finals"] == baseline["finals"]
    assert moved["stream"].dropped_chunks == 0
    detection_s = moved["events"][0].at - moved["blackholed_at"]
    assert detection_s <= 1.5
    assert moved["call"].record()["regions"] == ["a", "b"]


def test_new_calls_avoid_a_blackholed_region_and_return_after(world: dict[str, Any], sims: SimRegions) -> None:
    """Blackholing a makes new calls go to b within about a second; lifting it brings them back."""
    selector, reactor = world["selector"], world["reactor"]
    sims["a"].relay.blackhole(True)
    took = wait_for(lambda: on_reactor(pick, selector, reactor) == "b", 5.0, "calls leaving a")
    assert took <= 2.0
    sims["a"].relay.blackhole(False)
    wait_for(lambda: on_reactor(pick, selector, reactor) == "a", 30.0, "calls returning to a")


def test_pinned_version_lands_on_the_far_region(world: dict[str, Any]) -> None:
    """Only c (9x a's RTT) serves v2: pinned calls go there, unpinned ones to a, and a
    version nobody serves is refused with Retry-After."""
    selector, reactor = world["selector"], world["reactor"]
    for _ in range(10):
        assert on_reactor(pick, selector, reactor, ("v2",)) == "c"
        assert on_reactor(pick, selector, reactor) == "a"
        time.sleep(0.05)
    refused = on_reactor(lambda: selector.select(None, None, ["v9"], now=reactor.seconds()))
    assert isinstance(refused, NoRegion) and refused.reason == "no_version" and refused.retry_after_s > 0


def test_prompt_requested_in_a_dead_region_is_synthesised_in_the_next(world: dict[str, Any], sims: SimRegions) -> None:
    """The call's region dies just before a prompt is synthesised: no audio comes, the
    request moves to b, and the caller gets exactly the audio b produces for the text."""
    reactor, selector, pool = world["reactor"], world["selector"], world["pool"]
    text = "Your balance is one hundred and twenty three dollars. Anything else?"
    reference = SpeechClient(sims["b"].address)
    try:
        expected = reference.synthesize(text, sample_rate_hz=RATE)
    finally:
        reference.close()
    audio: list[bytes] = []
    done: list[bool] = []
    selection = on_reactor(lambda: selector.select(None, None, now=reactor.seconds()))
    assert selection.region == "a"
    sims["a"].relay.blackhole(True)

    def start() -> Any:
        call = RegionalSpeech(reactor, selector, pool, selection, call_id="tts")
        return call.synthesize_stream(text, sample_rate_hz=RATE, on_audio=audio.append,
                                      on_done=lambda: done.append(True), on_error=lambda e: done.append(False))

    stream = on_reactor(start)
    assert stream.wait_done(10.0)
    assert done == [True]
    assert stream.region == "b"
    assert b"".join(audio) == expected


def test_region_going_not_serving_is_avoided(world: dict[str, Any], sims: SimRegions) -> None:
    """A fourth region's server shuts down gracefully (NOT_SERVING, then gone): new calls
    leave it quickly and do not come back."""
    reactor, selector = world["reactor"], world["selector"]
    proc, address = start_speech_server()
    try:
        relay = load_relay_module().Relay("127.0.0.1:0", address, delay_ms=1.0).start()
        sims["a"].relay.set(delay_ms=30.0)  # a: 60 ms RTT, d: 2 ms
        try:
            specs = [selector.spec(n) for n in selector.region_names]
            on_reactor(selector.update_regions, specs + [RegionSpec("d", (relay.address,), (relay.address,),
                                                                       model_versions=frozenset({"v1"}))])
            wait_for(lambda: on_reactor(pick, selector, reactor) == "d", 10.0, "region d preferred")
            proc.send_signal(signal.SIGTERM)  # the server notices within its 0.5 s signal poll
            took = wait_for(lambda: on_reactor(pick, selector, reactor) != "d", 5.0, "calls leaving d")
            assert took <= 2.0
            time.sleep(1.0)
            assert on_reactor(pick, selector, reactor) not in ("d", None)
        finally:
            relay.stop()
    finally:
        stop_process(proc)

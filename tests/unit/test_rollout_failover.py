"""A call never changes model version: failover and new streams keep the versions the call
started with (agent/speech/failover.py, agent/regions/selector.py rollout states).

Regions a (20 ms), b (60 ms), c (100 ms) on a fake clock; a and c serve asr:v1, b serves asr:v2
unless a test says otherwise. Fake per-endpoint clients stand in for the Riva streams.
"""
from __future__ import annotations

from twisted.internet.task import LoopingCall

from agent.regions.selector import NoRegion, RegionSelector, RegionSpec, Selection, call_versions
from agent.speech.client import RecognitionOptions, SpeechError
from agent.speech.failover import FailoverEvent, RegionalSpeech, RefusedSynthesis, SpeechClientPool
from tests.fakes import FakeReactor
from tests.unit.test_speech_failover import RATE, VOICED, FakeClient

TTS = "tts:flite-kal16"


class VersionWorld:
    def __init__(self, versions: dict[str, set[str]] | None = None, pinned: tuple[str, ...] = ()) -> None:
        versions = versions or {"a": {"asr:v1", TTS}, "b": {"asr:v2", TTS}, "c": {"asr:v1", TTS}}
        self.clock = FakeReactor()
        self.rtt = {"a": 0.02, "b": 0.06, "c": 0.1}
        self.selector = RegionSelector(
            [RegionSpec(n, (f"{n}:1",), (f"{n}:1",), model_versions=frozenset(v)) for n, v in versions.items()])
        self.alive = set(versions)
        self.clients = {f"{n}:1": FakeClient(f"{n}:1") for n in versions}
        self.pool = SpeechClientPool(factory=lambda address: self.clients[address])  # type: ignore[arg-type,return-value]
        self.events: list[FailoverEvent] = []
        self.errors: list[Exception] = []
        self._probe()
        self._loop = LoopingCall(self._probe)
        self._loop.clock = self.clock
        self._loop.start(0.25, now=False)
        selection = self.selector.select(None, None, pinned, now=self.clock.seconds())
        assert isinstance(selection, Selection)
        self.speech = RegionalSpeech(self.clock, self.selector, self.pool, selection, call_id="c1",
                                     pinned_versions=pinned, on_failover=self.events.append)

    def _probe(self) -> None:
        for n in self.alive:
            self.selector.on_probe_response(f"{n}:1", self.clock.seconds(), self.rtt[n])

    def client(self, name: str) -> FakeClient:
        return self.clients[f"{name}:1"]

    def open(self) -> object:
        return self.speech.open_recognition(RecognitionOptions(sample_rate_hz=RATE), on_interim=lambda t: None,
                                            on_final=lambda t, c: None, on_error=self.errors.append)


def test_call_versions_keeps_pins_and_the_first_regions_versions_of_unpinned_kinds() -> None:
    """Pinned kinds keep the pin (not the region's other versions of that kind); unpinned
    kinds keep what the first region served."""
    region = {"asr:v1", "asr:v2", TTS}
    assert call_versions(region, ()) == frozenset(region)
    assert call_versions(region, ("asr:v2",)) == frozenset({"asr:v2", TTS})


def test_unpinned_call_fails_over_past_a_closer_region_on_another_version() -> None:
    """An unpinned call placed in a (asr:v1) whose region fails goes to c (asr:v1, 100 ms),
    not to b (asr:v2, 60 ms, the better score): it stays on the version it started with."""
    w = VersionWorld()
    assert w.speech.region == "a"
    w.open()
    w.client("a").recognitions[0].fail()
    assert [e.to_region for e in w.events] == ["c"]
    assert w.client("b").recognitions == [] and len(w.client("c").recognitions) == 1


def test_unpinned_call_with_no_same_version_region_left_gets_a_retryable_error_not_a_new_version() -> None:
    """With a failed and c gone, only b (asr:v2) is up: the stream ends with a retryable error
    and nothing is opened in b."""
    w = VersionWorld()
    w.open()
    w.alive.discard("c")
    w.selector.begin_switch("c")  # c is being moved to another version
    w.client("a").recognitions[0].fail()
    assert w.client("b").recognitions == []
    assert len(w.errors) == 1 and isinstance(w.errors[0], SpeechError) and w.errors[0].retryable
    assert w.selector.failovers == {("a", "none"): 1}


def test_synthesis_failover_keeps_the_version_too() -> None:
    """A synthesis failing in a restarts in c (same versions), never in b."""
    w = VersionWorld()
    chunks: list[bytes] = []
    w.speech.synthesize_stream("hello there", sample_rate_hz=8000, on_audio=chunks.append, on_done=lambda: None,
                               on_error=w.errors.append)
    w.client("a").syntheses[0].fail()
    w.clock.advance(0)
    assert [e.to_region for e in w.events] == ["c"] and w.client("b").syntheses == []


def test_new_stream_after_the_calls_region_switched_version_moves_to_a_region_with_the_old_one() -> None:
    """A rollout switches a while the call is between turns: the call's next recognition opens
    in c (still asr:v1), and the move is recorded as a version change of the region."""
    w = VersionWorld()
    first = w.open()
    first.close()  # type: ignore[attr-defined]
    w.selector.begin_switch("a")
    w.open()
    assert len(w.client("a").recognitions) == 1 and len(w.client("c").recognitions) == 1
    assert w.events[-1].to_region == "c" and w.events[-1].reason == "region changed model version"
    # a comes back on asr:v2: the call (asr:v1) does not go back there
    w.selector.finish_switch("a", {"asr:v2", TTS})
    w.client("c").recognitions[0].fail()
    assert w.client("a").recognitions[1:] == [] and w.events[-1].to_region is None


def test_new_stream_with_no_region_on_the_calls_version_is_refused_not_opened_elsewhere() -> None:
    """Every asr:v1 region has switched: a new recognition raises a retryable SpeechError (the
    session retries with back-off), a synthesis reports one through on_error; nothing opens
    in b."""
    w = VersionWorld()
    w.selector.begin_switch("a")
    w.selector.begin_switch("c")
    try:
        w.open()
    except SpeechError as err:
        assert err.retryable and "asr:v1" in str(err)
    else:
        raise AssertionError("a recognition was opened with no region serving the call's versions")
    got: list[Exception] = []
    stream = w.speech.synthesize_stream("hi", sample_rate_hz=8000, on_audio=lambda pcm: None, on_done=lambda: None,
                                        on_error=got.append)
    assert isinstance(stream, RefusedSynthesis)
    w.clock.advance(0)
    assert len(got) == 1 and getattr(got[0], "retryable", False)
    assert w.client("b").recognitions == [] and w.client("b").syntheses == []


def test_pinned_call_keeps_its_pin_during_a_rollout() -> None:
    """A call pinned to asr:v2 starts in b and, b failing, finds a (moved to asr:v2 meanwhile),
    never c (asr:v1)."""
    w = VersionWorld(pinned=("asr:v2",))
    assert w.speech.region == "b"
    w.open()
    w.selector.begin_switch("a")
    w.selector.finish_switch("a", {"asr:v2", TTS})
    w.client("b").recognitions[0].fail()
    assert [e.to_region for e in w.events] == ["a"]


def test_draining_region_keeps_its_calls_but_takes_no_new_call_or_failover() -> None:
    """A drained region: new calls go elsewhere (or get no_version when it was the only one
    with the pin); a call already there opens new streams there; a failover from elsewhere
    does not land there."""
    w = VersionWorld()
    w.selector.drain_region("a")
    new = w.selector.select(None, None, now=w.clock.seconds())
    assert isinstance(new, Selection) and new.region == "b"
    only = w.selector.select(None, None, ("asr:v2",), now=w.clock.seconds())
    assert isinstance(only, Selection) and only.region == "b"
    w.selector.drain_region("b")
    refused = w.selector.select(None, None, ("asr:v2",), now=w.clock.seconds())
    assert isinstance(refused, NoRegion) and refused.reason == "no_version" and "being drained: b" in refused.detail
    w.open()  # the call placed in a before the drain
    assert len(w.client("a").recognitions) == 1
    nxt = w.selector.next_best({"c"}, now=w.clock.seconds())
    assert isinstance(nxt, NoRegion)
    assert w.selector.rollout_state("a") == "draining"
    w.selector.undrain_region("a")
    assert w.selector.rollout_state("a") == "serving"


def test_switching_region_serves_no_version_and_forgets_what_its_endpoints_reported() -> None:
    """During the switch versions() is empty; reports after it count, and finish_switch sets
    the new configured versions."""
    w = VersionWorld()
    w.selector.set_discovered_versions("a:1", "asr", {"asr:pocketsphinx-1"})
    assert "asr:pocketsphinx-1" in w.selector.versions("a")
    w.selector.begin_switch("a")
    assert w.selector.versions("a") == frozenset() and w.selector.reported_versions("a") == {}
    w.selector.undrain_region("a")  # an undrain does not end a switch
    assert w.selector.rollout_state("a") == "switching"
    w.selector.set_discovered_versions("a:1", "asr", {"asr:pocketsphinx-2"})
    assert w.selector.versions("a") == frozenset()
    assert w.selector.reported_versions("a") == {"asr a:1": frozenset({"asr:pocketsphinx-2"})}
    w.selector.finish_switch("a", {"asr:v2", TTS})
    assert w.selector.versions("a") == frozenset({"asr:v2", TTS, "asr:pocketsphinx-2"})
    assert w.selector.rollout_state("a") == "serving"


def test_a_reload_during_a_rollout_keeps_the_regions_rollout_state() -> None:
    """update_regions (config reload) does not undo a drain or a switch in progress."""
    w = VersionWorld()
    w.selector.drain_region("a")
    w.selector.begin_switch("c")
    w.selector.update_regions([w.selector.spec(n) for n in ("a", "b", "c")])
    assert w.selector.rollout_state("a") == "draining" and w.selector.rollout_state("c") == "switching"
    assert w.selector.versions("c") == frozenset()


def test_voiced_audio_reaches_the_same_version_region_after_a_move() -> None:
    """The replay after a version-keeping move carries the caller's audio to c."""
    w = VersionWorld()
    stream = w.open()
    for _ in range(10):
        stream.push_audio(VOICED)  # type: ignore[attr-defined]
        w.clock.advance(0.02)
    w.client("a").recognitions[0].fail()
    assert w.client("c").recognitions[0].audio.endswith(VOICED * 10)


def test_a_switching_regions_restart_does_not_escalate_its_ejection() -> None:
    """While a switches, its server is down for seconds (ejections 1, 2, 4 s ...); once it
    answers two probes in a row it is usable again at once. The same outage outside a switch
    keeps the escalated ejection."""
    for switching in (True, False):
        w = VersionWorld()
        if switching:
            w.selector.begin_switch("a")
        w.alive.discard("a")
        for _ in range(40):  # 10 s down
            w.selector.on_probe_failure("a:1", w.clock.seconds())
            w.clock.advance(0.25)
        w.alive.add("a")
        for _ in range(3):  # three probes answered
            w.clock.advance(0.25)
        usable = w.selector.endpoint_state("a:1", w.clock.seconds()).usable
        assert usable is switching, switching

"""ops/bench/turn-latency's summary: where the agent cut in on a paused turn."""
from __future__ import annotations

from media.latency import ItemOutcome, PlayedItem
from tests.bench import load_bench


def paused(index: int, outcome: str, latency_ms: float) -> ItemOutcome:
    """A paused turn voiced 10.0-12.0 s with its designed pause at 10.8-11.2 s."""
    item = PlayedItem(index, f"paused-{index}", "paused_turn", 9.9, 10.0, 12.0, ((10.8, 11.2),))
    return ItemOutcome(item, outcome, latency_ms)


def test_cut_ins_are_split_into_the_designed_pause_and_later():
    bench = load_bench()
    outcomes = [paused(0, "cut_in", -1000.0),   # started at 11.0 s: in the pause
                paused(1, "cut_in", -400.0),    # at 11.6 s: after the pause, inside the words
                paused(2, "turn", 80.0)]
    s = bench.summarise([bench.CallResult(1, "c1", 0.0, outcomes)])
    assert (s["paused_turns"], s["cut_ins"], s["cut_ins_in_pause"]) == (3, 2, 1)
    assert s["targets"]["cut_in_rate"] is False

"""ops/bench/turn-latency's summary: where the agent cut in on a paused turn."""
from __future__ import annotations

import os

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


def test_a_cut_in_after_the_request_was_made_is_a_tail_overlap_not_a_premature_cut_in():
    """The agent answered the intent the turn was played for and the caller then added a word:
    reported as a tail overlap, outside the target's count. In the pause, or when the agent
    acted on something else (or the call record's intents do not pair up), it is premature."""
    bench = load_bench()
    outcomes = [paused(0, "cut_in", -1000.0), paused(1, "cut_in", -400.0), paused(2, "cut_in", -300.0),
                paused(3, "turn", 80.0)]
    answered = {0: True, 1: True, 2: False, 3: True}
    gaps = {0: True, 1: True, 2: True}
    s = bench.summarise([bench.CallResult(1, "c1", 0.0, outcomes, answered_as_asked=answered, cut_in_in_gap=gaps)])
    assert (s["cut_ins"], s["cut_ins_in_pause"], s["tail_overlaps"]) == (3, 1, 1)
    assert s["targets"]["cut_in_rate"] is False  # 2 of 4 premature
    s = bench.summarise([bench.CallResult(1, "c1", 0.0, outcomes, answered_as_asked=answered,
                                          cut_in_in_gap={1: False})])  # started inside the caller's sound
    assert s["tail_overlaps"] == 0
    ok = [paused(0, "turn", 80.0), *[paused(k, "turn", 90.0) for k in range(1, 40)], paused(40, "cut_in", -400.0)]
    s = bench.summarise([bench.CallResult(1, "c1", 0.0, ok, answered_as_asked={40: True}, cut_in_in_gap={40: True})])
    assert (s["cut_ins"], s["tail_overlaps"]) == (1, 1) and s["targets"]["cut_in_rate"] is True
    s = bench.summarise([bench.CallResult(1, "c1", 0.0, ok, cut_in_in_gap={40: True})])  # intents not paired
    assert s["tail_overlaps"] == 0


def test_a_time_is_in_a_gap_between_voiced_packets_not_inside_one():
    bench = load_bench()
    voiced = [1.00, 1.02, 1.04, 1.15, 1.17]   # a 90 ms gap after the packet of 1.04-1.06 s
    assert bench.in_gap(voiced, 1.10) and bench.in_gap(voiced, 1.065) and bench.in_gap(voiced, 0.5)
    assert not bench.in_gap(voiced, 1.05) and not bench.in_gap(voiced, 1.16)


def test_g722_rounds_offer_g722_stream_encoded_files_and_score_their_own_voiced_span(tmp_path):
    """A G.722 round: the scenario offers payload type 9 (G722/8000) instead of PCMU and streams
    each item's .g722 copy with that payload type; the copy is the 16 kHz rendering encoded at
    64 kbit/s (160 bytes per 20 ms, as SIPp sends it), and the item's voiced start and end are
    read from that copy decoded, not from the 8 kHz file's manifest entry."""
    import wave

    import numpy as np

    from ops.bench import eval_calls as ec

    bench = load_bench()
    path = str(tmp_path / "item16k.wav")
    t = np.arange(16000) / 16000.0
    tone = np.where((t >= 0.2) & (t < 0.6), 8000 * np.sin(2 * np.pi * 300 * t), 0).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(tone.tobytes())
    item = ec.EvalFile("item", str(tmp_path / "item8k.wav"), path, "turn", "in-scope", "check my balance",
                       "balance", "flite", "kal16", 1.0, 1000, 100, 900, (), 0)
    steps = [ec.EvalStep(500, item, "balance")]
    media = str(tmp_path / "media")
    os.makedirs(media)
    bench.write_media(steps, media, "G722")
    with open(os.path.join(media, "item.g722"), "rb") as f:
        assert len(f.read()) == 8000  # 1 s at 64 kbit/s
    truth = bench.with_g722_truth(steps, media)[0].file
    assert (truth.voiced_start_ms, truth.voiced_end_ms) == (200, 620)  # the codec's delay: one more packet
    xml = bench.scenario_xml(steps, media, codec="G722")
    assert "m=audio [rtpstream_audio_port] RTP/AVP 9 101" in xml and "a=rtpmap:9 G722/8000" in xml
    assert "PCMU" not in xml.split("<scenario")[1] and f'rtp_stream="{media}/item.g722,1,9"' in xml
    assert 'item.ulaw,1,0"' in bench.scenario_xml(steps, media)
    assert [bench.round_codec("both", r) for r in (1, 2, 3)] == ["PCMU", "G722", "PCMU"]


def test_each_concurrent_caller_plays_a_schedule_of_its_own_found_again_by_its_call_id():
    """Four callers play four schedules (the first the one a single call plays), and each call
    in the capture is scored against its own, named by the Call-ID its SIPp process gave it."""
    bench = load_bench()
    seeds = [bench.call_seed(1, 3, c) for c in range(4)]
    assert seeds[0] == 1 * 1000 + 3 and len(set(seeds)) == 4
    assert bench.call_seed(1, 3, 2) != bench.call_seed(1, 4, 2) != bench.call_seed(2, 3, 2)
    for c in range(4):
        call_id = bench.call_id_prefix(c) + "1-4242@127.0.0.1"
        assert bench.schedule_index(call_id) == c
    assert bench.schedule_index("1-4242@127.0.0.1") is None

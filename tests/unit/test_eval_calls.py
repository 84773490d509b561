"""The evaluation corpus on the wire: schedules consistent with the demo line, what it heard, figures by condition."""
from __future__ import annotations

import os
import random
from dataclasses import replace

from agent.dialplan.engine import DialogueSession, Listen
from agent.dialplan.model import load_dialplan
from media.latency import INTERRUPTION, ItemOutcome, PlayedItem
from ops.bench import eval_calls as ec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = load_dialplan(os.path.join(ROOT, "dialplans", "default.yaml"))


def utterance(name: str, phrasing: str, intent: str | None, text: str, engine: str = "flite",
              pause_ms: int = 0) -> ec.EvalFile:
    kind = {"in-scope": "turn", "out-of-scope": "turn", "paused": "paused_turn"}.get(phrasing, phrasing)
    pauses = ((600, 600 + pause_ms),) if pause_ms else ()
    return ec.EvalFile(name, f"/x/{name}.wav", f"/x/16k/{name}.wav", kind, phrasing, text, intent, engine, "v",
                       1.0, 2000 + pause_ms, 100, 1900 + pause_ms, pauses, pause_ms)


def corpus() -> list[ec.EvalFile]:
    files = []
    for intent in ("balance", "hours", "agent", "goodbye", "nothing_else", "something_else"):
        for engine in ("flite", "espeak-ng"):
            files.append(utterance(f"{intent}-{engine}", "in-scope", intent, f"say {intent} {engine}", engine))
            files.append(utterance(f"{intent}-p-{engine}", "paused", intent, f"um {intent} {engine}", engine, 450))
    files += [utterance(f"oos-{k}", "out-of-scope", "out_of_scope", f"my card number {k} was stolen") for k in range(3)]
    files += [utterance("bc-okay", "backchannel", None, "okay"), utterance("bc-yeah", "backchannel", None, "yeah"),
              utterance("noise-white", "noise", None, "white noise 60 ms")]
    return files


def prompt_ms(text: str, voice: str) -> int:
    return 60 * len(text)


def plan(seed: int, turns: int = 6, **kw) -> list[ec.EvalStep]:  # type: ignore[no-untyped-def]
    return ec.plan_eval_call(corpus(), random.Random(seed), turns, DialogueSession(DEMO, "main", {}),
                             ec.intent_examples(DEMO, "main"), prompt_ms, **kw)


def test_each_turn_is_valid_at_the_ask_the_call_is_at_and_endings_come_last():
    """Replaying a schedule's answers through the engine: every in-scope answer is offered at the
    ask the call is then at, an out-of-scope turn gets a reprompt (never the offer of a person),
    no request for an agent, the ending answer is the last turn, then a "yes"."""
    for seed in range(1, 8):
        steps = plan(seed)
        turns = [s for s in steps if s.expect is not None]
        assert turns[0].file.kind == INTERRUPTION and turns[0].expect in ("balance", "hours")
        assert turns[-1].expect == "yes" and turns[-2].expect in ec.ENDING_INTENTS
        assert all(s.expect not in ec.ENDING_INTENTS for s in turns[:-2])
        assert all(s.expect != "agent" for s in turns)
        session = DialogueSession(DEMO, "main", {})
        listen = [a for a in session.start() if isinstance(a, Listen)][-1]
        examples = ec.intent_examples(DEMO, "main")
        for s in turns[:-1]:
            assert s.ask == session.state
            if s.expect == "no_match":
                assert s.file.phrasing == "out-of-scope"
                actions = session.on_transcript("")
                assert session.history[-2].kind == "no_match" and session.history[-1].kind == "reprompt"
            else:
                assert s.expect in listen.intents, (s, listen.intents)
                actions = session.on_transcript(examples[s.expect])
            listens = [a for a in actions if isinstance(a, Listen)]
            listen = listens[-1] if listens else listen
        assert session.ended


def test_turns_wait_for_the_reply_and_items_over_prompts_land_while_the_line_talks():
    """Times increase; each turn starts after the previous turn's end plus its whole reply; the
    phrasing kinds of the corpus all appear; backchannels over a prompt are ones the line would
    not take for an answer where they are played ("yeah" is "something else" at anything_else)."""
    steps = plan(3)
    assert [s.at_ms for s in steps] == sorted(s.at_ms for s in steps)
    turns = [s for s in steps if s.expect is not None]
    for a, b in zip(turns, turns[1:-1]):
        assert b.at_ms - (a.at_ms + a.file.voiced_end_ms) >= ec.LATENCY_ALLOWANCE_MS + ec.QUIET_BEFORE_TURN_MS
    assert {s.file.phrasing for s in steps} >= {"in-scope", "out-of-scope", "paused", "noise", "backchannel"}
    over = [s for s in steps if s.expect is None and s.file.phrasing == "backchannel"]
    assert over
    after_first = [s for s in over if s.at_ms > turns[0].at_ms]
    assert all(s.file.text == "okay" for s in after_first), after_first


def fake_prompt_audio(text: str, voice: str) -> tuple[int, list[tuple[int, int]]]:
    """Prompts of 80 ms a letter: phrases between commas and full stops, each a
    voiced stretch, 200 ms of pause after each."""
    stretches, at = [], 0
    for phrase in text.replace(".", ",").replace("?", ",").split(","):
        if phrase.strip():
            stretches.append((at, at + 80 * len(phrase.strip())))
            at += 80 * len(phrase.strip()) + 200
    return at, stretches


def test_the_interruption_starts_inside_a_long_voiced_stretch_of_the_menu_after_the_items_over_it():
    """With the prompts' audio known, the interruption's voice starts in the middle of the last
    long enough voiced stretch of the opening prompts that leaves the prompts talking after it,
    never in a pause between phrases, and after the items over the prompt; those all come before it."""
    session = DialogueSession(DEMO, "main", {})
    actions = session.start()
    onset = ec.interruption_onset_ms(actions, fake_prompt_audio, max(ec.OVER_PROMPT_AT_MS) + ec.INTERRUPT_AFTER_ITEM_MS)
    assert onset is not None
    spans, at = [], ec.LINE_AUDIO_AT_MS
    for a in actions:
        if hasattr(a, "voice") and hasattr(a, "text"):
            length, stretches = fake_prompt_audio(a.text, a.voice)
            spans += [(at + s0, at + s1) for s0, s1 in stretches]
            at += length
    inside = [(s0, s1) for s0, s1 in spans if s0 < onset < s1]
    assert len(inside) == 1
    s0, s1 = inside[0]
    assert s1 - s0 >= ec.INTERRUPT_MIN_STRETCH_MS and onset == s0 + int(ec.INTERRUPT_INTO_STRETCH * (s1 - s0))
    assert s1 <= at - ec.INTERRUPT_MIN_TALK_AFTER_MS
    assert not [s for s in spans if s[0] > s0 and s[1] - s[0] >= ec.INTERRUPT_MIN_STRETCH_MS
                and s[1] <= at - ec.INTERRUPT_MIN_TALK_AFTER_MS]
    steps = ec.plan_eval_call(corpus(), random.Random(2), 3, DialogueSession(DEMO, "main", {}),
                              ec.intent_examples(DEMO, "main"), prompt_ms, prompt_audio=fake_prompt_audio)
    first = next(s for s in steps if s.file.kind == INTERRUPTION)
    assert first.at_ms + first.file.voiced_start_ms == onset
    over = [s for s in steps if s.at_ms < first.at_ms]
    assert len(over) == len(ec.OVER_PROMPT_AT_MS)
    assert all(s.at_ms + ec.INTERRUPT_AFTER_ITEM_MS < onset for s in over)
    assert ec.interruption_onset_ms(actions, fake_prompt_audio, 10 ** 6) is None


def test_a_slice_without_the_prompt_items_and_without_ending():
    """The CI slice's schedule: no items over the greeting, an early interruption, no ending."""
    steps = plan(1, turns=3, over_prompt=False, interruption_at_ms=3000, end_call=False)
    assert steps[0].at_ms == 3000 and steps[0].file.kind == INTERRUPTION
    assert all(s.expect not in ec.ENDING_INTENTS + ("yes",) for s in steps)
    assert [s.file.phrasing for s in steps if s.expect][1:] == ["out-of-scope", "paused", "in-scope"]


def test_the_decision_on_each_transcript_is_read_from_the_call_record():
    """An intent, a reprompt, an ending answer to confirm (its intent), the answer to the
    question, input while no ask listened."""
    record = {"dialogue": [
        {"kind": "step", "step": "menu"},
        {"kind": "transcript", "step": "menu", "text": "what do I have in my account"},
        {"kind": "intent", "step": "menu", "intent": "balance", "text": "balance"},
        {"kind": "step", "step": "balance"},
        {"kind": "transcript", "step": "anything_else", "text": "freeze my card"},
        {"kind": "no_match", "step": "anything_else"}, {"kind": "reprompt", "step": "anything_else"},
        {"kind": "transcript", "step": "anything_else", "text": "I'll let you go"},
        {"kind": "question", "step": "anything_else", "text": "end", "intent": "goodbye"},
        {"kind": "transcript", "step": "anything_else", "text": "yeah"},
        {"kind": "answer", "step": "anything_else", "text": "yes"},
        {"kind": "intent", "step": "anything_else", "intent": "goodbye"},
        {"kind": "ignored", "step": "goodbye", "text": "bye"},
    ]}
    heard = ec.heard_turns(record)
    assert [(h.step, h.decision) for h in heard] == [
        ("menu", "balance"), ("anything_else", "no_match"), ("anything_else", "goodbye"),
        ("anything_else", "yes"), ("goodbye", "ignored")]


def test_transcripts_pair_with_the_items_they_say_in_order():
    """Recognition errors still pair; a turn the line heard in two parts pairs with both, and is
    understood only when its last part led to its intent and no earlier part to another; a
    transcript of nothing scheduled and an item never transcribed stay unpaired; noise never pairs."""
    files = {f.name: f for f in corpus()}
    steps = [ec.EvalStep(0, files["noise-white"]), ec.EvalStep(1, files["balance-flite"], "balance"),
             ec.EvalStep(2, files["oos-1"], "no_match"), ec.EvalStep(3, files["hours-p-flite"], "hours")]
    heard = [ec.Heard("white noise", "menu", "no_match"), ec.Heard("say balanced flight", "menu", "balance"),
             ec.Heard("cough", "anything_else", "no_match"), ec.Heard("um hours", "anything_else", "no_match"),
             ec.Heard("hours flights", "anything_else", "hours")]
    pairs = ec.pair_heard(steps, heard)
    assert {k: [h.text for h in v] for k, v in pairs.items()} == {
        1: ["say balanced flight"], 3: ["um hours", "hours flights"]}
    assert ec.understood("balance", pairs[1]) == "yes"
    assert ec.understood("hours", pairs[3]) == "yes"
    assert ec.understood("hours", [ec.Heard("", "", "balance"), ec.Heard("", "", "hours")]) == "no"
    assert ec.understood("no_match", pairs.get(2)) == "not_heard"
    assert ec.understood("nothing_else", ec.Heard("", "", "goodbye")) == "same_outcome"
    assert ec.understood("hours", ec.Heard("", "", "balance")) == "no"


def outcome(step: ec.EvalStep, index: int, outcome_: str, latency_ms: float | None, reply_ms: float | None = None
            ) -> ItemOutcome:
    f = step.file
    pauses = tuple((10.0 + a / 1000.0, 10.0 + b / 1000.0) for a, b in f.pauses)
    item = PlayedItem(index, f.name, f.kind, 9.9, 10.0, 10.0 + f.voiced_end_ms / 1000.0, pauses)
    return ItemOutcome(item, outcome_, latency_ms, reply_ms)


def test_figures_by_condition():
    """Latency, understood, premature cut-ins of paused turns (a tail overlap is not one), false
    stops of items over prompts and barge-in stops, per engine, phrasing and pause bucket."""
    files = {f.name: f for f in corpus()}
    steps = [ec.EvalStep(0, replace(files["balance-flite"], kind=INTERRUPTION), "balance"),
             ec.EvalStep(1, files["oos-0"], "no_match"),
             ec.EvalStep(2, files["hours-p-espeak-ng"], "hours"),      # cut in, in the pause
             ec.EvalStep(3, files["balance-p-flite"], "balance"),      # cut in at the tail, understood
             ec.EvalStep(4, files["bc-okay"]), ec.EvalStep(5, files["noise-white"])]
    outs = [outcome(steps[0], 0, "barge_in", 180.0, 300.0), outcome(steps[1], 1, "turn", 100.0),
            outcome(steps[2], 2, "cut_in", -1700.0), outcome(steps[3], 3, "cut_in", -200.0),
            outcome(steps[4], 4, "false_barge_in", 150.0), outcome(steps[5], 5, "kept_talking", 900.0)]
    heard = [ec.Heard(f"{steps[k].file.text}", "menu", d) for k, d in ((0, "balance"), (1, "no_match"),
                                                                       (2, "balance"), (3, "balance"))]
    record = {"dialogue": [e for h in heard for e in (
        {"kind": "transcript", "step": h.step, "text": h.text},
        {"kind": "no_match"} if h.decision == "no_match" else {"kind": "intent", "intent": h.decision})]}
    rows = ec.rows_of_call(steps, outs, record, {3: True}, calls=4)
    assert [r.understood for r in rows] == ["yes", "yes", "no", "yes", None, None]
    assert [r.tail_overlap for r in rows] == [False, False, False, True, False, False]
    table = ec.summarise_conditions(rows)
    a = table["all"]
    assert a["turn_latency_ms"]["n"] == 2 and a["turn_latency_ms"]["p50"] == 100.0   # 100, 300 (reply)
    assert a["understood"] == [3, 4] and a["barge_in_stop_ms"]["p95"] == 180.0
    assert (a["paused_turns"], a["cut_ins"], a["premature_cut_ins"], a["cut_ins_in_pause"]) == (2, 2, 1, 1)
    assert a["false_stops"] == [1, 2] and a["cut_ins_all_turns"] == [1, 3]
    assert table["engine espeak-ng"]["understood"] == [0, 1]
    assert table["paused 400-549 ms"]["paused_turns"] == 2
    assert table["out-of-scope"]["understood"] == [1, 1] and "4 calls" in table
    assert table["codec PCMU"]["understood"] == [3, 4]
    assert not any(c.startswith("voice ") for c in table)   # one voice per engine: the engine's row
    voiced = [replace(r, step=replace(r.step, file=replace(r.step.file, voice="awb"))) if k == 0 else r
              for k, r in enumerate(rows)]
    by_voice = ec.summarise_conditions(voiced)
    assert by_voice["voice flite/awb"]["understood"] == [1, 1] and by_voice["voice flite/v"]["understood"] == [2, 2]
    assert "voice espeak-ng/v" not in by_voice
    assert "premature cut-ins" in ec.format_conditions(table)
    # a G.722 round's rows: their own codec row, beside the PCMU round's
    wideband = ec.rows_of_call(steps, outs, record, {3: True}, calls=4, codec="G722")
    both = ec.summarise_conditions(rows + wideband)
    assert both["codec G722"]["understood"] == [3, 4] and both["all"]["understood"] == [6, 8]
    assert list(both).index("codec G722") < list(both).index("codec PCMU") < list(both).index("interruption")


def test_understood_is_also_counted_where_the_turn_came_at_its_planned_ask():
    """After a misunderstanding a call's schedule runs ahead of the line: a turn planned for the
    menu heard at anything_else is left out of understood_at_planned_ask (and kept in understood)."""
    files = {f.name: f for f in corpus()}
    steps = [ec.EvalStep(0, files["balance-flite"], "balance", "menu"),
             ec.EvalStep(1, files["hours-p-flite"], "hours", "menu"),
             ec.EvalStep(2, files["oos-1"], "no_match", "anything_else")]
    outs = [outcome(s, k, "turn", 300.0) for k, s in enumerate(steps)]
    record = {"dialogue": [
        {"kind": "transcript", "step": "menu", "text": steps[0].file.text},
        {"kind": "intent", "step": "menu", "intent": "goodbye"},
        {"kind": "transcript", "step": "anything_else", "text": steps[1].file.text},
        {"kind": "intent", "step": "anything_else", "intent": "hours"},
        {"kind": "transcript", "step": "anything_else", "text": steps[2].file.text},
        {"kind": "no_match", "step": "anything_else"}]}
    rows = ec.rows_of_call(steps, outs, record, {}, calls=1)
    assert [r.understood for r in rows] == ["no", "yes", "yes"]
    a = ec.summarise_conditions(rows)["all"]
    assert a["understood"] == [2, 3] and a["understood_at_planned_ask"] == [1, 2]
    assert ec.fraction_text(a["understood_at_planned_ask"]) == "1/2  50.0%" and ec.fraction_text([0, 0]) == "-"


def test_false_stops_are_the_holes_the_server_made_in_its_prompt():
    """With the server's prompt pauses in the record, a noise or backchannel is a false stop when
    the prompt paused 300 ms or more for it: a silence of the agent's on the wire that the server
    did not make is not one, a 350 ms pause the wire's 450 ms rule does not see is, and an item
    in a gap between sentences counts when the server paused the prompt for it."""
    files = {f.name: f for f in corpus()}
    steps = [ec.EvalStep(0, files["bc-okay"]), ec.EvalStep(1, files["noise-white"]),
             ec.EvalStep(2, files["bc-okay"]), ec.EvalStep(3, files["noise-white"])]
    kinds = ["false_barge_in", "kept_talking", "not_over_speech", "kept_talking"]
    outs = [outcome(s, 0, o, ms) for s, o, ms in zip(steps, kinds, [120.0, 900.0, None, 800.0])]
    assert ec.prompt_holes(outs[:1], {"prompt_pauses": [{"at_s": 10.03, "ms": 120}]}) == {0: 120.0}
    assert ec.prompt_holes(outs[:1], {}) == {}
    # a 612 ms pause in the prompt's closing silence held back none of its words: no hole
    assert ec.prompt_holes(outs[:1], {"prompt_pauses": [{"at_s": 10.03, "ms": 612, "hole_ms": 0}]}) == {0: 0.0}
    # one call each; every item's first voiced packet is at 10.0 s
    calls = [ec.rows_of_call([s], [o], {"prompt_pauses": p}, {}, calls=1) for s, o, p in (
        (steps[0], outs[0], [{"at_s": 10.03, "ms": 120}]),       # wire silence, server paused 120 ms
        (steps[1], outs[1], [{"at_s": 10.04, "ms": 350}]),       # wire talking, server paused 350 ms
        (steps[2], outs[2], [{"at_s": 10.05, "ms": 600}]),       # in a sentence gap, paused 600 ms
        (steps[3], outs[3], [{"at_s": 30.0, "ms": 900}]))]       # a pause for something else
    rows = [r for c in calls for r in c]
    assert [r.hole_ms for r in rows] == [120.0, 350.0, 600.0, 0.0]
    a = ec.summarise_conditions(rows)["all"]
    assert a["false_stops"] == [2, 4]
    assert a["false_stops_wire"] == [1, 3]
    old = [r for s, o in zip(steps[:2], outs[:2]) for r in ec.rows_of_call([s], [o], {}, {}, calls=1)]
    assert ec.summarise_conditions(old)["all"]["false_stops"] == [1, 2]   # no pauses kept: the wire decides


def test_a_transfer_is_read_from_the_call_record_with_its_words_and_its_confirmation():
    """The bench lists each transfer (all unasked: its schedule asks for no person) with the words
    the question was asked on and whether the scripted yes confirmed it; a transfer with no
    question before it is unconfirmed."""
    def entry(kind: str, text: str) -> dict[str, object]:
        return {"kind": kind, "text": text}

    asked = {"call_id": "c1", "dialogue": [
        entry("transcript", "what are your hours"), entry("intent", "hours"),
        entry("transcript", "talk to"), entry("question", "transfer"),
        entry("transcript", "ok great"), entry("answer", "yes"), entry("transfer", "sip:agents@x")]}
    assert ec.transfer_of(asked) == {"call_id": "c1", "heard": "talk to", "confirmed": True}
    declined_then_direct = {"call_id": "c2", "dialogue": [
        entry("transcript", "talk to"), entry("question", "transfer"), entry("transcript", "no"),
        entry("answer", "no"), entry("transcript", "agent"), entry("transfer", "sip:agents@x")]}
    assert ec.transfer_of(declined_then_direct) == {"call_id": "c2", "heard": "agent", "confirmed": False}

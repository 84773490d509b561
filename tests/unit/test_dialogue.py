"""Tests for agent.dialplan.engine: walks through the demo line and the engine's edge cases."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent.dialplan.engine import (
    Action,
    DialogueSession,
    Hangup,
    Listen,
    Say,
    Transfer,
    call_variables,
)
from agent.dialplan.model import Dialplan, load_dialplan, parse_dialplan, prompt_cache_key

DEFAULT_DIALPLAN = Path(__file__).resolve().parents[2] / "dialplans" / "default.yaml"
TRANSFER_URI = "sip:agent@pbx.example.com"


@pytest.fixture(scope="module")
def plan() -> Dialplan:
    return load_dialplan(str(DEFAULT_DIALPLAN))


def new_call(plan: Dialplan, **config: object) -> DialogueSession:
    settings: dict[str, object] = {"transfer_uri": TRANSFER_URI}
    settings.update(config)
    variables = call_variables("+15550001", "+15559999", "call-1", "eu-west", settings)
    return DialogueSession(plan, "main", variables)


def started(plan: Dialplan, **config: object) -> DialogueSession:
    session = new_call(plan, **config)
    session.start()
    return session


def says(actions: list[Action]) -> list[str]:
    return [a.text for a in actions if isinstance(a, Say)]


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def inline_plan(text: str) -> Dialplan:
    return parse_dialplan(textwrap.dedent(text), "inline.yaml")


# --------------------------------------------------------------------------- the demo line


def test_start_greets_offers_menu_and_listens(plan: Dialplan) -> None:
    """The call opens with the greeting and menu prompt (cached, barge-in), then listens."""
    session = new_call(plan)
    actions = session.start()
    assert kinds(actions) == ["Say", "Say", "Listen"]
    greeting, menu, listen = actions
    assert isinstance(greeting, Say) and "OpenClaw Bank" in greeting.text
    assert isinstance(menu, Say) and "balance" in menu.text and "press 1" in menu.text
    assert menu.barge_in and menu.voice == "English-US.Male-1"
    assert menu.cache_key == prompt_cache_key(menu.text, "English-US.Male-1")
    assert listen == Listen(no_input_timeout_ms=5000)
    assert session.state == "menu" and session.expects_input and not session.ended


def test_asking_for_the_balance_reads_it_then_offers_more(plan: Dialplan) -> None:
    """'check my balance' leads to the balance prompt, then 'anything else?' and listening."""
    session = started(plan)
    actions = session.on_transcript("check my balance")
    texts = says(actions)
    assert "account balance" in texts[0]
    assert texts[1] == "Is there anything else I can help you with?"
    assert isinstance(actions[-1], Listen)
    assert session.state == "anything_else"


def test_misheard_balance_request_still_works(plan: Dialplan) -> None:
    """A recogniser's 'check my bounce' is understood as the balance request."""
    session = started(plan)
    assert "account balance" in says(session.on_transcript("check my bounce"))[0]


@pytest.mark.parametrize(
    ("digit", "expected_text", "last"),
    [
        ("1", "account balance", Listen),
        ("2", "We are open", Listen),
        ("3", "transfer you to an agent", Transfer),
        ("4", "Goodbye", Hangup),
    ],
)
def test_dtmf_one_to_four_select_menu_options(
    plan: Dialplan, digit: str, expected_text: str, last: type
) -> None:
    """Keys 1-4 do what balance, hours, agent and goodbye do by voice."""
    session = started(plan)
    actions = session.on_dtmf(digit)
    assert expected_text in says(actions)[0]
    assert isinstance(actions[-1], last)


@pytest.mark.parametrize(
    ("spoken", "expected_text"),
    [
        ("what are your opening hours", "We are open"),
        ("two", "We are open"),
        ("I want to talk to a person", "transfer you to an agent"),
        ("goodbye", "Goodbye"),
    ],
)
def test_spoken_choices_and_spoken_digits(plan: Dialplan, spoken: str, expected_text: str) -> None:
    """Menu choices work by name, and saying a digit works like pressing it."""
    session = started(plan)
    assert expected_text in says(session.on_transcript(spoken))[0]


def test_goodbye_says_goodbye_and_hangs_up(plan: Dialplan) -> None:
    """Goodbye speaks the farewell, then hangs up with the caller_done reason."""
    session = started(plan)
    actions = session.on_transcript("goodbye")
    assert kinds(actions) == ["Say", "Hangup"]
    assert actions[-1] == Hangup("caller_done")
    assert session.ended and not session.expects_input


def test_two_no_inputs_reprompt_third_says_goodbye_and_hangs_up(plan: Dialplan) -> None:
    """Silence gets two different reprompts; the third silence ends the call politely."""
    session = started(plan)
    first = session.on_no_input()
    second = session.on_no_input()
    assert kinds(first) == kinds(second) == ["Say", "Listen"]
    assert "did not hear" in says(first)[0]
    assert says(first) != says(second)
    third = session.on_no_input()
    assert kinds(third) == ["Say", "Hangup"]
    assert "Goodbye" in says(third)[0]
    assert third[-1] == Hangup("no_input")
    assert session.ended


def test_two_no_matches_offer_a_person_then_the_third_gives_up(plan: Dialplan) -> None:
    """Unrecognised answers get a reprompt, then the offer of an agent; declined, the reprompts
    go on, and only the answer after them ends the call (a goodbye, reason no_match)."""
    session = started(plan)
    first = session.on_transcript("what is the weather like")
    second = session.on_transcript("tell me a joke")
    assert "did not understand" in says(first)[0]
    assert says(second) == ["I'm having trouble understanding. Would you like to speak to a person?"]
    assert isinstance(first[-1], Listen) and isinstance(second[-1], Listen)
    assert second[-1].slot_type == "yes_no"
    declined = session.on_transcript("no")
    assert "still did not understand" in says(declined)[0]
    third = session.on_transcript("play me some music")
    assert kinds(third) == ["Say", "Hangup"]
    assert third[-1] == Hangup("no_match")


def test_no_input_and_no_match_are_counted_separately(plan: Dialplan) -> None:
    """A silence does not use up a no-match reprompt, and vice versa."""
    session = started(plan)
    session.on_no_input()
    session.on_no_input()
    assert isinstance(session.on_transcript("what is the weather like")[-1], Listen)
    assert isinstance(session.on_transcript("what is the weather like")[-1], Listen)  # the offer
    assert isinstance(session.on_transcript("no")[-1], Listen)
    assert isinstance(session.on_no_input()[-1], Hangup)


def test_reprompt_counters_reset_when_an_ask_is_entered_again(plan: Dialplan) -> None:
    """After a successful answer the next ask starts with a full set of reprompts."""
    session = started(plan)
    session.on_no_input()
    session.on_no_input()
    session.on_dtmf("2")  # hours, then 'anything else?'
    session.on_transcript("yes")  # back to the menu
    assert session.state == "menu"
    assert isinstance(session.on_no_input()[-1], Listen)
    assert isinstance(session.on_no_input()[-1], Listen)


def test_unbound_dtmf_key_is_a_no_match(plan: Dialplan) -> None:
    """A key no intent uses counts as an unrecognised answer."""
    session = started(plan)
    actions = session.on_dtmf("9")
    assert "did not understand" in says(actions)[0]
    assert session.state == "menu" and session.expects_input


def test_anything_else_no_ends_and_yes_returns_to_menu(plan: Dialplan) -> None:
    """At 'anything else?', 'no' says goodbye and hangs up; 'yes' goes back to the menu."""
    done = started(plan)
    done.on_dtmf("1")
    assert done.on_transcript("no")[-1] == Hangup("caller_done")

    more = started(plan)
    more.on_dtmf("1")
    actions = more.on_transcript("yes please")
    assert more.state == "menu" and "press 1" in says(actions)[0]


def test_a_murmur_at_the_question_before_ending_asks_it_again(plan: Dialplan) -> None:
    """ "uh huh" to "Do you want to end the call?" at 'anything else?' is neither a yes nor, by
    meaning, the ask's "yes, something else": the question is asked again; a second murmur goes
    back to 'anything else?'; the call is never ended and the menu is not said."""
    session = started(plan)
    session.on_dtmf("1")
    assert says(session.on_transcript("goodbye", confidence=0.3)) == ["Do you want to end the call?"]
    assert says(session.on_transcript("uh huh", confidence=0.9)) == ["Do you want to end the call?"]
    back = session.on_transcript("mm hmm", confidence=0.9)
    assert says(back) == ["Is there anything else I can help you with?"]
    assert session.state == "anything_else" and not session.ended


def test_anything_else_accepts_menu_choices_directly(plan: Dialplan) -> None:
    """At 'anything else?', a menu choice (by voice or key) is served directly."""
    session = started(plan)
    session.on_dtmf("1")
    assert "We are open" in says(session.on_transcript("opening hours"))[0]
    assert "transfer you" in says(session.on_dtmf("3"))[0]


# --------------------------------------------------------------------------- transfer


def test_transfer_uses_configured_uri_then_hangs_up_on_success(plan: Dialplan) -> None:
    """Asking for an agent transfers to config.transfer_uri; success ends the dialogue."""
    session = started(plan)
    actions = session.on_transcript("agent")
    assert actions[-1] == Transfer(TRANSFER_URI)
    assert not session.expects_input and not session.ended
    assert session.on_transfer_succeeded() == [Hangup("transferred")]
    assert session.ended


def test_transfer_failure_apologises_and_returns_to_menu(plan: Dialplan) -> None:
    """A refused transfer is announced, and the caller is back at the menu."""
    session = started(plan)
    session.on_dtmf("3")
    actions = session.on_transfer_failed("486 Busy Here")
    texts = says(actions)
    assert texts[0].startswith("I'm sorry, I could not transfer you")
    assert "press 1" in texts[1]
    assert isinstance(actions[-1], Listen)
    assert session.state == "menu" and session.expects_input
    failed = [e for e in session.history if e.kind == "transfer_failed"]
    assert failed and failed[0].text == "486 Busy Here"


def test_missing_transfer_uri_fails_over_without_a_refer(plan: Dialplan) -> None:
    """Without config.transfer_uri no Transfer is issued; the failure path runs at once."""
    session = new_call(plan, transfer_uri=None)
    session.start()
    actions = session.on_dtmf("3")
    assert not any(isinstance(a, Transfer) for a in actions)
    assert any(t.startswith("I'm sorry, I could not transfer you") for t in says(actions))
    assert session.state == "menu"


def test_input_during_transfer_is_ignored(plan: Dialplan) -> None:
    """Speech and keys while a transfer is pending do nothing but are recorded."""
    session = started(plan)
    session.on_dtmf("3")
    assert session.on_transcript("hello?") == []
    assert session.on_dtmf("1") == []
    assert session.on_no_input() == []
    assert [e.kind for e in session.history[-2:]] == ["ignored", "ignored"]
    assert session.state == "transfer"


def test_transfer_outcomes_outside_a_transfer_are_ignored(plan: Dialplan) -> None:
    """Transfer results that do not belong to a pending transfer change nothing."""
    session = started(plan)
    assert session.on_transfer_failed("late") == []
    assert session.on_transfer_succeeded() == []
    assert session.state == "menu" and session.expects_input


# --------------------------------------------------------------------------- engine rules


def test_dtmf_during_greeting_answers_the_menu(plan: Dialplan) -> None:
    """A key pressed while the greeting still plays selects the menu option (barge-in)."""
    session = new_call(plan)
    session.start()  # greeting and menu prompt are queued, not yet played
    assert "account balance" in says(session.on_dtmf("1"))[0]


def test_events_after_the_end_return_nothing(plan: Dialplan) -> None:
    """Once hung up, every event returns [] and nothing is recorded or raised."""
    session = started(plan)
    session.on_dtmf("4")
    assert session.ended
    before = session.history
    assert session.on_transcript("balance") == []
    assert session.on_dtmf("1") == []
    assert session.on_no_input() == []
    assert session.on_transfer_failed("x") == []
    assert session.on_transfer_succeeded() == []
    assert session.start() == []
    assert session.history == before


def test_invalid_dtmf_is_ignored(plan: Dialplan) -> None:
    """Something that is not a DTMF key is recorded as ignored and changes nothing."""
    session = started(plan)
    assert session.on_dtmf("x") == []
    assert session.on_dtmf("") == []
    assert session.state == "menu" and session.expects_input


def test_history_records_steps_transcripts_and_intent_scores(plan: Dialplan) -> None:
    """The call record lists steps run, what was heard and the intent chosen with its score."""
    session = started(plan)
    session.on_transcript("check my bounce")
    history = session.history
    assert [e.step for e in history if e.kind == "step"] == [
        "greeting",
        "menu",
        "balance",
        "anything_else",
    ]
    heard = [e for e in history if e.kind == "transcript"]
    assert heard[0].text == "check my bounce" and heard[0].step == "menu"
    intent = [e for e in history if e.kind == "intent"][0]
    assert intent.intent == "balance" and intent.score is not None and 0.7 <= intent.score < 1.0


def test_templated_prompt_is_rendered_and_not_cached() -> None:
    """A prompt with placeholders is rendered per call and carries no cache key."""
    dialplan = inline_plan("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {voice: rms, barge_in: false, no_input_timeout_ms: 3000}
            steps:
              - say: "You are calling {{ called }} from {{ caller }}."
              - ask:
                  prompt: "Ready?"
                  intents: {yes: {examples: ["yes"], goto: done}}
              - id: done
                hangup: {reason: finished}
        """)
    session = DialogueSession(dialplan, "main", call_variables("100", "200", "c1"))
    actions = session.start()
    assert actions == [
        Say("You are calling 200 from 100.", "rms", False, None),
        Say("Ready?", "rms", False, prompt_cache_key("Ready?", "rms")),
        Listen(3000),
    ]
    assert session.on_transcript("yes") == [Hangup("finished")]


def test_intent_without_goto_falls_through_and_flow_end_hangs_up() -> None:
    """An intent without goto continues after the ask; running off the flow's end hangs up."""
    dialplan = inline_plan("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - ask:
                  prompt: "Say yes."
                  intents: {yes: {examples: ["yes"]}}
              - say: "Thanks."
        """)
    session = DialogueSession(dialplan, "main", {})
    session.start()
    assert session.on_transcript("yes") == [
        Say("Thanks.", "English-US.Male-1", True, prompt_cache_key("Thanks.", "English-US.Male-1")),
        Hangup("end_of_flow"),
    ]


def test_ask_without_policies_hangs_up_after_default_reprompts() -> None:
    """Without no_input settings an ask repeats its prompt twice, then hangs up (no_input)."""
    dialplan = inline_plan("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - ask:
                  prompt: "Say yes."
                  intents: {yes: {examples: ["yes"]}}
        """)
    session = DialogueSession(dialplan, "main", {})
    session.start()
    assert says(session.on_no_input()) == ["Say yes."]
    assert says(session.on_no_input()) == ["Say yes."]
    assert session.on_no_input() == [Hangup("no_input")]


def test_runaway_transfer_failure_loop_is_cut_off() -> None:
    """A failure path that loops back to a transfer with no target cannot spin forever."""
    dialplan = inline_plan("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: t
                transfer: {to: "{{ config.transfer_uri }}", on_failure: t}
        """)
    session = DialogueSession(dialplan, "main", {})
    assert session.start() == [Hangup("step_limit")]
    assert session.ended


def test_peek_intent_reports_without_acting(plan: Dialplan) -> None:
    """peek_intent tells which intent a partial transcript completes and changes nothing."""
    session = new_call(plan)
    assert session.peek_intent("balance") is None  # not started: no ask is waiting
    session.start()
    match = session.peek_intent("check my balance")
    assert match is not None and match.name == "balance"
    assert session.peek_intent("I would like to") is None
    assert session.state == "menu" and session.expects_input
    assert not [e for e in session.history if e.kind in ("transcript", "intent")]


def test_unknown_flow_is_refused(plan: Dialplan) -> None:
    """Creating a session for a flow the dialplan lacks fails immediately."""
    with pytest.raises(KeyError):
        DialogueSession(plan, "nope", {})


def test_call_variables_flatten_nested_config() -> None:
    """Configuration is flattened into dotted config.* keys; None values are left out."""
    variables = call_variables(
        "100",
        "200",
        "c1",
        "us-east",
        {"transfer_uri": "sip:a@b", "speech": {"voice": "rms"}, "x": None},
    )
    assert variables == {
        "caller": "100",
        "called": "200",
        "call_id": "c1",
        "region": "us-east",
        "config.transfer_uri": "sip:a@b",
        "config.speech.voice": "rms",
    }


# --------------------------------------------------------------------------- other readings


def test_words_that_select_nothing_are_answered_by_another_reading(plan: Dialplan) -> None:
    """The recogniser's first reading selects nothing; its second does, closely enough: the
    balance is read out and the record says which reading it came from."""
    session = started(plan)
    actions = session.on_transcript("chuck mile ballots", alternatives=("chuck mile ballots please",
                                                                        "check my balance"))
    assert "account balance" in says(actions)[0]
    assert session.call_record()["intents"][-1]["intent"] == "balance"
    assert session.call_record()["intents"][-1]["heard_as"] == "check my balance"


def test_a_first_reading_that_selects_an_intent_is_kept(plan: Dialplan) -> None:
    session = started(plan)
    actions = session.on_transcript("what are your opening hours", alternatives=("check my balance",))
    assert "We are open" in says(actions)[0]
    assert "heard_as" not in session.call_record()["intents"][-1]


def test_another_reading_never_ends_the_call_without_asking(plan: Dialplan) -> None:
    """A goodbye found only in another reading is confirmed first, however plain its words."""
    session = started(plan)
    actions = session.on_transcript("hmm the the", alternatives=("goodbye",))
    assert says(actions) == ["Do you want to end the call?"] and not session.ended
    actions = session.on_transcript("yes")
    assert kinds(actions)[-1] == "Hangup" and session.ended
    assert session.call_record()["intents"][-1]["heard_as"] == "goodbye"


def test_a_distant_other_reading_is_no_answer(plan: Dialplan) -> None:
    """Other readings count only with a close match: a loose one is a no-match, as the first is."""
    from agent.dialplan.asks import ALTERNATIVE_MIN_SCORE, match_intent
    from agent.dialplan.model import AskStep

    ask = next(s for s in plan.flows["main"].steps if isinstance(s, AskStep) and s.id == "menu")
    loose = "uh the money thing"
    match = match_intent(ask, loose)
    assert match is None or match.score < ALTERNATIVE_MIN_SCORE
    session = started(plan)
    actions = session.on_transcript("hmm the the", alternatives=(loose,))
    assert says(actions)[0].startswith("I'm sorry, I did not understand")


def test_other_readings_are_encoded_together_once(plan: Dialplan, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sentence encoder sees a turn's other readings in one batch, and matching them then
    encodes nothing more (each alone costs about as much as the three together)."""
    from agent.dialplan.asks import match_alternative
    from agent.dialplan.model import AskStep
    from agent.dialplan.semantic import shared_encoder

    encoder = shared_encoder()
    if not hasattr(encoder, "remember"):
        pytest.skip("the lighter encoder (OPENCLAW_SENTENCE_ENCODER=wordllama) encodes one at a time")
    batches: list[list[str]] = []
    real = encoder._vectors
    monkeypatch.setattr(encoder, "_vectors", lambda texts: batches.append(list(texts)) or real(texts))
    ask = next(s for s in plan.flows["main"].steps if isinstance(s, AskStep) and s.id == "menu")
    readings = ("my car was stolen on tuesday", "my card was stolen on tuesday", "by card was stolen on tuesday")
    assert match_alternative(ask, readings) is None
    assert batches == [list(readings)]


def test_what_words_come_to_at_an_ask_slot_first_readings_last() -> None:
    """One rule for the dialogue and the benchmark (agent.dialplan.asks.understand): a slot's
    value from the first reading, else the intent its words select, else one the other
    readings select; a slot is never filled from another reading."""
    import datetime
    import os

    from agent.dialplan.asks import understand
    from agent.dialplan.model import AskStep, load_dialplans

    bank = load_dialplans([os.path.join(os.path.dirname(__file__), "..", "..", "dialplans", "bank.yaml")])
    ask = next(s for f in bank.flows.values() for s in f.steps if isinstance(s, AskStep) and s.id == "get_account")
    today = datetime.date(2026, 12, 2)
    digits = "four four seven one zero nine two three"
    filled = understand(ask, f"it's {digits}", today)
    assert filled is not None and filled.match is None and filled.value == "44710923"
    agent = understand(ask, "let me talk to a person", today)
    assert agent is not None and agent.match.name == "agent" and agent.heard_as is None
    assert understand(ask, "hmm the the", today, alternatives=(digits,)) is None
    other = understand(ask, "hmm the the", today, alternatives=(digits, "talk to a person"))
    assert other is not None and other.match.name == "agent" and other.heard_as == "talk to a person"


def test_an_unclear_yes_to_ending_is_asked_again_even_where_yes_is_an_answer_to_the_ask(plan: Dialplan) -> None:
    """At "anything else?", "yes" is also how a caller asks for something more. Asked "Do you want
    to end the call?", an unclear "yeah yeah" is still a yes to that question, said once: the
    question is asked again, the call does not go back to the menu, and a second yes ends it."""
    session = started(plan)
    session.on_transcript("check my balance", confidence=0.9)
    asked = session.on_transcript("okay great i'm all done have a good day", confidence=0.3)
    assert says(asked)[-1] == "Do you want to end the call?"
    again = session.on_transcript("yeah yeah", confidence=0.4)
    assert says(again) == ["Do you want to end the call?"] and not session.ended
    assert kinds(session.on_transcript("yes", confidence=0.5))[-1] == "Hangup" and session.ended

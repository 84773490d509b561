"""A caller who asks for a moment: the words that say so, and how the dialogue meets them."""
from __future__ import annotations

import pytest

from agent.dialplan.engine import Hangup, Listen
from agent.dialplan.model import DialplanError
from agent.dialplan.moment import asks_for_a_moment
from tests.unit.test_dialogue_escalation import PLAN, call, plan_of, says

MOMENT = [
    "hang on", "hold on", "Hold on, let me find my card.", "one moment please", "give me a sec", "just a minute",
    "wait a second", "um, just a sec, let me grab my account number", "could you give me a minute please",
    "bear with me", "let me find it", "okay hold on", "sorry, give me a couple of seconds", "I'm looking for it",
    "hang on I need to find my card", "wait", "just a moment please, I'm getting my card",
]
NOT_A_MOMENT = [
    "hold on I have another question", "wait what are your hours", "hang up", "hold on is that my checking balance",
    "one more thing", "give me my balance", "just check my balance", "let me speak to someone",
    "wait I want to speak to an agent", "I need a minute to think about closing my account", "goodbye",
    "a second question", "",
]


@pytest.mark.parametrize("text", MOMENT)
def test_a_whole_turn_asking_for_a_moment_is_one(text: str) -> None:
    """The request, with politeness and what the caller does meanwhile ("let me grab my card")."""
    assert asks_for_a_moment(text)


@pytest.mark.parametrize("text", NOT_A_MOMENT)
def test_a_turn_that_goes_on_with_a_request_is_not(text: str) -> None:
    """"hold on, I have another question" is a request to match; "a second question" is no pause."""
    assert not asks_for_a_moment(text)


def test_hang_on_is_given_time_not_asked_about_ending_the_call() -> None:
    """"hang on" (close to "hang up" by meaning) gets the hold prompt and a long listen; nothing is
    counted as misunderstood, so the person offer and the give-up come no sooner after it."""
    session = call()
    actions = session.on_transcript("hang on, let me find my card", confidence=0.9)
    assert says(actions) == ["Sure, take your time."]
    assert isinstance(actions[-1], Listen) and actions[-1].no_input_timeout_ms == 30000
    assert [e.kind for e in session.history][-1] == "hold"
    assert says(session.on_transcript("purple monkey dishwasher", confidence=0.9)) == ["Sorry?"]
    actions = session.on_transcript("purple monkey dishwasher", confidence=0.9)
    assert says(actions) == ["I'm having trouble understanding. Would you like to speak to a person?"]
    assert not any(isinstance(a, Hangup) for a in actions)


def test_a_request_after_hold_on_is_matched_as_usual() -> None:
    actions = call().on_transcript("hold on, can I check my balance", confidence=0.9)
    assert says(actions)[0] == "You have ten dollars."


def test_the_hold_settings_change_the_prompt_and_wait_or_turn_it_off() -> None:
    custom = PLAN.replace("  confirm: {min_score: 0.9, min_confidence: 0.6}\n",
                          "  confirm: {min_score: 0.9, min_confidence: 0.6}\n"
                          "  hold: {prompt: \"No problem, I'll wait.\", timeout_ms: 60000}\n")
    actions = call(custom).on_transcript("one moment please", confidence=0.9)
    assert says(actions) == ["No problem, I'll wait."] and actions[-1].no_input_timeout_ms == 60000
    off = PLAN.replace("  confirm: {min_score: 0.9, min_confidence: 0.6}\n",
                       "  confirm: {min_score: 0.9, min_confidence: 0.6}\n  hold: false\n")
    assert says(call(off).on_transcript("one moment please", confidence=0.9)) != ["Sure, take your time."]


def test_an_intent_whose_own_examples_say_it_wins() -> None:
    """A dialplan that offers "hold on" as an answer of its own gets it."""
    plan = PLAN.replace('goodbye: {examples: ["goodbye", "bye bye"], dtmf: "9", goto: goodbye}',
                        'goodbye: {examples: ["goodbye", "bye bye"], dtmf: "9", goto: goodbye}\n'
                        '            wait: {examples: ["hold on"], goto: balance}')
    assert says(call(plan).on_transcript("hold on", confidence=0.9))[0] == "You have ten dollars."


def test_a_bad_hold_setting_is_refused_with_its_place() -> None:
    with pytest.raises(DialplanError) as caught:
        plan_of(PLAN.replace("  confirm: {min_score: 0.9, min_confidence: 0.6}\n",
                             "  confirm: {min_score: 0.9, min_confidence: 0.6}\n  hold: {timeout_ms: 5}\n"))
    assert "inline.yaml:5:" in str(caught.value) and "timeout_ms" in str(caught.value)

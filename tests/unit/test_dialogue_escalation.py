"""Tests for ending and transferring calls safely: confirmation, escalation and the person offer."""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone

import pytest

from agent.dialplan.asks import match_intent
from agent.dialplan.engine import Action, DialogueSession, Hangup, Listen, Say, Transfer
from agent.dialplan.model import DialplanError, parse_dialplan

FIXED_NOW = datetime(2025, 3, 4, 10, 0, tzinfo=timezone.utc)

PLAN = """\
version: 1
settings:
  escalation: agent
  confirm: {min_score: 0.9, min_confidence: 0.6}
routes: [{flow: main}]
flows:
  main:
    steps:
      - id: menu
        ask:
          prompt: "Say balance or goodbye."
          intents:
            balance: {examples: ["balance", "check my balance"], dtmf: "1", goto: balance}
            goodbye: {examples: ["goodbye", "bye bye"], dtmf: "9", goto: goodbye}
          no_match:
            reprompts: ["Sorry?", "Sorry, once more?"]
            then: no_match_bye
      - id: balance
        say: "You have ten dollars."
        next: menu
      - id: agent
        say: "Transferring you."
      - id: transfer
        transfer: {to: "sip:desk@pbx.example.com"}
      - id: goodbye
        say: "Goodbye."
      - id: bye
        hangup: {reason: caller_done}
      - id: no_match_bye
        hangup: {reason: no_match}
"""


def plan_of(text: str = PLAN):
    return parse_dialplan(textwrap.dedent(text), "inline.yaml")


def call(text: str = PLAN) -> DialogueSession:
    session = DialogueSession(plan_of(text), "main", {"call_id": "c1"}, now=lambda: FIXED_NOW)
    session.start()
    return session


def says(actions: list[Action]) -> list[str]:
    return [a.text for a in actions if isinstance(a, Say)]


# --------------------------------------------------------------------------- confirmation


def test_a_clear_goodbye_heard_with_confidence_ends_the_call() -> None:
    """An exact example with a confident recogniser is acted on at once."""
    actions = call().on_transcript("goodbye", confidence=0.95)
    assert says(actions) == ["Goodbye."] and actions[-1] == Hangup("caller_done")


def test_a_goodbye_heard_with_low_confidence_is_confirmed_and_yes_ends_the_call() -> None:
    """Low recogniser confidence turns a goodbye into a question; yes then ends the call."""
    session = call()
    actions = session.on_transcript("bye that i'd will", confidence=0.4)
    assert says(actions) == ["Do you want to end the call?"]
    assert isinstance(actions[-1], Listen) and actions[-1].slot_type == "yes_no"
    assert not session.ended
    actions = session.on_transcript("yes", confidence=0.9)
    assert actions[-1] == Hangup("caller_done")
    assert session.variables["intent"] == "goodbye"


def test_no_to_the_confirmation_goes_back_to_the_ask() -> None:
    """Answering no keeps the call: the ask's prompt again, and its intents listened for."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    actions = session.on_transcript("no", confidence=0.9)
    assert says(actions) == ["Say balance or goodbye."]
    assert isinstance(actions[-1], Listen) and actions[-1].slot_type is None
    assert says(session.on_transcript("balance", confidence=0.9))[0] == "You have ten dollars."


def test_neither_yes_nor_no_repeats_the_question_once_then_returns_to_the_ask() -> None:
    """One unclear reply repeats the question; a second one goes back to the ask, never ends."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    again = session.on_transcript("purple", confidence=0.9)
    assert says(again) == ["Do you want to end the call?"]
    back = session.on_no_input()
    assert says(back) == ["Say balance or goodbye."] and not session.ended


def test_saying_the_same_request_again_confirms_it() -> None:
    """Repeating the goodbye instead of saying yes is taken as the confirmation."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    assert session.on_transcript("bye bye", confidence=0.3)[-1] == Hangup("caller_done")


def test_another_request_in_reply_to_the_confirmation_is_answered() -> None:
    """A reply that is an answer to the ask (balance) is handled as one."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    assert says(session.on_transcript("check my balance", confidence=0.9))[0] == (
        "You have ten dollars.")


def test_a_weak_intent_score_is_confirmed_even_without_a_confidence() -> None:
    """Without a confidence only the score counts: a loose match of goodbye asks first."""
    session = call()
    match = session.peek_intent("okay bye")
    assert match is None  # not an exact example: no early end of turn
    ask = plan_of().flow("main").step("menu")
    match = match_intent(ask, "okay bye")
    assert match is not None and match.name == "goodbye" and match.score < 0.9
    assert says(session.on_transcript("okay bye")) == ["Do you want to end the call?"]


def test_without_a_confidence_a_strong_match_acts_as_before() -> None:
    """Callers that pass no confidence keep the old behaviour for clear words."""
    assert call().on_transcript("goodbye")[-1] == Hangup("caller_done")


def test_a_low_confidence_transfer_is_confirmed_with_the_transfer_question() -> None:
    """A request that leads to a transfer asks to put the caller through; yes transfers."""
    session = call()
    actions = session.on_transcript("agent", confidence=0.2)
    assert says(actions) == ["Do you want me to put you through to an agent?"]
    actions = session.on_dtmf("1")  # key 1 answers yes
    assert isinstance(actions[-1], Transfer)


def test_answers_that_do_not_end_the_call_are_never_confirmed() -> None:
    """Balance is harmless: acted on even at low confidence."""
    assert says(call().on_transcript("balance", confidence=0.1))[0] == "You have ten dollars."


def test_keys_are_deliberate_and_act_without_confirmation() -> None:
    """DTMF 9 (goodbye) ends the call at once."""
    assert call().on_dtmf("9")[-1] == Hangup("caller_done")


def test_partial_words_complete_a_goodbye_only_when_exactly_an_example() -> None:
    """peek_intent lets the endpointer cut the turn short on "goodbye", not on "bye that"."""
    session = call()
    assert session.peek_intent("bye that") is None
    match = session.peek_intent("goodbye")
    assert match is not None and match.name == "goodbye"
    assert session.peek_intent("check my balance") is not None


def test_a_match_by_meaning_speeds_up_an_ending_only_when_it_will_be_confirmed() -> None:
    """peek_intent(by_meaning=True), asked once the caller is quiet: "how much money is left in my
    account" is balance by meaning (not by the examples' words). "see you later", goodbye by
    meaning, ends the turn early only because the dialogue will ask "Do you want to end the
    call?" before hanging up; where such a match would be acted on at once (confirm.min_score
    0.7), it is no speed-up."""
    session = call()
    assert session.peek_intent("how much money is left in my account") is None
    match = session.peek_intent("how much money is left in my account", by_meaning=True)
    assert match is not None and match.name == "balance"
    assert session.peek_intent("see you later") is None
    match = session.peek_intent("see you later", by_meaning=True)
    assert match is not None and match.name == "goodbye" and match.score < 0.9
    assert says(session.on_transcript("see you later")) == ["Do you want to end the call?"]
    unconfirmed = call(PLAN.replace("min_score: 0.9", "min_score: 0.7"))
    assert unconfirmed.peek_intent("see you later", by_meaning=True) is None
    assert unconfirmed.peek_intent("goodbye", by_meaning=True) is not None  # exactly an example
    assert isinstance(unconfirmed.on_transcript("see you later")[-1], Hangup)


# --------------------------------------------------------------------------- escalation


def test_every_ask_in_scope_takes_a_request_for_a_person_and_key_zero() -> None:
    """An ask without an agent intent still reaches the escalation step, by words or 0."""
    session = call()
    assert isinstance(session.on_dtmf("0")[-1], Transfer)
    session = call()
    actions = session.on_transcript("speak to someone", confidence=0.9)
    assert says(actions) == ["Transferring you."] and isinstance(actions[-1], Transfer)


def test_an_intent_already_going_to_the_escalation_step_gains_the_words() -> None:
    """The plan's own agent intent keeps its key and learns the everyday requests."""
    plan = plan_of(PLAN.replace(
        'goodbye: {examples: ["goodbye", "bye bye"], dtmf: "9", goto: goodbye}',
        'goodbye: {examples: ["goodbye", "bye bye"], dtmf: "9", goto: goodbye}\n'
        '            staff: {examples: ["staff"], dtmf: "5", goto: agent}'))
    menu = plan.flow("main").step("menu")
    staff = [i for i in menu.intents if i.goto == "agent"]
    assert len(staff) == 1 and staff[0].dtmf == "5" and "a human" in staff[0].examples


def test_escalation_to_an_unknown_step_is_an_error_at_its_line() -> None:
    """The escalation step must exist in the flow; the error points at the setting."""
    with pytest.raises(DialplanError) as caught:
        plan_of(PLAN.replace("escalation: agent", "escalation: agnet"))
    assert "inline.yaml:3:15: 'escalation' refers to unknown step 'agnet'" in str(caught.value)


def test_confirmation_settings_are_checked_by_the_schema() -> None:
    """A confidence above 1 is refused with its position."""
    with pytest.raises(DialplanError) as caught:
        plan_of(PLAN.replace("min_confidence: 0.6", "min_confidence: 6"))
    assert "inline.yaml:4:" in str(caught.value)


def test_the_question_before_acting_listens_with_the_confirm_reask_setting() -> None:
    """``confirm.reask_after_ms`` reaches the question's Listen (the session says the question
    again that soon after an acknowledgement begun over it); a negative value is refused."""
    for plan, want in ((PLAN, 1000), (PLAN.replace("min_confidence: 0.6", "min_confidence: 0.6, reask_after_ms: 700"), 700)):
        session = call(plan)
        actions = session.on_transcript("bye bye", confidence=0.3)
        assert says(actions)[-1] == "Do you want to end the call?"
        listens = [a for a in actions if isinstance(a, Listen)]
        assert listens[-1].slot_type == "yes_no" and listens[-1].reask_after_ms == want
    with pytest.raises(DialplanError) as caught:
        plan_of(PLAN.replace("min_confidence: 0.6", "min_confidence: 0.6, reask_after_ms: -5"))
    assert "inline.yaml:4:" in str(caught.value)


# --------------------------------------------------------------------------- the person offer


def test_two_answers_not_understood_offer_a_person_and_yes_transfers() -> None:
    """The default policy: after two no-matches a person is offered; yes goes there."""
    session = call()
    assert says(session.on_transcript("purple", confidence=0.9)) == ["Sorry?"]
    offer = session.on_transcript("elephants", confidence=0.9)
    assert says(offer) == ["I'm having trouble understanding. Would you like to speak to a person?"]
    assert isinstance(session.on_transcript("yes please")[-1], Transfer)


def test_a_yes_word_in_an_unclear_sentence_does_not_accept_the_offer() -> None:
    """A yes inside a longer sentence heard with low confidence ("i want yes i can have a
    better thing", the recogniser's words for "I want- yes, I had another thing") asks again;
    a bare yes, even heard unclearly, and a yes heard clearly still put the caller through."""
    for reply, confidence, transfers in [
        ("i want yes i can have a better thing", 0.35, False),
        ("yeah sure", 0.35, True),
        ("ok great", 0.35, True),
        ("yes i would like that", 0.9, True),
    ]:
        session = call()
        session.on_transcript("purple", confidence=0.9)
        session.on_transcript("elephants", confidence=0.9)
        actions = session.on_transcript(reply, confidence=confidence)
        assert isinstance(actions[-1], Transfer) == transfers, (reply, actions)
        if not transfers:
            assert says(actions) == ["I'm having trouble understanding. Would you like to speak to a person?"]
            assert isinstance(session.on_transcript("yes", confidence=0.9)[-1], Transfer)


def test_a_word_that_opens_a_sentence_is_no_yes_to_the_offer() -> None:
    """"right, I'll let you get on" (a caller leaving) heard clearly does not accept the offer of a
    person: "right" opens the sentence; "sure, put me through" and a bare "right" do."""
    for reply, transfers in [("right, i'll let you get on", False), ("okay i'll call back another time", False),
                             ("sure, put me through", True), ("right", True), ("all right then", True)]:
        session = call()
        session.on_transcript("purple", confidence=0.9)
        session.on_transcript("elephants", confidence=0.9)
        actions = session.on_transcript(reply, confidence=0.9)
        assert isinstance(actions[-1], Transfer) == transfers, (reply, actions)


def test_a_yes_word_inside_a_sentence_or_before_another_request_is_no_yes_to_the_offer() -> None:
    """"I want to make sure ..." says no yes; "yeah hi, check my balance" answers the ask: the
    balance, not a transfer; "there is, yeah" and "um, yes please" still say yes."""
    for reply, transfers, said in [("i want to make sure i can cover the loan", False, None),
                                   ("yeah hi, check my balance", False, "You have ten dollars."),
                                   ("um, yes please", True, None), ("i would, yeah", True, None)]:
        session = call()
        session.on_transcript("purple", confidence=0.9)
        session.on_transcript("elephants", confidence=0.9)
        actions = session.on_transcript(reply, confidence=0.9)
        assert isinstance(actions[-1], Transfer) == transfers, (reply, actions)
        assert said is None or said in says(actions), (reply, actions)


def test_a_yes_with_the_request_confirmed_still_ends_the_call() -> None:
    """"yes, bye bye" to "Do you want to end the call?" ends it: what follows the yes is the request asked about."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    assert session.on_transcript("yes, bye bye", confidence=0.9)[-1] == Hangup("caller_done")


def test_a_word_that_opens_a_sentence_is_no_yes_to_ending_the_call() -> None:
    """"okay, what about my balance" to "Do you want to end the call?" is the balance, not a yes."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    actions = session.on_transcript("okay, what about my balance", confidence=0.9)
    assert not session.ended and "You have ten dollars." in says(actions), actions


def test_an_unclear_yes_in_a_sentence_does_not_end_the_call() -> None:
    """The same for the question before ending the call."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    again = session.on_transcript("end yes the tell me what's left", confidence=0.4)
    assert says(again) == ["Do you want to end the call?"] and not session.ended


def test_an_unclear_bare_yes_ends_the_call_only_when_said_again() -> None:
    """A backchannel can be heard as "ok": a bare yes heard unclearly asks once more before the
    call ends; a second yes ends it, and a clear yes ends it at once."""
    session = call()
    session.on_transcript("goodbye", confidence=0.3)
    again = session.on_transcript("ok", confidence=0.4)
    assert says(again) == ["Do you want to end the call?"] and not session.ended
    assert session.on_transcript("yes", confidence=0.5)[-1] == Hangup("caller_done")
    clear = call()
    clear.on_transcript("goodbye", confidence=0.3)
    assert clear.on_transcript("okay", confidence=0.9)[-1] == Hangup("caller_done")


def test_declining_the_person_continues_the_reprompts_then_the_policy() -> None:
    """No to the offer brings the next reprompt; the next failure takes 'then'."""
    session = call()
    session.on_transcript("purple")
    session.on_transcript("elephants")
    assert says(session.on_transcript("no")) == ["Sorry, once more?"]
    assert session.on_transcript("green")[-1] == Hangup("no_match")


def test_a_person_is_offered_before_giving_up_even_when_the_policy_gives_up_sooner() -> None:
    """With one reprompt only, the offer comes in place of the hangup."""
    session = call(PLAN.replace('reprompts: ["Sorry?", "Sorry, once more?"]',
                                'reprompts: ["Sorry?"]\n            offer_person_after: 3'))
    session.on_transcript("purple")
    offer = session.on_transcript("elephants")
    assert "speak to a person" in says(offer)[0] and not session.ended
    assert session.on_transcript("no")[-1] == Hangup("no_match")


def test_the_offer_can_be_set_per_ask_and_turned_off() -> None:
    """offer_person_after on the ask overrides the settings; 0 never offers."""
    session = call(PLAN.replace('then: no_match_bye',
                                'then: no_match_bye\n            offer_person_after: 1\n'
                                '            offer_prompt: "Want a human?"'))
    assert says(session.on_transcript("purple")) == ["Want a human?"]
    never = call(PLAN.replace("  escalation: agent\n",
                              "  escalation: agent\n  no_match: {offer_person_after: 0}\n"))
    never.on_transcript("purple")
    never.on_transcript("elephants")
    assert never.on_transcript("green")[-1] == Hangup("no_match")


def test_without_an_escalation_step_nothing_is_offered() -> None:
    """A plan with no escalation keeps its reprompts and 'then' unchanged."""
    session = call(PLAN.replace("  escalation: agent\n", "").replace(
        'dtmf: "1", goto: balance}',
        'dtmf: "1", goto: balance}\n            staff: {examples: ["staff"], goto: agent}'))
    assert says(session.on_transcript("purple")) == ["Sorry?"]
    assert says(session.on_transcript("elephants")) == ["Sorry, once more?"]
    assert session.on_transcript("green")[-1] == Hangup("no_match")


def test_a_request_for_a_person_in_reply_to_the_offer_accepts_it_despite_a_no_word() -> None:
    """ "a real person, not a machine" is a yes to the offer, though it says "not"."""
    session = call()
    session.on_transcript("purple")
    session.on_transcript("elephants")
    assert isinstance(session.on_transcript("a real person, not a machine")[-1], Transfer)


def test_an_unsure_request_for_a_person_in_reply_to_the_offer_asks_again_instead_of_transferring() -> None:
    """A misheard reply that only resembles a request for a person must not put the caller through:
    below the confirmation's confidence the offer is put once more, and nothing is transferred."""
    session = call()
    session.on_transcript("purple", confidence=0.9)
    session.on_transcript("elephants", confidence=0.9)
    again = session.on_transcript("a real person", confidence=0.3)
    assert not any(isinstance(a, Transfer) for a in again)
    assert says(again) == ["I'm having trouble understanding. Would you like to speak to a person?"]
    assert isinstance(session.on_transcript("yes", confidence=0.9)[-1], Transfer)


def test_a_reply_to_the_offer_that_only_resembles_a_request_for_a_person_does_not_transfer() -> None:
    """A misheard reply ("but the total in my living", near "a live agent" by meaning alone) is not
    taken as accepting the offer: only the dialplan's own words for a person are."""
    session = call()
    session.on_transcript("purple", confidence=0.9)
    session.on_transcript("elephants", confidence=0.9)
    reply = session.on_transcript("but the total in my living", confidence=0.9)
    assert not any(isinstance(a, Transfer) for a in reply)


def test_at_a_question_a_bare_yes_or_no_is_the_answer_the_end_of_turn_may_take() -> None:
    """peek_intent at "Do you want to end the call?": yes or no for a bare answer ("okay great",
    "nope, thanks"), which lets the turn end after the answer's short silence; nothing for more
    words ("yes and my balance") or none."""
    session = call()
    session.on_transcript("bye that i'd will", confidence=0.4)
    assert session.peek_intent("okay great").name == "yes"
    assert session.peek_intent("nope, thanks").name == "no"
    assert session.peek_intent("yes and my balance") is None
    assert session.peek_intent("um") is None


def test_a_yes_with_words_at_a_free_text_ask_still_answers_the_question() -> None:
    """At an ask that takes free text, any words would fill its slot: "yes please, do it" to
    "Do you want to end the call?" ends the call, it is not taken as the text."""
    session = call(PLAN.replace('''          intents:
            balance: {examples: ["balance", "check my balance"], dtmf: "1", goto: balance}''', '''          slot: {name: question, type: text}
          intents:
            balance: {examples: ["balance", "check my balance"], dtmf: "1", goto: balance}'''))
    session.on_transcript("goodbye", confidence=0.3)
    assert session.on_transcript("yes please, do it", confidence=0.9)[-1] == Hangup("caller_done")

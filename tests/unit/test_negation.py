"""Tests for requests said in the negative: "I don't want to talk to a person" asks for no
person, "I'm not done" closes nothing, and what follows the negation is still heard."""

from __future__ import annotations

import pytest

from agent.dialplan.intents import IntentMatcher
from agent.dialplan.negation import read
from agent.dialplan.semantic import shared_encoder

MENU = {
    "balance": ["balance", "account balance", "check my balance", "how much money do I have"],
    "hours": ["opening hours", "hours", "when are you open"],
    "agent": ["agent", "talk to a person", "representative", "customer service"],
    "goodbye": ["goodbye", "bye bye", "hang up", "no thanks"],
}
ANYTHING_ELSE = dict(MENU, nothing_else=["no", "no thank you", "nothing else", "that is all"],
                     something_else=["yes", "yes please", "something else"])


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("I don't want to talk to a person", ""),
        ("no, I don't want to hang up", ""),
        ("please do not transfer me", ""),
        ("don't hang up", ""),
        ("I don't want you to put me through", ""),  # an order's verb does not end the negation
        ("I don't want to wait, put me through", "i put me through"),  # ... but a comma does
        ("no, please, do not hang up", ""),
        ("I don't want to talk to a robot I want a person", None),  # not wanting a machine
        ("I don't need my balance, just the hours", "i just the hours"),
        ("I do not want to hang up I want my balance", "i i want my balance"),
        ("I don't need anything thanks bye", "i thanks bye"),
        ("I don't know my balance", None),  # not knowing it is asking for it
        ("don't know, what's my balance", None),
        ("what is my balance", None),
    ],
)
def test_what_the_caller_does_not_want_is_taken_out(text: str, rest: str | None) -> None:
    assert read(text).without_unwanted == rest


@pytest.mark.parametrize(
    ("text", "not_done"),
    [
        ("wait, I'm not done yet", True),
        ("no I'm not finished", True),
        ("I haven't finished", True),
        ("we're not quite through", True),
        ("I'm done", False),
        ("not today thanks", False),
        ("that's not all", False),
    ],
)
def test_not_done(text: str, not_done: bool) -> None:
    assert read(text).not_done is not_done


def test_an_example_said_in_the_negative_stands() -> None:
    """A dialplan author's own negated example ("I don't want it any more") is what it asks for."""
    matcher = IntentMatcher({"cancel": ["cancel my order", "I don't want it any more"], "status": ["where is my order"]})
    match = matcher.match("I don't want it any more")
    assert match is not None and match.name == "cancel", match


@pytest.fixture(scope="module", params=["words", "meaning"])
def matchers(request: pytest.FixtureRequest) -> tuple[IntentMatcher, IntentMatcher]:
    encoder = shared_encoder() if request.param == "meaning" else None
    if request.param == "meaning":
        assert encoder is not None
    return IntentMatcher(MENU, encoder=encoder), IntentMatcher(ANYTHING_ELSE, encoder=encoder)


@pytest.mark.parametrize(
    "text",
    ["I don't want to talk to a person", "no I don't want to hang up", "I don't need my balance",
     "please don't transfer me to an agent", "please don't transfer me", "no i don't want to hang",
     "i don't want to talk the person", "you know i don't want to hang up"],
)
def test_a_negated_request_selects_nothing(matchers: tuple[IntentMatcher, IntentMatcher], text: str) -> None:
    menu, anything_else = matchers
    plain = text.replace("don't want to ", "want to ").replace("don't need ", "need ")
    assert menu.match(plain) is not None or "transfer" in text or "hang" in text  # the words without the negation match
    assert menu.match(text) is None, menu.match(text)
    assert anything_else.match(text) is None, anything_else.match(text)


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("I don't need my balance, I want to talk to a person about it", "agent"),
        ("I don't want to hang up, I want my account balance", "balance"),
        ("I don't know my balance", "balance"),
    ],
)
def test_what_follows_the_negation_is_heard(matchers: tuple[IntentMatcher, IntentMatcher], text: str,
                                            intent: str) -> None:
    match = matchers[0].match(text)
    assert match is not None and match.name == intent, match


@pytest.mark.parametrize("text", ["wait, I'm not done yet", "no, I'm not finished"])
def test_not_done_closes_nothing(matchers: tuple[IntentMatcher, IntentMatcher], text: str) -> None:
    for matcher in matchers:
        match = matcher.match(text)
        assert match is None or match.name not in ("goodbye", "nothing_else"), match


@pytest.mark.parametrize("text", ["wait, I'm not done yet", "no, I'm not finished"])
def test_not_done_alone_asks_for_something_else_where_the_ask_takes_it(
        matchers: tuple[IntentMatcher, IntentMatcher], text: str) -> None:
    """At "anything else?" a caller who says only that they are not done has more to ask; at a
    menu with no such intent the words select nothing (a reprompt)."""
    assert matchers[0].match(text) is None
    match = matchers[1].match(text)
    assert match is not None and match.name == "something_else", match
    assert match.score < 0.9  # not the dialplan's own words: the turn's end is not hurried


@pytest.mark.parametrize(("text", "intent"), [("I don't need anything else", "nothing_else"), ("no thanks", "goodbye")])
def test_answers_said_in_the_negative_still_select(matchers: tuple[IntentMatcher, IntentMatcher], text: str,
                                                   intent: str) -> None:
    match = matchers[1].match(text)
    assert match is not None and match.name == intent, match


def test_not_wanting_a_machine_asks_for_a_person() -> None:
    menu = IntentMatcher(MENU, encoder=shared_encoder())
    match = menu.match("I don't want to talk to a robot")
    assert match is not None and match.name == "agent", match


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("I'm not finished, there's another thing", "there's another thing"),
        ("no I'm not done here, what are your hours", "what are your hours"),
        ("wait, I'm not done yet", ""),
    ],
)
def test_after_not_done_is_the_request(text: str, rest: str) -> None:
    assert read(text).after_not_done == rest


def test_what_follows_not_done_is_matched(matchers: tuple[IntentMatcher, IntentMatcher]) -> None:
    match = matchers[0].match("no I'm not done, what are your opening hours")
    assert match is not None and match.name == "hours", match

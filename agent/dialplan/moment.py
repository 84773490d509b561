"""Does the caller ask for a moment? ("hold on", "give me a second, let me find it").

Callers say it while they look for a card or an account number, or to gather their thoughts. Read
as a request, its words come near the wrong things ("hang on" is close to "hang up", "one moment
please" to "somebody please"), so the dialogue answers it before matching intents (the ask's
``hold`` settings): the whole turn must be the request for a moment, optionally with what the
caller is doing meanwhile ("let me grab my card"). "Hold on, I have another question" is not one:
it goes on with a request, and is matched as any other words.
"""
from __future__ import annotations

import re

from agent.dialplan.intents import normalize

__all__ = ["asks_for_a_moment"]

_SPAN = r"(?:sec|second|seconds|moment|moments|minute|minutes|mo|tick|bit)"
"""a short while, as callers name it"""
#: how a request for a moment begins (words as :func:`normalize` gives them: no apostrophes, and
#: "hang on" already read as "wait"); the span that may follow "wait" or "hold on" is in _MEANWHILE
_HEAD = re.compile(
    r"^(?:(?:can|could|would|will) you |please |if you could |just )*"
    r"(?:hold on|hold up|hang tight|hold the line|wait|bear with me|"
    r"(?:give me|i need|gimme|allow me|just|one|for|half)"
    rf"(?: (?:a|one|just|a few|a couple|a couple of|two|half a|another|quick))* {_SPAN}|"
    r"let me (?:see|check|look|find|get|grab|think|pull)|"
    r"(?:im|i am) (?:looking|checking|getting|grabbing|finding)|"
    rf"(?:a|just a|just one) {_SPAN})\b")
#: words the rest of such a turn may hold: what the caller is doing meanwhile, politeness, time
_MEANWHILE = frozenset("""
please sorry thanks thank you okay ok alright right yes no um uh er so just a an the one two few couple of sec second
seconds moment moments minute minutes mo tick bit quick quickly real while i im am me let get grab find look looking
check checking see think finding getting grabbing pull up need to have got gotta going gonna it its that this
my our card cards account number numbers details wallet purse statement bag pin code here somewhere where is are
for on hold wait bear with line now go still ill be back must put down glasses phone
""".split())
_OPENERS = frozenset("okay ok oh um uh er erm yeah yes sorry so well right alright actually".split())


def asks_for_a_moment(text: str) -> bool:
    """Is the whole of *text* a request for a moment ("hang on", "um, just a sec, let me find my
    card", "could you give me a minute please")? Not when more follows than what the caller is
    doing meanwhile ("hold on, what are your hours")."""
    words = normalize(text)
    while words and words[0] in _OPENERS:
        words = words[1:]
    said = " ".join(words)
    head = _HEAD.match(said)
    if head is None:
        return False
    return all(w in _MEANWHILE for w in said[head.end():].split())

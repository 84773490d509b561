"""Requests said in the negative: "I don't want to talk to a person" asks for no person.

Both the examples' words and a sentence encoder read "I don't want to hang up" as close to
"hang up", and "I'm not finished" as close to "I'm finished, goodbye". :func:`read` works out,
once for a transcript, what such words do not ask for (:class:`Negation`), before the dialogue
acts on them:

* ``without_unwanted``: the words without what the caller says they do not want or need ("don't
  want to talk to a person", "I don't need my balance", "do not hang up"), up to where the
  caller goes on with something else ("... , I want a person", "... , just my balance",
  "... thanks bye"); the rest of the words are matched instead;
* ``refuses_closing``: what they do not want is the call's end ("no, I don't want to hang up");
* ``not_done``: "I'm not done", "I'm not finished yet", "I haven't finished": words that never
  close a call; what follows them (``after_not_done``: "..., there's another thing") is the
  caller's request.

Word rules rather than a model: the sentence encoder (:mod:`agent.dialplan.semantic`) puts a
sentence and its negation close together, and these few constructions are the ones callers use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Negation", "read"]

_CONTRACTIONS = (
    (re.compile(r"\bcan't\b"), "can not"),
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"\bain't\b"), "is not"),
    (re.compile(r"\b(\w+)n't\b"), r"\1 not"),
    (re.compile(r"\bdont\b"), "do not"),
    (re.compile(r"\bdoesnt\b"), "does not"),
    (re.compile(r"\bdidnt\b"), "did not"),
)

#: a negated wish: "do not want to", "don't really need", "never wanted", "no longer need"; and
#: a negated order at the start of the words ("don't hang up", "please do not transfer me")
_UNWANTED = re.compile(
    r"\b(?:(?:do|does|did) not|never|no longer)\s+(?:really\s+|even\s+)?"
    r"(?:want|wants|wanted|wanna|need|needs|needed|wish)\b(?:\s+to\b)?"
    r"|^(?:(?:please|no|oh|well|um|uh)(?:\s+,)?\s+)*do not\b(?!\s+(?:know|think|understand|remember|see)\b)"
)

#: words with which the caller goes on to something else after what they do not want: a new
#: clause ("i want", "can you"), "but"/"just"/"instead", or a closing ("thanks bye"). Not the
#: verbs of an order ("put me through"): "I don't want you to put me through" goes on with them
_GOES_ON = frozenset("""
    i i'm i'd i'll i've im id ill ive but just instead rather can could would
    thanks thank cheers bye goodbye
    """.split())

#: "not done", "not finished yet", "not quite through", "haven't finished", "not over"
_NOT_DONE = re.compile(
    r"\bnot\s+(?:quite\s+|yet\s+|all\s+|totally\s+|completely\s+)?(?:done|finished|through|over|complete)\b"
    r"|\bnot\s+(?:finished|done)\s+yet\b|\bhave not\s+(?:finished|ended|completed)\b"
)

#: words of ending a call: not wanting them is not wanting to close ("don't want to hang up")
_CLOSING_WORDS = frozenset("hang end finish finished disconnect bye goodbye leave go off stop close".split())

#: not wanting a machine is asking for a person ("I don't want to talk to a robot"): such words
#: are left as they are
_MACHINE = frozenset("robot robots machine machines computer computers bot bots automated recording system".split())


#: words that are no request on their own (what is left of "no, I don't want to hang up")
_NOT_A_REQUEST = frozenset("""
    no nope nah yes yeah yep okay ok oh well um uh so and but just i i'm im me please then now
    really actually you know
    """.split())


def _plain(text: str) -> str:
    """Lower-case words, contractions written out, a comma or sentence mark inside the words as
    a "," of its own (where a negated wish ends: "I don't want to wait, put me through")."""
    marked = re.sub(r"[,;.?!]+", " , ", text.lower().replace("’", "'"))
    lowered = " ".join(re.sub(r"[^a-z0-9', ]+", " ", marked).split()).strip(" ,")
    for pattern, written in _CONTRACTIONS:
        lowered = pattern.sub(written, lowered)
    return lowered


@dataclass(frozen=True)
class Negation:
    """What a transcript says in the negative (:func:`read`), worked out once per transcript."""

    #: the caller says they are not done ("wait, I'm not done yet", "I haven't finished")
    not_done: bool
    #: what they say after that ("I'm not finished, there's another thing" -> "there's another
    #: thing"); "" when nothing that could be a request follows or they did not say it
    after_not_done: str
    #: the words without what they say they do not want ("I don't want to talk to a person, I
    #: want my balance" -> "i i want my balance"); None when they say no such thing, "" when
    #: nothing that could be a request is left ("no, I don't want to hang up")
    without_unwanted: str | None
    #: what they do not want is the call's end ("no, I don't want to hang up")
    refuses_closing: bool

    @property
    def refuses_to_close(self) -> bool:
        """No closing intent may be taken from these words."""
        return self.not_done or self.refuses_closing


def read(text: str) -> Negation:
    """What *text* says in the negative (see the module)."""
    plain = _plain(text)
    not_done = list(_NOT_DONE.finditer(plain))
    after = [w for w in plain[not_done[-1].end():].split() if w != ","] if not_done else []
    while after and after[0] in ("yet", "here"):
        after = after[1:]
    split = _split_unwanted(plain)
    without = None if split is None else "" if _no_request(split[0]) else " ".join(split[0])
    return Negation(not_done=bool(not_done), after_not_done="" if _no_request(after) else " ".join(after),
                    without_unwanted=without,
                    refuses_closing=split is not None and bool(_CLOSING_WORDS.intersection(split[1])))


def _no_request(words: list[str]) -> bool:
    return all(w in _NOT_A_REQUEST for w in words)


def _split_unwanted(plain: str) -> tuple[list[str], list[str]] | None:
    """The words of *plain* (:func:`_plain`) outside and inside what the caller says they do not
    want; None when it says no such thing, or does not want a machine (:data:`_MACHINE`)."""
    found = _UNWANTED.search(plain)
    if found is None:
        return None
    kept: list[str] = []
    unwanted: list[str] = []
    rest = plain
    while found is not None:
        kept.extend(rest[: found.start()].split())
        after = rest[found.end():].split()
        # the negated words run to where the caller goes on with something else, or to a comma
        n = next((i for i, w in enumerate(after) if (i > 0 and w in _GOES_ON) or w == ","), len(after))
        if _MACHINE.intersection(after[:n]):
            return None
        unwanted.extend(after[:n])
        rest = " ".join(after[n:])
        found = _UNWANTED.search(rest)
    kept.extend(rest.split())
    return [w for w in kept if w != ","], unwanted

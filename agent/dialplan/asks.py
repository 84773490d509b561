"""What the caller's words and keys mean at an ask step, and the ``Listen`` that waits for them."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from agent.dialplan.actions import Listen
from agent.dialplan.intents import STOP_WORDS, IntentMatch, IntentMatcher, expand_synonyms, normalize
from agent.dialplan.model import AskStep, Intent
from agent.dialplan.semantic import shared_encoder
from agent.dialplan.slots import DIGIT_WORDS, parse_slot, strip_slot_words

__all__ = ["DTMF_KEYS", "Understood", "ask_phrases", "intent_named", "listen_for", "match_intent", "understand"]

DTMF_KEYS = frozenset("0123456789*#ABCD")
"""Keys a caller can press (A-D exist on some keypads)."""

_SPOKEN_DIGITS = dict(zip("0123456789", DIGIT_WORDS))

KEY_LEAD_WORDS = frozenset("option number press pressing choose select pick take go key digit okay ok thanks thank".split())
"""Words around a spoken key that add nothing to it ("option one", "I'll press two")."""


def _key_word(intent: Intent) -> str | None:
    """The word for the intent's key when it is a digit ("one" for 1)."""
    return _SPOKEN_DIGITS.get(intent.dtmf or "")


@lru_cache(maxsize=256)
def _intent_phrases(ask: AskStep) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each intent's examples and their synonym variants: what the matcher compares."""
    return tuple(
        (intent.name, tuple(expand_synonyms(intent.examples, dict(intent.synonyms)))) for intent in ask.intents
    )


@lru_cache(maxsize=256)
def ask_phrases(ask: AskStep) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each intent's phrases for the recogniser's hints: examples, their synonym variants, and
    spoken DTMF keys ("one", "option one")."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for intent, (name, phrases) in zip(ask.intents, _intent_phrases(ask)):
        word = _key_word(intent)
        keys = (word, f"option {word}", f"press {word}", f"number {word}") if word else ()
        out.append((name, phrases + keys))
    return tuple(out)


@lru_cache(maxsize=256)
def _matcher(ask: AskStep) -> IntentMatcher:
    """The intent matcher of an ask (words and meaning). The first one built loads the shared
    sentence encoder."""
    return IntentMatcher(dict(_intent_phrases(ask)), encoder=shared_encoder())


def spoken_key(ask: AskStep, text: str) -> IntentMatch | None:
    """The DTMF-bound intent whose key *text* says and nothing else ("one", "option two",
    "um, I'll press three please"). A key word inside a longer request ("I do have one more")
    is not a key press, so spoken keys are not examples the matcher could find in any sentence."""
    words = [w for w in normalize(text) if w not in STOP_WORDS and w not in KEY_LEAD_WORDS]
    if len(words) != 1:
        return None
    return next((IntentMatch(i.name, 1.0, words[0]) for i in ask.intents if _key_word(i) == words[0]), None)


def match_intent(ask: AskStep, text: str, by_meaning: bool = True) -> IntentMatch | None:
    """The intent *text* selects; intents that fill slots are also tried without the words of
    their slot values ("book an appointment tomorrow at 3 pm"). *by_meaning*: see
    :meth:`IntentMatcher.match`."""
    if not ask.intents:
        return None
    key = spoken_key(ask, text)
    if key is not None:
        return key
    matcher = _matcher(ask)
    match = matcher.match(text, by_meaning)
    kinds = sorted({kind for intent in ask.intents for _, kind in intent.slots})
    if match is not None or not kinds:
        return match
    stripped = strip_slot_words(text, kinds)
    if not stripped or stripped == text:
        return None
    match = matcher.match(stripped, by_meaning)
    if match is not None and intent_named(ask, match).slots:
        return match
    return None


#: another reading of the caller's words selects an intent only this close or closer (by the
#: examples' words, or by meaning well over the matcher's floor; chosen on the dev half:
#: docs/evaluation.md, "Other readings")
ALTERNATIVE_MIN_SCORE = 0.75


def match_alternative(ask: AskStep, alternatives: Sequence[str]) -> tuple[str, IntentMatch] | None:
    """For words that select nothing at *ask*: the intent the recogniser's other readings of
    them (likeliest first) select most often with a score of at least
    :data:`ALTERNATIVE_MIN_SCORE` (a tie: the one met first), and its first such reading."""
    found: dict[str, list[tuple[str, IntentMatch]]] = {}
    if alternatives and ask.intents:
        _matcher(ask).prepare(alternatives)
    for text in alternatives:
        match = match_intent(ask, text)
        if match is not None and match.score >= ALTERNATIVE_MIN_SCORE:
            found.setdefault(match.name, []).append((text, match))
    if not found:
        return None
    return max(found.values(), key=len)[0]


@dataclass(frozen=True)
class Understood:
    """What a caller's final words come to at an ask: a slot value, or an intent."""

    value: str | None = None
    """The slot's value, when the words fill the ask's slot (then *match* is None)."""
    match: IntentMatch | None = None
    """The intent the words select."""
    heard_as: str | None = None
    """The recogniser's other reading that selected *match*, when the first reading selected
    nothing (never sure enough to end or transfer the call without asking)."""


def understand(ask: AskStep, text: str, today: datetime.date,
               alternatives: Sequence[str] = ()) -> Understood | None:
    """What the final words *text* mean at *ask* (None: nothing, a reprompt), in the order the
    dialogue takes them: a value for a slot that is not free text, the intent the words
    select, free text for a text slot, then the intent the recogniser's other readings
    *alternatives* select (:func:`match_alternative`). Slots are read from the first reading
    only: a wrong account number costs more than being asked again."""
    if not ask.speech:
        return None
    slot = ask.slot
    if slot is not None and slot.type != "text":
        value = parse_slot(slot.type, text, today)
        if value is not None and slot.accepts(value):
            return Understood(value=value)
    match = match_intent(ask, text)
    if match is not None:
        return Understood(match=match)
    if slot is not None and slot.type == "text" and text.strip() and slot.accepts(text.strip()):
        return Understood(value=text.strip())
    other = match_alternative(ask, alternatives)
    if other is not None:
        return Understood(match=other[1], heard_as=other[0])
    return None


def sure_enough(ask: AskStep, match: IntentMatch, confidence: float | None) -> bool:
    """Sure enough of *match* to end or transfer the call on it without asking back: its score
    and the recogniser's confidence (``confirm`` settings)."""
    confirm = ask.settings.confirm
    return match.score >= confirm.min_score and (confidence is None or confidence >= confirm.min_confidence)


def peek_match(ask: AskStep, text: str, ends_or_transfers: Callable[[Intent], bool],
               by_meaning: bool = False) -> IntentMatch | None:
    """The intent *text* would select at *ask* for the end-of-turn speed-up (see
    ``DialogueSession.peek_intent``). An intent for which *ends_or_transfers* is true only when
    the words are exactly one of its examples ("goodbye", not "bye that I'd"), unless, asked
    *by_meaning*, the match is one the dialogue will confirm before acting ("Do you want to end
    the call?"): ending the turn on it then asks, and does nothing that cannot be undone."""
    match = match_intent(ask, text, by_meaning=by_meaning)
    if match is None:
        return None
    intent = intent_named(ask, match)
    will_confirm = by_meaning and not sure_enough(ask, match, None)
    if ends_or_transfers(intent) and not will_confirm:
        words = normalize(text)
        if not any(normalize(example) == words for example in intent.examples):
            return None
    return match


def said_in_words(ask: AskStep, text: str, intent: str) -> bool:
    """Whether *text* carries *intent* in the ask's own words (its examples, synonyms, keys),
    not by a resemblance of meaning alone."""
    key = spoken_key(ask, text)
    if key is not None:
        return key.name == intent
    matcher = _matcher(ask)
    return any(m.name == intent and m.score >= matcher.threshold for m in matcher.scores(text))


def intent_named(ask: AskStep, match: IntentMatch) -> Intent:
    """The ask's intent that *match* names."""
    for intent in ask.intents:
        if intent.name == match.name:
            return intent
    raise KeyError(match.name)  # unreachable: the matcher only knows this ask's intents


def listen_for(ask: AskStep, collecting: bool = False) -> Listen:
    """The caller's turn at *ask*; *collecting*: keypad digits are being entered, so the
    timeout is the inter-digit one."""
    settings = ask.settings
    slot = ask.slot
    digits = slot is not None and (slot.collects_digits or slot.type == "yes_no")
    return Listen(
        settings.inter_digit_timeout_ms if collecting else settings.no_input_timeout_ms,
        speech=ask.speech,
        dtmf=ask.dtmf,
        slot_type=slot.type if slot is not None else None,
        max_digits=slot.max_dtmf_digits if digits and slot is not None else 1,
        terminator=slot.terminator if slot is not None and slot.collects_digits else None,
        collecting_digits=collecting,
        language=settings.language,
        asr_model=settings.asr_model,
        endpointing=settings.endpointing,
        phrases=tuple(p for _, ps in ask_phrases(ask) for p in ps),
        intents=tuple(i.name for i in ask.intents),
        step=ask.id,
    )

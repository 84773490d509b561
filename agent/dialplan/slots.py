"""Slot values in what a caller says or keys in: digits, numbers, yes/no, dates and times.

Each parser takes a transcript (or keypad digits) and returns the value in a normal form, or None
when the text holds none; :func:`parse_slot` picks the parser by slot type. The word lists here
also serve as recognition hints (:func:`slot_phrases`) and let intent matching ignore the words
of slot values (:func:`strip_slot_words`).
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Sequence

__all__ = [
    "DIGIT_WORDS",
    "SLOT_TYPES",
    "WEEKDAYS",
    "parse_date",
    "parse_digits",
    "parse_number",
    "parse_slot",
    "parse_time",
    "parse_yes_no",
    "slot_phrases",
    "strip_slot_words",
]

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
"""The spoken digits, indexed by their value."""

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
"""Day names in :meth:`datetime.date.weekday` order."""

SLOT_TYPES = ("digits", "number", "yes_no", "date", "time", "text")
"""The kinds of value an ask can collect (see :func:`parse_slot`)."""

_DIGIT_OF = {word: str(i) for i, word in enumerate(DIGIT_WORDS)}
_DIGIT_OF.update({"oh": "0", "o": "0", "nil": "0", "nought": "0"})
_DIGIT_SOUNDALIKES = {"to": "2", "too": "2", "for": "4", "won": "1", "ate": "8", "tree": "3"}
#: "double five" is 55; the recogniser also spells them "doubles", "triples", "tripl", "tripple"
_REPEATS = {"double": 2, "triple": 3, "doubles": 2, "triples": 3, "tripl": 3, "tripple": 3}

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}
_UNIT_WORDS = {value: word for word, value in _UNITS.items()}
_TENS_WORDS = {value: word for word, value in _TENS.items()}


def cardinal(n: int) -> str:
    """0-999,999 in words, as callers say amounts ("one hundred twenty three"): the inverse of
    :func:`parse_number` for the recogniser's figures (agent.speech.server.whisper)."""
    if n < 20:
        return _UNIT_WORDS[n]
    if n < 100:
        return _TENS_WORDS[n - n % 10] + ("" if n % 10 == 0 else " " + _UNIT_WORDS[n % 10])
    if n < 1000:
        return _UNIT_WORDS[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + cardinal(n % 100))
    return cardinal(n // 1000) + " thousand" + ("" if n % 1000 == 0 else " " + cardinal(n % 1000))


_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30,
}
_MONTHS = {
    name: i + 1
    for i, name in enumerate(
        "january february march april may june july august september october november "
        "december".split()
    )
}
_MONTHS.update({name[:3]: number for name, number in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_WEEKDAYS = {name: i for i, name in enumerate(WEEKDAYS)}

_YES = frozenset(
    "yes yeah yep yup yea ya sure correct right alright affirmative absolutely definitely ok okay "
    "certainly indeed exactly confirm confirmed".split()
)
_NO = frozenset("no nope nah negative incorrect wrong not cancel never".split())
#: yes words that also open a sentence without saying yes ("right, I'll let you get on", "okay, I'll
#: call back later", "alright, what about my balance")
_DISCOURSE_YES = frozenset("right alright ok okay indeed exactly confirm confirmed".split())


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9:]+", text.lower().replace("'", "")) if t]


def parse_digits(text: str) -> str | None:
    """The longest run of digits spoken or written in *text* ("my pin is one two 3 4" -> 1234).

    "oh" counts as zero, "double five" as 55; sound-alikes ("to", "for") count only inside a
    run that has real digits.
    """
    runs: list[list[tuple[str, bool]]] = [[]]
    repeat = 1
    for token in _tokens(text):
        if token in _REPEATS:
            repeat = _REPEATS[token]
            continue
        if token.isdigit():
            runs[-1].extend((ch, True) for ch in token * repeat)
        elif token in _DIGIT_OF:
            runs[-1].extend([(_DIGIT_OF[token], True)] * repeat)
        elif token in _DIGIT_SOUNDALIKES:
            runs[-1].extend([(_DIGIT_SOUNDALIKES[token], False)] * repeat)
        elif runs[-1]:
            runs.append([])
        repeat = 1
    best = ""
    for run in runs:
        while run and not run[0][1]:
            run = run[1:]
        while run and not run[-1][1]:
            run = run[:-1]
        digits = "".join(d for d, _ in run)
        if len(digits) > len(best):
            best = digits
    return best or None


def _words_to_number(words: Sequence[str]) -> int | None:
    total, current, seen = 0, 0, False
    for word in words:
        if word == "and" and seen:
            continue
        if word.isdigit():
            current += int(word)
        elif word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in ("thousand", "million"):
            total += max(current, 1) * (1000 if word == "thousand" else 1_000_000)
            current = 0
        elif word == "a" and not seen:
            current = 1
            continue
        else:
            return None
        seen = True
    return total + current if seen else None


def parse_number(text: str) -> int | None:
    """A whole number written or spoken in *text* ("one hundred and twenty three", "42")."""
    tokens = [t for t in _tokens(text) if t != ","]
    number_words = set(_UNITS) | set(_TENS) | {"hundred", "thousand", "million", "and", "a"}
    best: int | None = None
    run: list[str] = []
    for token in tokens + [""]:
        if token and (token.isdigit() or token in number_words):
            run.append(token)
            continue
        while run and run[-1] in ("and", "a"):
            run.pop()
        if run:
            digit_words = [t for t in run if t in _DIGIT_OF or t.isdigit()]
            if len(run) > 1 and len(digit_words) == len(run) and all(
                t in _DIGIT_OF or len(t) == 1 for t in run
            ):
                value: int | None = int("".join(_DIGIT_OF.get(t, t) for t in run))
            else:
                value = _words_to_number(run)
            if value is not None and best is None:
                best = value
        run = []
    return best


def parse_yes_no(text: str) -> str | None:
    """``yes`` or ``no`` for an answer to a yes/no question, or None. Negation wins."""
    tokens = _tokens(text)
    if any(t in _NO for t in tokens):
        return "no"
    if any(t in _YES for t in tokens):
        return "yes"
    return None


YES_COMPANIONS = frozenset("then great good fine perfect cool lovely sounds wonderful excellent brilliant "
                           "awesome".split())
"""Words that come with a plain yes and say no more ("okay great", "yeah, sounds good", "alright then")."""

_BARE_ANSWER_WORDS = frozenset("please thanks um uh oh well sir maam".split()) | YES_COMPANIONS
"""Words a plain yes or no comes with ("yes please", "no thanks", "okay great")."""

_BARE_ANSWER_PHRASES = re.compile(r"\b(?:thank you|i do|i would|that is it|thats it|thats all|that is all|"
                                  r"go ahead|of course|it is|that is|thats|that would)\b")
"""Phrases a plain yes or no comes with ("all right", "yes I do", "yes please, go ahead", "no thank
you", "sure, that's fine"). Their words count only in them: "right i all" (a misheard "right, I'll
let you get on") is no bare yes."""

#: a final "by" after these is a goodbye the recogniser wrote as "by" ("another time, by", "thanks by")
BEFORE_A_FINAL_BYE = frozenset("thanks you time day later now then okay ok alright right bye cheers soon care "
                               "great good all much here there".split())


def bye_spelt_by(words: Sequence[str]) -> bool:
    """Do *words* (lower case) end on a "by" that is the goodbye the recogniser spelt that way
    ("i'll call back another time by", "thank you so much by")?"""
    return len(words) > 1 and words[-1] == "by" and words[-2] in BEFORE_A_FINAL_BYE


def _answer_tokens(text: str) -> list[str]:
    """*text*'s tokens, "all right" as "alright", without the phrases a plain yes or no comes with."""
    return _BARE_ANSWER_PHRASES.sub(" ", " ".join(_tokens(text)).replace("all right", "alright")).split()


def _is_bare(text: str, answer: frozenset[str]) -> bool:
    tokens = _answer_tokens(text)
    return any(t in answer for t in tokens) and all(t in answer or t in _BARE_ANSWER_WORDS for t in tokens)


def without_yes(text: str) -> str:
    """*text* without its yes words and the words a plain yes comes with ("yeah hi, what's my
    balance" is "hi whats my balance")."""
    return " ".join(t for t in _answer_tokens(text) if t not in _YES and t not in _BARE_ANSWER_WORDS)


#: sounds and words that may come before or after the yes of an answer ("um, yes", "actually yeah")
_AROUND_AN_ANSWER = frozenset("um uh uhm er oh well actually so hmm ah".split())


def says_yes_outright(text: str) -> bool:
    """Does *text* say yes whatever else it says: a bare yes, or a sentence that starts or ends with
    a yes word that does not also open sentences ("yes I'd like that", "sure, put me through",
    "there is, yeah"; not "right, I'll let you get on", nor the "sure" of "I want to make sure")?"""
    if is_bare_yes(text):
        return True
    tokens = [t for t in _tokens(text) if t not in _AROUND_AN_ANSWER]
    return any(t in _YES and t not in _DISCOURSE_YES for t in tokens[:1] + tokens[-1:])


def is_bare_yes(text: str) -> bool:
    """Is *text* a yes and nothing else ("yes", "yeah sure", "okay please"), not a yes word
    inside a longer sentence ("I want- yes, I had another thing")?"""
    return _is_bare(text, _YES)


def is_bare_no(text: str) -> bool:
    """Is *text* a no and nothing else ("no", "nope, thanks", "no thank you")?"""
    return _is_bare(text, _NO)


_MURMURS = frozenset("uh huh uhhuh um uhm mm mmm hmm hm mhm mmhmm ah oh".split())
"""Sounds that acknowledge without saying yes ("uh huh", "mm hmm", "oh")."""


def is_murmur(text: str) -> bool:
    """Is *text* only acknowledging sounds ("uh huh", "mm hmm"), no word that says anything?"""
    tokens = _tokens(text)
    return bool(tokens) and all(t in _MURMURS for t in tokens)


def _ordinal_or_number(tokens: Sequence[str], i: int) -> tuple[int, int] | None:
    """A day number at tokens[i] ("5", "5th", "fifth", "twenty first"): (value, tokens used)."""
    token = tokens[i]
    match = re.fullmatch(r"(\d{1,2})(st|nd|rd|th)?", token)
    if match:
        return int(match.group(1)), 1
    if token in _TENS and i + 1 < len(tokens):
        following = tokens[i + 1]
        if following in _ORDINALS and _ORDINALS[following] < 10:
            return _TENS[token] + _ORDINALS[following], 2
        if following in _UNITS and _UNITS[following] < 10:
            return _TENS[token] + _UNITS[following], 2
    if token in _ORDINALS:
        return _ORDINALS[token], 1
    if token in _TENS:
        return _TENS[token], 1
    if token in _UNITS:
        return _UNITS[token], 1
    return None


def _month_day(year: int, month: int, day: int, today: date, roll: bool) -> date | None:
    try:
        candidate = date(year, month, day)
    except ValueError:
        return None
    if roll and candidate < today:
        try:
            candidate = date(year + 1, month, day)
        except ValueError:
            return None
    return candidate


def parse_date(text: str, today: date) -> date | None:
    """A calendar date in *text*, relative to *today* when needed.

    Understands "today", "tomorrow", "the day after tomorrow", weekdays ("friday",
    "next monday": the next such day after today), "march fifth", "the 5th of march", "3/5"
    (month/day), ISO dates, and 4 (MMDD) or 8 (YYYYMMDD) digit strings from the keypad. A day
    and month without a year is the next such date from today.
    """
    lowered = text.lower()
    iso = re.search(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", lowered)
    if iso:
        return _month_day(int(iso.group(1)), int(iso.group(2)), int(iso.group(3)), today, False)
    slash = re.search(r"\b(\d{1,2})/(\d{1,2})\b", lowered)
    if slash:
        return _month_day(today.year, int(slash.group(1)), int(slash.group(2)), today, True)
    tokens = _tokens(text)
    if len(tokens) == 1 and tokens[0].isdigit() and len(tokens[0]) in (4, 8):
        digits = tokens[0]
        if len(digits) == 8:
            return _month_day(int(digits[:4]), int(digits[4:6]), int(digits[6:]), today, False)
        return _month_day(today.year, int(digits[:2]), int(digits[2:]), today, True)
    joined = " ".join(tokens)
    if "day after tomorrow" in joined:
        return today + timedelta(days=2)
    if "tomorrow" in tokens:
        return today + timedelta(days=1)
    if "today" in tokens or "tonight" in tokens:
        return today
    for i, token in enumerate(tokens):
        if token in _MONTHS:
            month = _MONTHS[token]
            if i + 1 < len(tokens):  # march fifth / march 5th
                day = _ordinal_or_number(tokens, i + 1 + (tokens[i + 1] == "the"))
                if day is not None:
                    return _month_day(today.year, month, day[0], today, True)
            # the fifth of march
            for back in (3, 2):
                if i - back >= 0 and tokens[i - 1] == "of":
                    day = _ordinal_or_number(tokens, i - back)
                    if day is not None and i - back + day[1] == i - 1:
                        return _month_day(today.year, month, day[0], today, True)
    for token in tokens:
        if token in _WEEKDAYS:
            ahead = (_WEEKDAYS[token] - today.weekday()) % 7 or 7
            return today + timedelta(days=ahead)
    return None


_TIME_WORDS = {"noon": (12, 0), "midday": (12, 0), "midnight": (0, 0)}


def parse_time(text: str) -> str | None:
    """A time of day in *text* as ``HH:MM`` (24-hour).

    Understands "10 am", "3:30 pm", "three thirty p m", "15:00", "noon", "half past two",
    "quarter to five", and 4 keypad digits (HHMM). Without am/pm, hours 1 to 7 are taken as
    afternoon (business hours), as a receptionist would.
    """
    lowered = text.lower().replace(".", "")
    tokens = _tokens(lowered)
    joined = " ".join(tokens)
    meridiem = None
    if re.search(r"\b(pm|p m|in the afternoon|in the evening|tonight)\b", joined):
        meridiem = "pm"
    elif re.search(r"\b(am|a m|in the morning)\b", joined):
        meridiem = "am"
    for word, (hour, minute) in _TIME_WORDS.items():
        if word in tokens:
            return f"{hour:02d}:{minute:02d}"
    hour: int | None = None
    minute = 0
    clock = re.search(r"\b(\d{1,2}):(\d{2})\b", lowered)
    if clock:
        hour, minute = int(clock.group(1)), int(clock.group(2))
    elif len(tokens) == 1 and re.fullmatch(r"\d{4}", tokens[0]):
        hour, minute = int(tokens[0][:2]), int(tokens[0][2:])
        meridiem = None
        if hour > 23 or minute > 59:
            return None
        return f"{hour:02d}:{minute:02d}"
    else:
        for i, token in enumerate(tokens):
            if token in ("half", "quarter") and i + 2 < len(tokens) and tokens[i + 1] in (
                "past", "after", "to", "before"
            ):
                base = _hour_word(tokens[i + 2])
                if base is None:
                    continue
                offset = 30 if token == "half" else 15
                if tokens[i + 1] in ("to", "before"):
                    hour, minute = (base - 1) % 12 or 12, 60 - offset
                else:
                    hour, minute = base, offset
                break
            value = _hour_word(token)
            if value is None:
                continue
            hour = value
            rest = tokens[i + 1 : i + 3]
            if rest and rest[0] in ("oclock", "o"):
                minute = 0
            elif rest and rest[0].isdigit() and len(rest[0]) == 2:
                minute = int(rest[0])
            elif rest and rest[0] in _TENS:
                minute = _TENS[rest[0]] + (
                    _UNITS[rest[1]] if len(rest) > 1 and rest[1] in _UNITS and _UNITS[rest[1]] < 10
                    else 0
                )
            elif rest and rest[0] in _UNITS and _UNITS[rest[0]] >= 10:
                minute = _UNITS[rest[0]]
            break
    if hour is None or hour > 23 or minute > 59:
        return None
    if meridiem == "pm" and hour < 12:
        hour += 12
    elif meridiem == "am" and hour == 12:
        hour = 0
    elif meridiem is None and 1 <= hour <= 7:
        hour += 12
    return f"{hour:02d}:{minute:02d}"


def _hour_word(token: str) -> int | None:
    if token.isdigit() and 1 <= int(token) <= 23 and len(token) <= 2:
        return int(token)
    if token in _UNITS and 1 <= _UNITS[token] <= 12:
        return _UNITS[token]
    return None


def parse_slot(kind: str, text: str, today: date) -> str | None:
    """The value of a slot of type *kind* (see :data:`SLOT_TYPES`) in *text*, as text, or None.

    digits -> "1234"; number -> "123"; yes_no -> "yes"/"no"; date -> "2025-03-05";
    time -> "15:30"; text -> the text itself (stripped, when not empty).
    """
    if kind == "digits":
        return parse_digits(text)
    if kind == "number":
        number = parse_number(text)
        return str(number) if number is not None else None
    if kind == "yes_no":
        return parse_yes_no(text)
    if kind == "date":
        day = parse_date(text, today)
        return day.isoformat() if day is not None else None
    if kind == "time":
        return parse_time(text)
    if kind == "text":
        return text.strip() or None
    raise ValueError(f"unknown slot type {kind!r}; expected one of: {', '.join(SLOT_TYPES)}")


_SLOT_WORDS = {
    "date": frozenset(
        ["today", "tomorrow", "tonight", "day", "after", "next", "this", "coming", "week"]
        + list(_WEEKDAYS) + list(_MONTHS) + list(_ORDINALS) + list(_UNITS) + list(_TENS)
    ),
    "time": frozenset(
        ["am", "pm", "a", "m", "p", "noon", "midday", "midnight", "oclock", "half", "quarter",
         "past", "morning", "afternoon", "evening"] + list(_UNITS) + list(_TENS)
    ),
    "digits": frozenset(list(_DIGIT_OF) + ["double", "triple"]),
    "number": frozenset(list(_UNITS) + list(_TENS) + ["hundred", "thousand", "million"]),
    "yes_no": _YES | _NO,
}


def slot_phrases(kind: str) -> tuple[str, ...]:
    """Words that say a value of slot type *kind*, as phrase hints for the recogniser."""
    words = sorted(w for w in _SLOT_WORDS.get(kind, ()) if len(w) > 1 or w == "a")
    if not words:
        return ()
    return (" ".join(words), *words)


def strip_slot_words(text: str, kinds: Sequence[str]) -> str:
    """*text* without the words that express slot values of *kinds* ("tomorrow", "3 pm").

    Used before intent matching, so "book an appointment tomorrow at 3 pm" matches the example
    "book an appointment" as well as "book an appointment" does.
    """
    words: set[str] = set()
    for kind in kinds:
        words |= _SLOT_WORDS.get(kind, frozenset())
    kept = []
    for raw in text.split():
        token = re.sub(r"[^a-z0-9:]", "", raw.lower())
        if token in words or re.fullmatch(r"\d+(:\d\d)?(st|nd|rd|th|am|pm)?", token or "x"):
            continue
        kept.append(raw)
    return " ".join(kept)

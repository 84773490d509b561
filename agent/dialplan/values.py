"""What template expressions compute with: values, how they read as numbers, text and truth,
how they compare, and the filters (``| default('friend')``)."""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Callable, Mapping, Union

__all__ = ["FILTERS", "Value", "equal", "order", "to_number", "to_text", "truthy"]

Value = Union[None, bool, int, float, str, tuple]
"""What an expression evaluates to (lists are tuples)."""


def to_number(value: Value) -> float | int | None:
    """The number *value* denotes, or None (booleans and non-numeric text are not numbers)."""
    if isinstance(value, bool) or value is None or isinstance(value, tuple):
        return None
    if isinstance(value, (int, float)):
        return value
    text = value.strip()
    if not text or not _NUMBER_TEXT.match(text):
        return None
    try:
        return int(text)
    except ValueError:
        number = float(text)
        return number if math.isfinite(number) else None


_NUMBER_TEXT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")


def to_text(value: Value) -> str:
    """How *value* is written into text: none is empty, booleans are ``true``/``false``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    if isinstance(value, tuple):
        return ", ".join(to_text(item) for item in value)
    return value


_FALSE_WORDS = frozenset(["", "false", "no", "off", "0", "none"])


def truthy(value: Value) -> bool:
    """Whether *value* counts as true in a condition."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, tuple):
        return bool(value)
    return value.strip().lower() not in _FALSE_WORDS


def equal(a: Value, b: Value) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return truthy(a) == truthy(b)
    na, nb = to_number(a), to_number(b)
    if na is not None and nb is not None:
        return na == nb
    return to_text(a) == to_text(b)


def order(a: Value, b: Value) -> int | None:
    na, nb = to_number(a), to_number(b)
    if na is not None and nb is not None:
        return (na > nb) - (na < nb)
    if a is None or b is None:
        return None
    ta, tb = to_text(a), to_text(b)
    return (ta > tb) - (ta < tb)


def _f_default(value: Value, fallback: Value = "") -> Value:
    return fallback if value is None or to_text(value) == "" else value


def _f_digits(value: Value) -> Value:
    return " ".join(ch for ch in to_text(value) if not ch.isspace())


def _f_round(value: Value, places: Value = 0) -> Value:
    number, digits = to_number(value), to_number(places)
    if number is None or digits is None:
        return None
    rounded = round(float(number), int(digits))
    return int(rounded) if int(digits) <= 0 else rounded


def _iso_date(value: Value) -> _dt.date | None:
    try:
        return _dt.date.fromisoformat(to_text(value).strip()[:10])
    except ValueError:
        return None


def _f_date(value: Value) -> Value:
    """``2025-03-04`` -> ``Tuesday, March 4``."""
    day = _iso_date(value)
    return value if day is None else f"{day.strftime('%A, %B')} {day.day}"


def _f_weekday(value: Value) -> Value:
    """``2025-03-04`` -> ``tuesday`` (lower case, for conditions)."""
    day = _iso_date(value)
    return None if day is None else day.strftime("%A").lower()


def _f_time(value: Value) -> Value:
    """``15:30`` -> ``3:30 PM``; ``09:00`` -> ``9 AM``."""
    match = re.match(r"(\d{1,2}):(\d{2})", to_text(value).strip())
    if not match:
        return value
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour > 23 or minute > 59:
        return value
    suffix = "AM" if hour < 12 else "PM"
    hour12 = hour % 12 or 12
    return f"{hour12} {suffix}" if minute == 0 else f"{hour12}:{minute:02d} {suffix}"


FILTERS: Mapping[str, tuple[Callable[..., Value], int, int]] = {
    "default": (_f_default, 1, 1),
    "upper": (lambda v: to_text(v).upper(), 0, 0),
    "lower": (lambda v: to_text(v).lower(), 0, 0),
    "title": (lambda v: to_text(v).title(), 0, 0),
    "trim": (lambda v: to_text(v).strip(), 0, 0),
    "digits": (_f_digits, 0, 0),
    "round": (_f_round, 0, 1),
    "date": (_f_date, 0, 0),
    "weekday": (_f_weekday, 0, 0),
    "time": (_f_time, 0, 0),
}
"""Filter name -> (function, fewest arguments, most arguments)."""

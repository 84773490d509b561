"""Asterisk-style number patterns (``_1800NXXXXXX``) for matching called and calling numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["NumberPattern"]


@dataclass(frozen=True)
class NumberPattern:
    """An Asterisk-style number pattern.

    Without a leading ``_`` the pattern is literal and must equal the whole number. With ``_``:
    ``X`` is 0-9, ``Z`` 1-9, ``N`` 2-9, ``[1-5]``/``[137]`` a set, ``.`` at the end one or more
    of any character, ``!`` at the end zero or more; other characters match themselves, and
    dashes outside ``[]`` are ignored (``_1-800-NXX-XXXX``).
    """

    source: str
    regex: re.Pattern[str] = field(compare=False, repr=False)

    @classmethod
    def parse(cls, source: str) -> NumberPattern:
        """Compile *source*; raise ValueError with the reason when it is not a valid pattern."""
        if not source:
            raise ValueError("empty pattern")
        if any(ch.isspace() for ch in source):
            raise ValueError(f"pattern {source!r} contains whitespace")
        if not source.startswith("_"):
            return cls(source, re.compile(re.escape(source) + r"\Z"))
        body = source[1:]
        regex: list[str] = []
        i = 0
        while i < len(body):
            ch = body[i]
            upper = ch.upper()
            if ch == "-":
                pass
            elif upper == "X":
                regex.append("[0-9]")
            elif upper == "Z":
                regex.append("[1-9]")
            elif upper == "N":
                regex.append("[2-9]")
            elif ch in ".!":
                if body[i + 1 :].replace("-", ""):
                    raise ValueError(f"{ch!r} must be the last character of pattern {source!r}")
                regex.append(".+" if ch == "." else ".*")
            elif ch == "[":
                close = body.find("]", i + 1)
                if close < 0:
                    raise ValueError(f"unclosed '[' in pattern {source!r}")
                regex.append(_character_class(body[i + 1 : close], source))
                i = close
            elif ch == "]":
                raise ValueError(f"']' without '[' in pattern {source!r}")
            else:
                regex.append(re.escape(ch))
            i += 1
        if not regex:
            raise ValueError(f"pattern {source!r} has nothing after the '_'")
        return cls(source, re.compile("".join(regex) + r"\Z", re.DOTALL))

    @property
    def is_literal(self) -> bool:
        """True for an exact number (no leading ``_``)."""
        return not self.source.startswith("_")

    def matches(self, value: str) -> bool:
        """True when *value* (a called or calling number) matches the whole pattern."""
        return self.regex.match(value) is not None


def _character_class(inner: str, source: str) -> str:
    """Translate the inside of ``[...]`` (digits, ``*``, ``#``, ``+`` and ranges like 1-5)."""
    if not inner:
        raise ValueError(f"empty '[]' in pattern {source!r}")
    members: list[str] = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if not (ch.isdigit() or ch in "*#+"):
            raise ValueError(f"unexpected {ch!r} inside '[]' in pattern {source!r}")
        if i + 1 < len(inner) and inner[i + 1] == "-":
            if i + 2 >= len(inner) or not inner[i + 2].isdigit() or not ch.isdigit():
                raise ValueError(f"bad range inside '[{inner}]' in pattern {source!r}")
            if inner[i + 2] < ch:
                raise ValueError(f"range {ch}-{inner[i + 2]} runs backwards in pattern {source!r}")
            members.append(f"{ch}-{inner[i + 2]}")
            i += 3
            continue
        members.append(re.escape(ch))
        i += 1
    return "[" + "".join(members) + "]"

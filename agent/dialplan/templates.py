"""Safe templates and conditions for dialplans: no code execution, no exceptions at run time.

Text in a dialplan (prompts, transfer targets, webhook URLs and bodies, ``set`` values) may hold
``{{ expression }}`` placeholders, and ``branch`` conditions are expressions. Both use the small
language below, parsed by hand into frozen syntax trees when the dialplan loads; evaluating a tree
only reads the call's variables, so a dialplan can never run code, open files or loop.

Expressions::

    caller                          a variable (dotted names: account.balance, config.transfer_uri)
    'text'  "text"  42  3.5         literals; true, false and none
    [1, 'two']                      a list (for ``in``)
    a == b   a != b   <  <=  >  >=  comparison: numeric when both sides look like numbers
    a in [..]   a not in 'text'     membership in a list, or substring of a text
    called matches '_1800NXXXXXX'   an Asterisk pattern (literal on the right)
    not a   a and b   a or b        logic; a value is false when empty, 0, 'false', 'no' or 'off'
    a + b   a - b   a * b   a / b   arithmetic (``+`` joins texts when either side is not a number)
    value | default('friend')       filters: default(x), upper, lower, title, trim, digits,
                                    round(n), date, weekday, time (see :data:`FILTERS`)

Variables are strings (the call's flat ``name -> text`` mapping); a missing variable is ``none``
and renders as empty text. Evaluation is total: type mismatches give ``none`` rather than an
error, so a dialplan that loaded cleanly never fails mid-call because of a template.

Public API: :func:`parse_template`, :func:`parse_expression`, :class:`Template`,
:class:`Expression`, :class:`TemplateError`, :class:`NumberPattern`, :func:`to_text`,
:func:`truthy`.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Union

__all__ = [
    "Expression",
    "FILTERS",
    "JsonArray",
    "JsonObject",
    "NumberPattern",
    "Placeholder",
    "Template",
    "TemplateError",
    "Variable",
    "parse_expression",
    "parse_template",
    "render_json",
    "to_text",
    "truthy",
]

Value = Union[None, bool, int, float, str, tuple]
"""What an expression evaluates to (lists are tuples)."""


class TemplateError(ValueError):
    """A template or expression has bad syntax; *offset* is the 0-based index of the problem."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


# --------------------------------------------------------------------------- number patterns


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


# --------------------------------------------------------------------------- values


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


def _equal(a: Value, b: Value) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return truthy(a) == truthy(b)
    na, nb = to_number(a), to_number(b)
    if na is not None and nb is not None:
        return na == nb
    return to_text(a) == to_text(b)


def _order(a: Value, b: Value) -> int | None:
    na, nb = to_number(a), to_number(b)
    if na is not None and nb is not None:
        return (na > nb) - (na < nb)
    if a is None or b is None:
        return None
    ta, tb = to_text(a), to_text(b)
    return (ta > tb) - (ta < tb)


# --------------------------------------------------------------------------- filters


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


def _f_date(value: Value) -> Value:
    """``2025-03-04`` -> ``Tuesday, March 4``."""
    try:
        day = _dt.date.fromisoformat(to_text(value).strip()[:10])
    except ValueError:
        return value
    return f"{day.strftime('%A, %B')} {day.day}"


def _f_weekday(value: Value) -> Value:
    """``2025-03-04`` -> ``tuesday`` (lower case, for conditions)."""
    try:
        day = _dt.date.fromisoformat(to_text(value).strip()[:10])
    except ValueError:
        return None
    return day.strftime("%A").lower()


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


# --------------------------------------------------------------------------- syntax tree


@dataclass(frozen=True)
class _Literal:
    value: Value


@dataclass(frozen=True)
class _Var:
    name: str
    offset: int


@dataclass(frozen=True)
class _List:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Unary:
    op: str
    operand: _Node


@dataclass(frozen=True)
class _Binary:
    op: str
    left: _Node
    right: _Node


@dataclass(frozen=True)
class _Match:
    left: _Node
    pattern: NumberPattern


@dataclass(frozen=True)
class _Filter:
    operand: _Node
    name: str
    args: tuple[_Node, ...]


_Node = Union[_Literal, _Var, _List, _Unary, _Binary, _Match, _Filter]


def _evaluate(node: _Node, scope: Mapping[str, str]) -> Value:
    if isinstance(node, _Literal):
        return node.value
    if isinstance(node, _Var):
        return scope.get(node.name)
    if isinstance(node, _List):
        return tuple(_evaluate(item, scope) for item in node.items)
    if isinstance(node, _Unary):
        operand = _evaluate(node.operand, scope)
        if node.op == "not":
            return not truthy(operand)
        number = to_number(operand)
        return -number if number is not None else None
    if isinstance(node, _Match):
        return node.pattern.matches(to_text(_evaluate(node.left, scope)))
    if isinstance(node, _Filter):
        function = FILTERS[node.name][0]
        args = [_evaluate(arg, scope) for arg in node.args]
        return function(_evaluate(node.operand, scope), *args)
    op = node.op
    if op == "and":
        left = _evaluate(node.left, scope)
        return _evaluate(node.right, scope) if truthy(left) else left
    if op == "or":
        left = _evaluate(node.left, scope)
        return left if truthy(left) else _evaluate(node.right, scope)
    left, right = _evaluate(node.left, scope), _evaluate(node.right, scope)
    if op == "==":
        return _equal(left, right)
    if op == "!=":
        return not _equal(left, right)
    if op in ("<", "<=", ">", ">="):
        order = _order(left, right)
        if order is None:
            return False
        return {"<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0}[op]
    if op in ("in", "not in"):
        if isinstance(right, tuple):
            found = any(_equal(left, item) for item in right)
        else:
            found = to_text(left) in to_text(right) if right is not None else False
        return found if op == "in" else not found
    if op == "+":
        na, nb = to_number(left), to_number(right)
        if na is not None and nb is not None:
            return na + nb
        return to_text(left) + to_text(right)
    na, nb = to_number(left), to_number(right)
    if na is None or nb is None:
        return None
    if op == "-":
        return na - nb
    if op == "*":
        return na * nb
    if nb == 0:
        return None
    if op == "/":
        quotient = na / nb
        return int(quotient) if float(quotient).is_integer() else quotient
    return na % nb  # "%"


# --------------------------------------------------------------------------- tokens and parser

_KEYWORDS = frozenset(["and", "or", "not", "in", "matches", "true", "false", "none"])
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>\d+(?:\.\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<op>==|!=|<=|>=|\}\}|[<>+\-*/%()\[\],|])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # number, name, string, op, end
    text: str
    offset: int


def _tokenize(text: str, start: int, stop_at_braces: bool) -> tuple[list[_Token], int]:
    """Tokens from *start*; with *stop_at_braces*, stop after a ``}}`` (returned as end)."""
    tokens: list[_Token] = []
    position = start
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            ch = text[position]
            if ch in "'\"":
                raise TemplateError(f"unclosed string starting at character {position + 1}", position)
            raise TemplateError(f"unexpected {ch!r} at character {position + 1}", position)
        kind = match.lastgroup or ""
        if kind == "op" and match.group() == "}}":
            if stop_at_braces:
                tokens.append(_Token("end", "}}", position))
                return tokens, match.end()
            raise TemplateError(f"unexpected '}}}}' at character {position + 1}", position)
        if kind != "space":
            tokens.append(_Token(kind, match.group(), position))
        position = match.end()
    if stop_at_braces:
        raise TemplateError(f"unclosed '{{{{' at character {start - 1}; expected '}}}}'", start - 2)
    tokens.append(_Token("end", "", len(text)))
    return tokens, len(text)


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def at(self, kind: str, text: str | None = None) -> bool:
        token = self.token
        return token.kind == kind and (text is None or token.text == text)

    def at_keyword(self, word: str) -> bool:
        return self.token.kind == "name" and self.token.text == word

    def fail(self, expected: str) -> TemplateError:
        token = self.token
        found = "the end" if token.kind == "end" else repr(token.text)
        return TemplateError(
            f"expected {expected} at character {token.offset + 1}, found {found}", token.offset
        )

    def expect_op(self, text: str) -> None:
        if not self.at("op", text):
            raise self.fail(repr(text))
        self.advance()

    # expression := or
    def expression(self) -> _Node:
        return self.or_()

    def or_(self) -> _Node:
        node = self.and_()
        while self.at_keyword("or"):
            self.advance()
            node = _Binary("or", node, self.and_())
        return node

    def and_(self) -> _Node:
        node = self.not_()
        while self.at_keyword("and"):
            self.advance()
            node = _Binary("and", node, self.not_())
        return node

    def not_(self) -> _Node:
        if self.at_keyword("not"):
            self.advance()
            return _Unary("not", self.not_())
        return self.comparison()

    def comparison(self) -> _Node:
        left = self.additive()
        token = self.token
        if token.kind == "op" and token.text in ("==", "!=", "<", "<=", ">", ">="):
            self.advance()
            return _Binary(token.text, left, self.additive())
        if self.at_keyword("in"):
            self.advance()
            return _Binary("in", left, self.additive())
        if self.at_keyword("not") and self.tokens[self.index + 1].text == "in":
            self.advance()
            self.advance()
            return _Binary("not in", left, self.additive())
        if self.at_keyword("matches"):
            self.advance()
            pattern_token = self.token
            if pattern_token.kind != "string":
                raise self.fail("a quoted pattern after 'matches', such as '_1800NXXXXXX'")
            self.advance()
            try:
                pattern = NumberPattern.parse(_unquote(pattern_token.text))
            except ValueError as exc:
                raise TemplateError(f"bad pattern after 'matches': {exc}", pattern_token.offset)
            return _Match(left, pattern)
        return left

    def additive(self) -> _Node:
        node = self.multiplicative()
        while self.token.kind == "op" and self.token.text in ("+", "-"):
            op = self.advance().text
            node = _Binary(op, node, self.multiplicative())
        return node

    def multiplicative(self) -> _Node:
        node = self.unary()
        while self.token.kind == "op" and self.token.text in ("*", "/", "%"):
            op = self.advance().text
            node = _Binary(op, node, self.unary())
        return node

    def unary(self) -> _Node:
        if self.at("op", "-"):
            self.advance()
            return _Unary("-", self.unary())
        return self.postfix()

    def postfix(self) -> _Node:
        node = self.primary()
        while self.at("op", "|"):
            self.advance()
            name_token = self.token
            if name_token.kind != "name" or name_token.text not in FILTERS:
                known = ", ".join(FILTERS)
                raise TemplateError(
                    f"unknown filter {name_token.text!r} at character {name_token.offset + 1}; "
                    f"expected one of: {known}",
                    name_token.offset,
                )
            self.advance()
            args: list[_Node] = []
            if self.at("op", "("):
                self.advance()
                if not self.at("op", ")"):
                    args.append(self.expression())
                    while self.at("op", ","):
                        self.advance()
                        args.append(self.expression())
                self.expect_op(")")
            _, low, high = FILTERS[name_token.text]
            if not low <= len(args) <= high:
                wanted = str(low) if low == high else f"{low} to {high}"
                raise TemplateError(
                    f"filter {name_token.text!r} takes {wanted} argument(s), found {len(args)}",
                    name_token.offset,
                )
            node = _Filter(node, name_token.text, tuple(args))
        return node

    def primary(self) -> _Node:
        token = self.token
        if token.kind == "number":
            self.advance()
            return _Literal(float(token.text) if "." in token.text else int(token.text))
        if token.kind == "string":
            self.advance()
            return _Literal(_unquote(token.text))
        if token.kind == "name":
            if token.text in ("true", "false"):
                self.advance()
                return _Literal(token.text == "true")
            if token.text == "none":
                self.advance()
                return _Literal(None)
            head = token.text.split(".", 1)[0]
            if head in _KEYWORDS:
                raise self.fail("a value")
            self.advance()
            return _Var(token.text, token.offset)
        if self.at("op", "("):
            self.advance()
            node = self.expression()
            self.expect_op(")")
            return node
        if self.at("op", "["):
            self.advance()
            items: list[_Node] = []
            if not self.at("op", "]"):
                items.append(self.expression())
                while self.at("op", ","):
                    self.advance()
                    items.append(self.expression())
            self.expect_op("]")
            return _List(tuple(items))
        raise self.fail("a value (a variable, a quoted text, a number, true, false or '(')")


def _walk(node: _Node) -> Iterator[_Node]:
    yield node
    if isinstance(node, _List):
        for item in node.items:
            yield from _walk(item)
    elif isinstance(node, _Unary):
        yield from _walk(node.operand)
    elif isinstance(node, _Binary):
        yield from _walk(node.left)
        yield from _walk(node.right)
    elif isinstance(node, _Match):
        yield from _walk(node.left)
    elif isinstance(node, _Filter):
        yield from _walk(node.operand)
        for arg in node.args:
            yield from _walk(arg)


@dataclass(frozen=True)
class Expression:
    """A parsed expression; :meth:`evaluate` never raises."""

    source: str
    node: _Node = field(repr=False)
    offset: int = field(default=0, compare=False, repr=False)

    @property
    def references(self) -> tuple[tuple[str, int], ...]:
        """``(variable name, offset)`` of every variable used, offsets in the enclosing text."""
        return tuple(
            (n.name, n.offset) for n in _walk(self.node) if isinstance(n, _Var)
        )

    @property
    def variables(self) -> tuple[str, ...]:
        """Names of the variables used, in order of appearance."""
        return tuple(name for name, _ in self.references)

    def compared_literals(self, variable: str) -> tuple[tuple[str, int], ...]:
        """Text literals compared with *variable* (``intent == 'x'``, ``intent in ['x']``).

        Used to check that intent names in conditions exist. Offsets are approximate: that of
        the variable.
        """
        found: list[tuple[str, int]] = []
        for n in _walk(self.node):
            if not isinstance(n, _Binary) or n.op not in ("==", "!=", "in", "not in"):
                continue
            for var, other in ((n.left, n.right), (n.right, n.left)):
                if isinstance(var, _Var) and var.name == variable:
                    items = other.items if isinstance(other, _List) else (other,)
                    for item in items:
                        if isinstance(item, _Literal) and isinstance(item.value, str):
                            found.append((item.value, var.offset))
        return tuple(found)

    def evaluate(self, scope: Mapping[str, str]) -> Value:
        """The value of the expression with *scope*'s variables (missing ones are none)."""
        try:
            return _evaluate(self.node, scope)
        except (ArithmeticError, ValueError, TypeError):  # pragma: no cover - defensive
            return None

    def is_true(self, scope: Mapping[str, str]) -> bool:
        """The expression as a condition."""
        return truthy(self.evaluate(scope))


def parse_expression(text: str, offset: int = 0) -> Expression:
    """Parse a condition or value expression; raise :class:`TemplateError` on bad syntax.

    *offset* shifts reported positions (for an expression embedded in a larger text).
    """
    tokens, _ = _tokenize(text, 0, stop_at_braces=False)
    if offset:
        tokens = [_Token(t.kind, t.text, t.offset + offset) for t in tokens]
    parser = _Parser(tokens)
    if parser.at("end"):
        raise TemplateError("expected an expression, found nothing", offset)
    node = parser.expression()
    if not parser.at("end"):
        raise parser.fail("an operator or the end of the expression")
    return Expression(text, node, offset)


# --------------------------------------------------------------------------- templates


@dataclass(frozen=True)
class Variable:
    """A ``{{ name }}`` placeholder holding just a variable; *name* may be dotted."""

    name: str


@dataclass(frozen=True)
class Placeholder:
    """A ``{{ expression }}`` placeholder with operators or filters."""

    expression: Expression


TemplatePart = Union[str, Variable, Placeholder]


@dataclass(frozen=True)
class Template:
    """Text with ``{{ expression }}`` placeholders, rendered per call."""

    source: str
    parts: tuple[TemplatePart, ...]
    references: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    @property
    def is_static(self) -> bool:
        """True when the text has no placeholder (its audio can be synthesised at load)."""
        return all(isinstance(part, str) for part in self.parts)

    @property
    def variables(self) -> tuple[str, ...]:
        """Names of the variables used, in order of appearance."""
        return tuple(name for name, _ in self.references)

    def missing(self, values: Mapping[str, str]) -> tuple[str, ...]:
        """Variables the template uses for which *values* has no entry."""
        return tuple(name for name in self.variables if name not in values)

    def render(self, values: Mapping[str, str]) -> str:
        """Substitute *values* (flat, dotted keys); a missing variable renders as ""."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, Variable):
                out.append(to_text(values.get(part.name)))
            else:
                out.append(to_text(part.expression.evaluate(values)))
        return "".join(out)

    def evaluate(self, values: Mapping[str, str]) -> Value:
        """A template that is exactly one placeholder gives its value unconverted, else text."""
        if len(self.parts) == 1 and isinstance(self.parts[0], Placeholder):
            return self.parts[0].expression.evaluate(values)
        return self.render(values)


def parse_template(text: str) -> Template:
    """Parse ``{{ expression }}`` placeholders in *text*; raise :class:`TemplateError`."""
    parts: list[TemplatePart] = []
    references: list[tuple[str, int]] = []
    position = 0
    while True:
        start = text.find("{{", position)
        if start < 0:
            break
        if start > position:
            parts.append(text[position:start])
        tokens, end = _tokenize(text, start + 2, stop_at_braces=True)
        parser = _Parser(tokens)
        if parser.at("end"):
            raise TemplateError(
                f"expected an expression inside '{{{{ }}}}' at character {start + 1}, "
                "such as '{{ caller }}'",
                start,
            )
        node = parser.expression()
        if not parser.at("end"):
            raise parser.fail("'}}' or an operator")
        source = text[start + 2 : end - 2]
        expression = Expression(source.strip(), node, start + 2)
        references.extend(expression.references)
        if isinstance(node, _Var):
            parts.append(Variable(node.name))
        else:
            parts.append(Placeholder(expression))
        position = end
    if position < len(text):
        parts.append(text[position:])
    return Template(text, tuple(parts), tuple(references))


@dataclass(frozen=True)
class JsonObject:
    """A JSON object whose leaves may be templates (a webhook body or query)."""

    items: tuple[tuple[str, "JsonValue"], ...]


@dataclass(frozen=True)
class JsonArray:
    """A JSON array whose leaves may be templates."""

    items: tuple["JsonValue", ...]


JsonValue = Union[JsonObject, JsonArray, Template, None, bool, int, float]


def render_json(value: JsonValue, scope: Mapping[str, str]) -> object:
    """Render a JSON-like structure: each template leaf becomes its text (or its value when the
    template is a single placeholder holding an expression, such as ``{{ tries + 1 }}``)."""
    if isinstance(value, JsonObject):
        return {key: render_json(item, scope) for key, item in value.items}
    if isinstance(value, JsonArray):
        return [render_json(item, scope) for item in value.items]
    if isinstance(value, Template):
        result = value.evaluate(scope)
        return list(result) if isinstance(result, tuple) else result
    return value

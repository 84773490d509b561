"""Expressions of the dialplan template language: syntax tree, evaluation, tokens and parser.

The language itself is described in :mod:`agent.dialplan.templates`. The parser is a
recursive descent over the tokens, one method per precedence level (``or`` lowest, filters
highest); every syntax error carries the 0-based offset of the offending token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Union

from agent.dialplan.number_patterns import NumberPattern
from agent.dialplan.values import FILTERS, Value, equal, order, to_number, to_text, truthy

__all__ = ["Expression", "TemplateError", "parse_expression", "parse_placeholder"]


class TemplateError(ValueError):
    """A template or expression has bad syntax; *offset* is the 0-based index of the problem."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


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
        return equal(left, right)
    if op == "!=":
        return not equal(left, right)
    if op in ("<", "<=", ">", ">="):
        sign = order(left, right)
        if sign is None:
            return False
        return {"<": sign < 0, "<=": sign <= 0, ">": sign > 0, ">=": sign >= 0}[op]
    if op in ("in", "not in"):
        if isinstance(right, tuple):
            found = any(equal(left, item) for item in right)
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

    @property
    def variable(self) -> str | None:
        """The variable's name when the expression is nothing but a variable."""
        return self.node.name if isinstance(self.node, _Var) else None

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


def parse_placeholder(text: str, start: int) -> tuple[Expression, int]:
    """Parse the ``{{ expression }}`` whose ``{{`` is at *start* in *text*.

    Return the expression (positions relative to *text*) and the index just after its ``}}``;
    raise :class:`TemplateError` on bad syntax.
    """
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
    return Expression(text[start + 2 : end - 2].strip(), node, start + 2), end

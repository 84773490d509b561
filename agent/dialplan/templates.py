"""Safe templates and conditions for dialplans: no code execution, no exceptions at run time.

Hand-written, not Jinja2's sandbox: the language differs and load errors need character offsets.

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

This module holds templates; expressions are parsed and evaluated in
:mod:`agent.dialplan.expressions`, with the values and filters of :mod:`agent.dialplan.values`
and the number patterns of :mod:`agent.dialplan.number_patterns`, all re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

from agent.dialplan.expressions import (
    Expression, TemplateError, parse_expression, parse_placeholder,
)
from agent.dialplan.number_patterns import NumberPattern
from agent.dialplan.values import FILTERS, Value, to_text, truthy

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
        expression, end = parse_placeholder(text, start)
        references.extend(expression.references)
        if expression.variable is not None:
            parts.append(Variable(expression.variable))
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

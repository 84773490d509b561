"""Reading a composed dialplan file once the schema has judged it.

The schema (:mod:`agent.dialplan.validation`) has checked every key and type and reported what
it rejected; a rejected node reads as None here, so whatever holds it is not built and nothing is
reported twice. What the readers record (names declared, references, variables and intents used)
is judged by :mod:`agent.dialplan.checks` once every file is read.
"""

from __future__ import annotations

from typing import Callable, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agent.dialplan.checks import Declarations, Reference
from agent.dialplan.model import (
    CALL_VARIABLES,
    CONFIG_PREFIX,
    NOW_VARIABLES,
    DialplanIssue,
    PersonOffer,
)
from agent.dialplan.templates import (
    Expression,
    Template,
    TemplateError,
    parse_expression,
    parse_template,
)
from agent.dialplan.validation import Document
from agent.yamlmarks import Mark

__all__ = ["Entries", "NodeReader", "is_null"]

_NULL = "tag:yaml.org,2002:null"
_T = TypeVar("_T")
_Parsed = TypeVar("_Parsed", Template, Expression)
Entries = dict[str, tuple[ScalarNode, Node]]


def is_null(node: Node) -> bool:
    """True for a YAML null (``key:`` with nothing after it)."""
    return isinstance(node, ScalarNode) and node.tag == _NULL


class NodeReader:
    """Typed access to one file's nodes, collecting issues and what the file declares."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.issues: list[DialplanIssue] = []
        self._constructor = SafeConstructor()
        self.result = Declarations()
        self._flow_name = ""
        self.escalation_marks: dict[str, Mark] = {}
        """Where each escalation step was named in settings (first mention)."""
        self.doc = Document(path, None)

    def person_offer(self, node: Node, base: PersonOffer) -> PersonOffer:
        """The ``offer_person_after``/``offer_prompt`` keys of *node* over *base*."""
        entries = self.mapping(node)
        if entries is None:
            return base
        after = self.optional(entries, "offer_person_after", self.integer)
        prompt = self.optional(
            entries, "offer_prompt", lambda n: self.template(n, "'offer_prompt'")
        )
        return PersonOffer(
            after if after is not None else base.after,
            prompt if prompt is not None else base.prompt,
        )

    # -- reporting

    def mark(self, node: Node) -> Mark:
        return self.doc.mark(node)

    def error(self, node: Node, message: str) -> None:
        self.issues.append(DialplanIssue(self.mark(node), message))

    # -- reading what the schema accepted

    def bad(self, node: Node) -> bool:
        return id(node) in self.doc.bad

    def mapping(self, node: Node) -> Entries | None:
        """*node*'s entries by key, first of duplicates (None when the schema rejected it)."""
        if self.bad(node) or not isinstance(node, MappingNode):
            return None
        entries: Entries = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and not self.bad(key_node):
                entries.setdefault(key_node.value, (key_node, value_node))
        return entries

    def sequence(self, node: Node) -> list[Node] | None:
        if self.bad(node) or not isinstance(node, SequenceNode):
            return None
        return list(node.value)

    def string(self, node: Node) -> str | None:
        if self.bad(node) or not isinstance(node, ScalarNode) or node.tag == _NULL:
            return None
        return str(node.value)

    name = string

    def variable_name(self, node: Node, what: str, assigning: bool = False) -> str | None:
        value = self.string(node)
        if value is None:
            return None
        if assigning and (
            value in CALL_VARIABLES
            or value in NOW_VARIABLES
            or value.startswith(CONFIG_PREFIX)
            or value.startswith("now.")
            or value in ("flow", "step")
        ):
            self.error(node, f"{what}: {value!r} is set by the call itself and cannot be changed")
            return None
        return value

    def boolean(self, node: Node) -> bool | None:
        if self.bad(node) or not isinstance(node, ScalarNode):
            return None
        return bool(self._constructor.construct_yaml_bool(node))

    def integer(self, node: Node) -> int | None:
        if self.bad(node) or not isinstance(node, ScalarNode):
            return None
        return int(self._constructor.construct_yaml_int(node))

    def fraction(self, node: Node) -> float | None:
        if self.bad(node) or not isinstance(node, ScalarNode):
            return None
        try:
            return float(node.value)
        except ValueError:
            self.error(node, f"expected a number from 0 to 1, found {node.value!r}")
            return None

    choice = string

    def template(self, node: Node, what: str) -> Template | None:
        return self._parsed(node, what, parse_template)

    def expression(self, node: Node, what: str) -> Expression | None:
        expression = self._parsed(node, what, parse_expression)
        if expression is not None:
            for literal, offset in expression.compared_literals("intent"):
                self.result.intent_uses.append((literal, self.text_mark(node, offset)))
        return expression

    def _parsed(self, node: Node, what: str, parse: Callable[[str], _Parsed]) -> _Parsed | None:
        """*node*'s string parsed by *parse*, its variable references recorded; errors point into the text."""
        text = self.string(node)
        if text is None:
            return None
        try:
            parsed = parse(text)
        except TemplateError as exc:
            self.issues.append(DialplanIssue(self.text_mark(node, exc.offset), f"in {what}: {exc}"))
            return None
        for name, offset in parsed.references:
            self.result.variable_uses.append((name, self.text_mark(node, offset), what))
        return parsed

    def text_mark(self, node: Node, offset: int) -> Mark:
        """Where character *offset* of a scalar's value is, when the source spells it verbatim.

        That holds for single-line plain scalars and quoted ones without escapes; otherwise the
        scalar's start is the best position available.
        """
        start, end = node.start_mark, node.end_mark
        buffer = getattr(start, "buffer", None)
        if isinstance(node, ScalarNode) and buffer and start.line == end.line:
            raw = buffer[start.pointer : end.pointer]
            quote = 1 if node.style in ("'", '"') else 0
            if node.style in (None, "'", '"') and raw[quote : len(raw) - quote] == node.value:
                return Mark(self.path, start.line + 1, start.column + 1 + quote + offset)
        return self.mark(node)

    def optional(
        self, entries: Entries, key: str, convert: Callable[[Node], _T | None]
    ) -> _T | None:
        entry = entries.get(key)
        return convert(entry[1]) if entry is not None else None

    def ref(self, node: Node, key: str) -> str | None:
        """A step id of the current flow, checked once every step is known."""
        target = self.name(node)
        if target is not None:
            self.result.references.append(
                Reference(self._flow_name, target, key, self.mark(node))
            )
        return target

    # -- document structure

    def _timezone(self, node: Node) -> str | None:
        value = self.string(node)
        if value is None:
            return None
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            self.error(
                node,
                f"unknown timezone {value!r}; expected an IANA name such as 'America/New_York', "
                "'Europe/Paris' or 'UTC'",
            )
            return None
        return value

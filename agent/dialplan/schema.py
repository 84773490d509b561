"""Validate a dialplan's YAML node tree against the published JSON Schema (``dialplans/schema.json``).

The schema (JSON Schema draft 2020-12) is what editors and CI tools can use; this module applies
it inside ``dialplan check`` and every load, on PyYAML's composed nodes so each problem keeps its
``line:column``. It implements the subset of JSON Schema the dialplan schema uses: ``$ref`` (local),
``type``, ``properties``, ``additionalProperties``, ``propertyNames``, ``required``, ``enum``,
``const``, ``pattern``, ``minimum``/``maximum``, ``minLength``, ``minItems``, ``minProperties``,
``maxProperties``, ``items``, ``anyOf`` and ``oneOf``. ``title`` names a value in messages.

YAML scalars written as numbers or booleans are accepted where the schema expects a string (the
loader reads them as their text), as the schema's description says.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from typing import Any, Iterator

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["SCHEMA_PATH", "load_schema", "validate_node", "validate_text"]

SCHEMA_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dialplans", "schema.json"
)

_Issue = tuple[int, int, str]

_TYPE_OF_TAG = {
    "tag:yaml.org,2002:str": "string",
    "tag:yaml.org,2002:int": "integer",
    "tag:yaml.org,2002:float": "number",
    "tag:yaml.org,2002:bool": "boolean",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "string",
}
_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "nothing",
    "object": "a mapping",
    "array": "a list",
}


@functools.lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The dialplan JSON Schema, parsed."""
    with open(SCHEMA_PATH, encoding="utf-8") as handle:
        schema: dict[str, Any] = json.load(handle)
    return schema


def validate_text(text: str) -> list[_Issue]:
    """Validate YAML *text*; ``(line, column, message)`` per problem (syntax errors excluded)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    return validate_node(root) if root is not None else []


def validate_node(node: Node, schema: dict[str, Any] | None = None) -> list[_Issue]:
    """Validate a composed YAML *node* against *schema* (default: the dialplan schema)."""
    root = schema if schema is not None else load_schema()
    return list(_Validator(root).check(node, root, "the dialplan"))


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "object"
    if isinstance(node, SequenceNode):
        return "array"
    return _TYPE_OF_TAG.get(node.tag, "string")


def _describe(node: Node) -> str:
    kind = _kind(node)
    if isinstance(node, ScalarNode) and kind != "null":
        return f"{_TYPE_WORDS[kind]} {node.value!r}"
    return "nothing (null)" if kind == "null" else _TYPE_WORDS[kind]


def _position(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Validator:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.constructor = SafeConstructor()

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            pointer = schema["$ref"]
            if not pointer.startswith("#/"):
                raise ValueError(f"only local $ref is supported, found {pointer!r}")
            target: Any = self.root
            for part in pointer[2:].split("/"):
                target = target[part]
            schema = target
        return schema

    def value(self, node: ScalarNode) -> Any:
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value
        return self.constructor.construct_object(node)

    def entries(self, node: MappingNode) -> list[tuple[ScalarNode, Node]] | None:
        try:
            self.constructor.flatten_mapping(node)
        except yaml.MarkedYAMLError:
            return None
        return [(k, v) for k, v in node.value if isinstance(k, ScalarNode)]

    def type_ok(self, node: Node, types: str | list[str]) -> bool:
        wanted = [types] if isinstance(types, str) else types
        kind = _kind(node)
        if kind in wanted:
            return True
        if kind == "integer" and "number" in wanted:
            return True
        # A YAML scalar written as a number or boolean where text is expected is its text.
        return kind in ("integer", "number", "boolean") and "string" in wanted

    def check(self, node: Node, schema: dict[str, Any], what: str) -> Iterator[_Issue]:
        schema = self.resolve(schema)
        what = schema.get("title", what)
        line, column = _position(node)
        if "type" in schema and not self.type_ok(node, schema["type"]):
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            expected = " or ".join(_TYPE_WORDS[t] for t in types)
            yield line, column, f"expected {what} ({expected}), found {_describe(node)}"
            return
        if "anyOf" in schema or "oneOf" in schema:
            problems = list(self.alternatives(node, schema, what))
            if problems:
                yield from problems
                return
        if isinstance(node, ScalarNode):
            yield from self.check_scalar(node, schema, what)
        elif isinstance(node, MappingNode):
            yield from self.check_mapping(node, schema, what)
        elif isinstance(node, SequenceNode):
            yield from self.check_sequence(node, schema, what)

    def alternatives(self, node: Node, schema: dict[str, Any], what: str) -> Iterator[_Issue]:
        line, column = _position(node)
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if not branches:
                continue
            results = [list(self.check(node, branch, what)) for branch in branches]
            valid = sum(1 for r in results if not r)
            if keyword == "anyOf" and valid >= 1:
                continue
            if keyword == "oneOf" and valid == 1:
                continue
            required_only = all(set(self.resolve(b)) == {"required"} for b in branches)
            if required_only:
                keys = [self.resolve(b)["required"][0] for b in branches]
                present = [k for k in keys if self.has_key(node, k)]
                if len(present) > 1:
                    second = next(k for k, _ in self.entries(node) or [] if k.value == present[1])
                    k_line, k_column = _position(second)
                    yield k_line, k_column, (
                        f"{what} does one thing; found both {present[0]!r} and {present[1]!r}"
                    )
                elif keyword == "oneOf" or not present:
                    listed = ", ".join(keys)
                    yield line, column, f"expected {what} to have one of: {listed}"
                continue
            # Report the problems of the alternatives that accept this kind of value.
            fitting = [
                r for b, r in zip(branches, results)
                if "type" not in self.resolve(b) or self.type_ok(node, self.resolve(b)["type"])
            ]
            if fitting:
                yield from min(fitting, key=len)
            else:
                kinds: list[str] = []
                for branch in branches:
                    types = self.resolve(branch).get("type")
                    for t in [types] if isinstance(types, str) else types or []:
                        if _TYPE_WORDS[t] not in kinds:
                            kinds.append(_TYPE_WORDS[t])
                yield line, column, f"expected {what} ({' or '.join(kinds)}), found {_describe(node)}"

    def has_key(self, node: Node, key: str) -> bool:
        if not isinstance(node, MappingNode):
            return False
        return any(k.value == key for k, _ in self.entries(node) or [])

    def check_scalar(self, node: ScalarNode, schema: dict[str, Any], what: str) -> Iterator[_Issue]:
        line, column = _position(node)
        value = self.value(node)
        if "const" in schema and value != schema["const"]:
            yield line, column, f"expected {what} to be {schema['const']!r}, found {_describe(node)}"
            return
        if "enum" in schema:
            choices = schema["enum"]
            if not any(value == c and type(value) is type(c) for c in choices):
                listed = ", ".join("null" if c is None else str(c).lower() if isinstance(c, bool)
                                   else str(c) for c in choices)
                message = f"expected {what} to be one of: {listed}, found {_describe(node)}"
                close = difflib.get_close_matches(str(node.value), [str(c) for c in choices], n=1)
                if close:
                    message += f" (did you mean {close[0]!r}?)"
                yield line, column, message
                return
        text = str(node.value)
        if "pattern" in schema and not re.search(schema["pattern"], text):
            detail = schema.get("description", f"the pattern {schema['pattern']}")
            yield line, column, f"expected {what} to be {detail}, found {text!r}"
        if "minLength" in schema and len(text) < schema["minLength"]:
            yield line, column, f"expected {what} of at least {schema['minLength']} characters"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            low, high = schema.get("minimum"), schema.get("maximum")
            if (low is not None and value < low) or (high is not None and value > high):
                yield line, column, f"expected {what} between {low} and {high}, found {value}"

    def check_mapping(self, node: MappingNode, schema: dict[str, Any], what: str) -> Iterator[_Issue]:
        line, column = _position(node)
        entries = self.entries(node)
        if entries is None:
            return  # a bad merge key: the loader reports it
        keys = [k.value for k, _ in entries]
        properties: dict[str, Any] = schema.get("properties", {})
        additional = schema.get("additionalProperties", True)
        names = schema.get("propertyNames")
        for key_node, value_node in entries:
            key = key_node.value
            if names is not None:
                problems = list(self.check(key_node, names, "a name"))
                if problems:
                    yield from problems
                    continue
            if key in properties:
                yield from self.check(value_node, properties[key], f"'{key}'")
            elif additional is False:
                allowed = list(properties)
                message = f"unknown key {key!r} in {what}; expected one of: {', '.join(allowed)}"
                close = difflib.get_close_matches(key, allowed, n=1)
                if close:
                    message += f" (did you mean {close[0]!r}?)"
                k_line, k_column = _position(key_node)
                yield k_line, k_column, message
            elif isinstance(additional, dict):
                yield from self.check(value_node, additional, f"{key!r}")
        for key in schema.get("required", []):
            if key not in keys:
                yield line, column, f"missing required key {key!r} in {what}"
        if len(keys) < schema.get("minProperties", 0):
            yield line, column, f"expected at least {schema['minProperties']} entry in {what}"
        if "maxProperties" in schema and len(keys) > schema["maxProperties"]:
            yield line, column, f"expected {what} to be empty, found {len(keys)} entries"

    def check_sequence(self, node: SequenceNode, schema: dict[str, Any], what: str) -> Iterator[_Issue]:
        line, column = _position(node)
        if len(node.value) < schema.get("minItems", 0):
            yield line, column, f"expected at least {schema['minItems']} item(s) in {what}"
        if "items" in schema:
            for item in node.value:
                yield from self.check(item, schema["items"], "an item")

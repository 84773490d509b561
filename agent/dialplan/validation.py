"""A dialplan file's structure, checked against ``dialplans/schema.json`` with ``jsonschema``.

The schema is the one declaration of the language's structure: key names, types, required keys,
enums, ranges and name patterns. This module composes the YAML with PyYAML (so every value keeps
its node, hence its ``line:column``), hands a JSON-like copy to a Draft 2020-12 validator and
turns each error back into ``path:line:column: what was expected``. What a schema cannot say
(references, flow shape, templates, time zones) is checked by :mod:`agent.dialplan.loader` and
:mod:`agent.dialplan.checks`.

YAML scalars written as numbers or booleans count as text where text is expected (``dtmf: 1``,
``examples: [yes]``), as the schema's description says; patterns see the text as written.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import jsonschema
import yaml
from jsonschema.exceptions import ValidationError
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agent.secrets import SecretError, is_secret_tag, resolve_tagged
from agent.yamlmarks import Mark, describe, mark_of

__all__ = ["SCHEMA_PATH", "Document", "compose", "load_schema", "validate_text"]

SCHEMA_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dialplans", "schema.json"
)

Path = tuple[Any, ...]
Problem = tuple[Mark, str]

_STR = "tag:yaml.org,2002:str"
_STRINGLIKE_TAGS = frozenset([_STR, "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                              "tag:yaml.org,2002:bool"])
_TYPE_WORDS = {
    "string": "a string", "integer": "an integer", "number": "a number",
    "boolean": "true or false", "null": "nothing", "object": "a mapping", "array": "a list",
}


@functools.lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The dialplan JSON Schema, parsed."""
    with open(SCHEMA_PATH, encoding="utf-8") as handle:
        schema: dict[str, Any] = json.load(handle)
    return schema


# --------------------------------------------------------------------------- YAML -> JSON-like


class _Int(int):
    """A YAML integer that remembers how it was written (it may be meant as text)."""

    text: str


class _Float(float):
    """A YAML float that remembers how it was written."""

    text: str


class _Bool(str):
    """A YAML boolean: its text as written (``yes``), its truth in :attr:`value`."""

    value: bool


def _plain(value: Any) -> Any:
    if isinstance(value, _Bool):
        return value.value
    if isinstance(value, _Int):
        return int(value)
    if isinstance(value, _Float):
        return float(value)
    return value


def _text(value: Any) -> Any:
    return value.text if isinstance(value, (_Int, _Float)) else value


@dataclass
class Document:
    """One composed file: its JSON-like data and the YAML node behind every value and key."""

    path: str
    root: Node | None
    data: Any = None
    nodes: dict[Path, Node] = field(default_factory=dict)
    keys: dict[Path, Node] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    bad: set[int] = field(default_factory=set)
    """``id()`` of the nodes that broke the schema; the loader builds nothing from them."""

    def mark(self, node: Node) -> Mark:
        return mark_of(self.path, node)


def compose(path: str, text: str) -> Document:
    """Compose *text* and check it against the schema; problems and broken nodes are recorded.

    Raises ``yaml.YAMLError`` for text that is not YAML.
    """
    doc = Document(path, yaml.compose(text, Loader=yaml.SafeLoader))
    if doc.root is None:
        return doc
    _resolve_secrets(doc.root, doc)
    constructor = SafeConstructor()
    late: list[tuple[Path, Node, str]] = []
    doc.data = _convert(doc.root, (), doc, constructor, late)
    for where, key_node, message in late:
        doc.problems.append((doc.mark(key_node), message.format(what=_what(where, _schema_at(where)))))
    for error in _validator().iter_errors(doc.data):
        _report(error, doc)
    return doc


def _resolve_secrets(node: Node, doc: Document) -> None:
    """Replace each ``!env``/``!file`` scalar by the string it names (agent/secrets.py), in place."""
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            _resolve_secrets(value_node, doc)
    elif isinstance(node, SequenceNode):
        for item in node.value:
            _resolve_secrets(item, doc)
    elif isinstance(node, ScalarNode) and is_secret_tag(node.tag):
        try:
            node.value = resolve_tagged(node.tag, node.value, os.path.dirname(os.path.abspath(doc.path)))
        except SecretError as exc:
            doc.problems.append((doc.mark(node), str(exc)))
            node.value = ""
        node.tag = _STR


def _convert(node: Node, path: Path, doc: Document, constructor: SafeConstructor,
             late: list[tuple[Path, Node, str]]) -> Any:
    doc.nodes[path] = node
    if isinstance(node, MappingNode):
        try:
            constructor.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            where = exc.problem_mark or node.start_mark
            doc.problems.append((Mark(doc.path, where.line + 1, where.column + 1), str(exc.problem)))
            node.value = [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"]
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag not in _STRINGLIKE_TAGS:
                message = f"expected a name as key in {{what}}, found {describe(key_node)}"
                late.append((path, key_node, message))
                continue
            key = key_node.value
            if key in out:
                first = doc.keys[path + (key,)].start_mark.line + 1
                message = f"duplicate key {key!r} in {{what}}; first given at line {first}"
                late.append((path, key_node, message))
                continue
            doc.keys[path + (key,)] = key_node
            out[key] = _convert(value_node, path + (key,), doc, constructor, late)
        return out
    if isinstance(node, SequenceNode):
        return [_convert(item, path + (i,), doc, constructor, late) for i, item in enumerate(node.value)]
    assert isinstance(node, ScalarNode)
    if node.tag == "tag:yaml.org,2002:null":
        return None
    if node.tag == "tag:yaml.org,2002:bool":
        flag = _Bool(node.value)
        flag.value = bool(constructor.construct_yaml_bool(node))
        return flag
    if node.tag == "tag:yaml.org,2002:int":
        number = _Int(constructor.construct_yaml_int(node))
        number.text = node.value
        return number
    if node.tag == "tag:yaml.org,2002:float":
        real = _Float(constructor.construct_yaml_float(node))
        real.text = node.value
        return real
    return node.value  # strings, and timestamps as written


# --------------------------------------------------------------------------- the validator


def _is_string(_checker: Any, value: Any) -> bool:
    return isinstance(value, (str, _Int, _Float))


def _is_boolean(_checker: Any, value: Any) -> bool:
    return isinstance(value, (bool, _Bool))


def _is_integer(_checker: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_checker: Any, value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _enum(validator: Any, enums: list[Any], instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not any(_same(_plain(instance), choice) for choice in enums):
        yield ValidationError(f"{_plain(instance)!r} is not one of {enums!r}")


def _const(validator: Any, const: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not _same(_plain(instance), const):
        yield ValidationError(f"{const!r} was expected")


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not re.search(pattern, _text(instance)):
        yield ValidationError(f"{_text(instance)!r} does not match {pattern!r}")


# Text scalars may be written as YAML numbers or booleans; the stock checks see them as
# numbers, so the type checker and the text keywords read them as written.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"enum": _enum, "const": _const, "pattern": _pattern},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"string": _is_string, "boolean": _is_boolean, "integer": _is_integer, "number": _is_number}
    ),
)


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    return _Validator(load_schema())


# --------------------------------------------------------------------------- messages


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target: Any = load_schema()
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        schema = target
    return schema


def _schema_at(path: Path) -> dict[str, Any]:
    """The subschema that describes the value at *path* (the first fitting alternative)."""
    schema = _resolve(load_schema())
    for part in path:
        candidates = [schema] + [_resolve(b) for b in schema.get("anyOf", []) + schema.get("oneOf", [])]
        for candidate in candidates:
            if isinstance(part, str) and part in candidate.get("properties", {}):
                schema = _resolve(candidate["properties"][part])
                break
            if isinstance(part, str) and isinstance(candidate.get("additionalProperties"), dict):
                schema = _resolve(candidate["additionalProperties"])
                break
            if isinstance(part, int) and "items" in candidate:
                schema = _resolve(candidate["items"])
                break
        else:
            return {}
    return schema


def _declares(schema: dict[str, Any], key: str) -> bool:
    branches = [schema] + [_resolve(b) for b in schema.get("anyOf", []) + schema.get("oneOf", [])]
    return any(key in b.get("properties", {}) for b in branches)


def _what(path: Path, schema: dict[str, Any]) -> str:
    """How a message names the value at *path*: ``'routes'``, ``a step``, ``flow 'main'``."""
    title = schema.get("title")
    if not path:
        return title or "the dialplan"
    key = path[-1]
    parent = f" of '{path[-2]}'" if len(path) > 1 and isinstance(path[-2], str) else ""
    if isinstance(key, str):
        if _declares(_schema_at(path[:-1]), key) or not title:
            return f"'{key}'"
        article, _, noun = title.partition(" ")
        return f"{noun} {key!r}" if article in ("a", "an") else f"{key!r}{parent}"
    return title or f"an item{parent}"


def _noun(schema: dict[str, Any]) -> str:
    title = str(schema.get("title", "entry"))
    article, _, noun = title.partition(" ")
    return noun if article in ("a", "an") and noun else title


def _types(types: str | list[str]) -> str:
    return " or ".join(_TYPE_WORDS[t] for t in ([types] if isinstance(types, str) else types))


def _listed(values: Iterable[Any]) -> str:
    return ", ".join("null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
                     for v in values)


def _close(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _report(error: ValidationError, doc: Document) -> None:
    path = tuple(error.absolute_path)
    node = doc.nodes[path]
    schema = error.schema if isinstance(error.schema, dict) else {}
    what = _what(path, schema)
    kind, value = error.validator, error.validator_value
    here = doc.mark(node)
    if kind not in ("required", "additionalProperties"):
        doc.bad.add(id(node))  # the loader checks for missing keys and ignores unknown ones
    if "propertyNames" in error.schema_path and isinstance(error.instance, str):
        # A bad key: the error sits on the mapping, its instance is the key.
        key_node = doc.keys.get(path + (error.instance,), node)
        doc.bad.discard(id(node))
        doc.bad.update({id(key_node), id(doc.nodes.get(path + (error.instance,)))})
        detail = schema.get("description", f"the pattern {schema.get('pattern')}")
        title = schema.get("title", "a name")
        if path and isinstance(path[-1], str):
            title += f" in '{path[-1]}'"
        message = f"expected {title} to be {detail}, found {error.instance!r}"
        doc.problems.append((doc.mark(key_node), message))
        return
    if kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        for key in error.instance:
            if key not in allowed:
                message = f"unknown key {key!r} in {what}; expected one of: {', '.join(allowed)}"
                doc.problems.append((doc.mark(doc.keys[path + (key,)]), message + _close(key, allowed)))
        return
    if kind in ("anyOf", "oneOf"):
        _alternatives(error, doc, what)
        return
    if kind == "type":
        expected = _types(value)
        if schema.get("maxProperties") == 0:
            expected = expected.replace("a mapping", "an empty mapping")
        message = f"expected {what} ({expected}), found {describe(node)}"
    elif kind == "enum":
        message = f"expected {what} to be one of: {_listed(value)}, found {describe(node)}"
        if isinstance(node, ScalarNode):
            message += _close(str(node.value), [str(v) for v in value])
    elif kind == "const":
        message = f"expected {what} to be {value!r}, found {describe(node)}"
    elif kind == "pattern":
        detail = schema.get("description", f"the pattern {value}")
        message = f"expected {what} to be {detail}, found {node.value!r}"
    elif kind in ("minimum", "maximum"):
        message = (f"expected {what} between {schema.get('minimum')} and {schema.get('maximum')}, "
                   f"found {_plain(error.instance)}")
    elif kind == "required":
        for key in value:
            if key not in error.instance:
                doc.problems.append((here, f"missing required key {key!r} in {what}"))
        return
    elif kind in ("minItems", "minProperties"):
        entry = schema.get("items") or schema.get("additionalProperties") or {}
        entry = entry if "title" in entry else _resolve(entry)
        under = f"'{path[-1]}'" if path and isinstance(path[-1], str) else what
        message = f"expected at least one {_noun(entry)} under {under}"
    elif kind == "maxProperties":
        message = f"expected {what} to be empty, found {len(error.instance)} entries"
    else:
        message = f"{what}: {error.message}"
    doc.problems.append((here, message))


def _alternatives(error: ValidationError, doc: Document, what: str) -> None:
    """Report an anyOf/oneOf failure as the problem of the alternative the value was meant as."""
    node = doc.nodes[tuple(error.absolute_path)]
    branches = [_resolve(b) for b in error.validator_value]
    if all(set(b) == {"required"} for b in branches):
        if not isinstance(error.instance, dict):
            return  # not a mapping: its type error says so
        keys = [b["required"][0] for b in branches]
        present = [k for k in keys if isinstance(error.instance, dict) and k in error.instance]
        if len(present) > 1:
            second = doc.keys[tuple(error.absolute_path) + (present[1],)]
            doc.problems.append((doc.mark(second), f"{what} does one thing; found both {present[0]!r} "
                                                   f"and {present[1]!r} (split them into two steps)"))
        else:
            doc.problems.append((doc.mark(node), f"expected {what} to have one of: {', '.join(keys)}"))
        return
    fitting = [i for i, b in enumerate(branches)
               if "type" not in b or any(_validator().is_type(error.instance, t)
                                         for t in ([b["type"]] if isinstance(b["type"], str) else b["type"]))]
    if fitting:
        by_branch = {i: [e for e in error.context if e.relative_schema_path[0] == i] for i in fitting}
        for sub in min(by_branch.values(), key=len):
            _report(sub, doc)
        return
    kinds: list[str] = []
    for branch in branches:
        types = branch.get("type", [])
        for t in [types] if isinstance(types, str) else types:
            if _TYPE_WORDS[t] not in kinds:
                kinds.append(_TYPE_WORDS[t])
    doc.problems.append((doc.mark(node), f"expected {what} ({' or '.join(kinds)}), found {describe(node)}"))


def validate_text(text: str, path: str = "<string>") -> list[tuple[int, int, str]]:
    """The structural problems of YAML *text*, as ``(line, column, message)`` in file order."""
    problems = compose(path, text).problems
    return sorted({(mark.line, mark.column, message) for mark, message in problems})

"""Read YAML into plain values that remember where each came from.

Config files and dialplans are parsed once, at the edge, into frozen
dataclasses; errors name ``file:line:column`` and what was expected.
"""
from __future__ import annotations

from dataclasses import dataclass
import os
from typing import Any

import yaml

from agent.secrets import SecretError, is_secret_tag, redact, resolve_tagged


@dataclass(frozen=True)
class Mark:
    """A position in a file, 1-based line and column (as editors count)."""

    path: str
    line: int     # 1-based
    column: int   # 1-based

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


class ConfigError(ValueError):
    """An invalid file; ``str()`` is ``path:line:column: message`` per error."""

    def __init__(self, errors: list[tuple[Mark, str]]) -> None:
        errors = sorted(errors, key=lambda e: (e[0].path, e[0].line, e[0].column))
        self.errors = errors
        # A secret (!env/!file) put where it does not belong must not be quoted back.
        super().__init__(redact("\n".join(f"{mark}: {msg}" for mark, msg in errors)))


class Node:
    """A YAML value (mapping → dict of Node, sequence → list of Node, else scalar)."""

    def __init__(self, value: Any, mark: Mark) -> None:
        self.value = value
        self.mark = mark

    def __repr__(self) -> str:
        return f"Node({self.value!r} @ {self.mark})"


def load(path: str, text: str | None = None) -> Node:
    """Parse *path* (or *text* labelled as *path*) into a :class:`Node` tree."""
    if text is None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError([(Mark(path, 1, 1), f"cannot read file: {e.strerror}")]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark
        mark = Mark(path, m.line + 1, m.column + 1) if m else Mark(path, 1, 1)
        raise ConfigError([(mark, f"YAML syntax error: {e.problem}")]) from None
    if root is None:
        return Node({}, Mark(path, 1, 1))
    return _convert(root, path)


def _convert(node: yaml.Node, path: str) -> Node:
    mark = Mark(path, node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Node] = {}
        keys: dict[str, Node] = {}
        for k, v in node.value:
            key = yaml.SafeLoader(  # resolve the key's scalar type the normal way
                "").construct_object(k) if not isinstance(k, yaml.ScalarNode) else k.value
            knode = Node(key, Mark(path, k.start_mark.line + 1, k.start_mark.column + 1))
            if str(key) in out:
                raise ConfigError([(knode.mark, f"duplicate key {key!r}")])
            out[str(key)] = _convert(v, path)
            keys[str(key)] = knode
        n = Node(out, mark)
        n.key_marks = keys  # type: ignore[attr-defined]
        return n
    if isinstance(node, yaml.SequenceNode):
        return Node([_convert(v, path) for v in node.value], mark)
    if is_secret_tag(node.tag):
        try:
            return Node(resolve_tagged(node.tag, node.value, os.path.dirname(os.path.abspath(path))), mark)
        except SecretError as e:
            raise ConfigError([(mark, str(e))]) from None
    loader = yaml.SafeLoader("")
    return Node(loader.construct_object(node), mark)


def mark_of(path: str, node: yaml.Node) -> Mark:
    """Where a composed PyYAML *node* starts in *path*."""
    return Mark(path, node.start_mark.line + 1, node.start_mark.column + 1)


_TAG_WORDS = {
    "tag:yaml.org,2002:str": "a string",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:timestamp": "a timestamp",
}


def describe(node: yaml.Node) -> str:
    """What a composed PyYAML *node* is, for "found ..." in messages: ``an integer '5'``."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node.tag == "tag:yaml.org,2002:null":
        return "nothing (null)"
    return f"{_TAG_WORDS.get(node.tag, node.tag)} {node.value!r}"


def key_mark(node: Node, key: str) -> Mark:
    return getattr(node, "key_marks", {}).get(key, Node(None, node.mark)).mark

"""Secrets and speech connections in the config file: values read from the environment or a file.

A secret is a plain string, ``{env: NAME}`` or ``{file: PATH}``, with an optional ``prefix``
(``{env: NGC_API_KEY, prefix: "Bearer "}``). It is resolved when the config loads, so a
missing variable or unreadable file is a config error at its line, and never printed.
"""
from __future__ import annotations

import os
import re

from agent.speech.api import SpeechConnection
from agent.yamlmarks import Mark, Node, key_mark

_METADATA_KEY = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_SECRET_KEYS = ("env", "file", "prefix")


def secret(node: Node, where: str, base: str, errors: list[tuple[Mark, str]]) -> str:
    """The value of a secret *node*; "" (and an error) when it cannot be read."""
    value = node.value
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, dict):
        errors.append((node.mark, f"{where}: expected a string, {{env: NAME}} or {{file: PATH}}"))
        return ""
    for key in value:
        if key not in _SECRET_KEYS:
            errors.append((key_mark(node, key), f"unknown key {key!r} in {where}; expected one of: "
                                                f"{', '.join(_SECRET_KEYS)}"))
    prefix_node = value.get("prefix")
    prefix = str(prefix_node.value) if prefix_node is not None and prefix_node.value is not None else ""
    env, path = value.get("env"), value.get("file")
    if (env is None) == (path is None):
        errors.append((node.mark, f"{where}: expected exactly one of 'env' or 'file'"))
        return ""
    if env is not None:
        name = str(env.value)
        found = os.environ.get(name)
        if not found:
            errors.append((env.mark, f"{where}.env: environment variable {name} is not set"))
            return ""
        return prefix + found.strip()
    assert path is not None
    full = os.path.join(base, os.path.expanduser(str(path.value)))
    try:
        with open(full, encoding="utf-8") as handle:
            text = handle.read().strip()
    except OSError as exc:
        errors.append((path.mark, f"{where}.file: cannot read {full}: {exc.strerror}"))
        return ""
    if not text:
        errors.append((path.mark, f"{where}.file: {full} is empty"))
        return ""
    return prefix + text


def metadata(node: Node | None, where: str, base: str, errors: list[tuple[Mark, str]]) -> tuple[tuple[str, str], ...]:
    """``metadata:`` of a region: a mapping of lower-case gRPC metadata keys to secrets."""
    if node is None or node.value is None:
        return ()
    if not isinstance(node.value, dict):
        errors.append((node.mark, f"{where}: expected a mapping of metadata keys to values or secrets"))
        return ()
    out: list[tuple[str, str]] = []
    for key, value in node.value.items():
        if not isinstance(key, str) or not _METADATA_KEY.match(key) or key.startswith("grpc-"):
            errors.append((key_mark(node, key), f"{where}: {key!r} is not a gRPC metadata key (lower-case "
                                                f"letters, digits, '-', '_', '.'; not grpc-*)"))
            continue
        out.append((key, secret(value, f"{where}.{key}", base, errors)))
    return tuple(out)


def pem_path(node: Node | None, where: str, base: str, errors: list[tuple[Mark, str]], marker: bytes) -> str:
    """A PEM file path (relative to the config file) that holds *marker*; "" when absent."""
    if node is None or node.value in (None, ""):
        return ""
    if not isinstance(node.value, str):
        errors.append((node.mark, f"{where}: expected the path of a PEM file"))
        return ""
    full = os.path.join(base, os.path.expanduser(node.value))
    try:
        with open(full, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        errors.append((node.mark, f"{where}: expected a readable PEM file: cannot read {full}: {exc.strerror}"))
        return ""
    if marker not in data:
        errors.append((node.mark, f"{where}: expected a readable PEM file: {full} holds no {marker.decode()}"))
        return ""
    return full


def speech_connection(values: dict[str, Node], where: str, base: str,
                      errors: list[tuple[Mark, str]], use_ssl: bool) -> SpeechConnection:
    """A region's ``root_ca``, ``client_cert``, ``client_key`` and ``metadata`` (its ``use_ssl`` given)."""
    cert = pem_path(values.get("client_cert"), f"{where}.client_cert", base, errors, b"CERTIFICATE")
    key = pem_path(values.get("client_key"), f"{where}.client_key", base, errors, b"PRIVATE KEY")
    given_cert, given_key = values.get("client_cert"), values.get("client_key")
    if (given_cert is None) != (given_key is None):
        node = given_cert or given_key
        assert node is not None
        errors.append((node.mark, f"{where}: expected both client_cert and client_key (mutual TLS)"))
    return SpeechConnection(
        use_ssl=use_ssl,
        root_ca=pem_path(values.get("root_ca"), f"{where}.root_ca", base, errors, b"CERTIFICATE"),
        client_cert=cert, client_key=key,
        metadata=metadata(values.get("metadata"), f"{where}.metadata", base, errors))

"""Secrets and speech connections in the config file: values read from the environment or a file.

A secret is a plain string (which may be an ``!env NAME`` or ``!file PATH`` tag, resolved by the
YAML loader: :mod:`agent.secrets`), or ``{env: NAME}`` / ``{file: PATH}`` with an optional
``prefix`` (``{env: NGC_API_KEY, prefix: "Bearer "}``), read the same way. It is resolved when
the config loads, so a missing variable or unreadable file is a config error at its line, and
never printed; every value is remembered for redaction.
"""
from __future__ import annotations

import os
import re

from agent.secrets import ENV_TAG, FILE_TAG, SecretError, remember_secret, resolve_tagged
from agent.speech.api import SpeechConnection
from agent.yamlmarks import Mark, Node, key_mark

_METADATA_KEY = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_SECRET_KEYS = ("env", "file", "prefix")


def secret(node: Node, where: str, base: str, errors: list[tuple[Mark, str]]) -> str:
    """The value of a secret *node*; "" (and an error) when it cannot be read."""
    value = node.value
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        remember_secret(str(value))  # masked in logs and records like every secret
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
    # the same reading as the !env and !file tags (agent/secrets.py), with a prefix
    source = env if env is not None else path
    assert source is not None
    try:
        found = resolve_tagged(ENV_TAG if env is not None else FILE_TAG, str(source.value), base)
    except SecretError as exc:
        errors.append((source.mark, f"{where}.{'env' if env is not None else 'file'}: {exc}"))
        return ""
    resolved = prefix + found.strip()
    remember_secret(resolved)
    return resolved


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

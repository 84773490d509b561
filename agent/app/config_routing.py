"""``speech.routing`` sections of the config: ``probe``, ``health``, ``selection`` and ``failover``.

Each section's keys are the fields of the policy it sets (:class:`HealthPolicy`,
:class:`SelectionPolicy`, :class:`FailoverSettings`, :class:`ProbeSettings`), typed by their
defaults; unknown keys and wrong types are errors at their position. docs/regions.md lists them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.regions.health import HealthPolicy
from agent.regions.selector import SelectionPolicy
from agent.speech.failover_core import FailoverSettings
from agent.yamlmarks import Mark, Node, key_mark

T = TypeVar("T")


@dataclass(frozen=True)
class ProbeSettings:
    """How :class:`agent.regions.probe.RegionProber` probes (``routing.probe``)."""

    interval_ms: int = 250
    timeout_ms: int = 500
    #: one grpc.health.v1 Watch stream per endpoint (status pushes), besides the checks
    watch: bool = True
    discover_versions: bool = False
    discovery_interval_s: float = 10.0


SECTIONS: dict[str, type] = {"probe": ProbeSettings, "health": HealthPolicy, "selection": SelectionPolicy,
                             "failover": FailoverSettings}


def _describe(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)


def read_section(node: Node, where: str, base: T, errors: list[tuple[Mark, str]]) -> T:
    """*base* with the values of mapping *node* (its keys: *base*'s fields)."""
    if not isinstance(node.value, dict):
        errors.append((node.mark, f"{where}: expected a mapping, got {_describe(node.value)}"))
        return base
    fields = {f.name: f for f in dataclasses.fields(base)}  # type: ignore[arg-type]
    changes: dict[str, Any] = {}
    for key, value_node in node.value.items():
        if key not in fields:
            errors.append((key_mark(node, key), f"unknown key {key!r} in {where}; expected one of: "
                                                f"{', '.join(fields)}"))
            continue
        default = getattr(base, key)
        value = value_node.value
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            errors.append((value_node.mark, f"{where}.{key}: expected {type(default).__name__}, "
                                            f"got {_describe(value)}"))
            continue
        if not isinstance(default, bool) and value < 0:
            errors.append((value_node.mark, f"{where}.{key}: expected 0 or more"))
            continue
        changes[key] = float(value) if isinstance(default, float) else value
    return dataclasses.replace(base, **changes)  # type: ignore[type-var]

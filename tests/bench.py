"""The scripts under ops/bench/ as modules, for the tests that use their code."""
from __future__ import annotations

from types import ModuleType

from ops.bench.scripts import load_script

__all__ = ["load_bench", "load_script"]


def load_bench() -> ModuleType:
    """ops/bench/turn-latency as a module."""
    return load_script("turn-latency", "turn_latency_bench")

"""ops/bench/turn-latency as a module, for the tests that use its scoring and scenarios."""
from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import SourceFileLoader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_bench():  # type: ignore[no-untyped-def]
    """ops/bench/turn-latency as a module (it is a script without .py)."""
    path = os.path.join(ROOT, "ops", "bench", "turn-latency")
    loader = SourceFileLoader("turn_latency_bench", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module   # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module

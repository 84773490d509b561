"""The scripts of ops/bench (files without .py) loaded as modules, for the benches and tests that
reuse their code."""
from __future__ import annotations

import importlib.util
import os
import sys
from functools import lru_cache
from importlib.machinery import SourceFileLoader
from types import ModuleType

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


@lru_cache(maxsize=None)
def load_script(script: str, module_name: str) -> ModuleType:
    """ops/bench/*script* as the module *module_name* (loaded once)."""
    loader = SourceFileLoader(module_name, os.path.join(BENCH_DIR, script))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module   # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module

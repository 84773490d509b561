"""The agent's processes run numpy's OpenBLAS on one thread unless the operator says otherwise."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent import BLAS_THREADS_ENV

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# How many threads the OpenBLAS that numpy loaded will use, read from the library itself.
PROBE = r"""
import ctypes, agent, numpy
path = next((line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()), None)
lib = ctypes.CDLL(path) if path else None
for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
    if lib is not None and hasattr(lib, name):
        print(getattr(lib, name)())
        break
else:
    print("unknown")
"""


def _threads(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != BLAS_THREADS_ENV}
    if env_value is not None:
        env[BLAS_THREADS_ENV] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    value = out.stdout.strip()
    if value == "unknown":
        pytest.skip("numpy's BLAS is not an OpenBLAS whose thread count can be read")
    return value


def test_importing_the_agent_runs_blas_on_one_thread() -> None:
    assert _threads(None) == "1"


def test_an_operators_setting_stands() -> None:
    assert _threads("2") == "2"

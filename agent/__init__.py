"""OpenClaw Voice: the agent's packages (app, call, dialplan, speech, regions, tools).

Importing the package makes numpy's OpenBLAS run on one thread in this process and in the
processes it starts, unless ``OPENBLAS_NUM_THREADS`` is already set. The agent's matrix products
are small (one transcript through the sentence encoder, on the reactor thread) and run beside
busy decode workers on few cores, where OpenBLAS's extra threads wait for a core: on the
2-core machine with both cores busy, one sentence took 41 ms (p50) and 158 ms (p90) with two
BLAS threads, 27 and 53 ms with one (docs/latency.md, "One BLAS thread").
"""
import os

BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"

# Read by OpenBLAS when numpy first loads it, so it is set before anything imports numpy.
os.environ.setdefault(BLAS_THREADS_ENV, "1")

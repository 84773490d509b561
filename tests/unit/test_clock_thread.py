"""pjmedia's clock threads are raised to SCHED_FIFO (sip/pjsua.py: raise_clock_threads)."""
from __future__ import annotations

import ctypes
import os
import threading

import pytest

from sip.pjsua import raise_clock_threads

_PR_SET_NAME = 15


def _named_thread(name: bytes):
    """A thread whose kernel name (comm) is *name*, waiting until released; (tid, release)."""
    ready, release = threading.Event(), threading.Event()
    seen = {}

    def run():
        ctypes.CDLL(None).prctl(_PR_SET_NAME, name, 0, 0, 0)
        seen["tid"] = threading.get_native_id()
        ready.set()
        release.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)

    def stop():
        release.set()
        thread.join()
    return seen["tid"], stop


def _fifo_allowed() -> bool:
    tid, stop = _named_thread(b"probe")
    try:
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
        return os.sched_getscheduler(tid) == os.SCHED_FIFO
    except OSError:
        return False
    finally:
        stop()


def test_the_clock_thread_runs_at_the_configured_priority_and_only_it():
    if not _fifo_allowed():
        pytest.skip("this process may not set SCHED_FIFO")
    clock, stop_clock = _named_thread(b"clock")
    other, stop_other = _named_thread(b"worker")
    try:
        assert raise_clock_threads(10) == 1
        assert (os.sched_getscheduler(clock), os.sched_getparam(clock).sched_priority) == (os.SCHED_FIFO, 10)
        assert os.sched_getscheduler(other) == os.SCHED_OTHER
        assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER  # not the caller's thread
    finally:
        stop_clock()
        stop_other()


def test_priority_zero_leaves_the_thread_alone():
    clock, stop = _named_thread(b"clock")
    try:
        assert raise_clock_threads(0) == 0
        assert os.sched_getscheduler(clock) == os.SCHED_OTHER
    finally:
        stop()

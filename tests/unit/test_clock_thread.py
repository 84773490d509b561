"""pjmedia's clock thread is raised to SCHED_FIFO at its first frame (sip/pjsua.py: _ClockThread)."""
from __future__ import annotations

import os
import threading

import pytest

from sip.pjsua import _ClockThread


def _in_a_thread(fn):
    seen = {}

    def run():
        fn()
        seen["policy"] = os.sched_getscheduler(threading.get_native_id())
        seen["priority"] = os.sched_getparam(threading.get_native_id()).sched_priority

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return seen


def _fifo_allowed() -> bool:
    def probe():
        try:
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            pass
    return _in_a_thread(probe)["policy"] == os.SCHED_FIFO


def test_the_thread_that_calls_first_runs_at_the_configured_priority_and_only_it():
    if not _fifo_allowed():
        pytest.skip("this process may not set SCHED_FIFO")
    clock = _ClockThread()
    clock.priority = 10
    seen = _in_a_thread(clock.raise_once)
    assert clock.done
    assert (seen["policy"], seen["priority"]) == (os.SCHED_FIFO, 10)
    assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER  # not the caller's process


def test_priority_zero_leaves_the_thread_alone():
    clock = _ClockThread()
    seen = _in_a_thread(clock.raise_once)
    assert clock.done
    assert seen["policy"] == os.SCHED_OTHER

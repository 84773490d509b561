"""pjsua's own call table, read through its C API (pjsua2 offers no way to list calls).

The reconciler (agent/app/reconciler.py) compares it with the calls the agent knows. Like
:mod:`sip.gate`, it calls the pjsua library inside the pjsua2 wheel through ctypes; only call
ids pjsua itself has just listed are passed back to it (pjsua asserts on invalid ids).
"""
from __future__ import annotations

import ctypes

import pjsua2._pjsua2 as native

_lib: ctypes.CDLL | None = None


def _pjsua() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(native.__file__)
        lib.pjsua_enum_calls.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint)]
        lib.pjsua_enum_calls.restype = ctypes.c_int
        lib.pjsua_call_get_user_data.argtypes = [ctypes.c_int]
        lib.pjsua_call_get_user_data.restype = ctypes.c_void_p
        lib.pjsua_call_hangup.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.pjsua_call_hangup.restype = ctypes.c_int
        lib.pjsua_call_is_active.argtypes = [ctypes.c_int]
        lib.pjsua_call_is_active.restype = ctypes.c_int
        _lib = lib
    return _lib


def _slots(lib: ctypes.CDLL, max_calls: int) -> list[int]:
    """The call ids pjsua holds (live calls and calls still ending)."""
    ids = (ctypes.c_int * max_calls)()
    count = ctypes.c_uint(max_calls)
    if lib.pjsua_enum_calls(ids, ctypes.byref(count)) != 0:
        return []
    return [ids[i] for i in range(count.value)]


def pjsua_calls(max_calls: int) -> dict[int, int]:
    """pjsua's live calls: {call id: address of the pjsua2 Call object pjsua reports its events to
    (0: none)}. A call whose dialog has ended but whose slot pjsua still holds (its BYE transaction
    is finishing) is not live: see :func:`slots_in_use`."""
    lib = _pjsua()
    return {cid: lib.pjsua_call_get_user_data(cid) or 0 for cid in _slots(lib, max_calls)
            if lib.pjsua_call_is_active(cid)}


def slots_in_use(max_calls: int) -> int:
    """How many of pjsua's call slots are taken, by live calls or by calls still ending: pjsua
    answers a new INVITE itself (a stateless 486) when none is left."""
    return len(_slots(_pjsua(), max_calls))


def hangup(call_id: int) -> int:
    """pjsua_call_hangup(call_id) with pjsua's default status; the pj_status_t it returns."""
    return int(_pjsua().pjsua_call_hangup(call_id, 0, None, None))

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
        _lib = lib
    return _lib


def pjsua_calls(max_calls: int) -> dict[int, int]:
    """{pjsua call id: address of the pjsua2 Call object pjsua reports its events to (0: none)}."""
    lib = _pjsua()
    ids = (ctypes.c_int * max_calls)()
    count = ctypes.c_uint(max_calls)
    if lib.pjsua_enum_calls(ids, ctypes.byref(count)) != 0:
        return {}
    return {ids[i]: lib.pjsua_call_get_user_data(ids[i]) or 0 for i in range(count.value)}


def hangup(call_id: int) -> int:
    """pjsua_call_hangup(call_id) with pjsua's default status; the pj_status_t it returns."""
    return int(_pjsua().pjsua_call_hangup(call_id, 0, None, None))

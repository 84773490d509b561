"""DTMF in SIP INFO with ``Content-Type: application/dtmf`` (the body is the key), for pjsua.

pjsua itself takes ``application/dtmf-relay`` INFO (``Signal=5``) and RFC 4733 events, but its
dialog layer answers an ``application/dtmf`` INFO with ``500 Unhandled by dialog usages``.
This pjsip module (registered through ctypes like :mod:`sip.gate`, just before the dialog
layer) answers such an INFO ``200 OK`` through a transaction (retransmissions are absorbed)
and hands the key to the call; an INFO for no call gets ``481``, one whose body is no key
``400``. Every other request goes on to pjsip untouched.
"""
from __future__ import annotations

import ctypes
import re
from typing import Callable

from twisted.logger import Logger

from sip.gate import _RX_REQUEST, _PjsipModule, _PjStr
from sip.message import parse_request

log = Logger(namespace="openclaw.sip")

#: before the dialog layer (32), after the transaction layer (16) that absorbs retransmissions
_INFO_PRIORITY = 31
_KEY = re.compile(r"^\s*(?:signal\s*=\s*)?([0-9A-Da-d*#]|1[01])\s*$", re.IGNORECASE | re.MULTILINE)
_EVENT_KEYS = {"10": "*", "11": "#"}


def dtmf_body_key(body: str) -> str | None:
    """The key an ``application/dtmf`` body carries ("5", "#", "11" for #), or None."""
    m = _KEY.search(body.replace("\r\n", "\n").strip())
    if m is None:
        return None
    key = m.group(1)
    return _EVENT_KEYS.get(key, key.upper())


class InfoDtmfModule:
    """Answers in-dialog ``INFO`` with ``application/dtmf`` bodies and reports their keys."""

    def __init__(self, read_message: Callable[[int], str | None], on_key: Callable[[str, str], bool]) -> None:
        """*read_message*: an rdata's raw text (the admission gate's reader); *on_key(call_id, key)*:
        hand the key to the call, False when there is no such call."""
        import pjsua2._pjsua2 as native

        self._read = read_message
        self._on_key = on_key
        lib = ctypes.CDLL(native.__file__)
        self._lib = lib
        lib.pjsua_get_pjsip_endpt.restype = ctypes.c_void_p
        lib.pjsip_rx_data_get_info.restype = ctypes.c_void_p
        lib.pjsip_rx_data_get_info.argtypes = [ctypes.c_void_p]
        lib.pjsip_endpt_respond.restype = ctypes.c_int
        lib.pjsip_endpt_respond.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.POINTER(_PjStr), ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_void_p]
        lib.pjsip_endpt_register_module.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.pjsip_endpt_unregister_module.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._endpt = lib.pjsua_get_pjsip_endpt()
        self._name = b"mod-openclaw-info-dtmf"
        self._callback = _RX_REQUEST(self._on_rx_request)
        self._module = _PjsipModule()
        self._module.name = _PjStr(self._name, len(self._name))
        self._module.id = -1
        self._module.priority = _INFO_PRIORITY
        self._module.on_rx_request = self._callback
        status = lib.pjsip_endpt_register_module(self._endpt, ctypes.byref(self._module))
        if status != 0:
            raise RuntimeError(f"cannot register the INFO DTMF module (pj_status {status})")
        self._registered = True

    def unregister(self) -> None:
        if self._registered:
            self._lib.pjsip_endpt_unregister_module(self._endpt, ctypes.byref(self._module))
            self._registered = False

    def _on_rx_request(self, rdata: int) -> int:
        try:
            info = self._lib.pjsip_rx_data_get_info(rdata)
            if not info or not ctypes.string_at(info, 18).startswith(b"Request msg INFO/"):
                return 0
            raw = self._read(rdata)
            if raw is None:
                return 0
            request = parse_request(raw)
            ctype = (request.header("content-type") or "").split(";", 1)[0].strip().lower()
            if ctype != "application/dtmf" or not request.to_tag:
                return 0
            key = dtmf_body_key(request.body)
            if key is None:
                log.info("call {call_id} INFO application/dtmf without a key: 400", call_id=request.call_id)
                return self._respond(rdata, 400, "Bad Request (no DTMF key in the body)")
            if not self._on_key(request.call_id, key):
                return self._respond(rdata, 481, "Call/Transaction Does Not Exist")
            return self._respond(rdata, 200, "OK")
        except Exception:
            log.failure("INFO DTMF module failed; letting pjsip handle the request")
            return 0

    def _respond(self, rdata: int, status: int, reason: str) -> int:
        text = reason.encode()
        result = self._lib.pjsip_endpt_respond(self._endpt, None, rdata, status,
                                               ctypes.byref(_PjStr(text, len(text))), None, None, None)
        return 1 if result == 0 else 0

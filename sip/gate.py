"""Admission before pjsua: a pjsip module, registered through ctypes, that refuses calls statelessly.

It sees each out-of-dialog INVITE (and OPTIONS) before pjsua allocates a call and can
answer it at once (``503`` with ``Retry-After`` at capacity, ``404`` for an unrouted
number): pjsua's own limit would otherwise answer a stateless ``486``, which proxies do
not fail over on. See docs/architecture.md, "Admission before pjsua".
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

import pjsua2._pjsua2 as native
from twisted.logger import Logger

log = Logger(namespace="openclaw.sip")


@dataclass(frozen=True)
class Rejection:
    """A final response that refuses a call before it is created."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...] = ()


class _PjStr(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_char_p), ("slen", ctypes.c_ssize_t)]


_RX_REQUEST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _PjsipModule(ctypes.Structure):
    _fields_ = [
        ("prev", ctypes.c_void_p), ("next", ctypes.c_void_p),
        ("name", _PjStr), ("id", ctypes.c_int), ("priority", ctypes.c_int),
        ("load", ctypes.c_void_p), ("start", ctypes.c_void_p),
        ("stop", ctypes.c_void_p), ("unload", ctypes.c_void_p),
        ("on_rx_request", _RX_REQUEST), ("on_rx_response", ctypes.c_void_p),
        ("on_tx_request", ctypes.c_void_p), ("on_tx_response", ctypes.c_void_p),
        ("on_tsx_state", ctypes.c_void_p),
    ]


class _PjsipHdr(ctypes.Structure):
    _fields_ = [
        ("prev", ctypes.c_void_p), ("next", ctypes.c_void_p), ("type", ctypes.c_int),
        ("name", _PjStr), ("sname", _PjStr), ("vptr", ctypes.c_void_p),
    ]


# Between the dialog layer (32, which consumes in-dialog requests) and
# pjsua's application module (64, which creates calls).
_GATE_PRIORITY = 60


class AdmissionGate:
    """A pjsip module that answers out-of-dialog INVITEs statelessly when refused.

    It also sees out-of-dialog OPTIONS (a load balancer's keepalive probe) and
    answers ``503`` with ``Retry-After`` while the application drains; otherwise
    pjsua's own OPTIONS handler answers ``200 OK``.
    """

    def __init__(self, on_invite: Callable[[str], Rejection | None],
                 on_options: Callable[[str], Rejection | None]) -> None:
        """*on_invite* / *on_options*: the decision on a request's raw text (None lets pjsua handle it)."""
        self._on_invite = on_invite
        self._on_options = on_options
        lib = ctypes.CDLL(native.__file__)
        self._lib = lib
        lib.pjsua_get_pjsip_endpt.restype = ctypes.c_void_p
        lib.pjsip_rx_data_get_info.restype = ctypes.c_void_p
        lib.pjsip_rx_data_get_info.argtypes = [ctypes.c_void_p]
        lib.pjsua_pool_create.restype = ctypes.c_void_p
        lib.pjsua_pool_create.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t]
        lib.pjsip_generic_string_hdr_create.restype = ctypes.c_void_p
        lib.pjsip_generic_string_hdr_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(_PjStr), ctypes.POINTER(_PjStr)]
        lib.pjsip_endpt_respond_stateless.restype = ctypes.c_int
        lib.pjsip_endpt_respond_stateless.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                                      ctypes.POINTER(_PjStr), ctypes.c_void_p, ctypes.c_void_p]
        lib.pjsip_endpt_register_module.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.pjsip_endpt_unregister_module.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._endpt = lib.pjsua_get_pjsip_endpt()
        self._pool = lib.pjsua_pool_create(b"openclaw-gate", 1024, 1024)
        self._name = b"mod-openclaw-admission"
        self._callback = _RX_REQUEST(self._on_rx_request)
        self._module = _PjsipModule()
        self._module.name = _PjStr(self._name, len(self._name))
        self._module.id = -1
        self._module.priority = _GATE_PRIORITY
        self._module.on_rx_request = self._callback
        self._msg_info_offset: int | None = None
        self._headers: dict[tuple[str, str], int] = {}
        status = lib.pjsip_endpt_register_module(self._endpt, ctypes.byref(self._module))
        if status != 0:
            raise RuntimeError(f"cannot register the admission module (pj_status {status})")
        self._registered = True

    def unregister(self) -> None:
        if self._registered:
            self._lib.pjsip_endpt_unregister_module(self._endpt, ctypes.byref(self._module))
            self._registered = False

    def _raw_message(self, rdata: int) -> str | None:
        """The request's text, read through rdata->msg_info (offset found once)."""
        info = self._lib.pjsip_rx_data_get_info(rdata)
        if not info:
            return None
        ptr_size = ctypes.sizeof(ctypes.c_void_p)
        if self._msg_info_offset is None:
            # pjsip_rx_data_get_info() caches its string in msg_info.info, whose
            # neighbours are msg_buf, len and msg (pjsip/sip_transport.h). The
            # packet buffer's size is a build option, so find the field by value.
            for off in range(0, 32768, ptr_size):
                if ctypes.c_void_p.from_address(rdata + off).value == info:
                    self._msg_info_offset = off - 3 * ptr_size
                    break
            else:
                return None
        base = rdata + self._msg_info_offset
        msg_buf = ctypes.c_void_p.from_address(base).value
        length = ctypes.c_int.from_address(base + ptr_size).value
        if not msg_buf or not 0 < length < 65536:
            return None
        return ctypes.string_at(msg_buf, length).decode("utf-8", "replace")

    def _on_rx_request(self, rdata: int) -> int:
        try:
            info = self._lib.pjsip_rx_data_get_info(rdata)
            if not info:
                return 0
            head = ctypes.string_at(info, 21)
            if head.startswith(b"Request msg INVITE/"):
                decide = self._on_invite
            elif head.startswith(b"Request msg OPTIONS/"):
                decide = self._on_options
            else:
                return 0
            raw = self._raw_message(rdata)
            if raw is None:
                return 0
            rejection = decide(raw)
            if rejection is None:
                return 0
            return self._respond(rdata, rejection)
        except Exception:
            log.failure("admission gate failed; letting pjsua handle the request")
            return 0

    def _respond(self, rdata: int, rejection: Rejection) -> int:
        head = _PjsipHdr()
        head.prev = head.next = ctypes.addressof(head)
        last = ctypes.addressof(head)
        for name, value in rejection.headers:
            hdr = self._header(name, value)
            if not hdr:
                continue
            node = _PjsipHdr.from_address(hdr)
            node.prev, node.next = last, ctypes.addressof(head)
            _PjsipHdr.from_address(last).next = hdr
            head.prev = hdr
            last = hdr
        reason = rejection.reason.encode()
        status = self._lib.pjsip_endpt_respond_stateless(
            self._endpt, rdata, rejection.status, ctypes.byref(_PjStr(reason, len(reason))),
            ctypes.addressof(head), None)
        return 1 if status == 0 else 0

    def _header(self, name: str, value: str) -> int:
        """A pjsip header allocated once per distinct (name, value) from the gate's pool."""
        key = (name, value)
        hdr = self._headers.get(key)
        if hdr is None:
            n, v = name.encode(), value.encode()
            hdr = self._lib.pjsip_generic_string_hdr_create(
                self._pool, ctypes.byref(_PjStr(n, len(n))), ctypes.byref(_PjStr(v, len(v)))) or 0
            if len(self._headers) < 64:
                self._headers[key] = hdr
        return hdr

"""Admission before pjsua: a pjsip module, registered through ctypes, that refuses calls statelessly.

It sees each out-of-dialog request before pjsua allocates anything for it and can
answer it at once (``503`` with ``Retry-After`` at capacity, ``404`` for an unrouted
number, ``403`` / a ``401`` challenge from :mod:`sip.guard`) or drop it unanswered
(:data:`DROP`, a banned source): pjsua's own limit would otherwise answer a stateless
``486``, which proxies do not fail over on. The decisions receive the request's text and
its source address. See docs/architecture.md, "Admission before pjsua", and docs/security.md.
"""
from __future__ import annotations

import ctypes
from typing import Callable

import pjsua2._pjsua2 as native
from twisted.logger import Logger

from sip.rejection import DROP, Rejection, ReplaceBody

log = Logger(namespace="openclaw.sip")

__all__ = ["DROP", "DOORS_PRIORITY", "AdmissionGate", "Rejection", "ReplaceBody"]


class _PjStr(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_char_p), ("slen", ctypes.c_ssize_t)]


class _PjStrAt(ctypes.Structure):
    """A pj_str_t read or written in place (its pointer as an address)."""

    _fields_ = [("ptr", ctypes.c_void_p), ("slen", ctypes.c_ssize_t)]


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
#: after the transaction layer (16), before the dialog layer (32): sees in-dialog requests too
DOORS_PRIORITY = 30


Decision = Callable[[str, str], "Rejection | ReplaceBody | None"]


class AdmissionGate:
    """A pjsip module that answers out-of-dialog INVITEs statelessly when refused.

    It also sees out-of-dialog OPTIONS (a load balancer's keepalive probe) and
    answers ``503`` with ``Retry-After`` while the application drains; otherwise
    pjsua's own OPTIONS handler answers ``200 OK``. Other out-of-dialog requests go
    to *on_other* (a banned source's are dropped).
    """

    def __init__(self, on_invite: Decision, on_options: Decision, on_other: Decision | None = None,
                 priority: int = _GATE_PRIORITY, name: bytes = b"mod-openclaw-admission") -> None:
        """Each decision gets a request's raw text and source address (None lets pjsua handle it).

        With *priority* :data:`DOORS_PRIORITY` the module sees in-dialog requests as well
        (sip/doors.py registers one there)."""
        self._on_invite = on_invite
        self._on_options = on_options
        self._on_other = on_other
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
        lib.pj_pool_release.argtypes = [ctypes.c_void_p]
        self._endpt = lib.pjsua_get_pjsip_endpt()
        self._pool = lib.pjsua_pool_create(b"openclaw-gate", 1024, 1024)
        self._name = name
        self._callback = _RX_REQUEST(self._on_rx_request)
        self._module = _PjsipModule()
        self._module.name = _PjStr(self._name, len(self._name))
        self._module.id = -1
        self._module.priority = priority
        self._module.on_rx_request = self._callback
        self._msg_info_offset: int | None = None
        #: where rdata->pkt_info.src_addr starts, counted back from msg_info
        self._src_back: int | None = None
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

    def _source(self, rdata: int) -> str:
        """The request's source IP, read from rdata->pkt_info (src_addr .. src_port sit just before msg_info).

        pkt_info ends ``pj_sockaddr src_addr; int src_addr_len; char src_name[46]; int src_port;``
        and msg_info is pointer-aligned after it, so src_addr starts 84 or 88 bytes before
        msg_info; the right one is found once by checking the fields agree with each other.
        """
        if self._msg_info_offset is None:
            return ""
        end = rdata + self._msg_info_offset
        for back in ((self._src_back,) if self._src_back is not None else (84, 88)):
            assert back is not None
            start = end - back
            family = ctypes.c_uint16.from_address(start).value
            addr_len = ctypes.c_int.from_address(start + 28).value
            name = ctypes.string_at(start + 32, 46).split(b"\0", 1)[0].decode("ascii", "replace")
            port = ctypes.c_int.from_address(start + 80).value
            sin_port = int.from_bytes(ctypes.string_at(start + 2, 2), "big")
            if family in (2, 10) and addr_len in (16, 28) and port == sin_port and name:
                self._src_back = back
                return name
        return ""

    def _on_rx_request(self, rdata: int) -> int:
        try:
            info = self._lib.pjsip_rx_data_get_info(rdata)
            if not info:
                return 0
            head = ctypes.string_at(info, 40)
            if not head.startswith(b"Request msg "):
                return 0
            method = head[12:].split(b"/", 1)[0]
            if method == b"INVITE":
                decide = self._on_invite
            elif method == b"OPTIONS":
                decide = self._on_options
            elif self._on_other is not None:
                decide = self._on_other
            else:
                return 0
            raw = self._raw_message(rdata)
            if raw is None:
                return 0
            rejection = decide(raw, self._source(rdata))
            if rejection is None:
                return 0
            if isinstance(rejection, ReplaceBody):
                if self._replace_body(rdata, rejection):
                    return 0
                rejection = rejection.fallback
            if rejection.status == 0:
                return 1  # DROP: consumed, nothing sent
            return self._respond(rdata, rejection)
        except Exception:
            log.failure("admission gate failed; letting pjsua handle the request")
            return 0

    def _replace_body(self, rdata: int, replace: ReplaceBody) -> bool:
        """Swap rdata->msg_info.msg->body (and the Content-Type header's media type) for *replace*.

        pjsip_msg is ``type; line (32 bytes); hdr (a 64-byte list head); body*``, so body sits
        at 104; msg_info.ctype is its 13th pointer-sized field. Both are checked to hold the
        multipart type before anything is written; False (nothing changed) otherwise.
        """
        if self._msg_info_offset is None:
            return False
        ptr = ctypes.sizeof(ctypes.c_void_p)
        base = rdata + self._msg_info_offset
        msg = ctypes.c_void_p.from_address(base + 2 * ptr).value
        ctype = ctypes.c_void_p.from_address(base + 12 * ptr).value
        if not msg or not ctype:
            return False
        body = ctypes.c_void_p.from_address(msg + 104).value
        if not body or not _pjstr_is(body, b"multipart") or not _pjstr_is(ctype + 64, b"multipart"):
            return False
        pool = ctypes.c_void_p.from_address(rdata).value  # rdata->tp_info.pool
        t, st, text = replace.type.encode(), replace.subtype.encode(), replace.text.encode()
        lib = self._lib
        lib.pjsip_msg_body_create.restype = ctypes.c_void_p
        lib.pjsip_msg_body_create.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(_PjStr)] * 3
        lib.pj_pool_alloc.restype = ctypes.c_void_p
        lib.pj_pool_alloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        new = lib.pjsip_msg_body_create(pool, ctypes.byref(_PjStr(t, len(t))), ctypes.byref(_PjStr(st, len(st))),
                                        ctypes.byref(_PjStr(text, len(text))))
        if not new:
            return False
        # The header's media type must outlive this call: copy the strings into rdata's pool.
        media = lib.pj_pool_alloc(pool, len(t) + len(st))
        if not media:
            return False
        ctypes.memmove(media, t + st, len(t) + len(st))
        ctypes.c_void_p.from_address(msg + 104).value = new
        mtype, subtype = _PjStrAt.from_address(ctype + 64), _PjStrAt.from_address(ctype + 64 + ctypes.sizeof(_PjStrAt))
        mtype.ptr, mtype.slen = media, len(t)
        subtype.ptr, subtype.slen = media + len(t), len(st)
        return True

    def _respond(self, rdata: int, rejection: Rejection) -> int:
        head = _PjsipHdr()
        head.prev = head.next = ctypes.addressof(head)
        last = ctypes.addressof(head)
        scratch: list[int] = []  # a pool for headers that are not cached (a digest nonce)
        try:
            for name, value in rejection.headers:
                hdr = self._header(name, value, scratch)
                if not hdr:
                    continue
                node = _PjsipHdr.from_address(hdr)
                node.prev, node.next = last, ctypes.addressof(head)
                _PjsipHdr.from_address(last).next = hdr
                head.prev = hdr
                last = hdr
            reason = rejection.reason.encode()
            # pjsip clones the listed headers into the response, so the scratch pool may go after.
            status = self._lib.pjsip_endpt_respond_stateless(
                self._endpt, rdata, rejection.status, ctypes.byref(_PjStr(reason, len(reason))),
                ctypes.addressof(head), None)
        finally:
            for pool in scratch:
                self._lib.pj_pool_release(pool)
        return 1 if status == 0 else 0

    def _header(self, name: str, value: str, scratch: list[int]) -> int:
        """A pjsip header: allocated once per (name, value) from the gate's pool, up to 64 of them;
        others (WWW-Authenticate carries a new nonce each time) from a scratch pool released after."""
        key = (name, value)
        hdr = self._headers.get(key)
        if hdr is None:
            n, v = name.encode(), value.encode()
            cache = len(self._headers) < 64 and name.lower() != "www-authenticate"
            if cache:
                pool = self._pool
            else:
                if not scratch:
                    scratch.append(self._lib.pjsua_pool_create(b"openclaw-gate-tmp", 512, 512))
                pool = scratch[0]
            hdr = self._lib.pjsip_generic_string_hdr_create(
                pool, ctypes.byref(_PjStr(n, len(n))), ctypes.byref(_PjStr(v, len(v)))) or 0
            if cache:
                self._headers[key] = hdr
        return hdr


def _pjstr_is(address: int, text: bytes) -> bool:
    """Whether the pj_str_t at *address* holds *text* (case-insensitive)."""
    s = _PjStrAt.from_address(address)
    if not s.ptr or s.slen != len(text):
        return False
    return ctypes.string_at(s.ptr, s.slen).lower() == text

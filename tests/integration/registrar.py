"""A minimal SIP registrar on loopback that demands digest authentication (RFC 3261 §22,
RFC 2617), for testing trunk registration. Runs in a thread; records every REGISTER."""
from __future__ import annotations

import hashlib
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass

from sip.message import parse_request


@dataclass
class Registration:
    at: float
    authorized: bool
    expires: int
    contact: str


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


class FakeRegistrar:
    def __init__(self, username: str, password: str, realm: str = "openclaw-test", grant_expires_s: int = 6) -> None:
        self.username, self.password, self.realm = username, password, realm
        self.grant_expires_s = grant_expires_s
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.registrations: list[Registration] = []
        self._nonces: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def authorized(self) -> list[Registration]:
        return [r for r in self.registrations if r.authorized]

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            try:
                req = parse_request(data.decode("utf-8", "replace"))
            except ValueError:
                continue
            if req.method != "REGISTER":
                self._reply(req, addr, "405 Method Not Allowed")
                continue
            self._register(req, addr)

    def _register(self, req, addr) -> None:  # type: ignore[no-untyped-def]
        auth = req.header("authorization")
        contact = req.header("contact") or ""
        m = re.search(r";\s*expires=(\d+)", contact)
        wanted = int(m.group(1)) if m else int(req.header("expires") or 3600)
        if auth is None:
            nonce = secrets.token_hex(8)
            self._nonces.add(nonce)
            self.registrations.append(Registration(time.monotonic(), False, wanted, contact))
            self._reply(req, addr, "401 Unauthorized",
                        [f'WWW-Authenticate: Digest realm="{self.realm}", nonce="{nonce}", algorithm=MD5, qop="auth"'])
            return
        params = dict(re.findall(r'(\w+)="?([^",]*)"?', auth))
        ha1 = _md5(f"{self.username}:{self.realm}:{self.password}")
        ha2 = _md5(f"REGISTER:{params.get('uri', '')}")
        if params.get("qop"):
            expected = _md5(f"{ha1}:{params.get('nonce')}:{params.get('nc')}:{params.get('cnonce')}:{params['qop']}:{ha2}")
        else:
            expected = _md5(f"{ha1}:{params.get('nonce')}:{ha2}")
        ok = (params.get("username") == self.username and params.get("nonce") in self._nonces
              and params.get("response") == expected)
        self.registrations.append(Registration(time.monotonic(), ok, wanted, contact))
        if not ok:
            self._reply(req, addr, "403 Forbidden")
            return
        granted = min(wanted, self.grant_expires_s) if wanted else 0
        bare = contact.split(";expires=")[0]
        self._reply(req, addr, "200 OK", [f"Contact: {bare};expires={granted}", f"Expires: {granted}"])

    def _reply(self, req, addr, status: str, extra: list[str] | None = None) -> None:  # type: ignore[no-untyped-def]
        lines = [f"SIP/2.0 {status}"]
        for name, value in req.headers:
            if name == "via":
                lines.append(f"Via: {value};received={addr[0]}" if "received=" not in value else f"Via: {value}")
        to = req.header("to") or ""
        if ";tag=" not in to:
            to += ";tag=reg" + secrets.token_hex(4)
        lines += [f"From: {req.header('from')}", f"To: {to}", f"Call-ID: {req.call_id}",
                  f"CSeq: {req.header('cseq')}", *(extra or []), "Content-Length: 0", "", ""]
        self.sock.sendto("\r\n".join(lines).encode(), addr)

"""TLS for the agent's HTTP client: which certificates a server must show, and which one the agent shows.

:class:`TlsSettings` is the parsed ``http:`` config section; :func:`tls_policy` turns it into the
``IPolicyForHTTPS`` that ``twisted.web.client.Agent`` asks for each ``https://`` connection.
Certificates are always verified (the system's trust store, or the configured CA bundle instead),
and so is the host name (``service_identity``). :func:`tls_failure_reason` names why a handshake
was refused in the words of call records and logs (``tls: certificate verify failed ...``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from twisted.internet import ssl
from twisted.web.client import BrowserLikePolicyForHTTPS
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

__all__ = ["TlsSettings", "load_ca_bundle", "tls_failure_reason", "tls_policy"]


@dataclass(frozen=True)
class TlsSettings:
    """Where the trust roots and the client certificate are (paths; empty: not used)."""

    #: PEM file of the CAs a server's certificate must chain to ("" : the system's trust store)
    ca_bundle: str = ""
    #: PEM certificate (and chain) the agent presents when a server asks for one
    client_cert: str = ""
    #: PEM private key of client_cert ("" : the key is in the client_cert file)
    client_key: str = ""


def load_ca_bundle(path: str) -> list[ssl.Certificate]:
    """Every certificate of a PEM bundle; ValueError when the file holds none."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not a PEM certificate bundle ({exc})") from None
    return [ssl.Certificate.loadPEM(c.public_bytes(serialization.Encoding.PEM)) for c in certs]


def _client_certificate(settings: TlsSettings) -> ssl.PrivateCertificate | None:
    if not settings.client_cert:
        return None
    with open(settings.client_cert, "rb") as handle:
        cert_pem = handle.read()
    key_pem = cert_pem
    if settings.client_key:
        with open(settings.client_key, "rb") as handle:
            key_pem = handle.read()
    return ssl.PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem)


@implementer(IPolicyForHTTPS)
class _ConfiguredPolicy:
    """Client TLS options per host with the configured trust roots and client certificate."""

    def __init__(self, settings: TlsSettings) -> None:
        self._trust = (ssl.trustRootFromCertificates(load_ca_bundle(settings.ca_bundle))
                       if settings.ca_bundle else ssl.platformTrust())
        self._client = _client_certificate(settings)

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:  # noqa: N802 (Twisted API)
        return ssl.optionsForClientTLS(hostname.decode("ascii"), trustRoot=self._trust,
                                       clientCertificate=self._client)


@lru_cache(maxsize=8)
def tls_policy(settings: TlsSettings | None) -> IPolicyForHTTPS:
    """The policy for *settings* (None or defaults: Twisted's browser-like policy, platform trust);
    made once per settings (the files are read when the first request needs them)."""
    if settings is None or settings == TlsSettings():
        return BrowserLikePolicyForHTTPS()
    return _ConfiguredPolicy(settings)


def _tls_errors(exc: BaseException) -> list[str]:
    """The OpenSSL error strings inside *exc* (``certificate verify failed``, ...)."""
    entries = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
    return [str(e[2]) for e in entries if isinstance(e, tuple) and len(e) == 3 and e[2]]


def tls_failure_reason(exc: BaseException) -> str | None:
    """``tls: ...`` when *exc* (or a failure wrapped in it) is a refused TLS handshake, else None."""
    reasons = getattr(exc, "reasons", None)
    if reasons:  # ResponseNeverReceived / ResponseFailed wrap the connection's failures
        for failure in reasons:
            found = tls_failure_reason(getattr(failure, "value", failure))
            if found is not None:
                return found
        return None
    module = type(exc).__module__
    if module.startswith("service_identity"):
        names = []
        for error in getattr(exc, "errors", ()):
            wanted = getattr(error, "mismatched_id", None)
            name = getattr(wanted, "ip", None) or getattr(wanted, "hostname", None)
            if isinstance(name, bytes):
                name = name.decode("ascii", "replace")
            if name is not None:
                names.append(str(name))
        if names:
            return f"tls: host name mismatch: the server's certificate is not valid for {', '.join(names)}"
        return f"tls: host name mismatch: {exc}"
    if module.startswith("OpenSSL"):
        errors = _tls_errors(exc)
        text = "; ".join(errors) or str(exc) or type(exc).__name__
        if "certificate verify failed" in text:
            text += " (the server's certificate does not chain to a trusted CA: see http.ca_bundle)"
        return f"tls: {text}"[:300]
    return None

"""Test certificates made on the spot: a CA, a server certificate for 127.0.0.1, a client one."""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca_file: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    #: a second CA (and a client certificate it signed) the server does not trust
    rogue_client_cert: str
    rogue_client_key: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None,
           key_path: str = "") -> None:
    with open(path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        with open(key_path, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption()))


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, cn: str,
          usage: x509.ObjectIdentifier) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def make_pki(directory: str) -> Pki:
    """Write a CA, a server and a client certificate (and an untrusted client one) under *directory*."""
    os.makedirs(directory, exist_ok=True)
    p = lambda name: os.path.join(directory, name)  # noqa: E731
    ca, ca_key = _ca("OpenClaw test CA")
    _write(p("ca.pem"), ca)
    server, server_key = _leaf(ca, ca_key, "127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH)
    _write(p("server.pem"), server, server_key, p("server.key"))
    client, client_key = _leaf(ca, ca_key, "trunk.test", ExtendedKeyUsageOID.CLIENT_AUTH)
    _write(p("client.pem"), client, client_key, p("client.key"))
    rogue_ca, rogue_ca_key = _ca("Someone else's CA")
    rogue, rogue_key = _leaf(rogue_ca, rogue_ca_key, "rogue.test", ExtendedKeyUsageOID.CLIENT_AUTH)
    _write(p("rogue.pem"), rogue, rogue_key, p("rogue.key"))
    return Pki(p("ca.pem"), p("server.pem"), p("server.key"), p("client.pem"), p("client.key"),
                   p("rogue.pem"), p("rogue.key"))

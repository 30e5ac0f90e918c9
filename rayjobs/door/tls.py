"""The door's TLS certificate: self-signed, made on the head at its first start, kept.

``<door dir>/tls/cert.pem`` and ``key.pem`` (0600). Made once (an EC P-256 key, valid 10 years,
the door's address as its subject alternative name) and reused at every start, so the fingerprint
teammates pinned stays true across restarts; a teammate's client pins its
:func:`rayjobs.contract.pin.fingerprint` instead of trusting a CA. The ``cryptography`` library
makes it (the standard library cannot make a certificate).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path
from typing import NamedTuple

from rayjobs.contract.files import write_atomic
from rayjobs.contract.pin import fingerprint

VALID_DAYS = 3650


class DoorCert(NamedTuple):
    cert: Path
    key: Path
    fingerprint: str  #: ``sha256:<hex>`` of the certificate's DER bytes


def _make(host: str) -> tuple[bytes, bytes]:
    """A new self-signed certificate for ``host`` (an IP or a name) and its key, as PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"rayjobs door {host}"[:64])])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def der_of(cert_pem: bytes) -> bytes:
    """The DER bytes of a PEM certificate."""
    import ssl

    return ssl.PEM_cert_to_DER_cert(cert_pem.decode())


def ensure(root: Path, host: str) -> DoorCert:
    """The door's certificate under ``root/tls`` -- made now if there is none (the key written
    first, 0600, then the certificate: a start cut off in between makes a new pair next time)."""
    d = Path(root) / "tls"
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    cert, key = d / "cert.pem", d / "key.pem"
    if not (cert.is_file() and key.is_file()):
        cert_pem, key_pem = _make(host)
        write_atomic(key, key_pem, mode=0o600)
        write_atomic(cert, cert_pem, mode=0o644)
    return DoorCert(cert, key, fingerprint(der_of(cert.read_bytes())))

"""The door's certificate fingerprint, spelled once: the head prints it, the laptop pins it.

A fingerprint is ``sha256:<64 lowercase hex>`` of the certificate's DER bytes (what ``openssl x509
-fingerprint -sha256`` shows, without its colons). The head makes a self-signed certificate at its
first start (:mod:`rayjobs.door.tls`); a teammate's client refuses any certificate whose
fingerprint is not the one it was handed -- like a kubeconfig's CA data, no CA involved.
"""

from __future__ import annotations

import hashlib
import hmac
import re

PREFIX = "sha256:"
_HEX = re.compile(r"^[0-9a-f]{64}$")


def fingerprint(der: bytes) -> str:
    """``sha256:<hex>`` of a certificate's DER bytes."""
    return PREFIX + hashlib.sha256(der).hexdigest()


def normalise(text: str) -> str:
    """A fingerprint as given by hand (``sha256:AB:CD:...``, upper case, colons, or bare hex) in
    its one form, ``sha256:<64 lowercase hex>``.

    Raises:
        ValueError: one line -- not a sha256 fingerprint.
    """
    raw = str(text or "").strip()
    body = raw[len(PREFIX):] if raw.lower().startswith(PREFIX) else raw
    body = body.replace(":", "").lower()
    if not _HEX.match(body):
        raise ValueError(f"{raw!r} is no certificate fingerprint: expected sha256:<64 hex digits> "
                         f"(as `rayjobs users add` prints it)")
    return PREFIX + body


def matches(der: bytes, expected: str) -> bool:
    """Is ``der`` the certificate ``expected`` names (compared in constant time)?"""
    try:
        want = normalise(expected)
    except ValueError:
        return False
    return hmac.compare_digest(fingerprint(der), want)


def hex_digits(expected: str) -> str:
    """The 64 hex digits of a fingerprint (urllib3's ``assert_fingerprint`` takes them bare).

    Raises:
        ValueError: not a sha256 fingerprint (one line).
    """
    return normalise(expected)[len(PREFIX):]

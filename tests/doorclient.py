"""A small client of the door that pins its certificate (what a teammate's machine runs), for the
tests: a ``requests`` session whose HTTPS connections accept exactly the certificate whose
fingerprint it was handed (urllib3's ``assert_fingerprint``; no CA, no host name check), and a
command line to run it inside a teammate's network namespace::

    python3 tests/doorclient.py call URL FINGERPRINT TOKEN METHOD PATH [JSON_BODY | @ZIP_FILE]
    python3 tests/doorclient.py probe HOST PORT      # "open" or "closed": can a TCP connection be made

Each call prints one JSON object: ``{"status", "headers" (lower case), "text"}`` or ``{"error": "..."}`` (a
certificate that is not the pinned one, a connection refused). The laptop's own client of the door
(``client/door.py``) is built the same way.
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any, Optional


def pinned_session(fingerprint: str, token: Optional[str] = None) -> Any:
    """A ``requests.Session`` for the door: HTTPS only to the certificate ``fingerprint`` names."""
    import requests
    from requests.adapters import HTTPAdapter

    from rayjobs.contract.pin import hex_digits

    digits = hex_digits(fingerprint)

    class Pinned(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            kwargs["assert_fingerprint"] = digits  # checked on every new connection, before a byte is sent
            super().init_poolmanager(*args, **kwargs)

    s = requests.Session()
    s.trust_env = False
    s.verify = False  # no CA for a self-signed certificate: the pin above is the check
    s.mount("https://", Pinned())
    if token:
        s.headers["Authorization"] = f"Bearer {token}"
    return s


def call(url: str, fingerprint: str, token: str, method: str, path: str, body: Optional[str] = None) -> dict[str, Any]:
    import requests

    s = pinned_session(fingerprint, token or None)
    kw: dict[str, Any] = {}
    if body and body.startswith("@"):
        with open(body[1:], "rb") as f:
            kw = {"data": f.read(), "headers": {"Content-Type": "application/zip"}}
    elif body:
        kw = {"json": json.loads(body)}
    try:
        r = s.request(method, url.rstrip("/") + path, timeout=(5, 60), **kw)
    except requests.RequestException as e:
        return {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    return {"status": r.status_code, "headers": {k.lower(): v for k, v in r.headers.items()}, "text": r.text}


def probe(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=3):
            return "open"
    except OSError:
        return "closed"


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["probe"]:
        print(json.dumps({"probe": probe(args[1], int(args[2]))}))
    else:
        print(json.dumps(call(*args[1:7])))

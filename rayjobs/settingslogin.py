"""The laptop's login to a team's door: URL, the user's token, the door certificate's fingerprint.

Kept by ``rayjobs login`` in ``$RAYJOBS_HOME/login.json`` (mode 0600: it holds a token), removed by
``rayjobs logout``. ``RAYJOBS_URL`` + ``RAYJOBS_TOKEN`` (+ ``RAYJOBS_FINGERPRINT``) in the environment
act as a login without a file (CI, scripts) and win over it. Where the login sits in the address
precedence: :func:`rayjobs.settings.resolve_target`.

Standard library only (the settings read it; the client imports the settings, never the reverse).
A token is never printed, logged or put in an error message from here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional

from rayjobs.contract.files import write_atomic

LOGIN_FILE = "login.json"
URL_ENV, TOKEN_ENV, FINGERPRINT_ENV = "RAYJOBS_URL", "RAYJOBS_TOKEN", "RAYJOBS_FINGERPRINT"


@dataclass(frozen=True)
class Login:
    """Where the door is and who the laptop is there (``user``/``role``: what whoami said at login)."""

    url: str
    token: str
    fingerprint: Optional[str] = None
    user: str = ""
    role: str = ""
    #: the cluster's storage root as its head says (the queue's store's root): a submit's default
    storage: str = ""

    def __repr__(self) -> str:  # never the token, even in a traceback's locals
        return f"Login(url={self.url!r}, user={self.user!r}, role={self.role!r}, fingerprint={self.fingerprint!r})"


def path(home: Path) -> Path:
    """``$RAYJOBS_HOME/login.json``."""
    return Path(home) / LOGIN_FILE


def from_env(env: Mapping[str, str]) -> Optional[Login]:
    """The login ``RAYJOBS_URL`` + ``RAYJOBS_TOKEN`` (+ ``RAYJOBS_FINGERPRINT``) make, or None."""
    url, token = (env.get(URL_ENV) or "").strip(), (env.get(TOKEN_ENV) or "").strip()
    if not (url and token):
        return None
    return Login(url.rstrip("/"), token, (env.get(FINGERPRINT_ENV) or "").strip() or None)


def load(home: Path, env: Mapping[str, str]) -> Optional[Login]:
    """The environment's login, else the kept one, else None (an unreadable file counts as none)."""
    got = from_env(env)
    if got is not None:
        return got
    try:
        doc = json.loads(path(home).read_text())
        return Login(str(doc["url"]), str(doc["token"]), doc.get("fingerprint") or None,
                     str(doc.get("user") or ""), str(doc.get("role") or ""), str(doc.get("storage") or ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(home: Path, login: Login) -> Path:
    """Keep ``login`` (atomically, mode 0600 from its first byte); the file's path."""
    Path(home).mkdir(parents=True, exist_ok=True)
    p = path(home)
    write_atomic(p, (json.dumps(asdict(login), indent=2) + "\n").encode(), mode=0o600)
    os.chmod(p, 0o600)  # an older file replaced keeps the new mode, whatever the umask
    return p


def forget(home: Path) -> bool:
    """Remove the kept login; True if there was one."""
    try:
        path(home).unlink()
        return True
    except FileNotFoundError:
        return False

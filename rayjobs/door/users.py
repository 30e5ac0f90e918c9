"""The door's users: a name, a role and tokens, kept durably beside the queue's store.

Layout: ``<door dir>/users/<name>.json``, one file per user, written whole with the contract's
atomic write (tmp, fsync, rename), so a head killed mid-write keeps the previous version; loaded
at start, so users survive a restart of the head.

A token is ``rj_<tokid>_<secret>`` (``tokid`` 8 hex digits, ``secret`` 32 random bytes, urlsafe).
The head keeps only ``sha256(secret)``: a token is 256 random bits, so a fast hash is right (a slow
KDF guards low-entropy passwords; GitHub's tokens and Slurm's JWT keys are kept the same way) and
a stolen users dir gives no token. A token is shown once, when made; it is looked up by its
``tokid`` and compared with :func:`hmac.compare_digest`. Revoking a user refuses every token of
it from the next request; a revoked name may be added again (a new record, new token).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from rayjobs.contract.files import is_temp, write_json
from rayjobs.contract.wire import ROLES

NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
TOKEN_RE = re.compile(r"^rj_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
#: A token's last use is written to disk at most this often (a read per request must not fsync).
LAST_USED_EVERY_S = 60.0


class UserError(Exception):
    """A refused change to the users: ``status`` is its HTTP status, the message one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Token:
    id: str
    sha256: str  #: of the secret part; the token itself is never kept
    created_at: float
    last_used_at: Optional[float] = None


@dataclass(frozen=True)
class User:
    name: str
    role: str
    created_at: float
    revoked_at: Optional[float] = None
    tokens: tuple[Token, ...] = field(default_factory=tuple)

    @property
    def last_used_at(self) -> Optional[float]:
        used = [t.last_used_at for t in self.tokens if t.last_used_at]
        return max(used) if used else None

    def to_json(self) -> dict:
        return {"name": self.name, "role": self.role, "created_at": self.created_at, "revoked_at": self.revoked_at,
                "tokens": [asdict(t) for t in self.tokens]}

    @classmethod
    def from_json(cls, doc: dict) -> "User":
        """Raises ValueError/TypeError/KeyError: not a user record."""
        if not NAME_RE.match(str(doc["name"])) or doc["role"] not in ROLES:
            raise ValueError("not a user record")
        toks = tuple(Token(str(t["id"]), str(t["sha256"]), float(t["created_at"]),
                           float(t["last_used_at"]) if t.get("last_used_at") else None) for t in doc.get("tokens") or ())
        revoked = doc.get("revoked_at")
        return cls(str(doc["name"]), str(doc["role"]), float(doc["created_at"]),
                   float(revoked) if revoked else None, toks)

    def view(self) -> dict:
        """Its :class:`rayjobs.contract.wire.UserView` (token ids only)."""
        return {"name": self.name, "role": self.role, "created_at": self.created_at, "revoked_at": self.revoked_at,
                "tokens": [t.id for t in self.tokens], "last_used_at": self.last_used_at}


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_name(name: str) -> None:
    """Raises UserError (422): not a user name."""
    if not NAME_RE.match(name or ""):
        raise UserError(422, f"user name {name!r}: 1-32 of a-z 0-9 _ . -, starting with a letter")


class UserBook:
    """The users of one door, in memory and under ``root/users``. Thread-safe: the door reads it on
    its event loop and writes it from its I/O pool."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.time) -> None:
        self.dir = Path(root) / "users"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self._lock = threading.Lock()
        self._users: dict[str, User] = {}
        self._by_token: dict[str, str] = {}  #: token id -> user name
        self._saved_use: dict[str, float] = {}  #: token id -> the last use written to disk
        self.unreadable: list[str] = []
        self.load()

    # ------------------------------------------------------------------ disk
    def load(self) -> None:
        """(Re)read every user file; an unreadable one is named in :attr:`unreadable` and left out."""
        users, bad = {}, []
        for p in sorted(self.dir.glob("*.json")):
            if is_temp(p.name):
                continue
            try:
                u = User.from_json(json.loads(p.read_text()))
            except (OSError, ValueError, TypeError, KeyError):
                bad.append(p.name)
                continue
            users[u.name] = u
        with self._lock:
            self._users = users
            self._by_token = {t.id: u.name for u in users.values() for t in u.tokens}
            self._saved_use = {t.id: t.last_used_at or 0.0 for u in users.values() for t in u.tokens}
            self.unreadable = bad

    def _save(self, u: User) -> None:
        write_json(self.dir / f"{u.name}.json", u.to_json(), mode=0o600)

    # ------------------------------------------------------------------ changes
    def add(self, name: str, role: str = "member") -> tuple[User, str]:
        """A new user (or a revoked name again) and its token, shown only now.

        Raises:
            UserError: a bad name or role (422); the name is a user already (409).
        """
        check_name(name)
        if role not in ROLES:
            raise UserError(422, f"role {role!r}: one of {', '.join(ROLES)}")
        tokid, secret = secrets.token_hex(4), secrets.token_urlsafe(32)
        now = self.clock()
        u = User(name, role, now, None, (Token(tokid, _digest(secret), now),))
        with self._lock:
            old = self._users.get(name)
            if old is not None and old.revoked_at is None:
                raise UserError(409, f"{name} is a user already ({old.role}): `rayjobs users revoke {name}` first "
                                     f"to give it a new token")
            self._save(u)
            for t in old.tokens if old else ():
                self._by_token.pop(t.id, None)
            self._users[name] = u
            self._by_token[tokid] = name
            self._saved_use[tokid] = 0.0
        return u, f"rj_{tokid}_{secret}"

    def revoke(self, name: str) -> User:
        """Every token of ``name`` is refused from the next request (revoking twice changes nothing).

        Raises:
            UserError: no such user (404).
        """
        with self._lock:
            u = self._users.get(name)
            if u is None:
                raise UserError(404, f"no user {name!r}; `rayjobs users list` shows them")
            if u.revoked_at is None:
                u = replace(u, revoked_at=self.clock())
                self._save(u)
                self._users[name] = u
            return u

    # ------------------------------------------------------------------ reading
    def users(self) -> list[User]:
        with self._lock:
            return sorted(self._users.values(), key=lambda u: u.name)

    def get(self, name: str) -> Optional[User]:
        return self._users.get(name)

    def verify(self, token: str) -> tuple[Optional[User], Optional[str], str]:
        """Whose token this is: ``(user, token id, "")``, or ``(None, None, why)`` -- unknown,
        malformed or revoked (``why`` one line, never the token)."""
        m = TOKEN_RE.match(token or "")
        if not m:
            return None, None, "not a rayjobs token"
        tokid, secret = m.group(1), m.group(2)
        u = self._users.get(self._by_token.get(tokid, ""))
        tok = next((t for t in (u.tokens if u else ()) if t.id == tokid), None)
        # compared in constant time even when the id is unknown (no timing tells ids apart)
        ok = hmac.compare_digest(_digest(secret), tok.sha256 if tok else "0" * 64) and tok is not None
        if not ok or u is None:
            return None, None, "unknown token"
        if u.revoked_at is not None:
            return None, None, f"{u.name}'s tokens were revoked"
        return u, tokid, ""

    def used(self, name: str, tokid: str) -> bool:
        """Note a token's use now (in memory); True when it is due to be written (:meth:`save_use`)."""
        now = self.clock()
        with self._lock:
            u = self._users.get(name)
            if u is None:
                return False
            self._users[name] = replace(u, tokens=tuple(replace(t, last_used_at=now) if t.id == tokid else t
                                                         for t in u.tokens))
            return now - self._saved_use.get(tokid, 0.0) >= LAST_USED_EVERY_S

    def save_use(self, name: str, tokid: str) -> None:
        """(in the I/O pool) Write a user's last use."""
        with self._lock:
            u = self._users.get(name)
            if u is None:
                return
            self._saved_use[tokid] = self.clock()
            self._save(u)

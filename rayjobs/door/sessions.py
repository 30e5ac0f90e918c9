"""The page's login sessions: a user's token, given once to the login form, becomes a session id in
an HttpOnly, SameSite=Strict cookie; each session has its own CSRF token for the page's forms.

Kept in the door process's memory only (a restart of the head's queue logs everyone out: they log
in again with their token), bounded (:data:`MAX_SESSIONS`, the oldest dropped) and expiring
(:data:`TTL_S`). A session stands for the identity that logged in; the door checks on every request
that this user and the token it logged in with are still valid (a revoke ends its sessions at
once) and takes the user's role as it is now. Pure (a clock is given), no I/O.

``rayjobs ui`` logs a browser in without the token: the CLI asks the door (with the token) for a
one-time login code (:class:`OnceCodes`: random, valid :data:`ONCE_TTL_S`, used once, kept only as
its SHA-256 in memory) and opens ``/login/once?code=...``, which trades it for a session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional

#: The cookie's name; its value is the session id (32 random bytes, URL-safe).
COOKIE = "rayjobs_session"
#: How long a session lasts from its login.
TTL_S = 12 * 3600.0
MAX_SESSIONS = 10_000
#: How long a one-time login code is good for (the CLI opens the browser at once).
ONCE_TTL_S = 60.0
#: The most codes waiting to be used (the oldest dropped): each is made by an authenticated caller.
MAX_CODES = 1000


@dataclass(frozen=True)
class Session:
    name: str
    role: str
    token_id: Optional[str]  #: the user token it logged in with (None: the cluster's own token)
    csrf: str  #: what the page's forms carry back
    expires: float


class SessionBook:
    """Login sessions by id, in memory."""

    def __init__(self, clock: Callable[[], float] = time.time, ttl_s: float = TTL_S,
                 max_sessions: int = MAX_SESSIONS) -> None:
        self.clock, self.ttl_s, self.max = clock, ttl_s, max_sessions
        self.cookie = COOKIE
        self._by_id: "OrderedDict[str, Session]" = OrderedDict()
        self._lock = threading.Lock()

    def open(self, name: str, role: str, token_id: Optional[str]) -> tuple[str, Session]:
        """A new session for this identity: (its id, the session)."""
        sid = secrets.token_urlsafe(32)
        s = Session(name, role, token_id, secrets.token_urlsafe(24), self.clock() + self.ttl_s)
        with self._lock:
            self._by_id[sid] = s
            while len(self._by_id) > self.max:
                self._by_id.popitem(last=False)
        return sid, s

    def get(self, sid: Optional[str]) -> Optional[Session]:
        """The live session of id ``sid`` (None: none, unknown or expired; an expired one is dropped)."""
        if not sid:
            return None
        with self._lock:
            s = self._by_id.get(sid)
            if s is not None and s.expires <= self.clock():
                del self._by_id[sid]
                return None
        return s

    def close(self, sid: Optional[str]) -> bool:
        """Log out: the session is gone (True if there was one)."""
        with self._lock:
            return self._by_id.pop(sid or "", None) is not None

    def close_user(self, name: str) -> int:
        """End every session of ``name`` (how many)."""
        with self._lock:
            gone = [i for i, s in self._by_id.items() if s.name == name]
            for i in gone:
                del self._by_id[i]
        return len(gone)

    def __len__(self) -> int:
        return len(self._by_id)


@dataclass(frozen=True)
class OnceCode:
    """What a one-time login code stands for: the identity that asked for it, until ``expires``."""

    name: str
    role: str
    token_id: Optional[str]
    expires: float


class OnceCodes:
    """One-time login codes by their SHA-256 (the code itself is never kept), in memory, bounded."""

    def __init__(self, clock: Callable[[], float] = time.time, ttl_s: float = ONCE_TTL_S,
                 max_codes: int = MAX_CODES) -> None:
        self.clock, self.ttl_s, self.max = clock, ttl_s, max_codes
        self._by_hash: "OrderedDict[str, OnceCode]" = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def digest(code: str) -> str:
        return hashlib.sha256(code.encode()).hexdigest()

    def issue(self, name: str, role: str, token_id: Optional[str]) -> tuple[str, OnceCode]:
        """A new code for this identity: (the code, shown once; what it stands for)."""
        code = secrets.token_urlsafe(32)
        entry = OnceCode(name, role, token_id, self.clock() + self.ttl_s)
        with self._lock:
            now = self.clock()
            for h in [h for h, e in self._by_hash.items() if e.expires <= now]:
                del self._by_hash[h]
            self._by_hash[self.digest(code)] = entry
            while len(self._by_hash) > self.max:
                self._by_hash.popitem(last=False)
        return code, entry

    def redeem(self, code: Optional[str]) -> tuple[Optional[OnceCode], str]:
        """Use ``code`` up: (what it stands for, "") or (None, why: one line). A code works once:
        it is gone after the first try, whatever that try's outcome."""
        if not code:
            return None, "the link has no code: run `rayjobs ui` again for a new one"
        with self._lock:
            entry = self._by_hash.pop(self.digest(code), None)
        if entry is None:
            return None, "this login link was used already or is unknown: run `rayjobs ui` again for a new one"
        if entry.expires <= self.clock():
            return None, (f"this login link expired ({self.ttl_s:.0f} s after it was made): "
                          f"run `rayjobs ui` again for a new one")
        return entry, ""

    def __len__(self) -> int:
        return len(self._by_hash)


def csrf_ok(session: Optional[Session], given: Optional[str]) -> bool:
    """Does a form's ``csrf`` field match its session's (constant time)?"""
    if session is None or not given:
        return False
    return hmac.compare_digest(session.csrf.encode(), given.encode())

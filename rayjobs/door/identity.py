"""Who a request is: the FastAPI dependency every route of the door runs first.

* ``Authorization: Bearer <the cluster's token>`` (``RAY_AUTH_TOKEN``; the embedded head's) is the
  cluster's owner -- ``$RAYJOBS_OWNER`` on the head, else the head's OS user -- an admin, ``via
  "cluster"``: nothing changes for a single user.
* ``Bearer rj_<id>_<secret>``: that user (:class:`rayjobs.door.users.UserBook`), ``via "token"``.
* A head whose Ray runs without token auth (no cluster token): a plain request on loopback
  without a rayjobs token is the owner's, as before the door; over TLS (teammates) never.
* The page (every route outside ``/v1``) with no ``Authorization`` header: its login session's
  cookie (:mod:`rayjobs.door.sessions`), ``via "session"`` -- while the user and the token it logged
  in with are valid, with the user's role as it is now; none is no identity (the page shows its
  login), never a 401 here. The API under ``/v1`` never takes the cookie (a form elsewhere cannot
  reach it with the browser's session).
* Anything else is 401 -- no token, an unknown, malformed or revoked one (one answer for all: a
  caller learns nothing about which tokens exist) -- and counts as a failure of its address
  (:mod:`rayjobs.door.limits`): after a burst the address gets 429 for a while. 403 is kept for
  permissions (a known caller who may not).

Tokens are compared in constant time and never logged, kept in the audit or echoed.
"""

from __future__ import annotations

import hmac
from typing import Any, Optional

from fastapi import Request

from rayjobs.contract.wire import PREFIX, Identity
from rayjobs.door.permissions import ADMIN, Action, may
from rayjobs.oncluster.queuerequests import RequestError

_HOW = ("send a token as Authorization: Bearer ...: a user's (`rayjobs login`) or the cluster's "
        "(RAY_AUTH_TOKEN, `rayjobs connect`)")


def bearer(header: Optional[str]) -> Optional[str]:
    """The token of an ``Authorization: Bearer`` header (None: none given)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def resolve(rj: Any, header: Optional[str], *, local: bool) -> tuple[Optional[Identity], str]:
    """The identity of a request's ``Authorization`` header, or ``(None, why)`` (one line, no token)."""
    token = bearer(header)
    owner = Identity(rj.owner, ADMIN, "cluster", None)
    if token is not None and rj.token is not None and hmac.compare_digest(token.encode(), rj.token.encode()):
        return owner, ""
    if token is not None and token.startswith("rj_"):
        user, tokid, why = rj.users.verify(token)
        if user is None:
            return None, f"the door refused the token ({why}): ask an admin for a new one (`rayjobs users add`)"
        return Identity(user.name, user.role, "token", tokid), ""  # type: ignore[arg-type]
    if rj.token is None and local:  # a head without token auth: loopback is its owner, as before
        return owner, ""
    if token is None:
        return None, f"the door needs a token: {_HOW}"
    return None, f"the door refused the token: {_HOW}"


def client_addr(request: Request) -> str:
    return request.client.host if request.client else "?"


def from_session(request: Request) -> Optional[Identity]:
    """The identity of the page's session cookie (None: no live session; a revoked user's or a
    revoked token's session is closed). The session itself goes to ``request.state.session``."""
    book, rj = getattr(request.app.state, "sessions", None), request.app.state.rj
    sid = request.cookies.get(book.cookie) if book is not None else None
    s = book.get(sid) if book is not None else None
    if s is None:
        return None
    role = s.role
    if s.token_id is not None:  # a user's token: still that user's, unrevoked; its role as it is now
        u = rj.users.get(s.name)
        if u is None or u.revoked_at is not None or s.token_id not in {t.id for t in u.tokens}:
            book.close(sid)
            return None
        role = u.role
    request.state.session = s
    return Identity(s.name, role, "session", s.token_id)  # type: ignore[arg-type]


async def identify(request: Request) -> Optional[Identity]:
    """The request's identity (kept in ``request.state.identity`` for the routes and the audit);
    None only for a page route without a session (the page answers with its login).

    Raises:
        RequestError: 429 (the address is blocked), 401 (no identity).
    """
    rj = request.app.state.rj
    addr = client_addr(request)
    left = rj.limits.blocked(addr)
    if left is not None:
        request.state.audit_skip = True  # one audit line per block (when it starts), not per refusal
        raise RequestError(429, f"too many failed authentications from {addr}: refused for {left:.0f} s more")
    if not request.url.path.startswith(PREFIX + "/") and "authorization" not in request.headers:
        request.state.identity = from_session(request)
        return request.state.identity
    ident, why = resolve(rj, request.headers.get("authorization"), local=request.url.scheme == "http")
    if ident is None:
        blocked = rj.limits.failed(addr)
        if blocked:
            request.state.audit_note = f"{addr} blocked for {blocked:.0f} s after repeated failed authentications"
        raise RequestError(401, why)
    request.state.identity = ident
    if ident.via == "token" and ident.token_id and rj.users.used(ident.name, ident.token_id) and rj.io is not None:
        rj.io.submit(rj.users.save_use, ident.name, ident.token_id)
    return ident


def who(request: Request) -> Identity:
    """The identity :func:`identify` established for this request."""
    return request.state.identity


def need(request: Request, action: Action, refusal: str) -> Identity:
    """The request's identity, if its role may ``action``; else 403 with ``refusal``."""
    ident = who(request)
    if not may(ident.role, action):
        raise RequestError(403, refusal)
    return ident

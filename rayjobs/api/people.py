"""The door's people: ``login``/``whoami``/``logout`` on the laptop, ``users`` and ``audit`` on the head.

A login is checked before it is kept: the door must answer ``GET /v1/whoami`` with the token (and,
over https, with the pinned certificate). Users and the audit are asked of the current target's
door: a teammate's login, or the owner's cluster (its token is an admin's).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Optional

from rayjobs import settings, settingslogin
from rayjobs.contract import wire

if TYPE_CHECKING:
    from rayjobs.client.door import Door


def login(url: str, token: str, fingerprint: Optional[str] = None) -> settingslogin.Login:
    """Check ``token`` at the door ``url`` (``GET /v1/whoami``) and keep the login (0600).

    Raises:
        ConfigError: a bad URL/fingerprint, plain http off loopback, an empty token.
        PinRefused: the door's certificate is not the pinned one. ClusterUnreachable: the door
        refused the token (its one line) or does not answer. Nothing is kept on any error.
    """
    from rayjobs.client.door import Door
    from rayjobs.errors import ConfigError

    token = token.strip()
    if not token or len(token.split()) != 1:
        raise ConfigError("no token given: paste the token `rayjobs users add` printed (stdin, the prompt or "
                          "--token-file)")
    door = Door(url, token, fingerprint, timeout=30.0)
    me = door.whoami()
    store = door.health().store  # <storage root>/queue/<cluster>: jobs write under that root
    storage = str(PurePosixPath(store).parents[1]) if store.count("/") >= 3 else ""
    kept = settingslogin.Login(door.url, token, door.fingerprint, me.name, me.role, storage)
    settingslogin.save(settings.home(), kept)
    return kept


def check_login_url(url: str, *, fingerprint: Optional[str] = None) -> None:
    """Check a door's URL and fingerprint as :func:`login` would, before a token is asked for.

    Raises:
        ConfigError: not an http(s) URL, plain http off loopback, https without a fingerprint, a
            fingerprint that is not one (one line each).
    """
    from rayjobs.client.door import check_url

    check_url(url, fingerprint)


def login_path() -> Path:
    """Where a login is kept: ``$RAYJOBS_HOME/login.json`` (0600)."""
    return settingslogin.path(settings.home())


def logout() -> bool:
    """Forget the kept login; True if there was one (``RAYJOBS_URL``/``RAYJOBS_TOKEN`` stay as set)."""
    return settingslogin.forget(settings.home())


def door(address: Optional[str] = None) -> "Door":
    """The current target's door: a login's, or the owner's cluster's queue API (started if need be)."""
    from rayjobs.client.connection import connect
    from rayjobs.client.door import Door

    d = connect(address, address_from="--address", quiet=True, start=False)
    found = getattr(d, "door", None)
    return found if found is not None else Door.of_queue(d.queue)


def whoami(address: Optional[str] = None) -> dict[str, Any]:
    """Who the door takes this laptop for, and where it is: ``{name, role, via, url, source}``."""
    target = settings.resolve_target(address)
    me = door(address).whoami()
    return {**wire.to_json(me), "url": target.address or "the embedded local head", "source": target.source}


def add_user(name: str, role: str = "member", address: Optional[str] = None) -> wire.UserToken:
    """A new user and its token (shown this once); admins only."""
    return door(address).add_user(name, role)


def users(address: Optional[str] = None) -> list[wire.UserView]:
    return door(address).users()


def revoke(name: str, address: Optional[str] = None) -> wire.UserView:
    return door(address).revoke(name)


def audit(user: Optional[str] = None, since: Optional[str] = None, limit: int = 1000,
          address: Optional[str] = None) -> wire.AuditList:
    """The door's audit (admins: everyone's; others: their own), ``since`` a duration (``7d``)."""
    from rayjobs.api.usage import since_ts

    return door(address).audit(user=user, since=since_ts(since), limit=limit)


def env_login() -> bool:
    """Is the login the environment's (``RAYJOBS_URL`` + ``RAYJOBS_TOKEN``)?"""
    return settingslogin.from_env(os.environ) is not None

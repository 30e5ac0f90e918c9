"""The laptop's one client of a team's door: its URL, a user's token, the certificate's pinned fingerprint.

The door (:mod:`rayjobs.door.app` on the head) is the queue's API plus the routes a teammate needs
instead of Ray's dashboard (who am I, users, audit, a job's log whole or followed, its metrics, the
cluster). :class:`Door` is the queue's client (:class:`~rayjobs.client.queueapi.QueueAPI`) with those
routes and two guards before a byte is sent:

* ``https://``: the certificate must be the one whose fingerprint the user was handed (urllib3's
  ``assert_fingerprint`` on every new connection; no CA, no host name: a self-signed certificate made
  on the head); any other is refused in one line, exit 2;
* ``http://``: loopback only (the owner's tunnel, a test); a token never crosses a network in clear.

Every request is bounded in time (connect 5 s, read ``timeout``; a followed log's stream ends on the
server after at most 10 minutes and the reader resumes from its byte offset, a bounded number of times).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

from rayjobs.client.queueapi import QueueAPI, QueueDown, _error
from rayjobs.contract import pin, wire
from rayjobs.errors import ConfigError, RayjobsError, short_reason


class PinRefused(RayjobsError):
    """The door showed a certificate other than the pinned one (nothing was sent)."""


class Refused(RayjobsError):
    """The door refused the request (401: no or a revoked token; 403: not this user's to do; 429: blocked).
    Not a :class:`~rayjobs.errors.ClusterUnreachable`: a read must not fall back to the local record
    and exit 0 -- the server's one line, exit 2."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, fingerprint: Optional[str]) -> tuple[str, Optional[str]]:
    """A door URL and fingerprint as the client uses them: ``(url without a trailing /, sha256:<hex> | None)``.

    Raises:
        ConfigError: one line -- not an http(s) URL, plain http to a host that is not loopback,
            https without a fingerprint, a fingerprint that is not one.
    """
    raw = str(url or "").strip().rstrip("/")
    parts = urlsplit(raw)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(f"{raw!r} is no door URL: expected https://HOST:PORT (as `rayjobs users add` printed it)")
    fp = None
    if fingerprint:
        try:
            fp = pin.normalise(fingerprint)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if parts.scheme == "http" and not _loopback(host):
        raise ConfigError(f"plain http:// to {host} is refused: a door off this machine is reached over https with "
                          f"its pinned certificate; use the https:// URL `rayjobs users add` printed")
    if parts.scheme == "https" and not fp:
        raise ConfigError(f"the door at {raw} needs its certificate's fingerprint: add --fingerprint sha256:... "
                          f"(`rayjobs users add` prints it beside the URL)")
    return raw, fp


def _pinned_adapter(fingerprint: str) -> Any:
    """A ``requests`` adapter whose HTTPS connections accept exactly the certificate ``fingerprint`` names."""
    from requests.adapters import HTTPAdapter

    digits = pin.hex_digits(fingerprint)

    class Pinned(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            kwargs["assert_fingerprint"] = digits  # checked on each new connection, before a byte is sent
            super().init_poolmanager(*args, **kwargs)

    return Pinned()


class Door(QueueAPI):
    """The door at ``url`` with a user's (or the cluster's) ``token``, pinned to ``fingerprint``.

    Raises (constructor): ConfigError for a URL/fingerprint :func:`check_url` refuses.
    """

    def __init__(self, url: str, token: Optional[str], fingerprint: Optional[str] = None, *,
                 timeout: float = 30.0) -> None:
        url, fp = check_url(url, fingerprint)
        super().__init__(url, token, timeout=timeout)
        self.fingerprint = fp
        if fp:
            self._http.verify = False  # no CA for a self-signed certificate: the pin is the check
            self._http.mount("https://", _pinned_adapter(fp))

    #: set by :class:`~rayjobs.client.doorcluster.DoorCluster`: an unfiltered :meth:`views` asks for the Ray jobs
    #: the queue does not know in the same requests and keeps them in :attr:`foreign_seen` (one list read, not two)
    fold_foreign = False
    foreign_seen: Optional[list[wire.JobView]] = None

    def views(self, **filters: Any) -> list[wire.JobView]:
        if not self.fold_foreign or filters:
            return super().views(**filters)
        every = super().views(foreign="true")
        self.foreign_seen = [v for v in every if v.foreign]
        return [v for v in every if not v.foreign]

    @classmethod
    def of_queue(cls, q: QueueAPI) -> "Door":
        """The door's routes over an owner's queue client as found today (loopback, a tunnel, the
        cluster's own network; the cluster's token): its URL was not typed by a teammate, so not checked."""
        d = cls.__new__(cls)
        d.__dict__.update(q.__dict__)
        d.fingerprint = None
        return d

    def error_of(self, status: int, text: str) -> RayjobsError:
        e = _error(status, text)
        return Refused(str(e)) if status in (401, 403, 429) else e

    def tls_refused(self, e: BaseException) -> RayjobsError:
        if "ingerprint" in str(e):
            return PinRefused(f"the door at {self.url} showed a certificate that is not the pinned one "
                              f"({self.fingerprint}): refused, nothing sent; check the fingerprint with your admin "
                              f"(`rayjobs users add` prints it) and `rayjobs login` again")
        return QueueDown(f"the door at {self.url} failed the TLS handshake ({short_reason(e)})")

    # ------------------------------------------------------------------ who, users, audit
    def whoami(self) -> wire.Identity:
        return wire.from_json(wire.Identity, self.call("GET", "/whoami"))

    def users(self) -> list[wire.UserView]:
        return wire.from_json(wire.UserList, self.call("GET", "/users")).users

    def add_user(self, name: str, role: str = "member") -> wire.UserToken:
        body = wire.to_json(wire.UserAdd(name=name, role=role))  # type: ignore[arg-type]
        return wire.from_json(wire.UserToken, self.call("POST", "/users", body=body))

    def revoke(self, name: str) -> wire.UserView:
        return wire.from_json(wire.UserView, self.call("POST", f"/users/{name}/revoke"))

    def audit(self, user: Optional[str] = None, since: Optional[float] = None, limit: int = 1000) -> wire.AuditList:
        params = {k: v for k, v in (("user", user), ("since", since), ("limit", limit)) if v is not None}
        return wire.from_json(wire.AuditList, self.call("GET", "/audit", params=params))

    def page_link(self) -> wire.PageLink:
        """A one-time login link to the team's page for this token's user (``rayjobs ui``; a secret)."""
        return wire.from_json(wire.PageLink, self.call("POST", "/page/link"))

    # ------------------------------------------------------------------ what the head reads for us
    def metrics(self, job_id: str) -> wire.Metrics:
        return wire.from_json(wire.Metrics, self.call("GET", f"/jobs/{job_id}/metrics"))

    def log(self, job_id: str, tail: Optional[int] = None) -> Iterator[bytes]:
        """A job's driver log as it is now (``tail``: its last N lines), in chunks."""
        params = {"tail": tail} if tail is not None and tail >= 0 else None
        yield from self._text(f"/jobs/{job_id}/log", params, self.timeout)

    def follow(self, job_id: str, offset: int = 0) -> Iterator[bytes]:
        """One followed stream of a job's log from byte ``offset``: it ends when the job has ended and
        its log is read, or when the server ends the stream (<= 10 min); resume with the bytes got."""
        yield from self._text(f"/jobs/{job_id}/log/stream", {"offset": int(offset)}, wire.STREAM_MAX_S + 30.0)

    def _text(self, path: str, params: Any, read_timeout: float) -> Iterator[bytes]:
        import requests

        try:
            r = self._http.get(self.url + wire.PREFIX + path, params=params, stream=True, timeout=(5.0, read_timeout))
        except requests.exceptions.SSLError as e:
            raise self.tls_refused(e) from e
        except requests.RequestException as e:
            raise QueueDown(f"the door at {self.url} does not answer ({short_reason(e)})") from e
        with r:
            if r.status_code != 200:
                raise self.error_of(r.status_code, r.text)
            try:
                yield from r.iter_content(chunk_size=1 << 16)
            except requests.RequestException as e:
                raise QueueDown(f"reading {path} from the door broke off ({short_reason(e)})") from e


def login_user(target: Any) -> str:
    """The user a door target (``target.door``) is: what ``rayjobs login`` kept, else (a login from
    ``RAYJOBS_URL``/``RAYJOBS_TOKEN``) the door's ``whoami``; "" when the door cannot say now (the
    command then fails on its own request, in one line)."""
    import os

    from rayjobs import settings, settingslogin

    kept = settingslogin.load(settings.home(), os.environ)
    if kept is not None and kept.user and kept.url == target.address:
        return kept.user
    try:
        return Door(str(target.address), target.token, target.fingerprint, timeout=10.0).whoami().name
    except RayjobsError:
        return ""

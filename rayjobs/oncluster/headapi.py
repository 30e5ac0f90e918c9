"""The queue's calls to the head's Jobs API: what it hands to Ray, polls, stops and prunes.

:class:`JobsClient` is the one interface the queue's executors are given (a fake one in tests);
:class:`HeadJobs` is the real one, over the head's own dashboard client
(:class:`rayjobs.oncluster.raydash.RayDash`) on the head's loopback: the URL from ``$RAYJOBS_DASHBOARD``
(the node script and the embedded head set it), else the one Ray recorded for this session; the
token from ``$RAY_AUTH_TOKEN``, ``$RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Protocol

from rayjobs.errors import says_no_such_job

#: Set on the head by the node script and the embedded head: the dashboard's URL on loopback.
DASHBOARD_ENV = "RAYJOBS_DASHBOARD"
#: What :meth:`JobsClient.status` says of a job Ray does not know, and of a question Ray did not answer.
LOST, NO_ANSWER = "LOST", "?"


class JobsClient(Protocol):
    """The Jobs API as the queue uses it; every call is bounded and raises only where it says."""

    address: str

    def submit(self, kwargs: dict[str, Any]) -> None:
        """Submit a job (``submit_job`` keyword arguments). Raises RuntimeError (one line) if refused."""

    def details(self, job_id: str) -> Optional[dict[str, Any]]:
        """Ray's details of a job (status, message, driver_node_id, start_time, end_time);
        ``{"status": LOST}`` if Ray does not know it, None if Ray did not answer."""

    def stop(self, job_id: str) -> bool:
        """Ask Ray to stop it (never raises)."""

    def delete(self, job_id: str) -> bool:
        """Delete an ended job from Ray's table; True if it is gone (never raises)."""

    def list_jobs(self) -> list[dict[str, Any]]:
        """Every job Ray lists (dicts), rayjobs' own small jobs included; [] if Ray did not answer."""

    def supervisor_alive(self, job_id: str) -> bool:
        """Is a Ray job supervisor of ``job_id`` still alive (True if Ray cannot tell)?"""


class HeadJobs:
    """:class:`JobsClient` over the head's dashboard."""

    def __init__(self, dashboard: Any) -> None:
        self.d = dashboard
        self.address = dashboard.address

    def submit(self, kwargs: dict[str, Any]) -> None:
        try:
            self.d.submit(kwargs)
        except Exception as e:  # noqa: BLE001 (Ray's own errors are bare RuntimeErrors)
            msg = " ".join(str(e).split())[:300]
            if "already exists" not in msg:
                raise RuntimeError(msg) from None

    def details(self, job_id: str) -> Optional[dict[str, Any]]:
        try:
            return dict(self.d.job(job_id))
        except Exception as e:  # noqa: BLE001
            return {"status": LOST} if says_no_such_job(e) else None

    def stop(self, job_id: str) -> bool:
        try:
            return bool(self.d.stop(job_id))
        except Exception:  # noqa: BLE001
            return False

    def delete(self, job_id: str) -> bool:
        try:
            self.d.delete(job_id)
            return True
        except Exception as e:  # noqa: BLE001
            return says_no_such_job(e)

    def list_jobs(self) -> list[dict[str, Any]]:
        try:
            return self.d.list_jobs(include_own=True)
        except Exception:  # noqa: BLE001
            return []

    def supervisor_alive(self, job_id: str) -> bool:
        from ray.util.state import list_actors

        try:
            alive = list_actors(address=self.address, filters=[("class_name", "=", "JobSupervisor"), ("state", "!=", "DEAD")],
                                limit=10000, timeout=10, raise_on_missing_output=False)
        except Exception:  # noqa: BLE001
            return True
        return any(str(a.name or "").endswith("_" + job_id) for a in alive)


def head_token() -> Optional[str]:
    """The cluster's auth token as the head's processes know it (None: token auth is off)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    for p in (os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")):
        if p and os.path.isfile(p):
            return Path(p).read_text().strip() or None
    return None


def api_token() -> Optional[str]:
    """The token the queue's API asks for: the cluster's, when Ray's token auth is on (as the
    dashboard does); None where the cluster runs without auth."""
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() != "token":
        return None
    return head_token()


def _url() -> str:
    if os.environ.get(DASHBOARD_ENV):
        return os.environ[DASHBOARD_ENV]
    import ray

    node = ray._private.worker._global_node  # the one place Ray keeps this session's dashboard URL
    url = str((node.address_info or {}).get("webui_url") or "127.0.0.1:8265") if node is not None else "127.0.0.1:8265"
    return url if "://" in url else f"http://{url}"


def head_dash() -> Any:
    """The head's client of its own dashboard (:class:`rayjobs.oncluster.raydash.RayDash`)."""
    from rayjobs.oncluster.raydash import RayDash

    return RayDash(_url(), head_token())


def head_jobs(dash: Any = None) -> HeadJobs:
    """The queue's client of this cluster's Jobs API, from inside the cluster (the head)."""
    return HeadJobs(dash if dash is not None else head_dash())

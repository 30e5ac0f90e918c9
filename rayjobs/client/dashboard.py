"""The one client of a Ray cluster's dashboard: Ray's Jobs SDK plus the few dashboard GETs it lacks.

This is the only module that imports ``ray.job_submission``, and it uses the SDK's public methods
only. What the SDK has no call for (the Ray version with its session name, the nodes, the cluster's
resource use, a job's details as JSON, log files and the log stream) is one typed GET each here, on
the same address with the same bearer token. Every call is bounded in time, and every failure is a
one-line :class:`~rayjobs.errors.RayjobsError` that names the address and what to run next (Ray's
own errors are bare ``RuntimeError``/``ConnectionError`` with multi-line text).

:func:`rayjobs.client.connection.connect` turns an address into a :class:`Dashboard`.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional

from rayjobs.contract import ids as idres
from rayjobs.contract.target import Target
from rayjobs.errors import (ClusterUnreachable, ConfigError, JobNotFound, NoSuchJob, RayjobsError, SubmitError,
                             short_reason)
from rayjobs.shared import ROLE_KEY

if TYPE_CHECKING:  # the SDK's types, for annotations only (importing Ray costs ~0.4 s)
    from ray.job_submission import JobSubmissionClient

#: The dashboard's log API: a job's driver log, or any file of a node's log dir.
LOG_FILE = "/api/v0/logs/file"
#: The same, followed: the agent re-reads the file every ``interval`` seconds over one connection.
LOG_STREAM = "/api/v0/logs/stream"


def warm_up() -> None:
    """Import the Jobs SDK now (~0.4 s), e.g. in a thread while the submit's checks run."""
    import ray.job_submission  # noqa: F401


def resolve_prefix(prefix: str, ids: Iterable[Optional[str]]) -> str:
    """The one id of ``ids`` that is ``prefix`` or starts with it (:func:`rayjobs.contract.ids.resolve`).

    Raises:
        NoSuchJob: nothing matches (the closest ids are named).
        JobNotFound: several match.
    """
    try:
        return idres.resolve_one(prefix, ids)
    except idres.NoMatch as e:
        raise NoSuchJob(str(e)) from None
    except idres.Ambiguous as e:
        raise JobNotFound(str(e)) from None


class DashboardDown(RayjobsError):
    """The dashboard did not answer (restarting, tunnel down); callers usually retry."""


def _one_line(e: BaseException, limit: int = 300) -> str:
    return " ".join(str(e).split())[:limit]


def refused_message(address: Optional[str], code: Any = "401/403") -> str:
    """The one line for a request the cluster refused for want of the right token."""
    return (f"the Ray cluster at {address} refused the request (HTTP {code}: auth token missing or wrong): "
            f"set RAY_AUTH_TOKEN or run `rayjobs connect`")


def unreachable_message(target: Target, e: BaseException) -> str:
    """The one line for a dashboard that does not answer (or refuses us)."""
    if "401" in str(e) or "403" in str(e) or "nauthor" in str(e):
        return refused_message(target.address)
    hint = ("start the tunnel with `rayjobs connect`" if target.source.startswith("cluster")
            else "check the address, or unset RAY_ADDRESS/RAY_API_SERVER_ADDRESS to use the embedded local cluster")
    return f"cannot reach a Ray dashboard at {target.address} (from {target.source}): {hint}"


class _Answer:
    """A urllib3 answer read in full, spelled as the little of ``requests.Response`` :meth:`Dashboard.job` reads."""

    def __init__(self, status: int, data: bytes) -> None:
        self.status_code, self._data = status, data

    def json(self) -> Any:
        return json.loads(self._data)


class Dashboard:
    """A Ray cluster's dashboard: its Jobs API (through the SDK) and its read-only HTTP API.

    Args:
        target: where the dashboard is and the token to send (:class:`~rayjobs.settings.Target`).
        timeout: seconds any one request may take to answer (the log stream excepted).
    """

    def __init__(self, target: Target, *, timeout: float = 10.0, direct: bool = False) -> None:
        """``direct``: :meth:`job` through urllib3's pool, no proxies from the environment (the head's
        queue polls its own dashboard twice a second: half the CPU of a ``requests`` GET)."""
        import requests

        self.target = target
        self.address = str(target.address)
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self._requests = requests
        # one keep-alive session per thread (the head's pollers call from a pool): a fresh
        # connection and Session a GET was most of the queue's idle CPU
        self._local = threading.local()
        self._direct: Any = None
        if direct:
            import urllib3

            self._direct = urllib3.PoolManager(num_pools=2, maxsize=4, retries=False,
                                               timeout=urllib3.Timeout(connect=5.0, read=timeout))
        self._sdk: Optional[JobSubmissionClient] = None
        self._version: Optional[dict[str, Any]] = None
        self._queue: Any = None

    @property
    def queue(self) -> Any:
        """The cluster's queue API (:class:`rayjobs.client.queueapi.QueueAPI`), found (and started,
        if it runs nowhere) on first use."""
        if self._queue is None:
            from rayjobs.client.queueapi import connect_queue

            self._queue = connect_queue(self)
        return self._queue

    def forget_queue(self) -> None:
        """Find the queue afresh on next use: after a restart of the head's Ray, it answers from a
        new session (and maybe another port) once it has reloaded its backlog."""
        self._queue = None

    # ------------------------------------------------------------------ the Jobs SDK
    @property
    def sdk(self) -> "JobSubmissionClient":
        """Ray's ``JobSubmissionClient`` for this dashboard (made on first use; it checks the connection)."""
        if self._sdk is None:
            from ray.job_submission import JobSubmissionClient

            try:
                self._sdk = JobSubmissionClient(self.address, headers=self.headers or None)
            except Exception as e:  # ConnectionError, RuntimeError, ValueError: all "can't reach it"
                raise ClusterUnreachable(unreachable_message(self.target, e)) from e
        return self._sdk

    def submit(self, kwargs: Mapping[str, Any]) -> str:
        """Submit one job.

        Args:
            kwargs: the keyword arguments of ``submit_job`` (:meth:`rayjobs.submit.spec.JobSpec.submit_kwargs`).

        Returns:
            The submission id.

        Raises:
            SubmitError: the cluster refused it (an id that exists, anything else Ray says).
            ConfigError: the working_dir upload was too large.
        """
        try:
            return self.sdk.submit_job(**kwargs)
        except RayjobsError:
            raise
        except Exception as e:
            msg = _one_line(e, 10_000)
            if "already exists" in msg:
                raise SubmitError(f"a job with id {kwargs.get('submission_id')} already exists on the cluster; "
                                  f"resubmit to get a new id") from e
            if "exceeds the maximum" in msg or "too large" in msg.lower() or "EntityTooLarge" in msg:
                raise ConfigError("the working_dir upload was refused as too large: exclude big files "
                                  "(rayjobs.excludes or .gitignore)") from e
            raise SubmitError(f"the cluster refused the job: {msg[:300]}") from e

    def list_jobs(self, *, include_own: bool = False) -> list[dict[str, Any]]:
        """Every job on the cluster as dicts (``GET /api/jobs/``; Ray has no filter; callers filter),
        less rayjobs' own small jobs unless ``include_own``.

        The REST call, not the SDK's ``list_jobs``: the same JSON without importing Ray's SDK and
        building a pydantic ``JobDetails`` per job (1.2 s of a ``rayjobs list`` over 2,000 jobs).
        The queue's starter is a Ray job too (tagged :data:`rayjobs.shared.ROLE_KEY`) and left out;
        other drivers (a user's ``ray.init``) stay listed.

        Raises:
            ClusterUnreachable: the dashboard did not answer with a list.
        """
        try:
            found = self.get_json("/api/jobs/")
        except RayjobsError:
            raise
        except Exception as e:
            raise ClusterUnreachable(f"could not list jobs: {_one_line(e)}") from e
        if not isinstance(found, list):
            raise ClusterUnreachable(f"could not list jobs: the dashboard at {self.address} sent no list")
        return [j for j in found if isinstance(j, dict) and (include_own or ROLE_KEY not in (j.get("metadata") or {}))]

    def logs(self, job_id: str) -> str:
        """A job's whole driver log (``GET /api/jobs/ID/logs``, the Jobs REST API the SDK's
        ``get_job_logs`` calls: a command that only reads need not import Ray's SDK)."""
        r = self.get(f"/api/jobs/{job_id}/logs", read_timeout=60.0)
        if r.status_code == 404:
            raise JobNotFound(f"no job {job_id!r} on the cluster; `rayjobs list` shows the ids")
        try:
            if r.status_code == 200:
                return str(r.json().get("logs") or "")
        except ValueError:
            pass
        raise SubmitError(f"could not read the log of {job_id}: HTTP {r.status_code}")

    def stop(self, job_id: str) -> bool:
        """Ask Ray to stop a job (``POST /api/jobs/ID/stop``, what the SDK's ``stop_job`` sends);
        True if it was still running.

        Raises:
            JobNotFound: the cluster has no such job.
            SubmitError: Ray answered anything else.
        """
        try:
            r = self._session().post(f"{self.address}/api/jobs/{job_id}/stop", headers=self.headers,
                                     timeout=(5.0, self.timeout))
        except self._requests.RequestException as e:
            raise SubmitError(f"could not stop {job_id}: the dashboard at {self.address} did not answer "
                              f"({short_reason(e)})") from e
        if r.status_code == 404:
            raise JobNotFound(f"no job {job_id!r} on the cluster; `rayjobs list` shows the ids")
        if r.status_code in (401, 403):
            raise ClusterUnreachable(refused_message(self.address, r.status_code))
        try:
            if r.status_code == 200:
                return bool(r.json().get("stopped"))
        except ValueError:
            pass
        raise SubmitError(f"could not stop {job_id}: HTTP {r.status_code} {' '.join(r.text.split())[:200]}")

    # ------------------------------------------------------------------ the dashboard's HTTP API
    def get(self, path: str, params: Optional[Mapping[str, Any]] = None, *, stream: bool = False,
            read_timeout: Optional[float] = -1.0) -> Any:
        """GET ``path`` (a ``requests`` response).

        Raises:
            DashboardDown: no answer (connection refused, reset, timed out).
            ClusterUnreachable: the token is missing or wrong (401/403).
        """
        rt = self.timeout if read_timeout == -1.0 else read_timeout
        try:
            r = self._session().get(self.address + path, params=params, headers=self.headers, stream=stream,
                                   timeout=(5.0, rt))
        except self._requests.RequestException as e:
            raise DashboardDown(f"the dashboard at {self.address} did not answer ({short_reason(e)})") from e
        if r.status_code in (401, 403):
            r.close()
            raise ClusterUnreachable(refused_message(self.address, r.status_code))
        return r

    def _get_direct(self, path: str) -> Any:
        """GET ``path`` through the urllib3 pool (``.status_code``, ``.json()``, as :meth:`get`'s)."""
        import urllib3

        try:
            r = self._direct.request("GET", self.address + path, headers=self.headers)
        except urllib3.exceptions.HTTPError as e:
            raise DashboardDown(f"the dashboard at {self.address} did not answer ({short_reason(e)})") from e
        if r.status in (401, 403):
            raise ClusterUnreachable(refused_message(self.address, r.status))
        return _Answer(r.status, r.data)

    def _session(self) -> Any:
        http = getattr(self._local, "http", None)
        if http is None:
            http = self._local.http = self._requests.Session()
        return http

    def get_json(self, path: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """GET ``path`` as JSON; :class:`DashboardDown` on any answer but a 200 with JSON."""
        r = self.get(path, params)
        if r.status_code != 200:
            raise DashboardDown(f"the dashboard at {self.address} answered HTTP {r.status_code} for {path}")
        try:
            return r.json()
        except ValueError as e:
            raise DashboardDown(f"the dashboard at {self.address} sent a bad answer for {path}") from e

    def version(self) -> dict[str, Any]:
        """``/api/version`` (``ray_version``, ``session_name``, ...), asked once per client."""
        if self._version is None:
            self._version = dict(self.get_json("/api/version"))
        return self._version

    def alive(self) -> bool:
        """Does a dashboard answer here (a refusal for want of a token still means alive)?"""
        try:
            self.version()
            return True
        except ClusterUnreachable:
            return True
        except DashboardDown:
            return False

    def nodes(self) -> list[dict[str, Any]]:
        """The alive nodes, from the state API (``/api/v0/nodes``): id, ip, head or not, resource totals."""
        doc = self.get_json("/api/v0/nodes", {"detail": "true", "limit": 10000})
        return [r for r in doc["data"]["result"]["result"] if str(r.get("state")) == "ALIVE"]

    def resource_use(self) -> dict[str, dict[str, list[float]]]:
        """Per node id, ``{"GPU": [used, total], "CPU": [used, total], ...}`` (``/api/cluster_status``)."""
        doc = self.get_json("/api/cluster_status", {"format": 0})
        return dict(doc["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"])

    def job(self, job_id: str) -> dict[str, Any]:
        """A job's details as a dict (``GET /api/jobs/ID``), for pollers that must not block on the SDK."""
        r = self._get_direct(f"/api/jobs/{job_id}") if self._direct is not None else self.get(f"/api/jobs/{job_id}")
        if r.status_code == 404:
            raise JobNotFound(f"no job {job_id!r} on the cluster; `rayjobs list` shows the ids")
        if r.status_code != 200:
            raise DashboardDown(f"the dashboard answered HTTP {r.status_code} for job {job_id}")
        try:
            return r.json()
        except ValueError as e:
            raise DashboardDown(f"the dashboard sent a bad answer for job {job_id}") from e

    @staticmethod
    def log_params(job_id: str, node_id: str, lines: int, interval: Optional[float] = None) -> dict[str, Any]:
        """Query parameters of the log API for a job's driver log (``interval``: follow it)."""
        p: dict[str, Any] = {"submission_id": job_id, "node_id": node_id, "lines": lines}
        if interval is not None:
            p["interval"] = interval
        return p

    def iter_log(self, job_id: str, node_id: str, lines: int = -1, max_bytes: Optional[int] = None) -> Iterator[bytes]:
        """A job's log as it is now, its last ``lines`` lines (-1: all of it), in chunks (no follow)."""
        r = self.get(LOG_FILE, self.log_params(job_id, node_id, lines), stream=True, read_timeout=30.0)
        with r:
            if r.status_code != 200:
                raise DashboardDown(f"the log of {job_id} is not readable now (HTTP {r.status_code}: "
                                    f"{' '.join(r.text.split())[:120]})")
            got = 0
            try:
                for chunk in r.iter_content(chunk_size=1 << 16):
                    got += len(chunk)
                    if max_bytes is not None and got > max_bytes:
                        raise DashboardDown(f"the log tail of {job_id} is larger than {max_bytes} bytes")
                    yield chunk
            except self._requests.RequestException as e:
                raise DashboardDown(f"reading the log of {job_id} broke off ({short_reason(e)})") from e

    def log_tail(self, job_id: str, node_id: str, lines: int, max_bytes: int = 32 << 20) -> bytes:
        """A job's last ``lines`` log lines, bounded in bytes."""
        return b"".join(self.iter_log(job_id, node_id, lines, max_bytes=max_bytes))

    def node_file(self, node_id: str, filename: str, lines: int = 10) -> Optional[bytes]:
        """The last ``lines`` lines of a file in a node's Ray log dir; None if it is not there."""
        r = self.get(LOG_FILE, {"node_id": node_id, "filename": filename, "lines": lines})
        return r.content if r.status_code == 200 else None

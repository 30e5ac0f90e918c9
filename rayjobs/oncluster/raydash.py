"""The head's own client of Ray's dashboard on its loopback: what the queue and the door ask Ray.

The laptop never imports this (it talks to the door only). Ray's Jobs SDK for the two calls that
have no plain REST form the SDK does not wrap better (``submit_job``: the runtime_env upload;
``delete_job``), and one bounded GET or POST per Jobs REST / dashboard endpoint for the rest: a
job's details, stop, the job list, the whole log, a log file (whole, its last lines, followed),
the nodes, the resource use per node, the version and session, the nodes' metrics endpoints.
Every call is bounded in time; every failure is a one-line :class:`~rayjobs.errors.RayjobsError`.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator, Mapping, Optional

from rayjobs.errors import ClusterUnreachable, JobNotFound, RayjobsError, SubmitError, short_reason
from rayjobs.shared import ROLE_KEY

#: The dashboard's log API: a job's driver log, or any file of a node's log dir (``lines``: its last ones).
LOG_FILE = "/api/v0/logs/file"
#: The same, followed: the agent re-reads the file every ``interval`` seconds over one connection.
LOG_STREAM = "/api/v0/logs/stream"


class RayDown(RayjobsError):
    """The dashboard did not answer (restarting), or answered with something else than asked."""


def _refused(address: str, code: int) -> str:
    return f"the head's dashboard at {address} refused the queue's token (HTTP {code}): check RAY_AUTH_TOKEN on the head"


class RayDash:
    """The dashboard at ``address`` (``http://127.0.0.1:8265``) with the cluster's ``token``."""

    def __init__(self, address: str, token: Optional[str], *, timeout: float = 10.0) -> None:
        import requests
        import urllib3

        self.address = address.rstrip("/")
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._requests = requests
        self._local = threading.local()  # a keep-alive session per thread (the pollers call from a pool)
        # the queue polls a job's details twice a second: urllib3's pool is half the CPU of requests
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=8, retries=False,
                                         timeout=urllib3.Timeout(connect=5.0, read=timeout))
        self._sdk: Any = None
        self._sdk_lock = threading.Lock()

    # ------------------------------------------------------------------ the SDK (two calls)
    @property
    def sdk(self) -> Any:
        with self._sdk_lock:
            if self._sdk is None:
                from ray.job_submission import JobSubmissionClient

                try:
                    self._sdk = JobSubmissionClient(self.address, headers=self.headers or None)
                except Exception as e:  # noqa: BLE001 (ConnectionError, RuntimeError: "can't reach it")
                    raise RayDown(f"the head's dashboard at {self.address} did not answer ({short_reason(e)})") from e
            return self._sdk

    def submit(self, kwargs: Mapping[str, Any]) -> str:
        """``submit_job(**kwargs)``. Raises SubmitError (one line) if Ray refused it."""
        try:
            return str(self.sdk.submit_job(**kwargs))
        except RayjobsError:
            raise
        except Exception as e:  # noqa: BLE001 (Ray's errors are bare RuntimeErrors)
            raise SubmitError(" ".join(str(e).split())[:300]) from e

    def delete(self, job_id: str) -> None:
        """Delete an ended job from Ray's table. Raises Ray's own error (the caller reads it)."""
        self.sdk.delete_job(job_id)

    # ------------------------------------------------------------------ HTTP
    def _session(self) -> Any:
        http = getattr(self._local, "http", None)
        if http is None:
            http = self._local.http = self._requests.Session()
            http.trust_env = False  # loopback: no proxy in between
        return http

    def get(self, path: str, params: Optional[Mapping[str, Any]] = None, *, stream: bool = False,
            read_timeout: Optional[float] = -1.0) -> Any:
        """GET ``path`` (a ``requests`` response). Raises RayDown (no answer), ClusterUnreachable (401/403)."""
        rt = self.timeout if read_timeout == -1.0 else read_timeout
        try:
            r = self._session().get(self.address + path, params=params, headers=self.headers, stream=stream,
                                    timeout=(5.0, rt))
        except self._requests.RequestException as e:
            raise RayDown(f"the head's dashboard at {self.address} did not answer ({short_reason(e)})") from e
        if r.status_code in (401, 403):
            r.close()
            raise ClusterUnreachable(_refused(self.address, r.status_code))
        return r

    def get_json(self, path: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """GET ``path`` as JSON; RayDown on anything but a 200 with JSON."""
        r = self.get(path, params)
        if r.status_code != 200:
            raise RayDown(f"the head's dashboard answered HTTP {r.status_code} for {path}")
        try:
            return r.json()
        except ValueError as e:
            raise RayDown(f"the head's dashboard sent a bad answer for {path}") from e

    def job(self, job_id: str) -> dict[str, Any]:
        """A job's details (``GET /api/jobs/ID``). Raises JobNotFound, RayDown."""
        import urllib3

        try:
            r = self._pool.request("GET", f"{self.address}/api/jobs/{job_id}", headers=self.headers)
        except urllib3.exceptions.HTTPError as e:
            raise RayDown(f"the head's dashboard at {self.address} did not answer ({short_reason(e)})") from e
        if r.status == 404:
            raise JobNotFound(f"no job {job_id!r} on the cluster")
        if r.status in (401, 403):
            raise ClusterUnreachable(_refused(self.address, r.status))
        if r.status != 200:
            raise RayDown(f"the head's dashboard answered HTTP {r.status} for job {job_id}")
        try:
            return dict(json.loads(r.data))
        except ValueError as e:
            raise RayDown(f"the head's dashboard sent a bad answer for job {job_id}") from e

    def stop(self, job_id: str) -> bool:
        """Ask Ray to stop a job (``POST /api/jobs/ID/stop``); True if it was still running.
        Raises JobNotFound, RayDown."""
        try:
            r = self._session().post(f"{self.address}/api/jobs/{job_id}/stop", headers=self.headers,
                                     timeout=(5.0, self.timeout))
        except self._requests.RequestException as e:
            raise RayDown(f"could not stop {job_id}: the head's dashboard did not answer ({short_reason(e)})") from e
        if r.status_code == 404:
            raise JobNotFound(f"no job {job_id!r} on the cluster")
        try:
            if r.status_code == 200:
                return bool(r.json().get("stopped"))
        except ValueError:
            pass
        raise RayDown(f"could not stop {job_id}: HTTP {r.status_code} {' '.join(r.text.split())[:200]}")

    def list_jobs(self, *, include_own: bool = False) -> list[dict[str, Any]]:
        """Every job Ray lists (``GET /api/jobs/``), less rayjobs' own small jobs unless ``include_own``."""
        found = self.get_json("/api/jobs/")
        if not isinstance(found, list):
            raise RayDown("the head's dashboard sent no job list")
        return [j for j in found if isinstance(j, dict) and (include_own or ROLE_KEY not in (j.get("metadata") or {}))]

    def logs(self, job_id: str) -> str:
        """A job's whole driver log (``GET /api/jobs/ID/logs``). Raises JobNotFound, RayDown."""
        r = self.get(f"/api/jobs/{job_id}/logs", read_timeout=60.0)
        if r.status_code == 404:
            raise JobNotFound(f"no job {job_id!r} on the cluster")
        try:
            if r.status_code == 200:
                return str(r.json().get("logs") or "")
        except ValueError:
            pass
        raise RayDown(f"could not read the log of {job_id}: HTTP {r.status_code}")

    def iter_file(self, params: Mapping[str, Any], *, follow: bool = False) -> Iterator[bytes]:
        """A log file in chunks (``params``: ``node_id`` with ``filename``, or ``submission_id``;
        ``lines`` -1: all); ``follow``: the stream API, which re-reads it every ``interval``.
        Raises RayDown: not readable (its HTTP status), or the read broke off."""
        r = self.get(LOG_STREAM if follow else LOG_FILE, params, stream=True, read_timeout=None if follow else 30.0)
        with r:
            if r.status_code != 200:
                raise RayDown(f"HTTP {r.status_code}: {' '.join(r.text.split())[:160]}")
            try:
                yield from r.iter_content(chunk_size=None if follow else 1 << 16)
            except self._requests.RequestException as e:
                raise RayDown(f"reading the log broke off ({short_reason(e)})") from e

    def version(self) -> dict[str, Any]:
        """``/api/version``: ``ray_version``, ``session_name``, ..."""
        return dict(self.get_json("/api/version"))

    def nodes(self) -> list[dict[str, Any]]:
        """Every node the state API lists (``/api/v0/nodes``, alive or not): id, ip, head, totals, labels."""
        doc = self.get_json("/api/v0/nodes", {"detail": "true", "limit": 10000})
        return list(doc["data"]["result"]["result"])

    def resource_use(self) -> dict[str, dict[str, list[float]]]:
        """Per node id, ``{"GPU": [used, total], ...}`` (``/api/cluster_status``)."""
        doc = self.get_json("/api/cluster_status", {"format": 0})
        return dict(doc["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"])

    def metrics_endpoints(self) -> list[str]:
        """Every node's Prometheus endpoint, ``host:port`` (Ray's service discovery for Prometheus)."""
        from rayjobs.oncluster.promscrape import SD_PATH, targets

        return targets(self.get_json(SD_PATH))

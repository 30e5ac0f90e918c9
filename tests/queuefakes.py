"""Fakes of the one client the queue service is handed (the Jobs API) and of its cluster reader,
for the fast tier: the service, its executors and its HTTP API run for real on them, no Ray."""

from __future__ import annotations

import threading
from typing import Any, Mapping, Optional, Sequence

from rayjobs.oncluster.clusterstate import Observed


class FakeJobs:
    """Ray's job table as a dict: a submitted job RUNS until the test ends it (:meth:`end`)."""

    address = "http://fake-dashboard"

    def __init__(self) -> None:
        self.ray: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.refuse: dict[str, str] = {}  #: id -> the error Ray answers a submit of it with
        self._lock = threading.Lock()

    def submit(self, kwargs: dict[str, Any]) -> None:
        sid = kwargs["submission_id"]
        with self._lock:
            self.calls.append(("submit", sid))
            if sid in self.refuse:
                raise RuntimeError(self.refuse[sid])
            self.ray[sid] = {"status": "RUNNING", "driver_node_id": "node0", "start_time": 1_000,
                             "metadata": dict(kwargs.get("metadata") or {}), "message": "",
                             "runtime_env": dict(kwargs.get("runtime_env") or {})}

    def details(self, job_id: str) -> Optional[dict[str, Any]]:
        with self._lock:
            got = self.ray.get(job_id)
            return dict(got) if got else {"status": "LOST"}

    def stop(self, job_id: str) -> bool:
        with self._lock:
            self.calls.append(("stop", job_id))
            if job_id in self.ray and self.ray[job_id]["status"] == "RUNNING":
                self.ray[job_id].update(status="STOPPED", end_time=2_000)
                return True
            return False

    def delete(self, job_id: str) -> bool:
        with self._lock:
            self.calls.append(("delete", job_id))
            self.ray.pop(job_id, None)
            return True

    def list_jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(v, submission_id=k) for k, v in self.ray.items()]

    def supervisor_alive(self, job_id: str) -> bool:
        return False

    def end(self, job_id: str, status: str = "SUCCEEDED", message: str = "") -> None:
        """The job's Ray run ends (the next poll sees it)."""
        with self._lock:
            self.ray[job_id].update(status=status, end_time=3_000, message=message or f"Job {status.lower()}")


class FakeCluster:
    """Nodes whose free GPUs are what the admitted jobs leave (every admitted job has placed its groups)."""

    def __init__(self, nodes: Sequence[Any], holdings: Optional[Mapping[str, Any]] = None) -> None:
        self.nodes = list(nodes)
        self.held = dict(holdings or {})

    def observe(self, running: Mapping[str, Any]) -> Observed:
        from rayjobs.contract import capacity

        used = sum(r.req.gpus for r in running.values())
        out, left = [], used
        for n in self.nodes:
            take = min(n.gpus, left)
            left -= take
            out.append(capacity.Node(n.id, n.gpus, n.cpus, n.gpus - take, n.cpus - 3 * take))
        return Observed(out, {i: [] for i in running}, set(), {i: self.held[i] for i in running if i in self.held})

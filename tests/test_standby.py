"""The queue's pre-started job (:mod:`rayjobs.oncluster.standby`), fast tier: Ray's job table faked.

* a pre-start cancelled while Ray still has its job PENDING is stopped once Ray runs it: Ray
  answers a stop of a PENDING job True and does nothing (ray-project/ray#58353), and the held
  runner then stayed RUNNING for good (a second pre-started job in Ray; the backlog test's flake).
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from queuefakes import FakeJobs  # noqa: E402

from rayjobs.contract.record import JobRecord  # noqa: E402
from rayjobs.contract.status import State  # noqa: E402
from rayjobs.oncluster import standby  # noqa: E402


class PendingJobs(FakeJobs):
    """Ray's table where a job stays PENDING until :meth:`runs`, and a stop of a PENDING job says
    True and changes nothing (as Ray does while the job's supervisor is not started)."""

    def submit(self, kwargs: dict) -> None:
        super().submit(kwargs)
        self.ray[kwargs["submission_id"]]["status"] = "PENDING"

    def stop(self, job_id: str) -> bool:
        if self.ray.get(job_id, {}).get("status") == "PENDING":
            with self._lock:
                self.calls.append(("stop", job_id))
            return True
        return super().stop(job_id)

    def runs(self, job_id: str) -> None:
        with self._lock:
            self.ray[job_id]["status"] = "RUNNING"


def test_a_pre_start_cancelled_while_ray_has_it_pending_is_stopped_once_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(standby, "STOP_EVERY_S", 0.01)
    monkeypatch.setattr(standby, "go_dir", lambda: tmp_path / "go")
    jobs = PendingJobs()
    with ThreadPoolExecutor(2) as pool:
        sb = standby.Standby(jobs, pool, lambda code: tmp_path / "code", lambda rec: None)
        rec = JobRecord(id="job-1", state=State.WAITING, spec={"entrypoint": "python -m x", "submission_id": "job-1"})
        assert sb.offer(rec)
        assert sb.submitted.result(timeout=10)
        assert jobs.ray["job-1"]["status"] == "PENDING"
        sb.cancel("job-1")  # stopped while queued: its Ray job must end too
        assert sb.sid is None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(c == ("stop", "job-1") for c in jobs.calls) < 3:
            time.sleep(0.01)
        assert jobs.ray["job-1"]["status"] == "PENDING"  # Ray took the stops and did nothing
        jobs.runs("job-1")  # its supervisor started: the runner holds for its go file
        while time.monotonic() < deadline and jobs.ray["job-1"]["status"] != "STOPPED":
            time.sleep(0.01)
        assert jobs.ray["job-1"]["status"] == "STOPPED"

"""What a test or a benchmark does to a cluster, as a user would: run ``python -m rayjobs.submit`` and
``rayjobs`` against it, send jobs, read the queue's view of them, and wait (bounded) for something.

The conftest re-exports every name (the tests import them from there); benchmarks under ``scripts/``
import this module itself (they cannot import a conftest). The project a command runs in is the
tests' ``workdir`` (:func:`make_workdir`): the verl stand-in and the user's own presets.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from clusters import FakeGpuCluster

REPO = Path(__file__).resolve().parent.parent


def make_workdir(dest: Path) -> Path:
    """A user's project at ``dest``: ./workloads (the verl stand-in) and ./conf (their own presets)."""
    shutil.copytree(REPO / "tests" / "workloads", dest / "workloads", ignore=shutil.ignore_patterns("conf"))
    shutil.copytree(REPO / "tests" / "workloads" / "conf", dest / "conf")
    return dest


def rayjobs_submit(*args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None,
                   timeout: float = 180) -> subprocess.CompletedProcess:
    """Run ``python -m rayjobs.submit ARGS`` as a user would (inside the test namespace)."""
    return subprocess.run([sys.executable, "-m", "rayjobs.submit", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def rayjobs_cli(*args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None,
                timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the ``rayjobs`` command."""
    return subprocess.run([sys.executable, "-m", "rayjobs.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def wait_until(pred: Any, timeout: float, what: str, every: float = 0.5) -> Any:
    """Poll ``pred`` until it returns something truthy (that value), bounded by ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_terminal(client: Any, job_id: str, timeout: float = 120) -> str:
    """Poll a job's status until terminal (bounded). The queue submits a job to Ray only when it
    fits, so until then Ray does not know the id: that is "not yet", not an error."""
    deadline = time.monotonic() + timeout
    status = "?"
    while time.monotonic() < deadline:
        try:
            status = str(client.get_job_status(job_id))
        except RuntimeError as e:
            if "does not exist" not in str(e) and "404" not in str(e):
                raise
            status = "QUEUED (not in Ray yet)"
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return status
        time.sleep(0.3)
    raise AssertionError(f"{job_id} still {status} after {timeout} s")


def queue_status(target: Any, job_id: str) -> str:
    """A job's status as rayjobs sees it (QUEUED while the queue holds it; its history after)."""
    from rayjobs.api import Job
    from rayjobs.client.dashboard import Dashboard

    return Job(job_id, dashboard=Dashboard(target)).status()


def job_ids(target: Any = None) -> set[str]:
    """Every job id a cluster holds (default: the session's embedded head): the queue's -- a waiting job
    is in no Ray table yet -- and Ray's user jobs. What a "nothing was submitted" check compares."""
    from rayjobs.client import embedded
    from rayjobs.client.dashboard import Dashboard

    d = Dashboard(target if target is not None else embedded.ensure(quiet=True))
    return set(job_list(d.sdk)) | {v["submission_id"] for v in d.queue.jobs()}


def job_list(client: Any) -> list[str]:
    """The ids of the user jobs Ray lists (rayjobs' own small jobs, tagged rayjobs_role, left out)."""
    return [j.submission_id for j in client.list_jobs() if "rayjobs_role" not in (j.metadata or {})]


# --------------------------------------------------------------------------- on a fake cluster
def submit_on(c: FakeGpuCluster, *args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None,
              timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m rayjobs.submit ARGS`` against cluster ``c``, as a user would."""
    return rayjobs_submit(*args, cwd=cwd, env=c.client_env(env), timeout=timeout)


def submit_ids(c: FakeGpuCluster, *args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None) -> list[str]:
    """The ids a submit to ``c`` printed (it must succeed)."""
    r = submit_on(c, *args, cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def send_on(c: FakeGpuCluster, *overrides: str, experiment: str = "fake_ppo") -> str:
    """One job composed and sent in this process (what `python -m rayjobs.submit` does, minus its
    start-up): the verl stand-in unless ``experiment`` says otherwise; its id."""
    from rayjobs.submit import pipeline
    from rayjobs.config import compose

    cfg = compose.compose([f"+exp={experiment}", f"rayjobs.address={c.address}", *overrides])
    return pipeline.send(pipeline.prepare([cfg]), address=c.address)[0]


def cli_on(c: FakeGpuCluster, *args: str, env: Optional[dict[str, str]] = None, timeout: float = 180,
           cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """The ``rayjobs`` command against cluster ``c``."""
    return rayjobs_cli(*args, cwd=cwd, env=c.client_env(env), timeout=timeout)


def cli_json(c: FakeGpuCluster, *args: str) -> Any:
    """``rayjobs ARGS --json`` against ``c``, parsed (it must succeed)."""
    import json

    r = cli_on(c, *args, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def view(c: FakeGpuCluster, job_id: str) -> dict[str, Any]:
    """The queue's view of a job (its API's ``GET /v1/jobs/ID``)."""
    got = c.queue().job(job_id)
    assert got is not None, f"the queue has no record of {job_id}"
    return got


def wait_done(c: FakeGpuCluster, job_id: str, timeout: float = 180) -> str:
    """Poll the queue until the job has ended (bounded); its status."""
    got = wait_until(lambda: (v := c.queue().job(job_id)) is not None and v["state"] == "done" and v,
                     timeout, f"{job_id} to end", every=0.3)
    return str(got["status"])


def log_of(c: FakeGpuCluster, job_id: str) -> str:
    """A job's driver log as ``rayjobs logs`` prints it (also once Ray pruned it)."""
    from rayjobs.api import Job

    return Job(job_id, dashboard=c.dashboard()).logs()


def log_so_far(c: FakeGpuCluster, job_id: str) -> str:
    """The job's log so far ("" while it has none: still waiting, not in Ray yet)."""
    try:
        return log_of(c, job_id)
    except Exception:  # noqa: BLE001
        return ""


def waiting_line(c: FakeGpuCluster) -> dict[str, int]:
    """{id: place in line} of the jobs waiting in the queue (its API: GET /v1/jobs?status=QUEUED)."""
    return {v["submission_id"]: int(v["queue_position"]) for v in c.queue().jobs(status=["QUEUED"])}


def admitted_time(c: FakeGpuCluster, job_id: str) -> float:
    """When the queue admitted the job (its record)."""
    return float(view(c, job_id)["admitted_at"])


def standby_in_ray(c: FakeGpuCluster) -> list[str]:
    """The ids of the jobs the queue pre-started (tagged, not ended) that Ray lists and the queue has
    not admitted: Ray keeps a job's tag once it is admitted (a job that waited a moment, its GPUs not
    yet read free, is pre-started too), while one whose stop Ray dropped stays listed."""
    from rayjobs.shared import STANDBY_KEY

    held = [j.submission_id for j in c.client().list_jobs()
            if (j.metadata or {}).get(STANDBY_KEY) and str(j.status).split(".")[-1] in ("PENDING", "RUNNING")]
    return [i for i in held if not (c.queue().job(i) or {}).get("admitted_at")]

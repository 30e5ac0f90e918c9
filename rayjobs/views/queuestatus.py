"""Every job of the cluster as the views read them: the queue's (waiting, running, finished --
including those Ray has pruned) from its API, plus the Ray jobs the queue does not know (a ``ray
job submit`` by hand, a plain ``ray.init`` driver), from Ray's table.

A job the queue knows is always the queue's word (:class:`rayjobs.contract.wire.JobView`, a dict
with the fields of Ray's job details where they mean the same): its status, its place in line,
its attempts; Ray's details are read only to follow a running job's log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from rayjobs.contract.status import Status

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def all_jobs(d: "Dashboard") -> list[dict[str, Any]]:
    """The queue's jobs (oldest first), then the Ray jobs it does not know (one GET each)."""
    mine = d.queue.jobs()
    known = {v["submission_id"] for v in mine}
    return mine + [j for j in d.list_jobs() if j.get("submission_id") not in known]


def queue_job(d: "Dashboard", job_id: str) -> Optional[dict[str, Any]]:
    """The queue's view of one job, or None if the queue has no record of it."""
    return d.queue.job(job_id)


def job(d: "Dashboard", job_id: str) -> Optional[dict[str, Any]]:
    """One job: the queue's view, else Ray's details (a job the queue does not know), else None."""
    from rayjobs.errors import JobNotFound

    v = d.queue.job(job_id)
    if v is not None:
        return v
    try:
        return d.job(job_id)
    except JobNotFound:
        return None


def is_waiting(v: Optional[dict[str, Any]]) -> bool:
    """Is the job in line (or going back to it after a preemption)?"""
    return bool(v) and v.get("status") == Status.QUEUED


def preempted_by(v: Optional[dict[str, Any]]) -> Optional[str]:
    """Who preempted a job going back in line (None: it was not preempted)."""
    if not is_waiting(v):
        return None
    return str(((v or {}).get("preempted") or {}).get("by") or "") or None

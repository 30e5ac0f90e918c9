"""Every job of the cluster as the views read them: the queue's (waiting, running, finished --
including those Ray has pruned) from its API, plus the Ray jobs the queue does not know (a ``ray
job submit`` by hand, a plain ``ray.init`` driver), from Ray's table.

Each is one shape, :class:`rayjobs.contract.wire.JobView`, converted here once: a job the queue
knows is always the queue's word (its status, its place in line, its attempts); a Ray job it does
not know is Ray's details as a view with ``foreign`` set (:meth:`JobView.from_ray`). Ray's details
of a queue job are read only to follow a running job's log (:func:`ray_view`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from rayjobs.contract.status import Status
from rayjobs.contract.wire import JobView

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def all_jobs(d: "Dashboard") -> list[JobView]:
    """The queue's jobs (oldest first), then the Ray jobs it does not know (one GET each)."""
    mine = d.queue.views()
    known = {v.submission_id for v in mine}
    # Ray's dicts (a Dashboard), or a door's views of the jobs it does not know (a DoorCluster)
    return mine + [v for v in map(JobView.from_ray, d.list_jobs()) if v.submission_id not in known]


def queue_job(d: "Dashboard", job_id: str) -> Optional[JobView]:
    """The queue's view of one job, or None if the queue has no record of it."""
    return d.queue.view(job_id)


def ray_view(d: "Dashboard", job_id: str, *, foreign: bool = True) -> JobView:
    """Ray's details of one job as a view (``foreign``: the queue does not know it).

    Raises:
        JobNotFound: Ray does not list it.
    """
    return JobView.from_ray(d.job(job_id), foreign=foreign)


def job(d: "Dashboard", job_id: str) -> Optional[JobView]:
    """One job: the queue's view, else Ray's details (a job the queue does not know), else None."""
    from rayjobs.errors import JobNotFound

    v = d.queue.view(job_id)
    if v is not None:
        return v
    try:
        return ray_view(d, job_id)
    except JobNotFound:
        return None


def is_waiting(v: Optional[JobView]) -> bool:
    """Is the job in line (or going back to it after a preemption)?"""
    return v is not None and v.status == Status.QUEUED


def preempted_by(v: Optional[JobView]) -> Optional[str]:
    """Who preempted a job going back in line (None: it was not preempted)."""
    if v is None or not is_waiting(v):
        return None
    return str((v.preempted or {}).get("by") or "") or None

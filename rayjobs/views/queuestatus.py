"""The queue seen from the laptop: its waiting jobs, in order, and the jobs it has finished.

A waiting job has no Ray job yet (the queue submits it when it fits), and a finished one may be
gone from Ray's job table (the queue prunes it): both come from the queue's own files
(:func:`rayjobs.client.queuechannel.read_status`, :func:`~rayjobs.client.queuechannel.read_history`),
read once per command into a :class:`QueueView`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


@dataclass
class QueueView:
    """One reading of the queue: ``waiting`` (id -> its entry, in order), ``admitted`` (ids),
    ``history`` (id -> finished job), ``live``: the queue has run in this Ray session."""

    waiting: dict[str, dict[str, Any]] = field(default_factory=dict)
    admitted: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: dict[str, dict[str, Any]] = field(default_factory=dict)
    live: bool = False
    cluster: dict[str, Any] = field(default_factory=dict)
    #: preempted jobs between their stop and their place back in line (id -> {"by", "phase"})
    preempted: dict[str, dict[str, Any]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)  #: GPUs held / jobs per user, quota

    @classmethod
    def read(cls, d: "Dashboard", *, revive: bool = True, history: bool = True) -> "QueueView":
        """Read the queue's files (reviving the queue first, if it has not run in this Ray session)."""
        from rayjobs.client import queuechannel

        try:
            doc = queuechannel.ensure_queue(d) if revive else queuechannel.read_status(d)
        except Exception:  # noqa: BLE001  (a view shows Ray's jobs even when the queue is away)
            doc = None
        doc = doc or {}
        return cls(waiting={e["id"]: e for e in doc.get("queue", [])},
                   admitted={e["id"]: e for e in doc.get("admitted", [])},
                   history=queuechannel.read_history(d) if history else {},
                   live=bool(doc), cluster=dict(doc.get("cluster") or {}),
                   preempted=dict(doc.get("preempted") or {}), users=dict(doc.get("users") or {}))

    def ids(self) -> set[str]:
        return set(self.waiting) | set(self.admitted) | set(self.history)

    def holds(self, job_id: str) -> bool:
        """Is this job the queue's, whatever Ray says of it: waiting (its pre-started Ray job, or the
        STOPPED entry of a preempted run) or going back in line after a preemption?"""
        return job_id in self.waiting or (self.preempted.get(job_id) or {}).get("phase") == "requeueing"

    def preempting_for(self, job_id: str) -> Optional[str]:
        """The job a running job is being stopped for (at its next checkpoint), if any."""
        return (self.admitted.get(job_id) or {}).get("preempting_for") or None

    def handing_to_ray(self, job_id: str) -> bool:
        """Admitted, and Ray does not have it yet (the queue's submit of it is in flight)."""
        return job_id in self.admitted and not self.admitted[job_id].get("in_ray")

    def position(self, job_id: str) -> Optional[int]:
        e = self.waiting.get(job_id)
        return int(e["position"]) if e else None

    def as_job(self, job_id: str) -> Optional[dict[str, Any]]:
        """A job the queue holds (waiting) or has finished, in the dict form of Ray's job details."""
        if job_id in self.waiting:
            e = self.waiting[job_id]
            return {"submission_id": job_id, "status": "QUEUED", "metadata": e.get("metadata") or {},
                    "message": e.get("reason"), "start_time": None, "end_time": None,
                    "queue_position": int(e["position"]), "held": e.get("held"), "preempted": e.get("preempted"),
                    "preemptions": e.get("preemptions")}
        if self.holds(job_id):  # stopped for a preemption; its place in line comes in a moment
            meta = (self.admitted.get(job_id) or {}).get("metadata") or {}
            return {"submission_id": job_id, "status": "QUEUED", "metadata": meta, "start_time": None,
                    "end_time": None, "message": "preempted: going back to its place in the queue",
                    "preempted": {"by": self.preempted[job_id].get("by")}}
        h = self.history.get(job_id)
        if h is None and job_id in self.admitted:  # admitted; Ray does not list it (yet)
            e = self.admitted[job_id]
            return {"submission_id": job_id, "status": "PENDING", "metadata": e.get("metadata") or {},
                    "message": "admitted: the queue is submitting it to Ray", "start_time": None,
                    "end_time": None}
        if h is None:
            return None
        return {"submission_id": job_id, "status": h.get("status"), "metadata": h.get("metadata") or {},
                "message": h.get("message"), "start_time": h.get("start_time"), "end_time": h.get("end_time"),
                "driver_node_id": (h.get("log") or {}).get("node_id"), "final": h.get("final"), "from_queue": True,
                "cause": h.get("cause"), "checkpoint_step": h.get("checkpoint_step"),
                "reaped": h.get("reaped") or []}


def all_jobs(d: "Dashboard", view: Any = None) -> list[Any]:
    """Ray's jobs, plus (as dicts) those the queue holds or finished that Ray does not list: every job
    of the cluster, as ``list`` and ``status`` see them (one read of Ray's job list and of ``view``)."""
    view = view or QueueView.read(d)
    # An entry without metadata for a job the queue finished is the one Ray writes back for a job
    # pruned from its table while the supervisor was exiting: the queue's history is the truth.
    # A pre-started job (the queue's standby) is QUEUED while the queue lists it as waiting.
    jobs: list[Any] = [queue_overlay(j, view) for j in d.list_jobs()
                       if (j.get("metadata") or j.get("submission_id") not in view.history)
                       and j.get("submission_id") not in view.waiting]
    in_ray = {j.get("submission_id") for j in jobs}
    jobs += [view.as_job(i) for i in sorted(view.ids() - in_ray)]
    return jobs


def queue_overlay(job: dict[str, Any], view: Any) -> dict[str, Any]:
    """A Ray job (dict) as the queue sees it: a preempted run that Ray shows STOPPED is QUEUED
    (going back to its place in line); a run being preempted carries ``preempting_for``."""
    sid = job.get("submission_id")
    if view.holds(sid):
        return dict(job, status="QUEUED", end_time=None, preempted={"by": view.preempted[sid].get("by")},
                    message="preempted: going back to its place in the queue")
    by = view.preempting_for(sid)
    return dict(job, preempting_for=by) if by else job

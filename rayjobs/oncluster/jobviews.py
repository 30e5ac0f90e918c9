"""What the queue shows: each job as a :class:`rayjobs.contract.wire.JobView`, the list, the summary.

Read-only over the queue service's memory (records, the line, the last decision); built as plain
dicts with exactly the JobView's fields (a list of 10,000 jobs is encoded once, not through a
dataclass per job), checked against the wire classes in the tests.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Optional, Sequence

from rayjobs.contract import wire
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State, Status, word
from rayjobs.oncluster.clusterstate import describe_cluster
from rayjobs.oncluster.headapi import LOST
from rayjobs.oncluster.jobrecord import runner_cause
from rayjobs.oncluster.queuestate import Running, Waiting
from rayjobs.shared import __version__

#: Waiting jobs the summary lists with their reasons (``rayjobs cluster`` shows the line's head).
SUMMARY_LINE = 50


#: The record-only part of each job's view and its place in the list, by id, with the record they
#: were built from. A record is frozen and replaced on every change, so ``is`` says they are
#: current; a list of 10,000 jobs then copies 10,000 small dicts instead of building them (0.17 ->
#: 0.03 s, measured).
_BASES: dict[str, tuple[JobRecord, dict[str, Any], tuple]] = {}


def _cached(rec: JobRecord) -> tuple[JobRecord, dict[str, Any], tuple]:
    hit = _BASES.get(rec.id)
    if hit is None or hit[0] is not rec:
        hit = _BASES[rec.id] = (rec, _record_part(rec), _order(rec))
    return hit


def _base(rec: JobRecord) -> dict[str, Any]:
    return dict(_cached(rec)[1])


def warm(recs: Iterable[JobRecord]) -> None:
    """Build the list's parts of just-queued records now (a sweep's submit pays 15 us a point),
    so the first list after a big sweep is as fast as the next."""
    for rec in recs:
        _cached(rec)


def _forget_gone(records: Any) -> None:
    """Drop the parts of records the queue no longer holds (pruned)."""
    if len(_BASES) > len(records):
        for i in [i for i in _BASES if i not in records]:
            del _BASES[i]


def _record_part(rec: JobRecord) -> dict[str, Any]:
    return {"submission_id": rec.id, "state": rec.state.value, "metadata": rec.metadata, "message": None,
            "queue_position": None, "held": None, "queued_at": rec.queued_at, "admitted_at": rec.admitted_at,
            "finished_at": rec.finished_at, "start_time": rec.start_time, "end_time": rec.end_time,
            "driver_node_id": (rec.log or {}).get("node_id"), "in_ray": False, "cause": rec.cause,
            "checkpoint_step": rec.checkpoint_step, "attempts": list(rec.attempts), "first_attempt": rec.first_attempt,
            "lost": rec.lost, "preemptions": rec.preemptions, "preempted": rec.preempted, "preempting_for": None,
            "reaped": list(rec.reaped), "final": rec.final, "pruned": rec.pruned, "from_queue": rec.done,
            "rungs": dict(rec.rungs or {}), "halved": rec.halved, "preempt_why": (rec.preempting or {}).get("why"),
            "lost_runs": [dict(h) for h in rec.history if "lost_at" in h], "spans": [list(s) for s in rec.spans],
            "foreign": False}


def reason(svc: Any, w: Waiting) -> str:
    """Why a waiting job waits, by the last decision (the rules look at the line only as far as
    anything can change: the rest wait behind them)."""
    d = svc.decision
    if w.id in d.notes:
        return d.notes[w.id]
    if d.gate:
        return f"waiting: {d.gate}"
    if d.reserving_for and d.reserving_for in svc.state.waiting \
            and w.req.key() > svc.state.waiting[d.reserving_for].req.key():
        return d.blocked
    return "waiting behind the jobs ahead of it in line"


def waiting_view(svc: Any, w: Waiting, position: Optional[int] = None) -> dict[str, Any]:
    v = _base(w.rec)
    v.update(status=Status.QUEUED, queue_position=position or svc.state.position(w.id), message=reason(svc, w),
             held=svc.decision.holds.get(w.id))
    return v


def running_view(r: Running) -> dict[str, Any]:
    v = _base(r.rec)
    ray = r.ray or {}
    v.update(in_ray=r.in_ray, preempting_for=r.preempting_for or None, start_time=ray.get("start_time"),
             driver_node_id=ray.get("driver_node_id"), message=ray.get("message") or r.rec.note or None)
    if not r.in_ray:
        v.update(status=Status.PENDING, message="admitted: the queue is submitting it to Ray")
    elif r.ended and r.ended != LOST:
        v["status"] = r.ended
        if r.ended == Status.FAILED and not v["cause"]:  # its leftovers are being reaped: the record waits for that
            v["cause"] = runner_cause(str(ray.get("message") or ""))
        if r.rec.preempting and r.ended == Status.STOPPED and not r.stop_asked:
            v.update(status=Status.QUEUED, message="preempted: going back to its place in the queue",
                     preempted={"by": r.rec.preempting.get("by"), "why": r.rec.preempting.get("why")})
    elif r.ended == LOST:
        v.update(status=Status.QUEUED, message="its Ray run was lost with the head: it goes back in line once its "
                                          "leftovers are ended (or fails, with no retry left)")
    else:
        v["status"] = word(ray.get("status"), Status.PENDING)
    return v


def done_view(rec: JobRecord) -> dict[str, Any]:
    v = _base(rec)
    v.update(status=str(rec.status or Status.UNKNOWN), message=rec.message or None)
    return v


def unreadable_view(job_id: str, path: Any) -> dict[str, Any]:
    return wire.to_json(wire.JobView(
        submission_id=job_id, status=Status.UNKNOWN, state="", from_queue=True,
        message=f"its queue record {path} is unreadable (cut mid-write, or edited by hand): the queue cannot run "
                f"or show it; restore the file or delete it"))


def foreign_view(job: dict[str, Any]) -> dict[str, Any]:
    """A Ray job the queue does not know (a plain ``ray job submit``, a driver) as a JobView: Ray's
    word on it, ``state`` "" and ``foreign``."""
    return {"submission_id": str(job.get("submission_id") or job.get("job_id") or ""),
            "status": word(job.get("status"), Status.UNKNOWN), "state": "",
            "metadata": {str(k): str(v) for k, v in (job.get("metadata") or {}).items()},
            "message": job.get("message"), "queue_position": None, "held": None, "queued_at": None,
            "admitted_at": None, "finished_at": None, "start_time": job.get("start_time"),
            "end_time": job.get("end_time"), "driver_node_id": job.get("driver_node_id"), "in_ray": True,
            "cause": None, "checkpoint_step": None, "attempts": [], "first_attempt": None, "lost": 0, "preemptions": 0,
            "preempted": None, "preempting_for": None, "reaped": [], "final": None, "pruned": False,
            "from_queue": False, "rungs": {}, "halved": None, "preempt_why": None, "lost_runs": [], "spans": [], "foreign": True}


def job_view(svc: Any, job_id: str) -> Optional[dict[str, Any]]:
    """One job's view, or None if the queue has no record of it."""
    st = svc.state
    if job_id in st.waiting:
        return waiting_view(svc, st.waiting[job_id])
    r = st.running.get(job_id) or st.ending.get(job_id)
    if r is not None:
        return running_view(r)
    rec = svc.records.get(job_id)
    if rec is not None:
        return done_view(rec)
    if job_id in svc.store.unreadable:
        return unreadable_view(job_id, svc.store.unreadable[job_id])
    return None


def _order(rec: JobRecord) -> tuple:
    return (rec.meta.submitted_ts() or rec.queued_at, rec.point, rec.queued_at, rec.id)


def all_views(svc: Any) -> list[dict[str, Any]]:
    """Every job's view, oldest first (submission, then sweep point), unreadable records last."""
    st = svc.state
    positions = {w.id: i + 1 for i, w in enumerate(st.in_order())}
    out = []
    for rec in sorted(svc.records.values(), key=lambda rec: _cached(rec)[2]):
        if rec.id in st.waiting:
            out.append(waiting_view(svc, st.waiting[rec.id], positions[rec.id]))
        elif rec.id in st.running or rec.id in st.ending:
            out.append(running_view(st.running.get(rec.id) or st.ending[rec.id]))
        else:
            out.append(done_view(rec))
    out += [unreadable_view(i, p) for i, p in sorted(svc.store.unreadable.items()) if i not in svc.records]
    _forget_gone(svc.records)
    return out


def select(views: Iterable[dict[str, Any]], *, sweep: Optional[str] = None, statuses: Sequence[str] = (),
           user: Optional[str] = None, experiment: Optional[str] = None, since: Optional[float] = None) -> list[dict[str, Any]]:
    """The views that pass every filter given."""
    want = {s.upper() for s in statuses}
    out = []
    for v in views:
        m = v.get("metadata") or {}
        if (sweep and m.get("sweep") != sweep) or (want and v["status"] not in want) \
                or (user and m.get("user") != user) or (experiment and m.get("experiment") != experiment) \
                or (since and float(v.get("queued_at") or 0) < since):
            continue
        out.append(v)
    return out


def summary(svc: Any) -> dict[str, Any]:
    """The queue at a glance (:class:`rayjobs.contract.wire.QueueSummary`)."""
    st = svc.state
    line = [waiting_view(svc, w, i + 1) for i, w in zip(range(SUMMARY_LINE), st.in_order())]
    return {"updated_at": round(time.time(), 3), "waiting": len(st.waiting), "admitted": len(st.running),
            "backfill_s": svc.policy.backfill_s, "reserving_for": svc.decision.reserving_for, "gate": svc.decision.gate,
            "cluster": describe_cluster(svc.nodes), "quota": dict(svc.policy.quota), "users": users(svc),
            "line": line, "running": [running_view(r) for r in st.running.values()]}


def users(svc: Any) -> dict[str, dict[str, Any]]:
    """Per user: GPUs held by admitted jobs, jobs running and waiting, the quota that applies."""
    from rayjobs.oncluster import policy

    out: dict[str, dict[str, Any]] = {}
    for r in svc.state.running.values():
        u = out.setdefault(r.req.user, {"gpus": 0, "running": 0, "waiting": 0})
        u["gpus"] += r.req.gpus
        u["running"] += 1
    for w in svc.state.waiting.values():
        out.setdefault(w.req.user, {"gpus": 0, "running": 0, "waiting": 0})["waiting"] += 1
    for name, u in out.items():
        u["quota"] = policy.cap(dict(svc.policy.quota), name)
    return out


def health(svc: Any) -> dict[str, Any]:
    return {"ok": True, "version": __version__, "session": svc.session, "pid": _pid(), "started_at": svc.started_at,
            "waiting": len(svc.state.waiting), "admitted": len(svc.state.running),
            "unreadable": len(svc.store.unreadable), "verl": _verl(), "store": str(svc.store.root)}


def _verl() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:
        return ""


def _pid() -> int:
    import os

    return os.getpid()

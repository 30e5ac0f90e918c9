"""A team's own history as a trace (``rayjobs replay``), pure: the queue's views of its jobs
(``GET /v1/jobs``: :class:`~rayjobs.contract.wire.JobView` dicts) and where each job's GPU time went
(``GET /v1/usage``'s per-job rows, :mod:`rayjobs.oncluster.usage`) become trace jobs; what the
queue did with them becomes the ``recorded`` row beside the policies'.

Per job with GPUs that ran (done, or running now: its length so far): it arrived when it was
queued; its groups, priority, preemptibility, sweep, halving, dependencies and retries are its
metadata's; its steps are its last metrics step (1 if it logged none) and a step takes its kept
GPU-seconds over its GPUs and steps; its start-up is its start-up GPU-seconds over its GPUs and
admissions. A run that failed fails at its last step again. A halved point's run is as long as it
was (halving is not simulated again: its steps are what halving left). What the history cannot say is guessed
and named here: a checkpoint every tenth of its steps where it saved any; the Slurm time limit twice
its run. Jobs still waiting, and jobs without GPUs, are left out (counted).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.status import Status
from rayjobs.sim import metrics
from rayjobs.sim.trace import KINDS, Trace, TraceJob, make


def trace_from(views: Iterable[Mapping[str, Any]], usage_jobs: Mapping[str, Mapping[str, Any]], *, nodes: int,
               gpus_per_node: int, name: str = "history") -> tuple[Trace, dict[str, Any]]:
    """(the trace of the jobs that ran, what was left out and why)."""
    ran, left = [], {"waiting": 0, "no_gpus": 0, "no_usage": 0}
    for v in views:
        meta = JobMeta.from_ray(v.get("metadata") or {})
        if not meta.gpu_groups:
            left["no_gpus"] += 1
        elif v.get("state") == "waiting" or not v.get("queued_at"):
            left["waiting"] += 1
        elif str(v.get("submission_id")) not in usage_jobs:
            left["no_usage"] += 1
        else:
            ran.append((v, meta, usage_jobs[str(v["submission_id"])]))
    t0 = min((float(v["queued_at"]) for v, _, _ in ran), default=0.0)
    jobs = [_job(v, meta, u, t0) for v, meta, u in ran]
    ids = {j.id for j in jobs}
    jobs = [TraceJob(**{**j.__dict__, "after": tuple(a for a in j.after if a in ids)}) for j in jobs]
    return make(jobs, name=name, nodes=nodes, gpus_per_node=gpus_per_node, start=t0), {"jobs": len(jobs), "left_out": left}


def _job(v: Mapping[str, Any], meta: JobMeta, u: Mapping[str, Any], t0: float) -> TraceJob:
    gpus = max(1, meta.gpus)
    spans = max(1, len(v.get("spans") or []))
    steps = int((v.get("final") or {}).get("step") or 0) or 1
    kept_s = float(u.get("productive") or 0.0) / gpus
    startup_s = float(u.get("startup") or 0.0) / gpus / spans
    if kept_s <= 0:  # no step logged: its GPU time less the start-up is its run
        kept_s = max(1.0, float(u.get("allocated") or 0.0) / gpus - startup_s * spans)
    failed = str(v.get("status")) == Status.FAILED and steps > 1
    return TraceJob(id=str(v["submission_id"]), user=meta.user or "unknown", arrival_s=round(float(v["queued_at"]) - t0, 3),
                    groups=tuple(meta.gpu_groups), step_s=max(0.001, kept_s / steps), steps=steps + (1 if failed else 0),
                    startup_s=round(startup_s, 3), ckpt_every=max(1, steps // 10) if v.get("checkpoint_step") else 0,
                    priority=meta.priority, preemptible=meta.preemptible, sweep=meta.sweep,
                    fail_at=(steps,) if failed else (), retries=meta.max_retries, after=tuple(meta.after))


def recorded(views: Iterable[Mapping[str, Any]], usage_jobs: Mapping[str, Mapping[str, Any]], trace: Trace) -> dict[str, Any]:
    """What the queue did with the trace's jobs: their waits (the usage rows') and times to done."""
    by_id = {str(v.get("submission_id")): v for v in views}
    cls = {j.id: j.cls for j in trace.jobs}
    waits = {j.id: float(usage_jobs[j.id].get("waited") or 0.0) for j in trace.jobs}
    jcts = [float(by_id[i]["finished_at"]) - float(by_id[i]["queued_at"]) for i in cls
            if by_id.get(i, {}).get("finished_at")]
    return {"mean_wait_s": _r(metrics.mean(waits.values())),
            "p95_wait_s": {k: _r(metrics.quantile([w for i, w in waits.items() if cls[i] == k], 0.95)) for k in KINDS
                           if any(c == k for c in cls.values())},
            "mean_jct_s": _r(metrics.mean(jcts)), "waits": sorted(waits.values())}


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(float(x), 1)

"""The door's job routes: queue, list, one job, stop, resume, rerun -- with their owners checked.

A job's owner is its metadata ``user``. Queueing sets it: a member's jobs are its own (a
``rayjobs.user`` naming anyone else is refused, one line naming both), an admin's keep the user
asked for (default the admin), and every job records who queued it (``queued_by``). Stop, resume
and rerun of another's job (every id of a request, a sweep's points included) are refused before
anything changes.
"""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response

from rayjobs.contract import wire
from rayjobs.contract.meta import JobMeta
from rayjobs.contract.status import TERMINAL
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import Context, answer, ctx, encode
from rayjobs.door.identity import who
from rayjobs.door.permissions import refuse_control, refuse_queue
from rayjobs.oncluster import jobviews
from rayjobs.oncluster.headapi import LOST
from rayjobs.oncluster.queuerequests import RequestError
from rayjobs.shared import ROLE_KEY
from rayjobs.door.refusals import BODY, COMMON, refusals

DEFAULT_LIMIT = 1000  #: jobs per page of the list unless ``limit`` says otherwise
MAX_LIMIT = 100_000
router = APIRouter(prefix=PREFIX, responses=COMMON)


# --------------------------------------------------------------------------- owners
def owned(request: Request, jobs: list[wire.JobSubmit]) -> None:
    """Every job's ``user`` and ``queued_by`` set by the identity (all checked first).

    Raises:
        RequestError: 403 -- a viewer; a member queueing as another user.
    """
    ident = who(request)
    metas = [JobMeta.from_ray(j.metadata) for j in jobs]
    for meta in metas:
        refusal = refuse_queue(ident.name, ident.role, meta.user)
        if refusal:
            raise RequestError(403, refusal)
    for job, meta in zip(jobs, metas):
        job.metadata = meta.with_(user=meta.user or ident.name, queued_by=ident.name).to_ray()


def owner_of(rj: Context, job_id: str) -> Optional[str]:
    """A job's owner ("" when it records none), or None when the queue has no record of it."""
    rec = rj.svc.records.get(job_id)
    return rec.meta.user if rec is not None else None


def may_control(request: Request, verb: str, ids: list[str]) -> None:
    """Raises RequestError 403 (one line naming the owner) unless the caller may ``verb`` every job
    of ``ids`` that the queue knows (an unknown id is the route's 404)."""
    ident, rj = who(request), ctx(request)
    for job_id in dict.fromkeys(ids):
        owner = owner_of(rj, job_id)
        if owner is None and job_id in rj.svc.store.unreadable:
            owner = ""  # its record cannot say whose it is: an admin's to act on
        if owner is None:
            continue
        refusal = refuse_control(ident.name, ident.role, verb, job_id, owner)
        if refusal:
            raise RequestError(403, refusal)
    request.state.audit_target = list(dict.fromkeys(ids))


# --------------------------------------------------------------------------- routes
async def enqueue_now(request: Request, body: wire.EnqueueRequest) -> Response:
    """Check the whole request, write its records durably (in the I/O pool), then queue them."""
    rj = ctx(request)
    owned(request, body.jobs)
    recs, existing = rj.reqs.plan(body)
    rj.reqs.reserve(recs)
    try:
        written = await rj.in_io(rj.reqs.write, recs)
    except BaseException:
        rj.reqs.release(recs)
        raise
    rj.reqs.commit(written)
    rj.kick()
    jobviews.warm(written)
    ids = [j.submission_id for j in body.jobs]
    request.state.audit_target = ids
    request.state.audit_result = f"queued {len(written)}" + (f", {len(existing)} there already" if existing else "")
    return answer({"ids": ids, "queued": [r.id for r in written], "existing": existing}, 201)


@router.post("/jobs", response_model=wire.EnqueueReply, status_code=201, summary="Queue jobs, all or none",
             responses=refusals(*BODY, 403, 404, 409, 507))
async def enqueue(request: Request, body: wire.EnqueueRequest) -> Any:
    return await enqueue_now(request, body)


@router.get("/jobs", response_model=wire.JobList, summary="List jobs, oldest first", responses=refusals(422))
async def list_jobs(request: Request, sweep: Optional[str] = None, status: list[str] = Query(default=[]),
                    user: Optional[str] = None, experiment: Optional[str] = None, since: Optional[float] = None,
                    limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
                    cursor: Optional[str] = Query(default=None, pattern=r"^\d+$"), foreign: bool = False) -> Any:
    rj = ctx(request)
    extra = await foreign_views(rj) if foreign else []  # Ray's word, asked anew: never kept

    def page() -> dict[str, Any]:
        views = jobviews.all_views(rj.svc) + extra
        picked = jobviews.select(views, sweep=sweep, statuses=status, user=user, experiment=experiment, since=since)
        start = int(cursor or 0)
        more = start + limit < len(picked)
        return {"jobs": picked[start:start + limit], "total": len(picked), "next": str(start + limit) if more else None}

    if foreign:
        return answer(page())
    query = (sweep, tuple(status), user, experiment, since, limit, cursor)
    return Response(rj.lists.body(rj.svc, query, page, encode), media_type="application/json")


async def foreign_views(rj: Context) -> list[dict[str, Any]]:
    """The Ray jobs the queue does not know (a plain ``ray job submit``; rayjobs' own small jobs
    left out), as JobViews (``foreign``); none when Ray does not answer."""
    found = await rj.in_io(rj.svc.jobs.list_jobs)
    known = rj.svc.records
    return [jobviews.foreign_view(j) for j in found
            if ROLE_KEY not in (j.get("metadata") or {}) and (j.get("submission_id") or j.get("job_id")) not in known]


@router.get("/jobs/{job_id}", response_model=wire.JobView, summary="One job", responses=refusals(404))
async def get_job(request: Request, job_id: str) -> Any:
    view = jobviews.job_view(ctx(request).svc, job_id)
    if view is None:
        raise HTTPException(404, f"no job {job_id!r} in the queue; `rayjobs list` shows the ids")
    return answer(view)


@router.post("/jobs/stop", response_model=wire.StopReply, summary="Stop jobs (every one yours, or you an admin)",
             responses=refusals(*BODY, 403, 404, 507))
async def stop_jobs(request: Request, body: wire.StopRequest) -> Any:
    rj = ctx(request)
    may_control(request, "stop", body.ids)
    out = rj.reqs.stop(body.ids, body.mode, body.timeout_s)
    rj.kick()
    await rj.written(body.ids)
    request.state.audit_result = ", ".join(f"{o.id} {o.outcome}" for o in out)[:500]
    return answer({"results": [wire.to_json(o) for o in out]})


@router.post("/jobs/{job_id}/stop", response_model=wire.StopOutcome, summary="Stop one job",
             responses=refusals(403, 404, 409, 422, 507))
async def stop_one(request: Request, job_id: str, mode: str = Query(default="now", pattern="^(now|checkpoint)$"),
                   timeout_s: float = 3600.0) -> Any:
    rj = ctx(request)
    may_control(request, "stop", [job_id])
    view = jobviews.job_view(rj.svc, job_id)
    if view is None and job_id not in rj.svc.store.unreadable:
        return await stop_foreign(request, job_id)
    if view is not None and view["state"] == "done":
        raise HTTPException(409, f"{job_id} has ended ({view['status']}): nothing to stop")
    [out] = rj.reqs.stop([job_id], mode, timeout_s)
    rj.kick()
    await rj.written([job_id])
    request.state.audit_result = f"{out.outcome}: {out.message}"
    return answer(wire.to_json(out))


async def stop_foreign(request: Request, job_id: str) -> Response:
    """Stop a Ray job the queue does not know (a plain ``ray job submit``): it records no owner, so
    only an admin may; 404 when Ray does not know it either."""
    rj, ident = ctx(request), who(request)
    info = await rj.in_io(rj.svc.jobs.details, job_id)
    if not info or info.get("status") in (None, LOST):
        raise HTTPException(404, f"no job {job_id!r} in the queue or in Ray; `rayjobs list` shows the ids")
    refusal = refuse_control(ident.name, ident.role, "stop", job_id, "")
    if refusal:
        raise RequestError(403, refusal)
    status = str(info.get("status") or "").split(".")[-1]
    if status in TERMINAL:
        raise HTTPException(409, f"{job_id} has ended ({status}): nothing to stop")
    await rj.in_io(rj.svc.jobs.stop, job_id)
    request.state.audit_result = "asked Ray to stop it (a job the queue does not know)"
    return answer(wire.to_json(wire.StopOutcome(job_id, "stopping", status, "asked Ray to stop it (SIGTERM, then "
                                                                            "the head's grace period)")))


@router.post("/jobs/{job_id}/resume", response_model=wire.JobView, status_code=201,
             summary="Resume an ended job's run as a new job",
             responses={200: {"model": wire.JobView, "description": "resumed before: that job"},
                        **refusals(*BODY, 403, 404, 409, 507)})
async def resume(request: Request, job_id: str, body: wire.ResumeRequest) -> Any:
    rj = ctx(request)
    may_control(request, "resume", [job_id])
    rec, new = rj.reqs.plan_resume(job_id, body.new_id, queued_by=who(request).name)
    if new:
        rj.reqs.reserve([rec])
        try:
            [rec] = await rj.in_io(rj.reqs.write, [rec])
        except BaseException:
            rj.reqs.release([rec])
            raise
        rj.reqs.commit([rec])
        rj.kick()
    request.state.audit_target = [job_id, rec.id]
    request.state.audit_result = f"resumed as {rec.id}" if new else f"resumed already as {rec.id}"
    return answer(jobviews.job_view(rj.svc, rec.id), 201 if new else 200)


@router.post("/jobs/{job_id}/rerun", response_model=wire.EnqueueReply, status_code=201,
             summary="Queue a new job with this job's code snapshot", responses=refusals(*BODY, 403, 404, 409, 507))
async def rerun(request: Request, job_id: str, body: wire.RerunRequest) -> Any:
    may_control(request, "rerun", [job_id])
    got = await enqueue_now(request, wire.EnqueueRequest(jobs=[body.job], code_of=job_id))
    request.state.audit_target = [job_id, body.job.submission_id]
    return got

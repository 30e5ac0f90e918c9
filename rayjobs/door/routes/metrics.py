"""The door's metrics route: a job's run metrics files, read on the head, attempts merged."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from rayjobs.contract import wire
from rayjobs.contract.metrics import run_steps
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import answer, ctx
from rayjobs.door.refusals import COMMON, refusals

router = APIRouter(prefix=PREFIX, responses=COMMON)


@router.get("/jobs/{job_id}/metrics", response_model=wire.Metrics, summary="A job's metrics (its run's files)",
             responses=refusals(404))
async def job_metrics(request: Request, job_id: str) -> Any:
    rj = ctx(request)
    rec = rj.svc.records.get(job_id)
    if rec is None:
        raise HTTPException(404, f"no job {job_id!r} in the queue (a job rayjobs did not queue has no metrics "
                                 f"files it knows); `rayjobs list` shows the ids")
    attempts = list(rec.attempts) or None  # the job's own attempts of its run (a resume's are its own)
    steps = await rj.in_io(run_steps, rec.meta.run_dir, attempts)
    return answer({"steps": [{"step": s, "data": d, "attempt": a} for s, a, d in steps],
                   "attempts": sorted({a for _, a, _ in steps}), "source": "files" if steps else "none"})

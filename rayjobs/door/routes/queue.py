"""The door's routes about the queue as a whole: health, the summary, usage."""

from __future__ import annotations

import time
from typing import Any, Optional

from fastapi import APIRouter, Request

from rayjobs.contract import wire
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import answer, ctx
from rayjobs.oncluster import jobviews
from rayjobs.door.refusals import COMMON, refusals

router = APIRouter(prefix=PREFIX, responses=COMMON)


@router.get("/health", response_model=wire.Health, summary="The queue is up")
async def health(request: Request) -> Any:
    return answer(jobviews.health(ctx(request).svc))


@router.get("/queue", response_model=wire.QueueSummary, summary="The queue at a glance")
async def queue(request: Request) -> Any:
    return answer(jobviews.summary(ctx(request).svc))


@router.get("/usage", response_model=wire.UsageReply, summary="Where the GPU-hours went", responses=refusals(422))
async def usage(request: Request, user: Optional[str] = None, sweep: Optional[str] = None,
                since: Optional[float] = None) -> Any:
    from rayjobs.oncluster import usage as split

    rj = ctx(request)
    records, now = list(rj.svc.records.values()), time.time()  # a snapshot, taken on the loop's thread
    got = await rj.in_io(lambda: split.usage(records, now, user=user, sweep=sweep, since=since))
    return answer(dict(split.to_json(got), at=now, source="cluster"))

"""The door's cluster route: nodes, GPUs, use, versions and the queue -- read by the head."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from rayjobs.contract import wire
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import answer, ctx
from rayjobs.oncluster import clusterinfo, jobviews
from rayjobs.door.refusals import COMMON

router = APIRouter(prefix=PREFIX, responses=COMMON)


@router.get("/cluster", response_model=wire.ClusterInfo, summary="The cluster: nodes, GPUs, use, versions, the queue")
async def cluster(request: Request) -> Any:
    rj = ctx(request)
    summary, health = jobviews.summary(rj.svc), jobviews.health(rj.svc)  # on the loop's thread
    return answer(await rj.in_io(clusterinfo.cluster_info, rj.dash, summary, health))

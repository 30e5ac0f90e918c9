"""The door's log routes: a job's driver log (whole or its tail) and the log followed from an offset.

Text, not JSON: ``text/plain; charset=utf-8`` as the driver wrote it (ANSI codes included: the
laptop cleans what it shows). ``X-Rayjobs-Log`` says what it is: ``whole`` (the file), ``kept``
(what the queue kept, a first line says so), ``none`` (one line that says why).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response, StreamingResponse

from rayjobs.contract import wire
from rayjobs.contract.wire import LOG_HEADER, PREFIX
from rayjobs.door.context import ctx
from rayjobs.oncluster import joblogs
from rayjobs.door.refusals import COMMON, refusals

router = APIRouter(prefix=PREFIX, responses=COMMON)
TEXT = "text/plain; charset=utf-8"
_TEXT_ANSWER = {200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                      "headers": {LOG_HEADER: {"schema": {"type": "string", "enum": ["whole", "kept", "none"]}}}}}
#: How long one followed stream lasts at most (tests shorten it).
STREAM_ENV = "RAYJOBS_DOOR_STREAM_S"


async def _found(request: Request, job_id: str) -> joblogs.Found:
    rj = ctx(request)
    found = await rj.in_io(joblogs.locate, rj.svc, rj.dash, job_id)
    if found is None:
        raise HTTPException(404, f"no job {job_id!r} in the queue or in Ray; `rayjobs list` shows the ids")
    return found


@router.get("/jobs/{job_id}/log", response_class=Response,
            summary="A job's driver log (whole, or its last `tail` lines), as text", responses={**_TEXT_ANSWER, **refusals(404, 422)})
async def job_log(request: Request, job_id: str, tail: Optional[int] = Query(default=None, ge=0)) -> Any:
    rj = ctx(request)
    found = await _found(request, job_id)
    headers = {LOG_HEADER: found.kind}
    if found.path is not None:
        return StreamingResponse(joblogs.read_file(found.path, tail), media_type=TEXT, headers=headers)
    if found.node_id is not None:
        return StreamingResponse(joblogs.remote_file(rj.dash, found.node_id, job_id, tail), media_type=TEXT,
                                 headers=headers)
    text = found.text
    if found.kind == "kept" and tail is not None:
        first, _, rest = text.partition("\n")
        text = first + "\n" + "".join(rest.splitlines(keepends=True)[-tail:] if tail else [])
    return Response(text, media_type=TEXT, headers=headers)


@router.get("/jobs/{job_id}/log/stream", response_class=Response, responses={**_TEXT_ANSWER, **refusals(404, 422)},
            summary="A job's driver log from byte `offset` as it grows; ends when the job has ended "
                    "and its log is read, or after 10 minutes (reconnect with the bytes you got)")
async def job_log_stream(request: Request, job_id: str, offset: int = Query(default=0, ge=0)) -> Any:
    rj = ctx(request)
    found = await _found(request, job_id)
    max_s = float(os.environ.get(STREAM_ENV) or wire.STREAM_MAX_S)
    stream = joblogs.follow(rj.svc, rj.dash, rj.io, job_id, offset, max_s=min(max_s, wire.STREAM_MAX_S))
    return StreamingResponse(stream, media_type=TEXT, headers={LOG_HEADER: "whole" if found.kind == "whole" else "none"})

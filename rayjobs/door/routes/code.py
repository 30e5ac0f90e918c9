"""The door's code routes: is a snapshot there, upload one (members and admins: it is for queueing)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request

from rayjobs.contract import wire
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import answer, ctx
from rayjobs.door.identity import need, who
from rayjobs.door.permissions import Action
from rayjobs.oncluster.queuerequests import RequestError
from rayjobs.door.refusals import BODY, COMMON, refusals

router = APIRouter(prefix=PREFIX, responses=COMMON)


@router.get("/code/{key}", response_model=wire.CodeReply, summary="Is this code snapshot on the cluster",
            responses=refusals(404))
async def has_code(request: Request, key: str) -> Any:
    if not ctx(request).svc.store.code_wanted(key):
        raise HTTPException(404, f"code {key} is not on the cluster")
    return answer({"key": key, "present": True})


_ZIP_BODY = {"requestBody": {"required": True,
                             "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}}}}


@router.put("/code/{key}", response_model=wire.CodeReply, status_code=201, openapi_extra=_ZIP_BODY,
            summary="Upload a code snapshot (a zip archive)",
            responses={200: {"model": wire.CodeReply, "description": "it was there already"}, **refusals(403, 413, 422)})
async def put_code(request: Request, key: str) -> Any:
    ident = who(request)
    need(request, Action.QUEUE, f"{ident.name} ({ident.role}) may read but not queue jobs: no code upload")
    rj = ctx(request)
    if rj.svc.store.code_wanted(key):
        request.state.audit_result = "there already"
        return answer({"key": key, "present": True}, 200)
    tmp = Path(tempfile.gettempdir()) / f"rayjobs-upload-{uuid.uuid4().hex}.zip"
    try:
        size = 0
        with open(tmp, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > wire.MAX_CODE_BYTES:
                    raise RequestError(413, f"the code archive is over {wire.MAX_CODE_BYTES >> 20} MiB: exclude large "
                                            f"files (.gitignore or rayjobs.excludes)")
                f.write(chunk)
        new = await rj.in_io(rj.reqs.put_code, key, tmp)
    finally:
        tmp.unlink(missing_ok=True)
    request.state.audit_result = f"{size} bytes" if new else "there already"
    return answer({"key": key, "present": True}, 201 if new else 200)

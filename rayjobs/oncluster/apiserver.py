"""The queue's front door: a typed HTTP API on the head's loopback (FastAPI, served by uvicorn in the
queue's own process and event loop: :mod:`rayjobs.oncluster.queueactor`).

Routes (under :data:`rayjobs.contract.wire.PREFIX`; bodies and answers are the classes of
:mod:`rayjobs.contract.wire`, described by ``GET /v1/openapi.json``):

=======  ============================  ==========================================================
GET      /v1/health                    the queue is up: its version, Ray session, counts
POST     /v1/jobs                      queue jobs, all or none (201)
GET      /v1/jobs                      list, oldest first: ``sweep``, ``status`` (repeat), ``user``,
                                       ``experiment``, ``since`` (epoch s), ``limit``, ``cursor``
GET      /v1/jobs/{id}                 one job
POST     /v1/jobs/stop                 stop jobs (now, or at their next checkpoint)
POST     /v1/jobs/{id}/stop            stop one (409 if it has ended)
POST     /v1/jobs/{id}/resume          an ended job's run goes on as a new job (201)
POST     /v1/jobs/{id}/rerun           a new job with this job's code snapshot (201)
GET      /v1/queue                     the line's head with reasons, running jobs, use per user
GET      /v1/usage                     where the GPU-hours went: ``user``, ``sweep``, ``since`` (epoch s)
GET/PUT  /v1/code/{key}                is a code snapshot there / upload its zip archive (201)
GET      /v1/openapi.json              this API's own description (OpenAPI 3.1)
=======  ============================  ==========================================================

Every answer is declared in the OpenAPI document: each route's success (its wire class), the
refusals it gives by status, and ``default``: any other status is a :class:`~rayjobs.contract.wire.ApiError`.

Every request carries the cluster's token as ``Authorization: Bearer`` when the cluster has one
(no token: 401, a wrong one: 403), as Ray's dashboard asks. Every refusal is one JSON line,
``{"error": "..."}``, with its HTTP status; a body over the limit is refused before it is handled.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import pydantic_core
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from rayjobs.contract import wire
from rayjobs.contract.wire import PREFIX
from rayjobs.oncluster import jobviews
from rayjobs.oncluster.queuerequests import QueueRequests, RequestError
from rayjobs.shared import __version__

DEFAULT_LIMIT = 1000  #: jobs per page of the list unless ``limit`` says otherwise
MAX_LIMIT = 100_000

#: What each refusal status means, as the OpenAPI document says it (every one a :class:`wire.ApiError`).
REFUSALS = {
    400: "the body is not JSON",
    401: "no auth token (the cluster's, as Authorization: Bearer)",
    403: "a wrong auth token",
    404: "no such job, record or code snapshot",
    409: "the job's state does not allow it (ended, still running, its code not uploaded yet)",
    413: "the body is over the API's limit",
    422: "a field is missing, unknown or of the wrong type, or a value is refused",
    500: "the queue failed on the request (its log is the queue actor's)",
}


def refusals(*statuses: int) -> dict[Any, dict[str, Any]]:
    """The ``responses`` of a route that refuses with ``statuses`` (all one-line :class:`wire.ApiError`)."""
    return {s: {"model": wire.ApiError, "description": REFUSALS[s]} for s in statuses}


#: Every route: the token's refusals, a crash, and ``default`` -- any other status is an ApiError too
#: (and FastAPI's own 422 schema, which this API never answers with, is not declared).
router = APIRouter(prefix=PREFIX, responses={**refusals(401, 403, 500), "default": {
    "model": wire.ApiError, "description": "any refusal: one line, what was wrong and what to do"}})
_BODY = (400, 413, 422)  #: what a route with a JSON body may answer for the body alone


class Context:
    """What the routes reach through ``request.app.state.rj``."""

    def __init__(self, svc: Any, token: Optional[str], kick: Callable[[], None], io: Any) -> None:
        self.svc, self.token, self.kick, self.io = svc, token, kick, io
        self.reqs = QueueRequests(svc)

    async def in_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)


def _rj(request: Request) -> Context:
    return request.app.state.rj


def answer(doc: Any, status: int = 200) -> Response:
    """A JSON answer encoded once (a list of 10,000 jobs is no dataclass per job), by pydantic's
    Rust encoder (FastAPI's own): 3x json's on 10,000 job views."""
    return Response(pydantic_core.to_json(doc, fallback=str), status_code=status, media_type="application/json")


def auth(request: Request, authorization: Optional[str] = Header(default=None)) -> None:
    token = _rj(request).token
    if token is None:
        return
    if not authorization or not authorization.startswith("Bearer "):
        raise HTTPException(401, "the queue API needs the cluster's auth token (Authorization: Bearer ...): "
                                 "set RAY_AUTH_TOKEN or run `rayjobs connect`")
    if not secrets.compare_digest(authorization[7:].strip().encode(), token.encode()):
        raise HTTPException(403, "the cluster refused the auth token: use the cluster's (RAY_AUTH_TOKEN) or run "
                                 "`rayjobs connect`")


def one_line(err: dict[str, Any]) -> str:
    """A validation error as ``jobs[0].entrypoint: Input should be a valid string``."""
    where = ""
    for part in [p for p in err.get("loc", ()) if p not in ("body", "query", "path")]:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    msg = {"extra_forbidden": "unknown field", "unexpected_keyword_argument": "unknown field", "missing": "missing",
           "missing_argument": "missing"}.get(str(err.get("type")), err.get("msg", "invalid"))
    return f"{where}: {msg}" if where else str(msg)


# --------------------------------------------------------------------------- jobs
@router.get("/health", response_model=wire.Health, summary="The queue is up")
async def health(request: Request) -> Any:
    return answer(jobviews.health(_rj(request).svc))


async def enqueue_now(rj: Context, body: wire.EnqueueRequest) -> Response:
    """Check the whole request, write its records durably (in the I/O pool), then queue them."""
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
    return answer({"ids": [j.submission_id for j in body.jobs], "queued": [r.id for r in written],
                   "existing": existing}, 201)


@router.post("/jobs", response_model=wire.EnqueueReply, status_code=201, summary="Queue jobs, all or none",
             responses=refusals(*_BODY, 404, 409))
async def enqueue(request: Request, body: wire.EnqueueRequest) -> Any:
    return await enqueue_now(_rj(request), body)


@router.get("/jobs", response_model=wire.JobList, summary="List jobs, oldest first", responses=refusals(422))
async def list_jobs(request: Request, sweep: Optional[str] = None, status: list[str] = Query(default=[]),
                    user: Optional[str] = None, experiment: Optional[str] = None, since: Optional[float] = None,
                    limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
                    cursor: Optional[str] = Query(default=None, pattern=r"^\d+$")) -> Any:
    svc = _rj(request).svc
    picked = jobviews.select(jobviews.all_views(svc), sweep=sweep, statuses=status, user=user,
                             experiment=experiment, since=since)
    start = int(cursor or 0)
    more = start + limit < len(picked)
    return answer({"jobs": picked[start:start + limit], "total": len(picked), "next": str(start + limit) if more else None})


@router.get("/jobs/{job_id}", response_model=wire.JobView, summary="One job", responses=refusals(404))
async def get_job(request: Request, job_id: str) -> Any:
    view = jobviews.job_view(_rj(request).svc, job_id)
    if view is None:
        raise HTTPException(404, f"no job {job_id!r} in the queue; `rayjobs list` shows the ids")
    return answer(view)


@router.post("/jobs/stop", response_model=wire.StopReply, summary="Stop jobs", responses=refusals(*_BODY, 404))
async def stop_jobs(request: Request, body: wire.StopRequest) -> Any:
    rj = _rj(request)
    out = rj.reqs.stop(body.ids, body.mode, body.timeout_s)
    rj.kick()
    return answer({"results": [wire.to_json(o) for o in out]})


@router.post("/jobs/{job_id}/stop", response_model=wire.StopOutcome, summary="Stop one job",
             responses=refusals(404, 409, 422))
async def stop_one(request: Request, job_id: str, mode: str = Query(default="now", pattern="^(now|checkpoint)$"),
                   timeout_s: float = 3600.0) -> Any:
    rj = _rj(request)
    view = jobviews.job_view(rj.svc, job_id)
    if view is not None and view["state"] == "done":
        raise HTTPException(409, f"{job_id} has ended ({view['status']}): nothing to stop")
    [out] = rj.reqs.stop([job_id], mode, timeout_s)
    rj.kick()
    return answer(wire.to_json(out))


@router.post("/jobs/{job_id}/resume", response_model=wire.JobView, status_code=201,
             summary="Resume an ended job's run as a new job",
             responses={200: {"model": wire.JobView, "description": "resumed before: that job"},
                        **refusals(*_BODY, 404, 409)})
async def resume(request: Request, job_id: str, body: wire.ResumeRequest) -> Any:
    rj = _rj(request)
    rec, new = rj.reqs.plan_resume(job_id, body.new_id)
    if new:
        rj.reqs.reserve([rec])
        try:
            [rec] = await rj.in_io(rj.reqs.write, [rec])
        except BaseException:
            rj.reqs.release([rec])
            raise
        rj.reqs.commit([rec])
        rj.kick()
    return answer(jobviews.job_view(rj.svc, rec.id), 201 if new else 200)


@router.post("/jobs/{job_id}/rerun", response_model=wire.EnqueueReply, status_code=201,
             summary="Queue a new job with this job's code snapshot", responses=refusals(*_BODY, 404, 409))
async def rerun(request: Request, job_id: str, body: wire.RerunRequest) -> Any:
    return await enqueue_now(_rj(request), wire.EnqueueRequest(jobs=[body.job], code_of=job_id))


@router.get("/queue", response_model=wire.QueueSummary, summary="The queue at a glance")
async def queue(request: Request) -> Any:
    return answer(jobviews.summary(_rj(request).svc))


@router.get("/usage", response_model=wire.UsageReply, summary="Where the GPU-hours went", responses=refusals(422))
async def usage(request: Request, user: Optional[str] = None, sweep: Optional[str] = None,
                since: Optional[float] = None) -> Any:
    import time

    from rayjobs.oncluster import usage as split

    rj = _rj(request)
    records, now = list(rj.svc.records.values()), time.time()  # a snapshot, taken on the loop's thread
    got = await rj.in_io(lambda: split.usage(records, now, user=user, sweep=sweep, since=since))
    return answer(dict(split.to_json(got), at=now, source="cluster"))


# --------------------------------------------------------------------------- code
@router.get("/code/{key}", response_model=wire.CodeReply, summary="Is this code snapshot on the cluster",
            responses=refusals(404))
async def has_code(request: Request, key: str) -> Any:
    if not _rj(request).svc.store.code_wanted(key):
        raise HTTPException(404, f"code {key} is not on the cluster")
    return answer({"key": key, "present": True})


_ZIP_BODY = {"requestBody": {"required": True,
                             "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}}}}


@router.put("/code/{key}", response_model=wire.CodeReply, status_code=201, openapi_extra=_ZIP_BODY,
            summary="Upload a code snapshot (a zip archive)",
            responses={200: {"model": wire.CodeReply, "description": "it was there already"}, **refusals(413, 422)})
async def put_code(request: Request, key: str) -> Any:
    rj = _rj(request)
    if rj.svc.store.code_wanted(key):
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
    return answer({"key": key, "present": True}, 201 if new else 200)


# --------------------------------------------------------------------------- the app
async def _http_error(_: Request, e: StarletteHTTPException) -> Response:
    detail = e.detail if isinstance(e.detail, str) else json.dumps(e.detail)
    if e.status_code == 404 and detail == "Not Found":
        detail = f"no such route; the queue API's routes are under {PREFIX} (GET {PREFIX}/openapi.json)"
    return answer({"error": detail}, e.status_code)


async def _invalid(_: Request, e: RequestValidationError) -> Response:
    errs = list(e.errors())
    if errs and errs[0].get("type") == "json_invalid":
        return answer({"error": f"the body is not JSON ({errs[0].get('ctx', {}).get('error', 'malformed')})"}, 400)
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return answer({"error": (one_line(errs[0]) if errs else "invalid request") + more}, 422)


async def _refused(_: Request, e: RequestError) -> Response:
    return answer({"error": str(e)}, e.status)


async def _crashed(_: Request, e: Exception) -> Response:
    return answer({"error": f"the queue failed on this request ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                            f"its log is the queue actor's on the head"}, 500)


def create_app(svc: Any, token: Optional[str], kick: Callable[[], None] = lambda: None, io: Any = None,
               body_limit: int = wire.MAX_BODY_BYTES) -> FastAPI:
    """The API over the queue service ``svc``. ``token``: the bearer token asked for (None: the
    cluster has no auth); ``kick`` wakes the queue's loop after a change; ``io``: the executor
    that runs the durable writes; ``body_limit``: the largest JSON body taken."""
    app = FastAPI(title="rayjobs queue", version=__version__, openapi_url=None, docs_url=None, redoc_url=None,
                  description=__doc__, dependencies=[Depends(auth)])
    app.state.rj = Context(svc, token, kick, io)
    app.include_router(router)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(RequestError, _refused)
    app.add_exception_handler(Exception, _crashed)

    @app.get(f"{PREFIX}/openapi.json", include_in_schema=False)
    async def openapi() -> Response:
        return answer(app.openapi())

    app.add_middleware(BodyLimit, limit=body_limit)
    return app


class BodyLimit:
    """ASGI middleware: a body over the limit is refused (413) before the app reads it -- from its
    Content-Length, or, sent in chunks, once it grows past the limit. The code upload has its own
    limit (checked as it streams to disk)."""

    def __init__(self, app: Any, limit: int = wire.MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path", "").startswith(f"{PREFIX}/code/"):
            await self.app(scope, receive, send)
            return
        size = dict(scope.get("headers") or []).get(b"content-length")
        if size is not None and size.isdigit() and int(size) > self.limit:
            await self._refuse(send, int(size))
            return
        if size is None and scope.get("method") in ("POST", "PUT"):
            body, more = [], True
            while more:
                msg = await receive()
                body.append(msg.get("body", b""))
                more = msg.get("more_body", False)
                if sum(map(len, body)) > self.limit:
                    await self._refuse(send, sum(map(len, body)))
                    return
            whole = b"".join(body)

            async def replay() -> dict[str, Any]:
                return {"type": "http.request", "body": whole, "more_body": False}

            receive = replay
        await self.app(scope, receive, send)

    async def _refuse(self, send: Any, size: int) -> None:
        body = json.dumps({"error": f"the request body is {size >> 20} MiB or more, over the API's "
                                    f"{self.limit >> 20} MiB: split it (a sweep: several submits)"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

"""The door's app: the queue's typed HTTP API (FastAPI), with identity, permissions and an audit.

Served by :mod:`rayjobs.door.host` in the queue's own process and event loop: on the head's
loopback (plain HTTP; ``rayjobs connect`` tunnels it) and, when ``$RAYJOBS_DOOR_ADDRESS`` is set
on the head, on that address over TLS for teammates. Routes, by noun, in
:mod:`rayjobs.door.routes` (every body and answer a class of :mod:`rayjobs.contract.wire`; the
OpenAPI document is ``GET /v1/openapi.json``):

=========  ===============================  ==============================================  =========
method     route                            what                                            who
=========  ===============================  ==============================================  =========
GET        /v1/health                       the queue is up: version, Ray session, counts   any
GET        /v1/whoami                       the caller's identity                           any
POST       /v1/jobs                         queue jobs, all or none (201)                   member+
GET        /v1/jobs                         list (``foreign=true``: Ray's other jobs too)   any
GET        /v1/jobs/{id}                    one job                                         any
POST       /v1/jobs/stop                    stop jobs (now, or at their next checkpoint)    owner
POST       /v1/jobs/{id}/stop               stop one (409 if it has ended)                  owner
POST       /v1/jobs/{id}/resume             an ended job's run goes on as a new job (201)   owner
POST       /v1/jobs/{id}/rerun              a new job with this job's code snapshot (201)   owner
GET        /v1/jobs/{id}/log                its driver log (``tail=N``), text               any
GET        /v1/jobs/{id}/log/stream         its log from byte ``offset`` as it grows        any
GET        /v1/jobs/{id}/metrics            its run's metrics, attempts merged              any
GET        /v1/queue                        the line's head with reasons, running, users    any
GET        /v1/usage                        where the GPU-hours went                        any
GET        /v1/cluster                      nodes, GPUs, use, versions, the queue           any
GET/PUT    /v1/code/{key}                   is a code snapshot there / upload it (201)      any/member+
GET        /v1/users                        the users                                       admin
POST       /v1/users                        add one: its token, shown once (201)            admin
POST       /v1/users/{name}/revoke          refuse its tokens from the next request         admin
GET        /v1/audit                        the audit (a non-admin: its own entries)        any
POST       /v1/page/link                    a one-time login link to the page (201)         any
=========  ===============================  ==============================================  =========

Identity (:mod:`rayjobs.door.identity`): ``Authorization: Bearer`` with the cluster's token (its
owner, an admin) or a user's token; none or an unknown one is 401, an address with a burst of
failures 429, a permission refused 403 -- checked before anything changes. Every refusal is one
JSON line, ``{"error": "..."}``; a body over the limit is refused before it is handled.

The team's page (:mod:`rayjobs.door.routes.page`) is served at ``/`` on the same port, with a
login session cookie instead of the Bearer header; none of it is under ``/v1`` or in the document.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from rayjobs.contract import wire
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import Context, answer
from rayjobs.oncluster.queuerequests import RequestError
from rayjobs.shared import __version__

def one_line(err: dict[str, Any]) -> str:
    """A validation error as ``jobs[0].entrypoint: Input should be a valid string``."""
    where = ""
    for part in [p for p in err.get("loc", ()) if p not in ("body", "query", "path")]:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    msg = {"extra_forbidden": "unknown field", "unexpected_keyword_argument": "unknown field", "missing": "missing",
           "missing_argument": "missing"}.get(str(err.get("type")), err.get("msg", "invalid"))
    return f"{where}: {msg}" if where else str(msg)


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
               body_limit: int = wire.MAX_BODY_BYTES, *, door_dir: Optional[Path] = None, dash: Any = None,
               url: Optional[str] = None, fingerprint: Optional[str] = None) -> FastAPI:
    """The door over the queue service ``svc``. ``token``: the cluster's own token (its owner's;
    None: the cluster runs without auth, and a plain request on loopback is the owner's); ``kick``
    wakes the queue's loop after a change; ``io``: the executor of the durable writes;
    ``body_limit``: the largest JSON body taken; ``door_dir``: the users, audit and certificate
    (default ``<store>/door``); ``dash``: the head's dashboard client (logs of remote drivers,
    the cluster, foreign jobs); ``url``/``fingerprint``: the TLS door teammates reach."""
    from rayjobs.door.audit_trail import AuditTrail
    from rayjobs.door.identity import identify
    from rayjobs.door.routes import ROUTERS
    from rayjobs.door.routes.page import mount_static
    from rayjobs.door.sessions import OnceCodes, SessionBook

    app = FastAPI(title="rayjobs door", version=__version__, openapi_url=None, docs_url=None, redoc_url=None,
                  description=__doc__, dependencies=[Depends(identify)])
    rj = Context(svc, token, kick, io, door_dir=Path(door_dir or Path(svc.store.root) / "door"), dash=dash, url=url,
                 fingerprint=fingerprint)
    app.state.rj = rj
    app.state.sessions = SessionBook()  #: the page's logins, in this process's memory (a restart logs out)
    app.state.once = OnceCodes()  #: ``rayjobs ui``'s one-time login codes (their hashes), in memory too
    for router in ROUTERS:
        app.include_router(router)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(RequestError, _refused)
    app.add_exception_handler(Exception, _crashed)

    mount_static(app)  # the page's files (rayjobs.page); its routes are page.router's

    @app.get(f"{PREFIX}/openapi.json", include_in_schema=False)
    async def openapi() -> Response:
        return answer(app.openapi())

    app.add_middleware(BodyLimit, limit=body_limit)
    app.add_middleware(AuditTrail, rj=rj, clock=time.time)  # outermost: it sees every answer, a 413 too
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

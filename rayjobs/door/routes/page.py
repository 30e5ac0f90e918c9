"""The door's page routes: the team's page at ``/`` on the API's own port (none in the OpenAPI
document, none under ``/v1``).

A browser logs in with a user's token (``POST /login``): the door answers with a session cookie
(:mod:`rayjobs.door.sessions`; HttpOnly, SameSite=Strict, Secure over TLS) and the page's routes
take that identity (:func:`rayjobs.door.identity.from_session`). Logged out, every page is the
login. Reads use the queue's own views (the API's); every action is a POST form with the session's
CSRF token, and runs the API's own route function -- the same permission check, the same audit
line: a member's stop of another's job is refused (403) before anything changes.

=====  ============================  ============================================
GET    /login, POST /login           the login form; a token -> a session cookie
GET    /login/once?code=             a one-time code (``rayjobs ui``) -> a session cookie
POST   /logout                       end the session (CSRF)
GET    /                             the queue (``user``, ``sweep``, ``status``, ``page``)
GET    /jobs/{id}                    a job: facts, actions, curves, its log followed
POST   /jobs/{id}/stop | resume      its actions (CSRF; ``mode=checkpoint``: at its next checkpoint)
GET    /sweeps/{sweep}               a sweep: compare table, curves, halving's rungs
GET    /team                         usage per user and the cluster's GPUs, who holds each
GET    /page/...                     the partial updates and the data the page's script polls
=====  ============================  ============================================

One route of the API (``api``, under ``/v1``, in the document): ``POST /v1/page/link`` -- with the
caller's token, a one-time login code for the page (:class:`rayjobs.door.sessions.OnceCodes`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any, Optional
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from rayjobs.contract import wire
from rayjobs.contract.metrics import run_steps
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import answer, ctx
from rayjobs.door.identity import client_addr, resolve, who
from rayjobs.door.permissions import refuse_control
from rayjobs.door.routes import jobs as job_routes
from rayjobs.door.refusals import COMMON
from rayjobs.door.sessions import csrf_ok
from rayjobs.oncluster import joblogs, jobviews
from rayjobs.oncluster.queuerequests import RequestError
from rayjobs.page import STATIC, views
from rayjobs.page.render import render

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix=PREFIX, responses=COMMON)  #: the page's one route in the API (a token's)
LOG_CHUNK = 256 << 10  #: the most one poll of a followed log sends
LOG_WAIT_S = 25.0  #: the longest a log poll waits for new bytes
LOG_POLL_S = 0.25  #: how often it looks meanwhile (a page's log is this far behind the file at most)


# --------------------------------------------------------------------------- who
def page(request: Request, template: str, code: int = 200, /, **context: Any) -> HTMLResponse:
    """A whole page for the request's identity (its name, role and CSRF token in the header)."""
    s = getattr(request.state, "session", None)
    return HTMLResponse(render(template, **{"me": request.state.identity, "csrf": s.csrf if s else "", **context}), code)


def logged_out(request: Request) -> Optional[Response]:
    """The answer to a request without a session: the login (a page), HX-Redirect (a partial
    update), 401 (the page's data); None when it has one."""
    if getattr(request.state, "identity", None) is not None:
        return None
    if request.url.path.startswith("/page/"):
        return Response("log in again", 401, headers={"HX-Redirect": "/login"})
    return RedirectResponse("/login", 303)


async def form(request: Request) -> dict[str, str]:
    """A POSTed form's fields (urlencoded; the first value of each)."""
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(body, max_num_fields=20).items()}


def error_page(request: Request, status: int, error: str, back: str = "/") -> HTMLResponse:
    titles = {403: "Not allowed", 404: "Not found", 409: "Not now", 401: "Log in"}
    return page(request, "error.html", status, status=status, title=titles.get(status, "Refused"), error=error, back=back)


# --------------------------------------------------------------------------- login
@router.get("/login")
async def login_form(request: Request) -> Response:
    if request.state.identity is not None:
        return RedirectResponse("/", 303)
    return page(request, "login.html", error="")


@router.post("/login")
async def login(request: Request) -> Response:
    """A token (never logged or echoed) -> a session; a wrong one counts as a failed authentication."""
    rj, book = ctx(request), request.app.state.sessions
    token = (await form(request)).get("token", "").strip()
    ident, why = resolve(rj, f"Bearer {token}" if token else None, local=request.url.scheme == "http")
    if ident is None:
        return _refused(request, rj, why)
    return _session(request, ident, "logged in to the page")


def _refused(request: Request, rj: Any, why: str) -> Response:
    """A login refused (a wrong token, a dead one-time code): the login page with ``why``, 401 -- audited
    with that line, and a failed authentication of the address (a burst blocks it: 429)."""
    blocked = rj.limits.failed(client_addr(request))
    request.state.audit_result = why
    if blocked:
        request.state.audit_note = f"{client_addr(request)} blocked for {blocked:.0f} s after repeated failed authentications"
    return page(request, "login.html", 401, error=why)


def _session(request: Request, ident: Any, how: str) -> Response:
    """A new session for ``ident``: its cookie (HttpOnly, SameSite=Strict, Secure over TLS), then the queue."""
    book = request.app.state.sessions
    sid, _ = book.open(ident.name, ident.role, ident.token_id)
    request.state.identity = ident  # the audit's who
    out = RedirectResponse("/", 303, headers={"Referrer-Policy": "no-referrer"})
    out.set_cookie(book.cookie, sid, max_age=int(book.ttl_s), httponly=True, samesite="strict",
                   secure=request.url.scheme == "https", path="/")
    request.state.audit_result = f"{ident.name} {how}"
    return out


@api.post("/page/link", response_model=wire.PageLink, status_code=201,
          summary="A one-time login link to the team's page for the caller (`rayjobs ui`)")
async def page_link(request: Request) -> Any:
    """A random code, good once within ``ONCE_TTL_S`` for a page session of the caller's identity;
    the door keeps only its hash, and neither the audit nor a log ever holds it."""
    ident = who(request)
    code, entry = request.app.state.once.issue(ident.name, ident.role, ident.token_id)
    request.state.audit_result = f"a one-time page login link for {ident.name}"
    return answer({"path": f"/login/once?{urlencode({'code': code})}",
                   "expires_in": round(entry.expires - request.app.state.once.clock(), 1)}, 201)


@router.get("/login/once")
async def login_once(request: Request, code: str = Query(default="", max_length=200)) -> Response:
    """A one-time code -> a session (the identity that asked for it, if it is still valid). A used,
    expired or unknown code is the login page with one line, 401: audited, and counted as a failed
    authentication of the address like a wrong token."""
    rj = ctx(request)
    entry, why = request.app.state.once.redeem(code)
    if entry is not None and entry.token_id is not None:  # its token still that user's, unrevoked
        u = rj.users.get(entry.name)
        if u is None or u.revoked_at is not None or entry.token_id not in {t.id for t in u.tokens}:
            entry, why = None, "the token that made this link was revoked: ask an admin for a new one"
    if entry is None:
        request.state.identity = None
        return _refused(request, rj, why)
    request.state.audit_always = True  # a GET that opens a session: audited as the login's POST is
    role = rj.users.get(entry.name).role if entry.token_id is not None else entry.role  # its role as it is now
    return _session(request, wire.Identity(entry.name, role, "session", entry.token_id),  # type: ignore[arg-type]
                    "logged in to the page (a one-time link)")


@router.post("/logout")
async def logout(request: Request) -> Response:
    book = request.app.state.sessions
    if request.state.identity is not None and not csrf_ok(request.state.session, (await form(request)).get("csrf")):
        return error_page(request, 403, "the form is stale (its CSRF token does not match): reload the page")
    book.close(request.cookies.get(book.cookie))
    out = RedirectResponse("/login", 303)
    out.delete_cookie(book.cookie, path="/")
    return out


# --------------------------------------------------------------------------- the queue
def _queue(request: Request, user: str, sweep: str, status: str, page_no: int, whole: bool = True) -> dict[str, Any]:
    """The queue page's context (``whole``: the page with its filters' choices; else its refresh)."""
    svc = ctx(request).svc
    if status:  # any status: every job's view
        q = views.queue_context(jobviews.all_views(svc), user=user, sweep=sweep, status=status, page=page_no)
    else:
        q = _line(svc, user, sweep, page_no, whole=whole)
    filters = {k: v for k, v in q["filters"].items() if v}
    return {"q": q, "pager": urlencode(filters), "qs": urlencode(dict(filters, page=q["page"]))}


class _InLine:
    """The waiting jobs in line order as ``(position, Waiting)``, read only as far as a page needs."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def __len__(self) -> int:
        return len(self.state.waiting)

    def __getitem__(self, s: slice) -> list[tuple[int, Any]]:
        return list(zip(range(s.start + 1, s.stop + 1), itertools.islice(self.state.in_order(), s.start, s.stop)))


def _line(svc: Any, user: str, sweep: str, page_no: int, size: int = views.PAGE_SIZE, whole: bool = True) -> dict[str, Any]:
    """The default queue page (running and waiting) from the queue's state: views only for the page
    shown; unfiltered, the line is read only up to that page (a refresh at 10,000 waiting: 50 views)."""
    st = svc.state

    def meta(rec: Any) -> dict[str, str]:
        return (rec.spec or {}).get("metadata") or {}

    def ok(m: dict[str, str]) -> bool:
        return (not user or m.get("user") == user) and (not sweep or m.get("sweep") == sweep)

    held = [jobviews.running_view(r) for r in {**st.ending, **st.running}.values()]
    active = [v for v in held if v["status"] in views.ACTIVE]
    counts = (sum(v["status"] != "QUEUED" for v in active), len(st.waiting) + sum(v["status"] == "QUEUED" for v in active))
    line: Any = [(i + 1, w) for i, w in enumerate(st.in_order()) if ok(meta(w.rec))] if user or sweep else _InLine(st)
    metas = [meta(r) for r in svc.records.values()] if whole else []  # the filters' choices: the whole page only
    return views.line_context([v for v in active if ok(v["metadata"])], line,
                              lambda pw: jobviews.waiting_view(svc, pw[1], pw[0]), metas, counts, user=user, sweep=sweep,
                              page=page_no, size=size)


@router.get("/")
async def queue_page(request: Request, user: str = "", sweep: str = "", status: str = "",
                     page_no: int = Query(default=1, alias="page", ge=1)) -> Response:
    return logged_out(request) or page(request, "queue.html", nav="queue", **_queue(request, user, sweep, status, page_no))


@router.get("/page/queue")
async def queue_part(request: Request, user: str = "", sweep: str = "", status: str = "",
                     page_no: int = Query(default=1, alias="page", ge=1)) -> Response:
    return logged_out(request) or HTMLResponse(render("_queue.html", **_queue(request, user, sweep, status, page_no,
                                                                              whole=False)))


# --------------------------------------------------------------------------- a job
def _view(request: Request, job_id: str) -> dict[str, Any]:
    view = jobviews.job_view(ctx(request).svc, job_id)
    if view is None:
        raise HTTPException(404, f"no job {job_id!r} in the queue")
    return view


def _job(request: Request, view: dict[str, Any], done: str = "") -> dict[str, Any]:
    ident = request.state.identity
    owner = (view.get("metadata") or {}).get("user") or ""
    allowed = refuse_control(ident.name, ident.role, "stop", view["submission_id"], owner) is None
    s = getattr(request.state, "session", None)
    return {"j": views.job_context(view, allowed), "done": done, "csrf": s.csrf if s else ""}


async def _steps(request: Request, job_id: str) -> list[dict[str, Any]]:
    rj = ctx(request)
    rec = rj.svc.records.get(job_id)
    if rec is None:
        return []
    got = await rj.in_io(run_steps, rec.meta.run_dir, list(rec.attempts) or None)
    return [{"step": s, "data": d, "attempt": a} for s, a, d in got]


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str, done: str = "") -> Response:
    if (out := logged_out(request)) is not None:
        return out
    try:
        view = _view(request, job_id)
    except HTTPException as e:
        return error_page(request, 404, str(e.detail))
    c = views.curves(await _steps(request, job_id))
    return page(request, "job.html", c=c, **_job(request, view, done[:300]))


@router.get("/page/jobs/{job_id}")
async def job_part(request: Request, job_id: str) -> Response:
    return logged_out(request) or HTMLResponse(render("_job.html", **_job(request, _view(request, job_id))))


@router.get("/page/jobs/{job_id}/metrics")
async def job_curves(request: Request, job_id: str) -> Response:
    if (out := logged_out(request)) is not None:
        return out
    _view(request, job_id)
    return JSONResponse(views.curves(await _steps(request, job_id)))


@router.get("/page/jobs/{job_id}/log")
async def job_log(request: Request, job_id: str, offset: int = Query(default=0, ge=0),
                  wait: float = Query(default=0.0, ge=0.0, le=LOG_WAIT_S)) -> Response:
    """The log from byte ``offset`` (at most :data:`LOG_CHUNK`), waiting up to ``wait`` s for bytes
    (a long poll: an open page costs a request per burst of output, not per second);
    ``X-Rayjobs-Next``: the offset to ask next, ``X-Rayjobs-Over``: 1 once the job has ended and
    this is its end."""
    if (out := logged_out(request)) is not None:
        return out
    rj = ctx(request)
    found = await rj.in_io(joblogs.locate, rj.svc, rj.dash, job_id)
    if found is None:
        raise HTTPException(404, f"no job {job_id!r}")
    deadline = time.monotonic() + wait
    for _ in range(int(LOG_WAIT_S / LOG_POLL_S) + 1):  # bounded by the deadline too
        chunk = await _log_at(rj, found, job_id, offset)
        over = not chunk and (joblogs.ended(rj.svc, job_id) or found.kind != "whole")
        if chunk or over or time.monotonic() >= deadline or await request.is_disconnected():
            break
        await asyncio.sleep(LOG_POLL_S)
    return Response(chunk, media_type="text/plain; charset=utf-8",
                    headers={"X-Rayjobs-Next": str(offset + len(chunk)), "X-Rayjobs-Over": "1" if over else "0"})


async def _log_at(rj: Any, found: Any, job_id: str, offset: int) -> bytes:
    if found.path is not None:
        if _size(found.path) <= offset:  # nothing new: no trip to the I/O pool (a long poll looks 4 times a second)
            return b""
        return await rj.in_io(joblogs.read_at, found.path, offset, LOG_CHUNK)
    if found.node_id is not None:
        return await rj.in_io(_remote_at, rj.dash, found.node_id, job_id, offset)
    return found.text.encode()[offset:offset + LOG_CHUNK]


def _size(path: Any) -> int:
    """The size of a driver log on this node (Ray's session dir, a local disk: a stat on the loop is
    microseconds); -1 if it cannot be seen now (nothing to read this time)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _remote_at(dash: Any, node: str, job_id: str, offset: int) -> bytes:
    """(a worker thread) A log on another node from ``offset`` (the dashboard's log API has none: read, cut)."""
    try:
        return b"".join(joblogs.remote_file(dash, node, job_id))[offset:offset + LOG_CHUNK]
    except Exception:  # noqa: BLE001 (not there yet, or its node went away: nothing this time)
        return b""


async def _act(request: Request, job_id: str, run: Any) -> Response:
    """An action form: its CSRF token checked, then the API's own route (permissions, audit)."""
    if (out := logged_out(request)) is not None:
        return out
    fields = await form(request)
    if not csrf_ok(request.state.session, fields.get("csrf")):
        return error_page(request, 403, "the form is stale (its CSRF token does not match): reload the page",
                          f"/jobs/{job_id}")
    try:
        done = await run(fields)
    except (RequestError, HTTPException) as e:
        status = getattr(e, "status", None) or getattr(e, "status_code", 500)
        return error_page(request, status, str(getattr(e, "detail", None) or e), f"/jobs/{job_id}")
    return RedirectResponse(f"/jobs/{done[0]}?{urlencode({'done': done[1]})}", 303)


@router.post("/jobs/{job_id}/stop")
async def stop(request: Request, job_id: str) -> Response:
    async def run(fields: dict[str, str]) -> tuple[str, str]:
        mode = "checkpoint" if fields.get("mode") == "checkpoint" else "now"
        await job_routes.stop_one(request, job_id, mode, 3600.0)
        return job_id, request.state.audit_result

    return await _act(request, job_id, run)


@router.post("/jobs/{job_id}/resume")
async def resume(request: Request, job_id: str) -> Response:
    async def run(fields: dict[str, str]) -> tuple[str, str]:
        await job_routes.resume(request, job_id, wire.ResumeRequest())
        new = request.state.audit_target[-1]
        return new, request.state.audit_result

    return await _act(request, job_id, run)


# --------------------------------------------------------------------------- a sweep, the team
@router.get("/sweeps/{sweep}")
async def sweep_page(request: Request, sweep: str) -> Response:
    if (out := logged_out(request)) is not None:
        return out
    points = [v for v in jobviews.select(jobviews.all_views(ctx(request).svc), sweep=sweep)
              if not (v.get("metadata") or {}).get("eval_of")]
    if not points:
        return error_page(request, 404, f"no sweep {sweep!r} in the queue")
    steps = {v["submission_id"]: await _steps(request, v["submission_id"]) for v in points}
    return page(request, "sweep.html", name=sweep, s=views.sweep_context(points, steps))


@router.get("/team")
async def team_page(request: Request, days: int = Query(default=7, ge=0, le=3650)) -> Response:
    from rayjobs.oncluster import clusterinfo, usage as split

    if (out := logged_out(request)) is not None:
        return out
    rj = ctx(request)
    records, now = list(rj.svc.records.values()), time.time()
    since = now - days * 86400 if days else None
    got = await rj.in_io(lambda: split.to_json(split.usage(records, now, since=since)))
    summary, health = jobviews.summary(rj.svc), jobviews.health(rj.svc)
    info = await rj.in_io(clusterinfo.cluster_info, rj.dash, summary, health)
    ips = {n["node_id"]: n["ip"] for n in info["nodes"]}
    nodes = [{"id": n.id, "ip": ips.get(n.id, ""), "gpus": n.gpus, "free_gpus": n.free_gpus} for n in rj.svc.nodes]
    owners = {r.id: r.req.user for r in rj.svc.state.running.values()}
    return page(request, "team.html", nav="team", usage=views.usage_rows(got), since_days=days,
                now_users=summary["users"], grid=views.gpu_grid(nodes, dict(rj.svc.held), owners))


def mount_static(app: Any) -> None:
    """The page's stylesheet, script and vendored libraries at ``/static`` (no login needed: the
    login page uses them; nothing in them is the cluster's)."""
    from fastapi.staticfiles import StaticFiles

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

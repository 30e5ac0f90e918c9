"""The door's routes about people: who am I, the users (admins), the audit."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query, Request

from rayjobs.contract import wire
from rayjobs.contract.wire import PREFIX
from rayjobs.door.context import answer, ctx
from rayjobs.door.identity import need, who
from rayjobs.door.permissions import Action, audit_user, refuse_users
from rayjobs.door.users import UserError, check_name
from rayjobs.oncluster.queuerequests import RequestError
from rayjobs.door.refusals import BODY, COMMON, refusals

router = APIRouter(prefix=PREFIX, responses=COMMON)


def _admin(request: Request) -> None:
    ident = who(request)
    need(request, Action.USERS, refuse_users(ident.name, ident.role) or "")


@router.get("/whoami", response_model=wire.Identity, summary="Who the door takes the caller for")
async def whoami(request: Request) -> Any:
    return answer(wire.to_json(who(request)))


@router.get("/users", response_model=wire.UserList, summary="The users (admins)", responses=refusals(403))
async def list_users(request: Request) -> Any:
    _admin(request)
    return answer({"users": [u.view() for u in ctx(request).users.users()]})


@router.post("/users", response_model=wire.UserToken, status_code=201,
             summary="Add a user (admins): its token is in this answer only",
             responses=refusals(*BODY, 403, 409))
async def add_user(request: Request, body: wire.UserAdd) -> Any:
    _admin(request)
    rj = ctx(request)
    request.state.audit_target = [body.name]
    try:
        user, token = await rj.in_io(rj.users.add, body.name, body.role)
    except UserError as e:
        raise RequestError(e.status, str(e)) from None
    request.state.audit_result = f"added {user.name} ({user.role}), token {user.tokens[0].id}"
    return answer({"name": user.name, "role": user.role, "token": token, "token_id": user.tokens[0].id,
                   "fingerprint": rj.fingerprint, "url": rj.url}, 201)


@router.post("/users/{name}/revoke", response_model=wire.UserView, summary="Revoke a user's tokens (admins)",
             responses=refusals(403, 404, 422))
async def revoke_user(request: Request, name: str) -> Any:
    _admin(request)
    rj = ctx(request)
    try:
        check_name(name)
        user = await rj.in_io(rj.users.revoke, name)
    except UserError as e:
        raise RequestError(e.status, str(e)) from None
    request.state.audit_result = f"revoked {len(user.tokens)} token(s) of {name}"
    return answer(user.view())


@router.get("/audit", response_model=wire.AuditList, summary="The audit: admins all, others their own entries",
            responses=refusals(403, 422))
async def read_audit(request: Request, user: Optional[str] = None, since: Optional[float] = None,
                     limit: int = Query(default=1000, ge=1, le=10_000)) -> Any:
    ident = who(request)
    whose, refusal = audit_user(ident.name, ident.role, user)
    if refusal:
        raise RequestError(403, refusal)
    rj = ctx(request)
    entries, total = await rj.in_io(lambda: rj.audit.read(user=whose, since=since, limit=limit))
    return answer({"entries": entries, "total": total})

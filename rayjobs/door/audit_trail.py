"""The door's audit, as ASGI middleware: what each request was, who asked, how it ended.

Every request that changes something (POST, PUT, DELETE) and every refused one (401, 403, 429) is
appended to :class:`rayjobs.door.audit.AuditLog` once its answer has gone out, in the door's I/O
pool (the write is fsync'ed); so is a request a route marks ``audit_always`` (the page's one-time
login, a GET that opens a session). A blocked address's 429s are not written one by one: the line of
the failure that started the block says so. Routes add their targets and result line through
``request.state`` (``audit_target``, ``audit_result``); a refusal's result is its one-line error.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Callable

from rayjobs.contract.wire import PREFIX

CHANGING = frozenset({"POST", "PUT", "DELETE"})
REFUSED = frozenset({401, 403, 429})
_ROUTES = [  # (method, path pattern, action); a group ``t``: the id the path names
    ("POST", rf"^{PREFIX}/jobs$", "queue"),
    ("POST", rf"^{PREFIX}/jobs/stop$", "stop"),
    ("POST", rf"^{PREFIX}/jobs/(?P<t>[^/]+)/stop$", "stop"),
    ("POST", rf"^{PREFIX}/jobs/(?P<t>[^/]+)/resume$", "resume"),
    ("POST", rf"^{PREFIX}/jobs/(?P<t>[^/]+)/rerun$", "rerun"),
    ("PUT", rf"^{PREFIX}/code/(?P<t>[^/]+)$", "code"),
    ("POST", rf"^{PREFIX}/users$", "users.add"),
    ("POST", rf"^{PREFIX}/users/(?P<t>[^/]+)/revoke$", "users.revoke"),
    ("POST", rf"^{PREFIX}/session$", "session.open"),
    ("DELETE", rf"^{PREFIX}/session$", "session.close"),
    ("POST", rf"^{PREFIX}/page/link$", "session.link"),
    ("POST", r"^/login$", "session.open"),  # the page's (rayjobs.door.routes.page)
    ("GET", r"^/login/once$", "session.open"),
    ("POST", r"^/logout$", "session.close"),
    ("POST", r"^/jobs/(?P<t>[^/]+)/stop$", "stop"),
    ("POST", r"^/jobs/(?P<t>[^/]+)/resume$", "resume"),
]


def action_of(method: str, path: str) -> tuple[str, list[str]]:
    """What a request was, in the audit's words, and the id its path names (``stop``, ``["j-1"]``);
    a read is ``read``."""
    for m, pattern, action in _ROUTES:
        got = re.match(pattern, path) if m == method else None
        if got:
            return action, [got.group("t")] if "t" in got.groupdict() else []
    return ("read" if method in ("GET", "HEAD") else method.lower()), []


def audited(method: str, status: int) -> bool:
    """Is this answer written to the audit: a change (whatever its answer) or a refusal."""
    return method in CHANGING or status in REFUSED


class AuditTrail:
    """ASGI middleware over the app; ``rj`` is the door's context (its audit and I/O pool)."""

    def __init__(self, app: Any, rj: Any, clock: Callable[[], float]) -> None:
        self.app, self.rj, self.clock = app, rj, clock

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})  # the routes' request.state is this dict: the identity, targets
        seen: dict[str, Any] = {"status": 0, "body": b""}

        async def watch(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                seen["status"] = int(msg["status"])
            elif msg["type"] == "http.response.body" and seen["status"] >= 400 and len(seen["body"]) < 4096:
                seen["body"] += msg.get("body", b"")
            await send(msg)

        at = self.clock()
        try:
            await self.app(scope, receive, watch)
        finally:
            await self._write(scope, at, seen)

    async def _write(self, scope: dict[str, Any], at: float, seen: dict[str, Any]) -> None:
        method, status = str(scope.get("method", "")), int(seen["status"] or 500)
        state = scope.get("state") or {}
        if not (audited(method, status) or state.get("audit_always")) or state.get("audit_skip"):
            return
        entry = self.entry(scope, at, status, seen["body"])
        try:
            await asyncio.get_running_loop().run_in_executor(self.rj.io, self.rj.audit.append, entry)
        except OSError as e:  # the answer went out; the queue's log says the audit could not keep it
            self.rj.svc.note("audit not written", f"{entry['action']} {entry['path']}: {e}"[:300])

    def entry(self, scope: dict[str, Any], at: float, status: int, body: bytes) -> dict[str, Any]:
        """The audit line of one request (never a header or a body but a refusal's one line)."""
        state = scope.get("state") or {}
        ident = state.get("identity")
        method, path = str(scope.get("method", "")), str(scope.get("path", ""))
        action, target = action_of(method, path)
        result = state.get("audit_result") or ""
        if status >= 400:
            try:
                result = str(json.loads(body).get("error") or "")
            except (ValueError, AttributeError):  # a page's refusal (HTML): the route's own line if it said one
                result = state.get("audit_result") or body[:200].decode("utf-8", "replace")
        if state.get("audit_note"):
            result = f"{result}; {state['audit_note']}" if result else state["audit_note"]
        client = scope.get("client") or ("?", 0)
        return {"at": round(at, 3), "user": ident.name if ident else "", "role": ident.role if ident else "",
                "addr": str(client[0]), "method": method, "path": path, "action": action if status != 401 else "auth",
                "target": [str(t) for t in state.get("audit_target") or target][:1000], "status": status,
                "result": " ".join(result.split())[:500]}

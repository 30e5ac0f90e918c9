"""What the door's routes share: the context they reach (``request.app.state.rj``), the caller's
owner name, and the one JSON encoder of answers."""

from __future__ import annotations

import asyncio
import getpass
import os
from pathlib import Path
from typing import Any, Callable, Optional

import pydantic_core
from fastapi import Request
from fastapi.responses import Response

from rayjobs.door.audit import AuditLog
from rayjobs.door.listcache import ListCache
from rayjobs.door.limits import FailureLimiter
from rayjobs.door.users import UserBook
from rayjobs.oncluster.queuerequests import QueueRequests

#: The head's owner: the cluster token's identity (else the head process's OS user).
OWNER_ENV = "RAYJOBS_OWNER"


def owner_name() -> str:
    """Who the cluster's own token is: ``$RAYJOBS_OWNER``, else this process's OS user."""
    name = os.environ.get(OWNER_ENV, "").strip()
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "owner"


class Context:
    """What the routes reach through ``request.app.state.rj``: the queue service, the door's users,
    audit and limits, and the head's dashboard client (None in-process: no Ray)."""

    def __init__(self, svc: Any, token: Optional[str], kick: Callable[[], None], io: Any, *,
                 door_dir: Path, dash: Any = None, url: Optional[str] = None,
                 fingerprint: Optional[str] = None) -> None:
        self.svc, self.token, self.kick, self.io, self.dash = svc, token, kick, io, dash
        self.reqs = QueueRequests(svc)
        self.lists = ListCache()  #: the job list's encoded answers, while the queue is unchanged
        self.dir = Path(door_dir)
        self.users = UserBook(self.dir)
        self.audit = AuditLog(self.dir / "audit.jsonl")
        self.limits = FailureLimiter()
        self.owner = owner_name()
        self.url, self.fingerprint = url, fingerprint  #: the TLS door for teammates (None: loopback only)

    async def in_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    async def written(self, ids: Any) -> None:
        """Wait until the queue's record writes so far are done (the loop's changes reach the disk in
        a thread of their own); a request is answered once its change is durable.

        Raises:
            HTTPException: 507, a record of ``ids`` could not be written (the change stands in the
                queue and its write is tried again).
        """
        from fastapi import HTTPException

        await asyncio.wrap_future(self.svc.writer.barrier())
        if not self.svc.writer.ok(ids):
            raise HTTPException(507, f"the queue could not write the records of {', '.join(ids)} to "
                                     f"{self.svc.store.root}: the change stands and is written once the "
                                     f"storage root takes writes again")


def ctx(request: Request) -> Context:
    return request.app.state.rj


def encode(doc: Any) -> bytes:
    """JSON by pydantic's Rust encoder (FastAPI's own): 3x json's on 10,000 job views."""
    return pydantic_core.to_json(doc, fallback=str)


def answer(doc: Any, status: int = 200) -> Response:
    """A JSON answer encoded once (a list of 10,000 jobs is no dataclass per job)."""
    return Response(encode(doc), status_code=status, media_type="application/json")

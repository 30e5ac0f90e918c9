"""A job's driver log as the head reads it, for the door's log routes (the laptop never reads Ray).

Where it is, in order (:func:`locate`):

1. a file on the head's own disk -- the driver ran on the head (Ray's default) -- in this Ray
   session's log dir, or in the log dir of the session the job last ran in (its record's
   ``ray_logs``: the log outlives a restart of the head's Ray);
2. a file on another node, read through the head's dashboard (``/api/v0/logs/file``);
3. what the queue kept of it (a tail, where the record has one): ``kept``;
4. nothing: ``none``, with one line that says why (it waits in the queue; its session is gone).

Following (:func:`follow`) reads from a byte offset as the file grows and ends once the job has
ended and its file is read to its end, or after ``max_s`` (the client reconnects with the bytes it
got: every byte once across a reconnect or a restart of the door).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Optional

from rayjobs.contract.status import TERMINAL, State
from rayjobs.oncluster.headapi import LOST

CHUNK = 1 << 16
#: The most a followed log sends per read (a burst of output is sent in pieces).
FOLLOW_CHUNK = 1 << 20


def driver_file(job_id: str) -> str:
    """The name Ray gives a job's driver log in its node's log dir."""
    return f"job-driver-{job_id}.log"


@dataclass(frozen=True)
class Found:
    kind: str  #: ``whole`` (a file), ``kept`` (the queue's tail), ``none``
    path: Optional[Path] = None  #: on the head's disk
    node_id: Optional[str] = None  #: else on this node, through the dashboard
    text: str = ""  #: kept or none: the first line that says so (and the kept tail)


def local_path(svc: Any, job_id: str) -> Optional[Path]:
    """The driver log on the head's own disk (this session's, or the job's last session's), or None."""
    rec = svc.records.get(job_id)
    for d in (getattr(svc, "ray_logs", ""), rec.ray_logs if rec is not None else ""):
        if d:
            p = Path(d) / driver_file(job_id)
            if p.is_file():
                return p
    return None


def kept_tail(rec: Any) -> Optional[str]:
    """The log tail the queue kept in a job's record, where it has one."""
    got = getattr(rec, "log_tail", None) or (rec.extra or {}).get("log_tail")
    return str(got) if got else None


def locate(svc: Any, dash: Any, job_id: str) -> Optional[Found]:
    """(in a worker thread: it may ask Ray) Where a job's driver log is; None: no such job."""
    path = local_path(svc, job_id)
    if path is not None:
        return Found("whole", path=path)
    rec = svc.records.get(job_id)
    asks_ray = rec is None or not (rec.pruned or rec.state == State.WAITING)  # (a waiting job: not in Ray yet)
    details = svc.jobs.details(job_id) if asks_ray else None
    if rec is None and (not details or details.get("status") in (LOST, None)):
        return None
    kept = (rec.log or {}) if rec is not None else {}  # a Ray job the queue does not know has no record
    node = (details or {}).get("driver_node_id") or kept.get("node_id")
    if node and dash is not None and _readable(dash, node, job_id):
        return Found("whole", node_id=str(node))
    tail = kept_tail(rec) if rec is not None else None
    where = f"{kept.get('file') or driver_file(job_id)} on node {node or '?'}"
    if tail:
        return Found("kept", text=f"[rayjobs] {job_id}'s log as the queue kept it (its tail; the whole log was "
                                  f"{where}, gone with its Ray session)\n{tail}")
    if rec is not None and rec.state == State.WAITING:
        return Found("none", text=f"[rayjobs] {job_id} waits in the queue: no log yet\n")
    if rec is not None and rec.state == State.ADMITTED:
        return Found("none", text=f"[rayjobs] {job_id} is starting: no log yet\n")
    return Found("none", text=f"[rayjobs] no log of {job_id} is left: it was {where}, gone with its Ray session\n")


def _readable(dash: Any, node: str, job_id: str) -> bool:
    try:
        for _ in dash.iter_file({"node_id": node, "filename": driver_file(job_id), "lines": 1}):
            break
        return True
    except Exception:  # noqa: BLE001 (RayDown: the node or its file is gone)
        return False


def read_file(path: Path, tail: Optional[int] = None) -> Iterator[bytes]:
    """A local log in chunks: all of it, or its last ``tail`` lines."""
    with open(path, "rb") as f:
        if tail is not None:
            f.seek(tail_start(f, tail))
        for chunk in iter(lambda: f.read(CHUNK), b""):
            yield chunk


def tail_start(f: Any, lines: int) -> int:
    """The byte offset where the last ``lines`` lines of an open file begin (read backwards)."""
    end = f.seek(0, os.SEEK_END)
    if lines <= 0:
        return end
    pos, seen = end, 0
    f.seek(max(0, end - 1))
    if end and f.read(1) == b"\n":
        seen = -1  # the final newline ends the last line; it starts none
    while pos > 0:
        step = min(CHUNK, pos)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        for i in range(len(block) - 1, -1, -1):
            if block[i:i + 1] == b"\n":
                seen += 1
                if seen == lines:
                    return pos + i + 1
    return 0


def remote_file(dash: Any, node: str, job_id: str, tail: Optional[int] = None) -> Iterator[bytes]:
    """A log on another node, through the dashboard (all of it, or its last ``tail`` lines)."""
    yield from dash.iter_file({"node_id": node, "filename": driver_file(job_id),
                               "lines": tail if tail is not None else -1})


def ended(svc: Any, job_id: str) -> bool:
    """Has the job ended, as the queue knows it (a job it does not know: False)?"""
    rec = svc.records.get(job_id)
    if rec is None:
        return False
    r = svc.state.running.get(job_id) or svc.state.ending.get(job_id)
    return rec.done or (r is not None and str(r.ended or "") in TERMINAL)


def read_at(path: Path, pos: int, size: int = FOLLOW_CHUNK) -> bytes:
    """Up to ``size`` bytes of ``path`` from byte ``pos`` (b"" at its end)."""
    with open(path, "rb") as f:
        return os.pread(f.fileno(), size, pos)


async def follow(svc: Any, dash: Any, io: Any, job_id: str, offset: int, *, max_s: float,
                 poll_s: float = 0.2) -> AsyncIterator[bytes]:
    """The log from byte ``offset`` as it grows: ends once the job has ended and the log is read to
    its end, or after ``max_s``. A job the queue does not know (a foreign one) ends when Ray says so."""
    loop = asyncio.get_running_loop()
    deadline, pos, path, node = time.monotonic() + max_s, offset, None, None
    last_ask, over = 0.0, False
    while time.monotonic() < deadline:
        path = path or local_path(svc, job_id)
        if path is not None:
            chunk = read_at(path, pos)
        elif node is not None:
            chunk = await loop.run_in_executor(io, _remote_from, dash, node, job_id, pos)
        else:
            chunk = b""
        if chunk:
            pos += len(chunk)
            yield chunk
            continue
        if over:
            return
        if job_id not in svc.records or (path is None and node is None):
            if time.monotonic() - last_ask >= 2.0:  # Ray's word: at most every 2 s
                last_ask = time.monotonic()
                info = await loop.run_in_executor(io, svc.jobs.details, job_id) or {}
                node = node or (info.get("driver_node_id") if dash is not None and path is None else None)
                over = job_id not in svc.records and str(info.get("status") or "") in (*TERMINAL, LOST)
        over = over or ended(svc, job_id)
        if not over:
            await asyncio.sleep(poll_s if path is not None else 1.0)


def _remote_from(dash: Any, node: str, job_id: str, pos: int) -> bytes:
    """(a worker thread) A remote log's bytes from ``pos`` (the log API has no offset: read, skip)."""
    try:
        whole = b"".join(remote_file(dash, node, job_id))
    except Exception:  # noqa: BLE001 (not there yet, or the node went away: nothing now)
        return b""
    return whole[pos:pos + FOLLOW_CHUNK]

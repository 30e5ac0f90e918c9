"""The queue seen from the laptop: QUEUED and positions for ``rayjobs list``/``status``/``cluster``.

The queue actor keeps its status file in the head's Ray log dir (:mod:`rayjobs.oncluster.statusfile`);
:func:`overlay` reads it with the dashboard's log API, so the laptop needs only HTTP.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable, Optional

from rayjobs.shared import STATUS_FILE
from rayjobs.views.jobfields import field, gpu_groups, job_id, status_of

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard

#: The head's node id per dashboard address (asked once; forgotten when the file is not there).
_HEAD_IDS: dict[str, str] = {}


def read_status(d: "Dashboard") -> Optional[dict[str, Any]]:
    """The queue's status document from the head; None if there is none (or the dashboard is away)."""
    try:
        head = _HEAD_IDS.get(d.address)
        if not head:
            head = next((r["node_id"] for r in d.nodes() if r.get("is_head_node")), "")
            if not head:
                return None
            _HEAD_IDS[d.address] = head
        body = d.node_file(head, STATUS_FILE)
        if body is None:
            _HEAD_IDS.pop(d.address, None)  # the head may have been replaced
            return None
        text = body.decode(errors="replace").strip().splitlines()
        return json.loads(text[-1]) if text else None
    except Exception:  # a view must not fail on the queue's file: the row stays Ray's
        return None


def _status_of(j: Any) -> str:
    return status_of(j)


def _id_of(j: Any) -> str:
    return j if isinstance(j, str) else job_id(j)


def overlay(d: "Dashboard", jobs: Optional[Iterable[Any]] = None) -> dict[str, dict[str, Any]]:
    """``{submission_id: {"status": "QUEUED", "queue_position": n}}`` for jobs the queue holds now.

    ``jobs`` (Ray ``JobDetails``, dicts, or ids; None = all): only those still RUNNING in Ray (a
    waiting runner is a running Ray job) are reported. Positions are the queue's own (1 = next).
    Works from the laptop with the Jobs/dashboard HTTP API only. Where the queue has written no
    status file (none yet on a fresh cluster, never where it is switched off), only young GPU jobs
    are reported, as PENDING (:data:`STARTING_S`).
    """
    doc = read_status(d)
    if not doc:
        return _starting_without_queue(jobs)
    live: Optional[set[str]] = None
    starting: dict[str, dict[str, Any]] = {}
    if jobs is not None:
        live = set()
        known = ({e["id"] for e in doc.get("queue", [])} | {e["id"] for e in doc.get("admitted", [])}
                 | set(doc.get("seen", [])))
        for j in jobs:
            if isinstance(j, str) or _status_of(j) in ("RUNNING", "PENDING"):
                live.add(j if isinstance(j, str) else _id_of(j))
            # Ray says RUNNING as soon as the entrypoint starts, seconds before rayjobs' runner has
            # asked the queue (seen on the H200: a job about to wait showed RUNNING). A GPU job the
            # queue has not seen yet is still starting: say PENDING rather than promise it the GPUs.
            if (not isinstance(j, str) and _status_of(j) == "RUNNING" and _id_of(j) not in known
                    and "seen" in doc and _wants_gpus(j)):
                starting[_id_of(j)] = {"status": "PENDING", "queue_position": None}
    queued = {e["id"]: {"status": "QUEUED", "queue_position": int(e["position"])}
              for e in doc.get("queue", []) if live is None or e["id"] in live}
    return {**starting, **queued}


#: A GPU job Ray calls RUNNING, on a cluster whose queue has written nothing yet, is still starting
#: for this long after its *submission* (Ray's ``start_time``; the laptop's clock against the
#: head's, so a generous window): its runner may be about to wait. A fresh cluster's first runner creates the queue
#: actor, which takes a moment: `rayjobs list` run then showed a job about to wait as RUNNING (seen
#: on the 2-GPU H200). A cluster whose queue is switched off never writes the file: its jobs show
#: RUNNING once this has passed.
STARTING_S = 90.0


def _starting_without_queue(jobs: Optional[Iterable[Any]], now_ms: Optional[float] = None) -> dict[str, dict[str, Any]]:
    if jobs is None:
        return {}
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    out = {}
    for j in jobs:
        if isinstance(j, str) or _status_of(j) != "RUNNING" or not _wants_gpus(j):
            continue
        start = field(j, "start_time")
        if start and now_ms - float(start) < STARTING_S * 1000:
            out[_id_of(j)] = {"status": "PENDING", "queue_position": None}
    return out


def _wants_gpus(j: Any) -> bool:
    """Does this job's runner ask the queue (it has GPU groups)?"""
    return bool(gpu_groups(j))

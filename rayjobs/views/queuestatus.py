"""The queue seen from the laptop, over the Jobs/dashboard HTTP API only.

:func:`overlay` turns the queue actor's status file (kept in the head's Ray log dir, read with the
dashboard's log API) into QUEUED + positions for ``rayjobs list``/``status``;
:func:`refuse_never_fitting` refuses at submit a job that can never fit the cluster.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable, Optional, Sequence

from rayjobs.oncluster import capacity
from rayjobs.views.jobrows import field, meta, status_of
from rayjobs.oncluster.statusfile import STATUS_FILE

# --------------------------------------------------------------------------- laptop side (HTTP only)
_HEAD_IDS: dict[str, str] = {}


def get_json(client: Any, path: str) -> Any:
    """GET a dashboard API path as JSON (RuntimeError on a non-200 answer)."""
    r = client._do_request("GET", path)
    if r.status_code != 200:
        raise RuntimeError(f"GET {path}: HTTP {r.status_code}")
    return r.json()


def cluster_nodes(client: Any) -> list[dict[str, Any]]:
    """Alive nodes from the dashboard's state API (``/api/v0/nodes``)."""
    doc = get_json(client, "/api/v0/nodes?detail=true&limit=10000")
    rows = doc["data"]["result"]["result"]
    return [r for r in rows if str(r.get("state")) == "ALIVE"]


def read_status(client: Any) -> Optional[dict[str, Any]]:
    """The queue's status file from the head, through the dashboard's log API; None if there is none."""
    addr = getattr(client, "_address", "")
    try:
        head = _HEAD_IDS.get(addr)
        if not head:
            head = next((r["node_id"] for r in cluster_nodes(client) if r.get("is_head_node")), "")
            if not head:
                return None
            _HEAD_IDS[addr] = head
        r = client._do_request("GET", f"/api/v0/logs/file?node_id={head}&filename={STATUS_FILE}&lines=10")
        if r.status_code != 200:
            _HEAD_IDS.pop(addr, None)  # the head may have been replaced
            return None
        text = r.content.decode(errors="replace").strip().splitlines()
        return json.loads(text[-1]) if text else None
    except Exception:
        return None


def _status_of(j: Any) -> str:
    return status_of(j).split(".")[-1]


def _id_of(j: Any) -> str:
    return str(j.get("submission_id") or j.get("id") if isinstance(j, dict) else getattr(j, "submission_id", j))


def overlay(client: Any, jobs: Optional[Iterable[Any]] = None) -> dict[str, dict[str, Any]]:
    """``{submission_id: {"status": "QUEUED", "queue_position": n}}`` for jobs the queue holds now.

    ``jobs`` (Ray ``JobDetails``, dicts, or ids; None = all): only those still RUNNING in Ray (a
    waiting runner is a running Ray job) are reported. Positions are the queue's own (1 = next).
    Works from the laptop with the Jobs/dashboard HTTP API only. Where the queue has written no
    status file (none yet on a fresh cluster, never where it is switched off), only young GPU jobs
    are reported, as PENDING (:data:`STARTING_S`).
    """
    doc = read_status(client)
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
    try:
        return bool(capacity.clean_groups(json.loads(meta(j).get("gpu_groups") or "[]")))
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- submit-time check
def refuse_never_fitting(client: Any, prepared: Sequence[Any], address: str = "") -> None:
    """Raise (exit 2, nothing submitted) if a job can never fit this cluster, per node.

    Skipped, with a note, when the state API cannot be read or the cluster has no GPUs at all (a
    CPU-only development cluster, such as the embedded head on a laptop).
    """
    import sys

    from rayjobs.errors import ConfigError

    demands = [(p.spec.submission_id, json.loads(p.spec.metadata.get("gpu_groups") or "[]")) for p in prepared]
    if not any(capacity.clean_groups(g) for _, g in demands):
        return
    try:
        nodes = capacity.nodes_from_state(cluster_nodes(client))
    except Exception as e:
        print(f"rayjobs: note: could not read the cluster's nodes ({e}); GPU fit not checked", file=sys.stderr)
        return
    if not any(n.gpus for n in nodes):
        print("rayjobs: note: the cluster has no GPUs; the jobs' GPU demand is not enforced", file=sys.stderr)
        return
    for sid, groups in demands:
        why = capacity.never_reason(groups, nodes)
        if why:
            where = f" at {address}" if address else ""
            raise ConfigError(f"{sid} can never run on the cluster{where}: it {why}; "
                              f"lower trainer.nnodes / trainer.n_gpus_per_node, or use a bigger cluster")

"""Hand-built inputs for the queue's rules (rayjobs.oncluster.scheduler): records, states, clusters."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State
from rayjobs.contract import capacity
from rayjobs.oncluster.queuestate import QueueState
from rayjobs.oncluster.request import request_from_record
from rayjobs.oncluster.scheduler import ClusterView

#: "Now" in the tests (epoch s).
NOW = 1_800_000_000.0


def record(job_id: str, groups: Sequence[int], *, at: float = NOW, priority: int = 0, user: str = "u",
           sweep: str = "", after: Sequence[str] = (), preemptible: bool = False, wait_s: float = 900.0,
           retries: int = 0, state: State = State.WAITING, storage: str = "/nonexistent/storage",
           halving: str = "", resumed_from: str = "") -> JobRecord:
    """A job's record as a submit writes it (``at``: when it was queued and submitted)."""
    meta = JobMeta(experiment="x", priority=priority, user=user, sweep=sweep, after=tuple(after),
                   preemptible=preemptible, preempt_wait_s=wait_s, max_retries=retries, gpu_groups=tuple(groups),
                   halving=halving, resumed_from=resumed_from,
                   submitted_at=datetime.fromtimestamp(int(at), tz=timezone.utc).isoformat(timespec="milliseconds"),
                   run=job_id, run_dir=f"{storage}/runs/p/{job_id}", checkpoint_dir=f"{storage}/checkpoints/p/{job_id}")
    spec = {"entrypoint": "python3 -m rayjobs.oncluster.runner -- true", "submission_id": job_id,
            "metadata": meta.to_ray()}
    return JobRecord(id=job_id, state=state, spec=spec, code="c0ffee", queued_at=at)


def queued(job_id: str, groups: Sequence[int], **kw: Any) -> JobRecord:
    return record(job_id, groups, **kw)


def running(job_id: str, groups: Sequence[int], *, unplaced: Optional[list[int]] = None, admitted: float = NOW - 60,
            preempting_for: str = "", asked: float = 0.0, forced: bool = False, stop_asked: bool = False,
            ending: bool = False, **kw: Any) -> tuple[str, Any]:
    """An admitted job, in Ray, its groups placed (unless ``unplaced``)."""
    rec = record(job_id, groups, at=admitted - 1, state=State.ADMITTED, **kw).with_(admitted_at=admitted)
    return ("running", dict(rec=rec, unplaced=list(unplaced or []), preempting_for=preempting_for,
                            preempt_asked=asked, preempt_forced=forced, stop_asked=stop_asked, ending=ending))


def state(*entries: Any) -> QueueState:
    """A queue holding ``entries`` (records to wait, or :func:`running` ones)."""
    from rayjobs.oncluster.queuestate import Running

    st = QueueState()
    for e in entries:
        if isinstance(e, JobRecord):
            st.queue(e)
            continue
        _, kw = e
        rec = kw.pop("rec")
        st.running[rec.id] = Running(rec, request_from_record(rec), rec.admitted_at, in_ray=True, **kw)
    return st


def node(node_id: str, gpus: int, *, free: Optional[int] = None, cpus: Optional[int] = None) -> capacity.Node:
    """A node with ``gpus`` GPUs and 3 CPUs per GPU (``free`` GPUs free, their CPUs with them)."""
    free = gpus if free is None else free
    cpus = 3 * gpus if cpus is None else cpus
    return capacity.Node(node_id, float(gpus), float(cpus), float(free), float(cpus - 3 * (gpus - free)))


def cluster(*nodes: capacity.Node, holdings: Any = None) -> ClusterView:
    """The nodes, and per running job what its placement groups hold per node (``{id: {node: [gpus, cpus]}}``)."""
    return ClusterView(tuple(nodes), dict(holdings or {}))


def dumps(x: Any) -> str:
    return json.dumps(x)

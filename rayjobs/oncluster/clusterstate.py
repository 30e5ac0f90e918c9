"""What the cluster has free, per node, for the queue to admit into (read on the head, from Ray).

Free per node = min(Ray's availability view, total - CREATED placement groups): the view lags a
just-created placement group by a moment, the placement-group table does not; the view also
counts what is used outside placement groups. The placement groups of a job's trainer are found
through its driver's ``job_submission_id`` (one filtered GCS query) and the job id inside each
placement group's id. These read Ray's GCS through ``ray._private`` (there is no public per-node
availability or driver lookup); the queue's reader thread
(:mod:`rayjobs.oncluster.clusterwatch`) is the only caller.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from rayjobs.contract import capacity


def drivers(submission_id: str) -> Optional[dict[str, bool]]:
    """The Ray drivers of job ``submission_id`` (its trainer's): JobID hex -> dead. None if the GCS
    could not be asked."""
    import ray

    try:
        gcs = ray._private.worker.global_worker.gcs_client
        got = gcs.get_all_job_info(job_or_submission_id=submission_id, skip_submission_job_info_field=True,
                                   skip_is_running_tasks_field=True, timeout=5)
    except Exception:
        return None
    return {jid.hex(): bool(d.is_dead) for jid, d in got.items()}


def placement() -> tuple[dict[str, list[float]], dict[str, list[int]], dict[str, dict[str, list[float]]]]:
    """(per node id: [GPUs, CPUs] held by CREATED placement groups,
    per Ray JobID hex (its last 8 hex digits): the GPU count of each of its CREATED groups,
    per Ray JobID hex (the same): per node id, [GPUs, CPUs] its CREATED groups hold there)."""
    import ray

    used: dict[str, list[float]] = {}
    created: dict[str, list[int]] = {}
    held: dict[str, dict[str, list[float]]] = {}
    try:
        pgs = ray.util.placement_group_table()
    except Exception:
        pgs = {}
    for pg_id, pg in pgs.items():
        if pg.get("state") != "CREATED":
            continue
        where = pg.get("bundles_to_node_id") or {}
        mine = held.setdefault(str(pg_id)[-8:], {})
        gpus = 0.0
        for idx, b in (pg.get("bundles") or {}).items():
            node = str(where.get(idx, ""))
            for u in (used.setdefault(node, [0.0, 0.0]), mine.setdefault(node, [0.0, 0.0])):
                u[0] += float(b.get("GPU", 0))
                u[1] += float(b.get("CPU", 0))
            gpus += float(b.get("GPU", 0))
        if gpus > 0:
            created.setdefault(str(pg_id)[-8:], []).append(int(round(gpus)))
    return used, created, held


def holdings_of(found: Optional[dict[str, bool]], held: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, list[float]]:
    """Per node id, [GPUs, CPUs] a job's trainer's CREATED placement groups hold (what its preemption
    would free): ``found`` its drivers (:func:`drivers`), ``held`` per JobID (:func:`placement`)."""
    out: dict[str, list[float]] = {}
    for jid in found or {}:
        for node, (g, c) in held.get(jid[-8:], {}).items():
            u = out.setdefault(node, [0.0, 0.0])
            u[0] += float(g)
            u[1] += float(c)
    return out


def free_now() -> dict[str, Any]:
    """Ray's availability view, per node (one GCS query)."""
    import ray

    return ray._private.state.available_resources_per_node()


def nodes(free: Optional[dict[str, Any]] = None) -> tuple[list[capacity.Node], dict[str, list[int]], dict[str, Any]]:
    """(the alive nodes with what is free on each, the CREATED GPU groups per Ray JobID, what those
    groups hold per node per Ray JobID)."""
    import ray

    total = ray._private.state.total_resources_per_node()
    free = free_now() if free is None else free
    used, created, held = placement()
    out = []
    for n in capacity.nodes_from_ray(total, free):
        u = used.get(n.id, [0.0, 0.0])
        out.append(capacity.Node(n.id, n.gpus, n.cpus, min(n.free_gpus, n.gpus - u[0]), min(n.free_cpus, n.cpus - u[1])))
    return out, created, held


def unplaced(groups: list[int], found: Optional[dict[str, bool]], created: dict[str, list[int]], retry_left: bool,
             last: Optional[list[int]] = None) -> Optional[list[int]]:
    """The groups of an admitted job that hold no CREATED placement group yet (so stay reserved).

    ``found``: its trainer's drivers (:func:`drivers`). A trainer that exited with no retry left
    holds nothing; one between attempts keeps its groups reserved. None: the GCS could not be
    asked (keep ``last``).
    """
    if found is None:
        return last
    left = list(groups)
    for jid, dead in found.items():
        for g in created.get(jid, []) if not dead else []:
            if g in left:
                left.remove(g)
    if found and all(found.values()) and not retry_left:
        return []
    return left


def describe_cluster(nodes_now: Sequence[capacity.Node]) -> dict[str, Any]:
    """Totals for the queue's summary."""
    return {"nodes": len(nodes_now), "gpus": sum(n.gpus for n in nodes_now),
            "free_gpus": sum(n.free_gpus for n in nodes_now)}


@dataclass
class Observed:
    """One reading of the cluster for the queue: the nodes, and per running job the groups it has
    not placed yet (None: Ray could not be asked), whether its trainer's drivers are all dead, and
    what its placement groups hold per node (``held``: what a preemption of it would free)."""

    nodes: list[capacity.Node] = field(default_factory=list)
    unplaced: dict[str, Optional[list[int]]] = field(default_factory=dict)
    trainer_gone: set[str] = field(default_factory=set)
    held: dict[str, dict[str, list[float]]] = field(default_factory=dict)


#: While nothing moves (the same free GPUs and CPUs, the same running jobs, all placed), the full
#: reading (placement groups, drivers) is taken again only this often...
FULL_EVERY_S = 2.0
#: ...and at every look for this long after anything moved: GPUs free when a trainer's placement
#: groups go, a moment before Ray marks its drivers dead (what lets the queue reap and admit).
SETTLE_S = 2.0


class ClusterReader:
    """The queue's reader of Ray's cluster state (the one place that asks Ray's GCS)."""

    def __init__(self) -> None:
        self._last: tuple[float, Any, Observed] = (0.0, None, Observed())
        self._moved_at = 0.0

    def observe(self, running: Mapping[str, Any]) -> Observed:
        """``running``: id -> the queue's Running entry (its groups, retries, what it had unplaced).

        One GCS query when nothing moved since the last full reading (less than
        :data:`FULL_EVERY_S` ago) nor in the :data:`SETTLE_S` before; a trainer leaving frees its
        placement groups, which moves the free GPUs, and a job with groups still to place is
        always read in full."""
        free = free_now()
        key = (tuple(sorted((n, float(d.get("GPU", 0)), float(d.get("CPU", 0))) for n, d in free.items())),
               tuple((i, r.in_ray, r.ending) for i, r in running.items()))
        at, last_key, last = self._last
        now = time.monotonic()
        if key != last_key:
            self._moved_at = now
        if (now - at < FULL_EVERY_S and now - self._moved_at >= SETTLE_S
                and not any(r.unplaced for r in running.values() if r.in_ray)):
            return Observed(list(last.nodes), {i: None if v is None else list(v) for i, v in last.unplaced.items()},
                            held={i: dict(v) for i, v in last.held.items()})
        out = self._observe(running, free)
        self._last = (now, key, out)
        return out

    def _observe(self, running: Mapping[str, Any], free: dict[str, Any]) -> Observed:
        nodes_now, created, held = nodes(free)
        out = Observed(nodes_now)
        for job_id, r in running.items():
            if not r.in_ray:
                continue
            found = drivers(job_id)
            out.held[job_id] = holdings_of(found, held)
            left = unplaced(list(r.req.groups), found, created, r.req.retries > 0, r.unplaced)
            # None: Ray could not be asked -- the queue keeps its own (a reading handed an older copy
            # of what the job had unplaced must not put that copy back)
            out.unplaced[job_id] = None if found is None else left
            if r.req.groups and not r.req.retries and not r.ending and not (r.unplaced if left is None else left):
                if found and all(found.values()):
                    out.trainer_gone.add(job_id)
        return out

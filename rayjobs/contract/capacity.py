"""Does a verl job fit the cluster, per node? Pure functions, no Ray, no I/O.

verl asks for one ``STRICT_PACK`` placement group per entry of ``gpu_groups``
(``[trainer.n_gpus_per_node] * trainer.nnodes``, plus a reward pool when it has its own), each
bundle ``{GPU: 1, CPU: 3}``. So every group must fit on ONE node, GPUs *and* CPUs; several groups
may share a node (nothing in verl forces them apart). Three answers:

* ``FITS``: the groups can be placed on the nodes' *free* resources now (after subtracting
  ``reserved`` groups: admitted jobs that have not created their placement groups yet);
* ``WAIT``: they fit the nodes' *total* resources, just not now;
* ``NEVER``: they do not fit even an empty cluster; :attr:`Verdict.reason` says
  "needs X, the cluster has Y" in one line.

Both sides apply the same rule, so it lives in the contract: the queue admits by it
(:mod:`rayjobs.oncluster.scheduler`) and a submit's live check refuses a job that could never fit
(:mod:`rayjobs.preflight.livecluster`) -- the laptop's refusal is the queue's own NEVER.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

#: CPUs per GPU bundle: verl's ``RayResourcePool(max_colocate_count=3)``.
CPUS_PER_GPU = 3
FITS, WAIT, NEVER = "fits", "wait", "never"
_EPS = 1e-6
#: Search budget for the exact packer (groups x nodes is small in practice; beyond it we say "no").
_BUDGET = 200_000


@dataclass(frozen=True)
class Node:
    """One alive node: total and currently free GPUs/CPUs."""

    id: str
    gpus: float
    cpus: float
    free_gpus: float
    free_cpus: float

    def label(self) -> str:
        return f"{_n(self.gpus)} GPU + {_n(self.cpus)} CPU"


@dataclass(frozen=True)
class Verdict:
    state: str  #: FITS, WAIT or NEVER
    reason: str = ""  #: one line; empty for FITS
    placement: tuple[str, ...] = ()  #: node id per group, in the given order (FITS only)

    @property
    def fits(self) -> bool:
        return self.state == FITS


def _n(x: float) -> str:
    return str(int(x)) if abs(x - round(x)) < _EPS else f"{x:g}"


def clean_groups(groups: Iterable[Any]) -> list[int]:
    """``gpu_groups`` as positive ints (metadata arrives as JSON)."""
    return [int(g) for g in groups if int(g) > 0]


def describe(groups: Sequence[int], cpus_per_gpu: int = CPUS_PER_GPU) -> str:
    """``[2, 2]`` -> ``2 groups of 2 GPU + 6 CPU, each on one node``."""
    groups = clean_groups(groups)
    if not groups:
        return "no GPUs"
    sizes = sorted(set(groups), reverse=True)
    parts = []
    for s in sizes:
        k = groups.count(s)
        what = f"{_n(s)} GPU + {_n(s * cpus_per_gpu)} CPU"
        parts.append(f"{k} groups of {what}" if k > 1 else f"1 group of {what}")
    return " and ".join(parts) + (", each on one node" if len(groups) > 1 else " on one node")


def pack(groups: Sequence[int], capacity: Mapping[str, tuple[float, float]],
         cpus_per_gpu: int = CPUS_PER_GPU) -> Optional[list[str]]:
    """Place each group on one node within ``capacity`` (node -> (gpus, cpus)); node per group, or None.

    Exact depth-first search, biggest groups first, best fit first (the node left with the fewest
    free GPUs), skipping nodes whose remaining capacity equals one already tried at that depth.
    """
    order = sorted(range(len(groups)), key=lambda i: -groups[i])
    nodes = list(capacity)
    left = {n: [float(capacity[n][0]), float(capacity[n][1])] for n in nodes}
    where: dict[int, str] = {}
    steps = [0]

    def go(k: int) -> bool:
        if k == len(order):
            return True
        steps[0] += 1
        if steps[0] > _BUDGET:
            return False
        i = order[k]
        g, c = groups[i], groups[i] * cpus_per_gpu
        tried = set()
        for n in sorted(nodes, key=lambda n: (left[n][0] - g, left[n][1] - c)):
            key = (round(left[n][0], 6), round(left[n][1], 6))
            if key in tried or left[n][0] + _EPS < g or left[n][1] + _EPS < c:
                continue
            tried.add(key)
            left[n][0] -= g
            left[n][1] -= c
            where[i] = n
            if go(k + 1):
                return True
            left[n][0] += g
            left[n][1] += c
        return False

    return [where[i] for i in range(len(groups))] if go(0) else None


def never_reason(groups: Sequence[int], nodes: Sequence[Node], cpus_per_gpu: int = CPUS_PER_GPU) -> Optional[str]:
    """Why ``groups`` can never fit ``nodes`` (even all idle), or None if they can."""
    groups = clean_groups(groups)
    if not groups:
        return None
    if pack(groups, {n.id: (n.gpus, n.cpus) for n in nodes}, cpus_per_gpu) is not None:
        return None
    total = sum(n.gpus for n in nodes)
    shape: dict[str, int] = {}
    for n in nodes:
        shape[n.label()] = shape.get(n.label(), 0) + 1
    has = " + ".join(f"{k} x ({s})" if k > 1 else f"1 node ({s})" for s, k in shape.items()) or "no nodes"
    big = max(groups)
    if not any(n.gpus + _EPS >= big and n.cpus + _EPS >= big * cpus_per_gpu for n in nodes):
        why = f"no node has {_n(big)} GPU + {_n(big * cpus_per_gpu)} CPU"
    elif sum(groups) > total + _EPS:
        why = f"{_n(sum(groups))} GPUs in all, the cluster has {_n(total)}"
    else:
        why = "the groups do not fit the nodes together"
    return f"needs {describe(groups, cpus_per_gpu)}, but {why}; the cluster: {has}"


def fit(groups: Sequence[int], nodes: Sequence[Node], reserved: Sequence[int] = (),
        cpus_per_gpu: int = CPUS_PER_GPU) -> Verdict:
    """Can ``groups`` start now, given free resources and the still-unplaced ``reserved`` groups?"""
    groups = clean_groups(groups)
    if not groups:
        return Verdict(FITS)
    never = never_reason(groups, nodes, cpus_per_gpu)
    if never:
        return Verdict(NEVER, never)
    reserved = clean_groups(reserved)
    free = {n.id: (n.free_gpus, n.free_cpus) for n in nodes}
    placed = pack(list(reserved) + groups, free, cpus_per_gpu)
    if placed is not None:
        return Verdict(FITS, "", tuple(placed[len(reserved):]))
    free_gpus = sum(n.free_gpus for n in nodes)
    per_node = ", ".join(f"{_n(n.free_gpus)} GPU + {_n(n.free_cpus)} CPU" for n in nodes)
    held = f", {_n(sum(reserved))} GPUs promised to starting jobs" if reserved else ""
    return Verdict(WAIT, f"needs {describe(groups, cpus_per_gpu)}; free now: {per_node} "
                         f"({_n(free_gpus)} GPUs{held})")


# --------------------------------------------------------------------------- inputs
def nodes_from_ray(total: Mapping[str, Mapping[str, float]], free: Mapping[str, Mapping[str, float]]) -> list[Node]:
    """From per-node totals and free resources, ``{node: {"GPU": n, "CPU": n}}`` (the head's
    :mod:`rayjobs.oncluster.clusterstate` reading, or the dashboard's resource use)."""
    out = []
    for nid, tot in total.items():
        av = free.get(nid, {})
        out.append(Node(nid, float(tot.get("GPU", 0)), float(tot.get("CPU", 0)),
                        float(av.get("GPU", 0)), float(av.get("CPU", 0))))
    return out


def nodes_from_state(rows: Iterable[Mapping[str, Any]]) -> list[Node]:
    """From the state API's ``/api/v0/nodes?detail=true`` rows (alive nodes; totals as free)."""
    out = []
    for r in rows:
        if str(r.get("state", "ALIVE")) != "ALIVE":
            continue
        tot = r.get("resources_total") or {}
        g, c = float(tot.get("GPU", 0)), float(tot.get("CPU", 0))
        out.append(Node(str(r.get("node_id")), g, c, g, c))
    return out

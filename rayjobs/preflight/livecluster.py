"""The checks that need the live cluster (a real submit only; a dry-run says it skipped them).

* versions: the cluster's Ray (same major, >= 2.52 for token auth) and verl (same minor as the
  config was composed against);
* per-node fit of every job's GPU groups (:mod:`rayjobs.contract.capacity`): a job that can
  never fit this cluster (no GPUs at all, fewer per node than a group asks, more nodes than it
  has) is refused (exit 2, nothing submitted) unless ``rayjobs.wait_for_capacity=true`` says the
  cluster will grow to fit it; one that does not fit the free capacity now only gets a note (it
  waits in the queue).

The cluster's resource use is read once per submit (``/api/cluster_status``: totals and use per
node). That view lags a node that has just joined by seconds, so before refusing a job the node
list of the state API (``/api/v0/nodes``, what Ray itself schedules on) is asked to confirm.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Optional, Sequence

from rayjobs.errors import ConfigError
from rayjobs.contract import capacity
from rayjobs.contract.meta import JobMeta
from rayjobs.preflight.problem import Problem, note
from rayjobs.preflight.verlfacts import verl_facts

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def version_tuple(v: str) -> tuple[int, ...]:
    """``"2.60.0"`` -> ``(2, 60, 0)``."""
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def version_problems(d: "Dashboard") -> list[Problem]:
    """The cluster's Ray and verl against this client's; notes for what is only worth a word."""
    from importlib.metadata import version

    from rayjobs import settings

    out: list[Problem] = []
    cluster_ray = str(d.version().get("ray_version") or "")
    mine = version("ray")
    if cluster_ray:
        a, b = version_tuple(mine), version_tuple(cluster_ray)
        if a[:1] != b[:1] or b < (2, 52):
            out.append(Problem("ray", cluster_ray, f"the cluster runs Ray {cluster_ray}, this client Ray {mine}; rayjobs "
                                                   f"needs the same major version and >= 2.52 (token auth)",
                               f"pip install 'ray[default]=={cluster_ray}' here, or upgrade the cluster image"))
        elif a[:2] != b[:2]:
            note(f"the cluster runs Ray {cluster_ray}, this client Ray {mine} (minor versions differ; usually fine)")
    if d.target.embedded or d.target.source == "embedded":
        return out  # the embedded head runs this interpreter: the same verl
    rec = settings.remembered_cluster()
    theirs = str(rec.get("verl") or rec.get("verl_version") or (rec.get("versions") or {}).get("verl") or "")
    theirs = theirs or _heads_verl(d)
    ours = verl_facts()["version"]
    if theirs and version_tuple(theirs)[:2] != version_tuple(ours)[:2]:
        out.append(Problem("verl", theirs, f"the cluster runs verl {theirs} but the config was composed and checked "
                                           f"against verl {ours} here (their config keys differ)",
                           f"pip install --no-deps verl=={theirs} here (or rebuild the cluster image with {ours})"))
    elif not theirs:
        note("the cluster record has no verl version: the client/cluster verl match is not checked")
    return out


def _heads_verl(d: "Dashboard") -> str:
    """verl's version as the head's queue reports it (a cluster reached by address, not `rayjobs connect`)."""
    try:
        return d.queue.health().verl
    except Exception:  # an older head, or the queue not up yet: the match is not checked (said)
        return ""


def nodes_in_use(d: "Dashboard") -> Optional[list[capacity.Node]]:
    """Per node, total and free GPUs/CPUs from the cluster's resource use; None if unreadable."""
    try:
        use = d.resource_use()
    except Exception:  # DashboardDown, or an answer of another shape
        return None
    total = {n: {k: float(v[1]) for k, v in u.items() if isinstance(v, list) and len(v) == 2} for n, u in use.items()}
    free = {n: {k: float(v[1]) - float(v[0]) for k, v in u.items() if isinstance(v, list) and len(v) == 2}
            for n, u in use.items()}
    return capacity.nodes_from_ray(total, free)


def waits_for_capacity(p: Any) -> bool:
    """``rayjobs.wait_for_capacity``: the user says the cluster will grow to fit this job (it scales)."""
    from omegaconf import OmegaConf

    return bool(OmegaConf.select(p.composed.cfg, "rayjobs.wait_for_capacity", default=False))


def never_fits(d: "Dashboard", prepared: Sequence[Any], nodes: list[capacity.Node]) -> list[tuple[Any, str]]:
    """(point, why) for each job that can never fit ``nodes``, per node (no GPUs at all, fewer GPUs
    per node than a group asks, more groups than the nodes hold). ``nodes`` come from the resource
    view; a verdict is confirmed against the state API's node list (a node that just joined is there first)."""
    confirmed: Optional[list[capacity.Node]] = None
    out = []
    for p in prepared:
        groups = list(JobMeta.from_ray(p.spec.metadata).gpu_groups)
        if not groups or not capacity.never_reason(groups, nodes):
            continue
        if confirmed is None:
            try:
                confirmed = capacity.nodes_from_state(d.nodes())
            except Exception:
                confirmed = nodes
        why = capacity.never_reason(groups, confirmed)
        if why and not any(n.gpus for n in confirmed):
            why = f"needs {capacity.describe(groups)}, but the cluster has no GPUs"
        if why:
            out.append((p, why))
    return out


def refuse_never_fitting(d: "Dashboard", prepared: Sequence[Any], nodes: list[capacity.Node]) -> None:
    """Raise ConfigError (exit 2, nothing submitted) for the first job that can never fit, per node,
    unless it says the cluster will grow to fit it (``rayjobs.wait_for_capacity=true``: a note)."""
    never = never_fits(d, prepared, nodes)
    has_gpus = any(n.gpus for n in nodes)
    for p, why in never:
        if not waits_for_capacity(p):
            fix = "lower trainer.nnodes / trainer.n_gpus_per_node, use a bigger cluster" if has_gpus else \
                "run it on a cluster with GPUs (rayjobs up, rayjobs connect or rayjobs.address=...)"
            raise ConfigError(f"{p.spec.submission_id} can never run on the cluster at {d.address}: it {why}; "
                              f"{fix}, or set rayjobs.wait_for_capacity=true if the cluster will grow to fit it")
    if never:
        gpuless = "" if has_gpus else \
            "; a cluster without GPUs does not hold GPU jobs back: they start once queued and need GPU nodes to join"
        note(f"{len(never)} of {len(prepared)} job(s) do not fit the cluster as it is now and are queued for the "
             f"capacity it will have (rayjobs.wait_for_capacity=true; first: {never[0][1]}){gpuless}")


def check_fit(d: "Dashboard", prepared: Sequence[Any]) -> None:
    """Refuse a job that can never fit (unless it waits for capacity); a note for those that wait
    for free GPUs now."""
    demands = [list(JobMeta.from_ray(p.spec.metadata).gpu_groups) for p in prepared]
    if not any(demands):
        return
    nodes = nodes_in_use(d)
    if nodes is None:
        note("could not read the cluster's resource use: per-node GPU fit not checked")
        return
    refuse_never_fitting(d, prepared, nodes)
    waiting = [v.reason for v in (capacity.fit(g, nodes) for g in demands if g) if v.state == capacity.WAIT]
    if waiting:
        note(f"{len(waiting)} of {len(prepared)} job(s) do not fit the free capacity now and wait in the queue "
             f"(first: {waiting[0]})")

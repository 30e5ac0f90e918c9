"""``rayjobs cluster``: nodes, GPUs used/free, job counts and the queue of the current target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from rayjobs import settings
from rayjobs.errors import ClusterUnreachable
from rayjobs.views.jobfields import status_of

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def view(d: Optional["Dashboard"] = None) -> dict[str, Any]:
    """Nodes (GPUs/CPUs used and total), job counts and the queue of ``d`` (default: the current target)."""
    from rayjobs.client.connection import connect
    from rayjobs.client.dashboard import DashboardDown
    from rayjobs.views import queuestatus

    d = d or connect()
    target = d.target
    try:
        nodes = d.nodes()  # the alive ones
        usage = d.resource_use()
    except (KeyError, TypeError, ValueError, DashboardDown) as e:
        raise ClusterUnreachable(f"could not read the cluster's nodes at {target.address}: {e}") from e
    rows = []
    for n in nodes:
        use = usage.get(n["node_id"], {})
        total = n.get("resources_total", {})
        gpu_used, gpu_total = (use.get("GPU") or [0.0, total.get("GPU", 0.0)])[:2]
        cpu_used, cpu_total = (use.get("CPU") or [0.0, total.get("CPU", 0.0)])[:2]
        rows.append({"ip": n.get("node_ip"), "head": bool(n.get("is_head_node")), "node_id": n["node_id"],
                     "gpus": gpu_total, "gpus_used": gpu_used, "cpus": cpu_total, "cpus_used": cpu_used})
    rows.sort(key=lambda r: (not r["head"], str(r["ip"])))
    view = queuestatus.QueueView.read(d)
    counts: dict[str, int] = {}
    in_ray = set()
    for j in d.list_jobs():
        if j.get("submission_id") in view.waiting:  # the queue's pre-started job: QUEUED below
            continue
        in_ray.add(j.get("submission_id"))
        counts[status_of(j)] = counts.get(status_of(j), 0) + 1
    for sid, h in view.history.items():  # finished jobs Ray has pruned still count
        if sid not in in_ray and h.get("status"):
            counts[str(h["status"])] = counts.get(str(h["status"]), 0) + 1
    if view.waiting:
        counts["QUEUED"] = len(view.waiting)
    queued = [{"id": sid, "queue_position": e["position"], "reason": e.get("reason")} for sid, e in view.waiting.items()]
    queued.sort(key=lambda q: q["queue_position"] or 0)
    rec = settings.remembered_cluster()
    return {
        "name": rec.get("name") if target.source.startswith("cluster") else target.source,
        "address": target.address,
        "nodes": rows,
        "gpus": sum(r["gpus"] for r in rows),
        "gpus_used": sum(r["gpus_used"] for r in rows),
        "gpus_free": sum(r["gpus"] - r["gpus_used"] for r in rows),
        "jobs": counts,
        "queue": queued,
    }


def render(v: dict[str, Any]) -> str:
    """The human view of :func:`view`."""
    lines = [f"cluster {v['name']} at {v['address']}: {len(v['nodes'])} node(s), "
             f"GPUs {v['gpus_used']:g} used / {v['gpus_free']:g} free / {v['gpus']:g} total"]
    lines.append(f"  {'NODE':<18}{'ROLE':<8}{'GPU used/total':>16}{'CPU used/total':>16}")
    for r in v["nodes"]:
        lines.append(f"  {str(r['ip']):<18}{'head' if r['head'] else 'worker':<8}"
                     f"{r['gpus_used']:>9g}/{r['gpus']:<6g}{r['cpus_used']:>9g}/{r['cpus']:<6g}")
    order = ["RUNNING", "QUEUED", "PENDING", "SUCCEEDED", "FAILED", "STOPPED"]
    jobs = ", ".join(f"{v['jobs'][s]} {s}" for s in order if v["jobs"].get(s)) or "none"
    lines.append(f"jobs: {jobs}")
    for q in v["queue"]:
        lines.append(f"  queued #{q['queue_position']}: {q['id']}")
    return "\n".join(lines)

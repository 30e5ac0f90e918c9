"""``rayjobs cluster``: nodes, GPUs used/free, job counts and the queue of the current target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from rayjobs import settings
from rayjobs.contract.status import Status, word
from rayjobs.errors import ClusterUnreachable
from rayjobs.shared import labels_versions

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def view(d: "Dashboard") -> dict[str, Any]:
    """Nodes (GPUs/CPUs used and total), job counts and the queue of the cluster ``d`` reads."""
    from rayjobs.client.dashboard import DashboardDown
    from rayjobs.views import queuestatus

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
                     "gpus": gpu_total, "gpus_used": gpu_used, "cpus": cpu_total, "cpus_used": cpu_used,
                     "versions": labels_versions(n.get("labels") or {})})
    rows.sort(key=lambda r: (not r["head"], str(r["ip"])))
    metrics = _use(d, rows)
    summary = d.queue.summary()
    counts: dict[str, int] = {}
    for j in queuestatus.all_jobs(d):
        counts[word(j.status, "?")] = counts.get(word(j.status, "?"), 0) + 1
    queued = [{"id": v.submission_id, "queue_position": v.queue_position, "reason": v.message} for v in summary.line]
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
        "users": summary.users or {},  # GPUs held, jobs running/waiting and the quota, per user (the queue's)
        "metrics": metrics,
        "client_versions": (mine := _client_versions()),
        "warnings": version_warnings(mine, rows),
    }


def _use(d: "Dashboard", rows: list[dict[str, Any]]) -> str:
    """Put each node's GPU/CPU/RAM use from Ray's metrics into its row (``use``); say where from.

    The head reads its nodes' metrics (``GET /v1/cluster``), for every target alike: the queue's API
    on the embedded head, through the owner's tunnel, or a team's door. So the laptop scrapes no
    node itself and needs no port of theirs. Never raises: an answer it cannot get says why.
    """
    from rayjobs.errors import RayjobsError

    try:  # a door's client has asked for it already (its nodes come from it)
        info = d.info() if getattr(d.target, "door", False) else d.queue.cluster()
    except RayjobsError as e:  # the queue down, or a head older than GET /v1/cluster
        for r in rows:
            r["use"] = None
        return f"none: the head's queue did not say ({e})"
    by_ip = {n.ip: n.use for n in info.nodes}
    for r in rows:
        r["use"] = by_ip.get(str(r["ip"]))
    return info.metrics or "the head's door"


def _client_versions() -> dict[str, Optional[str]]:
    from rayjobs.shared import stack_versions

    return stack_versions()


#: What must match between the client and the cluster (the client composes and checks configs
#: against its verl; the cluster's rayjobs runs the queue and the runner).
MATCH = ("rayjobs", "commit", "verl")


def version_warnings(mine: dict[str, Optional[str]], rows: list[dict[str, Any]]) -> list[str]:
    """One line per mismatch: the client vs the nodes (:data:`MATCH`), and nodes among themselves."""
    out = []
    for key in MATCH:
        theirs = {str(r["versions"][key]) for r in rows if r["versions"].get(key)}
        ours = (mine.get(key) or "")[:12] if key == "commit" else mine.get(key)
        if ours and theirs and theirs != {ours}:
            what = "rayjobs commit" if key == "commit" else key
            out.append(f"this client runs {what} {ours}, the cluster {', '.join(sorted(theirs))}: "
                       + ("configs are composed and checked against the client's verl"
                          if key == "verl" else "the queue and the job runner are the cluster's")
                       + " (rebuild the image from this commit, or use the cluster's version here)")
    for key in sorted({k for r in rows for k in r["versions"]} - set(MATCH)):
        seen = {str(r["versions"].get(key)) for r in rows}
        if len(seen) > 1:
            out.append(f"the nodes run different {key}: " + ", ".join(
                f"{r['ip']} {r['versions'].get(key) or 'none'}" for r in rows))
    return out


def render(v: dict[str, Any]) -> str:
    """The human view of :func:`view` (its warnings are the caller's to print, on stderr)."""
    from rayjobs.views.nodeuse import gpu_summary

    lines = [f"cluster {v['name']} at {v['address']}: {len(v['nodes'])} node(s), "
             f"GPUs {v['gpus_used']:g} used / {v['gpus_free']:g} free / {v['gpus']:g} total"]
    lines.append(f"  {'NODE':<18}{'ROLE':<8}{'GPU used/total':>16}{'CPU used/total':>16}   "
                 f"{'GPU util · memory':<28}{'CPU':>5}{'RAM used/total':>18}")
    for r in v["nodes"]:
        use = r.get("use") or {}
        cpu = f"{use['cpu_percent']:.0f}%" if use.get("cpu_percent") is not None else "-"
        ram = (f"{use['mem_used'] / 2**30:.1f}/{use['mem_total'] / 2**30:.1f} GiB"
               if use.get("mem_used") is not None and use.get("mem_total") else "-")
        lines.append(f"  {str(r['ip']):<18}{'head' if r['head'] else 'worker':<8}"
                     f"{r['gpus_used']:>9g}/{r['gpus']:<6g}{r['cpus_used']:>9g}/{r['cpus']:<6g}   "
                     f"{gpu_summary(use) if use else '-':<28}{cpu:>5}{ram:>18}")
    lines.extend(_version_lines(v["nodes"]))
    lines.append(f"metrics: {v.get('metrics')}")
    order = [s.value for s in (Status.RUNNING, Status.QUEUED, Status.PENDING, Status.SUCCEEDED, Status.FAILED, Status.STOPPED)]
    jobs = ", ".join(f"{v['jobs'][s]} {s}" for s in order if v["jobs"].get(s)) or "none"
    lines.append(f"jobs: {jobs}")
    for q in v["queue"]:
        lines.append(f"  queued #{q['queue_position']}: {q['id']}")
    for user, u in sorted((v.get("users") or {}).items()):
        quota = f" (quota {u['quota']})" if u.get("quota") is not None else ""
        lines.append(f"user {user or '?'}: {u['gpus']:g} GPU(s){quota}, {u['running']} running, {u['waiting']} waiting")
    return "\n".join(lines)


def _versions_text(ver: dict[str, str]) -> str:
    order = ["rayjobs", "ray", "verl", "vllm", "torch", "flash-attn"]
    parts = [f"{k} {ver[k]}" + (f" ({ver['commit']})" if k == "rayjobs" and ver.get("commit") else "")
             for k in order if ver.get(k)]
    return ", ".join(parts) or "not reported (a node rayjobs did not start)"


def _version_lines(nodes: list[dict[str, Any]]) -> list[str]:
    texts = [_versions_text(r.get("versions") or {}) for r in nodes]
    if len(set(texts)) <= 1:
        return [f"versions: {texts[0] if texts else '-'}" + (" (every node)" if len(texts) > 1 else "")]
    return ["versions:"] + [f"  {r['ip']}: {t}" for r, t in zip(nodes, texts)]

"""The cluster as the head sees it (:class:`rayjobs.contract.wire.ClusterInfo`): what ``rayjobs
cluster`` and a submit's live check (versions, per-node fit) need, read by the head from its own
dashboard -- the nodes (state API), the resource use per node (the autoscaler's view), every
node's metrics (scraped from inside the cluster's network) -- so the laptop asks the door only.
"""

from __future__ import annotations

from typing import Any, Optional

from rayjobs.shared import __version__, labels_versions

def node_info(n: dict[str, Any], use: dict[str, list[float]], metrics: Optional[dict[str, Any]]) -> dict[str, Any]:
    """One node's :class:`~rayjobs.contract.wire.NodeInfo` from the state API's entry, its resource
    use (``{name: [used, total]}``) and its metrics (None: none read)."""
    total = n.get("resources_total") or {}
    res = {k: [float(v[0]), float(v[1])] for k, v in use.items() if isinstance(v, list) and len(v) == 2}
    for k, v in total.items():
        if not str(k).startswith("node:"):
            res.setdefault(str(k), [0.0, float(v)])
    gpus = (metrics or {}).get("gpus") or []
    util = [g["util_percent"] for g in gpus if g.get("util_percent") is not None]
    labels = {str(k): str(v) for k, v in (n.get("labels") or {}).items()}
    return {"node_id": str(n.get("node_id")), "ip": str(n.get("node_ip") or ""), "is_head": bool(n.get("is_head_node")),
            "alive": str(n.get("state")) == "ALIVE",
            "gpus": res.get("GPU", [0.0, 0.0])[1], "gpus_used": res.get("GPU", [0.0, 0.0])[0],
            "cpus": res.get("CPU", [0.0, 0.0])[1], "cpus_used": res.get("CPU", [0.0, 0.0])[0],
            "labels": labels, "resources": res,
            "gpu_util": sum(util) / len(util) if util else None,
            "gpu_mem_used_mb": sum(g.get("mem_used_mib") or 0 for g in gpus) if gpus else None,
            "gpu_mem_total_mb": sum(g.get("mem_total_mib") or 0 for g in gpus) if gpus else None,
            "use": metrics, "versions": {k: str(v) for k, v in labels_versions(labels).items() if v}}


def cluster_info(dash: Any, summary: dict[str, Any], health: dict[str, Any]) -> dict[str, Any]:
    """(a worker thread) The :class:`~rayjobs.contract.wire.ClusterInfo` answer. Raises the
    dashboard's one-line error when it does not answer (the route's 500 says so)."""
    from rayjobs.oncluster import promscrape

    if dash is None:  # in-process (no Ray): the queue's own word only
        return {"ray_version": "", "session": health.get("session", ""), "rayjobs": __version__,
                "verl": health.get("verl", ""), "nodes": [], "queue": summary, "metrics": "no dashboard"}
    version = dash.version()
    nodes, use = dash.nodes(), dash.resource_use()
    fams, source = promscrape.read_cluster(dash)
    metrics = promscrape.per_node(fams)
    rows = [node_info(n, use.get(str(n.get("node_id")), {}), metrics.get(str(n.get("node_ip"))))
            for n in nodes if str(n.get("state")) == "ALIVE" or n.get("is_head_node")]
    rows.sort(key=lambda r: (not r["is_head"], r["ip"]))
    return {"ray_version": str(version.get("ray_version") or ""), "session": str(version.get("session_name") or ""),
            "rayjobs": __version__, "verl": health.get("verl", ""), "nodes": rows, "queue": summary,
            "metrics": source}

"""Per-node use from Ray's Prometheus metrics: GPU utilisation and memory, CPU, RAM, network.

The names and labels are Ray's own (``dashboard/modules/reporter/reporter_agent.py``, Ray 2.52-2.60):
``ray_node_gpus_utilization`` (percent) and ``ray_node_gram_used`` / ``ray_node_gram_available``
(MiB, whatever their HELP text says: Ray divides NVML's bytes by 2**20) per ``GpuIndex``;
``ray_node_cpu_utilization`` (percent), ``ray_node_mem_used`` / ``ray_node_mem_total`` (bytes),
``ray_node_network_send_speed`` / ``ray_node_network_receive_speed`` (bytes/s); each sample carries
the node's ``ip``. A node without GPUs (or whose GPUs NVML cannot see) has no GPU samples: its
``gpus`` list is empty, which is not the same as idle GPUs.
"""

from __future__ import annotations

from typing import Any, Iterable

_NODE = {
    "ray_node_cpu_utilization": "cpu_percent",
    "ray_node_mem_used": "mem_used",
    "ray_node_mem_total": "mem_total",
    "ray_node_network_send_speed": "net_send_bps",
    "ray_node_network_receive_speed": "net_recv_bps",
}
_GPU = {
    "ray_node_gpus_utilization": "util_percent",
    "ray_node_gram_used": "mem_used_mib",
    "ray_node_gram_available": "mem_free_mib",
}


def per_node(families: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """``{ip: {"cpu_percent", "mem_used", "mem_total", "net_send_bps", "net_recv_bps",
    "gpus": [{"index", "name", "util_percent", "mem_used_mib", "mem_total_mib"}]}}``.

    ``families`` are parsed metric families (``prometheus_client`` Metric objects, or anything
    with ``name`` and ``samples`` of ``(name, labels, value)``). The last sample of a series wins.
    """
    nodes: dict[str, dict[str, Any]] = {}
    gpus: dict[tuple[str, str], dict[str, Any]] = {}
    for fam in families:
        key, gkey = _NODE.get(fam.name), _GPU.get(fam.name)
        if not key and not gkey:
            continue
        for s in fam.samples:
            labels, value = s[1], float(s[2])
            ip = labels.get("ip")
            if not ip:
                continue
            node = nodes.setdefault(ip, {"gpus": []})
            if key:
                node[key] = value
            elif labels.get("GpuIndex") is not None:
                g = gpus.setdefault((ip, labels["GpuIndex"]), {"index": int(labels["GpuIndex"]),
                                                               "name": labels.get("GpuDeviceName")})
                g[gkey] = value
    for (ip, _), g in sorted(gpus.items(), key=lambda kv: (kv[0][0], kv[1]["index"])):
        if "mem_used_mib" in g and "mem_free_mib" in g:
            g["mem_total_mib"] = g["mem_used_mib"] + g.pop("mem_free_mib")
        nodes[ip]["gpus"].append(g)
    return nodes


def gpu_summary(node: dict[str, Any]) -> str:
    """``2 GPUs 87% · 61.2/140.0 GiB`` (mean utilisation, memory summed), or ``-`` without GPU data."""
    gs = node.get("gpus") or []
    if not gs:
        return "-"
    util = [g["util_percent"] for g in gs if g.get("util_percent") is not None]
    used = sum(g.get("mem_used_mib") or 0 for g in gs) / 1024
    total = sum(g.get("mem_total_mib") or 0 for g in gs) / 1024
    pct = f"{sum(util) / len(util):.0f}%" if util else "?%"
    return f"{len(gs)} GPU{'s' if len(gs) > 1 else ''} {pct} · {used:.1f}/{total:.1f} GiB"

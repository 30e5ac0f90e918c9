"""A node's GPU use in a word (what ``rayjobs cluster`` prints), from
:func:`rayjobs.oncluster.promscrape.per_node`'s reading of Ray's metrics."""

from __future__ import annotations

from typing import Any


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

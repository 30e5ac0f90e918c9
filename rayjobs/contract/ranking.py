"""How a sweep's points are named and ranked, one rule for ``rayjobs compare`` (the laptop) and the
page (the head): a point's label, the swept values (the sweep overrides that differ between the
points), each curve's last and best value (best: the highest, the lowest for a metric whose name
says ``loss``; the earliest step on a tie), and the best point(s)."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from rayjobs.contract.meta import JobMeta


def metric_mode(name: str) -> str:
    """``min`` for a loss, else ``max``."""
    return "min" if "loss" in name.lower() else "max"


def last_best(series: Sequence[Sequence[float]], mode: str) -> Optional[dict[str, Any]]:
    """Last and best of one curve (``[[step, value], ...]`` in step order); None for an empty one."""
    pts = [(int(s), float(v)) for s, v in series if math.isfinite(float(v))]
    if not pts:
        return None
    best_step, best = (max if mode == "max" else min)(pts, key=lambda p: p[1])  # the first of equals: earliest
    return {"last": pts[-1][1], "last_step": pts[-1][0], "best": best, "best_step": best_step, "mode": mode}


def point_label(overrides: Sequence[str], sep: str = "=") -> str:
    """A sweep point's name from its overrides: ``["algorithm.kl_ctrl.kl_coef=0.01"]`` -> ``kl_coef=0.01``
    (legends, the ``list`` column); ``sep="-"`` for run names."""
    parts = []
    for ov in overrides:
        key, _, value = ov.partition("=")
        parts.append(f"{key.lstrip('+~').rsplit('.', 1)[-1]}{sep}{value}")
    return ",".join(parts)


def swept(metas: Sequence[dict[str, str]]) -> tuple[list[str], list[dict[str, str]]]:
    """(the swept keys, each point's values of them): the sweep overrides that still differ among
    the points' metadata ``metas``; all of them for one point."""
    values = []
    for m in metas:
        d: dict[str, str] = {}
        for ov in JobMeta.from_ray(m).sweep_overrides:
            key, _, value = ov.partition("=")
            d[key.lstrip("+~")] = value
        values.append(d)
    keys = list(dict.fromkeys(k for d in values for k in d))
    if len(values) > 1:
        keys = [k for k in keys if len({d.get(k) for d in values}) > 1]
    return keys, values


def mark_best(rows: Sequence[dict[str, Any]], rank: str) -> None:
    """``best`` on the row(s) whose best value of ``rank`` is the best of all (every one of a tie);
    a row without a value of it never."""
    scored = [(r, r["metrics"][rank]) for r in rows if r["metrics"].get(rank)]
    if not scored:
        return
    top = (max if scored[0][1]["mode"] == "max" else min)(s["best"] for _, s in scored)
    for r, s in scored:
        r["best"] = s["best"] == top

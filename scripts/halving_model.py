"""A model of a halving sweep's GPU-seconds: the queue's own promotion rule over known curves, in simulated time.

``bench_halving.py`` runs one real sweep per rung setting, in one shuffled order (the sweep id's). How
much a halving sweep saves depends on that order (which points reach a rung first, against few rivals),
so one run is one draw. This replays the sweep with :func:`rayjobs.oncluster.halving.judge` (the rule
the queue applies) on ``gpus`` GPUs, each point costing a measured start-up, ``step_s`` a step, and a
measured way out (a natural end, or a halved point's from its rung's step), for many orders: the spread
that one real run was drawn from. Checked against the real runs (the model at each run's own order).
"""

from __future__ import annotations

import heapq
import random
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from rayjobs.contract.halving import Halving
from rayjobs.oncluster.halving import judge

Point = tuple[float, int]


@dataclass(frozen=True)
class Costs:
    """Seconds a point holds its GPU beyond its steps (medians of a real run)."""

    startup: float  #: admission -> first step
    end: float  #: last step -> its GPUs back (a point that ran to its end)
    out: float  #: its rung's step -> its GPUs back (a halved point)


def gpu_s(order: Sequence[Point], score: Callable[[Point, int], float], steps: int, step_s: float,
          rungs: Sequence[int], costs: Costs, gpus: int, keep: float) -> tuple[float, int]:
    """(GPU-seconds, steps trained) of the sweep admitted in ``order``, 1 GPU a point; no rungs: the full grid."""
    h = Halving("m", tuple(rungs), "max", keep)
    seen: dict[int, list[float]] = {r: [] for r in rungs}
    line = list(range(len(order)))[::-1]
    events: list[tuple[float, int, int]] = []  # (time, point, rung index; len(rungs): its end)
    admitted: dict[int, float] = {}
    total, trained = 0.0, 0

    def admit(t: float) -> None:
        if line:
            j = line.pop()
            admitted[j] = t
            heapq.heappush(events, (t + costs.startup + (rungs[0] if rungs else steps) * step_s, j, 0 if rungs else -1))

    for _ in range(gpus):
        admit(0.0)
    while events:
        t, j, k = heapq.heappop(events)
        if k < 0:  # ran to its end
            total, trained = total + t + costs.end - admitted[j], trained + steps
            admit(t + costs.end)
            continue
        v = score(order[j], rungs[k])
        verdict = judge(h, rungs[k], v, seen[rungs[k]])
        seen[rungs[k]].append(v)
        if verdict.goes_on:
            nxt = rungs[k + 1] if k + 1 < len(rungs) else steps
            heapq.heappush(events, (admitted[j] + costs.startup + nxt * step_s, j, k + 1 if k + 1 < len(rungs) else -1))
        else:
            total, trained = total + t + costs.out - admitted[j], trained + rungs[k]
            admit(t + costs.out)
    return total, trained


def over_orders(points: Sequence[Point], score: Callable[[Point, int], float], steps: int, step_s: float,
                rungs: Sequence[int], costs: Costs, gpus: int, keep: float, draws: int = 300) -> dict[str, float]:
    """The halved sweep's GPU-s as a fraction of the full grid's, over ``draws`` shuffled orders (seeded 0..):
    median, 10th and 90th percentiles, and the share of orders at or under 40 %."""
    full, _ = gpu_s(points, score, steps, step_s, (), costs, gpus, keep)
    fr = []
    for seed in range(draws):
        order = list(points)
        random.Random(seed).shuffle(order)
        fr.append(gpu_s(order, score, steps, step_s, rungs, costs, gpus, keep)[0] / full)
    fr.sort()
    return {"median": statistics.median(fr), "p10": fr[len(fr) // 10], "p90": fr[len(fr) * 9 // 10],
            "under_40": sum(1 for x in fr if x <= 0.40) / len(fr), "draws": draws}

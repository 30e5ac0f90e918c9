"""The policies a trace is run under, by name, and one run of each: the report the benchmark and
``rayjobs replay`` print."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional, Sequence

from rayjobs.oncluster import scheduler
from rayjobs.sim import metrics
from rayjobs.sim.baselines import PriorityHOL, RayPending
from rayjobs.sim.engine import Sim
from rayjobs.sim.kueue import Kueue
from rayjobs.sim.queue import Queue
from rayjobs.sim.slurm import EasyBackfill
from rayjobs.sim.trace import Trace

#: The policies of the benchmark, in its table's order (``rayjobs`` first).
NAMES = ("rayjobs", "fifo", "priority_hol", "easy_backfill", "kueue")
#: Beside them on request: the queue's rules without halving (what halving is worth).
EXTRA = ("rayjobs_no_halving",)


def make(name: str, queue_policy: Optional[scheduler.Policy] = None) -> Any:
    """A fresh policy object by name (``queue_policy``: the queue's head settings for ``rayjobs``).

    Raises:
        ValueError: an unknown name (one line naming the known ones).
    """
    qp = queue_policy or scheduler.Policy()
    factories: Mapping[str, Callable[[], Any]] = {
        "rayjobs": lambda: Queue(qp),
        "rayjobs_no_halving": lambda: Queue(qp, halving=False, name="rayjobs_no_halving"),
        "fifo": RayPending, "priority_hol": PriorityHOL, "easy_backfill": EasyBackfill, "kueue": Kueue,
    }
    if name not in factories:
        raise ValueError(f"--policy {name!r}: one of {', '.join(NAMES + EXTRA)}")
    return factories[name]()


def run(trace: Trace, name: str, queue_policy: Optional[scheduler.Policy] = None) -> tuple[dict[str, Any], Sim]:
    """Run ``trace`` under policy ``name``: (its report, the finished simulation)."""
    t0 = time.process_time()
    sim = Sim(trace, make(name, queue_policy)).run()
    makespan = max((lf.end or 0.0 for lf in sim.lives.values()), default=0.0)
    out = metrics.report(sim.lives.values(), sim.ledger, makespan=makespan)
    out["sim"] = {"cpu_s": round(time.process_time() - t0, 2), "passes": sim.passes}
    return out, sim


def run_all(trace: Trace, names: Sequence[str] = NAMES, queue_policy: Optional[scheduler.Policy] = None
            ) -> dict[str, tuple[dict[str, Any], Sim]]:
    """Every policy of ``names`` on the same trace."""
    return {n: run(trace, n, queue_policy) for n in names}

"""A simulated run's report: the numbers the field compares schedulers by (pure).

* ``utilisation`` -- the GPUs allocated to jobs that run while some ready GPU job waited (the time
  a scheduler can waste: idle GPUs with work waiting are fragmentation, head-of-line blocking, a
  reservation's hole); ``utilisation_held`` counts also GPUs held by jobs not started yet (plain
  Ray's first placement groups of a gang whose others wait); ``utilisation_all`` -- allocated over
  the whole run (the trace's load shows in it).
* ``goodput`` -- productive GPU-hours (steps kept) / allocated GPU-hours (``rayjobs usage``' ETTR).
* ``mean_wait_s``, ``p95_wait_s`` -- seconds a job waited (ready to first start, and again after
  each stop), over all jobs and per class (``eval``, ``single``, ``multinode``, ``sweep``).
* ``mean_jct_s`` -- ready to done; ``makespan_s`` -- the last job's end.
* ``jain`` -- Jain's index over users of GPU-hours held / their max-min fair share of the cluster,
  both while the users' demand exceeded it (1: every user got their fair share).
* ``ftf_rho`` -- Themis' finish-time fairness: a job's time in the cluster over the time it would
  take on its fair share (the cluster split among the users with work when it became ready);
  ``mean`` over jobs and ``worst_user`` (the largest of the users' mean ρ).
* ``redone_gpu_h`` -- GPU-hours of steps trained again after a preemption, eviction, time limit or crash.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Sequence

from rayjobs.sim.ledger import FAILED, HALVED, LEFT, NEVER, SUCCEEDED, Ledger, Life
from rayjobs.sim.trace import KINDS


def quantile(values: Sequence[float], q: float) -> Optional[float]:
    """The ``q`` quantile (nearest rank, as the field's p95s); None for none."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def mean(values: Iterable[float]) -> Optional[float]:
    v = list(values)
    return sum(v) / len(v) if v else None


def jain(xs: Sequence[float]) -> Optional[float]:
    """Jain's fairness index: (sum x)^2 / (n sum x^2); 1 when all are equal."""
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if xs and sq else None


def rho(life: Life, gpus: int) -> Optional[float]:
    """Finish-time fairness of one job (see the module's docstring); None for a job that never ran."""
    if life.jct is None or life.status in (NEVER, LEFT) or life.first_start is None:
        return None
    share = gpus / max(1, life.users_at_ready)
    ideal = life.service_s() * max(1.0, life.job.gpus / share)
    return life.jct / ideal if ideal > 0 else None


def report(lives: Iterable[Life], ledger: Ledger, *, makespan: float) -> dict[str, Any]:
    """The metrics of one run (see the module's docstring)."""
    lives = [lf for lf in lives if lf.ready is not None or lf.status]
    ran = [lf for lf in lives if lf.status != NEVER]
    waits = {k: [lf.waited for lf in ran if lf.job.cls == k] for k in KINDS}
    alloc = sum(lf.alloc_gpu_s for lf in ran)
    productive = sum(lf.productive_gpu_s for lf in ran)
    rhos = [(lf.job.user, r) for lf in ran if (r := rho(lf, ledger.capacity)) is not None]
    users = sorted({u for u, _ in rhos})
    per_user = [mean(r for u2, r in rhos if u2 == u) or 0.0 for u in users]
    shares = [ledger.held_u.get(u, 0.0) / f for u, f in ledger.fair_u.items() if f > 0]
    jcts = [lf.jct for lf in ran if lf.jct is not None and lf.status != LEFT]
    return {
        "utilisation": _r(ledger.busy_while_waiting_gpu_s / (ledger.capacity * ledger.waiting_s) if ledger.waiting_s else 1.0),
        "utilisation_held": _r(ledger.alloc_while_waiting_gpu_s / (ledger.capacity * ledger.waiting_s) if ledger.waiting_s else 1.0),
        "utilisation_all": _r(ledger.alloc_gpu_s / (ledger.capacity * makespan) if makespan else 0.0),
        "goodput": _r(productive / alloc if alloc else 0.0),
        "mean_wait_s": _r(mean(lf.waited for lf in ran), 1),
        "p95_wait_s": {k: _r(quantile(v, 0.95), 1) for k, v in waits.items() if v},
        "p95_wait_all_s": _r(quantile([lf.waited for lf in ran], 0.95), 1),
        "mean_wait_by_class_s": {k: _r(mean(v), 1) for k, v in waits.items() if v},
        "mean_jct_s": _r(mean(jcts), 1),
        "makespan_s": _r(makespan, 1),
        "jain": _r(jain(shares)),
        "ftf_rho": {"mean": _r(mean(r for _, r in rhos)), "worst_user": _r(max(per_user) if per_user else None)},
        "redone_gpu_h": _r(sum(lf.redone_gpu_s for lf in ran) / 3600.0, 2),
        "gpu_h": {"allocated": _r(alloc / 3600.0, 1), "productive": _r(productive / 3600.0, 1),
                  "startup": _r(sum(lf.startup_gpu_s for lf in ran) / 3600.0, 1)},
        "jobs": {"all": len(lives), "succeeded": _count(lives, SUCCEEDED), "failed": _count(lives, FAILED),
                 "halved": _count(lives, HALVED), "never_started": _count(lives, NEVER), "left": _count(lives, LEFT),
                 "preemptions": sum(lf.preemptions for lf in lives)},
    }


def _count(lives: Sequence[Life], status: str) -> int:
    return sum(1 for lf in lives if lf.status == status)


def _r(x: Optional[float], nd: int = 4) -> Optional[float]:
    return None if x is None else round(float(x), nd)


def waits_of(lives: Iterable[Life]) -> list[float]:
    """Every job's wait (for the CDF plot)."""
    return sorted(lf.waited for lf in lives if lf.status != NEVER and (lf.ready is not None))

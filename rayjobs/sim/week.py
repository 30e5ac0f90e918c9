"""A seeded week of an RL team's jobs on 16 nodes x 8 GPUs (no public cluster trace can ship:
Philly has no licence, Alibaba's and Helios' are research-only).

Ten users with habits (:data:`TEAMS`): sweepers (10-100 points of 1-8 GPUs, preemptible, half of
them halved), single-node GRPO runs of hours (8 GPUs), multi-node runs of 16-32 GPUs over a day,
1-GPU evaluations of minutes (some ``after`` a training run), a lead's urgent runs (priority 10).
Arrivals follow a working day (most between 9:00 and 19:00, each user's hours shifted a little,
weekends at a fifth). Start-up is taken from docs/benchmarks.md's GPU figures (an 8-GPU GRPO job's
admission to first step: 165-195 s with the node cache, H100; more for multi-node, less for an
evaluation); checkpoints every 10-50 steps with saves of 10-180 s; crashes at about 1 % an hour of
training, retried from the last checkpoint where the user set retries; each job's Slurm time limit
is its run time times a user's over-estimate (log-normal around 1.8x, some under 1x).

Three weeks: ``standard``, ``sweeps`` (sweep-heavy) and ``multinode`` (gangs of 16-32 GPUs).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

from rayjobs.contract.halving import Halving
from rayjobs.sim.trace import Trace, TraceJob, make

WEEKS = ("standard", "sweeps", "multinode")
DAY = 86400.0
#: The seed ``scripts/bench_team.py`` uses unless told (the standard trace of docs/benchmarks.md).
SEED = 49


@dataclass(frozen=True)
class Habit:
    """A user's kind of submission and how many a weekday (a sweep counts once)."""

    kind: str  #: eval | single | multinode | sweep | urgent
    per_day: float
    size: float = 1.0  #: scales a sweep's points, or a run's length


#: user -> habits, per week.
TEAMS: dict[str, dict[str, tuple[Habit, ...]]] = {
    "standard": {
        "alice": (Habit("sweep", 1.5), Habit("eval", 3)),
        "bob": (Habit("sweep", 1.0), Habit("single", 2)),
        "carol": (Habit("multinode", 1.0), Habit("eval", 2)),
        "dan": (Habit("multinode", 0.5, 2.0), Habit("multinode", 0.5), Habit("single", 1)),
        "erin": (Habit("single", 5), Habit("eval", 3)),
        "frank": (Habit("single", 5),),
        "grace": (Habit("eval", 14), Habit("single", 1)),
        "heidi": (Habit("single", 4), Habit("sweep", 0.5, 0.5)),
        "ivan": (Habit("urgent", 1.0), Habit("eval", 4), Habit("single", 2)),
        "judy": (Habit("single", 4), Habit("sweep", 1.0, 0.5)),
    },
    "sweeps": {
        "alice": (Habit("sweep", 1.5, 1.2), Habit("eval", 3)),
        "bob": (Habit("sweep", 1.0, 1.0), Habit("single", 1)),
        "carol": (Habit("sweep", 1.0, 0.8), Habit("eval", 2)),
        "dan": (Habit("multinode", 0.5, 2.0), Habit("single", 1)),
        "erin": (Habit("single", 3), Habit("eval", 3)),
        "frank": (Habit("sweep", 0.6, 1.5), Habit("single", 1)),
        "grace": (Habit("eval", 14), Habit("single", 1)),
        "heidi": (Habit("single", 2), Habit("sweep", 1.0, 0.5)),
        "ivan": (Habit("urgent", 1.0), Habit("eval", 4), Habit("single", 1)),
        "judy": (Habit("sweep", 1.0, 0.6), Habit("single", 1)),
    },
    "multinode": {
        "alice": (Habit("multinode", 1.0), Habit("eval", 3)),
        "bob": (Habit("multinode", 0.7, 2.0), Habit("single", 1)),
        "carol": (Habit("multinode", 1.2), Habit("eval", 2)),
        "dan": (Habit("multinode", 0.7, 2.0), Habit("single", 1)),
        "erin": (Habit("single", 4), Habit("eval", 3)),
        "frank": (Habit("single", 3), Habit("multinode", 0.8)),
        "grace": (Habit("eval", 14), Habit("single", 1)),
        "heidi": (Habit("single", 3), Habit("sweep", 0.5, 0.5)),
        "ivan": (Habit("urgent", 1.0), Habit("eval", 4), Habit("single", 1)),
        "judy": (Habit("sweep", 0.5, 0.5), Habit("single", 3)),
    },
}


def generate(week: str = "standard", seed: int = SEED) -> Trace:
    """The week's trace, the same for the same ``week`` and ``seed``.

    Raises:
        ValueError: a week that is not one of :data:`WEEKS`.
    """
    if week not in TEAMS:
        raise ValueError(f"--week {week!r}: one of {', '.join(WEEKS)}")
    rng = random.Random(f"{week}/{seed}")
    jobs: list[TraceJob] = []
    for k, (user, habits) in enumerate(sorted(TEAMS[week].items())):
        shift = rng.uniform(-1.0, 2.0)
        n = 0
        for day in range(7):
            for habit in habits:
                for _ in range(_poisson(rng, habit.per_day * (0.2 if day >= 5 else 1.0))):
                    t = day * DAY + _hour(rng, shift) * 3600.0
                    n += 1
                    jobs += MAKERS[habit.kind](rng, f"{user}-{n:03d}", user, t, habit.size)
    return make(jobs, name=week, seed=seed, about={"users": len(TEAMS[week])})


def _poisson(rng: random.Random, lam: float) -> int:
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _hour(rng: random.Random, shift: float) -> float:
    r = rng.random()
    if r < 0.75:
        h = rng.uniform(9.0, 19.0) + shift
    elif r < 0.95:
        h = rng.uniform(19.0, 24.0)
    else:
        h = rng.uniform(0.0, 9.0)
    return min(23.99, max(0.0, h))


def _limit(rng: random.Random, run_s: float) -> float:
    """A user's Slurm time limit: the run time over-estimated, rounded up to 15 minutes."""
    f = min(6.0, max(0.8, math.exp(rng.gauss(math.log(1.8), 0.45))))
    return math.ceil(run_s * f / 900.0) * 900.0


def _crashes(rng: random.Random, steps: int, step_s: float, per_hour: float = 0.01) -> tuple[int, ...]:
    """Steps at which attempts crash: about ``per_hour`` of the training hours."""
    if rng.random() >= 1.0 - math.exp(-per_hour * steps * step_s / 3600.0) or steps < 2:
        return ()
    return (rng.randint(1, steps - 1),)


def _run(rng: random.Random, job_id: str, user: str, t: float, groups: tuple[int, ...], hours: float,
         step_s: float, ckpt: tuple[int, float], startup: float, **kw: object) -> TraceJob:
    steps = max(1, int(hours * 3600.0 / step_s))
    job = TraceJob(id=job_id, user=user, arrival_s=round(t, 1), groups=groups, step_s=round(step_s, 1), steps=steps,
                   startup_s=round(startup, 1), ckpt_every=ckpt[0], ckpt_s=round(ckpt[1], 1),
                   fail_at=_crashes(rng, steps, step_s), **kw)  # type: ignore[arg-type]
    return TraceJob(**{**job.__dict__, "time_limit_s": _limit(rng, job.run_s())})


def _eval(rng: random.Random, job_id: str, user: str, t: float, size: float, after: tuple[str, ...] = ()) -> list[TraceJob]:
    minutes = rng.uniform(5, 30)
    return [_run(rng, job_id, user, t, (1,), minutes / 60.0, minutes * 60.0, (0, 0.0), rng.uniform(60, 120),
                 after=after, kind="eval")]


def _single(rng: random.Random, job_id: str, user: str, t: float, size: float) -> list[TraceJob]:
    run = _run(rng, job_id, user, t, (8,), rng.uniform(1.5, 8.0) * size, rng.uniform(60, 150),
               (rng.choice((20, 25, 50)), rng.uniform(30, 90)), rng.uniform(160, 200),
               preemptible=rng.random() < 0.3, retries=1)
    if rng.random() < 0.4:  # its evaluation, queued with it (rayjobs.after)
        return [run] + _eval(rng, job_id + "e", user, t, size, after=(job_id,))
    return [run]


def _multinode(rng: random.Random, job_id: str, user: str, t: float, size: float) -> list[TraceJob]:
    groups = (8,) * (2 if size <= 1.0 else 4)
    return [_run(rng, job_id, user, t, groups, rng.uniform(6.0, 20.0), rng.uniform(120, 300),
                 (rng.choice((10, 20, 25)), rng.uniform(60, 180)), rng.uniform(240, 360), retries=2)]


def _urgent(rng: random.Random, job_id: str, user: str, t: float, size: float) -> list[TraceJob]:
    return [_run(rng, job_id, user, t, (8,), rng.uniform(1.0, 3.0), rng.uniform(60, 120),
                 (25, rng.uniform(30, 90)), rng.uniform(160, 200), priority=10, retries=1)]


def _sweep(rng: random.Random, job_id: str, user: str, t: float, size: float) -> list[TraceJob]:
    points = max(10, min(100, int(rng.uniform(10, 40) * size)))
    gpus = rng.choice((1, 2, 2, 4, 4, 8))
    hours = rng.uniform(1.0, 4.0)
    step_s = rng.uniform(20, 60)
    steps = max(8, int(hours * 3600.0 / step_s))
    halving = ""
    if rng.random() < 0.5:
        halving = Halving("val/score", (steps // 4, steps // 2), "max", 1 / 3, True).to_json()
    startup, ckpt = rng.uniform(120, 180), (max(1, steps // 16), rng.uniform(10, 30))
    out = []
    for i in range(points):
        out.append(_run(rng, f"{job_id}s-{i}", user, t, (gpus,), steps * step_s / 3600.0, step_s, ckpt, startup,
                        preemptible=True, sweep=f"{job_id}s", halving=halving, quality=round(rng.gauss(0, 1), 3),
                        retries=1))
    return out


MAKERS: dict[str, Callable[..., list[TraceJob]]] = {
    "eval": _eval, "single": _single, "multinode": _multinode, "urgent": _urgent, "sweep": _sweep,
}

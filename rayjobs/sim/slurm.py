"""Slurm's EASY backfill as a policy of the simulator (the ``easy_backfill`` baseline).

The line is priority first, then submission. Jobs start in order while they fit; the first that does
not gets a reservation: the earliest moment enough GPUs free -- the running jobs ending at their
*time limits* (what the user asked for, ``time_limit_s``; Slurm knows nothing better) -- and where.
A later job may start now (backfill) if it fits and either ends, by its own time limit, before that
moment, or leaves the reservation's GPUs alone. A job still running at its limit is killed
(TIMEOUT); its user submits it again with twice the limit, and it resumes from its checkpoint.
One reservation (EASY, Lifka 1995; Slurm's ``sched/backfill`` with ``bf_max_job_test`` reservations
is between this and conservative backfill). The backfill pass runs on every event here (Slurm's runs
every ``bf_interval``, 30 s by default): the baseline is, if anything, favoured.
"""

from __future__ import annotations

import math
from typing import Optional

from rayjobs.sim.baselines import Line, priority_key
from rayjobs.sim.engine import Sim


class EasyBackfill(Line):
    """See the module's docstring."""

    name = "easy_backfill"

    def __init__(self) -> None:
        super().__init__()
        self.limit: dict[str, float] = {}  #: job -> its time limit now (doubled after a TIMEOUT)
        self.ends: dict[str, float] = {}  #: running job -> its start + time limit

    def key(self, sim: Sim, job_id: str) -> tuple:
        return priority_key(self, sim, job_id)

    def requeued(self, sim: Sim, job_id: str, why: str) -> None:
        self.ends.pop(job_id, None)
        if why == "timeout":
            self.limit[job_id] = 2 * self._limit(sim, job_id)
        self.submit(sim, job_id)

    def ended(self, sim: Sim, job_id: str, status: str) -> None:
        self.ends.pop(job_id, None)

    def _limit(self, sim: Sim, job_id: str) -> float:
        return self.limit.get(job_id) or sim.lives[job_id].job.limit_s

    def _start(self, sim: Sim, job_id: str, where: list[str]) -> None:
        self.take(job_id)
        sim.start(job_id, where)
        self.ends[job_id] = sim.now + self._limit(sim, job_id)
        sim.stop_now(job_id, "timeout", at=self.ends[job_id])

    def schedule(self, sim: Sim) -> None:
        head: Optional[str] = None
        shadow, spare = math.inf, None
        failed: set[tuple[int, ...]] = set()  # free only shrinks in a pass: a shape that failed fails again
        for _, job_id in list(self.line):
            groups = sim.lives[job_id].job.groups
            if groups in failed:
                continue
            where = sim.cluster.fit(groups)
            if where is None:
                failed.add(groups)
            if head is None:
                if where is not None:
                    self._start(sim, job_id, where)
                    continue
                head = job_id
                shadow, spare = self._reserve(sim, groups)
                continue
            if where is None:
                continue
            if sim.now + self._limit(sim, job_id) <= shadow:
                self._start(sim, job_id, where)
            elif spare is not None and self._leaves(sim, spare, groups, where, sim.lives[head].job.groups):
                self._start(sim, job_id, where)
                for g, n in zip(groups, where):
                    spare[n] -= g

    def _reserve(self, sim: Sim, groups: tuple[int, ...]) -> tuple[float, Optional[dict[str, int]]]:
        """(when the blocked job can start, as the running jobs end at their limits; what is free
        then) -- (inf, None) if never."""
        free = dict(sim.cluster.free)
        for job_id, end in sorted(self.ends.items(), key=lambda kv: kv[1]):
            for n, g in sim.cluster.held.get(job_id, {}).items():
                free[n] += g
            if sim.cluster.fit(groups, free) is not None:
                return end, free
        return math.inf, None

    def _leaves(self, sim: Sim, spare: dict[str, int], groups: tuple[int, ...], where: list[str],
                head: tuple[int, ...]) -> bool:
        """Would the blocked job still fit at its reservation with this job on ``where`` then?"""
        after = dict(spare)
        for g, n in zip(groups, where):
            after[n] -= g
            if after[n] < 0:
                return False
        return sim.cluster.fit(head, after) is not None

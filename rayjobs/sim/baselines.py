"""What a team would use instead of the queue, as policies of the simulator (same trace, same
cluster, same costs): the two line-at-a-time ones here, Slurm's EASY backfill in
:mod:`rayjobs.sim.slurm`, Kueue's classic rules in :mod:`rayjobs.sim.kueue`.

* :class:`RayPending` (``fifo``) -- plain Ray: every job is submitted at once and its trainer asks
  for its placement groups; Ray places any pending group that fits, oldest first, one group at a
  time (a multi-node job's first group holds its node while the second waits); no priorities, no
  preemption.
* :class:`PriorityHOL` (``priority_hol``) -- SkyPilot's cluster job queue: jobs in order (here
  priority first, then submission) and the first that does not fit blocks every job behind it
  (``sky/skylet/job_lib.py``: the scheduler returns at the first job waiting for resources).
"""

from __future__ import annotations

import bisect
from typing import Any

from rayjobs.sim.engine import Sim


class Line:
    """A baseline's waiting line, kept sorted by :meth:`key`."""

    handles_after = False
    wants_steps = False
    name = "line"

    def __init__(self) -> None:
        self.line: list[tuple[Any, str]] = []
        self._keys: dict[str, Any] = {}
        self._seq = 0

    def key(self, sim: Sim, job_id: str) -> Any:
        """Order: submission (the moment it became ready)."""
        self._seq += 1
        return (self._seq,)

    def submit(self, sim: Sim, job_id: str) -> None:
        k = self._keys.setdefault(job_id, self.key(sim, job_id))
        bisect.insort(self.line, (k, job_id))

    def requeued(self, sim: Sim, job_id: str, why: str) -> None:
        self.submit(sim, job_id)

    def ended(self, sim: Sim, job_id: str, status: str) -> None:
        return None

    def step(self, sim: Sim, job_id: str, step: int) -> None:
        return None

    def take(self, job_id: str) -> None:
        i = bisect.bisect_left(self.line, (self._keys[job_id], job_id))
        if i < len(self.line) and self.line[i][1] == job_id:
            del self.line[i]

    def schedule(self, sim: Sim) -> None:
        raise NotImplementedError


def priority_key(line: Line, sim: Sim, job_id: str) -> tuple:
    line._seq += 1
    return (-sim.lives[job_id].job.priority, line._seq)


class RayPending(Line):
    """Plain Ray's PENDING semantics (see the module's docstring)."""

    name = "fifo"

    def __init__(self) -> None:
        super().__init__()
        self.placed: dict[str, int] = {}  #: job -> how many of its groups hold a node

    def schedule(self, sim: Sim) -> None:
        free = sim.cluster.free
        for _, job_id in list(self.line):
            most = max(free.values())
            if most == 0:
                return
            groups = sim.lives[job_id].job.groups
            n = self.placed.get(job_id, 0)
            while n < len(groups) and groups[n] <= most:
                node = min((f, nid) for nid, f in free.items() if f >= groups[n])[1]  # best fit
                sim.take_group(job_id, node, groups[n])
                n += 1
                most = max(free.values())
            self.placed[job_id] = n
            if n == len(groups):
                self.take(job_id)
                del self.placed[job_id]
                sim.start(job_id, None)


class PriorityHOL(Line):
    """SkyPilot's cluster queue (see the module's docstring)."""

    name = "priority_hol"

    def key(self, sim: Sim, job_id: str) -> tuple:
        return priority_key(self, sim, job_id)

    def schedule(self, sim: Sim) -> None:
        while self.line:
            job_id = self.line[0][1]
            where = sim.cluster.fit(sim.lives[job_id].job.groups)
            if where is None:
                return
            self.take(job_id)
            sim.start(job_id, where)

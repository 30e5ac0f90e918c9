"""The queue's picture of its jobs, in memory: what the scheduler decides on and the API shows.

Three kinds of entry, one per job the queue holds: :class:`Waiting` (no Ray job yet, in line),
:class:`Running` (admitted: its Ray job was submitted, the trainer starts or runs) and, once its Ray
job has ended, an ``ending`` :class:`Running` while what it left on the nodes is reaped. Finished jobs
are only their status (``done``), which dependencies read. No I/O here; the queue service
(:mod:`rayjobs.oncluster.queueservice`) is the only writer, and the store is the durable copy.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from rayjobs.contract.record import JobRecord
from rayjobs.oncluster.request import Request, request_from_record


@dataclass
class Waiting:
    """A job in line."""

    rec: JobRecord
    req: Request

    @property
    def id(self) -> str:
        return self.req.id


@dataclass
class Running:
    """An admitted job (and, after its Ray job ended, the same entry while it is reaped)."""

    rec: JobRecord
    req: Request
    admitted_at: float  #: epoch s
    unplaced: list[int] = field(default_factory=list)  #: groups without a CREATED placement group yet
    in_ray: bool = False  #: its Ray job exists (the submit returned)
    ray: dict[str, Any] = field(default_factory=dict)  #: Ray's word at the last poll: status, start_time, ...
    note: str = ""
    stop_asked: bool = False  #: its user stopped it: it ends there, even mid-preemption
    ending: bool = False  #: its trainer's drivers are all dead, no retry to come: its GPUs free soon
    preempting_for: str = ""  #: the job it is being stopped for, at its next checkpoint
    preempt_asked: float = 0.0  #: when that stop was asked (epoch s)
    preempt_forced: bool = False  #: the queue stopped it itself (no checkpoints, or its runner was late)
    ended: str = ""  #: how its Ray job ended (a status, or LOST), while it is reaped
    history: dict[int, dict[str, float]] = field(default_factory=dict)  #: its run's metrics by step (halving reads it)
    checkpoint_at: float = 0.0  #: when its last complete checkpoint was saved (epoch s; 0: none seen)

    @property
    def id(self) -> str:
        return self.req.id


def _demand(req: Request) -> tuple[int, ...]:
    return tuple(sorted(req.groups))


class QueueState:
    """Every job the queue holds, with the indexes the scheduler needs to stay fast at 10,000
    waiting jobs: the line in order (kept sorted, not re-sorted per tick), the waiting jobs with
    dependencies, those without GPUs, and how many wait per GPU demand."""

    def __init__(self) -> None:
        self.waiting: dict[str, Waiting] = {}
        self.running: dict[str, Running] = {}
        self.ending: dict[str, Running] = {}  #: ended, what they left on the nodes being reaped
        self.done: dict[str, str] = {}  #: finished jobs' statuses (dependencies read them)
        self.gpu_gate: str = ""  #: why GPU admissions wait now (a reap in progress), "" if they may go
        self.standby: Optional[str] = None  #: the pre-started job's id
        self.calm_until: float = 0.0  #: no job is pre-started before this (epoch s): stops arrive in parts
        self.version = 0  #: bumped on every change (the service decides again only after one)
        self._line: list[tuple[tuple, str]] = []
        self.with_after: set[str] = set()
        self.requeueing: set[str] = set()  #: preempted jobs whose old Ray entry is being deleted
        self.gpuless: set[str] = set()
        self.shapes: Counter = Counter()
        #: successive halving: sweep -> rung -> {job id: its value there}, of every point that reached it
        self.ladder: dict[str, dict[int, dict[str, float]]] = {}

    # ------------------------------------------------------------------ the line
    def queue(self, rec: JobRecord) -> Waiting:
        """Put ``rec`` in line (a new job, a preempted one, a lost one)."""
        self.drop(rec.id)
        w = Waiting(rec, request_from_record(rec))
        self.waiting[w.id] = w
        bisect.insort(self._line, (w.req.key(), w.id))
        if w.req.after:
            self.with_after.add(w.id)
        if w.req.groups:
            self.shapes[_demand(w.req)] += 1
        else:
            self.gpuless.add(w.id)
        self.version += 1
        return w

    def take(self, job_id: str) -> Optional[Waiting]:
        """Take a job out of line (admitted, stopped, failed); None if it is not waiting."""
        w = self.waiting.pop(job_id, None)
        if w is None:
            return None
        i = bisect.bisect_left(self._line, (w.req.key(), w.id))
        if i < len(self._line) and self._line[i][1] == w.id:
            del self._line[i]
        self.with_after.discard(w.id)
        self.requeueing.discard(w.id)
        self.gpuless.discard(w.id)
        if w.req.groups:
            self.shapes[_demand(w.req)] -= 1
            if self.shapes[_demand(w.req)] <= 0:
                del self.shapes[_demand(w.req)]
        self.version += 1
        return w

    def drop(self, job_id: str) -> None:
        """Forget a job wherever it is (but ``done``)."""
        self.take(job_id)
        if self.running.pop(job_id, None) is not None or self.ending.pop(job_id, None) is not None:
            self.version += 1

    def in_order(self) -> Iterator[Waiting]:
        """The waiting jobs in line order: priority, submission, sweep point, when queued."""
        for _, job_id in self._line:
            yield self.waiting[job_id]

    def position(self, job_id: str) -> Optional[int]:
        """A waiting job's place in line (1 = next)."""
        w = self.waiting.get(job_id)
        if w is None:
            return None
        return bisect.bisect_left(self._line, (w.req.key(), w.id)) + 1

    # ------------------------------------------------------------------ admitted and finished
    def admit(self, w: Waiting, admitted_at: float, rec: JobRecord) -> Running:
        self.take(w.id)
        r = Running(rec, w.req, admitted_at, unplaced=list(w.req.groups))
        self.running[r.id] = r
        self.version += 1
        return r

    def finish(self, job_id: str, status: str) -> None:
        self.drop(job_id)
        self.done[job_id] = status
        self.version += 1

    def reached(self, sweep: str, rung: int, job_id: str, value: float) -> None:
        """A sweep point's value at a rung (it counts for the points that reach the rung after it)."""
        self.ladder.setdefault(sweep, {}).setdefault(rung, {})[job_id] = value
        self.version += 1

    def at_rung(self, sweep: str, rung: int, but: str) -> list[float]:
        """The values the sweep's other points reached ``rung`` with."""
        return [v for i, v in self.ladder.get(sweep, {}).get(rung, {}).items() if i != but]

    def holds(self, job_id: str) -> bool:
        return job_id in self.waiting or job_id in self.running or job_id in self.ending

    def gpus_by_user(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.running.values():
            out[r.req.user] = out.get(r.req.user, 0) + r.req.gpus
        return out

"""The queue's picture of its jobs, in memory: what the scheduler decides on and the API shows.

Three kinds of entry, one per job the queue holds: :class:`Waiting` (no Ray job yet, in line),
:class:`Running` (admitted: its Ray job was submitted, the trainer starts or runs) and, once its Ray
job has ended, an ``ending`` :class:`Running` while what it left on the nodes is reaped. Finished jobs
are only their status (``done``), which dependencies read. No I/O here; the queue service
(:mod:`rayjobs.oncluster.queueservice`) is the only writer, and the store is the durable copy.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import Status
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


#: Runs of a kind whose lengths are kept (the expectation is the longest of them: it errs long).
KEEP_RUNS = 5


def run_kind(job: Any) -> str:
    """Runs expected to take alike: the points of a sweep; else one user's runs of one experiment on
    the same GPU groups."""
    req = job.req
    if req.sweep:
        return f"sweep:{req.sweep}"
    return f"{req.user}/{job.rec.meta.experiment}/{','.join(str(g) for g in req.groups)}"


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
        self._lines: dict[str, list[tuple[tuple, str]]] = {}  #: user -> their part of the line, in order
        #: per user, GPU-seconds held before now, decayed (half-life ``half_life_s``), as of ``(value, at)``
        self.usage: dict[str, tuple[float, float]] = {}
        self.half_life_s = 4 * 3600.0
        #: how long runs took, admission to their GPUs' return, per kind of run (:func:`run_kind`): the newest few
        self.took: dict[str, list[float]] = {}

    # ------------------------------------------------------------------ the line
    def queue(self, rec: JobRecord) -> Waiting:
        """Put ``rec`` in line (a new job, a preempted one, a lost one)."""
        self.drop(rec.id)
        w = Waiting(rec, request_from_record(rec))
        self.waiting[w.id] = w
        bisect.insort(self._line, (w.req.key(), w.id))
        bisect.insort(self._lines.setdefault(w.req.user, []), (w.req.key(), w.id))
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
        for line in (self._line, self._lines.get(w.req.user, [])):
            i = bisect.bisect_left(line, (w.req.key(), w.id))
            if i < len(line) and line[i][1] == w.id:
                del line[i]
        if not self._lines.get(w.req.user, True):
            del self._lines[w.req.user]
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

    def in_fair_order(self, rank: Callable[[Waiting], float]) -> Iterator[Waiting]:
        """The waiting jobs, priority first, then -- among the users' next jobs of that priority --
        the job of the lowest ``rank`` (read again for a user's next job each time one of theirs is
        taken: a user's rank may rise as the pass admits their jobs), then the line's own order."""
        heap = []
        for user, line in self._lines.items():
            if line:
                w = self.waiting[line[0][1]]
                heap.append(((line[0][0][0], rank(w), line[0][0]), user, 0))
        heapq.heapify(heap)
        while heap:
            _, user, i = heapq.heappop(heap)
            line = self._lines.get(user, [])
            if i < len(line):
                yield self.waiting[line[i][1]]
                if i + 1 < len(line):
                    nxt = self.waiting[line[i + 1][1]]
                    heapq.heappush(heap, ((line[i + 1][0][0], rank(nxt), line[i + 1][0]), user, i + 1))

    def waiting_users(self) -> set[str]:
        """The users with jobs in line."""
        return set(self._lines)

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

    def charge(self, user: str, gpus: int, start: float, end: float) -> None:
        """``user`` held ``gpus`` from ``start`` to ``end`` (epoch s): added to their decayed usage."""
        if gpus <= 0 or end <= start:
            return
        h = self.half_life_s / math.log(2)  # the decay's time constant
        value, at = self.usage.get(user, (0.0, end))
        ref = max(at, end)
        value *= math.exp(-(ref - at) / h)
        value += gpus * h * (math.exp(-(ref - end) / h) - math.exp(-(ref - start) / h))
        self.usage[user] = (value, ref)

    def released(self, r: Running, at: float, status: str = "") -> None:
        """``r``'s GPUs went back at ``at`` (epoch s; it ended, or was stopped): its user's usage grows,
        and a run that SUCCEEDED tells how long its kind of run takes (:meth:`expected_s`)."""
        self.charge(r.req.user, r.req.gpus, r.admitted_at, at)
        if status == Status.SUCCEEDED and at > r.admitted_at and not r.rec.preemptions and not r.rec.lost:
            runs = self.took.setdefault(run_kind(r), [])
            runs.append(at - r.admitted_at)
            del runs[:-KEEP_RUNS]

    def remember(self, rec: JobRecord) -> None:
        """What an ended job's record says (a restart of the queue): its user's use over its spans,
        and -- SUCCEEDED in one run, never preempted or lost -- how long its kind of run takes."""
        req = request_from_record(rec)
        for a, b in rec.spans:
            self.charge(req.user, req.gpus, float(a), float(b))
        if rec.status == Status.SUCCEEDED and len(rec.spans) == 1 and not rec.preemptions and not rec.lost:
            a, b = rec.spans[0]
            runs = self.took.setdefault(run_kind(Waiting(rec, req)), [])
            runs.append(float(b) - float(a))
            del runs[:-KEEP_RUNS]

    def expected_s(self, job: Any) -> Optional[float]:
        """How long a run of ``job`` (waiting or running) is expected to take: the longest of the last
        :data:`KEEP_RUNS` runs of its kind that succeeded (a sweep's points; a user's runs of one
        experiment on the same GPUs); None before one did."""
        runs = self.took.get(run_kind(job))
        return max(runs) if runs else None

    def used(self, user: str, now: float) -> float:
        """``user``'s GPU-seconds of ended holdings, decayed to ``now`` (half-life ``half_life_s``)."""
        value, at = self.usage.get(user, (0.0, now))
        return value * math.exp(-max(0.0, now - at) * math.log(2) / self.half_life_s)

    def gpus_by_user(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.running.values():
            out[r.req.user] = out.get(r.req.user, 0) + r.req.gpus
        return out

"""What the simulator records: each job's life (waits, attempts, GPU time by part) and, over time,
the cluster's allocation against the users' demand (pure bookkeeping; :mod:`rayjobs.sim.metrics`
turns it into the report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from rayjobs.contract.status import Status
from rayjobs.sim.attempt import Attempt
from rayjobs.sim.trace import TraceJob

#: How a job ended: its last status, or NEVER (failed, never started: a dependency did not succeed)
#: and LEFT (still waiting or running when the simulation ended).
SUCCEEDED, FAILED, HALVED, NEVER, LEFT = Status.SUCCEEDED.value, Status.FAILED.value, "HALVED", "NEVER", "LEFT"


@dataclass
class Life:
    """One job through the simulation."""

    job: TraceJob
    ready: Optional[float] = None  #: when it could first start (submitted, its dependencies done)
    status: str = ""  #: "" while it lives; then SUCCEEDED, FAILED, HALVED, NEVER or LEFT
    first_start: Optional[float] = None
    end: Optional[float] = None  #: its trainer's exit for good
    waited: float = 0.0  #: seconds waiting (to its first start, and again after each stop)
    queued_since: Optional[float] = None  #: waiting now, since
    attempt: Optional[Attempt] = None  #: its attempt on GPUs now
    attempts: int = 0
    crashes: int = 0  #: entries of ``fail_at`` used up
    resume_from: int = 0  #: the step a next attempt resumes after (its last saved checkpoint)
    held_since: Optional[float] = None  #: GPUs held since (allocation)
    alloc_gpu_s: float = 0.0
    productive_gpu_s: float = 0.0  #: GPU-seconds of steps kept
    redone_gpu_s: float = 0.0  #: GPU-seconds of steps a later attempt trains again
    startup_gpu_s: float = 0.0
    preemptions: int = 0  #: stopped for another job and put back in line (incl. evictions, time limits)
    users_at_ready: int = 1  #: users with work on the cluster or waiting when it became ready
    stop_token: int = 0  #: bumped to withdraw a planned stop
    stop_plan: Optional[tuple[str, float]] = None  #: (why, by when at the latest) of a planned stop

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def jct(self) -> Optional[float]:
        return None if self.end is None or self.ready is None else self.end - self.ready

    def service_s(self) -> float:
        """Seconds it would have run alone, for the work it did (start-up, steps kept, their saves)."""
        j = self.job
        steps = self.productive_gpu_s / (j.gpus * j.step_s) if j.gpus and j.step_s else 0.0
        saves = int(max(0.0, steps - 1) // j.ckpt_every) if j.ckpt_every else 0
        return j.startup_s + steps * j.step_s + saves * j.ckpt_s


def fair_shares(capacity: float, demand: dict[str, float]) -> dict[str, float]:
    """Max-min fair shares of ``capacity`` among users asking ``demand`` (water filling)."""
    out: dict[str, float] = {}
    left, users = float(capacity), sorted(demand, key=lambda u: demand[u])
    for i, u in enumerate(users):
        give = min(demand[u], left / (len(users) - i))
        out[u] = give
        left -= give
    return out


@dataclass
class Ledger:
    """The cluster over time: GPU-seconds allocated, while any ready GPU job waited, and -- while the
    users' demand exceeded the cluster -- each user's GPU-seconds held against their max-min fair share."""

    capacity: int
    t: float = 0.0
    alloc_gpu_s: float = 0.0
    waiting_s: float = 0.0  #: seconds some ready GPU job waited
    alloc_while_waiting_gpu_s: float = 0.0
    busy_while_waiting_gpu_s: float = 0.0  #: less GPUs held by jobs not started (a gang's first groups)
    contended_s: float = 0.0
    held_u: dict[str, float] = field(default_factory=dict)  #: user -> GPU-s held while contended
    fair_u: dict[str, float] = field(default_factory=dict)  #: user -> GPU-s of fair share while contended

    def advance(self, t: float, used: int, held: dict[str, int], waiting: dict[str, int], unstarted: int = 0) -> None:
        """Time moves to ``t``; ``used`` GPUs held (``unstarted`` of them by jobs not started yet),
        ``held``/``waiting`` GPUs per user, since the last move."""
        dt = t - self.t
        if dt <= 0:
            return
        self.t = t
        self.alloc_gpu_s += used * dt
        if any(waiting.values()):
            self.waiting_s += dt
            self.alloc_while_waiting_gpu_s += used * dt
            self.busy_while_waiting_gpu_s += (used - unstarted) * dt
        demand = {u: held.get(u, 0) + waiting.get(u, 0) for u in set(held) | set(waiting)}
        if sum(demand.values()) <= self.capacity:
            return
        self.contended_s += dt
        for u, share in fair_shares(self.capacity, {u: float(d) for u, d in demand.items() if d}).items():
            self.fair_u[u] = self.fair_u.get(u, 0.0) + share * dt
            self.held_u[u] = self.held_u.get(u, 0.0) + held.get(u, 0) * dt

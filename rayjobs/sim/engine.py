"""The simulator: a trace's jobs on a simulated cluster under one scheduling policy, on a simulated
clock (discrete events, no Ray, no sleeping).

The engine owns time, the cluster and each job's life; a policy (:mod:`rayjobs.sim.queue`, the real
queue's rules; :mod:`rayjobs.sim.baselines`) owns its line and decides, in ``schedule`` after every
moment something happened, by calling :meth:`Sim.start`, :meth:`Sim.stop_at_checkpoint`,
:meth:`Sim.stop_now`, :meth:`Sim.halve` ... What running costs is charged the same under every
policy: each admission's start-up, checkpoint saves, the steps a stop or a crash makes a later
attempt train again (since the last save), a crash's new attempt (start-up again, on the same GPUs,
while ``retries`` last), and the hand-over of a job's GPUs after its trainer exits (``handover_s``:
the queue's reap, a batch system's epilog).
"""

from __future__ import annotations

import functools
import heapq
from typing import Any, Optional, Protocol

from rayjobs.contract.halving import Halving
from rayjobs.sim.attempt import Attempt
from rayjobs.sim.cluster import Cluster
from rayjobs.sim.ledger import FAILED, HALVED, LEFT, NEVER, SUCCEEDED, Ledger, Life
from rayjobs.sim.trace import Trace

#: Seconds from a trainer's exit until its GPUs can be handed out again (the queue's reap after a
#: stop: 0.67 s median in docs/benchmarks.md's preemption section; rounded up).
HANDOVER_S = 1.0
#: Simulated time after the last arrival at which a run gives up (jobs still waiting: LEFT).
HORIZON_S = 28 * 86400.0

ARRIVE, STEP, END, CRASH, STOP, FREE, WAKE = range(7)
#: Why a job is stopped: it goes back in line after these; after HALVED it is done.
REQUEUE = ("preempted", "evicted", "timeout", "overdue")


class Policy(Protocol):
    """What the engine asks of a scheduling policy."""

    name: str
    handles_after: bool  #: it holds jobs with dependencies itself (else they arrive once ready)
    wants_steps: bool  #: it is told when a halved sweep's point reaches a rung

    def submit(self, sim: "Sim", job_id: str) -> None: ...
    def requeued(self, sim: "Sim", job_id: str, why: str) -> None: ...
    def ended(self, sim: "Sim", job_id: str, status: str) -> None: ...
    def step(self, sim: "Sim", job_id: str, step: int) -> None: ...
    def schedule(self, sim: "Sim") -> None: ...


class Sim:
    """One policy over one trace. :meth:`run`, then read :attr:`lives` and :attr:`ledger`."""

    def __init__(self, trace: Trace, policy: Policy, *, handover_s: float = HANDOVER_S) -> None:
        self.trace, self.policy, self.handover_s = trace, policy, handover_s
        self.cluster = Cluster(trace.nodes, trace.gpus_per_node)
        self.lives = {j.id: Life(j) for j in trace.jobs}
        self.ledger = Ledger(self.cluster.gpus)
        self.now = 0.0
        self.held_by: dict[str, int] = {}  #: user -> GPUs held
        self.waiting_by: dict[str, int] = {}  #: user -> GPUs of ready jobs waiting
        self.waiting: set[str] = set()  #: ready jobs waiting (submitted to the policy, not running)
        self.running: set[str] = set()  #: jobs holding GPUs (starting, training, handing over)
        self.passes = 0
        self.unstarted = 0  #: GPUs held by jobs not started yet (Ray's placement groups of a gang, one by one)
        self._heap: list[tuple[float, int, int, str, Any]] = []
        self._seq = 0
        self._dependents: dict[str, list[str]] = {}
        self._requeue: dict[str, str] = {}  #: job -> why, between its trainer's exit and its GPUs' hand-over
        self._cut: dict[str, float] = {}  #: start-up seconds saved at a job's next start (pre-started)

    # ------------------------------------------------------------------ the clock
    def at(self, t: float, kind: int, job_id: str = "", data: Any = None) -> None:
        """An event at ``t`` (seconds after time 0)."""
        self._seq += 1
        heapq.heappush(self._heap, (max(t, self.now), self._seq, kind, job_id, data))

    def wake(self, t: float) -> None:
        """Run the policy's ``schedule`` again at ``t`` (its clocks: a starvation guard, a deadline)."""
        if t > self.now:
            self.at(t, WAKE)

    def run(self) -> "Sim":
        """Every event in order; ``schedule`` once after each moment's events."""
        for j in self.trace.jobs:
            self.at(j.arrival_s, ARRIVE, j.id)
            for dep in j.after:
                self._dependents.setdefault(dep, []).append(j.id)
        last = max((j.arrival_s for j in self.trace.jobs), default=0.0)
        while self._heap and self._heap[0][0] <= last + HORIZON_S:
            t = self._heap[0][0]
            self._advance(t)
            while self._heap and self._heap[0][0] <= t:
                _, _, kind, job_id, data = heapq.heappop(self._heap)
                self._handle(kind, job_id, data)
            self.passes += 1
            self.policy.schedule(self)
        self._close()
        return self

    def _advance(self, t: float) -> None:
        self.ledger.advance(t, self.cluster.used, self.held_by, self.waiting_by, self.unstarted)
        self.now = t

    def _close(self) -> None:
        for life in self.lives.values():
            if life.status:
                continue
            life.status = LEFT
            if life.queued_since is not None:
                life.waited += self.now - life.queued_since
            if life.held_since is not None:
                life.alloc_gpu_s += self.cluster.holds(life.id) * (self.now - life.held_since)

    def _handle(self, kind: int, job_id: str, data: Any) -> None:
        if kind == ARRIVE:
            self._arrive(job_id)
        elif kind == FREE:
            self._free(job_id)
        elif kind == WAKE:
            return
        else:
            life = self.lives[job_id]
            number, extra = data
            if life.attempt is None or life.attempt.number != number:
                return  # an event of an attempt that is over
            if kind == STEP:
                self.policy.step(self, job_id, extra)
            elif kind == END:
                self._exit(life, SUCCEEDED)
            elif kind == CRASH:
                self._crash(life)
            elif kind == STOP and extra[1] in (life.stop_token, -1):
                self._exit(life, extra[0])

    # ------------------------------------------------------------------ arrivals and dependencies
    def _arrive(self, job_id: str) -> None:
        life = self.lives[job_id]
        deps = [self.lives[d].status for d in life.job.after]
        if any(s and s != SUCCEEDED for s in deps):
            if not self.policy.handles_after:
                return self.never(job_id)
        elif all(s == SUCCEEDED for s in deps):
            life.ready = self.now
        if life.ready is not None or self.policy.handles_after:
            self._enqueue(life)
            self.policy.submit(self, job_id)

    def _enqueue(self, life: Life) -> None:
        if life.ready is not None and life.queued_since is None:
            life.queued_since = self.now
            life.users_at_ready = len({u for u, g in self.held_by.items() if g} | {u for u, g in self.waiting_by.items() if g}
                                      | {life.job.user})
            self.waiting.add(life.id)
            self.waiting_by[life.job.user] = self.waiting_by.get(life.job.user, 0) + life.job.gpus

    def _unqueue(self, life: Life) -> None:
        if life.queued_since is not None:
            life.waited += self.now - life.queued_since
            life.queued_since = None
            self.waiting.discard(life.id)
            self.waiting_by[life.job.user] -= life.job.gpus

    def _settled(self, job_id: str) -> None:
        """A job ended for good: its dependents become ready, or can never start."""
        ok = self.lives[job_id].status == SUCCEEDED
        for d in self._dependents.get(job_id, []):
            life = self.lives[d]
            if life.status or life.ready is not None or self.now < life.job.arrival_s:
                continue
            states = [self.lives[a].status for a in life.job.after]
            if not ok and not self.policy.handles_after:
                self.never(d)
            elif all(s == SUCCEEDED for s in states):
                life.ready = self.now
                if self.policy.handles_after:
                    self._enqueue(life)
                else:
                    self._enqueue(life)
                    self.policy.submit(self, d)

    def never(self, job_id: str) -> None:
        """A job fails without starting (a dependency did not succeed)."""
        life = self.lives[job_id]
        if life.status:
            return
        self._unqueue(life)
        life.status, life.end = NEVER, self.now
        self._settled(job_id)

    # ------------------------------------------------------------------ what a policy does
    def take_group(self, job_id: str, node: str, gpus: int) -> None:
        """Hold ``gpus`` on ``node`` for ``job_id`` before it starts (Ray's placement groups, one by one)."""
        life = self.lives[job_id]
        if life.held_since is None:
            life.held_since = self.now
        self.cluster.take(job_id, node, gpus)
        self.held_by[life.job.user] = self.held_by.get(life.job.user, 0) + gpus
        self.running.add(job_id)
        self.unstarted += gpus

    def start(self, job_id: str, where: Optional[list[str]] = None) -> None:
        """Admit a waiting job: its groups on ``where`` (a node each; None: already held), an attempt begins."""
        life = self.lives[job_id]
        if where is not None:
            for g, n in zip(life.job.groups, where):
                self.take_group(job_id, n, g)
        self._unqueue(life)
        self.unstarted -= self.cluster.holds(job_id)
        if life.first_start is None:
            life.first_start = self.now
        self._attempt(life, max(0.0, life.job.startup_s - self._cut.pop(life.id, 0.0)))

    def pre_start(self, job_id: str, saves_s: float) -> None:
        """The job's next start-up is ``saves_s`` shorter (pre-started in Ray while it waited)."""
        self._cut[job_id] = saves_s

    def _attempt(self, life: Life, startup_s: float) -> None:
        life.attempts += 1
        a = Attempt(life.job, self.now, life.resume_from, startup_s, life.attempts)
        life.attempt = a
        life.startup_gpu_s += life.job.gpus * startup_s
        j = life.job
        fail = j.fail_at[life.crashes] if life.crashes < len(j.fail_at) else None
        if fail is not None and life.resume_from < fail < j.steps:
            self.at(a.step_done(fail), CRASH, life.id, (a.number, fail))
        else:
            self.at(a.end(), END, life.id, (a.number, None))
        if self.policy.wants_steps:
            for rung in _rungs(j.halving):
                if life.resume_from < rung <= j.steps:
                    self.at(a.step_done(rung), STEP, life.id, (a.number, rung))
        if life.stop_plan:
            self._plan_stop(life, *life.stop_plan)

    def stop_at_checkpoint(self, job_id: str, wait_s: float, why: str = "preempted") -> None:
        """Stop the job right after its next checkpoint is saved, at most ``wait_s`` from now (then at
        once, losing what it trained since its last save); at once if it saves none."""
        life = self.lives[job_id]
        if not life.job.ckpt_every:
            return self.stop_now(job_id, why)
        life.stop_plan = (why, self.now + wait_s)
        self._plan_stop(life, why, self.now + wait_s)

    def _plan_stop(self, life: Life, why: str, by: float) -> None:
        a = life.attempt
        nxt = a.next_saved(self.now) if a else None
        when = min(by, nxt[1]) if nxt else by
        if a and when < a.end():
            life.stop_token += 1
            self.at(when, STOP, life.id, (a.number, (why, life.stop_token)))

    def stop_now(self, job_id: str, why: str = "preempted", at: Optional[float] = None) -> None:
        """Stop the job now -- or at ``at`` whatever it is doing then (a batch system's time limit:
        such a stop is not withdrawn by later plans)."""
        life = self.lives[job_id]
        if life.attempt is None:
            return
        if at is not None:
            return self.at(at, STOP, job_id, (life.attempt.number, (why, -1)))
        life.stop_token += 1
        life.stop_plan = None
        self.at(self.now, STOP, job_id, (life.attempt.number, (why, life.stop_token)))

    def halve(self, job_id: str, step: int) -> None:
        """Stop the job at its first checkpoint at or past ``step`` (at once if it saves none)."""
        life = self.lives[job_id]
        a = life.attempt
        if a is None:
            return
        got = a.first_saved_from(step) if life.job.ckpt_every else (step, self.now)
        if got is not None and got[1] < a.end():
            life.stop_token += 1
            self.at(got[1], STOP, job_id, (a.number, (HALVED, life.stop_token)))

    def call_off(self, job_id: str) -> None:
        """Withdraw a planned stop: the job trains on."""
        life = self.lives[job_id]
        life.stop_token += 1
        life.stop_plan = None

    # ------------------------------------------------------------------ a trainer's exit
    def _crash(self, life: Life) -> None:
        j = life.job
        done, saved = _steps(life, self.now)
        life.crashes += 1
        if life.crashes <= j.retries:  # a new attempt on the same GPUs, from its last save
            _charge(life, saved, done)
            life.resume_from = saved
            self._attempt(life, j.startup_s)
            return
        _charge(life, done, done)
        self._exit_for_good(life, FAILED)

    def _exit(self, life: Life, why: str) -> None:
        done, saved = _steps(life, self.now)
        if why == SUCCEEDED or why == HALVED:
            _charge(life, done, done)
            return self._exit_for_good(life, why)
        _charge(life, saved, done)  # preempted, evicted, timeout: back in line, resumes from its save
        life.resume_from = saved
        life.preemptions += 1
        life.attempt, life.stop_plan = None, None
        self._requeue[life.id] = why
        self.at(self.now + self.handover_s, FREE, life.id)

    def _exit_for_good(self, life: Life, status: str) -> None:
        life.attempt, life.stop_plan = None, None
        life.status, life.end = status, self.now
        self.policy.ended(self, life.id, status)
        self.at(self.now + self.handover_s, FREE, life.id)
        self._settled(life.id)

    def _free(self, job_id: str) -> None:
        life = self.lives[job_id]
        if life.held_since is not None:
            life.alloc_gpu_s += self.cluster.holds(job_id) * (self.now - life.held_since)
            life.held_since = None
        self.held_by[life.job.user] -= self.cluster.release(job_id)
        self.running.discard(job_id)
        why = self._requeue.pop(job_id, None)
        if why is not None:
            self._enqueue(life)
            self.policy.requeued(self, job_id, why)


def _steps(life: Life, now: float) -> tuple[int, int]:
    """(steps done, the last saved checkpoint's step) of the job's attempt at ``now``."""
    a = life.attempt
    done, saved, _ = a.at(now)
    return (life.job.steps, saved) if now >= a.end() else (done, saved)


def _charge(life: Life, kept_to: int, done: int) -> None:
    """The attempt's steps up to ``kept_to`` are kept (productive); those after, to ``done``, a later attempt redoes."""
    j, a = life.job, life.attempt
    life.productive_gpu_s += j.gpus * j.step_s * max(0, kept_to - a.from_step)
    life.redone_gpu_s += j.gpus * j.step_s * max(0, done - kept_to)


@functools.lru_cache(maxsize=4096)
def _rungs(halving: str) -> tuple[int, ...]:
    h = Halving.from_json(halving) if halving else None
    return h.rungs if h else ()

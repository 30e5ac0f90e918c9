"""The rayjobs queue in the simulator: the real rules (:func:`rayjobs.oncluster.scheduler.decide`,
with its halving, quota and victim rules) on a real :class:`~rayjobs.oncluster.queuestate.QueueState`
of real job records, their actions carried out on the simulated cluster as the queue service's
executors carry them out on Ray.

What the service's executors do, as the simulator charges it: an admitted job is placed where
:func:`rayjobs.contract.capacity.fit` puts it; a preempted job stops right after its next
checkpoint (at most its ``preempt_wait_s``) and goes back to its place in line, held while Ray's
entry of it is deleted (:data:`REQUEUE_S`); a job ending closes the GPU gate for the reap
(the engine's hand-over); the pre-started next job saves Ray's job start (:data:`STANDBY_SAVES_S`);
a halved point stops at its first checkpoint at or past the rung.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any, Optional

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State, Status
from rayjobs.oncluster import scheduler
from rayjobs.oncluster.halving import Verdict
from rayjobs.oncluster.queuestate import QueueState
from rayjobs.sim.engine import Sim
from rayjobs.sim.ledger import HALVED
from rayjobs.sim.trace import TraceJob

#: A pre-started job's runner runs 0.03 s after admission, a cold one 1.67 s (docs/benchmarks.md, preemption).
STANDBY_SAVES_S = 1.64
#: A preempted job waits this long after its trainer's exit before it may start again: the queue
#: deletes its old Ray entry no sooner than 10 s after it ended (docs/benchmarks.md: 14.2 s median
#: from exit to running again, less the 1.67 s of a cold start).
REQUEUE_S = 12.0
#: The metric's spread around a point's ``quality`` at a rung (narrowing as the run goes on).
NOISE = 0.3


def record(job: TraceJob, epoch: float, *, halving: bool = True) -> JobRecord:
    """The queue's record of a trace job, as a submit writes it (queued at its arrival)."""
    at = epoch + job.arrival_s
    meta = JobMeta(experiment=job.cls, priority=job.priority, user=job.user, sweep=job.sweep, after=job.after,
                   preemptible=job.preemptible, max_retries=job.retries, gpu_groups=job.groups,
                   halving=job.halving if halving else "", run=job.id,
                   submitted_at=datetime.fromtimestamp(at, tz=timezone.utc).isoformat(timespec="milliseconds"))
    return JobRecord(id=job.id, state=State.WAITING, spec={"metadata": meta.to_ray()}, queued_at=at)


def metric_at(job: TraceJob, rung: int) -> float:
    """The halving metric a point logs at ``rung``: its quality, blurred less the further it trained."""
    noise = random.Random(f"{job.id}/{rung}").gauss(0.0, 1.0)
    return job.quality + NOISE * noise * max(0.1, 1.0 - rung / max(1, job.steps))


class Queue:
    """rayjobs' rules (``policy``: the head's settings; ``halving``: sweeps are halved as submitted)."""

    handles_after = True
    wants_steps = True

    def __init__(self, policy: Optional[scheduler.Policy] = None, *, halving: bool = True, name: str = "rayjobs") -> None:
        self.policy = policy or scheduler.Policy()
        self.halving, self.name = halving, name
        self.state = QueueState()
        self.state.half_life_s = self.policy.fair_half_life_s
        self.recs: dict[str, JobRecord] = {}
        self.epoch = 0.0
        self._requeue_until: dict[str, float] = {}
        self._gate_until = 0.0
        self.decisions = 0

    # ------------------------------------------------------------------ what the engine tells
    def submit(self, sim: Sim, job_id: str) -> None:
        self.epoch = sim.trace.start
        rec = self.recs.get(job_id) or record(sim.lives[job_id].job, self.epoch, halving=self.halving)
        self.recs[job_id] = rec
        self.state.queue(rec)
        sim.wake(rec.queued_at - self.epoch + self.policy.backfill_s + 0.01)

    def _released(self, sim: Sim, job_id: str, status: str = "") -> None:
        r = self.state.running.get(job_id)
        if r is not None:
            self.state.released(r, self.epoch + sim.now, status)

    def requeued(self, sim: Sim, job_id: str, why: str) -> None:
        self._released(sim, job_id)
        self.state.drop(job_id)
        self.state.queue(self.recs[job_id].with_(state=State.WAITING, admitted_at=None))
        self.state.requeueing.add(job_id)
        self._requeue_until[job_id] = sim.now + REQUEUE_S
        sim.wake(sim.now + REQUEUE_S)

    def ended(self, sim: Sim, job_id: str, status: str) -> None:
        self._released(sim, job_id, status)
        self.state.finish(job_id, Status.STOPPED if status == HALVED else status)
        self._gate_until = sim.now + sim.handover_s
        self.state.gpu_gate = f"reaping after {job_id}"
        sim.wake(self._gate_until)

    def step(self, sim: Sim, job_id: str, step: int) -> None:
        r = self.state.running.get(job_id)
        h = r.req.halving if r is not None else None
        if h is not None:
            r.history[step] = {h.metric: metric_at(sim.lives[job_id].job, step)}
            self.state.version += 1

    # ------------------------------------------------------------------ one pass of the rules
    def schedule(self, sim: Sim) -> None:
        self._sync(sim)
        if not scheduler.needs_pass(self.state):
            return
        holdings = {i: sim.cluster.holdings(i) for i in self.state.running}
        d = scheduler.decide(self.state, scheduler.ClusterView(sim.cluster.view(), holdings), self.policy,
                             self.epoch + sim.now)
        self.decisions += 1
        for action in d.actions:
            getattr(self, _CARRY[type(action)])(sim, action)

    def _sync(self, sim: Sim) -> None:
        """What the service reads before a pass: the reap gate, the requeued jobs' holds, when each
        preemptible job saved its last checkpoint."""
        st = self.state
        if st.gpu_gate and sim.now >= self._gate_until:
            st.gpu_gate = ""
        for job_id in [i for i, t in self._requeue_until.items() if sim.now >= t]:
            del self._requeue_until[job_id]
            st.requeueing.discard(job_id)
        if st.standby is not None and st.standby not in st.waiting:
            st.standby = None
        for r in st.running.values():
            a = sim.lives[r.id].attempt
            if r.req.preemptible and a is not None:
                r.checkpoint_at = self.epoch + a.at(sim.now)[2]

    # ------------------------------------------------------------------ the actions (as the service's executors)
    def _admit(self, sim: Sim, a: scheduler.Admit) -> None:
        w = self.state.waiting.get(a.id)
        where = sim.cluster.fit(w.req.groups) if w is not None else None
        if where is None:
            return
        if self.state.standby == a.id:
            sim.pre_start(a.id, STANDBY_SAVES_S)
            self.state.standby = None
        sim.start(a.id, where)
        r = self.state.admit(w, self.epoch + sim.now, self.recs[a.id])
        r.in_ray, r.unplaced = True, []

    def _fail(self, sim: Sim, a: scheduler.Fail) -> None:
        self.state.take(a.id)
        self.state.finish(a.id, Status.FAILED)
        sim.never(a.id)

    def _preempt(self, sim: Sim, a: scheduler.Preempt) -> None:
        r = self.state.running[a.id]
        r.preempting_for, r.preempt_asked = a.by, self.epoch + sim.now
        sim.stop_at_checkpoint(a.id, r.req.preempt_wait_s, "preempted")
        sim.wake(sim.now + r.req.preempt_wait_s + scheduler.OVERDUE_GRACE_S + 0.01)

    def _call_off(self, sim: Sim, a: scheduler.CallOff) -> None:
        self.state.running[a.id].preempting_for = ""
        sim.call_off(a.id)

    def _stop_overdue(self, sim: Sim, a: scheduler.StopOverdue) -> None:
        self.state.running[a.id].preempt_forced = True
        sim.stop_now(a.id, "overdue")

    def _offer(self, sim: Sim, a: scheduler.Offer) -> None:
        self.state.standby = a.id

    def _rung(self, sim: Sim, a: scheduler.Rung) -> None:
        r = self.state.running[a.id]
        v: Verdict = a.verdict
        rec = r.rec.with_(rungs=dict(r.rec.rungs or {}, **{str(v.rung): v.value}))
        if v.value is not None:
            self.state.reached(r.req.sweep, v.rung, r.id, v.value)
        if not v.goes_on:
            r.stop_asked = True
            rec = rec.with_(halved={"rung": v.rung, "value": v.value, "rank": v.rank, "of": v.of, "text": v.text()})
            sim.halve(a.id, v.rung)
        r.rec = self.recs[a.id] = rec


_CARRY: dict[type, str] = {
    scheduler.Admit: "_admit", scheduler.Fail: "_fail", scheduler.Preempt: "_preempt",
    scheduler.CallOff: "_call_off", scheduler.StopOverdue: "_stop_overdue", scheduler.Offer: "_offer",
    scheduler.Rung: "_rung",
}


def about(q: Any) -> dict[str, Any]:
    """What a run of the queue did besides its metrics (passes of the rules)."""
    return {"decisions": getattr(q, "decisions", 0)}

"""The queue as a thin loop: read the store and the cluster, :func:`~rayjobs.oncluster.scheduler.decide`,
carry out the actions.

The service owns the queue's memory (:class:`~rayjobs.oncluster.queuestate.QueueState`, every
record by id) and its executors, each of them given the one Jobs-API client it may use
(:class:`~rayjobs.oncluster.headapi.JobsClient`; a fake one in tests): :mod:`admission` (submit,
poll), :mod:`standby` (the pre-started next job), :mod:`reaping` (clean GPUs between jobs),
:mod:`preemption` and :mod:`pruning`. The rules themselves are all in :mod:`scheduler`. What the
laptop asks (queue, stop, resume) comes through :mod:`rayjobs.oncluster.queuerequests`, what it
sees through :mod:`rayjobs.oncluster.jobviews`; both run on the loop's thread, between ticks.

* Durable: every change of a job is written to its record before it takes effect. When the
  service starts -- the first time, after a crash, or after the head's Ray was restarted -- it
  reloads every record: waiting jobs keep their place; a job Ray no longer knows gets a new attempt
  that resumes from its checkpoint when ``rayjobs.max_retries`` allows, else ends FAILED.
* Never blocking: the Jobs API calls run in a small thread pool, and the cluster is read in a
  thread of its own (:class:`~rayjobs.oncluster.clusterwatch.ClusterWatch`: every 50 ms while jobs
  wait, at once when the running set moved, every 20 ms for 3 s after a job ended); the tick uses its
  newest reading, so neither a request nor the tick waits for Ray's GCS on the loop.
"""

from __future__ import annotations

import collections
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Optional

from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import TERMINAL, State, Status
from rayjobs.oncluster import pruning, scheduler, warmth
from rayjobs.oncluster.admission import Admitter, Seen, Submitted
from rayjobs.oncluster.clusterwatch import Inline
from rayjobs.oncluster.headapi import LOST, JobsClient
from rayjobs.oncluster.histories import Histories
from rayjobs.oncluster.jobrecord import finish_record, lost_attempt, next_attempt, requeued_record
from rayjobs.oncluster.preemption import Preemptions
from rayjobs.oncluster.queuestate import QueueState, Running
from rayjobs.oncluster.reaping import Reaped, Reaping
from rayjobs.oncluster.recordwriter import RecordWriter
from rayjobs.oncluster.rungs import Rungs
from rayjobs.oncluster.scheduler import (Admit, CallOff, Decision, Evict, Fail, Offer, Policy, Preempt, Release, Rung,
                                         StopOverdue)
from rayjobs.oncluster.standby import Standby
from rayjobs.oncluster.store import QueueStore
from rayjobs.shared import stamp

WAIT_POLL_S = 0.1  #: while jobs wait or run, a tick this often
IDLE_POLL_S = 0.5
FAST_POLL_S, FAST_POLL_EVERY_S = 3.0, 0.02  #: after a job ended, this long this often
DECIDE_EVERY_S = 1.0  #: the rules run at least this often (their clocks: backfill, overdue), else on a change
STANDBY_CALM_S = 2.0  #: no job is pre-started this long after a waiting one was stopped


def policy_from_env() -> Policy:
    """The head's settings (environment of ``ray start`` on the head)."""
    from rayjobs.oncluster import policy as team, standby

    on = os.environ.get("RAYJOBS_QUEUE", "1").strip().lower() not in ("0", "off", "false", "no")
    fair = os.environ.get("RAYJOBS_FAIR_SHARE", "1").strip().lower() not in ("0", "off", "false", "no")
    order = os.environ.get("RAYJOBS_PREEMPT_ORDER", "least-work").strip().lower()
    d = Policy()
    warm = warmth.Rules(idle_s=_env_float("RAYJOBS_WARM_IDLE_S", 600.0),
                        per_node=int(_env_float("RAYJOBS_WARM_PER_NODE", 1)),
                        enabled=os.environ.get("RAYJOBS_WARM", "1").strip().lower() not in ("0", "off", "false", "no"))
    return Policy(backfill_s=_env_float("RAYJOBS_QUEUE_BACKFILL_S", d.backfill_s), quota=team.quota_from_env(),
                  enabled=on, standby=standby.enabled(), victim_order="priority" if order == "priority" else "least-work",
                  fair_share=fair, fair_half_life_s=_env_float("RAYJOBS_FAIR_HALF_LIFE_S", d.fair_half_life_s),
                  size_weight=_env_float("RAYJOBS_FAIR_SIZE_WEIGHT", d.size_weight),
                  reclaim_short_s=_env_float("RAYJOBS_FAIR_RECLAIM_S", d.reclaim_short_s), warm=warm)


def _env_float(name: str, default: float) -> float:
    """A number of the head's environment; a malformed or negative one is said on stderr and the default used."""
    import sys

    text = os.environ.get(name, "").strip()
    try:
        value = float(text) if text else default
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        print(f"[rayjobs] warning: {name}={text!r} is not a number >= 0; {default:g} applies", file=sys.stderr, flush=True)
        return default


class Records(dict):
    """The queue's records by id, counting their changes (:attr:`version`: the door's cached job
    list is encoded again only after one)."""

    version = 0

    def __setitem__(self, key: str, value: JobRecord) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        self.version += 1
        return super().pop(*args)

    def update(self, *args: Any, **kw: Any) -> None:
        self.version += 1
        super().update(*args, **kw)

    def clear(self) -> None:
        self.version += 1
        super().clear()


class QueueService:
    """The queue: its state, its executors and the loop that ties them to the rules.

    Args:
        store: the durable store. jobs: the Jobs API. cluster: what is free per node: a
            :class:`~rayjobs.oncluster.clusterwatch.ClusterWatch` (the head: read in a thread of its
            own), or anything with ``observe(running)`` (a fake: read on the tick's thread).
        reap: :func:`rayjobs.oncluster.reaper.reap_job` (or a fake); ``reap_enabled`` False skips it.
        session: the Ray session the queue runs in (its health says it).
        warm: the kept rollout engines (:class:`~rayjobs.oncluster.warmengines.Registry`); None: none.
    """

    def __init__(self, store: QueueStore, jobs: JobsClient, cluster: Any, *, policy: Optional[Policy] = None,
                 reap: Optional[Callable[..., list[str]]] = None, reap_enabled: bool = True, session: str = "",
                 pool: Optional[ThreadPoolExecutor] = None, ray_logs: str = "", warm: Any = None) -> None:
        self.store, self.jobs, self.cluster = store, jobs, cluster
        self.writer = RecordWriter(store)  # the tick's record writes: off the loop, in order
        self.watch = cluster if hasattr(cluster, "newest") else Inline(cluster)
        self._reading = 0  #: the newest cluster reading applied (its ``n``)
        self.wake: Callable[[], None] = lambda: None  #: wakes the loop from another thread (the host sets it)
        self.policy = policy or policy_from_env()
        self.session, self.started_at, self.ray_logs = session, time.time(), ray_logs
        self.pool = pool or ThreadPoolExecutor(max_workers=4, thread_name_prefix="rayjobs-queue")
        self.state = QueueState()
        self.state.half_life_s = self.policy.fair_half_life_s or 1.0
        self.records: Records = Records()
        self.events: collections.deque = collections.deque(maxlen=2000)
        self.standby = Standby(jobs, self.pool, store.code_dir, self._cold_submit)
        self.admitter = Admitter(jobs, self.pool, store.code_dir, self.standby)
        # reaps in a pool of their own: the GPU gate waits for them, not for the dashboard calls queued in ours
        self.reap_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rayjobs-reap")
        self.reaping = Reaping(self._noted(reap or (lambda job_id, **kw: [])), self.reap_pool, jobs.details,
                               enabled=reap is not None and reap_enabled, note=self.note)
        self.preemptions = Preemptions(jobs, self.pool, note=self.note)
        self.rungs = Rungs(self._put, lambda job_id: self.after_written(self.jobs.stop, job_id), note=self.note)
        self.histories = Histories(self.pool)
        self._settling: dict[str, tuple[Running, Future]] = {}  #: ended jobs whose Ray details are being read
        self.decision = Decision()
        self.nodes: list[Any] = []
        self.held: dict[str, Any] = {}  #: per running job, what its placement groups hold per node
        self.warm, self.warm_seen = warm, ()  # kept rollout engines (issue 50)
        self.prune_every_s = float(os.environ.get(pruning.EVERY_ENV, 60.0))
        self._pruning: Optional[Future] = None
        self._pruned_at = time.monotonic()
        self._fast_until = 0.0
        self._decided: tuple[Any, float] = (None, 0.0)

    def _noted(self, reap: Callable[..., list[str]]) -> Callable[..., list[str]]:
        """``reap``, noting when each began (the benchmarks' breakdown of the admission reaction)."""
        def run(job_id: str, **kw: Any) -> list[str]:
            self.note("reap began (early)" if kw.get("spare_live") else "reap began", job_id)
            return reap(job_id, **kw)
        return run

    def _cold_submit(self, rec: JobRecord) -> Any:
        return self.admitter.cold_submit(rec)

    def note(self, what: str, job_id: str) -> None:
        """An event for tests and benchmarks (the newest 2,000 are kept)."""
        self.events.append((round(time.time(), 4), what, job_id))

    # ---------------------------------------------------------------- start and recovery
    def recover(self) -> None:
        """Load the backlog from the store; settle the jobs admitted before this service started."""
        records = self.store.all()
        for tmp in self.store.stray_tmp():  # writers cut off mid-write: their old versions stand
            tmp.unlink(missing_ok=True) if tmp.is_file() else None
        self.records = Records(records)
        for rec in sorted(records.values(), key=lambda r: float(r.finished_at or 0)):
            if rec.state == State.DONE:
                self.state.done[rec.id] = str(rec.status)
                self.state.remember(rec)
        for rec in sorted(records.values(), key=lambda r: float(r.queued_at or 0)):
            if rec.state == State.WAITING:
                self.state.queue(rec)
            elif rec.state == State.ADMITTED:
                self._recover_admitted(rec)
        self.rungs.recover(self.state, self.records)
        self.note("start", f"{len(self.state.waiting)} waiting, {len(self.state.running)} admitted")
        if self.state.waiting:
            self.standby.adopt(self.state.waiting)

    def _recover_admitted(self, rec: JobRecord) -> None:
        """A job admitted before this service started: still in Ray, ended, or lost with the head."""
        got = self.jobs.details(rec.id)
        r = self._track(rec, in_ray=True)
        if got is not None:
            self._seen(Seen(rec.id, got))
        p = rec.preempting or {}
        if rec.id in self.state.running:
            r.preempting_for = "" if p.get("called_off") else str(p.get("by") or "")
            r.preempt_asked = float(p.get("asked_at") or 0)

    def _track(self, rec: JobRecord, *, in_ray: bool) -> Running:
        """Hold an admitted record as running (recovery: it was admitted before)."""
        from rayjobs.oncluster.request import request_from_record

        req = request_from_record(rec)
        r = Running(rec, req, float(rec.admitted_at or time.time()), unplaced=list(req.groups), in_ray=in_ray,
                    stop_asked=rec.stop_asked)
        self.state.running[rec.id] = r
        self.state.version += 1
        return r

    # ---------------------------------------------------------------- the loop
    def tick(self) -> float:
        """One turn of the loop; how long to wait before the next (a request may cut it short)."""
        now = time.time()
        self.writer.retry(self.records.get)
        self._collect()
        if self.state.waiting:
            self.watch.ask(self.state.running, fast=time.monotonic() < self._fast_until)
            self._observe()
        elif self.warm is not None:  # kept engines age out and are released while nothing waits too
            self.warm_seen = self.warm.look()
        self.state.gpu_gate = self.reaping.gate()
        self.state.standby = self.standby.sid
        self.state.requeueing = {i for i in self.preemptions.requeueing() if i in self.state.waiting}
        self.histories.observe(self.state, now)
        if self.state.waiting:
            self.preemptions.observe(self.state, now)
        if self._reading or not self.state.waiting:  # no reading yet is not "a cluster without GPUs"
            self._decide(now)
        running = list(self.state.running)
        self.admitter.poll(running)
        self.admitter.poll([i for i in running if self.state.running[i].ending], force=True)
        self._prune()
        busy = self.state.waiting or self.state.running or self.state.ending
        if time.monotonic() < self._fast_until:
            return FAST_POLL_EVERY_S
        return WAIT_POLL_S if busy else IDLE_POLL_S

    def _decide(self, now: float) -> None:
        """Run the rules when an input changed (or their clocks may have moved on); carry out the actions."""
        st = self.state
        key = (st.version, tuple(self.nodes), st.gpu_gate, st.standby, frozenset(st.requeueing), self.warm_seen,
               tuple((i, tuple(r.unplaced), r.in_ray, r.ending) for i, r in st.running.items()))
        last, at = self._decided
        if key == last and now - at < DECIDE_EVERY_S:
            return
        self.decision = scheduler.decide(st, scheduler.ClusterView(tuple(self.nodes), self.held, self.warm_seen),
                                         self.policy, now)
        for action in self.decision.actions:
            self._apply(action, now)
        self._decided = (key if not self.decision.actions else None, now)

    def _observe(self) -> None:
        """The newest reading of the cluster (once): what is free per node, and per running job what
        it has placed and whether its trainer left -- each job's part only onto the running entry it
        was read for (:mod:`rayjobs.oncluster.clusterwatch` says why an older reading is safe)."""
        self.warm_seen = self.warm.look() if self.warm is not None else ()
        got = self.watch.newest()
        if got is None or got.n <= self._reading:
            return
        self._reading, seen, running = got.n, got.seen, self.state.running
        self.nodes = list(seen.nodes)
        self.held = {i: h for i, h in seen.held.items() if got.read_for(i, running.get(i))}
        for job_id, left in seen.unplaced.items():
            r = running.get(job_id)
            if r is not None and left is not None and got.read_for(job_id, r):
                r.unplaced = list(left)
        for job_id in seen.trainer_gone:
            r = running.get(job_id)
            if r is not None and not r.ending and got.read_for(job_id, r):
                r.ending = True
                self.events.append((round(got.at, 4), "trainer gone (read)", job_id))  # (the benchmarks' breakdown)
                self.note("trainer left", job_id)
                self.reaping.trainer_left(job_id)
                early = self.reaping.early.get(job_id)
                if early is not None:  # its reap's return opens the GPU gate: tick then, not at the next turn
                    early.add_done_callback(lambda _f, i=job_id: self._reaped_early(i))
                self._fast_until = time.monotonic() + FAST_POLL_S

    def _reaped_early(self, job_id: str) -> None:
        """(A pool thread) a trainer's early reap returned: the loop ticks now."""
        self.note("early reap returned", job_id)
        self.wake()

    def _prune(self) -> None:
        if self._pruning is not None and self._pruning.done():
            for job_id in self._pruning.result() or []:
                rec = self.records.get(job_id)
                if rec is not None and rec.done:
                    self._put(rec.with_(pruned=True))
            self._pruning = None
        if self._pruning is None and time.monotonic() - self._pruned_at >= self.prune_every_s:
            self._pruned_at = time.monotonic()
            self._pruning = self.pool.submit(pruning.prune, self.store, self.jobs, list(self.records.values()))

    # ---------------------------------------------------------------- carrying out the rules
    def _apply(self, action: scheduler.Action, now: float) -> None:
        """Carry out one action (:data:`_CARRY`: how, and where its job must still be: a job that
        left that place since the pass -- ended, stopped -- is passed over)."""
        carry, where = _CARRY[type(action)]
        if not where or action.id in getattr(self.state, where):
            carry(self, action, now)

    def admit(self, job_id: str, note: str, now: float) -> None:
        """Hand a waiting job to Ray: its record says admitted (durably) before Ray is asked, at the
        moment it was (``now`` is the tick's start, before that tick settled what had ended)."""
        w, at = self.state.waiting[job_id], time.time()
        rec, written = self.writer.put(w.rec.with_(state=State.ADMITTED, admitted_at=at, freed_at=None, note=note,
                                                   ray_logs=self.ray_logs,
                                                   first_attempt=next_attempt(w.rec.meta.run_dir)))
        self.records[rec.id] = rec
        self.state.admit(w, at, rec)
        self.admitter.submit(rec, after=written)  # Ray is asked once the record says admitted on disk
        self.note("admitted", job_id)

    def after_written(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` in the pool once every record write asked so far is on disk: a Ray call
        that must follow its record (a stop after ``stop_asked``/``halved``: a head that crashed in
        between would otherwise requeue or mislabel the job at recovery)."""
        written = self.writer.barrier()
        return self.pool.submit(lambda: (written.result(), fn(*args))[1])

    def _put(self, rec: JobRecord) -> JobRecord:
        """The loop's change of a record: in memory now, on disk next (:mod:`~rayjobs.oncluster.recordwriter`)."""
        rec, _ = self.writer.put(rec)
        self.records[rec.id] = rec
        return rec

    # ---------------------------------------------------------------- what came back
    def _collect(self) -> None:
        for got in self.admitter.collect():
            if isinstance(got, Submitted):
                self._submitted(got)
            else:
                self._seen(got)
        for done in self.reaping.collect():
            self._reaped(done)
        for job_id in [i for i, (_, f) in self._settling.items() if f.done()]:
            r, f = self._settling.pop(job_id)
            self.state.ending.pop(job_id, None)
            self._settle(r, [], (f.result() or {}) if f.exception() is None else {})  # ({}: not asked again, on the loop)

    def _submitted(self, got: Submitted) -> None:
        r = self.state.running.get(got.id)
        if r is None:
            return
        if got.error:
            self.state.drop(got.id)
            why = got.error if got.unwritten else f"Ray refused the job at admission: {got.error}"
            self.finish(r.rec, Status.FAILED, why)
            return
        r.in_ray = True
        self.state.version += 1
        if r.stop_asked:
            self.pool.submit(self.jobs.stop, got.id)

    def _seen(self, got: Seen) -> None:
        r = self.state.running.get(got.id)
        if r is None:
            return
        r.ray = dict(got.details)
        if got.status not in (LOST, ""):
            r.in_ray = True
        if got.ended:
            self.ended(r, got.status)

    def ended(self, r: Running, outcome: str) -> None:
        """Its Ray job ended (``outcome``: a status) or Ray lost it (LOST): end what it left on the
        nodes, then settle it. Its GPUs go to no one meanwhile."""
        self.state.running.pop(r.id, None)
        self.state.released(r, time.time(), outcome)  # its user's use, how long its kind of run takes
        self.admitter.forget(r.id)
        r.ended = outcome
        self.state.ending[r.id] = r
        self.state.version += 1
        self._fast_until = time.monotonic() + FAST_POLL_S
        if not self.reaping.job_ended(r.id, outcome, bool(r.req.groups)):
            if outcome == LOST:
                self.state.ending.pop(r.id, None)
                self._settle(r, [], None)
            else:  # Ray's details of its end (a dashboard call: in the pool, settled once back)
                self._settling[r.id] = (r, self.pool.submit(self.jobs.details, r.id))

    def _reaped(self, done: Reaped) -> None:
        r = self.state.ending.pop(done.id, None)
        if r is not None:
            if done.freed_at:
                r.rec = r.rec.with_(freed_at=done.freed_at)
            self._settle(r, done.lines, done.info)

    def _settle(self, r: Running, reaped: list[str], info: Optional[dict[str, Any]]) -> None:
        """Finish a job once its leftovers are gone (or, lost or preempted, put it back in line)."""
        if reaped:
            self.note("reaped", f"{r.id}: {'; '.join(reaped)}"[:2000])
            print(f"[rayjobs] {stamp()} reaped after {r.id}: {'; '.join(reaped)}", flush=True)
        rec = r.rec.with_(stop_asked=r.stop_asked)
        if r.ended == LOST:
            self._lost(rec.with_(reaped=rec.reaped + tuple(reaped)))
        elif r.ended == Status.STOPPED and rec.preempting and not r.stop_asked:
            self._requeue_preempted(rec, reaped, info)
        else:
            self.finish(rec, r.ended, info=info, reaped=reaped)

    def _lost(self, rec: JobRecord) -> None:
        again = self._put(lost_attempt(rec))
        if again.state == State.WAITING:
            self.state.queue(again)
            self.note("requeued (cluster restarted)", rec.id)
        else:
            self.state.finish(rec.id, Status.FAILED)
            self.note("failed (cluster restarted)", rec.id)

    def _requeue_preempted(self, rec: JobRecord, reaped: list[str], info: Optional[dict[str, Any]]) -> None:
        """A preempted job has stopped: back to its old place in line, to resume from its checkpoint
        once Ray's entry of it is deleted (its driver log is appended to, not replaced)."""
        again = self._put(requeued_record(rec, reaped))
        self.state.queue(again)
        self.preemptions.forget_in_ray(rec.id, (info or {}).get("end_time"))
        self.state.requeueing.add(rec.id)
        p = again.preempted or {}
        self.note("preempted", f"{rec.id} by {p.get('by')}")
        print(f"[rayjobs] {stamp()} {rec.id} preempted by {p.get('by')}: back in the queue; it resumes from "
              f"checkpoint step {p.get('checkpoint_step')} (redoes {p.get('redo')} step(s))", flush=True)

    def finish(self, rec: JobRecord, status: str, message: str = "", info: Optional[dict[str, Any]] = None,
               reaped: Optional[list[str]] = None, cause: Optional[str] = None) -> JobRecord:
        """End a job's record (its status, why, its last metrics and checkpoint); durable first."""
        if info is None and not message and status in TERMINAL:
            info = self.jobs.details(rec.id)
        done = finish_record(rec, status, message, info, reaped or [])
        if rec.halved and status == Status.STOPPED:  # its user did not stop it: its sweep's halving did
            cause, done = str(rec.halved.get("text")), done.with_(message=str(rec.halved.get("text")))
        elif rec.halved:  # it ended before the stop took: not halved (its values at rungs stay)
            done = done.with_(halved=None, stop_asked=False)
        if cause:
            done = done.with_(cause=cause)
        done = self._put(done)
        self.state.finish(rec.id, status)
        self._fast_until = time.monotonic() + FAST_POLL_S
        self.note(status.lower(), rec.id)
        return done


def _fail(svc: QueueService, a: Fail, now: float) -> None:
    svc.state.take(a.id)
    svc.standby.cancel(a.id)
    svc.finish(svc.records[a.id], Status.FAILED, a.message, cause=a.cause)


def _preempt(svc: QueueService, a: Preempt, now: float) -> None:
    r = svc.state.running[a.id]
    r.rec = svc._put(r.rec.with_(preempting=dict(svc.preemptions.ask(r, a.by, now), why=a.why)))


def _call_off(svc: QueueService, a: CallOff, now: float) -> None:
    r = svc.state.running[a.id]
    svc.preemptions.call_off(r, a.by)
    r.rec = svc._put(r.rec.with_(preempting=dict(r.rec.preempting or {}, called_off=now)))


def _warm(svc: QueueService, a: Any, now: float) -> None:
    """Evict or release a kept engine (bounded calls: :mod:`rayjobs.oncluster.warmengines`)."""
    if svc.warm is not None:
        evict = isinstance(a, Evict)
        (svc.warm.evict if evict else svc.warm.release)(a.name, a.why)
        svc.note(f"warm engine {'evicted' if evict else 'released'}: {a.why}", a.name)


def _stop_overdue(svc: QueueService, a: StopOverdue, now: float) -> None:
    svc.preemptions.stop_now(svc.state.running[a.id])
    svc.note("preemption overdue: stopped", a.id)


#: Each action kind: how the service carries it out, and where its job must still be ("": anywhere).
_CARRY: dict[type, tuple[Callable[[QueueService, Any, float], None], str]] = {
    Admit: (lambda svc, a, now: svc.admit(a.id, a.note, now), "waiting"),
    Fail: (_fail, "waiting"),
    Offer: (lambda svc, a, now: svc.standby.offer(svc.state.waiting[a.id].rec), "waiting"),
    Preempt: (_preempt, "running"),
    CallOff: (_call_off, "running"),
    StopOverdue: (_stop_overdue, "running"),
    Rung: (lambda svc, a, now: svc.rungs.at_rung(svc.state, svc.state.running[a.id], a.verdict, now), "running"),
    Evict: (_warm, ""),
    Release: (_warm, ""),
}

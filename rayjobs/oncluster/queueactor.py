"""The cluster-side queue: a waiting job is a record in a durable store, not a process.

A submit puts records into the store (:mod:`rayjobs.oncluster.enqueue`, a small Ray job); this
actor (``rayjobs/queue``: detached, ``num_cpus=0``, pinned to the head, one per cluster) reads them
and submits each job to Ray, under the id the user already has, only when it fits: by priority,
then submission order, when its ``gpu_groups`` fit per node (each group on ONE node, GPUs and 3 CPUs
per GPU) given what is free (:mod:`rayjobs.oncluster.clusterstate`) minus the groups of admitted
jobs whose trainer has no placement group yet. A job without GPU groups starts at once.

* Durable: the store (:mod:`rayjobs.oncluster.store`) is on the storage root. When the actor starts
  -- the first time, after a crash, or after the head's Ray was restarted (the node script, or any
  rayjobs command, revives it) -- it reloads every record: waiting jobs keep their place; a job Ray
  no longer knows (it ran when Ray went down) gets a new attempt that resumes from its checkpoint
  when ``rayjobs.max_retries`` allows, else ends ``FAILED`` (cluster restarted).
* Starvation guard: later jobs may start ahead of a blocked one (backfill) only while it has waited
  less than ``RAYJOBS_QUEUE_BACKFILL_S`` (head env, default 300 s); then nothing behind it starts
  until it has (jobs of higher priority still go first).
* Stop: a waiting job is cancelled through the store (it never starts); a running one by Ray.
* Standby: the first waiting job is pre-started in Ray, its runner held until admission
  (:mod:`rayjobs.oncluster.standby`): one at a time, so the GPUs wait ~10 ms, not Ray's job start.
* Clean GPUs: when a job ends, what it left running on the nodes (an orphaned engine holding GPU
  memory) is ended first (:mod:`rayjobs.oncluster.reaper`, in the pool); until that is done no job
  is admitted onto GPUs, and what had to be killed goes into the job's record (``reaped``).
* History: finished jobs stay in the store and in a history file the laptop reads; Ray's own job
  table is pruned of them after ``RAYJOBS_RETENTION_S`` (head env, default 6 h), so a cluster that
  ran thousands of jobs keeps a fast dashboard.
* The laptop sees all of it through two files in the head's log dir (:mod:`rayjobs.oncluster.statusfile`).

The actor's blocking calls (the Jobs API, to submit, poll and prune) run in a small thread pool, so
its loop looks at the cluster every 0.1 s while jobs wait (every 20 ms for 3 s after a job ends).
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from rayjobs.oncluster import capacity, clusterstate, policy, reaper
from rayjobs.oncluster.jobrecord import finish_record, history_row, lost_attempt, requeued_record, submit_kwargs
from rayjobs.oncluster.request import Request, request_from_record
from rayjobs.oncluster.standby import Standby
from rayjobs.oncluster.statusfile import MIN_GAP_S, PROTOCOL, REWRITE_S, StatusFile
from rayjobs.oncluster.store import ADMITTED, DONE, WAITING, QueueStore
from rayjobs.shared import ROLE_KEY, TERMINAL, stamp

NAMESPACE = "rayjobs"
ACTOR_NAME = "queue"
#: Head-side settings (read from the environment of ``ray start`` on the head).
BACKFILL_ENV = "RAYJOBS_QUEUE_BACKFILL_S"
DEFAULT_BACKFILL_S = 300.0
SWITCH_ENV = "RAYJOBS_QUEUE"  #: "0"/"off": every job is submitted at once, as plain Ray would
RETENTION_ENV = "RAYJOBS_RETENTION_S"
DEFAULT_RETENTION_S = 6 * 3600.0
WAIT_POLL_S = 0.1  #: while jobs wait, look at the cluster this often
FAST_POLL_S, FAST_POLL_EVERY_S = 3.0, 0.02  #: after a job ended, this long this often
STATUS_POLL_S = 0.5  #: ask Ray how the admitted jobs are this often
HEARTBEAT_S = 1.0
STANDBY_CALM_S = 2.0  #: no job is pre-started this long after a waiting one was stopped
PREEMPT_RECHECK_S = 5.0  #: a waiting job that no preemption helps asks again after this (same candidates)
#: A trainer that left its GPUs (its Ray drivers dead) holds further GPU admissions until its job has
#: ended and been reaped, but no longer than this (a runner that hangs after its trainer exited). More
#: than the head's stop grace (RAY_JOB_STOP_WAIT_TIME_S=60): a stopped job's descendants deaf to
#: SIGTERM are killed by Ray only then, and may hold GPU memory until they are.
ENDING_MAX_S = 90.0
#: A finished job's code snapshot is kept this long (for a rerun; default 7 days).
CODE_RETENTION_ENV = "RAYJOBS_CODE_RETENTION_S"
PRUNE_EVERY_ENV = "RAYJOBS_PRUNE_EVERY_S"  #: how often the queue prunes Ray's job table (default 60 s)
#: A finished job stays in Ray's table at least this long: deleted while its supervisor actor is
#: still exiting, Ray writes the job back as a FAILED "Entrypoint not found." entry without metadata.
PRUNE_MIN_AGE_S = 10.0


def _unknown_to_ray(e: BaseException) -> bool:
    """Does this Jobs API error say Ray has no such job (not: the dashboard did not answer)?"""
    text = str(e).lower()
    return "does not exist" in text or "404" in text or "not found" in text


def supervisor_alive(sid: str, dashboard: str) -> bool:
    """Is a Ray job supervisor of job ``sid`` still alive (public state API of the dashboard at
    ``dashboard``; True if it cannot tell)?"""
    from ray.util.state import list_actors

    try:
        alive = list_actors(address=dashboard, filters=[("class_name", "=", "JobSupervisor"), ("state", "!=", "DEAD")],
                            limit=10000, timeout=10, raise_on_missing_output=False)
    except Exception:  # noqa: BLE001
        return True
    return any(str(a.name or "").endswith("_" + sid) for a in alive)


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


@dataclass
class _Entry:
    rec: dict[str, Any]
    req: Request
    admitted_at: float = 0.0
    unplaced: list[int] = field(default_factory=list)  #: groups without a CREATED placement group yet
    note: str = ""
    busy: Optional[Future] = None  #: a call to the Jobs API in flight for it (submit, poll, stop)
    in_ray: bool = False  #: its Ray job exists (the submit returned)
    stop_asked: bool = False  #: its user stopped it (before Ray had it: stopped once the submit returns)
    ended: str = ""  #: how its Ray job ended (a status, or LOST) while what it left is reaped
    ending_since: float = 0.0  #: (monotonic) its trainer's drivers are dead, its Ray job not ended yet
    early: Optional[Future] = None  #: the reap started as soon as its trainer's drivers were dead
    hold: str = ""  #: why a waiting job is not even considered this tick: "after", "quota", "requeueing"
    preempting_for: str = ""  #: (admitted) the job it is being stopped for, at its next checkpoint
    preempt_asked: float = 0.0  #: (epoch s) when that stop was asked
    preempt_forced: bool = False  #: the queue stopped it itself (its runner missed the deadline)

    def metadata(self) -> dict[str, Any]:
        return dict((self.rec.get("spec") or {}).get("metadata") or {})


class QueueActor:
    """The queue itself: ``ray.remote(QueueActor)`` named ``rayjobs/queue``, detached, on the head."""

    def __init__(self) -> None:
        from rayjobs.oncluster.headapi import head_dashboard

        self.store = QueueStore()
        self.status = StatusFile()
        self.d = head_dashboard()
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rayjobs-queue")
        self.waiting: dict[str, _Entry] = {}
        self.admitted: dict[str, _Entry] = {}
        self.reaping: dict[str, _Entry] = {}  #: ended jobs whose leftovers are being ended (reaper)
        self.done: dict[str, str] = {}  #: how every finished job ended (dependencies read it)
        self._no_victims: dict[str, tuple[float, Any]] = {}  #: a job's last "no preemption helps" and its inputs
        self.quota = policy.quota_from_env()
        self.backfill_s = float(os.environ.get(BACKFILL_ENV, DEFAULT_BACKFILL_S))
        self.retention_s = float(os.environ.get(RETENTION_ENV, DEFAULT_RETENTION_S))
        self.prune_every_s = float(os.environ.get(PRUNE_EVERY_ENV, 60.0))
        self.reserving_for: Optional[str] = None
        self.events: collections.deque = collections.deque(maxlen=2000)
        self.cluster: dict[str, Any] = {}
        self._loop: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._fast_until = self._polled = self._beat = self._cancelled_at = 0.0
        self._pruned = time.monotonic()
        self._sig: Any = None
        self._doc_at = 0.0
        self.standby = Standby(self.d, self.pool, self.store.code_dir, self._submit)
        self._recover()
        # Ray runs an async actor's __init__ inside its event loop: start the loop now, so a
        # restarted actor (a crash, Ray's max_restarts) admits again without waiting for a caller.
        try:
            self._start()
        except RuntimeError:  # no running loop (a direct call, in a test): ping() starts it
            pass

    # ---------------------------------------------------------------- API (enqueue, tests)
    async def ping(self) -> dict[str, int]:
        """Start the loop (if not yet) and say how many jobs wait and run."""
        self._start()
        self._kick()
        return {"waiting": len(self.waiting), "admitted": len(self.admitted)}

    async def snapshot(self) -> dict[str, Any]:
        """The status document, plus recent events (tests, benchmarks)."""
        self._start()
        doc = self._doc()
        doc["events"] = list(self.events)
        return doc

    # ---------------------------------------------------------------- start and recovery
    def _recover(self) -> None:
        """Load the backlog from the store; settle jobs admitted before this actor started."""
        records = self.store.all()
        for tmp in self.store.stray_tmp():  # writers cut off mid-write: their old versions stand
            tmp.unlink(missing_ok=True)
        self.done = {i: str(r.get("status")) for i, r in records.items() if r.get("state") == DONE}
        for rec in sorted(records.values(), key=lambda r: float(r.get("queued_at") or 0)):
            if rec.get("state") == WAITING:
                self._wait(rec)
            elif rec.get("state") == ADMITTED:
                self._recover_admitted(rec)
        self.status.rewrite_history(history_row(r) for r in self.store.all().values() if r.get("state") == DONE)
        self._note("start", f"{len(self.waiting)} waiting, {len(self.admitted)} admitted")
        if self.waiting:
            self.standby.adopt(self.waiting)
        self._take_inbox()  # what came in meanwhile is already loaded: drop the markers

    def _recover_admitted(self, rec: dict[str, Any]) -> None:
        """A job admitted before this actor started: still in Ray, ended, or lost with the head."""
        try:
            status = str(self.d.sdk.get_job_status(rec["id"])).split(".")[-1]
        except Exception as e:  # noqa: BLE001
            if _unknown_to_ray(e):  # its head restarted since it was admitted
                self._ended(_Entry(rec, request_from_record(rec)), "LOST")
            else:
                self._admit_entry(_Entry(rec, request_from_record(rec)), resume=True)
            return
        if status in TERMINAL:
            self._ended(_Entry(rec, request_from_record(rec)), status)
        else:
            self._admit_entry(_Entry(rec, request_from_record(rec)), resume=True)

    def _lost(self, rec: dict[str, Any]) -> None:
        """Ray lost a running job (its head restarted): a new attempt if the retries allow."""
        again = lost_attempt(rec)
        self.store.put(again)
        if again.get("state") == WAITING:
            self._wait(again)
            self._note("requeued (cluster restarted)", rec["id"])
        else:
            self.status.append_history(history_row(again))
            self._note("failed (cluster restarted)", rec["id"])

    # ---------------------------------------------------------------- the loop
    def _start(self) -> None:
        if self._loop is None:
            loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
            self._loop = loop.create_task(self._run())

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _note(self, what: str, sid: str) -> None:
        self.events.append((round(time.time(), 4), what, sid))

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            every = FAST_POLL_EVERY_S if now < self._fast_until else (WAIT_POLL_S if self.waiting or self.admitted else 0.5)
            try:
                await asyncio.wait_for(self._wake.wait(), every)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                self._tick()
            except Exception as e:  # never let the loop die
                self._note("error", f"{type(e).__name__}: {e}"[:300])

    def _tick(self) -> None:
        now = time.monotonic()
        self._take_inbox()
        self._take_requests()
        self._collect()
        self._collect_reaped()
        self._call_off_preemptions()
        if now - self._polled >= STATUS_POLL_S:
            self._polled = now
            self._poll_admitted()
        else:  # a job whose trainer has left its GPUs: its end (and reap) is what admission waits for
            self._poll_admitted(only_ending=True)
        self._schedule()
        self._write_status()
        if now - self._beat >= HEARTBEAT_S:
            self._beat = now
            self._heartbeat()
        if now - self._pruned >= self.prune_every_s:
            self._pruned = now
            self.pool.submit(self._prune)

    # ---------------------------------------------------------------- inputs
    def _take_inbox(self) -> None:
        for sid in self.store.take_inbox():
            if sid in self.waiting or sid in self.admitted:
                continue
            rec = self.store.get(sid)
            if rec is not None and rec.get("state") == WAITING:
                self._wait(rec)
                self._note("queued", sid)

    def _take_requests(self) -> None:
        for op, sid in self.store.take_requests():
            if op == "cancel":
                self._cancel(sid)
            elif op == "stopping":
                self._user_stopping(sid)

    def _cancel(self, sid: str) -> None:
        """The user's stop: a waiting job never starts (or, preempted, never resumes); a running one is
        stopped through Ray and ends STOPPED, even if it was being preempted."""
        if sid in self.waiting:
            e = self.waiting.pop(sid)
            self.standby.cancel(sid)
            self._cancelled_at = time.monotonic()
            self._finish(e.rec, "STOPPED", "stopped while waiting to resume after a preemption" if e.rec.get("preempted")
                         else "stopped while queued: it never started")
        elif sid in self.admitted:  # (its submit in flight: a stop now would find no job; it is stopped once Ray has it)
            self._user_stopping(sid)
            if self.admitted[sid].in_ray:
                self.pool.submit(self.d.stop, sid)
        else:
            self._user_stopping(sid)

    def _user_stopping(self, sid: str) -> None:
        """The user's stop of ``sid`` is under way (through Ray, or at its next checkpoint): it ends
        there. A job being preempted must not go back in line when it stops (:meth:`_settle`)."""
        if sid in self.admitted:
            self.admitted[sid].stop_asked = True
        elif sid in self.reaping:  # already stopped (for a preemption): it is finished, not requeued
            e = self.reaping[sid]
            e.rec = {k: v for k, v in e.rec.items() if k != "preempting"}
        elif sid in self.waiting and self.waiting[sid].rec.get("preempted"):
            self._cancel(sid)

    def _wait(self, rec: dict[str, Any]) -> None:
        self.waiting[rec["id"]] = _Entry(rec, request_from_record(rec))

    # ---------------------------------------------------------------- admitted jobs
    def _admit_entry(self, e: _Entry, resume: bool = False) -> None:
        self.waiting.pop(e.req.id, None)
        self._no_victims.pop(e.req.id, None)
        e.admitted_at = e.admitted_at or float(e.rec.get("admitted_at") or time.time())
        e.unplaced = list(e.req.groups)
        self.admitted[e.req.id] = e
        if resume:
            e.in_ray = True
            p = e.rec.get("preempting") or {}
            e.preempting_for = "" if p.get("called_off") else str(p.get("by") or "")
            e.preempt_asked = float(p.get("asked_at") or 0)
        else:
            e.rec = dict(e.rec, state=ADMITTED, admitted_at=e.admitted_at, note=e.note)
            self.store.put(e.rec)
            # the pre-started job is let go; any other is submitted to Ray now
            e.busy = self.standby.take(e.rec) or self.pool.submit(self._submit, e.rec)
        self._note("admitted", e.req.id)

    def _submit(self, rec: dict[str, Any]) -> tuple[str, str]:
        """Submit a job to Ray (in the pool): ("ok" | "error", message)."""
        try:
            self.d.submit(submit_kwargs(rec, self.store.code_dir(rec["code"])))
            return "ok", ""
        except Exception as e:  # noqa: BLE001
            msg = " ".join(str(e).split())[:300]
            return ("ok", "") if "already exists" in msg else ("error", msg)

    def _status(self, sid: str) -> str:
        """Ray's status of an admitted job (in the pool); "LOST" if Ray does not know it."""
        try:
            return str(self.d.sdk.get_job_status(sid)).split(".")[-1]
        except Exception as e:  # noqa: BLE001
            return "LOST" if _unknown_to_ray(e) else "?"

    def _poll_admitted(self, only_ending: bool = False) -> None:
        for sid, e in self.admitted.items():
            if e.busy is None and (e.ending_since or not only_ending):
                e.busy = self.pool.submit(self._status, sid)

    def _collect(self) -> None:
        """Results of the calls in flight: a failed submit or an ended job leaves the admitted set."""
        for sid, e in list(self.admitted.items()):
            if e.busy is None or not e.busy.done():
                continue
            result, e.busy = e.busy.result(), None
            if isinstance(result, tuple):  # a submit
                e.in_ray = result[0] == "ok"
                if e.in_ray and e.stop_asked:
                    self.pool.submit(self.d.stop, sid)
                if result[0] == "error":
                    self.admitted.pop(sid)
                    self._finish(e.rec, "FAILED", f"Ray refused the job at admission: {result[1]}")
            elif result in TERMINAL or result == "LOST":
                self.admitted.pop(sid)
                self._ended(e, result)

    # ---------------------------------------------------------------- an ended job's leftovers
    def _ended(self, e: _Entry, outcome: str) -> None:
        """Its Ray job ended (``outcome``: a status) or Ray lost it (LOST): end what it left on the
        nodes (in the pool), then finish it (:meth:`_settle`). Its GPUs go to no one meanwhile. One its
        user stopped while it was being preempted is finished, not put back in line."""
        if e.stop_asked and e.rec.get("preempting"):
            e.rec = {k: v for k, v in e.rec.items() if k != "preempting"}
        if not reaper.enabled():
            self._settle(e.rec, outcome, [], None)
            return
        e.ended, e.busy = outcome, self.pool.submit(self._reap, e.req.id, outcome)
        self.reaping[e.req.id] = e
        self._fast_until = time.monotonic() + FAST_POLL_S  # see the reap's end within 20 ms

    def _reap(self, sid: str, outcome: str) -> tuple[list[str], Optional[dict[str, Any]]]:
        """(in the pool) The reaper's lines for job ``sid``, and Ray's details of it (if it ended)."""
        t = time.monotonic()
        try:
            lines = reaper.reap_job(sid)
        except Exception as e:  # noqa: BLE001 (Ray refused the tasks: the job still finishes)
            lines = [f"reaping failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"]
        self._note("reap took", f"{sid}: {time.monotonic() - t:.3f} s")  # (the benchmark's breakdown)
        return lines, (self._info(sid) if outcome in TERMINAL else None)

    def _collect_reaped(self) -> None:
        for sid, e in list(self.reaping.items()):
            if e.busy is not None and e.busy.done():
                self.reaping.pop(sid)
                lines, info = e.busy.result()
                early = e.early.result() if e.early is not None and e.early.done() else []
                self._settle(e.rec, e.ended, early + [ln for ln in lines if ln not in early], info)

    def _settle(self, rec: dict[str, Any], outcome: str, reaped: list[str], info: Optional[dict[str, Any]]) -> None:
        """Finish (or, LOST, requeue) a job once its leftovers are gone; say what had to be ended."""
        if reaped:
            self._note("reaped", f"{rec['id']}: {'; '.join(reaped)}"[:2000])
            print(f"[rayjobs] {stamp()} reaped after {rec['id']}: {'; '.join(reaped)}", flush=True)  # the actor's log
        if outcome == "LOST":
            self._lost(dict(rec, reaped=list(rec.get("reaped") or []) + reaped) if reaped else rec)
        elif outcome == "STOPPED" and rec.get("preempting"):
            self._requeue_preempted(rec, reaped)
        else:
            self._finish(rec, outcome, info=info, reaped=reaped)

    def _finish(self, rec: dict[str, Any], status: str, message: str = "", info: Optional[dict[str, Any]] = None,
                reaped: Optional[list[str]] = None, cause: Optional[str] = None) -> None:
        if info is None and not message:
            info = self._info(rec["id"])
        done = finish_record(rec, status, message, info, reaped)
        if cause:
            done["cause"] = cause
        self.done[rec["id"]] = status
        self._no_victims.pop(rec["id"], None)
        self.store.put(done)
        self.status.append_history(history_row(done))
        self._fast_until = time.monotonic() + FAST_POLL_S
        self._note(status.lower(), rec["id"])

    def _info(self, sid: str) -> Optional[dict[str, Any]]:
        try:
            i = self.d.info(sid)
            return {"message": i.message, "driver_node_id": i.driver_node_id, "start_time": i.start_time,
                    "end_time": i.end_time}
        except Exception:  # noqa: BLE001
            return None

    # ---------------------------------------------------------------- admission
    def _order(self) -> list[_Entry]:
        return sorted(self.waiting.values(), key=lambda e: e.req.key())

    def _schedule(self) -> None:
        self.reserving_for = None
        if not self.waiting:
            return
        ready = [e for e in self._order() if self._ready(e)]  # dependencies met, not being requeued
        for e in [e for e in ready if not e.req.groups]:  # nothing to fit: start at once
            self._admit_entry(e)
        ready = [e for e in ready if e.req.id in self.waiting]
        if not ready:
            return
        nodes, created = clusterstate.nodes()
        self.cluster = clusterstate.describe_cluster(nodes)
        if not enabled() or not any(n.gpus for n in nodes):
            why = "the queue is switched off" if not enabled() else "the cluster has no GPUs: the GPU demand is not enforced"
            for e in ready:
                e.note = why
                self._admit_entry(e)
            return
        self._refresh_unplaced(created)
        self._overdue_preemptions()
        if self._gpus_held():
            return
        self._admit_fitting(nodes, ready)
        self._offer_standby(ready)

    def _ready(self, e: _Entry) -> bool:
        """May ``e`` be considered for admission now? Its dependencies (``rayjobs.after``) all
        SUCCEEDED -- one that failed or was stopped fails it, never started -- and it is not being
        put back in the queue (a preempted job whose old Ray entry is being deleted)."""
        e.hold = ""
        if e.busy is not None and not e.busy.done():
            e.hold, e.note = "requeueing", "preempted: back in the queue in a moment"
            return False
        if not e.req.after:
            return True
        pending, failed = [], []
        for dep in e.req.after:
            status = self.done.get(dep)
            if status is None and dep not in self.waiting and dep not in self.admitted and dep not in self.reaping:
                rec = self.store.get(dep)  # not loaded here: only a record removed by hand
                status = str(rec.get("status")) if rec and rec.get("state") == DONE else (None if rec else "gone")
            if status == "SUCCEEDED":
                continue
            (failed if status is not None else pending).append(dep if status is None else f"{dep} {status}")
        if failed:
            self.waiting.pop(e.req.id, None)
            self.standby.cancel(e.req.id)
            self._finish(e.rec, "FAILED", f"dependency failed: {', '.join(failed)}; it never started",
                         cause=f"dependency failed: {failed[0]}")
            return False
        if pending:
            e.hold, e.note = "after", f"after {', '.join(pending[:3])}{' ...' if len(pending) > 3 else ''}: starts once they SUCCEEDED"
            return False
        return True

    def _offer_standby(self, ready: list[_Entry]) -> None:
        """Pre-start the next job to be admitted (see standby.py), but not while an admitted trainer is
        still starting (Ray's job start would take CPU from the start-up the GPUs wait for), nor while
        a batch of stops comes in (a sweep's stop arrives in parts: each next job would start only to stop)."""
        if not self.waiting or self.standby.sid is not None or time.monotonic() - self._cancelled_at < STANDBY_CALM_S:
            return
        if any(e.unplaced for e in self.admitted.values()):
            return
        nxt = next((e for e in ready if e.req.id in self.waiting and not e.hold), None)
        if nxt is not None:
            self.standby.offer(nxt.rec)

    def _refresh_unplaced(self, created: dict[str, list[int]]) -> None:
        for e in self.admitted.values():
            left = clusterstate.unplaced(e.req.groups, e.req.id, created, e.req.retries > 0, e.unplaced)
            e.unplaced = e.unplaced if left is None else left
            self._watch_ending(e)

    def _watch_ending(self, e: _Entry) -> None:
        """Has this job's trainer left its GPUs (its Ray drivers all dead, no retry to come)? Ray then
        shows them free while the trainer's process, and what it leaves behind, may still hold their
        memory: they go to no one until the job has ended and been reaped (:meth:`_gpus_held`)."""
        if e.ending_since or not e.in_ray or not e.req.groups or e.req.retries or e.unplaced:
            return
        found = clusterstate.drivers(e.req.id)
        if found and all(found.values()):
            e.ending_since = time.monotonic()
            self._fast_until = time.monotonic() + FAST_POLL_S
            # No attempt follows (no retry), and the runner carries no mark: reap now, so the GPUs go
            # to the next job once this is done, not only once Ray has seen the job end (~1.5 s more).
            e.early = self.pool.submit(self._reap_early, e.req.id) if reaper.enabled() else None

    def _reap_early(self, sid: str) -> list[str]:
        """(in the pool) The reap of a job whose trainer has exited; its lines."""
        try:
            return reaper.reap_job(sid, spare_live=True)
        except Exception as e:  # noqa: BLE001 (the reap at the job's end tries again)
            return [f"reaping failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"]

    def _gpus_held(self) -> bool:
        """Must GPU admissions wait: a job that used GPUs has ended (or its trainer has) and what it
        left on the nodes is not reaped yet? Which node's GPUs Ray frees is not known here: all wait."""
        if not reaper.enabled():
            return False
        now = time.monotonic()

        def reaped(e: _Entry) -> bool:  # its early reap (at its trainer's exit) is done
            return e.early is not None and e.early.done()

        return (any(e.req.groups and not reaped(e) for e in self.reaping.values())
                or any(e.ending_since and not reaped(e) and now - e.ending_since < ENDING_MAX_S
                       for e in self.admitted.values()))

    def _admit_fitting(self, nodes: list[capacity.Node], ready: list[_Entry]) -> None:
        reserved = [g for e in self.admitted.values() for g in e.unplaced]
        now = time.time()
        failed: dict[tuple[int, ...], capacity.Verdict] = {}  # a demand that did not fit: same answer for its twins
        held = policy.gpus_by_user(e.req for e in self.admitted.values())
        asking = {e.req.user for e in ready}
        for e in ready:
            over = policy.over_quota(self.quota, e.req, held, asking)
            if over:
                e.hold, e.note = "quota", over
                continue
            demand = tuple(sorted(e.req.groups))
            v = failed.get(demand) or capacity.fit(e.req.groups, nodes, reserved)
            if not v.fits:
                failed[demand] = v
            if v.fits:
                e.note = ""
                self._admit_entry(e)
                reserved += e.req.groups
                held[e.req.user] = held.get(e.req.user, 0) + e.req.gpus
                continue
            e.note = ("can never fit the cluster as it is now: " if v.state == capacity.NEVER else "waiting: ") + v.reason
            if v.state == capacity.WAIT and self._preempt_for(e, nodes, reserved):
                self._hold_behind(e, "preempting for it")
                break
            if v.state == capacity.WAIT and now - e.req.since >= self.backfill_s:
                self._hold_behind(e, f"waiting > {self.backfill_s:g} s; no backfill")
                break

    def _hold_behind(self, e: _Entry, why: str) -> None:
        """Nothing behind ``e`` in line may start (the GPUs being freed, or the starvation guard)."""
        self.reserving_for = e.req.id
        for later in self._order():
            if later.req.key() > e.req.key() and not later.hold:
                later.note = f"held behind {e.req.id} ({why})"

    # ---------------------------------------------------------------- preemption
    def _preempt_for(self, e: _Entry, nodes: list[capacity.Node], reserved: list[int]) -> bool:
        """Stop preemptible jobs of lower priority at their next checkpoint so that ``e`` fits
        (lowest priority first, then the youngest); True if ``e`` waits for such stops."""
        victims = [a.req.id for a in self.admitted.values() if a.preempting_for == e.req.id]
        if victims:
            e.note = f"preempting {', '.join(victims)}: starts once they stopped at their next checkpoint"
            return True
        cands = sorted((a for a in self.admitted.values() if a.req.preemptible and a.req.priority < e.req.priority
                        and a.in_ray and not a.preempting_for and not a.ending_since),
                       key=lambda a: (a.req.priority, -a.admitted_at))
        # The placement-group reads cost GCS queries: a "no" is kept while the candidates are the same
        # (for PREEMPT_RECHECK_S), not asked again every tick of the loop.
        seen = (tuple(a.req.id for a in cands), tuple(sorted(e.req.groups)))
        last = self._no_victims.get(e.req.id)
        if not cands or (last and last[1] == seen and time.monotonic() - last[0] < PREEMPT_RECHECK_S):
            return False
        chosen = policy.victims(e.req.groups, nodes, reserved, cands, clusterstate.held_by([a.req.id for a in cands]))
        if not chosen:
            self._no_victims[e.req.id] = (time.monotonic(), seen)
            return False
        self._no_victims.pop(e.req.id, None)
        for a in chosen:
            self._preempt(a, e.req.id)
        e.note = f"preempting {', '.join(a.req.id for a in chosen)}: starts once they stopped at their next checkpoint"
        return True

    def _preempt(self, a: _Entry, by: str) -> None:
        """Ask ``a``'s runner to stop it once its next checkpoint is saved (at most its
        ``preempt_wait_s``); once stopped it goes back to the queue (:meth:`_requeue_preempted`)."""
        from rayjobs.oncluster.checkpointwatch import ask_stop

        a.preempting_for, a.preempt_asked = by, time.time()
        a.rec = dict(a.rec, preempting={"by": by, "asked_at": a.preempt_asked})
        self.store.put(a.rec)
        run_dir = a.metadata().get("run_dir")
        if run_dir and a.metadata().get("checkpoint_dir"):
            ask_stop(Path(run_dir), a.req.id, a.req.preempt_wait_s, reason=f"preempted by {by}", by=by)
        else:  # nothing to wait for: no checkpoints to stop at
            a.preempt_forced = True
            self.pool.submit(self.d.stop, a.req.id)
        self._note("preempting", f"{a.req.id} for {by}")
        print(f"[rayjobs] {stamp()} preempting {a.req.id} (priority {a.req.priority}) for {by}: "
              f"stopping it at its next checkpoint (at most {a.req.preempt_wait_s:g} s)", flush=True)

    def _call_off_preemptions(self) -> None:
        """A job being stopped for one that no longer waits (its user stopped it, or it was admitted on
        GPUs freed otherwise) trains on: the request is withdrawn before its runner acts on it. The
        record keeps whom it was for, marked ``called_off``: should the runner have stopped it in
        that instant, it still goes back in line (a preemption's stop), never ends STOPPED."""
        from rayjobs.oncluster.checkpointwatch import withdraw_stop

        for a in self.admitted.values():
            by = a.preempting_for
            if not by or by in self.waiting or a.preempt_forced or a.stop_asked:
                continue
            a.preempting_for = ""
            a.rec = dict(a.rec, preempting=dict(a.rec.get("preempting") or {}, called_off=time.time()))
            self.store.put(a.rec)
            run_dir = a.metadata().get("run_dir")
            withdrawn = bool(run_dir) and withdraw_stop(Path(run_dir), a.req.id, by)
            self._note("preemption called off", f"{a.req.id}: {by} no longer waits (withdrawn: {withdrawn})")
            print(f"[rayjobs] {stamp()} preemption of {a.req.id} called off: {by} no longer waits", flush=True)

    def _overdue_preemptions(self) -> None:
        """A preempted job whose runner did not stop it in time (an old runner, a hung trainer): stop it."""
        now = time.time()
        for a in self.admitted.values():
            if a.preempting_for and not a.preempt_forced and now - a.preempt_asked > a.req.preempt_wait_s + 60:
                a.preempt_forced = True
                self.pool.submit(self.d.stop, a.req.id)
                self._note("preemption overdue: stopped", a.req.id)

    def _requeue_preempted(self, rec: dict[str, Any], reaped: list[str]) -> None:
        """A preempted job has stopped: back to its old place in the queue (its order keys are kept),
        to resume from its checkpoint as a new attempt. Ray's entry of it is deleted first (in the
        pool) so the id can be submitted again; its driver log is appended to, not replaced."""
        again = requeued_record(rec, reaped)
        self.store.put(again)
        self._wait(again)
        self.waiting[rec["id"]].busy = self.pool.submit(self._forget_in_ray, rec["id"])
        info = again["preempted"]
        self._note("preempted", f"{rec['id']} by {info['by']}")
        print(f"[rayjobs] {stamp()} {rec['id']} preempted by {info['by']}: back in the queue; it resumes from "
              f"checkpoint step {info['checkpoint_step']} (redoes {info['redo']} step(s))", flush=True)

    def _forget_in_ray(self, sid: str, timeout: float = 90.0) -> None:
        """(in the pool) Delete Ray's entry of an ended job, so its id can be submitted again (bounded).

        Not while the old run's job supervisor is still exiting, nor before Ray's monitor of the old
        run has noticed that it died (it pings it every second): either writes the old run's end
        onto the new run (measured: the resubmitted job FAILED at once, "Job supervisor actor died
        ... exit_actor() is called"). So, as for pruning, only :data:`PRUNE_MIN_AGE_S` after it ended.
        """
        deadline = time.monotonic() + timeout
        info = self._info(sid) or {}
        ended = float(info.get("end_time") or time.time() * 1000) / 1000.0
        while time.monotonic() < deadline and (time.time() - ended < PRUNE_MIN_AGE_S
                                               or supervisor_alive(sid, self.d.address)):
            time.sleep(0.2)
        while time.monotonic() < deadline:
            try:
                self.d.sdk.delete_job(sid)
                return
            except Exception as e:  # noqa: BLE001
                if _unknown_to_ray(e):
                    return
            time.sleep(0.2)

    # ---------------------------------------------------------------- housekeeping
    def _heartbeat(self) -> None:
        from rayjobs.oncluster.store import write_atomic

        try:
            write_atomic(self.store.root / "service.json",
                         f'{{"at": {time.time():.3f}, "pid": {os.getpid()}}}\n'.encode())
        except OSError:
            pass

    def _prune(self) -> None:
        """(in the pool) Delete from Ray's job table the finished jobs older than the retention and
        rayjobs' own small jobs (enqueue, control) once they ended; drop code snapshots no waiting,
        running or recently finished job names."""
        cutoff = time.time() - max(self.retention_s, PRUNE_MIN_AGE_S)
        records = self.store.all()
        code_cutoff = time.time() - float(os.environ.get(CODE_RETENTION_ENV, 7 * 86400))
        self.store.drop_code({str(r.get("code")) for r in records.values()
                              if r.get("state") != DONE or float(r.get("finished_at") or 0) > code_cutoff})
        for rec in records.values():
            if rec.get("state") == DONE and not rec.get("pruned") and float(rec.get("finished_at") or 0) < cutoff:
                try:
                    self.d.sdk.delete_job(rec["id"])
                except Exception:  # noqa: BLE001 (already gone, or never in Ray)
                    pass
                self.store.put(dict(rec, pruned=True))
        pruned = {i for i, r in records.items() if r.get("pruned")}
        try:
            for j in self.d.sdk.list_jobs():
                # Ended a while ago only: deleting a job whose supervisor is still exiting makes Ray
                # write back a metadata-less "Entrypoint not found." entry (a ghost a view would count).
                ended = (str(j.status).split(".")[-1] in TERMINAL and j.submission_id
                         and (j.end_time or 0) / 1000.0 < time.time() - PRUNE_MIN_AGE_S)
                # rayjobs' own small jobs, and the entry Ray writes back for a job deleted too soon
                if ended and ((j.metadata or {}).get(ROLE_KEY) or (j.submission_id in pruned and not j.metadata)):
                    self.d.sdk.delete_job(j.submission_id)
        except Exception:  # noqa: BLE001
            pass

    def _write_status(self) -> None:
        """Rewrite the status file when what it shows changed (its build is O(waiting jobs))."""
        sig = (tuple((e.req.id, e.note, e.hold) for e in self._order()),
               tuple((e.req.id, e.in_ray, tuple(e.unplaced), e.preempting_for) for e in self.admitted.values()),
               tuple(self.reaping), self.reserving_for)
        now = time.monotonic()
        if (sig == self._sig and now - self._doc_at < REWRITE_S) or now - self._doc_at < MIN_GAP_S:
            return
        self._sig, self._doc_at = sig, now
        self.status.write(self._doc(), force=True)

    def _doc(self) -> dict[str, Any]:
        now = time.time()
        queue = [{"id": e.req.id, "position": i + 1, "priority": e.req.priority, "gpu_groups": e.req.groups,
                  "waiting_s": round(now - e.req.since, 1), "reason": e.note, "queued_at": e.rec.get("queued_at"),
                  "user": e.req.user, "held": e.hold or None, "after": list(e.req.after),
                  "preempted": e.rec.get("preempted"), "preemptions": int(e.rec.get("preemptions") or 0),
                  "metadata": e.metadata()} for i, e in enumerate(self._order())]
        running = [{"id": e.req.id, "gpu_groups": e.req.groups, "unplaced": e.unplaced, "note": e.note,
                    "admitted_at": round(e.admitted_at, 3), "in_ray": e.in_ray, "user": e.req.user,
                    "preempting_for": e.preempting_for or None,
                    "metadata": e.metadata()} for e in self.admitted.values()]
        # Preempted jobs between their stop and their place back in the queue: views must not
        # take Ray's STOPPED for their end (a tail follows them on).
        preempted = {e.req.id: {"by": e.preempting_for, "phase": "stopping"} for e in self.admitted.values()
                     if e.preempting_for}
        preempted.update({e.req.id: {"by": e.rec["preempting"].get("by"), "phase": "requeueing"}
                          for e in self.reaping.values() if e.rec.get("preempting") and e.ended == "STOPPED"})
        return {"protocol": PROTOCOL, "updated_at": round(now, 3), "backfill_s": self.backfill_s,
                "reserving_for": self.reserving_for, "queue": queue, "admitted": running, "cluster": self.cluster,
                "preempted": preempted, "quota": self.quota, "users": self._users()}

    def _users(self) -> dict[str, dict[str, Any]]:
        """Per user: GPUs held by admitted jobs, jobs running and waiting, the quota that applies."""
        out: dict[str, dict[str, Any]] = {}
        for e in self.admitted.values():
            u = out.setdefault(e.req.user, {"gpus": 0, "running": 0, "waiting": 0})
            u["gpus"] += e.req.gpus
            u["running"] += 1
        for e in self.waiting.values():
            out.setdefault(e.req.user, {"gpus": 0, "running": 0, "waiting": 0})["waiting"] += 1
        for user, u in out.items():
            u["quota"] = policy.cap(self.quota, user)
        return out


# --------------------------------------------------------------------------- starting it
def ensure_running(timeout: float = 60.0) -> Any:
    """Connect to this cluster and make sure the queue actor runs (created once, by name); its handle.

    The caller's own job config (its working_dir) is kept out: the detached actor must not inherit
    one job's runtime_env.
    """
    import ray
    from ray.job_config import JobConfig

    if not ray.is_initialized():
        saved = os.environ.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
        try:
            ray.init(address="auto", namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False,
                     configure_logging=False, job_config=JobConfig(metadata={ROLE_KEY: "queue starter"}))
        finally:
            if saved is not None:
                os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = saved
    actor = ray.remote(QueueActor).options(
        name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_restarts=-1, max_concurrency=100, resources={"node:__internal_head__": 0.001}).remote()
    ray.get(actor.ping.remote(), timeout=timeout)
    return actor

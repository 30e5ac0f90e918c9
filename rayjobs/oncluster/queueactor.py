"""The cluster-side queue: a job whose GPUs are not free waits as QUEUED inside its own Ray job.

Every job runs under ``rayjobs.oncluster.runner``. Before it starts the trainer, a job with a GPU demand asks
a detached, named actor (``rayjobs/queue``, ``num_cpus=0``, pinned to the head, created by the first
runner that needs it, so it also works on clusters rayjobs did not start) for admission. The actor
admits by priority, then submission order, when the job's ``gpu_groups`` fit per node (each group on
ONE node, GPUs and 3 CPUs per GPU) given live per-node availability minus the groups of admitted
jobs that have not created their placement groups yet. The runner releases on exit; the actor also
drops jobs whose runner died (Ray's job table) or went silent (heartbeats).

* Stopping a queued job is Ray's own ``stop_job``: it kills the waiting runner; the trainer never
  starts. The queue needs neither the laptop nor the dashboard. If the actor restarts, runners
  re-register (waiting ones with their original order; admitted ones as admitted).
* Starvation: later jobs may start ahead of a blocked one (backfill) only while it has waited less
  than ``RAYJOBS_QUEUE_BACKFILL_S`` (head env, default 300 s); after that nothing behind it starts
  until it has started (jobs of higher priority still go first).
* ``QUEUED`` and positions reach the laptop through a small JSON file the actor keeps in the head's
  Ray log dir, read with the dashboard's log API (:func:`rayjobs.views.queuestatus.overlay`), so
  ``rayjobs list`` needs only the Jobs/dashboard HTTP API.

This module is the actor; :mod:`rayjobs.oncluster.request` what a runner asks it, :mod:`rayjobs.oncluster.admission`
the runner's side, :mod:`rayjobs.oncluster.statusfile` the file it keeps and :mod:`rayjobs.views.queuestatus` the
laptop's view.

This module imports Ray only inside functions: ``rayjobs.submit`` imports it for the fit check.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from rayjobs.oncluster import capacity
from rayjobs.oncluster.request import Request
from rayjobs.oncluster.statusfile import PROTOCOL, StatusFile

NAMESPACE = "rayjobs"
ACTOR_NAME = "queue"
#: Head-side settings (read from the environment of ``ray start`` on the head).
BACKFILL_ENV = "RAYJOBS_QUEUE_BACKFILL_S"
DEFAULT_BACKFILL_S = 300.0
SWITCH_ENV = "RAYJOBS_QUEUE"  #: "0"/"off" disables admission (jobs start at once, as plain Ray)
HEARTBEAT_S = 2.0  #: runners say "still here" this often
SILENT_S = 20.0  #: a runner silent this long (and not known alive to Ray) is dropped
RESTART_GRACE_S = 3.0  #: a restarted actor admits nothing until admitted runners re-registered
FAST_POLL_S = 3.0  #: after a release, poll availability this long ...
FAST_POLL_EVERY_S = 0.02  #: ... this often (the freed GPUs show up a few hundred ms after exit)
WAIT_POLL_S = 0.1  #: while jobs wait, look at the cluster this often (a trainer frees its GPUs when
#: its Ray driver disconnects, which is before its process has exited and the runner releases)


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


# --------------------------------------------------------------------------- the actor
@dataclass
class _Entry:
    req: Request
    event: Any = None  #: asyncio.Event, set on admission
    admitted_at: float = 0.0
    last_seen: float = field(default_factory=time.monotonic)
    unplaced: list[int] = field(default_factory=list)  #: groups without a CREATED placement group yet
    note: str = ""


class QueueActor:
    """The queue itself (one per cluster): ``ray.remote(QueueActor)`` named ``rayjobs/queue``, detached."""

    def __init__(self) -> None:
        import ray

        self.waiting: dict[str, _Entry] = {}
        self.admitted: dict[str, _Entry] = {}
        self.backfill_s = float(os.environ.get(BACKFILL_ENV, DEFAULT_BACKFILL_S))
        self.reserving_for: Optional[str] = None
        self.events: collections.deque = collections.deque(maxlen=2000)
        self.started = time.time()
        self._status = StatusFile()
        # After a restart (or a re-creation: a previous actor's status file still lists jobs),
        # admit nothing for a moment: admitted runners re-register within a heartbeat.
        restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed) or self._status.had_jobs()
        self.grace_until = time.monotonic() + (RESTART_GRACE_S if restarted else 0.0)
        self._loop: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._fast_until = 0.0
        self._reaped_at = 0.0
        self._cluster: dict[str, float] = {}
        self._note("start", "restarted" if restarted else "")

    # ---------------------------------------------------------------- runner-facing API
    async def register(self, req: dict[str, Any]) -> dict[str, Any]:
        """A runner asks to start. Returns its state now (``admitted`` or ``queued`` + position)."""
        self._start()
        r = Request.from_dict(req)
        if r.id in self.admitted:
            self.admitted[r.id].last_seen = time.monotonic()
            return self._state(r.id)
        e = self.waiting.get(r.id)
        if e is None:
            e = self.waiting[r.id] = _Entry(r, asyncio.Event())
            self._note("queued", r.id)
        else:
            e.req = r
        e.last_seen = time.monotonic()
        self._schedule()
        return self._state(r.id)

    async def wait(self, sid: str, timeout: float = 1.0) -> dict[str, Any]:
        """Block (up to ``timeout``) until ``sid`` is admitted; doubles as the waiting runner's heartbeat."""
        self._start()
        e = self.waiting.get(sid)
        if e is not None:
            e.last_seen = time.monotonic()
            try:
                await asyncio.wait_for(e.event.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return self._state(sid)

    async def restore(self, req: dict[str, Any]) -> dict[str, Any]:
        """An admitted runner re-registers (the actor restarted, or dropped it by mistake)."""
        self._start()
        r = Request.from_dict(req)
        e = self.waiting.pop(r.id, None) or self.admitted.get(r.id) or _Entry(r, asyncio.Event())
        e.req, e.last_seen = r, time.monotonic()
        if r.id not in self.admitted:
            e.admitted_at = e.admitted_at or time.time()
            e.unplaced = list(r.groups)
            self.admitted[r.id] = e
            self._note("restored", r.id)
        if e.event is not None:
            e.event.set()
        return self._state(r.id)

    async def heartbeat(self, sid: str) -> bool:
        """An admitted runner is alive. False: the actor does not know it (it should :meth:`restore`)."""
        self._start()
        e = self.admitted.get(sid) or self.waiting.get(sid)
        if e is None:
            return False
        e.last_seen = time.monotonic()
        return True

    async def release(self, sid: str) -> bool:
        """The job ended (or was stopped while queued): forget it and let the next one in."""
        self._start()
        gone = self.admitted.pop(sid, None) or self.waiting.pop(sid, None)
        if gone is not None:
            self._note("released", sid)
            self._fast_until = time.monotonic() + FAST_POLL_S
            self._kick()
        return gone is not None

    async def snapshot(self) -> dict[str, Any]:
        """The queue as the status file shows it, plus recent events (tests, benchmarks)."""
        self._start()
        doc = self._doc()
        doc["events"] = list(self.events)
        return doc

    # ---------------------------------------------------------------- internals
    def _start(self) -> None:
        if self._loop is None:
            self._wake = asyncio.Event()
            self._loop = asyncio.get_event_loop().create_task(self._run())

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _note(self, what: str, sid: str) -> None:
        self.events.append((round(time.time(), 4), what, sid))

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            every = FAST_POLL_EVERY_S if now < self._fast_until else (WAIT_POLL_S if self.waiting else 1.0)
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
        if now - self._reaped_at >= 1.0:
            self._reaped_at = now
            self._reap()
        self._schedule()
        self._write_status()

    def _state(self, sid: str) -> dict[str, Any]:
        if sid in self.admitted:
            e = self.admitted[sid]
            return {"state": "admitted", "note": e.note, "admitted_at": e.admitted_at}
        if sid in self.waiting:
            order = self._order()
            pos = 1 + [x.req.id for x in order].index(sid)
            return {"state": "queued", "position": pos, "note": self.waiting[sid].note,
                    "reserving_for": self.reserving_for}
        return {"state": "unknown"}

    def _order(self) -> list[_Entry]:
        return sorted(self.waiting.values(), key=lambda e: e.req.key())

    def _admit(self, e: _Entry, note: str = "") -> None:
        self.waiting.pop(e.req.id, None)
        e.admitted_at, e.unplaced, e.note = time.time(), list(e.req.groups), note
        e.last_seen = time.monotonic()
        self.admitted[e.req.id] = e
        e.event.set()
        self._note("admitted", e.req.id)

    def _schedule(self) -> None:
        self.reserving_for = None
        if not self.waiting or time.monotonic() < self.grace_until:
            return
        nodes = self._view()
        self._cluster = {"nodes": len(nodes), "gpus": sum(n.gpus for n in nodes),
                         "free_gpus": sum(n.free_gpus for n in nodes)}
        if not any(n.gpus for n in nodes):  # a CPU-only (dev) cluster: GPU demand cannot be honoured
            for e in self._order():
                self._admit(e, "the cluster has no GPUs: the GPU demand is not enforced")
            return
        reserved = [g for e in self.admitted.values() for g in e.unplaced]
        now = time.time()
        for e in self._order():
            v = capacity.fit(e.req.groups, nodes, reserved)
            if v.fits:
                self._admit(e)
                reserved += e.req.groups
                continue
            e.note = ("can never fit the cluster as it is now: " if v.state == capacity.NEVER else "waiting: ") + v.reason
            if v.state == capacity.WAIT and now - e.req.since >= self.backfill_s:
                self.reserving_for = e.req.id  # starvation guard: nothing behind it may start
                for later in self._order():
                    if later.req.key() > e.req.key():
                        later.note = f"held behind {e.req.id} (waiting > {self.backfill_s:g} s; no backfill)"
                break

    # ---------------------------------------------------------------- cluster facts
    def _drivers(self, key: str) -> Optional[dict[str, bool]]:
        """Ray drivers whose JobID (hex) or ``job_submission_id`` is ``key``: JobID hex -> dead.

        One filtered GCS query (the runner passes its own JobID; a trainer's driver carries its
        Ray job's submission id). None if the GCS could not be asked.
        """
        import ray

        try:
            gcs = ray._private.worker.global_worker.gcs_client
            got = gcs.get_all_job_info(job_or_submission_id=key, skip_submission_job_info_field=True,
                                       skip_is_running_tasks_field=True, timeout=5)
        except Exception:
            return None
        return {jid.hex(): bool(d.is_dead) for jid, d in got.items()}

    def _reap(self) -> None:
        """Drop jobs whose runner died (Ray's job table), or went silent for SILENT_S."""
        now = time.monotonic()
        for pool in (self.waiting, self.admitted):
            for sid, e in list(pool.items()):
                known = self._drivers(e.req.runner_job) if e.req.runner_job else None
                if known and e.req.runner_job in known:
                    dead = known[e.req.runner_job]
                else:
                    dead = now - e.last_seen > SILENT_S
                if dead:
                    pool.pop(sid, None)
                    self._note("reaped", sid)
                    self._fast_until = now + FAST_POLL_S

    def _view(self) -> list[capacity.Node]:
        """Per-node capacity to admit into, and each admitted job's groups still without a placement group.

        Free per node = min(Ray's availability view, total - CREATED placement groups): the view
        lags a just-created placement group by a moment, the placement-group table does not; the
        view also counts what is used outside placement groups. An admitted job's groups count
        as reserved until its trainer's placement groups (found through the trainer driver's
        ``job_submission_id``) are CREATED, and again if they vanish while a retry may follow; a
        trainer that exited with no retry left frees them at once (before its runner releases).
        """
        import ray

        total = ray._private.state.total_resources_per_node()
        free = ray._private.state.available_resources_per_node()
        used: dict[str, list[float]] = {}
        created: dict[str, list[int]] = {}  # Ray JobID hex -> GPU count of each CREATED group
        try:
            pgs = ray.util.placement_group_table()
        except Exception:
            pgs = {}
        for pg_id, pg in pgs.items():
            if pg.get("state") != "CREATED":
                continue
            where = pg.get("bundles_to_node_id") or {}
            gpus = 0.0
            for idx, b in (pg.get("bundles") or {}).items():
                u = used.setdefault(str(where.get(idx, "")), [0.0, 0.0])
                u[0] += float(b.get("GPU", 0))
                u[1] += float(b.get("CPU", 0))
                gpus += float(b.get("GPU", 0))
            if gpus > 0:
                created.setdefault(str(pg_id)[-8:], []).append(int(round(gpus)))
        nodes = []
        for n in capacity.nodes_from_ray(total, free):
            u = used.get(n.id, [0.0, 0.0])
            nodes.append(capacity.Node(n.id, n.gpus, n.cpus, min(n.free_gpus, n.gpus - u[0]), min(n.free_cpus, n.cpus - u[1])))
        for e in self.admitted.values():
            drivers = self._drivers(e.req.id)
            if drivers is None:
                continue  # keep the last answer
            left = list(e.req.groups)
            for jid, dead in drivers.items():
                for g in created.get(jid, []) if not dead and jid != e.req.runner_job else []:
                    if g in left:
                        left.remove(g)
            if drivers and all(drivers.values()) and e.req.retries == 0:
                left = []  # its trainer has exited and there is no retry to keep the GPUs for
            e.unplaced = left
        return nodes

    # ---------------------------------------------------------------- status file
    def _doc(self) -> dict[str, Any]:
        now = time.time()
        queue = [{"id": e.req.id, "position": i + 1, "priority": e.req.priority, "gpu_groups": e.req.groups,
                  "waiting_s": round(now - e.req.since, 1), "reason": e.note} for i, e in enumerate(self._order())]
        running = [{"id": e.req.id, "gpu_groups": e.req.groups, "unplaced": e.unplaced,
                    "admitted_at": round(e.admitted_at, 3)} for e in self.admitted.values()]
        # Jobs admitted lately (newest first), so a reader can tell a runner that has not asked yet
        # (Ray already says RUNNING) from one that finished with the GPUs and is exiting.
        seen = list(dict.fromkeys(sid for _, what, sid in reversed(self.events) if what in ("admitted", "restored")))
        return {"protocol": PROTOCOL, "updated_at": round(now, 3), "backfill_s": self.backfill_s,
                "reserving_for": self.reserving_for, "queue": queue, "admitted": running,
                "seen": seen[:200], "cluster": self._cluster}

    def _write_status(self) -> None:
        self._status.write(self._doc())

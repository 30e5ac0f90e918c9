"""The cluster-side queue: a job whose GPUs are not free waits as QUEUED inside its own Ray job.

Every job runs under ``rayjobs.runner``. Before it starts the trainer, a job with a GPU demand asks
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
  Ray log dir, read with the dashboard's log API (:func:`overlay`), so ``rayjobs list`` needs only
  the Jobs/dashboard HTTP API.

This module imports Ray only inside functions: ``rayjobs.submit`` imports it for the fit check.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Optional, Sequence

from rayjobs import capacity

NAMESPACE = "rayjobs"
ACTOR_NAME = "queue"
STATUS_FILE = "rayjobs_queue.json"
PROTOCOL = 1
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


# --------------------------------------------------------------------------- requests
@dataclass
class Request:
    """What a runner asks for. Order: higher priority, then submitted, sweep point, Ray's creation time."""

    id: str
    groups: list[int]
    priority: int = 0
    submitted: float = 0.0  #: epoch seconds (metadata ``submitted_at``)
    point: int = 0  #: index in its sweep (points share ``submitted_at``)
    created_ms: int = 0  #: Ray's job creation time (ms): breaks ties within a second
    since: float = 0.0  #: when this job first asked (survives actor restarts)
    runner_job: str = ""  #: the runner's Ray JobID (hex): the actor watches it for liveness
    retries: int = 0  #: rayjobs.max_retries: with retries left, GPUs stay reserved between attempts
    version: str = ""

    def key(self) -> tuple:
        return (-self.priority, self.submitted, self.point, self.created_ms, self.id)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Request":
        """Tolerant of runners of another rayjobs version (unknown fields are ignored)."""
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return 0.0


def request_from_metadata(sid: str, meta: dict[str, Any], created_ms: int = 0, runner_job: str = "") -> Request:
    from rayjobs import __version__

    try:
        groups = capacity.clean_groups(json.loads(meta.get("gpu_groups") or "[]"))
    except (TypeError, ValueError):
        groups = []
    point = 0
    sweep = meta.get("sweep") or ""
    if sweep and sid.startswith(sweep + "-") and sid[len(sweep) + 1:].isdigit():
        point = int(sid[len(sweep) + 1:])
    try:
        priority = int(meta.get("priority") or 0)
    except ValueError:
        priority = 0
    try:
        retries = int(meta.get("max_retries") or 0)
    except ValueError:
        retries = 0
    submitted = _epoch(meta.get("submitted_at", "")) or created_ms / 1000.0
    return Request(id=sid, groups=groups, priority=priority, submitted=submitted, point=point,
                   created_ms=int(created_ms or 0), since=time.time(), runner_job=runner_job, retries=retries,
                   version=__version__)


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
        self._status_path = self._find_status_path()
        # After a restart (or a re-creation: a previous actor's status file still lists jobs),
        # admit nothing for a moment: admitted runners re-register within a heartbeat.
        restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed) or self._had_jobs()
        self.grace_until = time.monotonic() + (RESTART_GRACE_S if restarted else 0.0)
        self._loop: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._fast_until = 0.0
        self._reaped_at = 0.0
        self._status_written = ""
        self._status_at = 0.0
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
    def _find_status_path(self) -> Optional[str]:
        try:
            import ray

            node = ray._private.worker._global_node
            return os.path.join(node.get_logs_dir_path(), STATUS_FILE) if node is not None else None
        except Exception:
            return None

    def _had_jobs(self) -> bool:
        try:
            with open(self._status_path or "") as f:
                doc = json.loads(f.read())
            return bool(doc.get("admitted") or doc.get("queue"))
        except (OSError, ValueError):
            return False

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
        if not self._status_path:
            return
        doc = self._doc()
        body = json.dumps({k: v for k, v in doc.items() if k != "updated_at"}, sort_keys=True, default=str)
        if body == self._status_written and time.monotonic() - self._status_at < 5.0:
            return
        tmp = self._status_path + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(doc, default=str) + "\n")
            os.replace(tmp, self._status_path)
            self._status_written, self._status_at = body, time.monotonic()
        except OSError:
            pass


# --------------------------------------------------------------------------- runner side
class Stopped(Exception):
    """The job was stopped while it waited in the queue."""


def _log(msg: str) -> None:
    print(f"[rayjobs] {msg}", flush=True)


def connect() -> None:
    """Connect this runner to the cluster as a plain driver (idempotent).

    The job's own config (``RAY_JOB_CONFIG_JSON_ENV_VAR``: its runtime_env and metadata) is kept
    out: the detached queue actor must not inherit one job's working_dir, and the trainer's driver
    stays the one Ray links to the submission.
    """
    import ray

    if ray.is_initialized():
        return
    saved = os.environ.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    try:
        ray.init(namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    finally:
        if saved is not None:
            os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = saved


_ACTOR_CLASS: Any = None


def get_actor() -> Any:
    """The queue actor, created on first use (detached, 0 CPUs, on the head)."""
    import ray

    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = ray.remote(QueueActor)
    return _ACTOR_CLASS.options(name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                       num_cpus=0, max_restarts=-1, max_concurrency=10000,
                       resources={"node:__internal_head__": 0.001}).remote()


def _created_ms(sid: str) -> int:
    """Ray's creation time of job ``sid`` (ms), from its job record; 0 if unreadable."""
    try:
        from ray.experimental.internal_kv import _internal_kv_get

        raw = _internal_kv_get(f"_ray_internal_job_info_{sid}", namespace="job")
        return int(json.loads(raw).get("start_time") or 0) if raw else 0
    except Exception:
        return 0


class _StopFlag:
    """SIGTERM/SIGINT (Ray's stop) while waiting: remember it, leave at the next check."""

    def __init__(self) -> None:
        self.hit = False
        self.old: dict[int, Any] = {}

    def __enter__(self) -> "_StopFlag":
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self.old[s] = signal.signal(s, self._set)
        return self

    def _set(self, signum: int, _frame: Any) -> None:
        self.hit = True

    def __exit__(self, *exc: Any) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)


class Ticket:
    """An admitted job's hold on its GPUs: heartbeats to the actor until :meth:`release`."""

    def __init__(self, req: Request, handle: _Handle) -> None:
        self.req, self.h = req, handle
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="rayjobs-queue-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        import ray

        while not self._done.wait(HEARTBEAT_S):
            try:  # a restarted (or re-created) actor does not know us: re-register as admitted
                if not self.h.call(lambda a: a.heartbeat.remote(self.req.id)):
                    self.h.call(lambda a: a.restore.remote(asdict(self.req)))
            except Exception:
                pass

    def release(self) -> None:
        self._done.set()
        try:
            self.h.call(lambda a: a.release.remote(self.req.id), timeout=5)
        except Exception:
            pass


def admit(sid: str, meta: dict[str, Any], log: Callable[[str], None] = _log) -> Optional[Ticket]:
    """Wait until this job may start (runs in the runner). None: no GPU demand or the queue is off.

    Raises :class:`Stopped` if the job is stopped while waiting (the trainer must not start).
    """
    req = request_from_metadata(sid, meta)
    if not req.groups:
        return None
    if not enabled():
        log(f"queue disabled ({SWITCH_ENV}=0 on the cluster): starting without admission")
        return None
    import ray

    with _StopFlag() as stop:
        started = time.time()
        connect()
        req.created_ms = _created_ms(sid)
        req.runner_job = ray.get_runtime_context().get_job_id()
        h = _Handle(stop)
        state = h.call(lambda a: a.register.remote(asdict(req)))
        shown = None
        while state.get("state") != "admitted":
            if stop.hit:
                _cancel(sid)
                raise Stopped(sid)
            if state.get("state") == "queued":
                pos = state.get("position")
                if pos != shown:
                    log(f"QUEUED at position {pos}: {state.get('note') or 'waiting for GPUs'}")
                    shown = pos
                state = h.call(lambda a: a.wait.remote(sid, 1.0))
            else:  # unknown: the actor restarted or reaped us; register again (same order keys)
                state = h.call(lambda a: a.register.remote(asdict(req)))
        if stop.hit:
            _cancel(sid)
            raise Stopped(sid)
        waited = time.time() - started
        note = f" ({state['note']})" if state.get("note") else ""
        log(f"admitted after {waited:.2f} s at {time.time():.3f}: {capacity.describe(req.groups)}{note}")
        h.stop = None
        return Ticket(req, h)


class _Handle:
    """The queue actor's handle, re-found (or re-created) after the actor died or restarted."""

    def __init__(self, stop: Optional[_StopFlag] = None) -> None:
        self.actor: Any = None
        self.stop = stop

    def call(self, fn: Callable[[Any], Any], timeout: float = 120.0) -> Any:
        import ray

        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.actor is None:
                    self.actor = get_actor()
                return ray.get(fn(self.actor), timeout=30)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                if self.stop is not None and self.stop.hit:
                    raise Stopped()
                time.sleep(0.2)
                self.actor = None


def _cancel(sid: str) -> None:
    import ray

    try:
        ray.get(get_actor().release.remote(sid), timeout=2)
    except Exception:
        pass


# --------------------------------------------------------------------------- laptop side (HTTP only)
_HEAD_IDS: dict[str, str] = {}


def _get_json(client: Any, path: str) -> Any:
    r = client._do_request("GET", path)
    if r.status_code != 200:
        raise RuntimeError(f"GET {path}: HTTP {r.status_code}")
    return r.json()


def cluster_nodes(client: Any) -> list[dict[str, Any]]:
    """Alive nodes from the dashboard's state API (``/api/v0/nodes``)."""
    doc = _get_json(client, "/api/v0/nodes?detail=true&limit=10000")
    rows = doc["data"]["result"]["result"]
    return [r for r in rows if str(r.get("state")) == "ALIVE"]


def read_status(client: Any) -> Optional[dict[str, Any]]:
    """The queue's status file from the head, through the dashboard's log API; None if there is none."""
    addr = getattr(client, "_address", "")
    try:
        head = _HEAD_IDS.get(addr)
        if not head:
            head = next((r["node_id"] for r in cluster_nodes(client) if r.get("is_head_node")), "")
            if not head:
                return None
            _HEAD_IDS[addr] = head
        r = client._do_request("GET", f"/api/v0/logs/file?node_id={head}&filename={STATUS_FILE}&lines=10")
        if r.status_code != 200:
            _HEAD_IDS.pop(addr, None)  # the head may have been replaced
            return None
        text = r.content.decode(errors="replace").strip().splitlines()
        return json.loads(text[-1]) if text else None
    except Exception:
        return None


def _status_of(j: Any) -> str:
    s = j.get("status") if isinstance(j, dict) else getattr(j, "status", "")
    return str(getattr(s, "value", s)).split(".")[-1]


def _id_of(j: Any) -> str:
    return str(j.get("submission_id") or j.get("id") if isinstance(j, dict) else getattr(j, "submission_id", j))


def overlay(client: Any, jobs: Optional[Iterable[Any]] = None) -> dict[str, dict[str, Any]]:
    """``{submission_id: {"status": "QUEUED", "queue_position": n}}`` for jobs the queue holds now.

    ``jobs`` (Ray ``JobDetails``, dicts, or ids; None = all): only those still RUNNING in Ray (a
    waiting runner is a running Ray job) are reported. Positions are the queue's own (1 = next).
    Works from the laptop with the Jobs/dashboard HTTP API only; ``{}`` if the cluster has no queue.
    """
    doc = read_status(client)
    if not doc:
        return {}
    live: Optional[set[str]] = None
    starting: dict[str, dict[str, Any]] = {}
    if jobs is not None:
        live = set()
        known = ({e["id"] for e in doc.get("queue", [])} | {e["id"] for e in doc.get("admitted", [])}
                 | set(doc.get("seen", [])))
        for j in jobs:
            if isinstance(j, str) or _status_of(j) in ("RUNNING", "PENDING"):
                live.add(j if isinstance(j, str) else _id_of(j))
            # Ray says RUNNING as soon as the entrypoint starts, seconds before rayjobs' runner has
            # asked the queue (seen on the H200: a job about to wait showed RUNNING). A GPU job the
            # queue has not seen yet is still starting: say PENDING rather than promise it the GPUs.
            if (not isinstance(j, str) and _status_of(j) == "RUNNING" and _id_of(j) not in known
                    and "seen" in doc and _wants_gpus(j)):
                starting[_id_of(j)] = {"status": "PENDING", "queue_position": None}
    queued = {e["id"]: {"status": "QUEUED", "queue_position": int(e["position"])}
              for e in doc.get("queue", []) if live is None or e["id"] in live}
    return {**starting, **queued}


def _meta_of(j: Any) -> dict[str, Any]:
    m = j.get("metadata") if isinstance(j, dict) else getattr(j, "metadata", None)
    return dict(m or {})


def _wants_gpus(j: Any) -> bool:
    """Does this job's runner ask the queue (it has GPU groups)?"""
    try:
        return bool(capacity.clean_groups(json.loads(_meta_of(j).get("gpu_groups") or "[]")))
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- submit-time check
def refuse_never_fitting(client: Any, prepared: Sequence[Any], address: str = "") -> None:
    """Raise (exit 2, nothing submitted) if a job can never fit this cluster, per node.

    Skipped, with a note, when the state API cannot be read or the cluster has no GPUs at all (a
    CPU-only development cluster, such as the embedded head on a laptop).
    """
    import sys

    from rayjobs.errors import ConfigError

    demands = [(p.spec.submission_id, json.loads(p.spec.metadata.get("gpu_groups") or "[]")) for p in prepared]
    if not any(capacity.clean_groups(g) for _, g in demands):
        return
    try:
        nodes = capacity.nodes_from_state(cluster_nodes(client))
    except Exception as e:
        print(f"rayjobs: note: could not read the cluster's nodes ({e}); GPU fit not checked", file=sys.stderr)
        return
    if not any(n.gpus for n in nodes):
        print("rayjobs: note: the cluster has no GPUs; the jobs' GPU demand is not enforced", file=sys.stderr)
        return
    for sid, groups in demands:
        why = capacity.never_reason(groups, nodes)
        if why:
            where = f" at {address}" if address else ""
            raise ConfigError(f"{sid} can never run on the cluster{where}: it {why}; "
                              f"lower trainer.nnodes / trainer.n_gpus_per_node, or use a bigger cluster")

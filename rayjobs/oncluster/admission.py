"""The runner's side of the queue: wait for admission, keep it alive, release it.

``rayjobs.oncluster.runner`` calls :func:`admit` before it starts the trainer (on the cluster, inside the
job); the returned :class:`Ticket` heartbeats to the queue actor (:mod:`rayjobs.oncluster.queueactor`) until it
is released when the runner exits. Stopping a queued job kills the waiting runner: the trainer
never starts.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import asdict
from typing import Any, Callable, Optional

from rayjobs.oncluster import capacity
from rayjobs.oncluster.queueactor import ACTOR_NAME, HEARTBEAT_S, NAMESPACE, SWITCH_ENV, QueueActor, enabled
from rayjobs.oncluster.request import Request, request_from_metadata
from rayjobs.shared import RUNNER_OF, stamp

# --------------------------------------------------------------------------- runner side
class Stopped(Exception):
    """The job was stopped while it waited in the queue."""


def _log(msg: str) -> None:
    print(f"[rayjobs] {msg}", flush=True)


def connect(sid: str = "") -> None:
    """Connect this runner (of job ``sid``) to the cluster as a plain driver (idempotent).

    The job's own config (``RAY_JOB_CONFIG_JSON_ENV_VAR``: its runtime_env and metadata) is kept
    out: the detached queue actor must not inherit one job's working_dir, and the trainer's driver
    stays the one Ray links to the submission. Ray therefore lists this driver as a job of its own
    (type DRIVER); its metadata ``RUNNER_OF`` names the submission so that rayjobs' views
    (:func:`rayjobs.client.dashboard.list_jobs`) leave it out and ``ray job list`` readers can tell what it is.
    """
    import ray
    from ray.job_config import JobConfig

    if ray.is_initialized():
        return
    saved = os.environ.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    try:
        ray.init(namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False, configure_logging=False,
                 job_config=JobConfig(metadata={RUNNER_OF: sid or "?"}))
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
        pass

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
        connect(sid)
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
        log(f"admitted after {waited:.2f} s at {stamp()}: {capacity.describe(req.groups)}{note}")
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

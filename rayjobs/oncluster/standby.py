"""The queue's one pre-started job: the next waiting job already in Ray, its runner held before the trainer.

Ray needs 2-4 s to start a job (its supervisor actor, the runtime env, the runner) and the GPUs
stay idle meanwhile. So while jobs wait, the queue submits the first of them to Ray ahead of time
with ``$RAYJOBS_STANDBY_GO`` set (:data:`rayjobs.shared.STANDBY_GO_ENV`): its runner
(:mod:`rayjobs.oncluster.runner`) starts, then waits for that file, which the queue writes when it
admits the job (the trainer starts within ~10 ms).
One job at a time, whatever the backlog: a constant ~165 MB and 4 processes on the head (Ray's job
supervisor and the waiting runner), never one per waiting job. ``RAYJOBS_QUEUE_STANDBY=0`` on the
head turns it off (every admission then starts its Ray job cold).

The pre-started job keeps the user's id (Ray's table shows it RUNNING): views treat a job tagged
:data:`rayjobs.shared.STANDBY_KEY` as QUEUED as long as the queue lists it as waiting. Only a job
whose supervisor Ray places on the head is pre-started (no entrypoint resources): the go file is on
the head's local disk, next to the queue.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

from rayjobs.contract.files import write_atomic
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import IN_RAY, TERMINAL, word
from rayjobs.oncluster.admission import durable
from rayjobs.oncluster.headapi import JobsClient
from rayjobs.oncluster.jobrecord import submit_kwargs
from rayjobs.shared import STANDBY_GO_ENV, STANDBY_KEY

SWITCH_ENV = "RAYJOBS_QUEUE_STANDBY"  #: head-side: "0"/"off" starts every admitted job cold
#: Keys of the admission the runner reports (from the record at admission, through the go file).
ADMISSION_KEYS = ("admitted_at", "waited_s", "admission_note")
STOP_EVERY_S = 1.0  #: a cancelled pre-start's Ray job is stopped again this often until it ended...
STOP_WITHIN_S = 600.0  #: ...for at most this long
_RESOURCE_KEYS = ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources")


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def go_dir() -> Path:
    """Where the go files live: the head's local temp dir (the queue and the held runner share it)."""
    return Path(tempfile.gettempdir()) / f"rayjobs-standby-{os.getuid()}"


def eligible(rec: JobRecord) -> bool:
    """Can this job be pre-started: Ray places its supervisor on the head (no entrypoint resources)."""
    return not any(rec.spec.get(k) for k in _RESOURCE_KEYS)


def standby_kwargs(rec: JobRecord, code_dir: Path, go: Path) -> dict[str, Any]:
    """``submit_job`` arguments of ``rec`` pre-started: tagged, and its runner told to hold for ``go``."""
    kw = submit_kwargs(rec.with_(admitted_at=None, note=""), code_dir)
    env = dict((kw["runtime_env"] or {}).get("env_vars") or {}, **{STANDBY_GO_ENV: str(go)})
    kw["runtime_env"] = dict(kw["runtime_env"], env_vars=env)
    kw["metadata"] = dict(kw["metadata"], **{STANDBY_KEY: "1"})
    return kw


class Standby:
    """At most one pre-started job, for the queue actor (its calls run in the actor's pool)."""

    def __init__(self, jobs: JobsClient, pool: ThreadPoolExecutor, code_dir: Callable[[str], Path],
                 cold_submit: Callable[[JobRecord], Any]) -> None:
        self.jobs, self.pool, self.code_dir, self.cold_submit = jobs, pool, code_dir, cold_submit
        self.sid: Optional[str] = None
        self.submitted: Optional[Future] = None  #: resolves to True once Ray has the job
        self.go: Optional[Path] = None  #: the pre-started runner's go file
        self.dir = go_dir()

    def go_path(self, sid: str) -> Path:
        """A go file of this pre-start's own. Never one per job id: a runner left waiting from a
        Ray session that died (the head's Ray restarted) polls the old name and must not take
        the admission of the job's next Ray job (seen: two trainers on one GPU)."""
        return self.dir / f"{sid}.{uuid.uuid4().hex[:12]}.go"

    def offer(self, rec: JobRecord) -> bool:
        """Pre-start ``rec``'s job unless one is pre-started already (or the switch is off)."""
        if self.sid is not None or not enabled() or not eligible(rec):
            return False
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sid, self.go = rec.id, self.go_path(rec.id)
        self.submitted = self.pool.submit(self._submit, rec, self.go)
        return True

    def _submit(self, rec: JobRecord, go: Path) -> bool:
        try:
            self.jobs.submit(standby_kwargs(rec, self.code_dir(rec.code), go))
            return True
        except Exception:  # noqa: BLE001 (the job is then started cold at admission)
            return False

    def take(self, rec: JobRecord, after: Optional[Future] = None) -> Optional[Future]:
        """If ``rec``'s job is the pre-started one, let it go once ``after`` (its record's write) is
        done: a future of what the cold submit gives; else None (the caller submits it)."""
        if rec.id != self.sid or self.submitted is None or self.go is None:
            return None
        submitted, go, self.sid, self.submitted, self.go = self.submitted, self.go, None, None, None
        return self.pool.submit(self._go, rec, submitted, go, after)

    def _go(self, rec: JobRecord, submitted: Future, go: Path, after: Optional[Future] = None) -> Any:
        unwritten = durable(after, rec)
        if unwritten is not None:  # its runner waits for a go that does not come: the stop ends it
            self.pool.submit(self.jobs.stop, rec.id)
            return unwritten
        ok = bool(submitted.result())
        if ok and self._status(rec.id) in IN_RAY:
            meta = submit_kwargs(rec, self.code_dir(rec.code))["metadata"]
            write_atomic(go, json.dumps({k: meta[k] for k in ADMISSION_KEYS if k in meta}).encode())
            return ("ok", "")
        self._forget(rec.id)  # its runner gave up or Ray refused it: start it the usual way
        return self.cold_submit(rec)

    def cancel(self, sid: str) -> None:
        """The pre-started job was stopped while waiting: stop its Ray job too (it never trains)."""
        if sid != self.sid or self.submitted is None:
            return
        submitted, self.sid, self.submitted, self.go = self.submitted, None, None, None
        # a thread of its own: it may take a while, and the pool serves the queue's dashboard calls
        threading.Thread(target=self._stop, args=(sid, submitted), name="rayjobs-standby-stop", daemon=True).start()

    def _stop(self, sid: str, submitted: Future) -> None:
        """Stop a cancelled pre-start's Ray job until Ray says it ended (bounded): Ray answers a stop
        of a job still PENDING (its supervisor not started yet, slow on a loaded head) True and does
        nothing (ray-project/ray#58353), and its runner would then hold, RUNNING, for good."""
        if not submitted.result():
            return
        deadline = time.monotonic() + STOP_WITHIN_S
        while self._status(sid) in IN_RAY and time.monotonic() < deadline:
            self.jobs.stop(sid)
            time.sleep(STOP_EVERY_S)

    def adopt(self, waiting: dict[str, Any]) -> None:
        """After the queue restarted (Ray did not): take over a pre-started job still held in Ray;
        stop any other (its record is no longer the one to pre-start)."""
        jobs = [j for j in self.jobs.list_jobs() if (j.get("metadata") or {}).get(STANDBY_KEY)]
        for j in jobs:
            sid, status = j.get("submission_id"), str(j.get("status"))
            if status in TERMINAL or sid not in waiting:
                continue
            go = ((j.get("runtime_env") or {}).get("env_vars") or {}).get(STANDBY_GO_ENV)
            if self.sid is None and go:
                self.sid, self.submitted, self.go = sid, Future(), Path(go)
                self.submitted.set_result(True)
            else:
                self.pool.submit(self.jobs.stop, sid)

    def _status(self, sid: str) -> str:
        got = self.jobs.details(sid)
        return word((got or {}).get("status"), "?")

    def _forget(self, sid: str, timeout: float = 30.0) -> None:
        """Stop and delete what Ray has of ``sid``, so the id can be submitted again (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self._status(sid)
            if status in ("?", "LOST"):
                return  # Ray does not know it (or does not answer: the cold submit will say)
            if status in TERMINAL:
                self.jobs.delete(sid)
                return
            self.jobs.stop(sid)
            time.sleep(0.2)

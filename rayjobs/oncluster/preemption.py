"""Carrying out preemptions: stop a job at its next checkpoint for another, call it off, put the
stopped job back in its place in line (:mod:`rayjobs.oncluster.scheduler` decides which).

A victim's runner watches ``<run_dir>/stop-at-checkpoint.json``
(:mod:`rayjobs.oncluster.checkpointwatch`): the queue leaves the request there, with ``by``, and
the runner stops its job once the next checkpoint is saved (at most its ``preempt_wait_s``). A job
without checkpoints has nothing to wait for and is stopped at once. Once stopped, it goes back to
its old place in line (its order keys are kept) and resumes from its checkpoint as a new attempt,
after Ray's entry of it is deleted so its id can be submitted again.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

from rayjobs.contract.paths import TRACKER
from rayjobs.oncluster.checkpointwatch import ask_stop, withdraw_stop
from rayjobs.oncluster.headapi import JobsClient
from rayjobs.oncluster.queuestate import Running
from rayjobs.shared import stamp

#: A finished job stays in Ray's table at least this long: deleted while its supervisor actor is
#: still exiting, Ray writes the job back as a FAILED "Entrypoint not found." entry without metadata
#: (and a resubmitted id FAILS at once, "Job supervisor actor died").
MIN_AGE_S = 10.0


def log(msg: str) -> None:
    print(f"[rayjobs] {stamp()} {msg}", flush=True)  # the queue actor's log


class Preemptions:
    """The queue's hand in preemptions (its calls to Ray run in the pool)."""

    def __init__(self, jobs: JobsClient, pool: ThreadPoolExecutor,
                 note: Callable[[str, str], None] = lambda what, sid: None) -> None:
        self.jobs, self.pool, self.note = jobs, pool, note
        self.forgetting: dict[str, Future] = {}  #: preempted jobs whose Ray entry is being deleted
        self._seen_at = 0.0

    def ask(self, r: Running, by: str, now: float) -> dict[str, Any]:
        """Ask ``r``'s runner to stop it after its next checkpoint (at once if it saves none);
        the record's ``preempting`` for it."""
        r.preempting_for, r.preempt_asked = by, now
        run_dir, ckpt = r.rec.meta.run_dir, r.rec.meta.checkpoint_dir
        if run_dir and ckpt:
            ask_stop(Path(run_dir), r.id, r.req.preempt_wait_s, reason=f"preempted by {by}", by=by)
        else:
            self.stop_now(r)
        self.note("preempting", f"{r.id} for {by}")
        log(f"preempting {r.id} (priority {r.req.priority}) for {by}: stopping it at its next checkpoint "
            f"(at most {r.req.preempt_wait_s:g} s)")
        return {"by": by, "asked_at": now}

    def observe(self, state: Any, now: float, every_s: float = 1.0) -> None:
        """When each running preemptible job saved its last complete checkpoint (its tracker's mtime):
        what choosing it as a victim would cost (bounded: at most every ``every_s``)."""
        if now - self._seen_at < every_s:
            return
        self._seen_at = now
        for r in state.running.values():
            if not r.req.preemptible or not r.rec.meta.checkpoint_dir:
                continue
            try:
                r.checkpoint_at = (Path(r.rec.meta.checkpoint_dir) / TRACKER).stat().st_mtime
            except OSError:
                pass

    def stop_now(self, r: Running) -> None:
        """The queue stops ``r`` itself (no checkpoints to wait for, or its runner was late)."""
        r.preempt_forced = True
        self.pool.submit(self.jobs.stop, r.id)

    def call_off(self, r: Running, by: str) -> bool:
        """``by`` no longer waits: withdraw the request before the runner acts on it; True if it
        was still there (the runner trains on)."""
        r.preempting_for = ""
        withdrawn = bool(r.rec.meta.run_dir) and withdraw_stop(Path(r.rec.meta.run_dir), r.id, by)
        self.note("preemption called off", f"{r.id}: {by} no longer waits (withdrawn: {withdrawn})")
        log(f"preemption of {r.id} called off: {by} no longer waits")
        return withdrawn

    def forget_in_ray(self, job_id: str, ended_ms: Optional[int]) -> None:
        """Delete Ray's entry of a stopped preempted job (in the pool), so its id can be submitted again."""
        self.forgetting[job_id] = self.pool.submit(self._forget, job_id, ended_ms)

    def requeueing(self) -> set[str]:
        """The jobs whose Ray entry is still being deleted (they wait, held, meanwhile)."""
        for job_id in [i for i, f in self.forgetting.items() if f.done()]:
            del self.forgetting[job_id]
        return set(self.forgetting)

    def _forget(self, job_id: str, ended_ms: Optional[int], timeout: float = 90.0) -> None:
        """Not while the old run's job supervisor is still exiting, nor before Ray's monitor of the
        old run has noticed that it died: either writes the old run's end onto the new run."""
        deadline = time.monotonic() + timeout
        ended = float(ended_ms or time.time() * 1000) / 1000.0
        while time.monotonic() < deadline and (time.time() - ended < MIN_AGE_S or self.jobs.supervisor_alive(job_id)):
            time.sleep(0.2)
        while time.monotonic() < deadline:
            if self.jobs.delete(job_id):
                return
            time.sleep(0.2)

"""Handing admitted jobs to Ray, and watching them there: the queue's calls in flight, per job.

The queue's loop never blocks on the Jobs API: a submit (cold, or letting the pre-started job go:
:mod:`rayjobs.oncluster.standby`) and a poll of Ray's details run in the queue's thread pool, at
most one call per job at a time; :meth:`Admitter.collect` hands back what came in since.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional

from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import TERMINAL, word
from rayjobs.oncluster.headapi import LOST, JobsClient
from rayjobs.oncluster.jobrecord import submit_kwargs

#: Ray's details of every admitted job are asked for this often.
POLL_S = 0.5


@dataclass(frozen=True)
class Submitted:
    """A submit came back: ``error`` is Ray's one-line refusal ("" if Ray has the job); ``unwritten``:
    Ray was not asked, the job's admitted record could not be written (``error`` says why)."""

    id: str
    error: str = ""
    unwritten: bool = False


def durable(after: Optional[Future], rec: JobRecord) -> Optional[Submitted]:
    """(in the pool) Wait for ``rec``'s admitted record to be written (:mod:`rayjobs.oncluster.recordwriter`):
    None once it is, else the :class:`Submitted` that says Ray was not asked."""
    if after is None or after.result() is not None:
        return None
    return Submitted(rec.id, "the queue could not write its record (see the head's log)", unwritten=True)


@dataclass(frozen=True)
class Seen:
    """Ray's details of a job at a poll (``status`` LOST: Ray does not know it)."""

    id: str
    details: dict[str, Any]

    @property
    def status(self) -> str:
        return word(self.details.get("status"))

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL or self.status == LOST


class Admitter:
    """Submits admitted jobs and polls them, one call per job at a time."""

    def __init__(self, jobs: JobsClient, pool: ThreadPoolExecutor, code_dir: Callable[[str], Any],
                 standby: Any = None) -> None:
        self.jobs, self.pool, self.code_dir, self.standby = jobs, pool, code_dir, standby
        self.calls: dict[str, Future] = {}
        self._polled = 0.0

    def busy(self, job_id: str) -> bool:
        return job_id in self.calls

    def submit(self, rec: JobRecord, after: Optional[Future] = None) -> None:
        """Hand ``rec``'s job to Ray once ``after`` (its record's write) is done: the pre-started one
        is let go, any other is submitted cold."""
        taken = self.standby.take(rec, after) if self.standby is not None else None
        self.calls[rec.id] = taken or self.pool.submit(self.cold_submit, rec, after)

    def cold_submit(self, rec: JobRecord, after: Optional[Future] = None) -> Submitted:
        """(in the pool) Submit ``rec`` to Ray from its durable code snapshot, once ``after`` is done."""
        unwritten = durable(after, rec)
        if unwritten is not None:
            return unwritten
        try:
            self.jobs.submit(submit_kwargs(rec, self.code_dir(rec.code)))
            return Submitted(rec.id)
        except Exception as e:  # noqa: BLE001
            return Submitted(rec.id, " ".join(str(e).split())[:300] or type(e).__name__)

    def poll(self, ids: list[str], now: Optional[float] = None, *, force: bool = False) -> None:
        """Ask Ray about ``ids`` (those with no call in flight), at most every :data:`POLL_S` unless ``force``."""
        now = time.monotonic() if now is None else now
        if not force:
            if now - self._polled < POLL_S:
                return
            self._polled = now
        for job_id in ids:
            if job_id not in self.calls:
                self.calls[job_id] = self.pool.submit(self._details, job_id)

    def _details(self, job_id: str) -> Optional[Seen]:
        got = self.jobs.details(job_id)
        return Seen(job_id, got) if got is not None else None

    def collect(self) -> list[Any]:
        """What came back since the last call: :class:`Submitted` and :class:`Seen` (in no order)."""
        out = []
        for job_id, fut in list(self.calls.items()):
            if fut.done():
                del self.calls[job_id]
                got = fut.result()
                if isinstance(got, tuple):  # the pre-started job's "go" ("ok" | "error", message)
                    got = Submitted(job_id, "" if got[0] == "ok" else got[1])
                if got is not None:
                    out.append(got)
        return out

    def forget(self, job_id: str) -> None:
        """Drop what is in flight for a job the queue no longer watches (its result is ignored)."""
        self.calls.pop(job_id, None)

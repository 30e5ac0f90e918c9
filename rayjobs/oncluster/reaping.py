"""The queue's reaps: what an ended job left on the nodes is ended before its GPUs go to anyone.

Ray shows a trainer's GPUs free as soon as its Ray drivers are dead, while its process -- and an
orphaned vLLM engine, say -- may still hold their memory (:mod:`rayjobs.oncluster.reaper` ends them
and says what it had to end). So the queue reaps twice: *early*, as soon as a job's trainer has
left its GPUs (no retry to come), sparing what a live runner still runs; and *at the end*, once its
Ray job has ended, everything marked. Until the early reap (or, without one, the end's) has
returned, no job is admitted onto GPUs (:meth:`Reaping.gate`): which node's GPUs a placement group
freed is not known to the queue, so all GPU admissions wait.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional

#: A trainer that left its GPUs holds further GPU admissions until its job has ended and been reaped,
#: but no longer than this (a runner that hangs after its trainer exited). More than the head's stop
#: grace (RAY_JOB_STOP_WAIT_TIME_S=60): a stopped job's descendants deaf to SIGTERM are killed by Ray only then.
ENDING_MAX_S = 90.0

Reap = Callable[..., list[str]]


@dataclass(frozen=True)
class Reaped:
    """A reap at a job's end came back: its lines, and Ray's details of the job (if it ended)."""

    id: str
    outcome: str  #: how its Ray job ended: a status, or LOST
    lines: list[str]
    info: Optional[dict[str, Any]]
    freed_at: Optional[float] = None  #: (epoch s) when its GPUs went back to the queue: its first reap returned


def _safe(reap: Reap, job_id: str, **kw: Any) -> list[str]:
    try:
        return list(reap(job_id, **kw))
    except Exception as e:  # noqa: BLE001 (Ray refused the tasks: the job still finishes)
        return [f"reaping failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"]


def _timed(reap: Reap, job_id: str, **kw: Any) -> tuple[list[str], float]:
    """A reap's lines and when it returned (epoch s): from then on the gate lets its GPUs go."""
    lines = _safe(reap, job_id, **kw)
    return lines, time.time()


class Reaping:
    """Reaps in the queue's pool; which of them still hold the GPUs."""

    def __init__(self, reap: Reap, pool: ThreadPoolExecutor, details: Callable[[str], Optional[dict[str, Any]]],
                 enabled: bool = True, note: Callable[[str, str], None] = lambda what, sid: None) -> None:
        self.reap, self.pool, self.details, self.enabled, self.note = reap, pool, details, enabled, note
        self.early: dict[str, Future] = {}  #: at a trainer's exit
        self.since: dict[str, float] = {}  #: (monotonic) when its trainer was seen gone
        self.left_at: dict[str, float] = {}  #: the same, epoch s (a span ends by then + ENDING_MAX_S)
        self.final: dict[str, tuple[str, bool, Future]] = {}  #: at a job's end: (outcome, used GPUs, reap)

    def trainer_left(self, job_id: str) -> None:
        """Its trainer's drivers are all dead, no retry to come: reap now (sparing a live runner's tree)."""
        if job_id in self.since:
            return
        self.since[job_id], self.left_at[job_id] = time.monotonic(), time.time()
        if self.enabled:
            self.early[job_id] = self.pool.submit(_timed, self.reap, job_id, spare_live=True)

    def job_ended(self, job_id: str, outcome: str, used_gpus: bool) -> bool:
        """Its Ray job ended (``outcome``: a status, or LOST): reap everything marked. False when
        reaping is switched off (the caller finishes it at once)."""
        if not self.enabled:
            self._drop(job_id)
            return False
        self.final[job_id] = (outcome, used_gpus, self.pool.submit(self._at_end, job_id, outcome))
        return True

    def _at_end(self, job_id: str, outcome: str) -> tuple[list[str], float, Optional[dict[str, Any]]]:
        t = time.monotonic()
        lines, done = _timed(self.reap, job_id)
        self.note("reap took", f"{job_id}: {time.monotonic() - t:.3f} s")  # (the benchmark's breakdown)
        return lines, done, (self.details(job_id) if outcome != "LOST" else None)

    def collect(self) -> list[Reaped]:
        """The reaps at a job's end that came back, each with the early reap's lines first, and when
        its GPUs went back (the first of its reaps to return, or the gate's bound on an early one)."""
        out = []
        for job_id, (outcome, _, fut) in list(self.final.items()):
            if not fut.done():
                continue
            del self.final[job_id]
            lines, freed, info = fut.result()
            early: list[str] = []
            if job_id in self.early and self.early[job_id].done():
                early, early_at = self.early[job_id].result()
                freed = min(freed, early_at)
            if job_id in self.left_at:
                freed = min(freed, self.left_at[job_id] + ENDING_MAX_S)
            self._drop(job_id)
            out.append(Reaped(job_id, outcome, early + [ln for ln in lines if ln not in early], info, freed))
        return out

    def _drop(self, job_id: str) -> None:
        self.early.pop(job_id, None)
        self.since.pop(job_id, None)
        self.left_at.pop(job_id, None)

    def gate(self) -> str:
        """Why GPU admissions must wait now ("" if they may go): a job that used GPUs has ended, or
        its trainer has, and what it left on the nodes is not reaped yet."""
        if not self.enabled:
            return ""
        now = time.monotonic()
        for job_id, (_, gpus, _) in self.final.items():
            if gpus and not self._early_done(job_id):
                return f"cleaning the GPUs {job_id} used (its leftovers are being ended)"
        for job_id, since in self.since.items():
            if job_id not in self.final and not self._early_done(job_id) and now - since < ENDING_MAX_S:
                return f"cleaning the GPUs {job_id}'s trainer left (its leftovers are being ended)"
        return ""

    def _early_done(self, job_id: str) -> bool:
        f = self.early.get(job_id)
        return f is not None and f.done()

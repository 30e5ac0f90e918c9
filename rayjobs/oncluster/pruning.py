"""Keeping Ray's job table and the store small on a cluster that runs for weeks.

Ray's job table and dashboard slow down as finished jobs pile up (ray-project/ray #35202, #55010):
the queue deletes a finished job from Ray's table ``RAYJOBS_RETENTION_S`` (default 6 h) after it
ended -- its record, and so every view of it, stays -- and drops code snapshots that no waiting,
running or recently finished job names (``RAYJOBS_CODE_RETENTION_S``, 7 days: a rerun needs one) and
that were not uploaded or asked for in the last hour (a submit's enqueue comes after its upload).
"""

from __future__ import annotations

import os
import time
from typing import Iterable

from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import TERMINAL, word
from rayjobs.oncluster.headapi import JobsClient
from rayjobs.oncluster.preemption import MIN_AGE_S
from rayjobs.oncluster.store import QueueStore
from rayjobs.shared import ROLE_KEY

RETENTION_ENV = "RAYJOBS_RETENTION_S"
DEFAULT_RETENTION_S = 6 * 3600.0
CODE_RETENTION_ENV = "RAYJOBS_CODE_RETENTION_S"
EVERY_ENV = "RAYJOBS_PRUNE_EVERY_S"  #: how often the queue prunes (default 60 s)


def retention_s() -> float:
    return max(float(os.environ.get(RETENTION_ENV, DEFAULT_RETENTION_S)), MIN_AGE_S)


def prune(store: QueueStore, jobs: JobsClient, records: Iterable[JobRecord]) -> list[str]:
    """(in the pool) Delete from Ray's table the finished jobs older than the retention, and
    rayjobs' own small jobs (the queue's starter) once they ended; drop unused code snapshots.
    The ids of the records whose jobs left Ray's table (the caller marks them ``pruned``)."""
    now = time.time()
    records = list(records)
    code_cutoff = now - float(os.environ.get(CODE_RETENTION_ENV, 7 * 86400))
    store.drop_code({r.code for r in records if not r.done or float(r.finished_at or 0) > code_cutoff})
    cutoff = now - retention_s()
    gone = []
    for rec in records:
        if rec.done and not rec.pruned and float(rec.finished_at or now) < cutoff:
            jobs.delete(rec.id)
            gone.append(rec.id)
    pruned = {r.id for r in records if r.pruned} | set(gone)
    for j in jobs.list_jobs():
        sid = j.get("submission_id")
        ended = (word(j.get("status")) in TERMINAL and sid
                 and float(j.get("end_time") or 0) / 1000.0 < now - MIN_AGE_S)
        # rayjobs' own small jobs, and the entry Ray writes back for a job deleted too soon
        if ended and ((j.get("metadata") or {}).get(ROLE_KEY) or (sid in pruned and not j.get("metadata"))):
            jobs.delete(sid)
    return gone

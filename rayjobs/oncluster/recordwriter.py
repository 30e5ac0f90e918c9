"""The queue's record writes, off the event loop the door shares: one thread of their own, in the
order the loop made the changes.

A change is the loop's at once (its memory is what the door answers from); the file follows in
this thread. Whatever must come after the file -- Ray asked to run an admitted job, a stop request
answered -- waits for that write's future, so the order "durable, then it takes effect" holds as it
did when the loop wrote the file itself. One thread keeps a record's versions in order (the newest
is the last written); a write that fails (disk full, the storage root gone) is said once and tried
again, with the record's newest version, at the next :meth:`RecordWriter.retry` (each tick).
A crash loses at most the writes still queued here: the store then holds an earlier state, as if
the head had died a moment sooner (:meth:`rayjobs.oncluster.queueservice.QueueService.recover`).
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Optional

from rayjobs.contract.record import JobRecord


class RecordWriter:
    """Writes records through ``store`` (``put`` stamps; ``write`` writes as given) in one thread.

    Args:
        store: the queue's :class:`~rayjobs.oncluster.store.QueueStore` (or a fake with
            ``stamp(rec)`` and ``write(rec)``).
    """

    def __init__(self, store: object) -> None:
        self.store = store
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rayjobs-store")
        self.failed: dict[str, str] = {}  #: ids whose last write failed, and why (said once in the head's log)
        self.pending: dict[str, Future] = {}  #: each id's newest write not known to be done
        self._lock = threading.Lock()

    def put(self, rec: JobRecord) -> tuple[JobRecord, Future]:
        """The record as it will be written (stamped now, on the caller's thread) and the future of
        its write (its result: the record; never raises -- a failure is kept in :attr:`failed`)."""
        rec = self.store.stamp(rec)
        return rec, self._submit(rec)

    def _submit(self, rec: JobRecord) -> Future:
        with self._lock:
            self.pending[rec.id] = fut = self.pool.submit(self._write, rec)
        fut.add_done_callback(lambda f, i=rec.id: self._done(i, f))
        return fut

    def _write(self, rec: JobRecord) -> Optional[JobRecord]:
        try:
            self.store.write(rec)
        except OSError as e:
            with self._lock:
                first = rec.id not in self.failed
                self.failed[rec.id] = e.strerror or str(e)
            if first:  # once per record until it is written: a full disk must not flood the log
                print(f"[rayjobs] could not write the record of {rec.id} ({e.strerror or e}); "
                      f"it is tried again", file=sys.stderr, flush=True)
            return None
        with self._lock:
            self.failed.pop(rec.id, None)
        return rec

    def _done(self, job_id: str, fut: Future) -> None:
        with self._lock:
            if self.pending.get(job_id) is fut:
                del self.pending[job_id]

    def retry(self, newest: Callable[[str], Optional[JobRecord]]) -> None:
        """Write again each record whose last write failed, in its newest version (``newest(id)``)."""
        with self._lock:
            ids = [i for i in self.failed if i not in self.pending]
        for job_id in ids:
            rec = newest(job_id)
            if rec is not None:
                self._submit(rec)

    def barrier(self) -> Future:
        """A future done once every write asked before it is done (the thread keeps their order)."""
        return self.pool.submit(lambda: None)

    def ok(self, ids: Iterable[str]) -> bool:
        """Were the last writes done of ``ids`` written (none of them failed)?"""
        with self._lock:
            return not any(i in self.failed for i in ids)

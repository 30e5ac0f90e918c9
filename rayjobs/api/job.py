"""The :class:`Job` handle: one submitted job (a sweep point is one too), by its submission id."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from rayjobs.contract.row import JobRow
from rayjobs.contract.status import NOT_STARTED, TERMINAL
from rayjobs.errors import NoSuchJob

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def connect(address: Optional[str], *, start: bool = True) -> "Dashboard":
    """A client of the cluster at ``address`` (else the settings' precedence), reachable. ``start``:
    start the embedded local head if it is the target and not running (saying so); a read passes
    False and gets :class:`rayjobs.client.connection.LocalHeadDown` (a ``ClusterUnreachable``)."""
    from rayjobs.client.connection import connect as _connect

    return _connect(address, start=start)


class Job:
    """One submitted job.

    Args:
        job_id: the full submission id (see :meth:`find` for a prefix).
        address: the cluster's dashboard; None for the settings' precedence (README, "Address").
        dashboard: an open client to reuse (then ``address`` is ignored).
    """

    def __init__(self, job_id: str, *, address: Optional[str] = None, dashboard: Optional["Dashboard"] = None) -> None:
        self.job_id = job_id
        self._address = address
        self._d = dashboard

    def __repr__(self) -> str:
        return f"Job({self.job_id!r})"

    @classmethod
    def find(cls, prefix: str, *, address: Optional[str] = None, dashboard: Optional["Dashboard"] = None) -> "Job":
        """The job whose id is ``prefix`` or starts with it: in the queue (waiting, running or
        finished, pruned from Ray's table too) or in Ray.

        Raises:
            NoSuchJob: no job on the cluster matches (the closest ids are named).
            JobNotFound: several match.
            ClusterUnreachable: no cluster answers (a stopped embedded head is not started: a read).
        """
        from rayjobs.client.dashboard import resolve_prefix

        d = dashboard or connect(address, start=False)
        if d.queue.view(prefix) is not None:  # a whole id: one GET
            return cls(prefix, dashboard=d)
        from rayjobs.views import queuestatus

        return cls(resolve_prefix(prefix, (j.submission_id for j in queuestatus.all_jobs(d))), dashboard=d)

    @property
    def dashboard(self) -> "Dashboard":
        """The client of this job's cluster (connected on first use; reads never start a stopped
        embedded head: :class:`rayjobs.client.connection.LocalHeadDown`)."""
        if self._d is None:
            self._d = connect(self._address, start=False)
        return self._d

    def row(self, *, progress: bool = True) -> JobRow:
        """What ``rayjobs status --json`` prints: status, queue position, progress, metrics, W&B run.

        The queue's word on a job it knows (waiting, running, finished -- also after Ray pruned
        it); Ray's for a job the queue does not know; the local record's for a job neither knows
        (its head restarted on an empty storage root, or it ran elsewhere), ``status`` UNKNOWN and
        ``source`` "record". With ``progress``, an ended job's final copy is kept in the local record.
        """
        from rayjobs.api import keeping
        from rayjobs.views import jobrows, queuestatus

        d = self.dashboard
        job = queuestatus.job(d, self.job_id)
        if job is None:
            return recorded_row(self.job_id, d.target.key)
        row = jobrows.base_row(job)
        if progress:
            row = jobrows.add_progress(row, job, d, lines=2000, head_scan=True)
        if row["attempt"] is None:
            row["attempt"] = 0 if row["status"] in NOT_STARTED else 1
        if progress:
            keeping.keep_seen_row(d, row, job)
        return row

    def status(self) -> str:
        """``PENDING QUEUED RUNNING SUCCEEDED FAILED STOPPED`` (or UNKNOWN: only in the local record)."""
        return str(self.row(progress=False)["status"])

    def done(self) -> bool:
        """Has the job ended (SUCCEEDED, FAILED or STOPPED)?"""
        return self.status() in TERMINAL

    def wait(self, *, timeout: Optional[float] = None, poll: float = 2.0) -> str:
        """Block until the job ends (queued time included); its final status.

        Raises:
            TimeoutError: still not ended after ``timeout`` seconds (the job goes on).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status in TERMINAL:
                self.row()  # keeps its final copy in the local record (once)
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.job_id} is still {status} after {timeout:g} s")
            time.sleep(poll)

    def iter_logs(self, *, tail: Optional[int] = None, clean: bool = True,
                  say: Optional[Callable[[str], None]] = None) -> Iterator[str]:
        """The log as it is now (``tail``: only the last N lines), in chunks; ``clean``: no ANSI codes.

        A job pruned from Ray's table is read from where the queue recorded its log; an ended job
        whose log Ray no longer serves (the head's Ray restarted since), from what was kept of it
        (its whole log file where readable here, else the end its runner kept on the storage root,
        else the local record's copy; ``say`` is told which, in one line); a waiting job has none yet.
        """
        from rayjobs.views import joblog

        return joblog.iter_log(self.dashboard, self.job_id, tail=tail, clean=clean, say=say)

    def logs(self, *, tail: Optional[int] = None, clean: bool = True) -> str:
        """The log as one string (see :meth:`iter_logs`)."""
        return "".join(self.iter_logs(tail=tail, clean=clean))

    def steps(self, *, tail: Optional[int] = None) -> Iterator[dict[str, Any]]:
        """The JSON step records of the log as it is now (what ``rayjobs logs --json`` prints): one
        dict per verl step line (``event`` "step", verl's keys flat beside ``job``, ``run``,
        ``attempt``, ``step``, ``total_steps``, ``ts``) and per event of rayjobs' runner; an ended
        job's last one is ``job_ended`` (``status``, ``cause``). Shape: docs/design.md, "JSON step logs".

        Args:
            tail: only the records from the N-th last step on (the whole log is still read).

        Raises:
            NoSuchJob: neither the cluster nor its queue knows the job.
        """
        from rayjobs.views import steplog

        return steplog.log_records(self.dashboard, self.job_id, tail=tail)

    def tail(self, *, live: Optional[bool] = None, lines: Optional[int] = -1, as_json: bool = False) -> int:
        """Follow the log with the progress view until the job ends (what ``rayjobs tail`` does).

        Args:
            live: the rich panel (None: when stdout is a terminal). lines: of the log written
                before attaching, only the last N lines (-1: all, or 1000 on a terminal).
            as_json: print the JSON step records instead of the log (``rayjobs tail --json``);
                ``lines`` N then means the records from the N-th last step on.

        Returns:
            0 SUCCEEDED, 1 FAILED, 3 STOPPED, 130 if interrupted (Ctrl-C: the job goes on).
        """
        from rayjobs.api import keeping
        from rayjobs.views import jobtail

        code = jobtail.tail(self.dashboard, self.job_id, live=live, lines=lines, as_json=as_json)
        if code in (0, 1, 3):  # it ended: its final copy in the local record (once)
            keeping.keep_ended(self.dashboard, self.job_id)
        return code

    def stop(self, *, wait: float = 90.0, at_checkpoint: bool = False, timeout: float = 3600.0) -> str:
        """Stop the job (SIGTERM, the head's grace period, then Ray's kill); its status after at most
        ``wait`` seconds. ``at_checkpoint``: once its next checkpoint is saved (at most ``timeout`` s)."""
        from rayjobs.api.stopping import stop_jobs

        self._d = self._d or connect(self._address)  # a stop may start the embedded head (it says so)
        return stop_jobs([self.job_id], wait=wait, dashboard=self._d, at_checkpoint=at_checkpoint,
                         timeout=timeout)[self.job_id]


def recorded_row(job_id: str, cluster: str, *, gone: bool = False) -> JobRow:
    """The local record's row for an id the cluster does not know (its final copy, if kept);
    ``gone``: for any id while its cluster cannot be reached (the final copy, else what was last
    seen of it; ``source`` "local").

    Raises:
        NoSuchJob: no record matches. JobNotFound: several do.
    """
    from rayjobs.errors import JobNotFound
    from rayjobs import ledger
    from rayjobs.views import localrows

    hits = ledger.lookup(job_id)
    if len(hits) == 1:
        e = hits[0]
        if gone:
            where = str(e.get("address") or "the embedded local cluster")
            return localrows.local_row(e, ledger.seen(str(e.get("cluster") or e.get("address"))), where)
        return localrows.kept_row(e) or localrows.record_row(e, cluster)
    if hits:
        raise JobNotFound(f"{job_id!r} matches {len(hits)} recorded jobs ({', '.join(h['id'] for h in hits[:4])}...); "
                          f"give more of the id")
    raise NoSuchJob(f"no job matches {job_id!r} on the cluster or in the local record; `rayjobs list` shows the ids")

"""Many jobs at once: ``rayjobs list`` (Ray's jobs, the queue's, the local record's)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from rayjobs.api.job import connect
from rayjobs.contract.row import JobRow
from rayjobs.contract.wire import JobView
from rayjobs.errors import ClusterUnreachable, ConfigError, RayjobsError

#: ``list`` reads the progress (the log's end) of this many of the newest jobs that run or ran in Ray.
PROGRESS_ROWS = 100


def list_jobs(*, sweep: Optional[str] = None, statuses: Sequence[str] = (), experiment: Optional[str] = None,
              include_all: bool = False, address: Optional[str] = None, keep: bool = False,
              say: Any = None) -> list[JobRow]:
    """Rows of ``rayjobs list --json`` (:class:`rayjobs.contract.row.JobRow`) (oldest first): the queue's jobs (waiting, running, finished),
    the Ray jobs it does not know (``include_all``), and the jobs of the local record the cluster forgot.

    An ended job's final state, log tail and metrics are kept in the local record as the list
    reads them (``$RAYJOBS_HOME/runs/<id>/final.json``, once per job); ``keep``: of every ended
    job now, metrics read from the logs where the run dirs are not readable here (``rayjobs down``
    does this before the teardown). When the cluster cannot be reached (a stopped embedded head is
    not started), the rows are the local record's (``source`` "local"; ``final`` false for a job
    never seen ended) and ``say`` is told.

    Raises:
        ConfigError: an unknown status or experiment. ClusterUnreachable: with ``keep``, no cluster.
    """
    from rayjobs.api import keeping
    from rayjobs.views import jobrows, localrows, queuestatus

    wanted = jobrows.parse_statuses(statuses)
    try:
        d = connect(address, start=False)  # a read: a stopped embedded head stays stopped
    except ClusterUnreachable as e:
        if keep:
            raise
        rows = localrows.unreachable_rows(address, sweep, e, say)
        rows = [r for r in rows if r["experiment"] == experiment] if experiment else rows
        return [r for r in rows if r["status"] in wanted] if wanted else rows
    jobs = queuestatus.all_jobs(d)
    records = localrows.missing_records((j.submission_id for j in jobs), d.target.key, sweep)
    try:
        chosen = jobrows.select(jobs, sweep=sweep, experiment=experiment, include_all=include_all)
    except RayjobsError:
        if not (sweep and records):
            raise
        chosen = []  # a sweep the cluster has forgotten: its rows come from the local record
    if experiment:
        records = [r for r in records if r["experiment"] == experiment]
        if not chosen and not records:
            check_experiment(experiment, jobs)
    tails: dict[str, bytes] = {}
    limit = len(chosen) if keep else PROGRESS_ROWS
    pairs = jobrows.rows(chosen, d, limit_progress=limit, tails=tails)
    keeping.keep_listed(pairs, d, tails, limit, from_log=keep)
    rows = [r for r, _ in pairs] + records
    return [r for r in rows if r["status"] in wanted] if wanted else rows


def all_jobs(d: Any) -> list[JobView]:
    """Every job of the cluster: the queue's, then the Ray jobs it does not know
    (:func:`rayjobs.views.queuestatus.all_jobs`)."""
    from rayjobs.views import queuestatus

    return queuestatus.all_jobs(d)


def check_experiment(name: str, all_jobs: Sequence[JobView]) -> None:
    """No job of ``name``: fine if it is a known experiment, else an error with the closest names."""
    from rayjobs.errors import did_you_mean

    names = {j.meta.experiment for j in all_jobs} - {""}
    try:
        from rayjobs.config import compose

        names |= set(compose.experiments())
    except RayjobsError:
        pass
    if name not in names:
        raise ConfigError(f"unknown experiment {name!r}{did_you_mean(name, names)}")

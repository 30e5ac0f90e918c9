"""Curves: ``rayjobs plot`` and ``rayjobs compare`` read the same histories the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from rayjobs.api.job import connect, recorded_row
from rayjobs.errors import ConfigError

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.contract.row import JobRow
    from rayjobs.contract.wire import JobView


def _keeper(d: Any) -> Callable[[Sequence[Any], list], None]:
    """What plot reads of an ended job goes into its final copy in the local record, once."""
    from rayjobs.api import keeping

    return lambda jobs, hists: keeping.keep_histories(d, jobs, hists)


def plot_jobs(job_ids: Sequence[str] = (), *, sweep: Optional[str] = None, metrics: Sequence[str] = (),
              val: bool = True, output: str = "curves.png", address: Optional[str] = None,
              say: Any = None) -> dict[str, Any]:
    """Draw one PNG (a curve per job over steps, plus the val-core metrics); the plotted data.

    What plot reads of an ended job (its metrics files or its log's step lines) is kept in the
    local record; while the cluster cannot be reached, the jobs are drawn from there (``source``
    "local"; ``say`` is told).
    """
    from rayjobs.views import plot

    if not job_ids and not sweep:
        raise ConfigError("name the jobs to plot: rayjobs plot ID... or rayjobs plot --sweep S")
    if not output.lower().endswith(".png"):
        raise ConfigError(f"-o {output}: give a .png file name")
    d, chosen, _, _ = _curve_jobs(job_ids, sweep, address, say)
    data = plot.collect(d, chosen, list(metrics) or None, val=val, read=_keeper(d))
    plot.render(data, output, title=f"sweep {sweep}" if sweep else None)
    return data


def compare_sweep(sweep: str, *, metrics: Sequence[str] = (), mode: str = "auto", address: Optional[str] = None,
                  say: Any = None) -> list[dict[str, Any]]:
    """A sweep at a glance: one row per point, its curves read exactly as :func:`plot_jobs` reads them.

    Args:
        sweep: the sweep id (or a unique prefix of it).
        metrics: the metrics to show (the first ranks the points); default critic/score/mean and
            the val-core reward the sweep logged (``val-core/<data source>/reward/mean@N``), which
            then ranks them (the score does without one).
        mode: ``auto`` (lowest is best for a metric named ``...loss...``, else highest), ``max``, ``min``.
        address: the cluster's dashboard (else the settings' precedence).
        say: where one-line notes go (the cluster unreachable; default: nowhere).

    Returns:
        One dict per point, in sweep order: ``id``, ``jobs`` (with the ones ``rayjobs resume``
        continued), ``point`` (the swept keys' values), ``status``/``status_text``, ``source``
        ("cluster" or "local"), ``step``, ``total_steps``, ``checkpoint_step``, ``checkpoint_dir``,
        ``checkpoint`` (its ``global_step_N`` dir), ``metrics`` ({name: {last, last_step, best,
        best_step, mode}} or None where nothing was logged), ``ranked_by``, ``best`` (True for the
        best point, every one of a tie), ``eval`` (the point's evaluation job, metadata
        ``eval_of=<id>``: {id, status, metric, value, step}, else None).

    Raises:
        JobNotFound: no such sweep (the closest ids named). ConfigError: a metric no point logged, a bad mode.
    """
    from rayjobs.views import compare, jobrows, plot

    compare.metric_mode("", mode)  # a bad mode fails before anything is read
    d, chosen, jobs, records = _curve_jobs((), sweep, address, say)
    rows = {str(r["id"]): r for r, _ in jobrows.rows([j for j in chosen if not j.from_record], d)} \
        if d is not None else {}
    rows.update(records)  # the points the cluster does not know: the local record's rows
    compare.fill_totals(d, [rows[j.submission_id] for j in chosen], chosen)
    data = plot.collect(d, chosen, list(metrics) or None, val=True, read=_keeper(d))  # what `rayjobs plot --sweep S` reads
    _, rank = compare.pick_metrics(data["metrics"], metrics)
    ids = {j.submission_id for j in chosen}
    evals = compare.eval_values(d, compare.eval_jobs(jobs, ids), rank)
    return compare.build(chosen, rows, data, metrics, mode, evals)


def _curve_jobs(job_ids: Sequence[str], sweep: Optional[str], address: Optional[str],
                say: Any) -> tuple[Optional["Dashboard"], list["JobView"], list["JobView"], dict[str, "JobRow"]]:
    """The jobs plot and compare read, the same way for both: (the client, None while the cluster
    cannot be reached; the jobs named and those of ``sweep`` in order; every job listed; the local
    record's rows of the chosen jobs the cluster does not know, by id). A sweep's points the cluster
    forgot (a head restarted on an empty storage root) come from the local record, as in ``list``."""
    from rayjobs.client.dashboard import resolve_prefix
    from rayjobs.errors import ClusterUnreachable
    from rayjobs.views import jobrows, localrows, queuestatus
    from rayjobs.views.localrows import head_down_line

    try:
        d: Optional["Dashboard"] = connect(address, start=False)  # a read
    except ClusterUnreachable as e:
        d = None
        sweep = jobrows.resolve_sweep(sweep, []) if sweep else None  # against the local record
        rows = localrows.unreachable_rows(address, sweep, e, say) if sweep else []
        if say and not sweep:
            what = "plotting from the metrics kept in the local record"
            say(head_down_line(e, what) or f"cluster unreachable: {what}. {e}")
        rows += [recorded_row(j, "", gone=True) for j in job_ids]
        jobs = localrows.as_local_jobs(rows)
    else:
        jobs = queuestatus.all_jobs(d)
        rows = []
        if sweep:
            sweep = jobrows.resolve_sweep(sweep, jobs)
            rows = localrows.missing_records((j.submission_id for j in jobs), d.target.key, sweep)
            jobs += localrows.as_local_jobs(rows)
    by_id = {j.submission_id: j for j in jobs}
    chosen = [by_id[resolve_prefix(j, by_id)] for j in job_ids]
    chosen += sorted((j for j in jobs if j.meta.sweep == sweep), key=jobrows.order) if sweep else []
    chosen = list({j.submission_id: j for j in chosen}.values())
    return d, chosen, jobs, {str(r["id"]): r for r in rows}

"""The local record's copies, kept as the views read the cluster: what ``list`` and ``status`` showed of
each job, and the final state, log tail and metrics of each ended job (once), so ``list``,
``status``, ``plot`` and ``compare`` still work once the cluster is gone (:mod:`rayjobs.ledger`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Optional, Sequence

from rayjobs.contract.row import JobRow
from rayjobs.contract.status import TERMINAL, Status
from rayjobs.contract.wire import JobView
from rayjobs.views import logparse, metricfiles
from rayjobs.views.jobrows import add_progress, base_row, scan_head

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def remember(dash: Any, rows: list[JobRow]) -> None:
    """Remember what was shown of each row (what ``list`` says while the cluster is gone)."""
    from rayjobs import ledger

    try:
        ledger.remember_seen(dash.target.key, rows)
    except OSError:
        pass  # a read-only home: the rows are still shown


def keep_rows(pairs: list[tuple[JobRow, JobView]], dash: Any, tails: Optional[dict[str, bytes]] = None,
              from_log: bool = False) -> int:
    """Keep a final copy of each ended job of ``pairs`` (row, job) not kept yet (8 at a time);
    ``from_log``: read the metrics from the log where the run dir is not readable. How many kept."""
    from rayjobs import ledger

    ended = [(r, j) for r, j in pairs if r.get("status") in TERMINAL]
    kept = {str(r["id"]) for r, _ in ended if ledger.is_kept(str(r["id"]))}
    todo = [(r, j) for r, j in ended if str(r["id"]) not in kept]
    if from_log:  # copies kept without metrics (a remote run dir): their curves from the logs, once
        todo += [(r, j) for r, j in ended if str(r["id"]) in kept and not (ledger.kept(str(r["id"])) or {}).get("metrics_from")]
    if not todo:
        return 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        return sum(pool.map(lambda rj: keep_job(dash, rj[1], rj[0], (tails or {}).get(str(rj[0]["id"])),
                                                from_log=from_log), todo))


def keep_job(dash: Any, job: JobView, row: Optional[JobRow] = None, tail: Optional[bytes] = None, *,
             from_log: bool = False, history: Optional[dict[int, dict[str, float]]] = None) -> bool:
    """Keep the final copy of one ended job (once): row, log tail, metrics; for a copy kept without
    metrics, those (``from_log``, or the ``history`` plot read). False if nothing was written: kept
    before, still running, or the disk refused it (a view never fails for its copy)."""
    from rayjobs import ledger

    jid = job.submission_id
    if not jid:  # a plain Ray driver has no submission id: nothing to keep it under (runs/ itself)
        return False
    try:
        if ledger.is_kept(jid):  # only the metrics of a copy kept without them may still come
            if (not from_log and history is None) or (ledger.kept(jid) or {}).get("metrics_from"):
                return False
            metrics, src = _metrics_of(dash, job, history, from_log)
            return metrics is not None and ledger.keep_metrics(jid, metrics, str(src))
        if row is None:
            t: dict[str, bytes] = {}
            row = add_progress(base_row(job), job, dash, lines=ledger.TAIL_LINES, tails=t)
            tail = t.get(jid)
        if row.get("status") not in TERMINAL:
            return False
        tail = tail if tail is not None else _fetch_tail(dash, job)
        if from_log and row.get("total_steps") is None and job.driver_node_id and not job.from_queue:
            _scan_total(dash, job, row)  # list reads only the log's end; the copy is for good
        if tail is not None and row.get("status") == Status.FAILED and not row.get("error"):
            row["error"] = logparse.failure_line(logparse.clean_block(tail.decode("utf-8", "replace")))
        metrics, src = _metrics_of(dash, job, history, from_log)
        final = dict(row, queue_position=None, attempt=row.get("attempt") or 1)
        return ledger.keep_final(jid, final, log_tail=tail, metrics=metrics, metrics_from=src)
    except OSError:
        return False


def _scan_total(dash: Any, job: JobView, row: JobRow) -> None:
    """Total steps and W&B run from the log's first MB (they are printed once, at the start)."""
    p = logparse.Progress()
    try:
        scan_head(dash, str(row["id"]), str(job.driver_node_id), p, limit=1 << 20)
    except Exception:  # noqa: BLE001  (the copy is kept without them)
        return
    row["total_steps"] = row.get("total_steps") or p.total
    row["wandb_url"] = row.get("wandb_url") or p.wandb_url


def keep_seen_row(dash: "Dashboard", row: JobRow, job: JobView) -> None:
    """``rayjobs status``: remember the row and, for an ended job not kept yet, keep its final copy
    (one more read of its log's end, once per job)."""
    from rayjobs import ledger

    if row.get("source") is not None:
        return
    remember(dash, [row])
    if row.get("status") in TERMINAL and not ledger.is_kept(str(row["id"])):
        keep_job(dash, job, row)


def keep_ended(dash: "Dashboard", job_id: str) -> None:
    """Keep the final copy of an ended job (once), read now (the end of a ``tail``)."""
    from rayjobs.errors import RayjobsError
    from rayjobs.views import queuestatus

    try:
        job = queuestatus.job(dash, job_id)
    except RayjobsError:
        return
    if job is not None:
        keep_job(dash, job)


def keep_listed(pairs: list[tuple[JobRow, JobView]], dash: "Dashboard", tails: dict[str, bytes],
                limit: int, from_log: bool = False) -> None:
    """``rayjobs list``: remember every row shown, and keep a final copy of each ended job among
    the newest ``limit`` (its log tail was just read)."""
    window = pairs[-limit:]
    keep_rows([(r, j) for r, j in window if r["status"] in TERMINAL], dash, tails, from_log=from_log)
    remember(dash, [r for r, _ in pairs])


def _fetch_tail(dash: Any, job: JobView) -> Optional[bytes]:
    """The end of an ended job's driver log: from Ray, or by its file name once Ray pruned it, or --
    Ray no longer serves it (the head's Ray restarted) -- the end its runner kept on the storage root."""
    from rayjobs import ledger
    from rayjobs.views import joblog

    node, jid = job.driver_node_id, job.submission_id
    got = None
    if node and dash is not None:
        try:
            if job.from_queue:
                got = dash.node_file(node, f"job-driver-{jid}.log", ledger.TAIL_LINES)
            else:
                got = dash.log_tail(jid, node, ledger.TAIL_LINES, max_bytes=8 << 20)
        except Exception:  # noqa: BLE001  (a dead node, a restarting dashboard: keep the row without it)
            got = None
    if got is None and job.from_queue:
        kept = joblog.kept_log(job, whole=False)
        got = kept.text.encode() if kept is not None and kept.source == "storage" else None
    return got


def history_jsonl(history: dict[int, dict[str, float]]) -> bytes:
    """A history as verl's file logger writes it (one ``{"step", "data"}`` per line)."""
    import json

    return b"".join(json.dumps({"step": s, "data": d}).encode() + b"\n" for s, d in sorted(history.items()))


def _metrics_of(dash: Any, job: JobView, history: Optional[dict[int, dict[str, float]]],
                from_log: bool) -> tuple[Optional[list[bytes]], Optional[str]]:
    """(per-attempt JSONL bodies, where from): the run dir's files if readable here, else the
    history given, else (``from_log``) the log's step lines; (None, None): not read."""
    bodies = []
    for f in metricfiles.jsonl_files(job.meta.run_dir or None):
        try:
            bodies.append(f.read_bytes())
        except OSError:
            continue
    if any(bodies):
        return bodies, "jsonl"
    if history is None and from_log and dash is not None:
        try:
            history = metricfiles.history_from_log(dash, job)
        except Exception:  # noqa: BLE001  (the log went away meanwhile: metrics stay unkept)
            history = None
    if history is not None:
        return ([history_jsonl(history)] if history else []), "log"
    return (bodies, "jsonl") if bodies else (None, None)




def keep_histories(dash: Any, jobs: Sequence[JobView], hists: Sequence[tuple[dict[int, dict[str, float]], str]]) -> None:
    """What plot just read of an ended job goes into its final copy, so it is read once (the log
    of a remote cluster's job, streamed here anyway, is the only place its curve is)."""
    from rayjobs import ledger

    for job, (h, src) in zip(jobs, hists):
        if job.from_record or job.status not in TERMINAL or src == "local":
            continue
        jid = job.submission_id
        if src == "log" or not ledger.is_kept(jid):
            keep_job(dash, job, history=h if src == "log" else None)

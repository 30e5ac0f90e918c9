"""``rayjobs compare``: a sweep at a glance, one row per point.

The curves come from :func:`rayjobs.views.plot.collect`, the very call ``rayjobs plot`` makes on the
same jobs (``rayjobs.api`` picks them for both), so the two agree by construction: this module only
reduces each curve to its last and best value and lays the points side by side with what the
rows of ``rayjobs list`` say of them (status, step, last checkpoint) and what differs between them
(the swept values). Best is the highest value, or the lowest for a metric whose name says ``loss``
(``mode``); the best point is the one with the best *best* value of the ranking metric (all of
them on a tie; never a point that logged nothing of it). A job whose metadata says ``eval_of=<point
id>`` (an evaluation of that point's checkpoint) gives the point its ``eval`` value.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

from rayjobs.contract import ranking
from rayjobs.contract.meta import JobMeta
from rayjobs.contract.ranking import mark_best, swept
from rayjobs.contract.ranking import last_best as summary
from rayjobs.errors import ConfigError
from rayjobs.shared import TERMINAL
from rayjobs.views import jobrows, plot
from rayjobs.contract.row import JobRow
from rayjobs.contract.wire import JobView

DEFAULT_METRIC = plot.DEFAULT_METRIC
MODES = ("auto", "max", "min")


def metric_mode(name: str, mode: str = "auto") -> str:
    """``max`` or ``min`` for ``name``: ``mode`` itself, or (``auto``) min for a loss, else max."""
    if mode not in MODES:
        raise ConfigError(f"mode {mode!r}: one of {', '.join(MODES)}")
    return mode if mode != "auto" else ranking.metric_mode(name)


def val_metrics(names: Sequence[str]) -> list[str]:
    """The val-core reward(s) among ``names``: verl's ``val-core/<data source>/<var>/mean@N``, one
    per data source (``maj@N``/``best@N`` are the same samples voted or cherry-picked); every
    ``val-core/*`` name if none has that form."""
    core = [m for m in names if m.startswith("val-core/")]
    return [m for m in core if m.rsplit("/", 1)[-1].startswith("mean@")] or core


def pick_metrics(logged: Sequence[str], wanted: Sequence[str]) -> tuple[list[str], str]:
    """(the metrics shown, the one that ranks the points). ``wanted`` (``--metric``): those, ranked
    by the first. Else critic/score/mean and the val-core reward(s) the sweep logged, ranked by the
    val-core reward (held-out data: the number to choose a point by) or, without one, the score."""
    if wanted:
        return list(dict.fromkeys(wanted)), wanted[0]
    vals = val_metrics(logged)
    return [DEFAULT_METRIC, *vals], (vals[0] if vals else DEFAULT_METRIC)


def points(jobs: Sequence[JobView]) -> list[tuple[JobView, list[str]]]:
    """(the job that stands for each point, the ids of its jobs, oldest first), in the order of
    each point's first job: a point that ``rayjobs resume`` continued (``ID-r1``, the same run) is
    its newest job, the earlier ones listed with it."""
    by_id = {j.submission_id: j for j in jobs}
    newer = {j.meta.resumed_from: j.submission_id for j in jobs
             if j.meta.resumed_from in by_id}
    out = []
    for j in jobs:
        if j.meta.resumed_from in by_id:
            continue  # part of the point its first job stands at
        chain = [j.submission_id]
        while chain[-1] in newer and newer[chain[-1]] not in chain:
            chain.append(newer[chain[-1]])
        out.append((by_id[chain[-1]], chain))
    return out


def chain_curve(curves: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One point's curve from its jobs' (:func:`plot.collect` entries, oldest first), as a resumed
    attempt's steps replace the older ones (:func:`metricfiles.merge_attempts`): each newer job
    cuts the older curves from its first step on. Where the run dir is readable every job of the
    run already has all of its attempts (the same files); from logs, each has only its own steps."""
    if len(curves) == 1:
        return curves[0]
    series: dict[str, list[list[float]]] = {}
    for c in curves:
        first = min((p[0] for s in c["series"].values() for p in s), default=None)
        if first is None:
            continue  # logged nothing (yet): it takes nothing away either
        for m in set(series) | set(c["series"]):
            series[m] = [p for p in series.get(m, []) if p[0] < first] + list(c["series"].get(m) or [])
    return dict(curves[-1], series=series)


def fill_totals(dash: Any, rows: Sequence[JobRow], jobs: Sequence[JobView]) -> None:
    """The total steps of rows that lack it, from the start of each log (``list`` reads only its end;
    verl prints the total once, at the start), 8 logs at a time, each read stopping once it is seen."""
    from rayjobs.views import logparse

    def one(rj: tuple[JobRow, JobView]) -> None:
        row, job = rj
        p = logparse.Progress()
        try:
            jobrows.scan_head(dash, str(row["id"]), str(job.driver_node_id), p, limit=1 << 20)
        except Exception:  # noqa: BLE001  (a dead node, a pruned log: the row stays without it)
            return
        row["total_steps"] = p.total

    todo = [(r, j) for r, j in zip(rows, jobs) if r.get("total_steps") is None and r.get("step") is not None
            and j.driver_node_id and not j.pruned and not j.from_record]
    if dash is not None and todo:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(one, todo))


# --------------------------------------------------------------------------- evaluation jobs
def eval_jobs(jobs: Sequence[JobView], point_ids: set[str]) -> list[JobView]:
    """The evaluation jobs of the points (metadata ``eval_of`` = one of ``point_ids``): those in
    ``jobs`` (the cluster's), then those only the local record still has (their kept copy, or
    what was last seen of them)."""
    from rayjobs import ledger

    found = [j for j in jobs if j.meta.eval_of in point_ids]
    known = {j.submission_id for j in jobs}
    newest: dict[str, dict[str, Any]] = {}
    for e in ledger.entries():
        if JobMeta.from_ray(e.get("metadata")).eval_of in point_ids and str(e.get("id")) not in known:
            newest[str(e.get("id"))] = e
    from rayjobs.views import localrows

    rows = [localrows.local_row(e, ledger.seen(str(e.get("cluster") or e.get("address"))),
                                str(e.get("address") or "the embedded local cluster")) for e in newest.values()]
    return found + localrows.as_local_jobs(rows)


def eval_values(dash: Any, evals: Sequence[JobView], rank: str) -> dict[str, dict[str, Any]]:
    """Per evaluated point id: its newest evaluation job's id, status and val-core value (the
    ranking metric when the evaluation logged it, else its val-core reward; None until logged).
    The curves are read as plot reads them (:func:`plot.collect`)."""
    if not evals:
        return {}
    data = plot.collect(dash, evals, None, val=True)
    out: dict[str, dict[str, Any]] = {}
    for job, dj in sorted(zip(evals, data["jobs"]), key=lambda p: jobrows.order(p[0])):  # the newest last
        logged = [m for m in data["metrics"] if dj["series"].get(m)]
        names = ([rank] if rank in logged else []) + val_metrics([m for m in logged if m.startswith("val-core/")])
        s = summary(dj["series"][names[0]], "max") if names else None
        out[job.meta.eval_of] = {"id": dj["id"], "status": dj["status"], "metric": names[0] if names else None,
                                   "value": s["last"] if s else None, "step": s["last_step"] if s else None}
    return out


# --------------------------------------------------------------------------- the rows
def build(jobs: Sequence[JobView], rows: dict[str, JobRow], data: dict[str, Any], wanted: Sequence[str] = (),
          mode: str = "auto", evals: Optional[dict[str, dict[str, Any]]] = None) -> list[dict[str, Any]]:
    """One row per point of the sweep's ``jobs`` (point order).

    Args:
        jobs: the sweep's jobs, as :func:`plot.collect` got them.
        rows: their ``rayjobs list`` rows, by id (status, step, checkpoint; the local record's).
        data: what :func:`plot.collect` returned for ``jobs``.
        wanted: ``--metric`` names (default: critic/score/mean and the val-core reward).
        mode: ``auto`` (min for a loss, else max), ``max`` or ``min``, for every metric.
        evals: :func:`eval_values`.

    Returns:
        Rows: ``id, jobs, point {key: value}, status, step, total_steps, checkpoint*, metrics {name:
        {last, last_step, best, best_step, mode} or None}, ranked_by, best, eval``, ...
    """
    curves = {str(dj["id"]): dj for dj in data["jobs"]}
    shown, rank = pick_metrics(data["metrics"], wanted)
    pts = points(jobs)
    keys, values = swept([j.metadata for j, _ in pts])
    out = []
    for (job, chain), vals in zip(pts, values):
        jid = job.submission_id
        ev = next((evals[i] for i in reversed(chain) if evals and i in evals), None)
        r = _row(job, rows[jid], chain_curve([curves[i] for i in chain if i in curves]), shown, mode)
        r.update(jobs=chain, point={k: vals.get(k) for k in keys}, ranked_by=rank, eval=ev)
        out.append(r)
    mark_best(out, rank)
    return out


def _row(job: JobView, row: JobRow, curve: dict[str, Any], shown: Sequence[str], mode: str) -> dict[str, Any]:
    metrics = {m: summary(curve["series"].get(m) or [], metric_mode(m, mode)) for m in shown}
    step = row.get("step")
    if step is None:  # the rows read the log's end; the curve may know more (a kept copy, the JSONL)
        step = max((p[0] for s in curve["series"].values() for p in s), default=None)
    ckpt, ckdir = row.get("checkpoint_step"), job.meta.checkpoint_dir or None
    return {"id": job.submission_id, "sweep": row.get("sweep"), "label": row.get("label"),
            "status": row["status"], "status_text": jobrows.status_text(row),
            "source": row.get("source") or "cluster", "final": row.get("final", row["status"] in TERMINAL),
            "curves_from": curve["source"], "step": step, "total_steps": row.get("total_steps"),
            "checkpoint_step": ckpt, "checkpoint_dir": ckdir,
            "checkpoint": f"{ckdir}/global_step_{ckpt}" if ckdir and ckpt is not None else None,
            "metrics": metrics, "best": False}


# --------------------------------------------------------------------------- the table
def short_names(names: Sequence[str]) -> dict[str, str]:
    """Column names: the shortest unique tail of each metric (``score/mean``), ``val:`` before a
    val-core one (``val:reward/mean@1``; ``val:gsm8k/reward/mean@1`` with several data sources)."""
    out = {}
    for m in names:
        parts = m.split("/")
        cand = m
        for k in range(min(2, len(parts)), len(parts) + 1):
            cand = "/".join(parts[-k:])
            if sum(1 for o in names if o == cand or o.endswith("/" + cand)) == 1:
                break
        out[m] = ("val:" + cand) if m.startswith("val-core/") and not cand.startswith("val-core/") else cand
    return out


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The human table: ``*`` before the best point(s), a column per swept key, per metric its last
    value and its best one with the step (``0.8@12``), '-' where there is nothing."""
    from rayjobs.views.panel import fmt_num

    metrics = list(rows[0]["metrics"]) if rows else []
    keys = list(rows[0]["point"]) if rows else []
    short = short_names(metrics)
    has_eval = any(r.get("eval") for r in rows)
    head = ["", "ID", *keys, "STATUS", "STEP", *[c for m in metrics for c in (short[m], short[m] + ":best")],
            *(["EVAL"] if has_eval else []), "CHECKPOINT"]
    right = {"STEP", "EVAL", *[c for m in metrics for c in (short[m], short[m] + ":best")]}
    lines = [head]
    for r in rows:
        step = "" if r["step"] is None else (f"{r['step']}/{r['total_steps']}" if r.get("total_steps") else str(r["step"]))
        cells = ["*" if r["best"] else "", r["id"], *[r["point"][k] or "" for k in keys], r["status_text"], step]
        for m in metrics:
            s = r["metrics"][m]
            cells += [fmt_num(s["last"]), f"{fmt_num(s['best'])}@{s['best_step']}"] if s else ["", ""]
        if has_eval:
            ev = r.get("eval") or {}
            cells.append(fmt_num(ev["value"]) if ev.get("value") is not None else str(ev.get("status") or ""))
        cells.append(r.get("checkpoint") or "")
        lines.append([cells[0]] + [c or "-" for c in cells[1:]])  # the mark column alone may be blank
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "".join(" ".join(c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(line, widths, head)).rstrip() + "\n"
                   for line in lines)

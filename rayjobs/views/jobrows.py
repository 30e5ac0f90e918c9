"""Rows for ``rayjobs list`` / ``rayjobs status``: Ray's job details + rayjobs metadata + progress.

A row is a JSON-able dict with the contract's fields (design §3): ``id, status, experiment, sweep,
overrides, priority, attempt, submitted_at, queue_position``, plus ``sweep_overrides, run, gpus,
start_time, end_time, message (Ray's, without its log copy), error (the log's last exception line, FAILED jobs), step, total_steps, score, metrics, wandb_url``. ``QUEUED`` and
``queue_position`` come from :func:`rayjobs.views.queuestatus.overlay`.
Progress comes from the run's metrics JSONL when its dir is readable here (the embedded
cluster), else from the tail of the job's log.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Optional

from rayjobs.errors import ConfigError, JobNotFound, did_you_mean

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard
from rayjobs.shared import STATUSES, TERMINAL
from rayjobs.views import logparse, metricfiles
from rayjobs.views.jobfields import field, gpu_groups, json_list, meta, status_of



def is_rayjobs(job: Any) -> bool:
    return "rayjobs" in meta(job)


def sweep_label(m: dict[str, str]) -> str:
    """``kl_coef=0.01,lr=1e-6``: what varies in this job's sweep point ('' outside sweeps)."""
    from rayjobs.submit.spec import point_label

    return point_label(json_list(m.get("sweep_overrides")))


def overrides_label(m: dict[str, str]) -> str:
    """The sweep point, else the user's own overrides (short keys), for tables and legends."""
    label = sweep_label(m)
    if label:
        return label
    from rayjobs.submit.spec import point_label

    return point_label([o for o in json_list(m.get("overrides")) if "=" in o and not o.lstrip("+~").startswith(("exp=", "rayjobs."))])


def iso_ms(ms: Optional[int]) -> Optional[str]:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone().isoformat(timespec="seconds")


def submitted_ts(job: Any) -> float:
    """Seconds since the epoch the job was submitted (metadata, else Ray's start time)."""
    s = meta(job).get("submitted_at")
    if s:
        try:
            return datetime.fromisoformat(s).timestamp()
        except ValueError:
            pass
    return (field(job, "start_time") or 0) / 1000


def order(job: Any) -> tuple[float, int, str]:
    """Sort key: submission time, then sweep point number (``-2`` before ``-10``), then id."""
    sid = str(field(job, "submission_id") or "")
    tail = sid.rsplit("-", 1)[-1]
    point = int(tail) if meta(job).get("sweep") and tail.isdigit() else -1
    return submitted_ts(job), point, sid


def gpus(job: Any) -> int:
    return sum(gpu_groups(job))


def base_row(job: Any, over: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The row of one job (Ray's details, or the dict form the queue gives of a job it holds)."""
    m = meta(job)
    status = status_of(job)
    over = dict(over or {})
    if field(job, "queue_position") is not None:
        over.setdefault("queue_position", field(job, "queue_position"))
    try:
        priority = int(m.get("priority", 0) or 0)
    except ValueError:
        priority = 0
    sub = m.get("submitted_at") or iso_ms(field(job, "start_time"))
    return {
        "id": field(job, "submission_id"),
        "status": over.get("status", status),
        "experiment": m.get("experiment", ""),
        "sweep": m.get("sweep", "") or None,
        "overrides": json_list(m.get("overrides")),
        "priority": priority,
        "attempt": 0 if status == "PENDING" or over.get("status") in ("QUEUED", "PENDING") else None,
        "max_attempts": max_attempts(m),
        "submitted_at": sub,
        "queue_position": over.get("queue_position"),
        "sweep_overrides": json_list(m.get("sweep_overrides")),
        "label": overrides_label(m),
        "run": m.get("run"),
        "resumed_from": m.get("resumed_from"),  #: the job `rayjobs resume` continued
        "rerun_of": m.get("rerun_of"),  #: the job `rayjobs rerun` ran again
        "gpus": gpus(job),
        "start_time": iso_ms(field(job, "start_time")),
        "end_time": iso_ms(field(job, "end_time")),
        "message": short_message(field(job, "message")),
        "cause": field(job, "cause"),  # why the queue ended it ("cluster restarted"), if it did
        "reaped": list(field(job, "reaped") or []),  #: what the queue killed of it once it ended (reaper)
        "user": m.get("user") or None,  #: who submitted it (per-user quotas)
        "preemptible": m.get("preemptible") == "1",
        "after": json_list(m.get("after")),  #: the jobs it waits for (rayjobs.after)
        "held": field(job, "held"),  #: why the queue holds it back: "after", "quota", "requeueing"
        "preempted_by": (field(job, "preempted") or {}).get("by"),  #: it waits again, preempted by this job
        "redo_steps": (field(job, "preempted") or {}).get("redo"),  #: the steps that preemption costs it
        "preemptions": int(field(job, "preemptions") or 0) or None,
        "preempting_for": field(job, "preempting_for"),  #: it is being stopped at its next checkpoint for this job
        "error": None,
        "step": None,
        "total_steps": None,
        "checkpoint_step": None,  #: the last complete checkpoint (a resume starts from it)
        "score": None,
        "metrics": {},
        "wandb_url": None,
    }


def max_attempts(m: dict[str, Any]) -> int:
    """1 + ``rayjobs.max_retries`` (as submitted; the queue lowers it for a run lost with the head)."""
    try:
        return 1 + max(0, int(m.get("max_retries") or 0)) + max(0, int(m.get("lost_runs") or 0))
    except ValueError:
        return 1


def attempt_text(row: dict[str, Any]) -> str:
    """``2/3`` (attempt k of at most N), ``2`` without retries, empty before the first attempt."""
    k, n = row.get("attempt"), row.get("max_attempts") or 1
    if not k:
        return ""
    # more attempts than the budget: new checkpoints reset it (rayjobs.oncluster.runner)
    return f"{k}/{n}" if 1 < n and k <= n else str(k)


def status_text(r: dict[str, Any]) -> str:
    """A row's status as the tables show it: ``QUEUED #3``, ``FAILED (cause)``; from the local
    record ``SUCCEEDED*`` (the final state kept), ``RUNNING (cluster gone)`` (last seen),
    ``UNKNOWN (record)`` (a job no command saw)."""
    status = r["status"] + (f" #{r['queue_position']}" if r.get("queue_position") is not None else "")
    local = r.get("source") == "local"
    if local and r.get("final"):
        status = r["status"] + "*"
    if r.get("cause"):  # the kind only (``node lost``); status shows the whole line
        status += f" ({str(r['cause']).split(': ', 1)[0]})"
    status += queue_note(r)
    if local and not r.get("final"):
        status += " (cluster gone)"
    if r.get("source") == "record":
        status += " (record)"
    return status


def queue_note(r: dict[str, Any]) -> str:
    """What the queue does with the job, for STATUS: `` (PREEMPTED by X)``, `` (preempted by X: to its
    next checkpoint)``, `` (quota)``, `` (after X)``; empty otherwise."""
    if r.get("preempted_by") and r.get("status") == "QUEUED":
        redo = f", redoes {r['redo_steps']}" if r.get("redo_steps") else ""
        return f" (PREEMPTED by {r['preempted_by']}{redo})"
    if r.get("preempting_for"):
        return f" (preempted by {r['preempting_for']}: to its next checkpoint)"
    if r.get("held") == "quota":
        return " (quota)"
    if r.get("held") == "after" and r.get("after"):
        return f" (after {', '.join(r['after'][:2])}{' ...' if len(r['after']) > 2 else ''})"
    return ""


def short_message(message: Any) -> Optional[str]:
    """Ray's job message without the log copy it appends (", last available logs ..."), no ANSI."""
    if not message:
        return None
    return " ".join(logparse.clean(str(message)).split(", last available logs")[0].split()) or None


def add_progress(row: dict[str, Any], job: Any, dash: Optional["Dashboard"], lines: int = 400,
                 head_scan: bool = False, tails: Optional[dict[str, bytes]] = None) -> dict[str, Any]:
    """Fill step/score/attempt/W&B from the JSONL (if readable here) or the log's tail; a job the
    queue has finished (and maybe pruned from Ray) from the final metrics it recorded.

    ``tails``: where to leave the raw log tail read (by id), so a final copy needs no second read.
    """
    if field(job, "from_queue"):
        return _final_progress(row, field(job, "final") or {}, field(job, "checkpoint_step"))
    if row["status"] == "QUEUED":
        return row
    m = meta(job)
    files = metricfiles.jsonl_files(m.get("run_dir"))
    p = logparse.Progress()
    node = field(job, "driver_node_id")
    if node and dash is not None:
        try:
            raw = dash.log_tail(row["id"], node, lines, max_bytes=8 << 20)
            if tails is not None:
                tails[row["id"]] = raw
            tail = logparse.clean_block(raw.decode("utf-8", "replace"))
            logparse.feed_block(p, tail)
            if row["status"] == "FAILED":
                row["error"] = logparse.failure_line(tail)
            if head_scan and not (p.wandb_url and p.total and p.attempt):
                scan_head(dash, row["id"], node, p)
        except Exception:
            pass  # a dead node or a restarting dashboard: the row stays without progress
    if files:
        rec = metricfiles.last_jsonl_record(files[-1])
        if rec:
            p.step, p.last = rec[0], rec[1]
            vc = logparse.val_core(rec[1])
            if vc:
                p.val = (vc[0], vc[1], rec[0])
        if row["attempt"] is None:
            row["attempt"] = max(len(files), p.attempt or 0)
    if row["attempt"] is None:
        row["attempt"] = p.attempt or (1 if node else 0)
    row["step"], row["total_steps"], row["wandb_url"] = p.step, p.total, p.wandb_url
    row["checkpoint_step"] = p.checkpoint
    if p.failures:  # the runner's one-line causes (rayjobs.oncluster.failurecause), every attempt's
        row["failures"] = list(p.failures)
    if p.cause and not row.get("cause") and row["status"] == "FAILED":
        row["cause"] = p.cause
    row["metrics"] = p.summary()["metrics"]
    row["score"] = p.last.get("critic/score/mean")
    return row


def _final_progress(row: dict[str, Any], final: dict[str, Any], checkpoint: Optional[int] = None) -> dict[str, Any]:
    data = dict(final.get("data") or {})
    row["checkpoint_step"] = checkpoint
    row["step"] = final.get("step")
    row["score"] = data.get("critic/score/mean")
    row["metrics"] = {k: v for k, v in data.items() if isinstance(v, (int, float))}
    row["attempt"] = row["attempt"] if row["attempt"] is not None else int(final.get("attempts") or 1)
    return row


def scan_head(dash: "Dashboard", job_id: str, node: str, p: logparse.Progress, limit: int = 4 << 20) -> None:
    """Read the start of the log (bounded) for what is printed once: total steps, W&B URL, attempt."""
    head = logparse.Progress()
    split = logparse.LineSplitter()
    got = 0
    for chunk in dash.iter_log(job_id, node, -1):
        got += len(chunk)
        logparse.feed_block(head, logparse.clean_block(split.feed_text(chunk)))
        # verl prints the W&B URL before its first step: once steps come, no URL is coming
        if got >= limit or (head.total and (head.wandb_url or head.step is not None)):
            break
    p.total = p.total or head.total
    p.wandb_url = p.wandb_url or head.wandb_url
    p.attempt = p.attempt or head.attempt


def rows(jobs: Iterable[Any], dash: "Dashboard", progress: bool = True, limit_progress: int = 100,
         keep: bool = False) -> list[dict[str, Any]]:
    """Rows for ``jobs`` (oldest first): Ray's jobs and the dict form of those the queue holds or has
    finished; progress for the newest ``limit_progress`` that run or ran in Ray.

    Every row shown is remembered (:func:`rayjobs.submit.ledger.remember_seen`), and a final copy
    is kept of each ended job among the newest ``limit_progress`` (its log tail was just read);
    ``keep``: of every ended job, with its metrics from the log where the run dir is not readable.
    """
    jobs = sorted(jobs, key=order)
    out = [base_row(j) for j in jobs]
    tails: dict[str, bytes] = {}
    if keep:
        limit_progress = len(out)
    if progress and out:
        pairs = [(r, j) for r, j in zip(out, jobs) if not field(j, "from_queue")][-limit_progress:]
        pairs += [(r, j) for r, j in zip(out, jobs) if field(j, "from_queue")]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda rj: add_progress(rj[0], rj[1], dash, tails=tails), pairs))
    for r in out:
        if r["attempt"] is None:
            r["attempt"] = 0 if r["status"] in ("PENDING", "QUEUED") else 1
    if progress and out and dash is not None:
        window = list(zip(out, jobs))[-limit_progress:]
        keep_rows([(r, j) for r, j in window if r["status"] in TERMINAL], dash, tails, from_log=keep)
        _remember(dash, out)
    return out


def _remember(dash: Any, out: list[dict[str, Any]]) -> None:
    from rayjobs.submit import ledger

    try:
        ledger.remember_seen(dash.target.key, out)
    except OSError:
        pass  # a read-only home: the rows are still shown


# --------------------------------------------------------------------------- final copies
def keep_rows(pairs: list[tuple[dict[str, Any], Any]], dash: Any, tails: Optional[dict[str, bytes]] = None,
              from_log: bool = False) -> int:
    """Keep a final copy of each ended job of ``pairs`` (row, job) not kept yet (8 at a time);
    ``from_log``: read the metrics from the log where the run dir is not readable. How many kept."""
    from rayjobs.submit import ledger

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


def keep_job(dash: Any, job: Any, row: Optional[dict[str, Any]] = None, tail: Optional[bytes] = None, *,
             from_log: bool = False, history: Optional[dict[int, dict[str, float]]] = None) -> bool:
    """Keep the final copy of one ended job (once): row, log tail, metrics; for a copy kept without
    metrics, those (``from_log``, or the ``history`` plot read). False if nothing was written: kept
    before, still running, or the disk refused it (a view never fails for its copy)."""
    from rayjobs.submit import ledger

    jid = str(field(job, "submission_id"))
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
        if from_log and row.get("total_steps") is None and field(job, "driver_node_id") and not field(job, "from_queue"):
            _scan_total(dash, job, row)  # list reads only the log's end; the copy is for good
        if tail is not None and row.get("status") == "FAILED" and not row.get("error"):
            row["error"] = logparse.failure_line(logparse.clean_block(tail.decode("utf-8", "replace")))
        metrics, src = _metrics_of(dash, job, history, from_log)
        final = dict(row, queue_position=None, attempt=row.get("attempt") or 1)
        return ledger.keep_final(jid, final, log_tail=tail, metrics=metrics, metrics_from=src)
    except OSError:
        return False


def _scan_total(dash: Any, job: Any, row: dict[str, Any]) -> None:
    """Total steps and W&B run from the log's first MB (they are printed once, at the start)."""
    p = logparse.Progress()
    try:
        scan_head(dash, str(row["id"]), str(field(job, "driver_node_id")), p, limit=1 << 20)
    except Exception:  # noqa: BLE001  (the copy is kept without them)
        return
    row["total_steps"] = row.get("total_steps") or p.total
    row["wandb_url"] = row.get("wandb_url") or p.wandb_url


def keep_seen_row(dash: "Dashboard", row: dict[str, Any]) -> None:
    """``rayjobs status``: remember the row and, for an ended job not kept yet, keep its final copy
    (one more read of the job and of its log's end, once per job)."""
    from rayjobs.errors import RayjobsError
    from rayjobs.submit import ledger
    from rayjobs.views.queuestatus import QueueView

    if row.get("source") is not None:
        return
    _remember(dash, [row])
    if row.get("status") not in TERMINAL or ledger.is_kept(str(row["id"])):
        return
    try:
        job: Any = dash.job(str(row["id"]))
    except RayjobsError:
        job = None
    if not job or not job.get("metadata"):  # pruned from Ray: the queue's history has it
        job = QueueView.read(dash, revive=False).as_job(str(row["id"])) or job
    if job:
        keep_job(dash, job, row)


def _fetch_tail(dash: Any, job: Any) -> Optional[bytes]:
    """The end of an ended job's driver log: from Ray, or by its file name once Ray pruned it."""
    from rayjobs.submit import ledger

    node, jid = field(job, "driver_node_id"), str(field(job, "submission_id"))
    if not node or dash is None:
        return None
    try:
        if field(job, "from_queue"):
            return dash.node_file(node, f"job-driver-{jid}.log", ledger.TAIL_LINES)
        return dash.log_tail(jid, node, ledger.TAIL_LINES, max_bytes=8 << 20)
    except Exception:  # noqa: BLE001  (a dead node, a restarting dashboard: keep the row without it)
        return None


def history_jsonl(history: dict[int, dict[str, float]]) -> bytes:
    """A history as verl's file logger writes it (one ``{"step", "data"}`` per line)."""
    import json

    return b"".join(json.dumps({"step": s, "data": d}).encode() + b"\n" for s, d in sorted(history.items()))


def _metrics_of(dash: Any, job: Any, history: Optional[dict[int, dict[str, float]]],
                from_log: bool) -> tuple[Optional[list[bytes]], Optional[str]]:
    """(per-attempt JSONL bodies, where from): the run dir's files if readable here, else the
    history given, else (``from_log``) the log's step lines; (None, None): not read."""
    bodies = []
    for f in metricfiles.jsonl_files(meta(job).get("run_dir")):
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


def select(jobs: Iterable[Any], sweep: Optional[str] = None, status: Optional[list[str]] = None,
           experiment: Optional[str] = None, include_all: bool = False) -> list[Any]:
    """Filter jobs; an unknown sweep id is an error naming the closest ones."""
    jobs = list(jobs)
    mine = jobs if include_all else [j for j in jobs if is_rayjobs(j)]
    if sweep:
        sweeps = sorted({meta(j).get("sweep", "") for j in jobs} - {""})
        hit = [s for s in sweeps if s == sweep] or [s for s in sweeps if s.startswith(sweep)]
        if len(hit) != 1:
            if hit:
                raise JobNotFound(f"{sweep!r} matches {len(hit)} sweeps ({', '.join(hit[:4])}); give more of the id")
            raise JobNotFound(f"no sweep {sweep!r}{did_you_mean(sweep, sweeps)}; `rayjobs list` shows sweep ids")
        mine = [j for j in jobs if meta(j).get("sweep") == hit[0]]
    if experiment:
        mine = [j for j in mine if meta(j).get("experiment") == experiment]
    return mine


def resolve_sweep(sweep: str, jobs: Iterable[Any]) -> str:
    """The sweep id ``sweep`` names (itself, or the one id it starts) among the sweeps of ``jobs`` and
    of the local record (a sweep the cluster forgot is still one); an unknown one names the closest."""
    from rayjobs.submit import ledger

    names = {meta(j).get("sweep", "") for j in jobs} | {str(e.get("sweep") or "") for e in ledger.entries()}
    names.discard("")
    hit = [s for s in names if s == sweep] or sorted(s for s in names if s.startswith(sweep))
    if len(hit) == 1:
        return hit[0]
    if hit:
        raise JobNotFound(f"{sweep!r} matches {len(hit)} sweeps ({', '.join(hit[:4])}); give more of the id")
    raise JobNotFound(f"no sweep {sweep!r}{did_you_mean(sweep, names)}; `rayjobs list` shows sweep ids")


def parse_statuses(values: Iterable[str]) -> list[str]:
    """``--status running,failed`` -> ['RUNNING', 'FAILED']; an unknown one is an error."""
    out = []
    for v in values:
        for s in str(v).split(","):
            s = s.strip().upper()
            if not s:
                continue
            if s not in STATUSES:
                raise ConfigError(f"unknown status {s!r}{did_you_mean(s, STATUSES)}; one of: {', '.join(STATUSES)}")
            out.append(s)
    return out


def age(ts: float, now: Optional[float] = None) -> str:
    d = max(0, (now or time.time()) - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if d >= size:
            return f"{int(d // size)}{unit}"
    return f"{int(d)}s"


def _cluster_of(entry: dict[str, Any]) -> str:
    return str(entry.get("cluster") or entry.get("address"))


def record_row(entry: dict[str, Any], cluster: str) -> dict[str, Any]:
    """A row for a job the cluster does not know, from its local record (``rayjobs.submit.ledger``).

    ``cluster``: the current cluster's :attr:`rayjobs.settings.Target.key`.
    """
    m = {str(k): str(v) for k, v in (entry.get("metadata") or {}).items()}
    row = base_row({"submission_id": entry.get("id"), "status": "UNKNOWN", "metadata": m})
    same = _cluster_of(entry) == cluster
    where = "the embedded local cluster" if _cluster_of(entry) == "embedded" else entry.get("address")
    row.update({"attempt": None, "source": "record",
                "message": (f"not on the cluster any more (its head restarted since it was submitted to {where})"
                            if same else f"submitted to another cluster: {where}") + "; this row is the local record"})
    return row


def missing_records(known_ids: Iterable[str], cluster: str, sweep: Optional[str] = None) -> list[dict[str, Any]]:
    """Rows of recorded jobs the cluster does not list: those submitted to ``cluster`` (a
    :attr:`rayjobs.settings.Target.key`), or those of ``sweep``, wherever they ran."""
    from rayjobs.submit import ledger

    known = set(known_ids)
    newest: dict[str, dict[str, Any]] = {}
    for e in ledger.entries():
        jid = str(e.get("id") or "")
        if not jid or jid in known:
            continue
        if (e.get("sweep") == sweep) if sweep else _cluster_of(e) == cluster:
            newest[jid] = e
    return [kept_row(e) or record_row(e, cluster) for e in _oldest_first(newest)]


def _oldest_first(newest: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(newest.values(), key=lambda e: (str(e.get("submitted_at")), str(e.get("id"))))


# --------------------------------------------------------------------------- the cluster is gone
def kept_row(entry: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The row of a job whose final copy was kept (``source`` "local", ``final`` true), or None."""
    from rayjobs.submit import ledger

    doc = ledger.kept(str(entry.get("id")))
    if doc is None:
        return None
    return dict(doc["row"], source="local", final=True, kept_at=doc.get("kept_at"), queue_position=None,
                metrics_kept=doc.get("metrics_from"))


def local_row(entry: dict[str, Any], seen: dict[str, dict[str, Any]], where: str) -> dict[str, Any]:
    """A job's row from the local record alone (its cluster unreachable): the final copy kept,
    else what a command last saw of it, else QUEUED (what its submit left it as); ``final`` says
    whether that status is the job's last (a job not seen ended may have run on, or not)."""
    row = kept_row(entry)
    if row is not None:
        return row
    m = {str(k): str(v) for k, v in (entry.get("metadata") or {}).items()}
    row = base_row({"submission_id": entry.get("id"), "status": "QUEUED", "metadata": m})
    last = seen.get(str(entry.get("id"))) or {}
    row.update({k: last[k] for k in last if k in row and last[k] is not None})
    row.update(source="local", final=row["status"] in TERMINAL, seen_at=last.get("seen_at"),
               attempt=row.get("attempt") or (0 if row["status"] == "QUEUED" else 1))
    when = f"last seen {row['status']} at {last['seen_at']}" if last else f"submitted to {where}, never seen since"
    row["message"] = when + ("" if row["final"] else f"; {where} is gone or unreachable, so where it stands now is unknown")
    return row


def local_rows(cluster: str, where: str, sweep: Optional[str] = None) -> list[dict[str, Any]]:
    """Rows of every recorded job of ``cluster`` (or of ``sweep``, wherever it ran) from the local
    record alone: what ``rayjobs list`` shows while that cluster cannot be reached."""
    from rayjobs.submit import ledger

    newest: dict[str, dict[str, Any]] = {}
    for e in ledger.entries():
        jid = str(e.get("id") or "")
        if jid and ((e.get("sweep") == sweep) if sweep else _cluster_of(e) == cluster):
            newest[jid] = e
    if sweep and not newest:
        sweeps = sorted({str(e.get("sweep")) for e in ledger.entries() if e.get("sweep")})
        raise JobNotFound(f"no sweep {sweep!r} in the local record{did_you_mean(sweep, sweeps)}")
    seen = ledger.seen(cluster)
    return [local_row(e, seen, where) for e in _oldest_first(newest)]


def as_local_jobs(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Local rows in the dict form of Ray's job details (for ``plot``), their metadata from the record."""
    from rayjobs.submit import ledger

    rows = list(rows)
    want = {str(r["id"]) for r in rows}
    entries = {str(e.get("id")): e for e in ledger.entries() if str(e.get("id")) in want}  # one read of the ledger
    return [{"submission_id": r["id"], "status": r["status"], "from_record": True,
             "metadata": {str(k): str(v) for k, v in (entries.get(str(r["id"]), {}).get("metadata") or {}).items()}}
            for r in rows]


def unreachable_rows(address: Optional[str], sweep: Optional[str], why: Exception, say: Any = None) -> list[dict[str, Any]]:
    """``list``/``plot`` while the cluster at ``address`` cannot be reached: its jobs from the local
    record (:func:`local_rows`); ``say`` is told so in one line, with why."""
    from rayjobs import settings

    target = settings.resolve_target(address)
    where = target.address or "the embedded local cluster"
    rows = local_rows(target.key, where, sweep)
    if say:
        say(f"cluster {where} unreachable: showing the local record ({len(rows)} job(s); STATUS* = the final "
            f"state kept here, (cluster gone) = last seen, may have changed since). {why}")
    return rows

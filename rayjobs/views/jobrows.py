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
from rayjobs.shared import STATUSES
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
        "gpus": gpus(job),
        "start_time": iso_ms(field(job, "start_time")),
        "end_time": iso_ms(field(job, "end_time")),
        "message": short_message(field(job, "message")),
        "cause": field(job, "cause"),  # why the queue ended it ("cluster restarted"), if it did
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
    return f"{k}/{n}" if n > 1 else str(k)


def short_message(message: Any) -> Optional[str]:
    """Ray's job message without the log copy it appends (", last available logs ..."), no ANSI."""
    if not message:
        return None
    return " ".join(logparse.clean(str(message)).split(", last available logs")[0].split()) or None


def add_progress(row: dict[str, Any], job: Any, dash: Optional["Dashboard"], lines: int = 400,
                 head_scan: bool = False) -> dict[str, Any]:
    """Fill step/score/attempt/W&B from the JSONL (if readable here) or the log's tail; a job the
    queue has finished (and maybe pruned from Ray) from the final metrics it recorded."""
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
            tail = logparse.clean_block(dash.log_tail(row["id"], node, lines, max_bytes=8 << 20).decode("utf-8", "replace"))
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
        if got >= limit or (head.wandb_url and head.total):
            break
    p.total = p.total or head.total
    p.wandb_url = p.wandb_url or head.wandb_url
    p.attempt = p.attempt or head.attempt


def rows(jobs: Iterable[Any], dash: "Dashboard", progress: bool = True, limit_progress: int = 100) -> list[dict[str, Any]]:
    """Rows for ``jobs`` (oldest first): Ray's jobs and the dict form of those the queue holds or has
    finished; progress for the newest ``limit_progress`` that run or ran in Ray."""
    jobs = sorted(jobs, key=order)
    out = [base_row(j) for j in jobs]
    if progress and out:
        pairs = [(r, j) for r, j in zip(out, jobs) if not field(j, "from_queue")][-limit_progress:]
        pairs += [(r, j) for r, j in zip(out, jobs) if field(j, "from_queue")]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda rj: add_progress(rj[0], rj[1], dash), pairs))
    for r in out:
        if r["attempt"] is None:
            r["attempt"] = 0 if r["status"] in ("PENDING", "QUEUED") else 1
    return out


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
    return [record_row(e, cluster) for e in sorted(newest.values(), key=lambda e: (str(e.get("submitted_at")), str(e.get("id"))))]

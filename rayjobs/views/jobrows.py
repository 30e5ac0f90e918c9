"""Rows for ``rayjobs list`` / ``rayjobs status``: a job's view (:class:`rayjobs.contract.wire.JobView`)
+ its rayjobs metadata + progress.

A row is a JSON-able dict with the contract's fields (design §3), declared with their meaning in
:class:`rayjobs.contract.row.JobRow`. ``QUEUED`` and ``queue_position`` are the queue's (:mod:`rayjobs.views.queuestatus`). Rows of jobs only the
local record knows are :mod:`rayjobs.views.localrows`; the final copies kept of ended jobs are
written by :mod:`rayjobs.api.keeping` (views read, never write).
Progress comes from the run's metrics JSONL when its dir is readable here (the embedded
cluster), else from the tail of the job's log.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.row import ROW_KEYS, JobRow
from rayjobs.contract.status import NOT_STARTED, Status
from rayjobs.contract.wire import JobView
from rayjobs.errors import ConfigError, JobNotFound, did_you_mean
from rayjobs.shared import STATUSES, TERMINAL
from rayjobs.views import logparse, metricfiles

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def is_rayjobs(job: JobView) -> bool:
    """Did rayjobs submit it (its metadata carries rayjobs' version)?"""
    return "rayjobs" in job.metadata


def sweep_label(m: Mapping[str, str]) -> str:
    """``kl_coef=0.01,lr=1e-6``: what varies in this job's sweep point ('' outside sweeps; ``m``: its metadata)."""
    from rayjobs.contract.ranking import point_label

    return point_label(list(JobMeta.from_ray(m).sweep_overrides))


def overrides_label(m: Mapping[str, str]) -> str:
    """The sweep point, else the user's own overrides (short keys), for tables and legends."""
    jm = JobMeta.from_ray(m)
    return label_of(list(jm.sweep_overrides), list(jm.overrides))


def label_of(sweep_overrides: list[str], overrides: list[str]) -> str:
    """:func:`overrides_label` of the two lists, parsed already."""
    from rayjobs.contract.ranking import point_label

    if sweep_overrides:
        return point_label(sweep_overrides)
    own = [o for o in overrides if "=" in o]
    # rayjobs' own keys are how it ran, not what it is -- but a data job's dataset and source are what it is
    return point_label([o for o in own if not o.lstrip("+~").startswith(("exp=", "rayjobs."))
                        or o.lstrip("+~").startswith("rayjobs.prepare.")])


def lost_lines(runs: Any) -> Optional[list[str]]:
    """``attempt 1: lost with the head's Ray at 12:00:03; its log stays on the head: PATH`` per lost run."""
    out = []
    for r in runs or []:
        which = ", ".join(map(str, r.get("attempts") or [])) or "?"
        at = datetime.fromtimestamp(float(r.get("lost_at") or 0), tz=timezone.utc).astimezone().isoformat(timespec="seconds")
        where = f"; its log stays on the head: {r['log']}" if r.get("log") else ""
        out.append(f"attempt {which}: lost with the head's Ray (found at {at}){where}")
    return out or None


def iso_ms(ms: Optional[int]) -> Optional[str]:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone().isoformat(timespec="seconds")


def iso_s(t: Any) -> Optional[str]:
    """An epoch-seconds stamp of the queue's, to the millisecond (it times admissions)."""
    if not t:
        return None
    return datetime.fromtimestamp(float(t), tz=timezone.utc).astimezone().isoformat(timespec="milliseconds")


def submitted_ts(job: JobView) -> float:
    """Seconds since the epoch the job was submitted (metadata, else Ray's start time)."""
    if job.meta.submitted_at:
        try:
            return datetime.fromisoformat(job.meta.submitted_at).timestamp()
        except ValueError:
            pass
    return (job.start_time or 0) / 1000


def order(job: JobView) -> tuple[float, int, str]:
    """Sort key: submission time, then sweep point number (``-2`` before ``-10``), then id."""
    sid = job.submission_id
    tail = sid.rsplit("-", 1)[-1]
    point = int(tail) if job.meta.sweep and tail.isdigit() else -1
    return submitted_ts(job), point, sid


def gpus(job: JobView) -> int:
    """The GPUs the job asks for (every placement group's)."""
    return job.meta.gpus


def base_row(job: JobView, over: Optional[dict[str, Any]] = None) -> JobRow:
    """The row of one job (the queue's view, or Ray's of a job the queue does not know); its keys
    are :class:`rayjobs.contract.row.JobRow`'s, their meaning documented there."""
    jm, status = job.meta, job.status
    over = dict(over or {})
    if job.queue_position is not None:
        over.setdefault("queue_position", job.queue_position)
    preempted = job.preempted or {}
    own = {  # what is not a metadata field shown as it is (those follow from JobRow's declaration)
        "id": job.submission_id or None,
        "status": over.get("status", status),
        "experiment": jm.experiment,
        "attempt": 0 if status == Status.PENDING or over.get("status") in NOT_STARTED else None,
        "max_attempts": max_attempts(jm),
        "submitted_at": jm.submitted_at or iso_ms(job.start_time),
        "queue_position": over.get("queue_position"),
        "label": label_of(list(jm.sweep_overrides), list(jm.overrides)),
        "start_time": iso_ms(job.start_time),
        "end_time": iso_ms(job.end_time),
        "queued_at": iso_s(job.queued_at),
        "admitted_at": iso_s(job.admitted_at),
        "finished_at": iso_s(job.finished_at),
        "message": short_message(job.message),
        "cause": job.cause,
        "reaped": list(job.reaped),
        "held": job.held,
        "preempted_by": preempted.get("by"),
        "redo_steps": preempted.get("redo"),
        "preemptions": int(job.preemptions or 0) or None,
        "preempting_for": job.preempting_for,
        "preempt_why": job.preempt_why if job.preempting_for else None,
        "rungs": job.rungs or None,
        "halved": job.halved,
        "lost": lost_lines(job.lost_runs),
        "error": None,
        "step": None,
        "total_steps": None,
        "checkpoint_step": None,
        "score": None,
        "metrics": {},
        "wandb_url": None,
    }
    # in JobRow's order; a key declared there that is a JobMeta (else a JobView) field is read from
    # it, so a field added to both shows in every row with no line here
    return {k: own[k] if k in own else _plain(jm, job, k) for k in ROW_KEYS}  # type: ignore[return-value]


def _plain(jm: JobMeta, job: JobView, key: str) -> Any:
    """The metadata's field ``key`` (else the view's) as a row shows it: lists as lists, "" as None."""
    v = getattr(jm, key) if hasattr(jm, key) else getattr(job, key)
    return list(v) if isinstance(v, tuple) else (None if v == "" else v)


def max_attempts(jm: JobMeta) -> int:
    """1 + ``rayjobs.max_retries`` (as submitted; the queue lowers it for a run lost with the head)."""
    return 1 + max(0, jm.max_retries) + max(0, jm.lost_runs)


def attempt_text(row: JobRow) -> str:
    """``2/3`` (attempt k of at most N), ``2`` without retries, empty before the first attempt."""
    k, n = row.get("attempt"), row.get("max_attempts") or 1
    if not k:
        return ""
    # more attempts than the budget: new checkpoints reset it (rayjobs.oncluster.runner)
    return f"{k}/{n}" if 1 < n and k <= n else str(k)


def status_text(r: JobRow) -> str:
    """A row's status as the tables show it: ``QUEUED #3``, ``FAILED (cause)``; from the local
    record ``SUCCEEDED*`` (the final state kept), ``RUNNING (cluster gone)`` (last seen),
    ``UNKNOWN (record)`` (a job no command saw)."""
    status = r["status"] + (f" #{r['queue_position']}" if r.get("queue_position") is not None else "")
    local = r.get("source") == "local"
    if local and r.get("final"):
        status = r["status"] + "*"
    if r.get("halved"):  # its sweep's successive halving stopped it: the whole standing
        status += f" ({r['halved'].get('text')})"
    elif r.get("cause"):  # the kind only (``node lost``); status shows the whole line
        status += f" ({str(r['cause']).split(': ', 1)[0]})"
    status += queue_note(r)
    if local and not r.get("final"):
        status += " (cluster gone)"
    if r.get("source") == "record":
        status += " (record)"
    return status


def queue_note(r: JobRow) -> str:
    """What the queue does with the job, for STATUS: `` (PREEMPTED by X)``, `` (preempted by X: to its
    next checkpoint)``, `` (quota)``, `` (after X)``; empty otherwise."""
    if r.get("preempted_by") and r.get("status") == Status.QUEUED:
        redo = f", redoes {r['redo_steps']}" if r.get("redo_steps") else ""
        return f" (PREEMPTED by {r['preempted_by']}{redo})"
    if r.get("preempting_for"):
        why = f"; {r['preempt_why']}" if r.get("preempt_why") else ""
        return f" (preempted by {r['preempting_for']}: to its next checkpoint{why})"
    if r.get("held") == "quota":
        return " (quota)"
    if r.get("held") == "after" and r.get("after"):
        return f" (after {', '.join(r['after'][:2])}{' ...' if len(r['after']) > 2 else ''})"
    return ""


def short_message(message: Any) -> Optional[str]:
    """Ray's job message without the log copy it appends (", last available logs ..."), no ANSI."""
    if not message:
        return None
    text = str(message)
    if "\x1b" in text or "\r" in text:
        text = logparse.clean(text)
    return " ".join(text.split(", last available logs")[0].split()) or None


def add_progress(row: JobRow, job: JobView, dash: Optional["Dashboard"], lines: int = 400,
                 head_scan: bool = False, tails: Optional[dict[str, bytes]] = None, log: bool = True) -> JobRow:
    """Fill step/score/attempt/W&B from the JSONL (if readable here) or the log's tail; a job the
    queue has finished from the final metrics it recorded, and -- ``log``, while Ray still has it
    -- what only its log says (total steps, W&B URL, the error).

    ``tails``: where to leave the raw log tail read (by id), so a final copy needs no second read.
    """
    if job.from_queue:
        _final_progress(row, job)
        read = _ended_log_facts(row, job, dash, lines, head_scan, tails) if log and not job.pruned else None
        if read is False or (read is None and head_scan):  # Ray no longer serves its log: what was kept of it
            _kept_facts(row, job, tails)
        return row
    if row["status"] == Status.QUEUED:
        return row
    files = metricfiles.jsonl_files(job.meta.run_dir or None)
    p = logparse.Progress()
    node = job.driver_node_id
    if node and dash is not None:
        try:
            raw = dash.log_tail(row["id"], node, lines, max_bytes=8 << 20)
            if tails is not None:
                tails[row["id"]] = raw
            tail = logparse.clean_block(raw.decode("utf-8", "replace"))
            logparse.feed_block(p, tail)
            if row["status"] == Status.FAILED:
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
    if p.cause and not row.get("cause") and row["status"] == Status.FAILED:
        row["cause"] = p.cause
    row["metrics"] = p.summary()["metrics"]
    row["score"] = p.last.get("critic/score/mean")
    return row


def _final_progress(row: JobRow, job: JobView) -> JobRow:
    """An ended job's progress from what the queue kept of it: its own attempts only (a resume of
    the same run has its own row)."""
    final = job.final or {}
    data = dict(final.get("data") or {})
    row["checkpoint_step"] = job.checkpoint_step
    row["step"] = final.get("step")
    row["score"] = data.get("critic/score/mean")
    row["metrics"] = {k: v for k, v in data.items() if isinstance(v, (int, float))}
    own = [int(a) for a in job.attempts or []]
    if row["attempt"] is None:
        row["attempt"] = max(own) if own else int(final.get("attempts") or 1)
    return row


def _ended_log_facts(row: JobRow, job: JobView, dash: Optional["Dashboard"], lines: int, head_scan: bool,
                     tails: Optional[dict[str, bytes]]) -> Optional[bool]:
    """What an ended job's log says that the queue did not keep: total steps, W&B URL, the error.
    True: read; False: Ray could not serve the log (its node gone: the head's Ray restarted); None: no node."""
    node = job.driver_node_id
    if not node or dash is None:
        return None
    p = logparse.Progress()
    try:
        raw = dash.log_tail(row["id"], node, lines, max_bytes=8 << 20)
        tail = logparse.clean_block(raw.decode("utf-8", "replace"))
        logparse.feed_block(p, tail)
        if head_scan and not (p.wandb_url and p.total):
            scan_head(dash, row["id"], node, p)
    except Exception:
        return False  # a dead node, a restarting dashboard, pruned meanwhile: the row stays with what the queue kept
    if tails is not None:
        tails[row["id"]] = raw
    _log_facts(row, p, tail)
    return True


def _kept_facts(row: JobRow, job: JobView, tails: Optional[dict[str, bytes]]) -> None:
    """:func:`_ended_log_facts` from what was kept of the log where Ray no longer serves it: the end
    its runner kept on the storage root (readable here), else the local record's copy."""
    from rayjobs.views import joblog

    kept = joblog.kept_log(job, whole=False)
    if kept is None:
        return
    tail = logparse.clean_block(kept.text)
    p = logparse.Progress()
    logparse.feed_block(p, tail)
    if tails is not None and kept.source == "storage":
        tails[row["id"]] = kept.text.encode()
    _log_facts(row, p, tail)


def _log_facts(row: JobRow, p: logparse.Progress, tail: str) -> None:
    row["total_steps"] = p.total or row.get("total_steps")
    row["wandb_url"] = p.wandb_url or row.get("wandb_url")
    if row["step"] is None and p.step is not None:  # no metrics file kept (a plain log's progress only)
        row["step"], row["score"] = p.step, p.last.get("critic/score/mean")
    if row["status"] == Status.FAILED:
        row["error"] = logparse.failure_line(tail)
    if p.failures:
        row["failures"] = list(p.failures)
    if p.cause and not row.get("cause") and row["status"] == Status.FAILED:
        row["cause"] = p.cause


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


def rows(jobs: Iterable[JobView], dash: Optional["Dashboard"], progress: bool = True, limit_progress: int = 100,
         tails: Optional[dict[str, bytes]] = None) -> list[tuple[JobRow, JobView]]:
    """(row, job) for ``jobs``, oldest first: progress for the newest ``limit_progress`` that run or
    ran in Ray (their logs read), and for every ended one from what the queue kept (``final``).
    ``tails``: where the raw log tails read go (by id), so a final copy needs no second read.
    Reads; writes nothing.
    """
    jobs = sorted(jobs, key=order)
    out = [base_row(j) for j in jobs]
    if progress and out:
        in_ray = [i for i, j in enumerate(jobs) if not (j.from_queue and j.pruned)]
        read = set(in_ray[-limit_progress:])
        todo = sorted(read | {i for i, j in enumerate(jobs) if j.from_queue})
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda i: add_progress(out[i], jobs[i], dash, tails=tails, log=i in read), todo))
    for r in out:
        if r["attempt"] is None:
            r["attempt"] = 0 if r["status"] in NOT_STARTED else 1
    return list(zip(out, jobs))


def select(jobs: Iterable[JobView], sweep: Optional[str] = None, status: Optional[list[str]] = None,
           experiment: Optional[str] = None, include_all: bool = False) -> list[JobView]:
    """Filter jobs; an unknown sweep id is an error naming the closest ones."""
    jobs = list(jobs)
    mine = jobs if include_all else [j for j in jobs if is_rayjobs(j)]
    if sweep:
        named = sweep_named(sweep, {j.meta.sweep for j in jobs})
        mine = [j for j in jobs if j.meta.sweep == named]
    if experiment:
        mine = [j for j in mine if j.meta.experiment == experiment]
    return mine


def resolve_sweep(sweep: str, jobs: Iterable[JobView]) -> str:
    """The sweep id ``sweep`` names (itself, or the one id it starts) among the sweeps of ``jobs`` and
    of the local record (a sweep the cluster forgot is still one); an unknown one names the closest."""
    from rayjobs import ledger

    return sweep_named(sweep, {j.meta.sweep for j in jobs} | {str(e.get("sweep") or "") for e in ledger.entries()})


def sweep_named(sweep: str, names: Iterable[str]) -> str:
    """:func:`rayjobs.contract.ids.resolve_sweep`, its refusal a :class:`JobNotFound` (one line, exit 2)."""
    from rayjobs.contract import ids

    try:
        return ids.resolve_sweep(sweep, names)
    except LookupError as e:
        raise JobNotFound(str(e)) from None


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



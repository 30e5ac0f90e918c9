"""A queued job's record through its life: its submit request at admission, what a finish, a lost
run or a preemption makes of it. Pure functions of :class:`~rayjobs.contract.record.JobRecord`
(no Ray; the only I/O is reading the run's last metrics and checkpoint from the storage root)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from rayjobs.contract.paths import metrics_files
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State, Status
from rayjobs.oncluster.checkpointwatch import saved_step
from rayjobs.shared import stamp


def submit_kwargs(rec: JobRecord, code_dir: Path) -> dict[str, Any]:
    """The ``submit_job`` keyword arguments of a record, its code from the durable copy, its
    metadata with the admission's (the runner logs when and how long it waited).

    A job that Ray lost (``lost`` runs) gets fewer retries left, so its attempts stay bounded.
    """
    spec = dict(rec.spec)
    spec["runtime_env"] = dict(spec.get("runtime_env") or {}, working_dir=str(code_dir))
    meta = rec.meta
    if rec.lost:
        meta = meta.with_(max_retries=max(0, meta.max_retries - rec.lost), lost_runs=rec.lost)
    if rec.admitted_at:
        waited = float(rec.admitted_at) - float(rec.queued_at or rec.admitted_at)
        meta = meta.with_(admitted_at=stamp(float(rec.admitted_at)), waited_s=f"{waited:.2f}",
                          admission_note=str(rec.note or "")[:300])
    spec["metadata"] = meta.to_ray()
    return spec


def next_attempt(run_dir: Optional[str]) -> int:
    """The attempt number a new run of ``run_dir`` starts at (1 + the attempts it already had)."""
    return 1 + len(metrics_files(run_dir))


def lost_attempt(rec: JobRecord) -> JobRecord:
    """A record whose Ray job was lost with the head: waiting again (a new attempt resumes from its
    checkpoint) while ``rayjobs.max_retries`` allows, else done FAILED (cluster restarted)."""
    lost = rec.lost + 1
    # its new attempt is admitted anew (the runner's "admitted after X s" line must not reuse the old one)
    ran = _ran(rec)
    gone = sorted(set(ran) - set(rec.attempts))  # the attempts of the run that was lost
    log = f"{rec.ray_logs}/job-driver-{rec.id}.log" if rec.ray_logs else None  # it stays in that session's dir
    out = rec.with_(lost=lost, admitted_at=None, freed_at=None, attempts=ran, spans=rec.span_closed(time.time()),
                    history=rec.history + ({"lost_at": time.time(), "attempts": gone, "log": log},))
    if lost <= rec.meta.max_retries:
        return out.with_(state=State.WAITING, note="requeued: the cluster restarted while it ran; it resumes from its checkpoint")
    return out.with_(state=State.DONE, status=Status.FAILED, finished_at=time.time(), cause="cluster restarted",
                     message="the cluster restarted while it ran and rayjobs.max_retries allows no new attempt (cluster restarted)")


def requeued_record(rec: JobRecord, reaped: Sequence[str] = ()) -> JobRecord:
    """A preempted job once stopped: waiting again at its old place (``queued_at`` and the order keys
    in its metadata are kept), with what the preemption cost: the checkpoint it resumes from, the
    step it had reached and the steps it will redo."""
    ckpt = saved_step(rec.meta.checkpoint_dir)
    last = (last_metrics(rec.meta.run_dir) or {}).get("step")
    info = {"by": (rec.preempting or {}).get("by"), "at": time.time(), "checkpoint_step": ckpt,
            "step": last, "redo": max(0, int(last or 0) - int(ckpt or 0)), "why": (rec.preempting or {}).get("why")}
    return rec.with_(state=State.WAITING, preempting=None, admitted_at=None, freed_at=None, note="", preempted=info,
                     spans=rec.span_closed(float(info["at"])),
                     preemptions=rec.preemptions + 1, history=rec.history + ({"preempted": info},),
                     reaped=rec.reaped + tuple(reaped), attempts=_ran(rec))


def finish_record(rec: JobRecord, status: str, message: str = "", info: Optional[Mapping[str, Any]] = None,
                  reaped: Sequence[str] = ()) -> JobRecord:
    """A record once its job ended: status, Ray's message, where the log is, its final metrics and
    last checkpoint, the attempts it ran, and what the reaper had to end of it (a line each)."""
    info = dict(info or {})
    meta = rec.meta
    msg = message or str(info.get("message") or "").split(", last available logs")[0]
    attempts = _ran(rec)
    now = time.time()
    out = rec.with_(state=State.DONE, status=Status.of(status), finished_at=now,
                    message=" ".join(msg.split())[:500], attempts=attempts, preempting=None,
                    reaped=rec.reaped + tuple(reaped), spans=rec.span_closed(now))
    if info.get("driver_node_id"):
        out = out.with_(log={"node_id": str(info["driver_node_id"]), "file": f"job-driver-{rec.id}.log"})
    if info.get("start_time"):
        out = out.with_(start_time=info["start_time"])
    if info.get("end_time"):
        out = out.with_(end_time=info["end_time"])
    final = last_metrics(meta.run_dir, attempts)
    ckpt = saved_step(meta.checkpoint_dir)
    cause = runner_cause(str(info.get("message") or "")) if status == Status.FAILED and not message else None
    return out.with_(final=final or rec.final, checkpoint_step=ckpt if ckpt is not None else rec.checkpoint_step,
                     cause=cause or rec.cause)


def _ran(rec: JobRecord) -> tuple[int, ...]:
    """The run's attempts this job has run so far: its earlier ones, and those since its first
    attempt of this admission (a resume of the same run numbers its own from where this stopped)."""
    start = rec.first_attempt
    if start is None:
        return rec.attempts
    now = sorted(a for a in metrics_files(rec.meta.run_dir) if a >= start)
    return tuple(sorted(set(rec.attempts) | set(now)))


#: The runner's last line when it gives up (rayjobs.oncluster.runner.fail): "job failed: <cause> (<why>)".
RUNNER_CAUSE = re.compile(r"\[rayjobs\] job failed: (?P<cause>.+?)(?: \((?:not retried|no retry left|RAYJOBS_MAX)[^\n]*\))?\s*$", re.M)


def runner_cause(message: str) -> Optional[str]:
    """The one-line cause the runner gave (Ray's job message quotes the log's end), or None."""
    found = RUNNER_CAUSE.findall(message)
    return " ".join(found[-1].split())[:300] if found else None


def last_metrics(run_dir: Optional[str], attempts: Sequence[int] = ()) -> Optional[dict[str, Any]]:
    """The last step of a run's newest metrics file (of ``attempts`` only, when given: a job's own,
    not a later resume's): ``{"step", "data", "attempts"}``."""
    files = metrics_files(run_dir)
    mine = {a: p for a, p in files.items() if not attempts or a in attempts}
    for _, f in sorted(mine.items(), reverse=True):
        try:
            lines = [ln for ln in f.read_text().splitlines() if ln.strip()]
        except OSError:
            continue
        for ln in reversed(lines):
            try:
                doc = json.loads(ln)
                return {"step": doc.get("step"), "data": doc.get("data") or {}, "attempts": len(mine)}
            except ValueError:
                continue
    return {"step": None, "data": {}, "attempts": len(mine)} if mine else None

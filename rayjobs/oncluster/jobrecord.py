"""A queued job's record through its life: the submit request at admission, what a finish or a lost
run makes of it, the line the history file keeps. Pure functions on plain dicts (no Ray, no I/O
but the final metrics file)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Optional

from rayjobs.oncluster.checkpointwatch import saved_step
from rayjobs.oncluster.store import DONE, WAITING
from rayjobs.shared import stamp


def submit_kwargs(rec: dict[str, Any], code_dir: Path) -> dict[str, Any]:
    """The ``submit_job`` keyword arguments of a record, its code from the durable copy.

    A job that Ray lost (``lost`` runs) gets fewer retries left, so its attempts stay bounded.
    """
    spec = dict(rec["spec"])
    spec["runtime_env"] = dict(spec.get("runtime_env") or {}, working_dir=str(code_dir))
    meta = dict(spec.get("metadata") or {})
    lost = int(rec.get("lost") or 0)
    if lost:
        meta["max_retries"] = str(max(0, int(meta.get("max_retries") or 0) - lost))
        meta["lost_runs"] = str(lost)
    if rec.get("admitted_at"):  # the runner says when, and how long it waited (its log's first line)
        meta["admitted_at"] = stamp(float(rec["admitted_at"]))
        meta["waited_s"] = f"{float(rec['admitted_at']) - float(rec.get('queued_at') or rec['admitted_at']):.2f}"
        if rec.get("note"):
            meta["admission_note"] = str(rec["note"])[:300]
    spec["metadata"] = meta
    return spec


def lost_attempt(rec: dict[str, Any]) -> dict[str, Any]:
    """A record whose Ray job was lost with the head: waiting again (a new attempt resumes from its
    checkpoint) while ``rayjobs.max_retries`` allows, else done FAILED (cluster restarted)."""
    meta = (rec.get("spec") or {}).get("metadata") or {}
    lost = int(rec.get("lost") or 0) + 1
    # its new attempt is admitted anew (the runner's "admitted after X s" line must not reuse the old one)
    out = dict({k: v for k, v in rec.items() if k != "admitted_at"}, lost=lost,
               history=list(rec.get("history") or []) + [{"lost_at": time.time()}])
    if lost <= int(meta.get("max_retries") or 0):
        return dict(out, state=WAITING, note="requeued: the cluster restarted while it ran; it resumes from its checkpoint")
    return dict(out, state=DONE, status="FAILED", finished_at=time.time(), cause="cluster restarted",
                message="the cluster restarted while it ran and rayjobs.max_retries allows no new attempt (cluster restarted)")


def requeued_record(rec: dict[str, Any], reaped: Optional[list[str]] = None) -> dict[str, Any]:
    """A preempted job once stopped: waiting again at its old place (``queued_at`` and the order keys
    in its metadata are kept), with what the preemption cost: the checkpoint it resumes from, the
    step it had reached and the steps it will redo."""
    meta = (rec.get("spec") or {}).get("metadata") or {}
    ckpt = saved_step(meta.get("checkpoint_dir"))
    last = (last_metrics(meta.get("run_dir")) or {}).get("step")
    info = {"by": (rec.get("preempting") or {}).get("by"), "at": time.time(), "checkpoint_step": ckpt,
            "step": last, "redo": max(0, int(last or 0) - int(ckpt or 0))}
    out = {k: v for k, v in rec.items() if k not in ("preempting", "admitted_at", "note")}
    out.update(state=WAITING, preempted=info, preemptions=int(rec.get("preemptions") or 0) + 1,
               history=list(rec.get("history") or []) + [{"preempted": info}])
    if reaped:
        out["reaped"] = list(rec.get("reaped") or []) + list(reaped)
    return out


def finish_record(rec: dict[str, Any], status: str, message: str = "",
                  info: Optional[dict[str, Any]] = None, reaped: Optional[list[str]] = None) -> dict[str, Any]:
    """A record once its job ended: status, Ray's message, where the log is, the final metrics, and
    what the reaper (:mod:`rayjobs.oncluster.reaper`) had to end of it (``reaped``: one line each)."""
    info = info or {}
    meta = (rec.get("spec") or {}).get("metadata") or {}
    msg = message or str(info.get("message") or "").split(", last available logs")[0]
    out = dict(rec, state=DONE, status=status, finished_at=time.time(), message=" ".join(msg.split())[:500])
    if info.get("driver_node_id"):
        out["log"] = {"node_id": info["driver_node_id"], "file": f"job-driver-{rec['id']}.log"}
    for k in ("start_time", "end_time"):
        if info.get(k):
            out[k] = info[k]
    final = last_metrics(meta.get("run_dir"))
    if final:
        out["final"] = final
    ckpt = saved_step(meta.get("checkpoint_dir"))
    if ckpt is not None:  # what `rayjobs resume` starts from
        out["checkpoint_step"] = ckpt
    if reaped:  # added to what an earlier run of the job (lost with the head) left, if any
        out["reaped"] = list(rec.get("reaped") or []) + list(reaped)
    cause = runner_cause(str(info.get("message") or "")) if status == "FAILED" and not message else None
    if cause:
        out["cause"] = cause
    return out


#: The runner's last line when it gives up (rayjobs.oncluster.runner.fail): "job failed: <cause> (<why>)".
RUNNER_CAUSE = re.compile(r"\[rayjobs\] job failed: (?P<cause>.+?)(?: \((?:not retried|no retry left|RAYJOBS_MAX)[^\n]*\))?\s*$", re.M)


def runner_cause(message: str) -> Optional[str]:
    """The one-line cause the runner gave (Ray's job message quotes the log's end), or None."""
    found = RUNNER_CAUSE.findall(message)
    return " ".join(found[-1].split())[:300] if found else None


def last_metrics(run_dir: Optional[str]) -> Optional[dict[str, Any]]:
    """The last step of a run's newest metrics file (verl's file logger): ``{"step", "data", "attempts"}``."""
    if not run_dir:
        return None
    files = sorted(Path(run_dir).glob("metrics.*.jsonl"), key=lambda p: int(p.name.split(".")[1]) if p.name.split(".")[1].isdigit() else 0)
    for f in reversed(files):
        try:
            lines = [ln for ln in f.read_text().splitlines() if ln.strip()]
        except OSError:
            continue
        for ln in reversed(lines):
            try:
                rec = json.loads(ln)
                return {"step": rec.get("step"), "data": rec.get("data") or {}, "attempts": len(files)}
            except ValueError:
                continue
    return {"step": None, "data": {}, "attempts": len(files)} if files else None


def history_row(rec: dict[str, Any]) -> dict[str, Any]:
    """What the history file keeps of a finished job (what ``rayjobs list``/``status`` show of it)."""
    spec = rec.get("spec") or {}
    return {"id": rec["id"], "status": rec.get("status"), "metadata": spec.get("metadata") or {},
            "queued_at": rec.get("queued_at"), "admitted_at": rec.get("admitted_at"),
            "finished_at": rec.get("finished_at"), "start_time": rec.get("start_time"), "end_time": rec.get("end_time"),
            "message": rec.get("message"), "lost": rec.get("lost", 0), "log": rec.get("log"), "final": rec.get("final"),
            "pruned": bool(rec.get("pruned")), "cause": rec.get("cause"), "checkpoint_step": rec.get("checkpoint_step"),
            "reaped": list(rec.get("reaped") or []), "preemptions": int(rec.get("preemptions") or 0)}

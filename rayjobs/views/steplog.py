"""JSON step records: each verl step line of a job's log, and rayjobs' own events, as one JSON object.

What ``rayjobs tail --json`` and ``rayjobs logs --json`` print (JSON Lines on stdout) and
:meth:`rayjobs.api.Job.steps` yields. The shape and the reasons for it are in docs/design.md ("JSON
step logs"); in short, one step::

    {"ts": "2026-05-01T12:00:03.512Z", "ts_source": "read", "event": "step", "job": "ppo-1a2b",
     "run": "ppo-1a2b", "attempt": 1, "step": 3, "total_steps": 6,
     "actor/pg_loss": -0.03, "critic/score/mean": 0.5, "timing_s/step": 0.2, ...}

Lines are recognised by :meth:`rayjobs.views.logparse.Progress.feed_kind`, the parser every view
uses; this module only shapes what it found. verl's keys are flat, beside the envelope, spelt as
verl spells them: every verl metric name holds a ``/`` and no envelope name does, so they cannot
clash (a verl key that would is written ``verl/<key>``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import deque
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, TextIO

from rayjobs.contract.status import Status
from rayjobs.contract.wire import JobView
from rayjobs.shared import TERMINAL, parse_stamp
from rayjobs.views import logparse

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.contract.row import JobRow

#: The object's own fields; a verl key spelt like one of these is written ``verl/<key>``.
ENVELOPE = frozenset({"ts", "ts_source", "event", "job", "run", "attempt", "step", "total_steps", "status", "cause"})
#: The lines that become objects: :meth:`Progress.feed_kind`'s kind -> the object's ``event``.
EVENTS = {"step": "step", "admitted": "admitted", "attempt": "attempt_started", "attempt_failed": "attempt_failed",
          "last_checkpoint": "last_checkpoint", "checkpoint_saved": "checkpoint_saved"}
#: How much of a log's end is kept to name a failure (as ``rayjobs tail`` does).
TAIL_BYTES = 65536


def iso(t: float) -> str:
    """``2026-05-01T12:00:03.512Z``: ISO 8601, UTC, milliseconds."""
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finite(v: float) -> Optional[float]:
    """NaN and infinities -> None (JSON null): strict JSON has no such numbers, and Elasticsearch
    and Loki's ``json`` stage reject a line that holds one."""
    return v if math.isfinite(v) else None


def dumps(rec: dict[str, Any]) -> str:
    """One record as one line of strict JSON."""
    return json.dumps(rec, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class StepRecords:
    """Cleaned log text in, records out, in log order (constant memory: one :class:`Progress`).

    Args:
        job_id: the job's id (each record's ``job``).
        job_of: the job's view (None: not known yet), asked when a record is made (the run name
            is in its metadata; a follower learns it after the first bytes).
        clock: the time a line without a stamp of its own was read (epoch seconds).
    """

    def __init__(self, job_id: str, job_of: Callable[[], Optional["JobView"]] = lambda: None, clock: Callable[[], float] = time.time) -> None:
        self.job_id, self.job_of, self.clock = job_id, job_of, clock
        self.progress = logparse.Progress()

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The records of a block of complete, cleaned lines (``\\n``-separated)."""
        if not any(m in text for m in logparse.MARKERS):
            return []
        out = []
        for line in text.split("\n"):
            if any(m in line for m in logparse.MARKERS):
                rec = self.line(line)
                if rec is not None:
                    out.append(rec)
        return out

    def line(self, line: str) -> Optional[dict[str, Any]]:
        """One cleaned line -> its record, or None (not a step or an event; still folded in, so
        the attempt and total steps of later records are right)."""
        kind = self.progress.feed_kind(line)
        if kind not in EVENTS:
            return None
        stamped = parse_stamp(line) if "UTC" in line else None  # the runner's own stamp, where it wrote one
        rec = self._base(EVENTS[kind], stamped, "log")
        p = self.progress
        if kind == "step":
            rec.update(step=p.step, total_steps=p.total)
            rec.update({(f"verl/{k}" if k in ENVELOPE else k): finite(v) for k, v in p.last.items()})
        elif kind in ("last_checkpoint", "checkpoint_saved"):
            rec["step"] = p.checkpoint
        elif kind == "attempt_failed":
            rec["cause"] = p.cause
        return rec

    def end(self, status: str, cause: Optional[str] = None, ended_at: Optional[float] = None) -> dict[str, Any]:
        """The ``job_ended`` record: ``status``, ``cause`` (FAILED), the last step and total seen;
        ``ended_at``: Ray's end time of the job (epoch seconds), else now."""
        rec = self._base("job_ended", ended_at, "ray")
        rec.update(status=status, cause=cause, step=self.progress.step, total_steps=self.progress.total)
        return rec

    def _base(self, event: str, t: Optional[float], source: str) -> dict[str, Any]:
        if t is None:
            t, source = self.clock(), "read"
        job = self.job_of()
        run = (job.meta.run if job is not None else "") or None
        return {"ts": iso(t), "ts_source": source, "event": event, "job": self.job_id, "run": run,
                "attempt": self.progress.attempt}


class StepWindow:
    """The records from the N-th last step on (``--tail N`` / ``-n N`` in JSON mode): N step
    records, with the events among and after them; earlier ones are dropped as later steps come."""

    def __init__(self, steps: int) -> None:
        self.steps = max(0, steps)
        self.records: deque = deque()
        self.held = 0  #: step records in the window
        self.dropped = 0  #: step records dropped

    def add(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)
        if rec["event"] != "step":
            return
        self.held += 1
        if self.held <= self.steps:
            return
        while self.held > self.steps:
            if self.records.popleft()["event"] == "step":
                self.held -= 1
                self.dropped += 1
        while self.records and self.records[0]["event"] != "step":  # the events before the first step kept
            self.records.popleft()


def over(chunks: Iterable[str], records: StepRecords, tail: Optional[int] = None) -> Iterator[dict[str, Any]]:
    """The records of cleaned log text (in chunks of whole lines), in order; ``tail``: the
    :class:`StepWindow` of the last N steps (the whole text is still read: attempt and total)."""
    window = StepWindow(tail) if tail is not None else None
    for text in chunks:
        for rec in records.feed(text):
            if window is None:
                yield rec
            else:
                window.add(rec)
    if window is not None:
        yield from window.records


def log_records(d: "Dashboard", job_id: str, *, tail: Optional[int] = None) -> Iterator[dict[str, Any]]:
    """The records of a job's log as it is now (:meth:`rayjobs.api.Job.steps`, ``logs --json``);
    ``tail``: from the N-th last step on. An ended job's last record is ``job_ended``.

    Raises:
        NoSuchJob: neither Ray nor the queue knows the job.
    """
    from rayjobs.errors import NoSuchJob
    from rayjobs.views import joblog, queuestatus

    job = queuestatus.job(d, job_id)
    if job is None:
        raise NoSuchJob(f"no job {job_id!r} on the cluster or in its queue; `rayjobs list` shows the ids")
    status = job.status  # read before the log: an ended job's log is whole
    records = StepRecords(job_id, job_of=lambda: job)
    end = bytearray()

    def chunks() -> Iterator[str]:
        for text in joblog.iter_log(d, job_id):
            end.extend(text[-TAIL_BYTES:].encode("utf-8", "replace"))
            del end[:-TAIL_BYTES]
            yield text

    yield from over(chunks(), records, tail)
    if status in TERMINAL:
        cause = logparse.failure_summary(job, bytes(end)) if status == Status.FAILED else None
        yield records.end(status, cause, ended_at=ended_at(job))


def kept_records(row: "JobRow", text: str, *, tail: Optional[int] = None) -> Iterator[dict[str, Any]]:
    """The records of the log's end kept in the local record (``rayjobs.ledger``: the last
    200 lines) for ``row``, the job's kept row: its cluster is gone or forgot it. ``job_ended``
    comes last when the row is the job's final state. A step whose attempt line is not in the kept
    end has ``attempt`` null (unless a failure line names it); ``total_steps`` comes from the row.
    """
    kept = JobView(submission_id=str(row["id"]), status=str(row.get("status")), state="",
                   metadata={"run": str(row["run"])} if row.get("run") else {})
    records = StepRecords(str(row["id"]), job_of=lambda: kept)
    records.progress.total = row.get("total_steps")
    yield from over([logparse.clean_block(text)], records, tail)
    status = str(row.get("status"))
    if row.get("final") and status in TERMINAL:
        cause = (row.get("cause") or row.get("error") or row.get("message")) if status == Status.FAILED else None
        yield records.end(status, cause, ended_at=_epoch(row.get("end_time")))


def _epoch(text: Any) -> Optional[float]:
    """An ISO 8601 time (a row's ``end_time``) in epoch seconds, or None."""
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else None
    except ValueError:
        return None


def ended_at(job: Optional["JobView"]) -> Optional[float]:
    """Ray's end time of a job (its details give milliseconds), in epoch seconds."""
    ms = job.end_time if job is not None else None
    return ms / 1000 if isinstance(ms, (int, float)) and ms > 0 else None


class JsonView:
    """``rayjobs tail --json``'s view (:mod:`rayjobs.views.jobtail`): the records of the text
    written to it, one JSON line each on stdout; the log itself is not printed.

    ``hold`` N: keep the records of what the log held before attaching and print, on
    :meth:`release`, only those from the N-th last step on.
    """

    def __init__(self, records: StepRecords, hold: Optional[int] = None, out: Optional[TextIO] = None,
                 say: Optional[Callable[[str], None]] = None) -> None:
        self.records = records
        self.window: Optional[StepWindow] = StepWindow(hold) if hold is not None else None
        self.out = out or sys.stdout
        self.say = say or (lambda msg: None)
        self.emitted = 0

    def __enter__(self) -> "JsonView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.out.flush()

    def write(self, text: str) -> None:
        recs = self.records.feed(text) if text else []
        if self.window is not None:
            for rec in recs:
                self.window.add(rec)
        else:
            self.emit(*recs)

    def update(self, job: Optional["JobView"], progress: Any, changed: bool = False) -> None:
        pass

    def release(self, job_id: str) -> None:
        """Print the held window (saying how many steps were left out) and stop holding."""
        if self.window is None:
            return
        w, self.window = self.window, None
        if w.dropped:
            self.say(f"{w.dropped} earlier steps not shown (all of them: rayjobs logs {job_id} --json)")
        self.emit(*w.records)

    def emit(self, *recs: dict[str, Any]) -> None:
        if recs:
            self.out.write("".join(dumps(r) + "\n" for r in recs))
            self.out.flush()
            self.emitted += len(recs)

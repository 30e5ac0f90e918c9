"""Where the GPU-hours went: the GPU time the queue handed out, split per job, sweep and user.

Each job's allocated GPU-seconds (its GPUs x the spans it held them: admission until its GPUs went
back to the queue -- its trainer gone and its leftovers reaped, before its Ray job is settled -- one
span per admission, kept in its record) split into

* **productive** -- the steps that were kept (``timing_s/step`` of each step of its run's history),
* **redone** -- steps trained again after a retry, a preemption or a stop (logged by an attempt,
  then replaced by a later attempt resumed from an earlier checkpoint),
* **start-up** -- admission to the first step of each span (Ray actors, model load, the rollout
  engine): the span's start to its attempt's first step (the last step's time, the metrics file's
  mtime, less the attempt's step times),
* **held idle** -- the rest: allocated, no step (a stop-at-checkpoint wait, the end of a run),

and apart, the time it **waited** in the queue (queued to admitted, and between admissions).
ETTR = productive / allocated. Read on the head (it sees the storage root): the records and
the per-attempt metrics files. Pure but for :func:`attempt_facts`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from rayjobs.contract.metrics import read_jsonl
from rayjobs.contract.paths import metrics_files
from rayjobs.contract.record import JobRecord

PARTS = ("productive", "redone", "startup", "idle")


@dataclass(frozen=True)
class Attempt:
    """One attempt's metrics file: ``(step, seconds)`` per logged step, and when it last wrote (epoch s)."""

    number: int
    steps: tuple[tuple[int, float], ...]
    last_at: float


@dataclass
class Split:
    """GPU-seconds by part, the wait (seconds), and how many jobs."""

    productive: float = 0.0
    redone: float = 0.0
    startup: float = 0.0
    idle: float = 0.0
    waited: float = 0.0
    jobs: int = 0
    redone_steps: int = 0

    @property
    def allocated(self) -> float:
        return self.productive + self.redone + self.startup + self.idle

    def add(self, o: "Split") -> None:
        for k in (*PARTS, "waited", "jobs", "redone_steps"):
            setattr(self, k, getattr(self, k) + getattr(o, k))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["allocated"] = self.allocated
        d["ettr"] = self.productive / self.allocated if self.allocated else None
        return d


@dataclass
class Usage:
    """The split of every job, and summed per user, per sweep and in all."""

    total: Split = field(default_factory=Split)
    users: dict[str, Split] = field(default_factory=dict)
    sweeps: dict[str, Split] = field(default_factory=dict)
    jobs: dict[str, Split] = field(default_factory=dict)
    about: dict[str, dict[str, Any]] = field(default_factory=dict)  #: per job: user, sweep, last_at


def attempt_facts(run_dir: str, attempts: Iterable[int]) -> list[Attempt]:
    """The job's own attempts' metrics files, read (missing ones skipped)."""
    files = metrics_files(run_dir)
    out = []
    for a in sorted(set(attempts)):
        p = files.get(a)
        if p is None:
            continue
        try:
            last_at = Path(p).stat().st_mtime
        except OSError:
            continue
        steps = tuple((s, float(d.get("timing_s/step", 0.0))) for s, d in read_jsonl(p))
        out.append(Attempt(a, steps, last_at))
    return out


def kept_and_redone(attempts: Sequence[Attempt]) -> tuple[float, float, int]:
    """(seconds of kept steps, seconds of redone ones, steps redone): a later attempt's steps replace
    the steps an earlier one logged from its first step on (it resumed from an earlier checkpoint)."""
    kept: dict[int, float] = {}
    redone, n = 0.0, 0
    for a in attempts:
        if a.steps:
            first = a.steps[0][0]
            for s in [s for s in kept if s >= first]:
                redone += kept.pop(s)
                n += 1
        for s, t in a.steps:
            if s in kept:  # logged twice in one attempt: count once
                redone += kept[s]
                n += 1
            kept[s] = t
    return sum(kept.values()), redone, n


def split_job(spans: Sequence[tuple[float, float]], gpus: int, attempts: Sequence[Attempt],
              waited: float) -> Split:
    """One job's split (GPU-seconds): see the module's docstring. The parts add up to the allocation."""
    allocated = gpus * sum(max(0.0, b - a) for a, b in spans)
    kept, redone, n = kept_and_redone(attempts)
    startup = 0.0
    for a, b in spans:
        mine = [t for t in attempts if a <= t.last_at <= b + 5.0]  # its file's last write: within the span
        if not mine:
            startup += b - a  # never reached a step
            continue
        first_step = mine[0].last_at - sum(s for _, s in mine[0].steps)
        startup += min(b - a, max(0.0, first_step - a))
    productive, redone_s, startup = gpus * kept, gpus * redone, gpus * startup
    over = productive + redone_s + startup - allocated
    if over > 0:  # step times and file times disagree a little: the start-up estimate gives way first
        cut = min(startup, over)
        startup -= cut
        over -= cut
        productive -= min(productive, over)
    idle = max(0.0, allocated - productive - redone_s - startup)
    return Split(productive, redone_s, startup, idle, waited, 1, n)


def waited_s(rec: JobRecord, spans: Sequence[tuple[float, float]], now: float) -> float:
    """Seconds in the queue: queued to first admission, between admissions, and waiting now."""
    t, out = float(rec.queued_at or 0.0), 0.0
    for a, b in spans:
        out += max(0.0, a - t)
        t = b
    if not rec.done and not rec.admitted_at:
        out += max(0.0, now - t)
    return out


def usage(records: Iterable[JobRecord], now: float, *, user: Optional[str] = None, sweep: Optional[str] = None,
          since: Optional[float] = None, facts: Any = attempt_facts) -> Usage:
    """The split over ``records`` (those of ``user``/``sweep``, queued or active after ``since``)."""
    u = Usage()
    for rec in records:
        m = rec.meta
        if (user and m.user != user) or (sweep and m.sweep != sweep and not rec.id.startswith(sweep)):
            continue
        spans = list(rec.spans) + ([(float(rec.admitted_at), now)] if rec.admitted_at and not rec.done else [])
        if since is not None and max([float(rec.queued_at or 0)] + [b for _, b in spans]) < since:
            continue
        attempts = facts(m.run_dir, list(rec.attempts) + _current(rec)) if m.run_dir else []
        s = split_job(spans, m.gpus, attempts, waited_s(rec, spans, now))
        u.jobs[rec.id] = s
        # what a laptop needs to filter its copy of the rows again (the cluster gone)
        u.about[rec.id] = {"user": m.user or "unknown", "sweep": m.sweep or "",
                           "last_at": max([float(rec.queued_at or 0)] + [b for _, b in spans])}
        u.total.add(s)
        u.users.setdefault(m.user or "unknown", Split()).add(s)
        if m.sweep:
            u.sweeps.setdefault(m.sweep, Split()).add(s)
    return u


def _current(rec: JobRecord) -> list[int]:
    """The attempts of a job still running (its record lists them only once it ended)."""
    if rec.done or rec.first_attempt is None:
        return []
    return [a for a in metrics_files(rec.meta.run_dir) if a >= rec.first_attempt]


def to_json(u: Usage) -> dict[str, Any]:
    return {"total": u.total.to_json(), "users": {k: v.to_json() for k, v in sorted(u.users.items())},
            "sweeps": {k: v.to_json() for k, v in sorted(u.sweeps.items())},
            "jobs": {k: dict(v.to_json(), **u.about.get(k, {})) for k, v in u.jobs.items()}}

"""A trace: the jobs a team submitted, what each asked for and what running it takes -- the input
of the simulator (:mod:`rayjobs.sim.engine`), from the week generator (:mod:`rayjobs.sim.week`),
a team's own history (:mod:`rayjobs.sim.history`) or a file.

**The file** is JSON Lines (UTF-8), one object per line; blank lines and lines starting with ``#``
are skipped. An optional first object ``{"trace": {...}}`` names the trace and its cluster
(``name``, ``seed``, ``nodes``, ``gpus_per_node``, ``start``: the epoch second of time 0). Every
other line is one job:

=================  =====================================================================  =========
key                meaning                                                                default
=================  =====================================================================  =========
``id``             the job's id (unique; a sweep point's is ``<sweep>-<n>``)              required
``user``           who submitted it                                                       required
``arrival_s``      when it was submitted, seconds after time 0                            required
``groups``         GPUs of each placement group, one node each: ``[8, 8]``                required
``steps``          training steps it runs to succeed                                      1
``step_s``         seconds a step takes                                                   required
``startup_s``      admission to its first step (processes, model load, rollout engine)    180
``ckpt_every``     steps between checkpoints (0: it saves none)                           0
``ckpt_s``         seconds a checkpoint save takes                                        0
``priority``       ``rayjobs.priority``                                                   0
``preemptible``    ``rayjobs.preemptible``                                                false
``sweep``          its sweep's id ("" for a single run)                                   ""
``halving``        its sweep's ``rayjobs.halving`` settings (the metadata's JSON), or ""  ""
``quality``        the level of its halving metric (higher is better)                     0
``fail_at``        steps at which an attempt crashes, each once, in order                 []
``retries``        ``rayjobs.max_retries``: new attempts after a crash                    0
``after``          ``rayjobs.after``: jobs that must succeed before it starts             []
``time_limit_s``   the run time its user would ask a batch system for (Slurm's ``-t``)    2 x its run
``kind``           its class in the metrics: eval, single, multinode, sweep               from the rest
=================  =====================================================================  =========

Bad input: :class:`TraceError`, one line naming the line and the key.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Optional

#: The job classes the metrics are split by.
KINDS = ("eval", "single", "multinode", "sweep")
#: Time 0 of a generated week: Monday 2027-01-04 00:00 UTC.
WEEK_START = 1_799_020_800.0


class TraceError(ValueError):
    """A trace that cannot be read: one line saying where and what."""


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace (the file's keys; see the module's docstring)."""

    id: str
    user: str
    arrival_s: float
    groups: tuple[int, ...]
    step_s: float
    steps: int = 1
    startup_s: float = 180.0
    ckpt_every: int = 0
    ckpt_s: float = 0.0
    priority: int = 0
    preemptible: bool = False
    sweep: str = ""
    halving: str = ""
    quality: float = 0.0
    fail_at: tuple[int, ...] = ()
    retries: int = 0
    after: tuple[str, ...] = ()
    time_limit_s: float = 0.0
    kind: str = ""

    @property
    def gpus(self) -> int:
        return sum(self.groups)

    @property
    def work_s(self) -> float:
        """Seconds of training steps to succeed (no start-up, no checkpoint saves)."""
        return self.steps * self.step_s

    def run_s(self) -> float:
        """Seconds from admission to success, left alone: start-up, steps, checkpoint saves."""
        saves = (self.steps - 1) // self.ckpt_every if self.ckpt_every else 0
        return self.startup_s + self.work_s + saves * self.ckpt_s

    @property
    def limit_s(self) -> float:
        return self.time_limit_s or 2.0 * self.run_s()

    @property
    def cls(self) -> str:
        """Its class: given, else a sweep point, a multi-node run, a 1-GPU evaluation or a single-node run."""
        if self.kind:
            return self.kind
        if self.sweep:
            return "sweep"
        if len(self.groups) > 1:
            return "multinode"
        return "eval" if self.gpus <= 1 else "single"


@dataclass
class Trace:
    """A trace's jobs (in arrival order) and its cluster."""

    jobs: list[TraceJob]
    name: str = "trace"
    seed: Optional[int] = None
    nodes: int = 16
    gpus_per_node: int = 8
    start: float = WEEK_START
    about: dict[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def offered_gpu_h(self) -> float:
        """GPU-hours the jobs ask for, left alone (start-up, steps, saves; no crash, no wait)."""
        return sum(j.gpus * j.run_s() for j in self.jobs) / 3600.0


_REQUIRED = ("id", "user", "arrival_s", "groups", "step_s")
_TUPLES = {"groups": int, "fail_at": int, "after": str}


def job_from_dict(doc: dict[str, Any], where: str = "") -> TraceJob:
    """One job from its JSON object.

    Raises:
        TraceError: a key missing, unknown, or of the wrong kind.
    """
    at = f"{where}: " if where else ""
    known = {f.name for f in fields(TraceJob)}
    for k in _REQUIRED:
        if k not in doc:
            raise TraceError(f"{at}a job needs {k!r} (keys: {', '.join(_REQUIRED)}; see rayjobs.sim.trace)")
    unknown = sorted(set(doc) - known)
    if unknown:
        raise TraceError(f"{at}unknown key {unknown[0]!r}; a job's keys are {', '.join(sorted(known))}")
    kw: dict[str, Any] = {}
    for f in fields(TraceJob):
        if f.name not in doc:
            continue
        v = doc[f.name]
        try:
            if f.name in _TUPLES:
                kw[f.name] = tuple(_TUPLES[f.name](x) for x in (v or []))
            elif f.type in ("float",):
                kw[f.name] = float(v)
            elif f.type in ("int",):
                kw[f.name] = int(v)
            elif f.type in ("bool",):
                kw[f.name] = v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")
            else:
                kw[f.name] = str(v)
        except (TypeError, ValueError):
            raise TraceError(f"{at}{f.name}={v!r} is not a {f.type}") from None
    job = TraceJob(**kw)
    _check(job, at)
    return job


def _check(job: TraceJob, at: str) -> None:
    if not job.groups or any(g <= 0 for g in job.groups):
        raise TraceError(f"{at}{job.id}: groups must be GPUs per group, each > 0 (e.g. [8, 8])")
    if job.step_s <= 0 or job.steps <= 0 or job.arrival_s < 0:
        raise TraceError(f"{at}{job.id}: step_s and steps must be > 0, arrival_s >= 0")
    if job.kind and job.kind not in KINDS:
        raise TraceError(f"{at}{job.id}: kind {job.kind!r} is not one of {', '.join(KINDS)}")


def job_to_dict(job: TraceJob) -> dict[str, Any]:
    """A job's JSON object: its keys that differ from the defaults (the required ones always)."""
    out: dict[str, Any] = {}
    for f in fields(TraceJob):
        v = getattr(job, f.name)
        if f.name in _REQUIRED or v != f.default:
            out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def read(path: str | Path) -> Trace:
    """A trace file (see the module's docstring).

    Raises:
        TraceError: unreadable, not JSON Lines, a bad job, an id twice, ``after`` naming no job.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise TraceError(f"cannot read the trace {p}: {e.strerror or e}") from None
    return loads(text, str(p))


def loads(text: str, name: str = "trace") -> Trace:
    """A trace from its JSON Lines text."""
    head: dict[str, Any] = {}
    jobs: list[TraceJob] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:
            raise TraceError(f"{name}:{n}: not JSON ({e.msg})") from None
        if not isinstance(doc, dict):
            raise TraceError(f"{name}:{n}: each line is one JSON object")
        if "trace" in doc and not jobs and not head:
            head = dict(doc["trace"] or {})
            continue
        jobs.append(job_from_dict(doc, f"{name}:{n}"))
    return make(jobs, name=str(head.get("name") or Path(name).stem), seed=head.get("seed"),
                nodes=int(head.get("nodes", 16)), gpus_per_node=int(head.get("gpus_per_node", 8)),
                start=float(head.get("start", WEEK_START)))


def make(jobs: Iterable[TraceJob], **kw: Any) -> Trace:
    """A trace of ``jobs`` (sorted by arrival), its ids and ``after`` checked."""
    out = sorted(jobs, key=lambda j: (j.arrival_s, j.id))
    ids = set()
    for j in out:
        if j.id in ids:
            raise TraceError(f"job id {j.id!r} twice in the trace")
        ids.add(j.id)
    for j in out:
        missing = [a for a in j.after if a not in ids]
        if missing:
            raise TraceError(f"{j.id}: after names {missing[0]!r}, which is no job of the trace")
    return Trace(out, **kw)


def dumps(trace: Trace) -> str:
    """The trace as JSON Lines (its head line first)."""
    head = {"trace": {"name": trace.name, "seed": trace.seed, "nodes": trace.nodes,
                      "gpus_per_node": trace.gpus_per_node, "start": trace.start}}
    return "\n".join([json.dumps(head)] + [json.dumps(job_to_dict(j)) for j in trace.jobs]) + "\n"


def write(trace: Trace, path: str | Path) -> None:
    Path(path).write_text(dumps(trace), encoding="utf-8")


def with_(job: TraceJob, **changes: Any) -> TraceJob:
    return replace(job, **changes)


def as_dict(job: TraceJob) -> dict[str, Any]:
    return asdict(job)

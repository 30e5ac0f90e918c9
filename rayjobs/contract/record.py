"""The queue's durable record of one job: what it asked for, where it is, how it ended.

One JSON file per job in the queue's store (``rayjobs.oncluster.store``), written whole every
time (:func:`rayjobs.contract.files.write_atomic`). :meth:`JobRecord.to_json` and
:meth:`JobRecord.from_json` are its only readers and writers; a record of an older version (1:
the same keys, untyped) reads as this one, and keys this version does not know are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Mapping, Optional

from rayjobs.contract.meta import JobMeta, point_of
from rayjobs.contract.status import State, Status

#: The record format written now. 1: plain dicts (rayjobs <= issue 28); 2: this dataclass.
RECORD_VERSION = 2
#: Keys of version 1 that are now read from the job's metadata only.
_V1_DERIVED = frozenset({"priority", "submitted_at", "max_retries", "attempts"})


@dataclass(frozen=True)
class JobRecord:
    """One job in the queue. ``spec`` is its exact ``submit_job`` request (its ``runtime_env``
    without the working_dir: the code is the store's snapshot ``code``)."""

    id: str
    state: State
    spec: Mapping[str, Any]
    code: str = ""
    queued_at: float = 0.0
    version: int = RECORD_VERSION
    admitted_at: Optional[float] = None  #: when the queue admitted it (epoch s); None while waiting
    note: str = ""  #: the admission's note (why it started where it did)
    first_attempt: Optional[int] = None  #: the run's attempt number its first Ray run starts at
    status: Optional[Status] = None  #: how it ended (state DONE)
    finished_at: Optional[float] = None
    message: str = ""  #: Ray's message of its end, or the queue's
    cause: Optional[str] = None  #: a failure's one-line cause
    log: Optional[Mapping[str, str]] = None  #: ``{"node_id", "file"}``: its driver log, after Ray pruned it
    start_time: Optional[int] = None  #: Ray's, ms
    end_time: Optional[int] = None
    final: Optional[Mapping[str, Any]] = None  #: its last metrics: ``{"step", "data", "attempts"}``
    checkpoint_step: Optional[int] = None  #: its last complete checkpoint when it ended
    attempts: tuple[int, ...] = ()  #: the run's attempt numbers this job ran (a resume's are its own)
    reaped: tuple[str, ...] = ()  #: what the reaper had to end of it, a line each
    lost: int = 0  #: Ray runs lost with the head (each resumed as a new attempt)
    preempting: Optional[Mapping[str, Any]] = None  #: being stopped at a checkpoint for ``by``
    preempted: Optional[Mapping[str, Any]] = None  #: its last preemption: by, at, checkpoint_step, step, redo
    preemptions: int = 0
    stop_asked: bool = False  #: its user stopped it (it ends there, even mid-preemption)
    history: tuple[Mapping[str, Any], ...] = ()  #: events of its life (lost, preempted)
    pruned: bool = False  #: deleted from Ray's job table
    ray_logs: str = ""  #: the head's Ray log dir of the session it was last admitted in (a lost run's log stays there)
    spans: tuple[tuple[float, float], ...] = ()  #: (admitted, ended) epoch s of each time it held GPUs
    #: when the current admission's GPUs went back to the queue (its trainer gone, its leftovers
    #: reaped): the span ends there, not at the later settling of its Ray job
    freed_at: Optional[float] = None
    rungs: Mapping[str, Any] = field(default_factory=dict)  #: successive halving: {rung step: its value there}
    halved: Optional[Mapping[str, Any]] = None  #: halved at a rung: {rung, value, rank, of, text}
    updated_at: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ derived
    @cached_property
    def meta(self) -> JobMeta:
        return JobMeta.from_ray((self.spec or {}).get("metadata"))

    @property
    def metadata(self) -> dict[str, str]:
        return dict((self.spec or {}).get("metadata") or {})

    @property
    def point(self) -> int:
        return point_of(self.id, self.meta.sweep)

    @property
    def done(self) -> bool:
        return self.state == State.DONE

    def span_closed(self, now: float) -> tuple[tuple[float, float], ...]:
        """Its spans with the current admission's closed at ``now``, or earlier where its GPUs already
        went back to the queue (``freed_at``); none open: as they are."""
        if not self.admitted_at:
            return self.spans
        start = float(self.admitted_at)
        end = min(now, float(self.freed_at)) if self.freed_at and float(self.freed_at) >= start else now
        return self.spans + ((start, end),)

    def with_(self, **changes: Any) -> "JobRecord":
        """A copy with ``changes``."""
        return replace(self, **changes)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            if isinstance(v, (State, Status)):
                v = v.value
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "JobRecord":
        """A record from its JSON form (any version).

        Raises:
            ValueError: not a record (no id or state, or a state no version has).
        """
        raw = dict(doc)
        if not raw.get("id") or "state" not in raw:
            raise ValueError("not a job record (no id or state)")
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in raw and f.name != "extra":
                kw[f.name] = raw.pop(f.name)
        kw["state"] = State(kw["state"])
        if kw.get("status") is not None:
            kw["status"] = Status.of(kw["status"])
        for name in ("attempts", "reaped", "history"):
            if name in kw:
                kw[name] = tuple(kw[name] or ())
        if "spans" in kw:
            kw["spans"] = tuple((float(a), float(b)) for a, b in kw["spans"] or ())
        kw["version"] = RECORD_VERSION
        extra = {k: v for k, v in raw.items() if k not in _V1_DERIVED}
        return cls(**kw, extra=extra)

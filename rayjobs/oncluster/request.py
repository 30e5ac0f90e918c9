"""What a queued job asks for: its GPU groups and its place in line (from its durable record).

Everything here comes from the record (:class:`rayjobs.contract.record.JobRecord`): the metadata
rayjobs put into its submit request and when it was queued, so its place -- and the starvation
guard's clock -- survive a restart of the queue or of the head's Ray.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

from rayjobs.contract.halving import Halving
from rayjobs.contract.record import JobRecord
from rayjobs.oncluster import warmth


@dataclass(frozen=True)
class Request:
    """A queued job's ask. Order: higher priority, then submitted, sweep point, when it was queued."""

    id: str
    groups: tuple[int, ...] = ()
    priority: int = 0
    submitted: float = 0.0  #: epoch seconds (metadata ``submitted_at``)
    point: int = 0  #: index in its sweep (points share ``submitted_at``)
    place: int = 0  #: its place among its sweep's points: the index, or a halving sweep's shuffle of it
    created_ms: int = 0  #: when it was queued (ms): breaks ties within a second
    since: float = 0.0  #: when it was queued, epoch s (the starvation guard's clock; durable)
    retries: int = 0  #: retries left: with retries left, GPUs stay reserved between attempts
    user: str = ""  #: who submitted it (per-user quotas)
    preemptible: bool = False  #: may a higher-priority job that does not fit take its GPUs
    preempt_wait_s: float = 900.0  #: how long it may run on to its next checkpoint once preempted
    after: tuple[str, ...] = ()  #: jobs that must have SUCCEEDED before it may start
    sweep: str = ""  #: its sweep's id (successive halving compares the points of one sweep)
    halving: Optional[Halving] = None  #: the sweep's halving settings; None: never halved (a resume is not)
    warm: str = ""  #: its warm-engine key (:func:`rayjobs.oncluster.warmth.key_of`); "": it uses none

    @property
    def gpus(self) -> int:
        return sum(self.groups)

    def key(self) -> tuple:
        return (-self.priority, self.submitted, self.place, self.created_ms, self.id)


def request_from_record(rec: JobRecord) -> Request:
    """The queue's request for a job record."""
    m = rec.meta
    queued = float(rec.queued_at or 0.0)
    halving = None if m.resumed_from else m.halving_spec
    point = rec.point
    return Request(id=rec.id, groups=tuple(m.gpu_groups), priority=m.priority, submitted=m.submitted_ts() or queued,
                   point=point, place=shuffled_place(m.sweep, point) if halving and halving.shuffle else point,
                   created_ms=int(queued * 1000), since=queued,
                   retries=max(0, m.max_retries - int(rec.lost or 0)), user=m.user, preemptible=m.preemptible,
                   preempt_wait_s=m.preempt_wait_s, after=tuple(m.after), sweep=m.sweep, halving=halving,
                   warm=warmth.key_of(str(rec.spec.get("entrypoint") or ""), verl=m.kind == "verl",
                                      warm=not warmth.opted_out(m.extra)))


def shuffled_place(sweep: str, point: int) -> int:
    """A point's place in its sweep's shuffled order: a hash of (sweep, point), so every point's place
    is known from its own record (no sweep size needed) and is the same after a restart."""
    return int.from_bytes(hashlib.blake2b(f"{sweep}/{point}".encode(), digest_size=8).digest(), "big")

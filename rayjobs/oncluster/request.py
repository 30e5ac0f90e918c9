"""What a queued job asks for: its GPU groups and its place in line.

Built from the job's durable record (:func:`request_from_record`): the metadata rayjobs put into
its submit request, and when it was queued (so its place, and the starvation guard's clock,
survive a restart of the queue or of the head's Ray).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rayjobs.oncluster import capacity


@dataclass
class Request:
    """A queued job's ask. Order: higher priority, then submitted, sweep point, when it was queued."""

    id: str
    groups: list[int]
    priority: int = 0
    submitted: float = 0.0  #: epoch seconds (metadata ``submitted_at``)
    point: int = 0  #: index in its sweep (points share ``submitted_at``)
    created_ms: int = 0  #: when it was queued (ms): breaks ties within a second
    since: float = 0.0  #: when it was queued, epoch s (the starvation guard's clock; durable)
    retries: int = 0  #: rayjobs.max_retries: with retries left, GPUs stay reserved between attempts
    version: str = ""
    user: str = ""  #: who submitted it (per-user quotas)
    preemptible: bool = False  #: may a higher-priority job that does not fit take its GPUs
    preempt_wait_s: float = 900.0  #: how long it may run on to its next checkpoint once preempted
    after: tuple[str, ...] = ()  #: jobs that must have SUCCEEDED before it may start

    @property
    def gpus(self) -> int:
        return sum(self.groups)

    def key(self) -> tuple:
        return (-self.priority, self.submitted, self.point, self.created_ms, self.id)


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return 0.0


def request_from_record(rec: dict[str, Any]) -> Request:
    """The queue's request for a job record (:mod:`rayjobs.oncluster.store`)."""
    sid = str(rec["id"])
    meta = dict((rec.get("spec") or {}).get("metadata") or {})
    try:
        groups = capacity.clean_groups(json.loads(meta.get("gpu_groups") or "[]"))
    except (TypeError, ValueError):
        groups = []
    point = 0
    sweep = meta.get("sweep") or ""
    if sweep and sid.startswith(sweep + "-") and sid[len(sweep) + 1:].isdigit():
        point = int(sid[len(sweep) + 1:])
    queued = float(rec.get("queued_at") or 0.0)
    submitted = _epoch(meta.get("submitted_at", "")) or queued
    return Request(id=sid, groups=groups, priority=_int(meta.get("priority")), submitted=submitted, point=point,
                   created_ms=int(queued * 1000), since=queued, retries=max(0, _int(meta.get("max_retries")) - int(rec.get("lost") or 0)),
                   version=str(meta.get("rayjobs", "")), user=str(meta.get("user") or ""),
                   preemptible=str(meta.get("preemptible", "0")) == "1",
                   preempt_wait_s=_float(meta.get("preempt_wait_s"), 900.0), after=_ids(meta.get("after")))


def _int(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def _float(v: Any, default: float) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def _ids(v: Any) -> tuple[str, ...]:
    try:
        return tuple(str(i) for i in json.loads(v or "[]"))
    except (TypeError, ValueError):
        return ()

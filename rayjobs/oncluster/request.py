"""What a runner asks the queue for: a job's GPU groups and its place in line.

Built on the cluster from the job's metadata (:func:`request_from_metadata`, by the runner) and
sent to the queue actor (:mod:`rayjobs.oncluster.queueactor`) as a plain dict, so runners and an actor of
different rayjobs versions still understand each other (:meth:`Request.from_dict`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rayjobs.oncluster import capacity


@dataclass
class Request:
    """What a runner asks for. Order: higher priority, then submitted, sweep point, Ray's creation time."""

    id: str
    groups: list[int]
    priority: int = 0
    submitted: float = 0.0  #: epoch seconds (metadata ``submitted_at``)
    point: int = 0  #: index in its sweep (points share ``submitted_at``)
    created_ms: int = 0  #: Ray's job creation time (ms): breaks ties within a second
    since: float = 0.0  #: when this job first asked (survives actor restarts)
    runner_job: str = ""  #: the runner's Ray JobID (hex): the actor watches it for liveness
    retries: int = 0  #: rayjobs.max_retries: with retries left, GPUs stay reserved between attempts
    version: str = ""

    def key(self) -> tuple:
        return (-self.priority, self.submitted, self.point, self.created_ms, self.id)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Request":
        """Tolerant of runners of another rayjobs version (unknown fields are ignored)."""
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return 0.0


def request_from_metadata(sid: str, meta: dict[str, Any], created_ms: int = 0, runner_job: str = "") -> Request:
    from rayjobs.shared import __version__

    try:
        groups = capacity.clean_groups(json.loads(meta.get("gpu_groups") or "[]"))
    except (TypeError, ValueError):
        groups = []
    point = 0
    sweep = meta.get("sweep") or ""
    if sweep and sid.startswith(sweep + "-") and sid[len(sweep) + 1:].isdigit():
        point = int(sid[len(sweep) + 1:])
    try:
        priority = int(meta.get("priority") or 0)
    except ValueError:
        priority = 0
    try:
        retries = int(meta.get("max_retries") or 0)
    except ValueError:
        retries = 0
    submitted = _epoch(meta.get("submitted_at", "")) or created_ms / 1000.0
    return Request(id=sid, groups=groups, priority=priority, submitted=submitted, point=point,
                   created_ms=int(created_ms or 0), since=time.time(), runner_job=runner_job, retries=retries,
                   version=__version__)

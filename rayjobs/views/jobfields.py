"""Two small readers kept for modules outside the views that still call them (``views.clusterview``,
``preflight.livecluster``); the views read a job as one shape, :class:`rayjobs.contract.wire.JobView`
(``job.status``, ``job.meta``), and nothing new should come here.
"""

from __future__ import annotations

from typing import Any

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.status import word
from rayjobs.contract.wire import JobView


def status_of(job: JobView) -> str:
    """``RUNNING``, ``SUCCEEDED``, ... of a view (``job.status``)."""
    return word(job.status, "?")


def gpu_groups(job: Any) -> list[int]:
    """The GPU groups of a view, or of a dict with Ray's ``metadata`` (preflight's spec)."""
    return list(job.meta.gpu_groups if isinstance(job, JobView) else JobMeta.from_ray(job.get("metadata")).gpu_groups)

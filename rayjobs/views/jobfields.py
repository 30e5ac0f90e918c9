"""Reading a job's fields the same way whether Ray gave a ``JobDetails`` or its dict form.

The SDK's ``list_jobs``/``get_job_info`` return ``JobDetails``; the dashboard's ``GET /api/jobs/ID``
and the local record give dicts. Every view reads a job through these.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Callable, Optional

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.status import word


def field(job: Any, name: str, default: Any = None) -> Any:
    """A field of a ``JobDetails`` or of its dict form."""
    return getter(job)(name, default)


def getter(job: Any) -> Callable[..., Any]:
    """``field`` bound to one job: ``get(name, default=None)`` (for a row that reads 30 fields)."""
    if isinstance(job, dict):
        return job.get
    return lambda name, default=None: getattr(job, name, default)


def meta(job: Any) -> dict[str, str]:
    """The job's metadata (rayjobs puts its own keys there at submit)."""
    return dict(field(job, "metadata") or {})


def status_of(job: Any) -> str:
    """``RUNNING``, ``SUCCEEDED``, ... (the enum's value, or the dict's string)."""
    return word(field(job, "status", "?"), "?")


def job_id(job: Any) -> str:
    """The submission id (a dict may call it ``id``)."""
    return str(field(job, "submission_id") or field(job, "id") or "")


def json_list(text: Optional[str]) -> list[str]:
    """A metadata value that holds a JSON list of strings (``[]`` if it holds anything else)."""
    return list(_parsed_list(text or "[]"))


_DECODE = json.JSONDecoder().raw_decode  # the C scanner without loads' own checks: a row parses two lists


@lru_cache(maxsize=8192)
def _parsed_list(text: str) -> tuple[str, ...]:
    # a row reads its overrides twice (the column and its label): the second is a hit
    if text == "[]":
        return ()
    try:
        v, end = _DECODE(text.strip())
    except ValueError:
        return ()
    if end != len(text.strip()) or not isinstance(v, list):
        return ()
    return tuple(x if isinstance(x, str) else str(x) for x in v)


def job_meta(job: Any) -> JobMeta:
    """The job's metadata, parsed once (:class:`rayjobs.contract.meta.JobMeta` reads every key)."""
    return JobMeta.from_ray(meta(job))


def gpu_groups(job: Any) -> list[int]:
    """The job's GPU groups from its metadata (``[]`` if it asks for none)."""
    return list(job_meta(job).gpu_groups)


def groups_in(m: Any) -> list[int]:
    """The GPU groups a job's metadata ``m`` (Ray's form) asks for."""
    return list(JobMeta.from_ray(m).gpu_groups)

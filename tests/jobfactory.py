"""Jobs as the laptop's views read them (:class:`rayjobs.contract.wire.JobView`), for fast tests."""

from __future__ import annotations

from typing import Any

from rayjobs.contract.wire import JobView


def job_view(submission_id: str = "j", status: str = "RUNNING", state: str = "", **fields: Any) -> JobView:
    """A view with the given fields (the rest their defaults); ``metadata`` values become strings
    as Ray keeps them."""
    meta = {str(k): str(v) for k, v in (fields.pop("metadata", None) or {}).items()}
    return JobView(submission_id=submission_id, status=status, state=state, metadata=meta, **fields)

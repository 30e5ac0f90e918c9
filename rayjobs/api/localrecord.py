"""What the commands read of the laptop's local record (``$RAYJOBS_HOME``: the ledger and
``runs/<id>/``) beside the rows :func:`rayjobs.api.recorded_row` makes: a job's kept log end, and
whether its final copy is kept. The writes are :mod:`rayjobs.api.keeping`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from rayjobs.contract.status import TERMINAL


def kept_log_tail(job_id: str) -> Optional[bytes]:
    """The end of ``job_id``'s log kept in the local record (its last lines, bounded), or None.

    Args:
        job_id: the whole id (resolve a prefix with :func:`rayjobs.api.recorded_row` first).
    """
    from rayjobs import ledger

    return ledger.kept_log_tail(job_id)


def kept_ended(rows: Iterable[dict[str, Any]]) -> int:
    """How many of ``rows`` (as :func:`rayjobs.api.list_jobs` returns them) ended and have their
    final copy kept in the local record (one ``stat`` each)."""
    from rayjobs import ledger

    return sum(1 for r in rows if r.get("status") in TERMINAL and ledger.is_kept(str(r["id"])))


def record_dir(job_id: str) -> Path:
    """Where the local record keeps ``job_id``'s files (``$RAYJOBS_HOME/runs/<id>``; not made here)."""
    from rayjobs import ledger

    return ledger.run_dir(job_id)

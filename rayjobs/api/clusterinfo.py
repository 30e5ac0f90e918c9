"""``rayjobs cluster``: the nodes, the GPUs used and free, the jobs, the queue."""

from __future__ import annotations

from typing import Any, Optional


def cluster_view(*, address: Optional[str] = None) -> dict[str, Any]:
    """What ``rayjobs cluster --json`` prints: per node its GPUs, use and versions; job counts; the
    queue's head with why each job waits; GPUs held per user and the quota; version warnings."""
    from rayjobs.api.job import connect
    from rayjobs.views import clusterview

    return clusterview.view(connect(address, start=False))  # a read: a stopped embedded head stays stopped

"""The queue's own client of the head's Jobs API (it submits the jobs it admits, polls and prunes).

The same :class:`rayjobs.client.dashboard.Dashboard` the laptop uses, on the head's loopback: the
URL from ``$RAYJOBS_DASHBOARD`` (the node script and the embedded head set it), else the one Ray
recorded for this session; the token from ``$RAY_AUTH_TOKEN``, ``$RAY_AUTH_TOKEN_PATH`` or
``~/.ray/auth_token`` (token auth is on wherever rayjobs started the head).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from rayjobs.client.dashboard import Dashboard
from rayjobs.settings import Target

#: Set on the head by the node script and the embedded head: the dashboard's URL on loopback.
DASHBOARD_ENV = "RAYJOBS_DASHBOARD"


def _token() -> Optional[str]:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    for p in (os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")):
        if p and os.path.isfile(p):
            return Path(p).read_text().strip() or None
    return None


def _url() -> str:
    if os.environ.get(DASHBOARD_ENV):
        return os.environ[DASHBOARD_ENV]
    import ray

    node = ray._private.worker._global_node  # the one place Ray keeps this session's dashboard URL
    url = str((node.address_info or {}).get("webui_url") or "127.0.0.1:8265") if node is not None else "127.0.0.1:8265"
    return url if "://" in url else f"http://{url}"


def head_dashboard() -> Dashboard:
    """A client of this cluster's Jobs API, from inside the cluster (the head)."""
    return Dashboard(Target(_url(), "the head", _token()))

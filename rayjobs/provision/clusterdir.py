"""What the laptop keeps per SkyPilot cluster: ``$RAYJOBS_HOME/clusters/<name>/`` (its Ray auth
token, 0600, and the tunnel's log), and the names both ``up`` and ``connect`` use."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Optional

from rayjobs import settings
from rayjobs.errors import RayjobsError
from rayjobs.settingsources import ClusterSettings

#: The built-in cluster name (the settings' ``cluster.name`` default); :func:`cluster_name` applies
#: the settings on top.
DEFAULT_NAME: str = ClusterSettings().name
#: The head's dashboard port (Jobs API), on its loopback only; SkyPilot's own Ray uses 8266.
REMOTE_DASHBOARD_PORT = 8265


class ClusterError(RayjobsError):
    """Provisioning, bootstrap or tunnel failure (one line: what failed and what to run)."""


def cluster_name(given: Optional[str] = None) -> str:
    """The SkyPilot cluster a command means: ``given`` (``-c NAME``, ``connect NAME``) > the settings'
    ``cluster.name`` (``RAYJOBS_CLUSTER_NAME`` > ``./rayjobs.yaml`` > ``$RAYJOBS_HOME/settings.yaml`` >
    the remembered cluster > ``rayjobs``).

    Raises:
        ConfigError: a settings file or variable is wrong (one line).
    """
    return given or settings.current().cluster.name


def cluster_dir(name: str) -> Path:
    return settings.home() / "clusters" / name


def write_secret(path: Path, value: str) -> None:
    """Write a secret (a token) readable by its owner only, at once."""
    from rayjobs.contract.files import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, value.encode(), mode=0o600)


def local_token(name: str, create: bool = False) -> Optional[Path]:
    path = cluster_dir(name) / "auth_token"
    if not path.exists() and create:
        write_secret(path, secrets.token_hex(32))
    return path if path.exists() else None

"""Where rayjobs keeps its state, which cluster it talks to, and the effective settings.

Settings (storage root, cluster, secrets' names, W&B): :func:`current`, by the one precedence of
:mod:`rayjobs.settingsources` -- command line > ``RAYJOBS_*`` variables > ``./rayjobs.yaml`` >
``$RAYJOBS_HOME/settings.yaml`` > the remembered cluster > built-in defaults.

Address precedence (design §3): ``--address``/``rayjobs.address`` > ``RAY_API_SERVER_ADDRESS`` >
``RAY_ADDRESS`` > a team door's login (``RAYJOBS_URL`` + ``RAYJOBS_TOKEN``, else ``rayjobs login``'s
``$RAYJOBS_HOME/login.json``: :mod:`rayjobs.settingslogin`) > the cluster remembered by
``rayjobs up``/``rayjobs connect`` > the embedded local head (started on first use). The address is not a settings-file key: through a tunnel it is
a local port ``connect`` picks, and a fixed cluster's address goes with its token (environment).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from rayjobs import settingslogin
from rayjobs.contract.target import Target
from rayjobs.errors import ConfigError
from rayjobs.settingsources import Settings, resolve

__all__ = ["Target", "current", "home", "resolve_target", "storage_root"]

#: Environment variable that relocates all local state (ledger, embedded head, remembered cluster).
HOME_ENV = "RAYJOBS_HOME"
#: Environment variable with the storage root the cluster's jobs write to (checkpoints, metrics).
STORAGE_ENV = "RAYJOBS_STORAGE"


def home() -> Path:
    """The local state directory (``$RAYJOBS_HOME`` or ``~/.rayjobs``)."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".rayjobs").expanduser()


def cluster_file() -> Path:
    """The remembered cluster, written by ``rayjobs up``/``rayjobs connect``."""
    return home() / "cluster.json"


def remembered_cluster() -> dict[str, Any]:
    """The remembered cluster record, or ``{}``.

    Keys used here: ``name``, ``address`` (dashboard URL through the tunnel), ``storage`` (the
    cluster's shared root), ``token_path``, ``nodes``, ``gpus_per_node``.
    """
    try:
        return json.loads(cluster_file().read_text())
    except (OSError, ValueError):
        return {}


def current() -> Settings:
    """The effective settings: ``RAYJOBS_*`` variables > ``./rayjobs.yaml`` (up to the git root) >
    ``$RAYJOBS_HOME/settings.yaml`` > the remembered cluster > built-in defaults.

    The command line comes on top, in the command that takes it (``rayjobs.storage=``,
    ``rayjobs up key=value``, ...). Cheap: a few ``stat`` calls; a file is parsed once per version.

    Returns:
        The typed settings, each value with its source (``Settings.source(key)``).

    Raises:
        ConfigError: a settings file or variable is wrong (unknown key, wrong type, YAML syntax, a
            secret's value): one line naming the file or variable and the key.
    """
    return resolve(Path.cwd(), os.environ, home(), _remembered_or_login())


def _remembered_or_login() -> dict[str, Any]:
    """The remembered cluster's record -- or, when a door's login is the target, its storage root
    (a teammate's laptop knows the cluster by its door only)."""
    rec = remembered_cluster()
    if any(os.environ.get(v) for v in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")):
        return rec
    login = settingslogin.load(home(), os.environ)
    return {**rec, "storage": login.storage} if login is not None and login.storage else rec


def _read_token(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    try:
        return Path(path).expanduser().read_text().strip() or None
    except OSError:
        return None


def resolve_target(explicit: Optional[str] = None, explicit_from: str = "--address") -> Target:
    """Resolve the cluster address by the precedence above (no network I/O).

    ``explicit_from`` names where ``explicit`` was set (``--address`` or ``rayjobs.address``), so
    an error about the address names the key the user actually typed.
    """
    token = os.environ.get("RAY_AUTH_TOKEN") or _read_token(os.environ.get("RAY_AUTH_TOKEN_PATH"))
    if explicit:
        return Target(normalize_address(explicit), explicit_from, token)
    for var in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        if os.environ.get(var):
            return Target(normalize_address(os.environ[var]), var, token)
    login = settingslogin.load(home(), os.environ)
    if login is not None:
        source = "RAYJOBS_URL" if settingslogin.from_env(os.environ) else "rayjobs login"
        return Target(login.url, source, login.token, api=login.url, fingerprint=login.fingerprint, door=True)
    rec = remembered_cluster()
    if rec.get("address"):
        token = token or _read_token(rec.get("token_path"))
        return Target(normalize_address(rec["address"]), f"cluster {rec.get('name', '?')}", token,
                      api=normalize_address(rec["api"]) if rec.get("api") else None)
    return Target(None, "embedded", None)


def normalize_address(address: str) -> str:
    """``127.0.0.1:8265`` -> ``http://127.0.0.1:8265`` (the Jobs API is HTTP)."""
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    return address


def storage_root(configured: Optional[str] = None) -> Path:
    """The absolute storage root for checkpoints, metrics and data on the cluster.

    ``rayjobs.storage`` (``configured``) > the settings' ``storage`` (``$RAYJOBS_STORAGE`` >
    ``./rayjobs.yaml`` > ``$RAYJOBS_HOME/settings.yaml`` > the remembered cluster's shared root) >
    the embedded default ``$RAYJOBS_HOME/storage``. A relative path is an error: verl would
    resolve it against the job's temporary working dir (design §5).
    """
    value = configured or current().storage
    if not value:
        return home() / "storage"
    path = Path(str(value)).expanduser()
    if not path.is_absolute():
        raise ConfigError(
            f"rayjobs.storage={value!r} is a relative path; it must be absolute "
            f"(e.g. rayjobs.storage=/mnt/shared/rayjobs), because jobs run in a temporary dir"
        )
    return path

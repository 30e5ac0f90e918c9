"""The settings in effect and where each came from (``rayjobs config``)."""

from __future__ import annotations

from typing import Any

#: Where the address came from (:attr:`rayjobs.settings.Target.source`), in ``rayjobs config``'s words.
_ADDRESS_SOURCES = {"RAY_API_SERVER_ADDRESS": "env RAY_API_SERVER_ADDRESS", "RAY_ADDRESS": "env RAY_ADDRESS",
                    "embedded": "default", "rayjobs login": "rayjobs login (login.json)",
                    "RAYJOBS_URL": "env RAYJOBS_URL"}


def effective_settings() -> dict[str, dict[str, Any]]:
    """The effective settings, each with where its value came from (``rayjobs config``).

    Every settings key (``storage``, ``cluster.*``, ``secrets``, ``wandb.*``) by the one precedence
    (README, "Settings"), with the values the built-in defaults leave empty filled in as they take
    effect: the storage root ``$RAYJOBS_HOME/storage``, the cluster's shape from
    ``bootstrap/cluster.yaml``. Plus ``address``: the cluster the commands talk to (not a settings
    file key; its own precedence, README "Address").

    Returns:
        ``{key: {"value": ..., "source": ...}}`` in schema order. A source is ``env RAYJOBS_X``, a
        settings file as shown (``./rayjobs.yaml``, ``~/.rayjobs/settings.yaml``), ``remembered
        cluster``, ``bootstrap/cluster.yaml`` (the cluster's shape) or ``default`` (the command line
        of a submit or ``rayjobs up`` comes on top of these, in that command).

    Raises:
        ConfigError: a settings file or variable is wrong (one line naming it and the key).
    """
    from rayjobs import settings
    from rayjobs.provision import skypilot
    from rayjobs.settingsources import DEFAULT, KEYS

    s = settings.current()
    task = skypilot.task_defaults()
    out: dict[str, dict[str, Any]] = {}
    for key in KEYS:
        value, source = s.get(key), s.source(key)
        if key == "storage" and not value:
            value = str(settings.home() / "storage")
        elif source == DEFAULT and value in ("", None) and key in task:
            value, source = task[key], "bootstrap/cluster.yaml"
        out[key] = {"value": list(value) if isinstance(value, tuple) else value, "source": source}
    target = settings.resolve_target(None)
    out["address"] = {"value": target.address,
                      "source": _ADDRESS_SOURCES.get(target.source, "remembered cluster")}
    return out


def settings_notes() -> list[str]:
    """What ``rayjobs config`` says on stderr: which settings files were read, and a storage root that
    differs from the connected cluster's (its jobs would write where the cluster has no shared mount)."""
    from pathlib import Path

    from rayjobs import settings
    from rayjobs.settingsources import DEFAULT, REMEMBERED, USER_FILE, shown_path

    s = settings.current()
    user = shown_path(settings.home() / USER_FILE, Path.cwd())
    notes = [f"settings files: {', '.join(s.files) if s.files else 'none'} "
             f"(looked for ./rayjobs.yaml up to the git root, and {user})"]
    rec = settings.remembered_cluster()
    set_here = s.source("storage") not in (DEFAULT, REMEMBERED)
    if rec.get("storage") and s.storage and s.storage != rec["storage"] and set_here:
        notes.append(f"storage {s.storage} ({s.source('storage')}) is not the connected cluster {rec.get('name')}'s "
                     f"storage root {rec['storage']}: jobs there would write outside its shared mount")
    return notes

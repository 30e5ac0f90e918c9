"""Secrets by name: does the cluster's environment hold the keys the job's loggers need?

Only names, never values: a secret lives in the cluster's environment (bootstrap secrets), never in
a job. The names come from local knowledge, so a dry-run checks them too: for the embedded head,
its processes' environment (``/proc``); for a remote cluster, the ``secrets`` list that the node
script writes into the head's readiness record and ``rayjobs connect`` keeps in the cluster record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from rayjobs.preflight.keys import as_list, get_key
from rayjobs.preflight.problem import Problem
from rayjobs.preflight.verlfacts import LOGGER_SECRETS


def secret_problems(cfg: Any, env_names: set[str], embedded: bool = False) -> list[Problem]:
    """The loggers' secrets missing from ``env_names`` (the cluster's environment, names only), each a
    Problem whose fix says how the secret gets there (``embedded``: the local head's own way)."""
    out = []
    env = {str(k): str(v) for k, v in (get_key(cfg, "rayjobs.env") or {}).items()}
    for name in as_list(get_key(cfg, "trainer.logger")):
        if name in LOGGER_SECRETS:
            secret, mode_var, off = LOGGER_SECRETS[name]
            if env.get(mode_var, "").lower() in off or secret in env_names:
                continue
            out.append(Problem("trainer.logger", get_key(cfg, "trainer.logger"),
                               f"{name} needs {secret} in the cluster's environment and the cluster has none (verl fails "
                               f"at {name}.init, after the GPUs are up)",
                               f"to try it without {name}: +rayjobs.env.{mode_var}={off[0]}; to log, "
                               f"{how_to_forward(secret, embedded)}; or drop {name}: trainer.logger=[console]"))
    return out


def how_to_forward(secret: str, embedded: bool = False) -> str:
    """How ``secret`` gets into the cluster's environment; for ``rayjobs up``, by the settings' ``secrets``."""
    if embedded:
        return (f"export {secret} in the shell that starts the embedded head (it inherits that environment): "
                f"rayjobs local stop, then submit again")
    from rayjobs import settings

    s = settings.current()
    if secret in s.secrets:
        return (f"export {secret} in your shell and re-run `rayjobs up` (it forwards the settings' secrets: "
                f"{', '.join(s.secrets)}), or put it in the cluster's environment (bootstrap secrets)")
    return (f"add {secret} to 'secrets:' in rayjobs.yaml or ~/.rayjobs/settings.yaml (now {s.source('secrets')}: "
            f"{', '.join(s.secrets) or 'none'}), export it and re-run `rayjobs up`")


def cluster_env_names(embedded_cluster: bool) -> Optional[set[str]]:
    """Names (never values) of the environment the cluster's jobs get; None if unknown.

    Embedded cluster: read from the head's processes (or, before it starts, this process's
    environment, which it will inherit). Remote cluster: the ``secrets`` list of the cluster record
    that ``rayjobs up``/``connect`` saved (the bootstrap's readiness record lists secret names).
    """
    from rayjobs import settings

    if embedded_cluster:
        import json

        from rayjobs.client import embedded

        try:  # the record on disk, not a request to the head: dry-run touches no cluster
            rec = json.loads(embedded.record_file().read_text())
        except (OSError, ValueError):
            rec = {}
        for pid in rec.get("pids", []):
            try:
                raw = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            return {kv.split(b"=", 1)[0].decode(errors="replace") for kv in raw.split(b"\0") if b"=" in kv}
        return set(os.environ)
    rec = settings.remembered_cluster()
    names = rec.get("secrets")
    return set(names) if isinstance(names, list) else None

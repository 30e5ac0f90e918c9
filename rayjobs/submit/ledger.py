"""The local record of every submission: history that outlives the cluster.

``$RAYJOBS_HOME/ledger.jsonl`` gets one JSON line per submitted job (id, experiment, overrides,
address, sweep, the submit request); ``$RAYJOBS_HOME/runs/<id>/config.yaml`` keeps the resolved
config. Appends are single ``write`` calls of one line, so parallel sweep submissions do not
interleave.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional

from rayjobs import settings


def path() -> Path:
    return settings.home() / "ledger.jsonl"


def run_dir(job_id: str) -> Path:
    return settings.home() / "runs" / job_id


def record(entry: dict[str, Any], config_yaml: Optional[str] = None) -> None:
    """Append one submission (``entry`` must carry ``id``) and keep its resolved config."""
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    if config_yaml is not None:
        d = run_dir(entry["id"])
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.yaml").write_text(config_yaml)
        entry = dict(entry, config=str(d / "config.yaml"))
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def entries() -> Iterator[dict[str, Any]]:
    """All recorded submissions, oldest first (unreadable lines are skipped)."""
    try:
        with path().open() as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
    except OSError:
        return


def find(job_id: str) -> Optional[dict[str, Any]]:
    """The newest record for ``job_id``."""
    hit = None
    for e in entries():
        if e.get("id") == job_id:
            hit = e
    return hit


def lookup(prefix: str) -> list[dict[str, Any]]:
    """The newest record of every job whose id is ``prefix`` or starts with it (an exact id wins)."""
    newest: dict[str, dict[str, Any]] = {}
    for e in entries():
        jid = str(e.get("id") or "")
        if jid.startswith(prefix):
            newest[jid] = e
    if prefix in newest:
        return [newest[prefix]]
    return list(newest.values())

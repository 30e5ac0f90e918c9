"""Names the laptop and the cluster side share: what both write and read must be spelled once.

Nothing here imports Ray, Hydra or any rayjobs module but the contract (standard library only), so
both sides can import it.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from typing import Optional

#: rayjobs' version (jobs carry it in their metadata; the runner and the queue report it).
__version__ = "0.1.0"

#: The head's Ray settings rayjobs relies on: the embedded head and the node script (bootstrap/ray_node.py) set them.
HEAD_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # The queue submits a job only when it fits; should Ray still hold one PENDING (its supervisor
    # waiting for a CPU, say), it must not fail it after Ray's default 15 minutes.
    "RAY_JOB_START_TIMEOUT_SECONDS": str(7 * 24 * 3600),
    # Ray kills a stopped job's driver 3 s after SIGTERM: too short for an RL checkpoint.
    "RAY_JOB_STOP_WAIT_TIME_S": "60",
    # Not set: RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper=true. On Ray 2.60 it
    # makes every job report SUCCEEDED with driver exit code 0 (measured: `sys.exit(1)` ->
    # SUCCEEDED), because the supervisor's child is reaped before it can read the exit status.
    "RAY_USAGE_STATS_ENABLED": "0",
}

#: Env var names that look like secrets: never in a job's runtime_env (anyone who can list jobs
#: reads it); the node script lists the ones the cluster holds (names only) in its readiness record.
#: A name part, between underscores, that says "secret" (``WANDB_API_KEY``, ``HF_TOKEN``,
#: ``AWS_SECRET_ACCESS_KEY``), not a word that merely contains one (``TOKENIZERS_PARALLELISM``).
SECRET_PATTERN = re.compile(r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(_|$)", re.I)


#: The names (comma-separated) of the secrets `rayjobs up` forwarded, for the node script: the
#: settings' ``secrets`` key as a variable. A list of names, not a secret, though its name looks like one.
SECRETS_ENV = "RAYJOBS_SECRETS"


def secret_names(environ: dict[str, str]) -> list[str]:
    """The secret-looking names of ``environ`` that jobs can use (Ray's own auth token and the list
    of forwarded names left out)."""
    return sorted(k for k, v in environ.items()
                  if v and SECRET_PATTERN.search(k) and not k.startswith("RAY_") and k != SECRETS_ENV)


def cluster_storage_root() -> str:
    """The storage root as the cluster side sees it: ``$RAYJOBS_STORAGE`` (the node script sets it),
    else ``$RAYJOBS_HOME/storage`` (the embedded head: its processes inherit the client's home)."""
    import os

    if os.environ.get("RAYJOBS_STORAGE"):
        return os.environ["RAYJOBS_STORAGE"]
    home = os.environ.get("RAYJOBS_HOME") or os.path.join(os.path.expanduser("~"), ".rayjobs")
    return os.path.join(os.path.expanduser(home), "storage")


#: The name of a cluster's queue store, ``<storage root>/queue/<name>``: one per cluster, so clusters
#: that share a storage root (one team bucket, one $RAYJOBS_HOME) keep their queues apart. The node
#: script sets it to the SkyPilot cluster's name, the embedded head to the id kept in its
#: ``$RAYJOBS_HOME/local``; a head started otherwise gets an id made once on its machine
#: (:func:`made_once_id`). Set by hand, it names the store outright (``default``: rayjobs' old one).
QUEUE_NAME_ENV = "RAYJOBS_QUEUE_NAME"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def queue_name_ok(name: str) -> bool:
    """Is ``name`` usable as a queue store's name (a directory: letters, digits, ``_.-``, at most 64)?"""
    return bool(_NAME.match(name or ""))


def made_once_id(path: str) -> str:
    """The id kept in the file ``path``, made (``c`` + 12 hex) and kept there the first time: a
    cluster's identity that outlives its restarts. Two makers racing keep the first one written."""
    import os
    import secrets as _secrets

    try:
        with open(path) as f:
            got = f.read().strip()
        if queue_name_ok(got):
            return got
    except OSError:
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    new = "c" + _secrets.token_hex(6)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        with open(path) as f:
            return f.read().strip() or new
    with os.fdopen(fd, "w") as f:
        f.write(new + "\n")
    return new


def skypilot_cluster_name(environ: dict[str, str]) -> Optional[str]:
    """The SkyPilot cluster's name from a task's ``SKYPILOT_CLUSTER_INFO`` (JSON), made a queue name
    (other characters as ``-``); None outside SkyPilot."""
    try:
        name = str(json.loads(environ.get("SKYPILOT_CLUSTER_INFO") or "{}").get("cluster_name") or "")
    except (ValueError, AttributeError):
        return None
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", name).strip("-.")[:64]
    return name if queue_name_ok(name) else None


#: Statuses: spelled once, in :mod:`rayjobs.contract.status` (re-exported here for the modules that
#: import them from ``shared``).
from rayjobs.contract.status import STATUSES, TERMINAL  # noqa: E402

#: Metadata key of rayjobs' own small Ray jobs (the queue's starter): views leave them out, the
#: queue deletes them from Ray's table once they ended.
ROLE_KEY = "rayjobs_role"
#: Metadata key of a job the queue pre-started before admitting it (its runner holds until then):
#: while the queue still lists the job as waiting, it is QUEUED whatever Ray says.
STANDBY_KEY = "rayjobs_standby"
#: Metadata key of a job queued with another job's durable code snapshot: the id of the job whose
#: snapshot it runs (the evaluations of a sweep's points go in one request, each with its point's code).
CODE_OF_KEY = "code_of"
#: The env var naming the file such a job's runner waits for (the queue writes it at admission).
STANDBY_GO_ENV = "RAYJOBS_STANDBY_GO"
#: The env var every process of a job carries (its trainer, and through verl's runtime_env each of
#: its Ray actors and what they spawn, e.g. vLLM's engine): its id. The reaper finds what a finished
#: job left behind on a node by it (:mod:`rayjobs.oncluster.reaper`).
JOB_MARK_ENV = "RAYJOBS_JOB"


#: How a log line gives a moment: readable, in UTC, to the millisecond (benchmarks compute gaps from it).
STAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC")


def stamp(t: Optional[float] = None) -> str:
    """``2026-12-01 11:27:35.123 UTC`` for epoch seconds ``t`` (default: now)."""
    t = time.time() if t is None else t
    d = datetime.fromtimestamp(t, tz=timezone.utc)
    return f"{d.strftime(STAMP_FORMAT)}.{int(d.microsecond / 1000):03d} UTC"


def parse_stamp(text: str) -> Optional[float]:
    """Epoch seconds of the first :func:`stamp` in ``text``, or None."""
    m = STAMP.search(text)
    if not m:
        return None
    d = datetime.strptime(m.group(1), STAMP_FORMAT + ".%f").replace(tzinfo=timezone.utc)
    return d.timestamp()


# --------------------------------------------------------------------------- what a node runs
#: The packages whose versions decide whether a job runs as it was checked: reported per node
#: (Ray node labels) and compared with the client's.
STACK = ("rayjobs", "ray", "verl", "vllm", "torch", "flash-attn")
#: The env var naming the git commit rayjobs was built from (the cluster image sets it; `rayjobs up`
#: passes the client's to the SkyPilot task).
COMMIT_ENV = "RAYJOBS_COMMIT"
#: Prefix of the Ray node labels that carry a node's versions (``ray.io/`` is Ray's own).
LABEL_PREFIX = "rayjobs.io/"


def source_commit() -> Optional[str]:
    """The git commit this rayjobs was built from: ``$RAYJOBS_COMMIT``, else the commit of the
    checkout rayjobs is imported from (an editable install), else None (a wheel without one)."""
    import os
    import subprocess

    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV].strip() or None
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(top, ".git")):
        return None
    try:
        r = subprocess.run(["git", "-C", top, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def stack_versions() -> dict[str, Optional[str]]:
    """This environment's versions of :data:`STACK` (None: not installed), plus ``commit``."""
    from importlib import metadata

    out: dict[str, Optional[str]] = {}
    for dist in STACK:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    out["commit"] = source_commit()
    return out


def version_labels(versions: dict[str, Optional[str]]) -> dict[str, str]:
    """Ray node labels for ``versions``: ``rayjobs.io/verl=0.9.1``, ``rayjobs.io/commit=<12 hex>``.

    A label value is at most 63 characters of ``[A-Za-z0-9_.-]`` (Ray checks), so a local version
    such as ``2.11.0+cu130`` is written ``2.11.0_cu130``; :func:`labels_versions` reads them back.
    """
    out = {}
    for name, value in versions.items():
        if value:
            v = re.sub(r"[^A-Za-z0-9_.-]", "_", value[:12] if name == "commit" else value)[:63].strip("_.-")
            if v:
                out[LABEL_PREFIX + name] = v
    return out


def labels_versions(labels: dict[str, str]) -> dict[str, str]:
    """The versions a node's labels carry (see :func:`version_labels`), ``+`` restored."""
    out = {}
    for key, value in (labels or {}).items():
        if key.startswith(LABEL_PREFIX):
            out[key[len(LABEL_PREFIX):]] = value.replace("_", "+")  # PEP 440 versions have no "_"
    return out

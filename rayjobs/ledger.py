"""The local record of every submission: history that outlives the cluster.

``$RAYJOBS_HOME/ledger.jsonl`` gets one JSON line per submitted job (id, experiment, overrides,
address, sweep, the submit request); ``$RAYJOBS_HOME/runs/<id>/config.yaml`` keeps the resolved
config. Appends are single ``write`` calls of one line, so parallel sweep submissions do not
interleave.

What outlives the cluster: an ended job's final copy (``runs/<id>/final.json``: its row;
``log.tail``: its log's last lines; ``metrics.<k>.jsonl``: verl's metrics per attempt), written
once, each file ``tmp + fsync + rename`` and ``final.json`` last, bounded (:data:`TAIL_LINES`,
:data:`TAIL_MAX_BYTES`, :data:`METRICS_MAX_BYTES`); and ``seen/<cluster>.json``, what the last
command saw of every job of a cluster (its status when nothing was kept).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import AbstractSet, Any, Iterator, Optional

from rayjobs.contract import paths
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


#: How :func:`record` writes a line's id (``sort_keys``, json's default separators): the keys before
#: it (address, cluster, config, entrypoint, experiment) hold strings, in which every ``"`` is escaped.
_ID_KEY = '"id": "'


def entries_not_in(known: AbstractSet[str]) -> Iterator[dict[str, Any]]:
    """:func:`entries`, but none of the jobs in ``known``: their lines are skipped by their id,
    unparsed (a list of 10,000 jobs the cluster still knows read a 28 MB ledger in 0.25 s)."""
    try:
        with path().open() as f:
            for line in f:
                i = line.find(_ID_KEY)
                if i >= 0:
                    i += len(_ID_KEY)
                    if line[i:line.find('"', i)] in known:
                        continue
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
    """The newest record of every job whose id is ``prefix`` or starts with it (an exact id wins:
    :func:`rayjobs.contract.ids.starting`)."""
    from rayjobs.contract.ids import starting

    newest: dict[str, dict[str, Any]] = {}
    for e in entries():
        jid = str(e.get("id") or "")
        if jid.startswith(prefix):  # (only these kept in memory)
            newest[jid] = e
    named = set(starting(prefix, newest))
    return [e for jid, e in newest.items() if jid in named]


# --------------------------------------------------------------------------- history that outlives the cluster
#: A kept final copy: ``runs/<id>/final.json`` (the row), ``log.tail`` and ``metrics.<k>.jsonl``.
FINAL = "final.json"
LOG_TAIL = "log.tail"
#: The log tail kept: its last 200 lines, at most 256 KiB (verl's step lines run to ~3 KB).
TAIL_LINES = 200
TAIL_MAX_BYTES = 256 << 10
#: The metrics kept per job, all attempts together; a longer history is thinned (every k-th
#: record of each attempt, its first and last kept) so a curve keeps its shape at any length.
METRICS_MAX_BYTES = 8 << 20


def _atomic_write(p: Path, data: bytes) -> None:
    """The local record's files: readable by their owner only, written at once (:func:`rayjobs.contract.files.write_atomic`)."""
    from rayjobs.contract.files import write_atomic

    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, data, mode=0o600)


def kept(job_id: str) -> Optional[dict[str, Any]]:
    """The final copy kept of ``job_id`` (``final.json``), or None."""
    try:  # plain os calls: `list` of a gone cluster reads one of these per job (2,000+)
        with open(os.path.join(settings.home(), "runs", job_id, FINAL), "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("row"), dict) else None


def is_kept(job_id: str) -> bool:
    """Has a final copy been kept (one ``stat``)?"""
    return os.path.isfile(os.path.join(settings.home(), "runs", job_id, FINAL))


def tail_lines(log: bytes, lines: int = TAIL_LINES, max_bytes: int = TAIL_MAX_BYTES) -> bytes:
    """The last ``lines`` complete-or-final lines of ``log``, at most ``max_bytes`` (cut at a line start)."""
    end = log.rstrip(b"\n")
    cut = len(end)
    for _ in range(lines):
        cut = end.rfind(b"\n", 0, cut)
        if cut < 0:
            break
    out = log[cut + 1:] if cut >= 0 else log
    if len(out) > max_bytes:
        out = out[-max_bytes:]
        nl = out.find(b"\n")
        out = out[nl + 1:] if 0 <= nl < len(out) - 1 else out
    return out


def thin_jsonl(files: list[bytes], max_bytes: int = METRICS_MAX_BYTES) -> list[bytes]:
    """The attempts' JSONL bodies, every k-th line of each kept (first and last always) to fit ``max_bytes``."""
    total = sum(len(b) for b in files)
    if total <= max_bytes:
        return files
    k = -(-total // max_bytes)
    out = []
    for body in files:
        lines = [ln for ln in body.split(b"\n") if ln.strip()]
        keep = [ln for i, ln in enumerate(lines) if i % k == 0 or i == len(lines) - 1]
        out.append(b"".join(ln + b"\n" for ln in keep))
    return out


def keep_final(job_id: str, row: dict[str, Any], *, log_tail: Optional[bytes],
               metrics: Optional[list[bytes]], metrics_from: Optional[str]) -> bool:
    """Keep a finished job's final copy once: its ``log.tail``, ``metrics.<k>.jsonl`` (one body per
    attempt), then ``final.json`` (written last: its presence means the copy is whole).

    Args:
        job_id: the job.
        row: its row as ``list``/``status`` show it (terminal).
        log_tail: its log's end (cut to :data:`TAIL_LINES` lines here), None if unreadable.
        metrics: the per-attempt JSONL bodies (thinned to :data:`METRICS_MAX_BYTES` here); None:
            not read yet (a remote cluster's run dir; :func:`keep_metrics` adds them later).
        metrics_from: ``jsonl`` (verl's files) or ``log`` (its step lines), for the record.

    Returns:
        False if a copy was already kept (nothing is rewritten).
    """
    if is_kept(job_id):
        return False
    d = run_dir(job_id)
    if log_tail is not None:
        _atomic_write(d / LOG_TAIL, tail_lines(log_tail))
    doc = {"id": job_id, "kept_at": _now(), "row": row, "log_tail": log_tail is not None}
    doc.update(_write_metrics(d, metrics, metrics_from))
    _atomic_write(d / FINAL, json.dumps(doc, sort_keys=True, default=str).encode())
    return True


def keep_metrics(job_id: str, metrics: list[bytes], metrics_from: str) -> bool:
    """Add the metrics to a kept copy that has none yet (once); False if it has them or is not kept."""
    doc = kept(job_id)
    if doc is None or doc.get("metrics_from"):
        return False
    doc.update(_write_metrics(run_dir(job_id), metrics, metrics_from))
    _atomic_write(run_dir(job_id) / FINAL, json.dumps(doc, sort_keys=True, default=str).encode())
    return True


def _write_metrics(d: Path, metrics: Optional[list[bytes]], metrics_from: Optional[str]) -> dict[str, Any]:
    if metrics is None:
        return {"metrics_from": None, "metrics_files": 0, "metrics_bytes": 0}
    bodies = thin_jsonl(metrics)
    for k, body in enumerate(bodies, 1):
        _atomic_write(paths.metrics_file(d, k), body)
    return {"metrics_from": metrics_from, "metrics_files": len(bodies), "metrics_bytes": sum(map(len, bodies))}


def kept_log_tail(job_id: str) -> Optional[bytes]:
    """The kept ``log.tail`` of a job, or None."""
    try:
        return (run_dir(job_id) / LOG_TAIL).read_bytes()
    except OSError:
        return None


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


# --------------------------------------------------------------------------- last seen, per cluster
#: The row fields remembered of every job a command saw (one small file per cluster).
SEEN_FIELDS = ("status", "attempt", "max_attempts", "step", "total_steps", "checkpoint_step", "score",
               "end_time", "cause", "error")


def _seen_path(cluster: str) -> Path:
    import hashlib

    slug = "".join(c if c.isalnum() else "_" for c in cluster)[-40:]
    return settings.home() / "seen" / f"{slug}-{hashlib.sha1(cluster.encode()).hexdigest()[:8]}.json"


def seen(cluster: str) -> dict[str, dict[str, Any]]:
    """What the laptop last saw of each job of ``cluster``: id -> :data:`SEEN_FIELDS` + ``seen_at``."""
    return _read_doc(_seen_path(cluster))


def remember_seen(cluster: str, rows: list[dict[str, Any]]) -> bool:
    """Merge the rows just shown into ``cluster``'s last-seen file (written only when something
    changed; a lock file orders two commands writing at once). True if it was written."""
    import fcntl

    new = {str(r["id"]): {k: r[k] for k in SEEN_FIELDS if r.get(k) is not None}
           for r in rows if r.get("id") and r.get("source") is None}
    if not new:
        return False
    p = _seen_path(cluster)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = seen(cluster)
        changed = {i: v for i, v in new.items() if {k: x for k, x in old.get(i, {}).items() if k != "seen_at"} != v}
        if not changed:
            return False
        now = _now()
        old.update({i: dict(v, seen_at=now) for i, v in changed.items()})
        _atomic_write(p, json.dumps(old, sort_keys=True, default=str).encode())
    return True


# --------------------------------------------------------------------------- usage, per cluster
def _usage_path(cluster: str) -> Path:
    return _seen_path(cluster).with_name(_seen_path(cluster).stem + "-usage.json")


def remember_usage(cluster: str, jobs: dict[str, dict[str, Any]], at: float) -> None:
    """Merge the per-job rows of a ``usage`` answer into ``cluster``'s copy (what ``usage`` says
    once the cluster is gone); each row keeps the time it was computed (``at``, epoch s)."""
    import fcntl

    if not jobs:
        return
    p = _usage_path(cluster)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = usage_rows(cluster)
        old.update({i: dict(r, seen_at=at) for i, r in jobs.items()})
        _atomic_write(p, json.dumps(old, sort_keys=True, default=str).encode())


def usage_rows(cluster: str) -> dict[str, dict[str, Any]]:
    """``cluster``'s copy of the per-job usage rows (id -> row with ``seen_at``), or {}."""
    return _read_doc(_usage_path(cluster))


def _read_doc(p: Path) -> dict[str, dict[str, Any]]:
    """A per-cluster JSON copy (seen rows, usage rows): its dict, or {} when absent or unreadable."""
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}

"""The queue's durable store: one JSON file per job and one code snapshot per working_dir, on disk.

Where: ``<storage root>/queue/`` (the storage root the jobs write their checkpoints to:
``$RAYJOBS_STORAGE`` on the head, ``$RAYJOBS_HOME/storage`` on the embedded head). Not the head's
own disk: a head machine that is replaced (spot reclaim, a new pod) mounts the same storage root,
so the backlog, the code of every waiting job and the checkpoints of the running ones come back
together; Ray's GCS (its job table and working_dir packages) does not.

Layout::

    queue/<name>/jobs/<id>.json     the job's record (its submit request, state, attempts, final status)
    queue/<name>/code/<hash>/      the job's code, copied once per content hash when it is queued
    queue/<name>/inbox/<id>       "new record" markers, so the queue finds new jobs without a scan
    queue/<name>/control/<op>-<id>  requests from the laptop (cancel a waiting job), through a Ray job

Every write is a new file written, flushed, fsync'ed and renamed over the old one: a writer cut
off mid-write (SIGKILL, a full disk, the node lost) leaves the previous version and a stray
``*.tmp`` that readers ignore -- never half a record, never a record twice. On object-store
mounts (SkyPilot ``MOUNT_CACHED``) a rename is a copy: still one whole object per version.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from rayjobs.shared import cluster_storage_root

#: A record's states. ``waiting``: in the queue, no Ray job yet. ``admitted``: its Ray job was
#: submitted (the trainer starts, or runs). ``done``: it ended (``status`` says how).
WAITING, ADMITTED, DONE = "waiting", "admitted", "done"


#: Two clusters that share one storage root (one bucket) need a queue each: set it on each head.
NAME_ENV = "RAYJOBS_QUEUE_NAME"


def store_root(storage: Optional[str] = None) -> Path:
    """``<storage root>/queue/<name>`` (the cluster side's storage root unless ``storage`` is given;
    ``name`` from ``$RAYJOBS_QUEUE_NAME``, default ``default``)."""
    return Path(storage or cluster_storage_root()) / "queue" / (os.environ.get(NAME_ENV) or "default")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` all at once (tmp file + fsync + rename in the same dir)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class QueueStore:
    """The files under :func:`store_root`; every method is safe against concurrent writers of other ids."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self.root = Path(root) if root is not None else store_root()
        for sub in ("jobs", "code", "inbox", "control"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ records
    def path(self, job_id: str) -> Path:
        return self.root / "jobs" / f"{job_id}.json"

    def put(self, rec: dict[str, Any], *, new: bool = False) -> None:
        """Write a job's record (``new``: also leave an inbox marker, the queue's cue)."""
        rec = dict(rec, updated_at=time.time())
        write_atomic(self.path(rec["id"]), (json.dumps(rec, sort_keys=True) + "\n").encode())
        if new:
            self.announce(rec["id"])

    def announce(self, job_id: str) -> None:
        """Leave the inbox marker of a record already written (``put(..., new=True)`` in two steps)."""
        write_atomic(self.root / "inbox" / job_id, b"")

    def get(self, job_id: str) -> Optional[dict[str, Any]]:
        """A job's record, or None (missing or unreadable)."""
        try:
            return json.loads(self.path(job_id).read_text())
        except (OSError, ValueError):
            return None

    def exists(self, job_id: str) -> bool:
        return self.path(job_id).exists()

    def all(self) -> dict[str, dict[str, Any]]:
        """Every record (``*.tmp`` and unreadable files skipped), by id."""
        out = {}
        for p in (self.root / "jobs").glob("*.json"):
            try:
                rec = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            out[rec.get("id", p.stem)] = rec
        return out

    def take_inbox(self) -> list[str]:
        """Ids of records queued since the last call (their markers are removed)."""
        ids = []
        for p in (self.root / "inbox").iterdir():
            if p.name.startswith("."):
                continue
            ids.append(p.name)
            p.unlink(missing_ok=True)
        return sorted(ids)

    def remove(self, job_id: str) -> None:
        self.path(job_id).unlink(missing_ok=True)

    # ------------------------------------------------------------------ control requests
    def request(self, op: str, job_id: str) -> None:
        """Leave a request for the queue (``cancel``), picked up within a tick."""
        write_atomic(self.root / "control" / f"{op}-{job_id}", b"")

    def take_requests(self) -> list[tuple[str, str]]:
        """``(op, job_id)`` of the requests left since the last call (removed)."""
        out = []
        for p in (self.root / "control").iterdir():
            if p.name.startswith(".") or "-" not in p.name:
                continue
            op, _, job_id = p.name.partition("-")
            out.append((op, job_id))
            p.unlink(missing_ok=True)
        return out

    # ------------------------------------------------------------------ code snapshots
    def code_dir(self, key: str) -> Path:
        return self.root / "code" / key

    def keep_code(self, key: str, src: Path) -> Path:
        """A durable copy of ``src`` (a job's unpacked working_dir) under ``key``, once per key.

        Copied into a temp dir and renamed, so a cut copy is never taken for a whole one.
        """
        dest = self.code_dir(key)
        if dest.is_dir():
            return dest
        tmp = dest.with_name(f".{key}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, symlinks=True)
        try:
            os.replace(tmp, dest)
        except OSError:  # another job of the same code won the race: theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def code_of(self, job_id: str) -> str:
        """The code key of ``job_id``'s durable snapshot, which must still be whole on disk.

        Raises:
            LookupError: one line -- the queue has no record of the job, or its snapshot is gone
                (the queue drops a finished job's code ``RAYJOBS_CODE_RETENTION_S`` after it ended).
        """
        rec = self.get(job_id)
        if rec is None:
            raise LookupError(f"the queue has no record of {job_id} (it was not submitted through rayjobs on this cluster)")
        key = str(rec.get("code") or "")
        if not key or not self.code_dir(key).is_dir():
            raise LookupError(f"the code snapshot of {job_id} is gone (the queue keeps a finished job's code "
                              f"RAYJOBS_CODE_RETENTION_S, 7 days by default): submit it again from its source")
        return key

    def drop_code(self, keep: set[str]) -> int:
        """Remove code snapshots no record names (``keep``); the number removed."""
        n = 0
        for p in (self.root / "code").iterdir():
            if not p.name.startswith(".") and p.name not in keep:
                shutil.rmtree(p, ignore_errors=True)
                n += 1
        return n

    def stray_tmp(self) -> Iterator[Path]:
        """Left-overs of writers cut off mid-write (safe to delete)."""
        for sub in ("jobs", "code", "inbox", "control"):
            yield from (self.root / sub).glob(".*.tmp")

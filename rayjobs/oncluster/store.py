"""The queue's durable store: one record file per job and one code snapshot per working_dir.

Where: ``<storage root>/queue/<name>/`` (the storage root the jobs write their checkpoints to:
``$RAYJOBS_STORAGE`` on the head, ``$RAYJOBS_HOME/storage`` on the embedded head). Not the head's
own disk: a head machine that is replaced (spot reclaim, a new pod) mounts the same storage root,
so the backlog, the code of every waiting job and the checkpoints of the running ones come back
together; Ray's GCS (its job table and working_dir packages) does not. ``<name>`` is the
cluster's, not its address's (:func:`queue_name`): clusters sharing a storage root (one team
bucket, one ``$RAYJOBS_HOME``) keep a store each, and a second live queue on one store is refused
(:mod:`rayjobs.oncluster.lease`).

Layout::

    queue/<name>/jobs/<id>.json     the job's record (rayjobs.contract.record.JobRecord)
    queue/<name>/code/<hash>/      a job's code, unpacked once per content hash
    queue/<name>/lease.json        which queue holds the store: owner, heartbeat (rayjobs.oncluster.lease)

Every record write is :func:`rayjobs.contract.files.write_atomic` (tmp, fsync, rename): a writer cut
off mid-write leaves the previous version and a stray ``.*.tmp`` that readers skip -- never half a
record. On object-store mounts (SkyPilot ``MOUNT_CACHED``) a rename is a copy: still one whole
object per version. Only the queue (one process per cluster) writes here.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from pathlib import Path
from typing import Iterable, Iterator, Optional

from rayjobs.contract.files import is_temp, place, write_atomic
from rayjobs.contract.record import JobRecord
from rayjobs.shared import QUEUE_NAME_ENV, cluster_storage_root, made_once_id, queue_name_ok

NAME_ENV = QUEUE_NAME_ENV
#: A code snapshot uploaded, or found there by a submit, this recently is kept though no record
#: names it yet: the submit's enqueue comes after its upload.
CODE_GRACE_S = 3600.0


def local_id_path() -> str:
    """Where a head that nothing named keeps the id it made once: its machine's rayjobs node dir
    (``$RAYJOBS_NODE_DIR``, ``~/.rayjobs/node``: where the node script keeps its own)."""
    base = os.environ.get("RAYJOBS_NODE_DIR") or os.path.join(os.path.expanduser("~"), ".rayjobs", "node")
    return os.path.join(base, "cluster_id")


def queue_name() -> str:
    """This cluster's store name: ``$RAYJOBS_QUEUE_NAME`` (the node script's SkyPilot cluster name,
    the embedded head's kept id, or a user's), else an id made once on this machine.

    Raises:
        ValueError: one line -- the name set cannot be a directory name.
    """
    name = (os.environ.get(NAME_ENV) or "").strip()
    if not name:
        return made_once_id(local_id_path())
    if not queue_name_ok(name):
        raise ValueError(f"{NAME_ENV}={name!r} cannot name the queue's store: use letters, digits and _ . - "
                         f"(at most 64, not starting with . or -)")
    return name


def store_root(storage: Optional[str] = None) -> Path:
    """``<storage root>/queue/<name>`` (the cluster side's storage root unless ``storage`` is given;
    ``name``: :func:`queue_name`)."""
    return Path(storage or cluster_storage_root()) / "queue" / queue_name()


class QueueStore:
    """The files under :func:`store_root`."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self.root = Path(root) if root is not None else store_root()
        for sub in ("jobs", "code"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.unreadable: dict[str, Path] = {}  #: ids whose record file is not a whole record (last :meth:`all`)

    # ------------------------------------------------------------------ records
    def path(self, job_id: str) -> Path:
        return self.root / "jobs" / f"{job_id}.json"

    def put(self, rec: JobRecord) -> JobRecord:
        """Write a job's record durably (it is on disk when this returns); the record as written."""
        rec = self.stamp(rec)
        self.write(rec)
        return rec

    @staticmethod
    def stamp(rec: JobRecord) -> JobRecord:
        """The record as :meth:`put` writes it (its ``updated_at`` now)."""
        return rec.with_(updated_at=time.time())

    def write(self, rec: JobRecord) -> None:
        """Write ``rec`` as given, durably (tmp, fsync, rename)."""
        write_atomic(self.path(rec.id), (json.dumps(rec.to_json(), sort_keys=True) + "\n").encode())

    def put_many(self, recs: Iterable[JobRecord]) -> list[JobRecord]:
        """:meth:`put` each (a sweep's records: each file fsync'ed before this returns)."""
        return [self.put(r) for r in recs]

    def get(self, job_id: str) -> Optional[JobRecord]:
        """A job's record, or None (missing or unreadable)."""
        try:
            return JobRecord.from_json(json.loads(self.path(job_id).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def exists(self, job_id: str) -> bool:
        return self.path(job_id).exists()

    def all(self) -> dict[str, JobRecord]:
        """Every readable record, by id; the unreadable ones (a file cut or edited by hand) are
        left out and named in :attr:`unreadable`."""
        out: dict[str, JobRecord] = {}
        self.unreadable = {}
        for p in (self.root / "jobs").glob("*.json"):
            try:
                rec = JobRecord.from_json(json.loads(p.read_text()))
            except (OSError, ValueError, TypeError):
                self.unreadable[p.stem] = p
                continue
            out[rec.id] = rec
        return out

    def remove(self, job_id: str) -> None:
        self.path(job_id).unlink(missing_ok=True)

    # ------------------------------------------------------------------ code snapshots
    def code_dir(self, key: str) -> Path:
        return self.root / "code" / key

    def has_code(self, key: str) -> bool:
        return bool(key) and self.code_dir(key).is_dir()

    def keep_zip(self, key: str, archive: Path) -> Path:
        """Unpack a code archive as snapshot ``key``, once: into a temp dir, then renamed into place,
        so a cut unpack is never taken for a whole snapshot.

        Raises:
            ValueError: not a zip archive, or an entry that would land outside the snapshot.
        """
        dest = self.code_dir(key)
        if dest.is_dir():
            return dest
        tmp = dest.with_name(f".{key}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            with zipfile.ZipFile(archive) as z:
                for name in z.namelist():
                    target = (tmp / name).resolve()
                    if not str(target).startswith(str(tmp.resolve()) + os.sep) and target != tmp.resolve():
                        raise ValueError(f"the code archive has an entry outside its root: {name!r}")
                z.extractall(tmp)
        except zipfile.BadZipFile as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ValueError(f"the code upload is not a zip archive ({e})") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        tmp.mkdir(exist_ok=True)  # an empty working_dir is an empty archive
        if not place(tmp, dest):
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def keep_dir(self, key: str, src: Path) -> Path:
        """A durable copy of the directory ``src`` as snapshot ``key`` (once per key)."""
        dest = self.code_dir(key)
        if dest.is_dir():
            return dest
        tmp = dest.with_name(f".{key}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        shutil.copytree(src, tmp, symlinks=True)
        if not place(tmp, dest):
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def code_of(self, job_id: str) -> str:
        """The code key of ``job_id``'s snapshot, which must still be whole on disk.

        Raises:
            LookupError: one line -- the queue has no record of the job, or its snapshot is gone
                (the queue drops a finished job's code ``RAYJOBS_CODE_RETENTION_S`` after it ended).
        """
        rec = self.get(job_id)
        if rec is None:
            raise LookupError(f"the queue has no record of {job_id} (it was not submitted through rayjobs on this cluster)")
        if not self.has_code(rec.code):
            raise LookupError(f"the code snapshot of {job_id} is gone (the queue keeps a finished job's code "
                              f"RAYJOBS_CODE_RETENTION_S, 7 days by default): submit it again from its source")
        return rec.code

    def code_wanted(self, key: str) -> bool:
        """Is snapshot ``key`` here (a submit asks before it uploads)? If so, it counts as uploaded
        now: :meth:`drop_code` spares it for :data:`CODE_GRACE_S`, until the enqueue names it."""
        if not self.has_code(key):
            return False
        try:
            os.utime(self.code_dir(key))
        except OSError:
            return False
        return True

    def drop_code(self, keep: set[str], now: Optional[float] = None) -> int:
        """Remove the code snapshots no record names (``keep``) and none uploaded or asked for in
        the last :data:`CODE_GRACE_S`; the number removed."""
        cutoff = (time.time() if now is None else now) - CODE_GRACE_S
        n = 0
        for p in (self.root / "code").iterdir():
            if p.name.startswith(".") or p.name in keep:
                continue
            try:
                if p.stat().st_mtime > cutoff:
                    continue
            except OSError:
                continue
            shutil.rmtree(p, ignore_errors=True)
            n += 1
        return n

    def stray_tmp(self) -> Iterator[Path]:
        """Left-overs of writers cut off mid-write (safe to delete)."""
        for sub in ("jobs", "code"):
            yield from (p for p in (self.root / sub).iterdir() if is_temp(p.name))

"""One reap of a job at a time on a machine, and what the reap that held it did.

Reaps of one job can overlap on a machine: the queue reaps a job at its trainer's Ray exit and again
when its Ray job has ended, and raylets that share a machine (tests, benchmarks) each reap it. Only
one of them may signal the job's processes: none can tell which signal ended a process it did not
start (there is no ``waitpid`` for another's child), so of a process two reapers signal, one of them
says the wrong signal. :class:`ReapLock` is an ``flock`` on a file per job in the temp dir (every
raylet and process of the machine shares it). Its holder leaves its report in the file and removes
the file before it unlocks; a reap that waited reads that report there (:attr:`ReapLock.earlier`:
what was done to the job's processes while it waited), then locks a new file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
import time
from typing import Any, Optional

POLL_S = 0.02
_MAX_TURNS = 100  #: bounded: each turn is a reap that ended while this one waited


def lock_path(job_id: str) -> str:
    """This machine's lock file for ``job_id``'s reaps (readable name, hashed: two ids never share one)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", job_id)[:80] + "-" + hashlib.sha1(job_id.encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"rayjobs-reap-{os.getuid()}", name)


class ReapLock:
    """``with ReapLock(job_id, wait_s) as lock:`` held inside, if it could be had within ``wait_s``
    (else the reap goes on without it: ``lock.fd`` is None); ``lock.earlier``: the reports of the
    reaps that held it meanwhile; set ``lock.report`` to this reap's, for the next one."""

    def __init__(self, job_id: str, wait_s: float) -> None:
        self.path, self.wait_s = lock_path(job_id), wait_s
        self.fd: Optional[int] = None
        self.earlier: list[dict[str, Any]] = []
        self.report: list[dict[str, Any]] = []

    def __enter__(self) -> "ReapLock":
        deadline = time.monotonic() + self.wait_s
        for _ in range(_MAX_TURNS):
            try:
                os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
                d = os.lstat(os.path.dirname(self.path))
                if not stat.S_ISDIR(d.st_mode) or d.st_uid != os.getuid():  # not ours (a shared /tmp)
                    return self
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError:  # no lock to be had here: reap without one
                return self
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return self
                time.sleep(POLL_S)
            if _is_at(fd, self.path):
                self.fd = fd
                return self
            try:  # removed by its holder: the report it left
                self.earlier += json.loads(os.pread(fd, 1 << 22, 0) or b"[]")
            except ValueError:
                pass
            os.close(fd)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(self.report).encode(), 0)
            os.unlink(self.path)
        except OSError:  # left in place: the next reap locks it as it is
            pass
        finally:
            os.close(self.fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _is_at(fd: int, path: str) -> bool:
    """Is the open file still the one at ``path`` (not removed, nor replaced by a new one)?"""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False

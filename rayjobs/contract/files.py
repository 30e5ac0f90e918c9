"""The one atomic write: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Optional, Union

_N = [0]
_LOCK = threading.Lock()


def write_atomic(path: Union[str, Path], data: bytes, *, mode: int = 0o644, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` at once: a temp file in the same dir, flushed, fsync'ed
    (unless ``fsync`` is False: a cache whose loss costs nothing) and renamed over ``path``.

    A writer cut off mid-write (SIGKILL, a full disk, the node lost) leaves the previous version
    and a stray ``.<name>.<pid>.<n>.tmp`` (readers skip dot files), never half a file. The temp
    name is unique per process and call, so threads and processes writing the same path race
    only on the rename, which is atomic. ``mode`` is the new file's permission bits (0o600 for a secret).
    """
    path = Path(path)
    with _LOCK:
        _N[0] += 1
        n = _N[0]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{n}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)


def write_json(path: Union[str, Path], doc: Any, *, mode: int = 0o644, fsync: bool = True) -> None:
    """:func:`write_atomic` of ``doc`` as one JSON line (keys sorted: the same doc, the same bytes)."""
    write_atomic(path, (json.dumps(doc, sort_keys=True, default=str) + "\n").encode(), mode=mode, fsync=fsync)


def read_json(path: Union[str, Path]) -> Optional[Any]:
    """The JSON document at ``path``, or None when it is missing or not whole JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def is_temp(name: str) -> bool:
    """Is ``name`` a temp file of :func:`write_atomic` (left by a writer cut off mid-write)?"""
    return name.startswith(".") and name.endswith(".tmp")


def place(src: Union[str, Path], dest: Union[str, Path]) -> bool:
    """Rename a finished file or directory ``src`` to ``dest`` at once (same file system): a
    reader sees nothing or the whole of it. False (``src`` left as it is) when ``dest`` exists --
    another writer of the same content won the race, or it was kept before."""
    try:
        if Path(dest).exists():
            return False
        os.replace(src, dest)
        return True
    except OSError:
        return False

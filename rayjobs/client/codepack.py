"""The code a job ships, as one archive: its working_dir zipped the way Ray would ship it, named by
its content (:func:`rayjobs.contract.wire.code_key`), so the queue keeps one snapshot per content and
a sweep -- or the next submit of unchanged code -- uploads nothing twice.

The files are Ray's own choice (its working_dir traversal: ``.gitignore`` and ``rayjobs.excludes``
honoured, as :mod:`rayjobs.submit.workingdir` counts them); the archive is deterministic (sorted
names, one fixed time stamp, the files' permission bits), so the same files give the same key on
any machine.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
import threading
import zipfile
from pathlib import Path

from rayjobs.contract.wire import code_key

_QUIET = logging.getLogger("rayjobs.quiet")
_QUIET.setLevel(logging.CRITICAL)
_EPOCH = (1980, 1, 1, 0, 0, 0)
_MEMO: dict[tuple[str, tuple[str, ...]], tuple[tuple, str, Path]] = {}
_LOCK = threading.Lock()


def files(root: str, excludes: list[str]) -> list[Path]:
    """The files (and empty dirs) Ray would upload of ``root``, sorted."""
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    top = Path(root).absolute()
    found: list[Path] = []
    _dir_travel(top, [_get_excludes(top, excludes)], found.append, include_gitignore=True, logger=_QUIET)
    return sorted(p for p in found if p != top)


def pack(root: str, excludes: list[str]) -> tuple[str, Path]:
    """(content key, archive path) of ``root``'s code, packed again only when its files changed
    (the submit's checks pack it in a thread; the send then finds it packed).

    Raises:
        OSError: a file could not be read.
    """
    top = Path(root).absolute()
    chosen = files(root, excludes)
    sig = tuple((p.relative_to(top).as_posix(), *_stamp(p)) for p in chosen)
    memo = (str(top), tuple(excludes))
    with _LOCK:
        got = _MEMO.get(memo)
        if got and got[0] == sig and got[2].exists():
            return got[1], got[2]
        fd, name = tempfile.mkstemp(prefix="rayjobs-code-", suffix=".zip")
        os.close(fd)
        archive = Path(name)
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            for p in chosen:
                _add(z, top, p)
        digest = hashlib.sha256()
        with open(archive, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        if got:
            got[2].unlink(missing_ok=True)
        _MEMO[memo] = (sig, code_key(digest.hexdigest()), archive)
        return _MEMO[memo][1], archive


def _stamp(p: Path) -> tuple[int, int]:
    try:
        st = p.stat()
        return st.st_mtime_ns, st.st_size
    except OSError:
        return 0, -1


def _add(z: zipfile.ZipFile, top: Path, p: Path) -> None:
    rel = p.relative_to(top).as_posix()
    st = p.stat()
    if stat.S_ISDIR(st.st_mode):
        if not any(p.iterdir()):
            info = zipfile.ZipInfo(rel + "/", _EPOCH)
            info.external_attr = (stat.S_IFDIR | 0o755) << 16
            z.writestr(info, b"")
        return
    info = zipfile.ZipInfo(rel, _EPOCH)
    info.external_attr = (stat.S_IFREG | (st.st_mode & 0o777)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(p, "rb") as f:
        z.writestr(info, f.read(), compresslevel=1)


def forget() -> None:
    """Drop the archives this process packed (its exit does too)."""
    with _LOCK:
        for _, _, archive in _MEMO.values():
            archive.unlink(missing_ok=True)
        _MEMO.clear()


def size(root: str, excludes: list[str]) -> int:
    """Bytes Ray would upload of ``root`` (regular files only)."""
    total = 0
    for p in files(root, excludes):
        try:
            st = p.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


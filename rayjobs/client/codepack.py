"""The code a job ships, as one archive: its working_dir zipped the way Ray would ship it, named by
its content (:func:`rayjobs.contract.wire.code_key`), so the queue keeps one snapshot per content and
a sweep -- or the next submit of unchanged code -- uploads nothing twice.

The files are those Ray's working_dir upload would take -- the same walk and ignore rules as its
packaging (``rayjobs.excludes``, and each directory's ``.gitignore`` and ``.rayignore``, matched as
git does, by ``pathspec``, the matcher Ray vendors), without importing Ray (its import costs a
submit a second of CPU); the archive is deterministic (sorted names, one fixed time stamp, the
files' permission bits), so the same files give the same key on any machine.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import stat
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Callable, Iterable

from rayjobs.contract.wire import code_key

_EPOCH = (1980, 1, 1, 0, 0, 0)
_MEMO: dict[tuple[str, tuple[str, ...]], tuple[tuple, str, Path]] = {}
_LOCK = threading.Lock()


Matcher = Callable[[Path], bool]


def _matcher(base: Path, patterns: Iterable[str]) -> Matcher:
    """True for a path ``patterns`` (git's wildmatch, relative to ``base``) exclude."""
    import pathspec

    try:  # pathspec >= 1.0 names git's rules "gitignore" (and warns on the old name Ray still uses)
        spec = pathspec.PathSpec.from_lines("gitignore", patterns)
    except LookupError:
        spec = pathspec.PathSpec.from_lines("gitwildmatch", patterns)
    return lambda p: spec.match_file(str(p.relative_to(base)))


def _ignore_files(d: Path) -> list[Matcher]:
    """The directory's own ``.gitignore`` and ``.rayignore``, as Ray reads them."""
    out = []
    for name in (".gitignore", ".rayignore"):
        f = d / name
        if f.is_file():
            out.append(_matcher(d, f.read_text(errors="replace").splitlines()))
    return out


def _travel(path: Path, excludes: list[Matcher], found: list[Path]) -> None:
    """Ray's walk: a path an exclude matches is skipped with all below it; a directory's ignore files
    apply below it (and to it)."""
    new = _ignore_files(path) if path.is_dir() and not path.is_symlink() else []
    excludes.extend(new)
    if not any(e(path) for e in excludes):
        found.append(path)
        if path.is_dir():
            for sub in path.iterdir():
                _travel(sub, excludes, found)
    del excludes[len(excludes) - len(new):]


def files(root: str, excludes: list[str]) -> list[Path]:
    """The files (and empty dirs) Ray would upload of ``root``, sorted."""
    top = Path(root).absolute()
    found: list[Path] = []
    _travel(top, [_matcher(top, excludes)], found)
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
    try:
        st = p.stat()
        data = None if stat.S_ISDIR(st.st_mode) else p.read_bytes()
    except FileNotFoundError:  # gone since the walk listed it (an editor's or a writer's temp file)
        return
    if stat.S_ISDIR(st.st_mode):
        if not any(p.iterdir()):
            info = zipfile.ZipInfo(rel + "/", _EPOCH)
            info.external_attr = (stat.S_IFDIR | 0o755) << 16
            z.writestr(info, b"")
        return
    info = zipfile.ZipInfo(rel, _EPOCH)
    info.external_attr = (stat.S_IFREG | (st.st_mode & 0o777)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data or b"", compresslevel=1)


def forget() -> None:
    """Drop the archives this process packed (its exit does too)."""
    with _LOCK:
        for _, _, archive in _MEMO.values():
            archive.unlink(missing_ok=True)
        _MEMO.clear()


# A submit refused after its code was packed (preflight, the queue) never sends it: exit drops it.
atexit.register(forget)


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


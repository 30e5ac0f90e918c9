"""The code a job ships: its working_dir, refused before any upload when Ray would refuse it.

Ray's SDK zips the working_dir and uploads it into the GCS at submit time, and refuses a package of
its gRPC message size or more (512 MiB) -- after zipping it all. Here the size after Ray's own
excludes (``rayjobs.excludes`` and ``.gitignore``) is summed first, so a too-big directory is one
line at dry-run, not a minute of zipping. The walk is the code archive's
(:func:`rayjobs.client.codepack.files`: Ray's rules, without importing Ray).
"""

from __future__ import annotations

import os
from pathlib import Path

from rayjobs.errors import ConfigError



def max_package_bytes() -> int:
    """Ray 2.60 accepts packages up to its gRPC message size (512 MiB); bigger ones fail mid-upload."""
    return int(os.environ.get("RAY_max_grpc_message_size", 512 * 1024 * 1024))


def size_bytes(path: str, excludes: list[str]) -> int:
    """Bytes Ray would upload for ``path`` (its walk: .gitignore, .rayignore and excludes honoured)."""
    from rayjobs.client.codepack import files

    return sum(p.stat().st_size for p in files(path, excludes) if p.is_file() and not p.is_symlink())


def check(path: str, excludes: list[str]) -> None:
    """Refuse, before any upload, a working_dir Ray would refuse (or that is missing).

    Raises:
        ConfigError: not a directory, or over Ray's limit after excludes (with what to do).
    """
    if not os.path.isdir(path):
        raise ConfigError(f"rayjobs.working_dir={path!r} is not a directory; give an existing directory")
    size = size_bytes(path, excludes)
    limit = max_package_bytes()
    if size >= limit:
        raise ConfigError(
            f"working_dir {path} is {size / 2**20:.0f} MiB after excludes, over Ray's {limit / 2**20:.0f} MiB limit: "
            f"exclude large files (add them to .gitignore or rayjobs.excludes) or set rayjobs.working_dir to a smaller dir"
        )

"""The code a job ships: the files are exactly those Ray's own working_dir walk takes (Ray's private
traversal is the oracle here, never used by rayjobs), and a submit's first half imports no Ray."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from rayjobs.client import codepack


def _ray_files(root: Path, excludes: list[str]) -> list[Path]:
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    top, found = root.absolute(), []
    _dir_travel(top, [_get_excludes(top, excludes)], found.append, include_gitignore=True,
                logger=logging.getLogger("oracle"))
    return sorted(p for p in found if p != top)


def test_the_walk_is_rays_with_excludes_gitignore_and_rayignore(tmp_path: Path) -> None:
    for f in ("a/b/c.py", "a/b/checkpoints/w.pt", "x.pt", ".git/objects/o", "sub/x/keep.txt", "sub/x/skip.log",
              "notes.md", "sub/x/r.tmp", "deep/er/checkpoints", "empty/"):
        p = tmp_path / f
        p.parent.mkdir(parents=True, exist_ok=True)
        if not f.endswith("/"):
            p.write_text("x")
        else:
            p.mkdir(exist_ok=True)
    (tmp_path / "sub" / ".gitignore").write_text("*.log\n# a comment\n!keep.txt\n")
    (tmp_path / "sub" / "x" / ".rayignore").write_text("*.tmp\n")
    (tmp_path / ".gitignore").write_text("/notes.md\n")
    excludes = [".git/", "checkpoints/", "*.pt"]
    ours = codepack.files(str(tmp_path), excludes)
    assert ours == _ray_files(tmp_path, excludes)
    names = {p.relative_to(tmp_path).as_posix() for p in ours}
    assert "sub/x/keep.txt" in names and not {"sub/x/skip.log", "sub/x/r.tmp", "notes.md", "x.pt"} & names


def test_a_dry_run_imports_no_ray(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "rayjobs.submit", "+exp=prepare_data",
                        "rayjobs.dry_run=true"], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, RAYJOBS_NO_LOCAL_HEAD="1"), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    mods = [line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")]
    assert mods and not [m for m in mods if m == "ray" or m.startswith("ray.")], "a submit's first half imported Ray"


def test_a_file_gone_between_the_walk_and_the_pack_is_left_out(tmp_path: Path, monkeypatch) -> None:
    """A working dir where something writes as the submit packs it (a storage root under it: the
    queue's lease, written as tmp + rename every 10 s): the file the walk listed and the pack no
    longer finds is left out, not a failed submit (seen: FileNotFoundError on ``.lease.json.*.tmp``)."""
    (tmp_path / "train.py").write_text("print(1)\n")
    listed = codepack.files
    monkeypatch.setattr(codepack, "files", lambda root, ex: listed(root, ex) + [tmp_path / ".lease.json.1.tmp"])
    import zipfile

    _, archive = codepack.pack(str(tmp_path), [])
    assert zipfile.ZipFile(archive).namelist() == ["train.py"]

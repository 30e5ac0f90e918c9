"""Shared bits for benchmark scripts: a private network namespace, timing, and writing results.

Every benchmark runs its Ray nodes *and* its clients inside a network namespace it creates
(only ``lo`` up), like the tests. Results go into ``docs/benchmarks.md`` between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` markers, so each script owns its section.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import netns  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"


@contextmanager
def private_netns(name: str = "") -> Iterator[str]:
    """Enter a fresh namespace (only lo) for the rest of this process; clean up by PID after."""
    name = name or f"rjb{os.getpid()}"
    if not netns.can_use():
        print("note: not root: benchmark runs on plain loopback", file=sys.stderr)
        yield ""
        return
    netns.create(name)
    netns.enter(name)
    try:
        yield name
    finally:
        netns.destroy(name, exclude={os.getpid()})


def isolated_home(prefix: str) -> Path:
    """A fresh ``$RAYJOBS_HOME`` and ``$HOME`` under /tmp for this process and its children, with no
    cluster address, token or storage root inherited from the caller's shell. Returns the root."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    (root / "home").mkdir()
    os.environ.update(RAYJOBS_HOME=str(root / "rj"), HOME=str(root / "home"))
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RAYJOBS_STORAGE"):
        os.environ.pop(var, None)
    return root


def timed(cmd: Sequence[str], env: dict | None = None, cwd: str | None = None) -> float:
    """Wall seconds of one command (fails loudly if it fails)."""
    t = time.perf_counter()
    r = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return dt


def timed_cpu(cmd: Sequence[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, float]:
    """(wall s, whole-process CPU s: user + system of the command and its children) of one command."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed(cmd, env=env, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, list]:
    """Run each measurement ``rounds`` times, alternating, so drift hits all alike."""
    out: dict[str, list] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            out[k].append(fn())
    return out


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def write_section(name: str, markdown: str) -> None:
    """Replace (or append) this benchmark's section of docs/benchmarks.md."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n\nEach section is written by its script under `scripts/`; rerun it to refresh.\n"
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{begin}\n{markdown.strip()}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda m: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(text)

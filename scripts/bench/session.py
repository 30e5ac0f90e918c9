"""A benchmark's run: an isolated home, the user's project as the current dir, a private network
namespace (only ``lo``), and clusters from the tests' factory (:class:`clusters.Clusters`).

Every Ray node and every client of a benchmark runs inside that namespace, as in the tests; every
cluster is stopped by PID when its ``with`` ends, and the run's files are removed at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

from bench import REPO  # noqa: F401  (puts tests/ on sys.path)

import netns  # noqa: E402
from clusterops import make_workdir  # noqa: E402
from clusters import Clusters, FakeGpuCluster  # noqa: E402

#: Variables of the caller's shell that would point a benchmark's commands elsewhere.
INHERITED = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RAYJOBS_STORAGE")


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
    for var in INHERITED:
        os.environ.pop(var, None)
    return root


class Run:
    """One benchmark run: ``root`` (removed at the end), ``work`` (the user's project, the current dir)."""

    def __init__(self, root: Path, work: Path) -> None:
        self.root, self.work = root, work
        self.factory: Optional[Clusters] = None

    @contextmanager
    def cluster(self, nodes: Sequence[tuple[int, int]] = ((2, 6),), env: Optional[dict[str, str]] = None, *,
                start: bool = True) -> Iterator[FakeGpuCluster]:
        """A fresh fake-GPU cluster of the tests' factory (``nodes``: (GPUs, CPUs) each, the head's
        settings ``env``), stopped by PID when the ``with`` ends; ``start`` False: the caller starts it."""
        if self.factory is None:
            self.factory = Clusters()
        c = self.factory.get(nodes, env, fresh=True, start=start)
        try:
            yield c
        finally:
            self.factory.stop_fresh()

    def close(self) -> None:
        if self.factory is not None:
            self.factory.close()


@contextmanager
def run(prefix: str, *, project: bool = True, network: bool = True) -> Iterator[Run]:
    """A benchmark's run (see the module): ``project`` False leaves the project dir empty (a user's
    cwd without the stand-in); ``network`` False: no namespace of its own (a run that starts no Ray)."""
    root = isolated_home(prefix)
    work = make_workdir(root / "project") if project else root / "project"
    work.mkdir(exist_ok=True)
    here = os.getcwd()
    os.chdir(work)
    r = Run(root, work)
    try:
        if network:
            with private_netns():
                try:
                    yield r
                finally:
                    r.close()
        else:
            yield r
    finally:
        os.chdir(here)
        shutil.rmtree(root, ignore_errors=True)


def wait_quiet(max_load: float, max_wait_s: float, every: float = 60.0) -> tuple[float, float]:
    """Wait (bounded) for the 1-min load average to drop to ``max_load``: (load, seconds waited)."""
    t = time.monotonic()
    while os.getloadavg()[0] > max_load and time.monotonic() - t + every <= max_wait_s:
        print(f"load average {os.getloadavg()[0]:.1f} > {max_load:g}: waiting {every:g} s", file=sys.stderr)
        time.sleep(every)
    return os.getloadavg()[0], time.monotonic() - t


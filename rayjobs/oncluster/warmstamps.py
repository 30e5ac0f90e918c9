"""Start-up stamps in every Ray process of a job (issue 50 item 1): where a job's seconds go.

``RAYJOBS_STAMPS=1`` in a job's environment (``rayjobs.env.RAYJOBS_STAMPS=1``) makes the runner
(:mod:`rayjobs.oncluster.runner`) pass :func:`setup` to verl's ``ray.init`` as Ray's
``worker_process_setup_hook`` (a public runtime_env field: Ray runs it in each worker process of
the job before the process takes work) and raise vLLM's log level to INFO, so that its own
durations (weights, memory profiling, KV cache, graph capture, compile) reach the job's log.

Each process then prints, on its stdout (Ray forwards it to the job's log under the actor's
``(ClassName pid=N)`` prefix), one line per event::

    [rayjobs-stamp] 1796306766.981 process started      (the kernel's start time of the process)
    [rayjobs-stamp] 1796306768.402 ray worker up        (the hook runs: Ray's worker init done)
    [rayjobs-stamp] 1796306771.100 import torch begin   / ... end
    [rayjobs-stamp] 1796306775.900 cuda init begin      / ... end (torch's lazy CUDA init)

``scripts/gpu/phases.py`` turns them, per role, into the start-up table. Imports are seen by a
finder at the head of ``sys.meta_path`` (Python has no post-import hook): it times the first
import of :data:`WATCHED` and, once torch is in, wraps ``torch.cuda._lazy_init``. Nothing here
may fail a job: every step is guarded, and the hook costs one finder call per import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
from typing import Any, Callable, Optional

#: The job's switch (an environment variable of the job, read by the runner).
STAMPS_ENV = "RAYJOBS_STAMPS"
#: What the runner passes to verl's ``ray.init`` as ``runtime_env.worker_process_setup_hook``.
HOOK = "rayjobs.oncluster.warmstamps.setup"
PREFIX = "[rayjobs-stamp]"
#: Top-level packages whose first import is timed (the big ones of a verl process).
WATCHED = ("torch", "vllm", "verl", "transformers")


def emit(event: str, t: Optional[float] = None) -> None:
    """One stamp line on stdout, flushed (Ray forwards a process's stdout line by line)."""
    try:
        print(f"{PREFIX} {time.time() if t is None else t:.3f} {event}", flush=True)
    except Exception:  # a closed stdout must not fail the process
        pass


def process_start_time(pid: str = "self") -> Optional[float]:
    """When the kernel started this process (epoch s), from ``/proc``; None where there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22 of stat(5): starttime, in clock ticks since boot
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


class _Timed(importlib.abc.MetaPathFinder):
    """Stamps the first import of each of :data:`WATCHED` (begin at the lookup, end after its
    module ran) and calls ``after(name)`` once it is in."""

    def __init__(self, after: Callable[[str], None]) -> None:
        self.left = set(WATCHED)
        self.after = after
        self.busy = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.left or self.busy:
            return None
        self.left.discard(name)
        self.busy = True
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if name in sys.modules:  # imported meanwhile (a sub-import): nothing to time
                return None
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None
        finally:
            self.busy = False
        emit(f"import {name} begin")
        spec.loader = _Loader(spec.loader, name, self.after)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str, after: Callable[[str], None]) -> None:
        self.inner, self.name, self.after = inner, name, after

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # the module's own loader must be the real one (importlib.reload, pkgutil read it)
        module.__loader__ = self.inner
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        emit(f"import {self.name} end")
        try:
            self.after(self.name)
        except Exception:
            pass


def wrap_cuda_init() -> bool:
    """Stamp torch's lazy CUDA init (begin/end) in this process; True if wrapped."""
    cuda = sys.modules.get("torch.cuda")
    orig = getattr(cuda, "_lazy_init", None)
    if cuda is None or orig is None or getattr(orig, "_rayjobs", False):
        return False

    depth = threading.local()  # torch's own init calls _lazy_init again (it returns at once then)

    def lazy_init() -> None:
        if cuda.is_initialized() or getattr(depth, "n", 0):
            return orig()
        depth.n = 1
        emit("cuda init begin")
        try:
            return orig()
        finally:
            depth.n = 0
            emit("cuda init end")

    lazy_init._rayjobs = True  # type: ignore[attr-defined]
    # torch.cuda's submodules bound the function by name when they were imported
    for name, mod in list(sys.modules.items()):
        if (name == "torch.cuda" or name.startswith("torch.cuda.")) and getattr(mod, "_lazy_init", None) is orig:
            setattr(mod, "_lazy_init", lazy_init)
    return True


def _after(name: str) -> None:
    if name == "torch":
        wrap_cuda_init()


def setup() -> None:
    """Ray's ``worker_process_setup_hook``: stamp this process's start and the Ray worker being up,
    then time the big imports and CUDA init. Never raises."""
    try:
        emit("process started", process_start_time())
        emit("ray worker up")
        if "torch" in sys.modules:
            wrap_cuda_init()
        if not any(isinstance(f, _Timed) for f in sys.meta_path):
            sys.meta_path.insert(0, _Timed(_after))
    except Exception:
        pass


def wanted(env: dict[str, str]) -> bool:
    """Does the job ask for stamps (``RAYJOBS_STAMPS`` = 1/true/yes/on)?"""
    return env.get(STAMPS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


#: Ray's driver folds lines that differ only in numbers, from several processes within 5 s, into one
#: ("[repeated 3x across cluster]"): every process's stamps would be lost but the first's. The
#: driver lets lines through that match ``RAY_DEDUP_LOGS_ALLOW_REGEX`` (read when Ray is imported).
DEDUP_ALLOW = "RAY_DEDUP_LOGS_ALLOW_REGEX"


def driver_env(env: dict[str, str]) -> dict[str, str]:
    """What the trainer's (verl's driver's) own environment gets for the stamps: none unless
    :func:`wanted`; else the stamps exempt from Ray's log dedup (beside the job's own exemptions)."""
    if not wanted(env):
        return {}
    mine = r"\[rayjobs-stamp\]"
    given = env.get(DEDUP_ALLOW, "")
    return {DEDUP_ALLOW: f"{given}|{mine}" if given and mine not in given else (given or mine)}


def actor_overrides(env: dict[str, str], argv: list[str]) -> list[str]:
    """verl overrides that turn the stamps on in the job's Ray processes (none unless :func:`wanted`):
    the setup hook, and vLLM's log level INFO unless the job sets one."""
    if not wanted(env):
        return []
    given = {a.lstrip("+~").partition("=")[0] for a in argv}
    renv = "ray_kwargs.ray_init.runtime_env"
    out = []
    if f"{renv}.worker_process_setup_hook" not in given:
        out.append(f"++{renv}.worker_process_setup_hook={HOOK}")
    if not env.get("VLLM_LOGGING_LEVEL") and f"{renv}.env_vars.VLLM_LOGGING_LEVEL" not in given:
        out.append(f"++{renv}.env_vars.VLLM_LOGGING_LEVEL=INFO")
    return out

"""Timing a benchmark's commands: wall (and CPU) seconds of one, rounds interleaved, medians."""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from typing import Callable, Optional, Sequence


def command(cmd: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None,
            timeout: Optional[float] = None) -> tuple[float, str]:
    """(wall s, stdout) of one command, which must succeed (else a RuntimeError with its stderr)."""
    t = time.perf_counter()
    r = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:6]))} ... failed ({r.returncode}): {r.stderr[-2000:]}")
    return wall, r.stdout


def timed(cmd: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None,
          timeout: Optional[float] = None) -> float:
    """Wall seconds of one command (fails loudly if it fails)."""
    return command(cmd, env, cwd, timeout)[0]


def timed_cpu(cmd: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None) -> tuple[float, float]:
    """(wall s, whole-process CPU s: user + system of the command and its children) of one command."""
    wall, cpu, _ = command_cpu(cmd, env, cwd)
    return wall, cpu


def command_cpu(cmd: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None,
                timeout: Optional[float] = None) -> tuple[float, float, str]:
    """(wall s, CPU s of it and its children, stdout) of one command, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, out = command(cmd, env, cwd, timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, list]:
    """Run each measurement ``rounds`` times, alternating, so drift hits all alike."""
    out: dict[str, list] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            out[k].append(fn())
    return out


def median(xs: Sequence[float]) -> float:
    """The median; NaN of nothing (a part that measured nothing shows as such, not as a crash)."""
    return statistics.median(xs) if len(xs) else float("nan")


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``xs``."""
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(round(q * (len(ys) - 1))))] if ys else float("nan")

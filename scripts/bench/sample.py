"""Ray's state sampled on this machine: a cluster's processes and their memory, a process's memory and
CPU, and the free GPUs in Ray's own view (a driver in this process, polling)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Optional

TICK = os.sysconf("SC_CLK_TCK")
#: The command line of the ``sleep 1`` each Ray job supervisor's liveness loop starts every second:
#: not a cost of a job, left out of a footprint.
SUPERVISOR_SLEEP = b"sleep\x001\x00"


def proc_kb(pid: int, key: str = "VmRSS") -> int:
    """A kB field of /proc/PID/status (VmRSS, VmHWM); 0 for a process that is gone."""
    try:
        for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
            if ln.startswith(key + ":"):
                return int(ln.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def idle_cpu(pid: int, seconds: float) -> dict[str, float]:
    """The process's CPU over ``seconds`` of wall time, as % of one core; the load average then."""
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_s(pid), time.monotonic()
    return {"pct": 100.0 * (c1 - c0) / (t1 - t0), "s": t1 - t0, "load": os.getloadavg()[0]}


def mem_available_mb() -> float:
    """This machine's MemAvailable, MB."""
    for ln in Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith("MemAvailable:"):
            return int(ln.split()[1]) / 1024
    return 0.0


def footprint(c: Any) -> tuple[int, float]:
    """(processes, MB of RSS) of every process of cluster ``c`` and its descendants (Ray's renamed
    workers, job supervisors, drivers), less the supervisors' ``sleep 1``."""
    n, kb = 0, 0
    for p in c.pids():
        try:
            if Path(f"/proc/{p}/cmdline").read_bytes() == SUPERVISOR_SLEEP:
                continue
        except OSError:
            continue
        rss = proc_kb(p)
        if rss:
            n, kb = n + 1, kb + rss
    return n, kb / 1024


def settled(c: Any, wait_s: float = 8.0) -> tuple[int, float]:
    """The footprint once short-lived processes (a request job, Ray's idle workers) have gone: the
    smallest of three after ``wait_s``."""
    time.sleep(wait_s)
    return min((footprint(c) for _ in range(3)), key=lambda f: f[0])


class GpuSampler:
    """The free GPUs of the cluster in Ray's own view (``ray.available_resources()``), sampled every
    ``every`` s by a driver in this process until :meth:`close`: ``samples`` of (time, free GPUs)."""

    def __init__(self, gcs: str, every: float = 0.005) -> None:
        import ray

        ray.init(address=gcs, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        import ray

        while not self._stop.is_set():
            self.samples.append((time.time(), float(ray.available_resources().get("GPU", 0))))
            time.sleep(self.every)

    def close(self) -> None:
        import ray

        self._stop.set()
        self._t.join(timeout=10)
        ray.shutdown()

    def idle_periods(self, total: float) -> list[tuple[float, float]]:
        """(freed, taken) for every stretch with all ``total`` GPUs free (first sample of each edge)."""
        out, start = [], None
        for t, free in self.samples:
            if free >= total and start is None:
                start = t
            elif free < total and start is not None:
                out.append((start, t))
                start = None
        return out

    def freed(self, after: float, total: float) -> Optional[tuple[float, float]]:
        """(first sample with all ``total`` GPUs free after ``after``, the sample before it)."""
        prev = after
        for t, free in self.samples:
            if t >= after and free >= total:
                return t, prev
            prev = t if t >= after else prev
        return None

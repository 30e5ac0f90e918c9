"""Benchmark: one pass of the pure scheduler (``scheduler.decide``) over a 10,000-job queue on a
simulated 16 nodes x 8 GPUs (issue 29: ≤ 10 ms a tick), all GPUs busy and three job shapes waiting,
and the same pass with a free GPU and a preemption to weigh. No Ray, no I/O: the queue's own
state built by hand (``tests/schedfakes.py``). Writes the "scheduler" section of docs/benchmarks.md.

    .venv/bin/python scripts/bench_scheduler.py [--jobs 10000] [--rounds 50]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc  # noqa: E402  (puts tests/ on sys.path)
from bench.timing import median  # noqa: E402

from schedfakes import NOW, cluster, node, queued, running, state  # noqa: E402

from rayjobs.oncluster.scheduler import Policy, decide  # noqa: E402


def passes(st: Any, view: Any, rounds: int) -> list[float]:
    """Milliseconds of each of ``rounds`` passes over the same inputs."""
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        decide(st, view, Policy(), NOW)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=50)
    a = doc.parse(ap, {"jobs": 300, "rounds": 3})
    jobs = [queued(f"j{i:05d}", [[1], [2], [8]][i % 3], at=NOW - 5 + i * 1e-4) for i in range(a.jobs)]
    busy = cluster(*[node(f"n{i}", 8, free=0) for i in range(16)])
    full = passes(state(*jobs), busy, a.rounds)
    # the same line behind 16 running preemptible jobs, and an urgent one to preempt for
    runs = [running(f"r{i}", [8], preemptible=True) for i in range(16)]
    urgent = queued("urgent", [8], at=NOW, priority=10)
    held = {r[1]["rec"].id: {f"n{int(r[1]['rec'].id[1:])}": [8.0, 24.0]} for r in runs}
    pre = passes(state(*runs, urgent, *jobs), cluster(*[node(f"n{i}", 8, free=0) for i in range(16)], holdings=held),
                 a.rounds)
    rows = [(name, f"{median(xs):.2f}", f"{max(xs):.2f}", f"≤ 10 ms: {doc.met(median(xs), 10)}") for name, xs in (
        ("every GPU busy, the line looked at as far as anything can change", full),
        ("the same behind 16 running preemptible jobs, an urgent job to preempt for", pre))]
    doc.publish(a, "scheduler", f"""## The pure scheduler's pass (issue 29) — `scripts/bench_scheduler.py`

`scheduler.decide` over {a.jobs:,} waiting jobs (1, 2 and 8 GPUs) on a simulated 16 nodes x 8 GPUs, in
process, {a.rounds} passes each ({platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}).

{doc.table(["pass", "median ms", "max ms", "target"], rows, "lrrl")}
""")


if __name__ == "__main__":
    main()

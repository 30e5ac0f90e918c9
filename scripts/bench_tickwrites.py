"""Benchmark: how long the queue's loop is blocked by a tick that admits a sweep (issue 46 item 4),
with the record writes in their own thread (``oncluster.recordwriter``, now) and on the loop as
before (every write ``tmp + fsync + rename`` inside the tick), side by side, rounds interleaved.

In process: the real ``QueueService`` and ``QueueStore`` (on this machine's disk) over the tests'
fake Jobs API and cluster (``tests/queuefakes.py``), so the number is the loop's own time, not
Ray's. A network mount (a storage root on NFS or a bucket) makes each write slower, and the old
loop slower by as much per job. Writes the "tick writes" section of docs/benchmarks.md.

    .venv/bin/python scripts/bench_tickwrites.py [--jobs 32] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc  # noqa: E402  (puts tests/ on sys.path)
from bench.timing import median  # noqa: E402

from queuefakes import FakeCluster, FakeJobs  # noqa: E402
from schedfakes import node, record  # noqa: E402

from rayjobs.oncluster.queueservice import QueueService  # noqa: E402
from rayjobs.oncluster.recordwriter import RecordWriter  # noqa: E402
from rayjobs.oncluster.store import QueueStore  # noqa: E402


class OnTheLoop(RecordWriter):
    """The old way: the write inside the tick (its future is done when ``put`` returns)."""

    def put(self, rec: Any) -> tuple[Any, Future]:
        rec = self.store.put(rec)
        fut: Future = Future()
        fut.set_result(rec)
        return rec, fut


def one_round(jobs: int, old: bool) -> tuple[float, float, int]:
    """(ms the loop was in ticks until every job was admitted, ms until every record was on disk, ticks)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR") or Path.cwd()) as d:
        store = QueueStore(Path(d) / "queue")
        for i in range(jobs):
            store.put(record(f"j{i:03d}", (1,), at=time.time() + i * 1e-3, storage=d))
        svc = QueueService(store, FakeJobs(), FakeCluster([node("n0", jobs)]), reap=lambda job_id, **kw: [])
        if old:
            svc.writer = OnTheLoop(store)
        svc.recover()
        t0, in_ticks, ticks = time.perf_counter(), 0.0, 0
        while svc.state.waiting and ticks < 100:
            t = time.perf_counter()
            svc.tick()
            in_ticks += time.perf_counter() - t
            ticks += 1
        svc.writer.barrier().result(60)
        durable = time.perf_counter() - t0
        assert not svc.state.waiting and all(store.get(f"j{i:03d}").state == "admitted" for i in range(jobs))
        return in_ticks * 1000, durable * 1000, ticks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    a = doc.parse(ap, {"jobs": 8, "rounds": 2})
    got: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    for _ in range(a.rounds):
        for old in (True, False):
            got[old].append(one_round(a.jobs, old))
    rows = []
    for old in (True, False):
        loop, durable = [g[0] for g in got[old]], [g[1] for g in got[old]]
        rows.append(("on the loop (before)" if old else "own thread (now)", f"{median(loop):.1f}", f"{max(loop):.1f}",
                     f"{median(durable):.1f}", str(max(g[2] for g in got[old]))))
    ratio = median([g[0] for g in got[True]]) / max(median([g[0] for g in got[False]]), 1e-6)
    doc.publish(a, "tick writes", f"""## The loop's record writes (issue 46 item 4) — `scripts/bench_tickwrites.py`

A tick that admits a sweep of {a.jobs} one-GPU jobs on a node with {a.jobs} free GPUs: the real
`QueueService` and `QueueStore` on this machine's disk over the tests' fake Jobs API, {a.rounds}
rounds each, interleaved ({platform.machine()}, {os.cpu_count()} cores, load average
{os.getloadavg()[0]:.1f}). "Loop blocked" is the time inside the ticks until every job was admitted
(the door's requests wait that long); "all on disk" until the last record was written.

{doc.table(["record writes", "loop blocked, median ms", "max ms", "all on disk, median ms", "ticks"], rows, "lrrrr")}

The loop is blocked {ratio:.0f}x less; the records reach the disk in the same time (one thread, in
order), and Ray is asked to run each job only once its record is there.
""")


if __name__ == "__main__":
    main()

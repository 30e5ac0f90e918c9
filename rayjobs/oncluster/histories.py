"""The metrics histories of the running points of halved sweeps, for the halving rule
(:func:`rayjobs.oncluster.scheduler.halve_at_rungs`): read in the queue's pool, never on its loop,
and only from runs whose metrics files changed since the last read (a file's size and mtime)."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional

from rayjobs.contract.metrics import run_history
from rayjobs.contract.paths import metrics_files

#: A read of the points' metrics starts at most this often.
READ_EVERY_S = 1.0


class Histories:
    """One read at a time in ``pool``; its result applied on the loop at the next :meth:`observe`."""

    def __init__(self, pool: ThreadPoolExecutor, every_s: float = READ_EVERY_S) -> None:
        self.pool, self.every_s = pool, every_s
        self.files_read = 0  #: metrics files read in all (what the cost is: unchanged ones are not)
        self._seen: dict[str, tuple] = {}  #: run dir -> its files' (path, size, mtime) at the last read (the pool's)
        self._reading: Optional[Future] = None
        self._at = -1e18

    def observe(self, state: Any, now: float) -> None:
        """Give each point the history read last (a new step: the rules look again); start the next read."""
        if self._reading is not None and self._reading.done():
            got, self._reading = self._reading.result(), None
            for job_id, h in got.items():
                r = state.running.get(job_id)
                if r is not None and h and (not r.history or max(h) != max(r.history)):
                    r.history = h
                    state.version += 1
        if self._reading is None and now - self._at >= self.every_s:
            self._at = now
            todo = {r.id: r.rec.meta.run_dir for r in state.running.values()
                    if r.req.halving is not None and r.rec.meta.run_dir and not (r.rec.halved or r.stop_asked or r.ending)}
            if todo:
                self._reading = self.pool.submit(self._read, todo)

    def _read(self, todo: dict[str, str]) -> dict[str, dict[int, dict[str, float]]]:
        out = {}
        for job_id, run_dir in todo.items():
            files = metrics_files(run_dir)
            key = tuple(_stamp(p) for p in files.values())
            if key == self._seen.get(run_dir):
                continue  # nothing logged since the last read
            self._seen[run_dir] = key
            self.files_read += len(files)
            out[job_id] = run_history(run_dir)
        return out


def _stamp(path: Any) -> tuple:
    try:
        st = os.stat(path)
        return (str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        return (str(path), -1, -1)

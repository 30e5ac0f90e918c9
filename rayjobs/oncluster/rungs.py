"""Carrying out successive halving (:func:`rayjobs.oncluster.scheduler.halve_at_rungs` decides):
read the halved sweeps' runs' metrics, record each point's value at a rung, and halve a point --
stop it at its first checkpoint at or past the rung (the rung's own, where ``trainer.save_freq``
divides it: the steps it trained since are not worth waiting for), naming why.

The values at rungs are kept in each job's record (``rungs``), so the ladder a later point is
ranked on survives a restart of the queue; the metrics are read by :mod:`rayjobs.oncluster.histories`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rayjobs.contract.record import JobRecord
from rayjobs.oncluster.checkpointwatch import ask_stop
from rayjobs.oncluster.halving import Verdict
from rayjobs.oncluster.queuestate import QueueState, Running
from rayjobs.shared import stamp


def log(msg: str) -> None:
    print(f"[rayjobs] {stamp()} {msg}", flush=True)  # the queue actor's log


class Rungs:
    """The queue's hand in successive halving: ``put`` writes a record durably, ``stop`` stops a
    Ray job now (for a point without checkpoints)."""

    def __init__(self, put: Callable[[JobRecord], JobRecord], stop: Callable[[str], Any],
                 note: Callable[[str, str], None] = lambda what, sid: None) -> None:
        self.put, self.stop, self.note = put, stop, note

    def recover(self, state: QueueState, records: dict[str, JobRecord]) -> None:
        """The ladder from the records (values at rungs of every point of a halved sweep)."""
        for rec in records.values():
            for rung, value in (rec.rungs or {}).items():
                if value is not None:
                    state.reached(rec.meta.sweep, int(rung), rec.id, float(value))

    def at_rung(self, state: QueueState, r: Running, v: Verdict, now: float) -> None:
        """Record the point's value at the rung; halve it if it does not go on."""
        rungs = dict(r.rec.rungs or {}, **{str(v.rung): v.value})
        if v.value is not None:
            state.reached(r.req.sweep, v.rung, r.id, v.value)
        if v.goes_on:
            r.rec = self.put(r.rec.with_(rungs=rungs))
            log(f"{r.id} at step {v.rung}: {v.value if v.value is not None else 'no ' + r.req.halving.metric}"
                f" (rank {v.rank} of {v.of}): goes on")  # type: ignore[union-attr]
            return
        halved = {"rung": v.rung, "value": v.value, "rank": v.rank, "of": v.of, "text": v.text(), "at": now}
        r.stop_asked = True
        state.version += 1
        r.rec = self.put(r.rec.with_(rungs=rungs, halved=halved, stop_asked=True))
        run_dir, ckpt = r.rec.meta.run_dir, r.rec.meta.checkpoint_dir
        if run_dir and ckpt:
            ask_stop(Path(run_dir), r.id, r.req.preempt_wait_s, reason=v.text(), at_step=v.rung)
        elif r.in_ray:
            self.stop(r.id)
        self.note("halved", f"{r.id}: {v.text()}")
        log(f"{r.id} {v.text()}: stopping it at its first checkpoint at or past step {v.rung}; its GPUs go to the next point")

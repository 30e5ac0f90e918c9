"""Stopping jobs: now (a waiting one never starts; a running one gets the head's grace period) or
right after their next checkpoint, through the queue; a Ray job rayjobs did not submit, through Ray."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional, Sequence

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.status import Status
from rayjobs.contract.status import TERMINAL
from rayjobs.errors import ConfigError, RayjobsError

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.contract.wire import JobView


def connect(address: Optional[str]) -> "Dashboard":
    from rayjobs.client.connection import connect as _connect

    return _connect(address)


def jobs_named(d: "Dashboard", job_ids: Sequence[str], sweep: Optional[str]) -> dict[str, "JobView"]:
    """The jobs named (by id or unique prefix) and those of ``sweep``, in that order, by id: one GET
    per whole id the queue knows, else one read of every job."""
    from rayjobs.client.dashboard import resolve_prefix
    from rayjobs.views import jobrows, queuestatus

    if not sweep:
        found = {i: d.queue.view(i) for i in dict.fromkeys(job_ids)}
        if all(v is not None for v in found.values()):
            return found  # type: ignore[return-value]
    jobs = queuestatus.all_jobs(d)
    by_id = {j.submission_id: j for j in jobs}
    ids = [resolve_prefix(j, by_id) for j in job_ids]
    ids += [j.submission_id for j in jobrows.select(jobs, sweep=sweep)] if sweep else []
    return {i: by_id[i] for i in dict.fromkeys(ids)}


def stop_jobs(job_ids: Sequence[str] = (), *, sweep: Optional[str] = None, wait: float = 90.0,
              address: Optional[str] = None, dashboard: Optional["Dashboard"] = None,
              say: Any = None, at_checkpoint: bool = False, timeout: float = 3600.0) -> dict[str, str]:
    """Stop jobs (by id or prefix) and every job of ``sweep``; ``{id: status}`` after at most ``wait`` s.

    A waiting job is dropped from the queue (it never starts); a running one gets SIGTERM and the
    head's grace period, and ``say`` is told how many steps since its last checkpoint a resume will
    redo. With ``at_checkpoint`` a running job is stopped by its runner right after its next
    checkpoint is saved (or after ``timeout`` seconds without one). Idempotent: an ended job is
    left as it is.

    Raises:
        ConfigError: nothing named; ``at_checkpoint`` for a job that saves no checkpoints.
    """
    from rayjobs.views import jobrows

    say = say or (lambda msg: None)
    if not job_ids and not sweep:
        raise ConfigError("name the jobs to stop: rayjobs stop ID... or rayjobs stop --sweep S")
    d = dashboard or connect(address)
    jobs = jobs_named(d, job_ids, sweep)
    status = {i: j.status for i, j in jobs.items()}
    for i, s in status.items():
        if s in TERMINAL:
            say(f"{i} already {s}")
    live = [i for i in jobs if status[i] not in TERMINAL]
    queued = [i for i in live if jobs[i].state]  # the queue's (its views carry a state)
    others = [i for i in live if i not in queued]  # Ray jobs rayjobs did not submit
    running = [i for i in live if status[i] != Status.QUEUED]
    if at_checkpoint:
        for i in running:
            _check_saves_checkpoints(i, jobs[i].meta)
    redo = list(_redo_lines(d, running, at_checkpoint))  # read before the stop: the step each was at
    if queued:  # a refusal (another's job: 403) is its one line: nothing said before it, nothing changed
        d.queue.stop(queued, mode="checkpoint" if at_checkpoint else "now", timeout_s=timeout)
    for line in redo:
        say(line)
    for i in others:
        d.stop(i)
    if live and at_checkpoint:
        say(f"asked {len(live)} job(s) to stop; a running one stops once its next checkpoint is saved (at most {timeout:g} s)")
    elif live:
        say(f"asked {len(live)} job(s) to stop; a running trainer gets a grace period to save a checkpoint")
    _wait_terminal(d, live, set(queued), status, wait)
    return status


def _check_saves_checkpoints(job_id: str, meta: JobMeta) -> None:
    """``--at-checkpoint`` needs a verl job of rayjobs' that saves checkpoints (one line, exit 2)."""
    if not meta.checkpoint_dir:
        raise ConfigError(f"{job_id} has no checkpoint dir rayjobs knows (not a verl job submitted through rayjobs); "
                          f"stop it without --at-checkpoint")
    from rayjobs import ledger

    cfg = ledger.run_dir(job_id) / "config.yaml"
    if cfg.is_file():
        from omegaconf import OmegaConf

        freq = OmegaConf.select(OmegaConf.load(cfg), "trainer.save_freq", default=None)
        if isinstance(freq, int) and freq <= 0:
            raise ConfigError(f"{job_id} saves no checkpoints (trainer.save_freq={freq}): stop it without "
                              f"--at-checkpoint (a resume would start from step 0)")


def _redo_lines(d: "Dashboard", ids: Sequence[str], at_checkpoint: bool) -> list[str]:
    """Per running job: its step, its last complete checkpoint and how many steps a resume redoes
    (from the tail of its log: the runner's checkpoint lines), read in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    from rayjobs.views import jobrows, queuestatus

    def one(job_id: str) -> Optional[str]:
        try:
            job = queuestatus.ray_view(d, job_id, foreign=False)
            row = jobrows.add_progress(jobrows.base_row(job), job, d, lines=2000)
        except RayjobsError:
            return None
        step, ckpt = row.get("step"), row.get("checkpoint_step")
        if step is None:
            return None
        if at_checkpoint:
            last = f"its last checkpoint is step {ckpt}" if ckpt is not None else "it has no checkpoint yet"
            return f"{job_id}: at step {step}, {last}; it stops once the next one is saved"
        if ckpt is None:
            return f"{job_id}: at step {step} with no checkpoint yet: a resume starts over ({step} step(s) redone)"
        return f"{job_id}: at step {step}, last checkpoint step {ckpt}: {max(0, step - ckpt)} step(s) will be redone on resume"

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [line for line in pool.map(one, ids) if line]


def _wait_terminal(d: "Dashboard", ids: Sequence[str], queued: set[str], status: dict[str, str], wait: float) -> None:
    """Poll (bounded by ``wait`` seconds) until every job of ``ids`` has ended; ``status`` updated."""
    from rayjobs.views import queuestatus

    deadline = time.monotonic() + max(0.0, wait)
    pending = set(ids)
    while pending and time.monotonic() < deadline:
        for i in list(pending):
            try:
                got = d.queue.view(i) if i in queued else queuestatus.ray_view(d, i)
            except RayjobsError:
                continue
            status[i] = str(got.status if got is not None else status.get(i))
            if status[i] in TERMINAL:
                pending.discard(i)
        if pending:
            time.sleep(0.5)

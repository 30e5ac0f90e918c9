"""The Python API: a notebook's way in, and what the ``rayjobs`` command line is a thin layer over.

Two nouns, as in submitit: experiments are *submitted* (or *planned*: the dry-run half), and each
submission is a :class:`Job` handle::

    import rayjobs

    job = rayjobs.submit_experiment("ppo_gsm8k_qwen05b", ["trainer.total_epochs=1"])
    job.status()            # 'QUEUED', 'RUNNING', ...
    job.wait(timeout=3600)  # 'SUCCEEDED'
    points = rayjobs.submit_sweep("grpo_7b", ["algorithm.kl_ctrl.kl_coef=0.001,0.01"])

Every function takes keyword-only options; errors are :class:`~rayjobs.errors.RayjobsError`
subclasses with one-line messages (what was wrong, what to do next).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence, Union

from rayjobs.errors import ConfigError, NoSuchJob, RayjobsError
from rayjobs.shared import STANDBY_KEY, TERMINAL

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.submit.spec import JobSpec


class Job:
    """One submitted job (a sweep point is one too), by its submission id.

    Args:
        job_id: the full submission id (see :meth:`find` for a prefix).
        address: the cluster's dashboard; None for the settings' precedence (README, "Address").
        dashboard: an open client to reuse (then ``address`` is ignored).
    """

    def __init__(self, job_id: str, *, address: Optional[str] = None, dashboard: Optional["Dashboard"] = None) -> None:
        self.job_id = job_id
        self._address = address
        self._d = dashboard

    def __repr__(self) -> str:
        return f"Job({self.job_id!r})"

    @classmethod
    def find(cls, prefix: str, *, address: Optional[str] = None, dashboard: Optional["Dashboard"] = None) -> "Job":
        """The job whose id is ``prefix`` or starts with it: in Ray, or held or finished by the queue.

        Raises:
            NoSuchJob: no job on the cluster matches (the closest ids are named).
            JobNotFound: several match.
        """
        from rayjobs.views.queuestatus import QueueView

        d = dashboard or _connect(address)
        view = QueueView.read(d)
        ids = {j["submission_id"] for j in d.list_jobs() if j.get("submission_id")} | view.ids()
        from rayjobs.client.dashboard import resolve_prefix

        return cls(resolve_prefix(prefix, ids), dashboard=d)

    @property
    def dashboard(self) -> "Dashboard":
        """The client of this job's cluster (connected on first use)."""
        if self._d is None:
            self._d = _connect(self._address)
        return self._d

    def row(self, *, progress: bool = True) -> dict[str, Any]:
        """What ``rayjobs status --json`` prints: status, queue position, progress, metrics, W&B run.

        A waiting job's row comes from the queue; a finished one Ray has forgotten from the queue's
        history; a job neither knows (its head restarted before the queue had it, or it ran
        elsewhere) from the local record, with ``status`` UNKNOWN and ``source`` "record".
        """
        from rayjobs.errors import JobNotFound
        from rayjobs.views import jobrows
        from rayjobs.views.queuestatus import QueueView

        d = self.dashboard
        try:
            job: Any = d.info(self.job_id)
            # no metadata: perhaps what Ray writes back for a job pruned too soon; a pre-started
            # job is QUEUED while the queue still lists it as waiting
            m = jobrows.meta(job)
            view = QueueView.read(d, history=not m)
            if not m or m.get(STANDBY_KEY) or self.job_id in view.waiting:
                job = view.as_job(self.job_id) or job
            else:  # a preempted run (Ray: STOPPED) going back in line, or a run being preempted
                job = queue_overlay(d.job(self.job_id), view) if view.holds(self.job_id) \
                    or view.preempting_for(self.job_id) else job
        except JobNotFound:
            job = QueueView.read(d).as_job(self.job_id)
            if job is None:
                return recorded_row(self.job_id, d.target.key)
        row = jobrows.base_row(job)
        if row["status"] in TERMINAL and not jobrows.field(job, "from_queue"):
            from rayjobs.client import queuechannel

            # what the queue's reaper killed of it is in the queue's history only, not in Ray's details
            row["reaped"] = list((queuechannel.read_history(d).get(self.job_id) or {}).get("reaped") or [])
        if progress:
            row = jobrows.add_progress(row, job, d, lines=2000, head_scan=True)
        if row["attempt"] is None:
            row["attempt"] = 0 if row["status"] in ("PENDING", "QUEUED") else 1
        if progress:
            jobrows.keep_seen_row(d, row)  # an ended job's final copy in the local record, once
        return row

    def status(self) -> str:
        """``PENDING QUEUED RUNNING SUCCEEDED FAILED STOPPED`` (or UNKNOWN: only in the local record)."""
        return str(self.row(progress=False)["status"])

    def done(self) -> bool:
        """Has the job ended (SUCCEEDED, FAILED or STOPPED)?"""
        return self.status() in TERMINAL

    def wait(self, *, timeout: Optional[float] = None, poll: float = 2.0) -> str:
        """Block until the job ends (queued time included); its final status.

        Raises:
            TimeoutError: still not ended after ``timeout`` seconds (the job goes on).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status in TERMINAL:
                self.row()  # keeps its final copy in the local record (once)
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.job_id} is still {status} after {timeout:g} s")
            time.sleep(poll)

    def iter_logs(self, *, tail: Optional[int] = None, clean: bool = True) -> Iterator[str]:
        """The log as it is now (``tail``: only the last N lines), in chunks; ``clean``: no ANSI codes.

        A job pruned from Ray's table is read from where the queue recorded its log; a waiting job
        has none yet.
        """
        from rayjobs.views import joblog

        return joblog.iter_log(self.dashboard, self.job_id, tail=tail, clean=clean)

    def logs(self, *, tail: Optional[int] = None, clean: bool = True) -> str:
        """The log as one string (see :meth:`iter_logs`)."""
        return "".join(self.iter_logs(tail=tail, clean=clean))

    def steps(self, *, tail: Optional[int] = None) -> Iterator[dict[str, Any]]:
        """The JSON step records of the log as it is now (what ``rayjobs logs --json`` prints): one
        dict per verl step line (``event`` "step", verl's keys flat beside ``job``, ``run``,
        ``attempt``, ``step``, ``total_steps``, ``ts``) and per event of rayjobs' runner; an ended
        job's last one is ``job_ended`` (``status``, ``cause``). Shape: docs/design.md, "JSON step logs".

        Args:
            tail: only the records from the N-th last step on (the whole log is still read).

        Raises:
            NoSuchJob: neither the cluster nor its queue knows the job.
        """
        from rayjobs.views import steplog

        return steplog.log_records(self.dashboard, self.job_id, tail=tail)

    def tail(self, *, live: Optional[bool] = None, lines: Optional[int] = -1, as_json: bool = False) -> int:
        """Follow the log with the progress view until the job ends (what ``rayjobs tail`` does).

        Args:
            live: the rich panel (None: when stdout is a terminal). lines: of the log written
                before attaching, only the last N lines (-1: all, or 1000 on a terminal).
            as_json: print the JSON step records instead of the log (``rayjobs tail --json``);
                ``lines`` N then means the records from the N-th last step on.

        Returns:
            0 SUCCEEDED, 1 FAILED, 3 STOPPED, 130 if interrupted (Ctrl-C: the job goes on).
        """
        from rayjobs.views import jobtail

        return jobtail.tail(self.dashboard, self.job_id, live=live, lines=lines, as_json=as_json)

    def stop(self, *, wait: float = 90.0, at_checkpoint: bool = False, timeout: float = 3600.0) -> str:
        """Stop the job (SIGTERM, the head's grace period, then Ray's kill); its status after at most
        ``wait`` seconds. ``at_checkpoint``: once its next checkpoint is saved (at most ``timeout`` s)."""
        return stop_jobs([self.job_id], wait=wait, dashboard=self.dashboard, at_checkpoint=at_checkpoint,
                         timeout=timeout)[self.job_id]


# --------------------------------------------------------------------------- submit
def plan_experiment(experiment: str, overrides: Sequence[str] = ()) -> list["JobSpec"]:
    """The dry-run half of submit: compose and check the experiment; touch no cluster.

    Returns:
        The exact ``submit_job`` request of each job (:class:`~rayjobs.submit.spec.JobSpec`).

    Raises:
        ConfigError: an unknown experiment or key, a wrong value, a failed preflight rule.
    """
    from rayjobs.submit import compose, pipeline

    return [p.spec for p in pipeline.prepare([compose.compose([f"+exp={experiment}", *overrides])])]


def submit_experiment(experiment: str, overrides: Sequence[str] = (), *, address: Optional[str] = None) -> Job:
    """Compose, check and submit one job (``python -m rayjobs.submit +exp=EXPERIMENT OVERRIDES...``).

    Args:
        experiment: a preset of ``conf/exp/`` (or of ``./conf/exp/``).
        overrides: verl and ``rayjobs.*`` overrides, as on the command line.
        address: the cluster's dashboard (else ``rayjobs.address``, the environment, the connected
            cluster, the embedded local head).

    Raises:
        ConfigError: bad input (nothing submitted). ClusterUnreachable, SubmitError: the cluster.
    """
    from rayjobs.submit import compose, pipeline

    points = pipeline.prepare([compose.compose([f"+exp={experiment}", *overrides])])
    return Job(pipeline.send(points, address=address or points[0].composed.cfg.rayjobs.address)[0], address=address)


def submit_sweep(experiment: str, overrides: Sequence[str], *, address: Optional[str] = None) -> list[Job]:
    """Submit one job per point of a Hydra sweep (``a=1,2 b=x,y``: four jobs), all checked first."""
    from rayjobs.submit import app, compose

    args = [f"+exp={experiment}", *overrides] + ([f"rayjobs.address={address}"] if address else [])
    hydra = compose.make_hydra()
    with app.ids_to_caller() as ids, compose.translate_errors(args):
        hydra.multirun(config_name=compose.CONFIG_NAME, task_function=app.no_task, overrides=args)
    if not ids:
        raise ConfigError("nothing was submitted (a dry run?)")
    return [Job(i, address=address) for i in ids]


# --------------------------------------------------------------------------- many jobs
def list_jobs(*, sweep: Optional[str] = None, statuses: Sequence[str] = (), experiment: Optional[str] = None,
              include_all: bool = False, address: Optional[str] = None, keep: bool = False,
              say: Any = None) -> list[dict[str, Any]]:
    """Rows of ``rayjobs list --json`` (oldest first): Ray's jobs, the queue's waiting and finished
    ones, and the jobs of the local record the cluster forgot.

    An ended job's final state, log tail and metrics are kept in the local record as the list
    reads them (``$RAYJOBS_HOME/runs/<id>/final.json``, once per job); ``keep``: of every ended
    job now, metrics read from the logs where the run dirs are not readable here (``rayjobs down``
    does this before the teardown). When the cluster cannot be reached, the rows are the local
    record's (``source`` "local"; ``final`` false for a job never seen ended) and ``say`` is told.

    Raises:
        ConfigError: an unknown status or experiment. ClusterUnreachable: with ``keep``, no cluster.
    """
    from rayjobs.errors import ClusterUnreachable
    from rayjobs.views import jobrows

    wanted = jobrows.parse_statuses(statuses)
    try:
        d = _connect(address)
    except ClusterUnreachable as e:
        if keep:
            raise
        rows = jobrows.unreachable_rows(address, sweep, e, say)
        rows = [r for r in rows if r["experiment"] == experiment] if experiment else rows
        return [r for r in rows if r["status"] in wanted] if wanted else rows
    jobs = all_jobs(d)
    records = jobrows.missing_records((jobrows.field(j, "submission_id") for j in jobs), d.target.key, sweep)
    try:
        chosen = jobrows.select(jobs, sweep=sweep, experiment=experiment, include_all=include_all)
    except RayjobsError:
        if not (sweep and records):
            raise
        chosen = []  # a sweep the cluster has forgotten: its rows come from the local record
    if experiment:
        records = [r for r in records if r["experiment"] == experiment]
        if not chosen and not records:
            _check_experiment(experiment, jobs)
    rows = jobrows.rows(chosen, d, keep=keep) + records
    return [r for r in rows if r["status"] in wanted] if wanted else rows


def all_jobs(d: "Dashboard", view: Any = None) -> list[Any]:
    """Ray's jobs, plus (as dicts) those the queue holds or finished that Ray does not list
    (:func:`rayjobs.views.queuestatus.all_jobs`)."""
    from rayjobs.views import queuestatus

    return queuestatus.all_jobs(d, view)


def queue_overlay(job: dict[str, Any], view: Any) -> dict[str, Any]:
    """A Ray job (dict) as the queue sees it (:func:`rayjobs.views.queuestatus.queue_overlay`)."""
    from rayjobs.views import queuestatus

    return queuestatus.queue_overlay(job, view)


def stop_jobs(job_ids: Sequence[str] = (), *, sweep: Optional[str] = None, wait: float = 90.0,
              address: Optional[str] = None, dashboard: Optional["Dashboard"] = None,
              say: Any = None, at_checkpoint: bool = False, timeout: float = 3600.0) -> dict[str, str]:
    """Stop jobs (by id or prefix) and every job of ``sweep``; ``{id: status}`` after at most ``wait`` s.

    A waiting job is cancelled in the queue (it never starts); a running one gets SIGTERM and the
    head's grace period, and ``say`` is told how many steps since its last checkpoint a resume will
    redo. With ``at_checkpoint`` a running job is stopped by its runner right after its next
    checkpoint is saved (or after ``timeout`` seconds without one). Idempotent: an ended job is
    left as it is.

    Raises:
        ConfigError: nothing named; ``at_checkpoint`` for a job that saves no checkpoints.
    """
    from rayjobs.client import queuechannel
    from rayjobs.views import jobrows
    from rayjobs.views.queuestatus import QueueView

    say = say or (lambda msg: None)
    if not job_ids and not sweep:
        raise ConfigError("name the jobs to stop: rayjobs stop ID... or rayjobs stop --sweep S")
    d = dashboard or _connect(address)
    view = QueueView.read(d)
    jobs = all_jobs(d, view)
    ids = _stop_ids(jobs, job_ids, sweep)
    status = {jobrows.field(j, "submission_id"): jobrows.status_of(j) for j in jobs}
    for i in ids:
        if status.get(i) in TERMINAL:
            say(f"{i} already {status[i]}")
    # a job admitted but not yet in Ray is stopped by the queue too (Ray would answer "no such job"),
    # and so is one being preempted (or going back in line after it): the queue would take its end
    # for the preemption's and put it back in line
    queued = [i for i in ids if i in view.waiting or view.handing_to_ray(i)]
    running = [i for i in ids if status.get(i) not in TERMINAL and i not in queued]
    preempted = [i for i in running if view.preempting_for(i) or view.holds(i)]
    if at_checkpoint:
        by_id = {jobrows.field(j, "submission_id"): j for j in jobs}
        for i in running:
            _check_saves_checkpoints(i, jobrows.meta(by_id[i]))
    if queued or (preempted and not at_checkpoint):  # (the stop at a checkpoint tells the queue itself)
        queuechannel.cancel(d, queued + ([] if at_checkpoint else preempted))
    for line in _redo_lines(d, running, at_checkpoint):
        say(line)
    if running and at_checkpoint:
        queuechannel.stop_at_checkpoint(d, running, timeout)
    elif running:
        for i in running:
            d.stop(i)
    n = len(queued) + len(running)
    if n and at_checkpoint:
        say(f"asked {n} job(s) to stop; a running one stops once its next checkpoint is saved (at most {timeout:g} s)")
    elif n:
        say(f"asked {n} job(s) to stop; a running trainer gets a grace period to save a checkpoint")
    _wait_terminal(d, queued + running, status, wait)
    return {i: status.get(i, "?") for i in ids}


def _stop_ids(jobs: Sequence[Any], job_ids: Sequence[str], sweep: Optional[str]) -> list[str]:
    """The ids named (by id or unique prefix) and those of ``sweep``, once each, in that order."""
    from rayjobs.client.dashboard import resolve_prefix
    from rayjobs.views import jobrows

    known = {jobrows.field(j, "submission_id") for j in jobs}
    ids = [resolve_prefix(j, known) for j in job_ids]
    ids += [jobrows.field(j, "submission_id") for j in jobrows.select(jobs, sweep=sweep)] if sweep else []
    return list(dict.fromkeys(ids))


def _check_saves_checkpoints(job_id: str, meta: dict[str, Any]) -> None:
    """``--at-checkpoint`` needs a verl job of rayjobs' that saves checkpoints (one line, exit 2)."""
    if not meta.get("checkpoint_dir"):
        raise ConfigError(f"{job_id} has no checkpoint dir rayjobs knows (not a verl job submitted through rayjobs); "
                          f"stop it without --at-checkpoint")
    from rayjobs.submit import ledger

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

    from rayjobs.views import jobrows

    def one(job_id: str) -> Optional[str]:
        try:
            job = d.info(job_id)
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


def _wait_terminal(d: "Dashboard", ids: Sequence[str], status: dict[str, str], wait: float) -> None:
    """Poll (bounded by ``wait`` seconds) until every job of ``ids`` has ended; ``status`` updated."""
    from rayjobs.views.queuestatus import QueueView

    deadline = time.monotonic() + max(0.0, wait)
    pending = set(ids)
    while pending and time.monotonic() < deadline:
        view = QueueView.read(d, revive=False)
        for i in list(pending):
            if i in view.history and i not in view.admitted:
                status[i] = str(view.history[i].get("status"))
            elif i in view.waiting:
                status[i] = "QUEUED"
            else:
                try:
                    status[i] = str(d.info(i).status).split(".")[-1]
                except RayjobsError:
                    continue
            if status[i] in TERMINAL:
                pending.discard(i)
        if pending:
            time.sleep(0.5)


def resume_job(job_id: str, *, address: Optional[str] = None, dashboard: Optional["Dashboard"] = None,
               say: Any = None) -> Job:
    """Continue a stopped or failed job from its last checkpoint: its exact submit request and code
    snapshot (the queue's durable copy) queued again under a new id ``<id>-rN``, with the same run
    name and checkpoint dir, so verl resumes (``resume_mode=auto``) and the attempt count goes on.

    Returns:
        The new job (waiting in the queue, or admitted).

    Raises:
        NoSuchJob: no job matches. ConfigError: the job has not ended, SUCCEEDED, is not a verl job
            of rayjobs' or has no checkpoint to resume from.
    """
    from rayjobs.client import queuechannel
    from rayjobs.views.queuestatus import QueueView

    from rayjobs.client.dashboard import resolve_prefix
    from rayjobs.views import jobrows

    say = say or (lambda msg: None)
    d = dashboard or _connect(address)
    view = QueueView.read(d)
    jobs = {jobrows.field(j, "submission_id"): j for j in all_jobs(d, view)}  # one read of Ray and the queue
    old = resolve_prefix(job_id, set(jobs) - {None})
    status, meta = jobrows.status_of(jobs[old]), jobrows.meta(jobs[old])
    if status == "SUCCEEDED":
        raise ConfigError(f"{old} SUCCEEDED: nothing to resume (submit it again to train it again)")
    if status not in ("STOPPED", "FAILED"):
        raise ConfigError(f"{old} is {status}: only a stopped or failed job can be resumed (rayjobs stop {old} first)")
    if not meta.get("checkpoint_dir"):
        raise ConfigError(f"{old} is not a verl job submitted through rayjobs (no checkpoint dir): submit it again")
    # the queue's history names the checkpoint once it finished the job; else the log's last line on it
    h = view.history.get(old) or {}
    ckpt = h["checkpoint_step"] if "checkpoint_step" in h else Job(old, dashboard=d).row().get("checkpoint_step")
    if ckpt is None:
        raise ConfigError(f"{old} saved no checkpoint to resume from (trainer.save_freq): submit it again to start over")
    new = next(f"{old}-r{k}" for k in range(1, 1000) if f"{old}-r{k}" not in jobs)
    queuechannel.resume(d, old, new)
    _record_resume(d, old, new)
    say(f"{new}: resumes run {meta.get('run', old)} of {old} from its checkpoint at step {ckpt}")
    return Job(new, dashboard=d)


def _record_resume(d: "Dashboard", old: str, new: str) -> None:
    """The resumed job in the local record: the old one's entry and config, under the new id."""
    from rayjobs.submit import ledger

    entry = ledger.find(old)
    if entry is None:
        return
    cfg = ledger.run_dir(old) / "config.yaml"
    ledger.record(dict(entry, id=new, resumed_from=old, address=d.target.address, cluster=d.target.key),
                  config_yaml=cfg.read_text() if cfg.is_file() else None)


def rerun_job(job_id: str, overrides: Sequence[str] = (), *, address: Optional[str] = None, dry_run: bool = False,
              dashboard: Optional["Dashboard"] = None, say: Any = None) -> Job:
    """Run a job again under a new id: its recorded config with ``overrides``, with its own code.

    The config is the job's local record (else its preset composed again, if that gives the same
    config); the overrides are checked as a submit checks them; the code is the durable snapshot
    the cluster's queue kept of the job, not the current directory (``rayjobs.submit.rerun``).

    Args:
        job_id: the job (or a unique prefix of its id), in any state.
        overrides: Hydra overrides, as for a submit (``key=value``, ``+key=value``, ``~key``).
        address: the cluster's dashboard (else the settings' precedence).
        dry_run: check everything and print the JSON a submit's dry run prints; queue nothing.
        dashboard: an open client to reuse. say: where one-line notes go (default: nowhere).

    Returns:
        The new job, queued (with ``dry_run``: the id it would have had; nothing is queued).

    Raises:
        NoSuchJob: no job matches. ConfigError: a refused override, or a job that is not rayjobs'.
        SubmitError: the job's code snapshot is gone (nothing queued).
    """
    from rayjobs.client.dashboard import resolve_prefix
    from rayjobs.submit import rerun
    from rayjobs.views import jobrows

    say = say or (lambda msg: None)
    d = dashboard or _connect(address)
    jobs = {jobrows.field(j, "submission_id"): j for j in all_jobs(d)}  # one read of Ray and the queue
    old = resolve_prefix(job_id, set(jobs) - {None})
    plan = rerun.plan(old, jobrows.meta(jobs[old]), overrides, address=address, dry_run=dry_run)
    for note in plan.notes:
        say(note)
    if plan.dry_run:
        from rayjobs.preflight import checks

        checks.check_cluster(d, [plan.prepared])  # connected anyway: its versions and the GPU fit too
        print(plan.report(), flush=True)
        say(f"dry run: the rerun of {old} was checked as a submit checks it; nothing queued (whether the "
            f"cluster still keeps its code snapshot is known only when it is queued)")
        return Job(plan.job_id, dashboard=d)
    new = rerun.send(d, plan)
    say(f"{new}: reruns {old} (config from {plan.source}; its code snapshot)"
        + (f" with {' '.join(overrides)}" if overrides else ""))
    return Job(new, dashboard=d)


def evaluate_checkpoints(after: Union[str, Sequence[str]], overrides: Sequence[str] = (), *,
                         experiment: str = "eval_checkpoint", address: Optional[str] = None, dry_run: bool = False,
                         dashboard: Optional["Dashboard"] = None, say: Any = None) -> list[Job]:
    """Evaluate the last checkpoint of each training job ``after`` names: one job per job (a sweep id:
    one per point), its recorded config and code snapshot with verl's validation-only run from
    ``<checkpoint dir>/global_step_latest``, started once that job SUCCEEDED
    (``python -m rayjobs.submit +exp=eval_checkpoint rayjobs.after=...``; :mod:`rayjobs.submit.evaluate`).

    Args:
        after: a sweep id, a job id, or several (unique starts of ids work).
        overrides: Hydra overrides every evaluation gets (``data.val_files=...``).
        experiment: the evaluation preset (``rayjobs.evaluate: true``; yours in ./conf/exp/ too).
        address: the cluster's dashboard (else the settings' precedence).
        dry_run: check everything and print the JSON a submit's dry run prints; queue nothing.
        dashboard: an open client to reuse. say: where one-line notes go (default: nowhere).

    Returns:
        The evaluation jobs, in point order (with ``dry_run``: the ids they would have had).

    Raises:
        NoSuchJob: ``after`` names nothing. ConfigError: a job that cannot be evaluated (an
            evaluation itself, no checkpoints, no config), a refused override. SubmitError: a
            point's code snapshot is gone. Nothing is queued in each case.
    """
    from rayjobs.submit import compose, evaluate
    from rayjobs.submit.spec import format_value

    ids = [after] if isinstance(after, str) else list(after)
    args = [f"+exp={experiment}", f"rayjobs.after={format_value(ids)}", *overrides,
            *(["rayjobs.dry_run=true"] if dry_run else []), *([f"rayjobs.address={address}"] if address else [])]
    c = compose.compose(args)
    if not c.cfg.rayjobs.evaluate:
        raise ConfigError(f"{experiment} is not an evaluation preset (rayjobs.evaluate: true): submit it with submit_experiment")
    d = dashboard or _connect(address)
    return [Job(i, dashboard=d) for i in evaluate.run(c, dashboard=d, say=say or (lambda msg: None))]


def plot_jobs(job_ids: Sequence[str] = (), *, sweep: Optional[str] = None, metrics: Sequence[str] = (),
              val: bool = True, output: str = "curves.png", address: Optional[str] = None,
              say: Any = None) -> dict[str, Any]:
    """Draw one PNG (a curve per job over steps, plus the val-core metrics); the plotted data.

    What plot reads of an ended job (its metrics files or its log's step lines) is kept in the
    local record; while the cluster cannot be reached, the jobs are drawn from there (``source``
    "local"; ``say`` is told).
    """
    from rayjobs.views import plot

    if not job_ids and not sweep:
        raise ConfigError("name the jobs to plot: rayjobs plot ID... or rayjobs plot --sweep S")
    if not output.lower().endswith(".png"):
        raise ConfigError(f"-o {output}: give a .png file name")
    d, chosen, _, _ = _curve_jobs(job_ids, sweep, address, say)
    data = plot.collect(d, chosen, list(metrics) or None, val=val)
    plot.render(data, output, title=f"sweep {sweep}" if sweep else None)
    return data


def compare_sweep(sweep: str, *, metrics: Sequence[str] = (), mode: str = "auto", address: Optional[str] = None,
                  say: Any = None) -> list[dict[str, Any]]:
    """A sweep at a glance: one row per point, its curves read exactly as :func:`plot_jobs` reads them.

    Args:
        sweep: the sweep id (or a unique prefix of it).
        metrics: the metrics to show (the first ranks the points); default critic/score/mean and
            the val-core reward the sweep logged (``val-core/<data source>/reward/mean@N``), which
            then ranks them (the score does without one).
        mode: ``auto`` (lowest is best for a metric named ``...loss...``, else highest), ``max``, ``min``.
        address: the cluster's dashboard (else the settings' precedence).
        say: where one-line notes go (the cluster unreachable; default: nowhere).

    Returns:
        One dict per point, in sweep order: ``id``, ``jobs`` (with the ones ``rayjobs resume``
        continued), ``point`` (the swept keys' values), ``status``/``status_text``, ``source``
        ("cluster" or "local"), ``step``, ``total_steps``, ``checkpoint_step``, ``checkpoint_dir``,
        ``checkpoint`` (its ``global_step_N`` dir), ``metrics`` ({name: {last, last_step, best,
        best_step, mode}} or None where nothing was logged), ``ranked_by``, ``best`` (True for the
        best point, every one of a tie), ``eval`` (the point's evaluation job, metadata
        ``eval_of=<id>``: {id, status, metric, value, step}, else None).

    Raises:
        JobNotFound: no such sweep (the closest ids named). ConfigError: a metric no point logged, a bad mode.
    """
    from rayjobs.views import compare, jobrows, plot

    compare.metric_mode("", mode)  # a bad mode fails before anything is read
    d, chosen, jobs, records = _curve_jobs((), sweep, address, say)
    rows = {str(r["id"]): r for r in jobrows.rows([j for j in chosen if not jobrows.field(j, "from_record")], d)} \
        if d is not None else {}
    rows.update(records)  # the points the cluster does not know: the local record's rows
    compare.fill_totals(d, [rows[str(jobrows.field(j, "submission_id"))] for j in chosen], chosen)
    data = plot.collect(d, chosen, list(metrics) or None, val=True)  # what `rayjobs plot --sweep S` reads
    _, rank = compare.pick_metrics(data["metrics"], metrics)
    ids = {str(jobrows.field(j, "submission_id")) for j in chosen}
    evals = compare.eval_values(d, compare.eval_jobs(jobs, ids), rank)
    return compare.build(chosen, rows, data, metrics, mode, evals)


def _curve_jobs(job_ids: Sequence[str], sweep: Optional[str], address: Optional[str],
                say: Any) -> tuple[Optional["Dashboard"], list[Any], list[Any], dict[str, dict[str, Any]]]:
    """The jobs plot and compare read, the same way for both: (the client, None while the cluster
    cannot be reached; the jobs named and those of ``sweep`` in order; every job listed; the local
    record's rows of the chosen jobs the cluster does not know, by id). A sweep's points the cluster
    forgot (a head restarted on an empty storage root) come from the local record, as in ``list``."""
    from rayjobs.client.dashboard import resolve_prefix
    from rayjobs.errors import ClusterUnreachable
    from rayjobs.views import jobrows

    try:
        d: Optional["Dashboard"] = _connect(address)
    except ClusterUnreachable as e:
        d = None
        sweep = jobrows.resolve_sweep(sweep, []) if sweep else None  # against the local record
        rows = jobrows.unreachable_rows(address, sweep, e, say) if sweep else []
        if say and not sweep:
            say(f"cluster unreachable: plotting from the metrics kept in the local record. {e}")
        rows += [recorded_row(j, "", gone=True) for j in job_ids]
        jobs = jobrows.as_local_jobs(rows)
    else:
        jobs = all_jobs(d)
        rows = []
        if sweep:
            sweep = jobrows.resolve_sweep(sweep, jobs)
            rows = jobrows.missing_records((jobrows.field(j, "submission_id") for j in jobs), d.target.key, sweep)
            jobs += jobrows.as_local_jobs(rows)
    by_id = {jobrows.field(j, "submission_id"): j for j in jobs}
    chosen = [by_id[resolve_prefix(j, by_id)] for j in job_ids]
    chosen += sorted((j for j in jobs if jobrows.meta(j).get("sweep") == sweep), key=jobrows.order) if sweep else []
    chosen = list({jobrows.field(j, "submission_id"): j for j in chosen}.values())
    return d, chosen, jobs, {str(r["id"]): r for r in rows}


# --------------------------------------------------------------------------- settings
#: Where the address came from (:attr:`rayjobs.settings.Target.source`), in ``rayjobs config``'s words.
_ADDRESS_SOURCES = {"RAY_API_SERVER_ADDRESS": "env RAY_API_SERVER_ADDRESS", "RAY_ADDRESS": "env RAY_ADDRESS",
                    "embedded": "default"}


def effective_settings() -> dict[str, dict[str, Any]]:
    """The effective settings, each with where its value came from (``rayjobs config``).

    Every settings key (``storage``, ``cluster.*``, ``secrets``, ``wandb.*``) by the one precedence
    (README, "Settings"), with the values the built-in defaults leave empty filled in as they take
    effect: the storage root ``$RAYJOBS_HOME/storage``, the cluster's shape from
    ``bootstrap/cluster.yaml``. Plus ``address``: the cluster the commands talk to (not a settings
    file key; its own precedence, README "Address").

    Returns:
        ``{key: {"value": ..., "source": ...}}`` in schema order. A source is ``env RAYJOBS_X``, a
        settings file as shown (``./rayjobs.yaml``, ``~/.rayjobs/settings.yaml``), ``remembered
        cluster``, ``bootstrap/cluster.yaml`` (the cluster's shape) or ``default`` (the command line
        of a submit or ``rayjobs up`` comes on top of these, in that command).

    Raises:
        ConfigError: a settings file or variable is wrong (one line naming it and the key).
    """
    from rayjobs import settings
    from rayjobs.provision import skypilot
    from rayjobs.settingsources import DEFAULT, KEYS

    s = settings.current()
    task = skypilot.task_defaults()
    out: dict[str, dict[str, Any]] = {}
    for key in KEYS:
        value, source = s.get(key), s.source(key)
        if key == "storage" and not value:
            value = str(settings.home() / "storage")
        elif source == DEFAULT and value in ("", None) and key in task:
            value, source = task[key], "bootstrap/cluster.yaml"
        out[key] = {"value": list(value) if isinstance(value, tuple) else value, "source": source}
    target = settings.resolve_target(None)
    out["address"] = {"value": target.address,
                      "source": _ADDRESS_SOURCES.get(target.source, "remembered cluster")}
    return out


def settings_notes() -> list[str]:
    """What ``rayjobs config`` says on stderr: which settings files were read, and a storage root that
    differs from the connected cluster's (its jobs would write where the cluster has no shared mount)."""
    from pathlib import Path

    from rayjobs import settings
    from rayjobs.settingsources import DEFAULT, REMEMBERED, USER_FILE, shown_path

    s = settings.current()
    user = shown_path(settings.home() / USER_FILE, Path.cwd())
    notes = [f"settings files: {', '.join(s.files) if s.files else 'none'} "
             f"(looked for ./rayjobs.yaml up to the git root, and {user})"]
    rec = settings.remembered_cluster()
    set_here = s.source("storage") not in (DEFAULT, REMEMBERED)
    if rec.get("storage") and s.storage and s.storage != rec["storage"] and set_here:
        notes.append(f"storage {s.storage} ({s.source('storage')}) is not the connected cluster {rec.get('name')}'s "
                     f"storage root {rec['storage']}: jobs there would write outside its shared mount")
    return notes


# --------------------------------------------------------------------------- helpers
def _connect(address: Optional[str]) -> "Dashboard":
    from rayjobs.client.connection import connect

    return connect(address)


def recorded_row(job_id: str, cluster: str, *, gone: bool = False) -> dict[str, Any]:
    """The local record's row for an id the cluster does not know (its final copy, if kept);
    ``gone``: for any id while its cluster cannot be reached (the final copy, else what was last
    seen of it; ``source`` "local").

    Raises:
        NoSuchJob: no record matches. JobNotFound: several do.
    """
    from rayjobs.errors import JobNotFound
    from rayjobs.submit import ledger
    from rayjobs.views import jobrows

    hits = ledger.lookup(job_id)
    if len(hits) == 1:
        e = hits[0]
        if gone:
            where = str(e.get("address") or "the embedded local cluster")
            return jobrows.local_row(e, ledger.seen(str(e.get("cluster") or e.get("address"))), where)
        return jobrows.kept_row(e) or jobrows.record_row(e, cluster)
    if hits:
        raise JobNotFound(f"{job_id!r} matches {len(hits)} recorded jobs ({', '.join(h['id'] for h in hits[:4])}...); "
                          f"give more of the id")
    raise NoSuchJob(f"no job matches {job_id!r} on the cluster or in the local record; `rayjobs list` shows the ids")


def _check_experiment(name: str, all_jobs: Sequence[Any]) -> None:
    """No job of ``name``: fine if it is a known experiment, else an error with the closest names."""
    from rayjobs.errors import did_you_mean
    from rayjobs.views.jobfields import meta

    names = {meta(j).get("experiment", "") for j in all_jobs} - {""}
    try:
        from rayjobs.submit import compose

        names |= set(compose.experiments())
    except RayjobsError:
        pass
    if name not in names:
        raise ConfigError(f"unknown experiment {name!r}{did_you_mean(name, names)}")

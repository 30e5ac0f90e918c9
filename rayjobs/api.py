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
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from rayjobs.errors import ConfigError, NoSuchJob, RayjobsError
from rayjobs.shared import TERMINAL

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
        """The job whose id is ``prefix`` or starts with it.

        Raises:
            NoSuchJob: no job on the cluster matches (the closest ids are named).
            JobNotFound: several match.
        """
        d = dashboard or _connect(address)
        return cls(d.resolve_id(prefix), dashboard=d)

    @property
    def dashboard(self) -> "Dashboard":
        """The client of this job's cluster (connected on first use)."""
        if self._d is None:
            self._d = _connect(self._address)
        return self._d

    def row(self, *, progress: bool = True) -> dict[str, Any]:
        """What ``rayjobs status --json`` prints: status (QUEUED-aware), progress, metrics, W&B run.

        A job the cluster no longer knows (its head restarted, or it ran elsewhere) comes from
        the local record, with ``status`` UNKNOWN and ``source`` "record".
        """
        from rayjobs.views import jobrows, queuestatus

        from rayjobs.errors import JobNotFound

        d = self.dashboard
        try:
            info = d.info(self.job_id)
        except JobNotFound:
            return recorded_row(self.job_id, d.target.key)
        row = jobrows.base_row(info, queuestatus.overlay(d, [info]).get(self.job_id))
        if progress:
            row = jobrows.add_progress(row, info, d, lines=2000, head_scan=True)
        if row["attempt"] is None:
            row["attempt"] = 0 if row["status"] in ("PENDING", "QUEUED") else 1
        return row

    def status(self) -> str:
        """``PENDING QUEUED RUNNING SUCCEEDED FAILED STOPPED`` (or UNKNOWN: only in the local record)."""
        return str(self.row(progress=False)["status"])

    def done(self) -> bool:
        """Has the job ended (SUCCEEDED, FAILED or STOPPED)?"""
        return self.status() in TERMINAL

    def wait(self, *, timeout: Optional[float] = None, poll: float = 2.0) -> str:
        """Block until the job ends; its final status.

        Raises:
            TimeoutError: still not ended after ``timeout`` seconds (the job goes on).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = str(self.dashboard.info(self.job_id).status).split(".")[-1]
            if status in TERMINAL:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.job_id} is still {status} after {timeout:g} s")
            time.sleep(poll)

    def iter_logs(self, *, tail: Optional[int] = None, clean: bool = True) -> Iterator[str]:
        """The log as it is now (``tail``: only the last N lines), in chunks; ``clean``: no ANSI codes."""
        from rayjobs.client.dashboard import DashboardDown
        from rayjobs.views import logparse

        d = self.dashboard
        node = getattr(d.info(self.job_id), "driver_node_id", None)
        if not node:
            return
        split = logparse.LineSplitter()
        try:
            for chunk in d.iter_log(self.job_id, node, tail if tail is not None else -1):
                yield logparse.clean_block(split.feed_text(chunk)) if clean else chunk.decode("utf-8", "replace")
            yield "".join((logparse.clean(x) if clean else x) + "\n" for x in split.flush())
        except DashboardDown:  # the Jobs API reads the same file another way
            text = d.logs(self.job_id)
            if tail is not None:
                text = "\n".join(text.splitlines()[-tail:]) + "\n" if tail > 0 else ""
            yield logparse.clean_block(text) if clean else text

    def logs(self, *, tail: Optional[int] = None, clean: bool = True) -> str:
        """The log as one string (see :meth:`iter_logs`)."""
        return "".join(self.iter_logs(tail=tail, clean=clean))

    def tail(self, *, live: Optional[bool] = None, lines: Optional[int] = -1) -> int:
        """Follow the log with the progress view until the job ends (what ``rayjobs tail`` does).

        Returns:
            0 SUCCEEDED, 1 FAILED, 3 STOPPED, 130 if interrupted (Ctrl-C: the job goes on).
        """
        from rayjobs.views import jobtail

        return jobtail.tail(self.dashboard, self.job_id, live=live, lines=lines)

    def stop(self, *, wait: float = 90.0) -> str:
        """Stop the job (SIGTERM, the head's grace period to checkpoint, then Ray's kill); its status
        after at most ``wait`` seconds."""
        return stop_jobs([self.job_id], wait=wait, dashboard=self.dashboard)[self.job_id]


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
    from rayjobs.submit import compose, pipeline

    args = [f"+exp={experiment}", *overrides] + ([f"rayjobs.address={address}"] if address else [])
    hydra = compose.make_hydra()
    with pipeline.ids_to_caller() as ids, compose.translate_errors(args):
        hydra.multirun(config_name=compose.CONFIG_NAME, task_function=pipeline.no_task, overrides=args)
    if not ids:
        raise ConfigError("nothing was submitted (a dry run?)")
    return [Job(i, address=address) for i in ids]


# --------------------------------------------------------------------------- many jobs
def list_jobs(*, sweep: Optional[str] = None, statuses: Sequence[str] = (), experiment: Optional[str] = None,
              include_all: bool = False, address: Optional[str] = None) -> list[dict[str, Any]]:
    """Rows of ``rayjobs list --json`` (oldest first), jobs of the local record the cluster forgot included."""
    from rayjobs.views import jobrows

    wanted = jobrows.parse_statuses(statuses)
    d = _connect(address)
    all_jobs = d.list_jobs()
    records = jobrows.missing_records((j.submission_id for j in all_jobs), d.target.key, sweep)
    try:
        chosen = jobrows.select(all_jobs, sweep=sweep, experiment=experiment, include_all=include_all)
    except RayjobsError:
        if not (sweep and records):
            raise
        chosen = []  # a sweep the cluster has forgotten: its rows come from the local record
    if experiment:
        records = [r for r in records if r["experiment"] == experiment]
        if not chosen and not records:
            _check_experiment(experiment, all_jobs)
    rows = jobrows.rows(chosen, d) + records
    return [r for r in rows if r["status"] in wanted] if wanted else rows


def stop_jobs(job_ids: Sequence[str] = (), *, sweep: Optional[str] = None, wait: float = 90.0,
              address: Optional[str] = None, dashboard: Optional["Dashboard"] = None,
              say: Any = None) -> dict[str, str]:
    """Stop jobs (by id or prefix) and every job of ``sweep``; ``{id: status}`` after at most ``wait`` s.

    Idempotent: an ended job is left as it is. ``say`` gets one line per thing worth telling.
    """
    from rayjobs.views import jobrows

    say = say or (lambda msg: None)
    if not job_ids and not sweep:
        raise ConfigError("name the jobs to stop: rayjobs stop ID... or rayjobs stop --sweep S")
    d = dashboard or _connect(address)
    all_jobs = d.list_jobs()
    ids = [d.resolve_id(j, all_jobs) for j in job_ids]
    ids += [j.submission_id for j in jobrows.select(all_jobs, sweep=sweep)] if sweep else []
    ids = list(dict.fromkeys(ids))
    status = {j.submission_id: jobrows.status_of(j) for j in all_jobs}
    asked = [i for i in ids if status.get(i) not in TERMINAL]
    for i in ids:
        if i in asked:
            d.stop(i)
        else:
            say(f"{i} already {status[i]}")
    if asked:
        say(f"asked {len(asked)} job(s) to stop; the trainer gets a grace period to save a checkpoint")
    _wait_terminal(d, asked, status, wait)
    return {i: status.get(i, "?") for i in ids}


def _wait_terminal(d: "Dashboard", ids: Sequence[str], status: dict[str, str], wait: float) -> None:
    """Poll (bounded by ``wait`` seconds) until every job of ``ids`` has ended; ``status`` updated."""
    deadline = time.monotonic() + max(0.0, wait)
    pending = set(ids)
    while pending and time.monotonic() < deadline:
        for i in list(pending):
            try:
                status[i] = str(d.info(i).status).split(".")[-1]
            except RayjobsError:
                continue
            if status[i] in TERMINAL:
                pending.discard(i)
        if pending:
            time.sleep(0.5)


def plot_jobs(job_ids: Sequence[str] = (), *, sweep: Optional[str] = None, metrics: Sequence[str] = (),
              val: bool = True, output: str = "curves.png", address: Optional[str] = None) -> dict[str, Any]:
    """Draw one PNG (a curve per job over steps, plus the val-core metrics); the plotted data."""
    from rayjobs.views import jobrows, plot

    if not job_ids and not sweep:
        raise ConfigError("name the jobs to plot: rayjobs plot ID... or rayjobs plot --sweep S")
    if not output.lower().endswith(".png"):
        raise ConfigError(f"-o {output}: give a .png file name")
    d = _connect(address)
    all_jobs = d.list_jobs()
    by_id = {j.submission_id: j for j in all_jobs}
    chosen = [by_id[d.resolve_id(j, all_jobs)] for j in job_ids]
    chosen += sorted(jobrows.select(all_jobs, sweep=sweep), key=jobrows.order) if sweep else []
    chosen = list({j.submission_id: j for j in chosen}.values())
    data = plot.collect(d, chosen, list(metrics) or None, val=val)
    plot.render(data, output, title=f"sweep {sweep}" if sweep else None)
    return data


# --------------------------------------------------------------------------- helpers
def _connect(address: Optional[str]) -> "Dashboard":
    from rayjobs.client.connection import connect

    return connect(address)


def recorded_row(job_id: str, cluster: str) -> dict[str, Any]:
    """The local record's row for an id the cluster does not know.

    Raises:
        NoSuchJob: no record matches. JobNotFound: several do.
    """
    from rayjobs.errors import JobNotFound
    from rayjobs.submit import ledger
    from rayjobs.views import jobrows

    hits = ledger.lookup(job_id)
    if len(hits) == 1:
        return jobrows.record_row(hits[0], cluster)
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

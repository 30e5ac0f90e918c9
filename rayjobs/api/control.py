"""Acting on ended jobs: resume, rerun, evaluate their checkpoints (stopping is :mod:`.stopping`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from rayjobs.api.job import Job, connect
from rayjobs.api.stopping import jobs_named
from rayjobs.contract.meta import JobMeta
from rayjobs.errors import ConfigError

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def resume_job(job_id: str, *, address: Optional[str] = None, dashboard: Optional["Dashboard"] = None,
               say: Any = None) -> Job:
    """Continue a stopped or failed job from its last checkpoint: its exact submit request and code
    snapshot (the queue's durable copy) queued again under a new id ``<id>-rN``, with the same run
    name and checkpoint dir, so verl resumes (``resume_mode=auto``) and the attempt count goes on.

    Returns:
        The new job (waiting in the queue, or admitted).

    Raises:
        NoSuchJob: no job matches. SubmitError: the job has not ended, SUCCEEDED, is not a verl job
            of rayjobs', has no checkpoint to resume from, or its code snapshot is gone.
    """
    say = say or (lambda msg: None)
    d = dashboard or connect(address)
    [old] = list(jobs_named(d, [job_id], None))
    view = d.queue.resume(old)
    new = view.submission_id
    _record_resume(d, old, new)
    ckpt = getattr(d.queue.view(old), "checkpoint_step", None)
    run = JobMeta.from_ray(view.metadata).run or old
    say(f"{new}: resumes run {run} of {old} from its checkpoint at step {ckpt}")
    return Job(new, dashboard=d)


def _record_resume(d: "Dashboard", old: str, new: str) -> None:
    """The resumed job in the local record: the old one's entry and config, under the new id."""
    from rayjobs import ledger

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
    from rayjobs.submit import rerun

    say = say or (lambda msg: None)
    d = dashboard or connect(address)
    [(old, job)] = list(jobs_named(d, [job_id], None).items())
    plan = rerun.plan(old, dict(job.metadata), overrides, address=address, dry_run=dry_run)
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
    from rayjobs.submit import evaluate
    from rayjobs.config import compose
    from rayjobs.submit.spec import format_value

    ids = [after] if isinstance(after, str) else list(after)
    args = [f"+exp={experiment}", f"rayjobs.after={format_value(ids)}", *overrides,
            *(["rayjobs.dry_run=true"] if dry_run else []), *([f"rayjobs.address={address}"] if address else [])]
    c = compose.compose(args)
    if not c.cfg.rayjobs.evaluate:
        raise ConfigError(f"{experiment} is not an evaluation preset (rayjobs.evaluate: true): submit it with submit_experiment")
    d = dashboard or connect(address)
    return [Job(i, dashboard=d) for i in evaluate.run(c, dashboard=d, say=say or (lambda msg: None))]

"""The evaluation of training runs' last checkpoints: ``+exp=eval_checkpoint rayjobs.after=<sweep | ids>``.

A preset marked ``rayjobs.evaluate: true`` does not describe a job of its own: it expands into one
evaluation job per training job that ``rayjobs.after`` names (a sweep id stands for each of its
points; a run ``rayjobs resume`` continued is its newest job). Each evaluation is built with
``rayjobs rerun``'s machinery (:mod:`rayjobs.submit.rerun`): the point's own recorded config -- so
its model, data and GPU shape -- and its own durable code snapshot, with

* verl 0.9.1's validation-only run (``RayPPOTrainer.fit``: ``_load_checkpoint``, then, with
  ``val_before_train``, one ``_validate`` logged at the loaded step, and ``val_only`` returns right
  there): ``trainer.val_only=true``, ``trainer.val_before_train=true`` (without it ``val_only`` does
  nothing and verl trains), ``trainer.resume_mode=resume_path``, ``trainer.del_local_ckpt_after_load=false``
  (the point's checkpoint is read, never removed);
* ``trainer.resume_from_path=<the point's checkpoint dir>/global_step_latest``: verl asserts a
  ``global_step_N`` path, and N is not known while the point trains, so the runner puts the last
  complete checkpoint's step there when the evaluation starts
  (:func:`rayjobs.oncluster.runner.resolve_latest`);
* a run of its own, ``<point run>-eval-<4 hex>`` (its own checkpoint and metrics dirs: it never
  writes into the point's), ``rayjobs.after=<point id>`` (it waits for the point to SUCCEED; the
  queue fails it, never started, if the point fails), and metadata ``eval_of=<point id>``
  (``rayjobs compare`` shows its score in the point's row) and ``code_of=<point id>``.

The preset's other verl keys and the command line's overrides apply to every evaluation
(``data.val_files=...``). All evaluations go to the cluster in one enqueue request, each with its
point's snapshot (the queue's ``enqueue --code-of`` reads ``code_of`` per job): the points of a
sweep share one snapshot, and any mix of sweeps and jobs is still one request, all or nothing.
"""

from __future__ import annotations

import json
import secrets
import sys
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from rayjobs.contract.meta import JobMeta
from rayjobs.errors import ConfigError, NoSuchJob
from rayjobs.shared import CODE_OF_KEY
from rayjobs.submit import pipeline, rerun
from rayjobs.config import compose
from rayjobs.config.compose import Composed, override_key
from rayjobs.submit.pipeline import Prepared
from rayjobs.config.schema import after_ids
from rayjobs.submit.spec import format_value

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.contract.wire import JobView

#: The metadata key of an evaluation: the training job whose checkpoint it evaluates (compare reads it).
EVAL_OF = "eval_of"
#: What makes a verl job an evaluation of a checkpoint (verl 0.9.1; see the module's docstring).
FORCED: dict[str, Any] = {"trainer.val_only": True, "trainer.val_before_train": True,
                          "trainer.resume_mode": "resume_path", "trainer.del_local_ckpt_after_load": False}
#: Keys each evaluation gets per point, never from the command line.
PER_POINT = ("trainer.resume_from_path", "trainer.experiment_name", "trainer.default_local_dir")
#: The submit's own keys: how this command runs, not what an evaluation is.
HOW = ("exp", "rayjobs.evaluate", "rayjobs.after", "rayjobs.address", "rayjobs.dry_run", "rayjobs.follow")
#: The folder name the runner turns into the last complete checkpoint's ``global_step_N``.
LATEST = "global_step_latest"


def run(c: Composed, *, dashboard: Optional["Dashboard"] = None, say: Any = None) -> list[str]:
    """``python -m rayjobs.submit +exp=eval_checkpoint rayjobs.after=...``: plan every evaluation, then
    print the dry run (the JSON on stdout) or queue them all (one request).

    Args:
        c: the composed preset (``rayjobs.evaluate`` true) with the command line's overrides.
        dashboard: an open client (else one for ``rayjobs.address``). The points are read from the
            cluster, a dry run's too: an evaluation is planned from each point's record there.
        say: where one-line notes go (default: stderr).

    Returns:
        The evaluations' ids, in point order (a dry run: the ids they would have had; nothing queued).

    Raises:
        ConfigError, NoSuchJob: bad input (one line; nothing is queued). SubmitError: a point's
            code snapshot is gone (nothing queued).
    """
    from rayjobs.client.connection import connect

    say = say or (lambda msg: print(f"rayjobs: {msg}", file=sys.stderr, flush=True))
    rj = c.cfg.rayjobs
    tokens, extra = parse(c)
    d = dashboard or connect(rj.address, address_from="rayjobs.address", quiet=False)
    points = named_points(all_jobs(d), tokens)
    prepared = plan(points, extra, address=rj.address, dry_run=bool(rj.dry_run))
    sweeps = sorted({JobMeta.from_ray(m).sweep for _, m in points} - {""})
    scores = f"rayjobs compare --sweep {sweeps[0]}" if len(sweeps) == 1 else "rayjobs compare --sweep S"
    if rj.dry_run:
        from rayjobs.preflight import checks

        checks.check_cluster(d, prepared)  # connected anyway: its versions and the GPU fit too
        print(report(prepared), flush=True)
        say(f"dry run: {len(prepared)} evaluation job(s) checked as a submit checks them, nothing queued; the "
            f"points were read from the cluster at {d.target.address} (whether it still keeps their code "
            f"snapshots is known only when they are queued)")
        return [p.spec.submission_id for p in prepared]
    ids = send(d, prepared)
    say(f"{len(ids)} evaluation job(s) queued, each waiting for its point to SUCCEED, then validating its "
        f"last checkpoint; the scores: {scores}")
    return ids


def parse(c: Composed) -> tuple[list[str], list[str]]:
    """(the ids ``rayjobs.after`` names, the overrides every evaluation gets: the preset's verl keys,
    then the command line's), refusing what an evaluation sets itself.

    Raises:
        ConfigError: no ``rayjobs.after``; an override of a key the evaluation sets; a preset or group.
    """
    tokens = after_ids(c.cfg.rayjobs.after)
    if not tokens:
        raise ConfigError(f"+exp={c.experiment} evaluates training jobs: name them with rayjobs.after=<sweep id> "
                          f"or rayjobs.after=[ID1,ID2] (`rayjobs list` shows the ids)")
    preset = [f"++{k}={format_value(v)}" for k, v in compose.preset_keys(c.experiment).items()]
    typed = [o for o in c.overrides if override_key(o) not in HOW]
    for ov in preset + typed:
        check_override(ov)
    return tokens, preset + typed


def check_override(ov: str) -> None:
    """Refuse an override an evaluation cannot take (one line)."""
    key = override_key(ov)
    value = ov.split("=", 1)[1].strip("'\"").lower() if "=" in ov else None
    if key in FORCED and (ov.startswith("~") or value != format_value(FORCED[key]).lower()):
        raise ConfigError(f"{ov}: an evaluation sets {key}={format_value(FORCED[key])} itself (verl's "
                          f"validation-only run from a checkpoint); drop it")
    if key in PER_POINT:
        raise ConfigError(f"{ov}: each evaluation gets its own run and checkpoint dir and its point's last "
                          f"checkpoint; drop it")
    if key.startswith("hydra.") or "/" in key or "@" in key:
        raise ConfigError(f"{ov}: an evaluation keeps each point's preset and config groups and changes keys only")
    if key in ("rayjobs.working_dir", "rayjobs.excludes"):
        raise ConfigError(f"{ov}: an evaluation runs its point's code snapshot kept by the cluster's queue; drop it")


# --------------------------------------------------------------------------- the points
def all_jobs(d: "Dashboard") -> list["JobView"]:
    """Every job of the cluster (Ray's and the queue's), as ``rayjobs list`` reads them."""
    from rayjobs.views import queuestatus

    return queuestatus.all_jobs(d)


def named_points(jobs: Sequence["JobView"], tokens: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """(id, metadata) of each training job ``tokens`` name, in order, once each: an id (or the unique
    start of one), or a sweep id (or the unique start of one) for its points in point order. A run
    that ``rayjobs resume`` continued is its newest job (the one that ends with its last checkpoint).

    Raises:
        NoSuchJob: a token that names no job or sweep of the cluster (the closest ids named).
    """
    from rayjobs.views import compare, jobrows

    ordered = sorted(jobs, key=jobrows.order)
    newest = {i: job for job, chain in compare.points(ordered) for i in chain}
    ids = [j.submission_id for j in ordered]
    sweeps: dict[str, list[str]] = {}
    for j in ordered:
        if j.meta.sweep:
            sweeps.setdefault(j.meta.sweep, []).append(j.submission_id)
    out: dict[str, dict[str, str]] = {}
    for token in tokens:
        for jid in _resolve(token, ids, sweeps):
            job = newest.get(jid)
            if job is not None:
                out.setdefault(job.submission_id, dict(job.metadata))
    return list(out.items())


def _resolve(token: str, ids: Sequence[str], sweeps: Mapping[str, list[str]]) -> list[str]:
    """The ids ``token`` names (:func:`rayjobs.contract.ids.resolve`, as the queue resolves ``after``), in
    ``ids``' order (a sweep's points in point order)."""
    from rayjobs.contract import ids as idres

    try:
        named = set(idres.resolve(token, ids, sweeps, what="job or sweep"))
    except LookupError as e:
        raise NoSuchJob(f"rayjobs.after={token}: {e}") from None
    return [i for i in ids if i in named]


# --------------------------------------------------------------------------- the evaluations
def plan(points: Sequence[tuple[str, Mapping[str, Any]]], extra: Sequence[str], *, address: Optional[str] = None,
         dry_run: bool = False) -> list[Prepared]:
    """One evaluation per point, each checked as a submit checks its config (every point first).

    Args:
        points: (id, metadata) of each training job (:func:`named_points`).
        extra: the overrides every evaluation gets (:func:`parse`).
        address: the cluster's address as given (the new jobs' ``rayjobs.address``).
        dry_run: mark them as a dry run.

    Returns:
        The evaluations, ready for :func:`send`.

    Raises:
        ConfigError: a point that cannot be evaluated, or an override refused (one line; nothing is queued).
    """
    prepared = [plan_one(pid, meta, extra, address=address, dry_run=dry_run) for pid, meta in points]
    pipeline.run_preflight(prepared)
    return prepared


def plan_one(pid: str, meta: Mapping[str, Any], extra: Sequence[str], *, address: Optional[str],
             dry_run: bool) -> Prepared:
    """The evaluation of training job ``pid`` (its metadata ``meta``): its recorded config and code,
    ``extra``, and the keys that make it an evaluation of its last checkpoint."""
    check_point(pid, meta)
    jm = JobMeta.from_ray(meta)
    rec = rerun.recorded(pid, meta)
    check_saves(pid, rec.raw)
    suffix = secrets.token_hex(2)
    run_name = f"{jm.run or pid}-eval-{suffix}"
    latest = f"{jm.checkpoint_dir}/{LATEST}"
    own = [*(f"{k}={format_value(v)}" for k, v in FORCED.items()), f"trainer.resume_from_path={format_value(latest)}",
           f"trainer.experiment_name={format_value(run_name)}", f"rayjobs.after={format_value(pid)}"]
    overrides = [*extra, *own]
    tag = {EVAL_OF: pid, CODE_OF_KEY: pid}
    p = rerun.plan_from(pid, meta, rec, overrides, address=address, dry_run=dry_run, tag=tag,
                        submission_id=f"{pid}-eval-{suffix}", preflight=False).prepared
    own_dir, point_dir = p.spec.meta.checkpoint_dir, jm.checkpoint_dir
    if own_dir.rstrip("/") == point_dir.rstrip("/") or own_dir.startswith(point_dir.rstrip("/") + "/"):
        raise ConfigError(f"the evaluation of {pid} would write into its checkpoint dir {point_dir}: "
                          f"give the evaluations another storage root (rayjobs.storage=...)")
    return p


def check_point(pid: str, meta: Mapping[str, Any]) -> None:
    """Refuse a job that is not a training run with checkpoints of its own (one line)."""
    jm = JobMeta.from_ray(meta)
    if jm.eval_of:
        raise ConfigError(f"{pid} is itself an evaluation (of {jm.eval_of}): name the training jobs or "
                          f"their sweep in rayjobs.after")
    if jm.kind != "verl" or not jm.checkpoint_dir:
        raise ConfigError(f"{pid} is not a verl training job of rayjobs' (no checkpoint dir): nothing to evaluate; "
                          f"name the training jobs or their sweep in rayjobs.after")


def check_saves(pid: str, raw: Mapping[str, Any]) -> None:
    """Refuse a job whose recorded config saves no checkpoint (``trainer.save_freq`` <= 0)."""
    from omegaconf import OmegaConf

    compose.register_resolvers()
    try:
        value = OmegaConf.select(OmegaConf.create(dict(raw)), "trainer.save_freq", default=None)
        freq = int(value)
    except Exception:  # noqa: BLE001 (not a number here: verl decides, as it does for the training job)
        return
    if freq <= 0:
        raise ConfigError(f"{pid} saves no checkpoints (trainer.save_freq={value} in its config): there is "
                          f"nothing to evaluate; train with trainer.save_freq=N (N > 0)")


def send(d: "Dashboard", prepared: Sequence[Prepared]) -> list[str]:
    """Check the evaluations against the live cluster and queue them all in one request (each with
    its point's code snapshot); their ids.

    Raises:
        ConfigError: one can never fit the cluster. SubmitError: a point's snapshot is gone (nothing queued).
    """
    first = str(prepared[0].spec.metadata[CODE_OF_KEY])
    return pipeline.send(prepared, dashboard=d, code_of=first)


def report(prepared: Sequence[Prepared]) -> str:
    """What the dry run prints: a submit's dry-run JSON per evaluation (a list for several)."""
    docs = json.loads(pipeline.dry_run_report(prepared))
    docs = docs if isinstance(docs, list) else [docs]
    out = [{EVAL_OF: p.spec.metadata[EVAL_OF], "code": f"the code snapshot of {p.spec.metadata[CODE_OF_KEY]} "
            f"kept by the cluster's queue", **doc} for p, doc in zip(prepared, docs)]
    return json.dumps(out[0] if len(out) == 1 else out, indent=2, default=str)


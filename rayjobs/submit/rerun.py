"""The rerun plan (``rayjobs rerun ID [OVERRIDES...]``): an earlier job's config and code, a few keys
changed, checked as a submit is and queued as a new job.

Where each part comes from, and why:

* **The config**: the job's local record (``$RAYJOBS_HOME/runs/<id>/config.yaml``, the composed
  config exactly as submitted, interpolations unresolved), so a rerun does not depend on the preset
  files as they are now (edited since, or not visible from this directory). Without a local record
  (submitted from another machine, or the record deleted) the job's preset and overrides (its
  metadata) are composed again, and used only when that gives the config the job ran with (the
  ``config_hash`` in its metadata); otherwise the rerun is refused.
* **The overrides**: Hydra's grammar, as for a submit (``key=value``, ``+key=value``, ``++key=value``,
  ``~key``), applied by Hydra itself to that config (the recorded config as the primary config,
  rayjobs' typed schema under it), then a submit's checks: struct mode (unknown keys), rayjobs'
  types and ranges, verl's types, absolute paths, and the preflight of :func:`pipeline.prepare`.
  A preset or config group (``+exp=``, ``group/x=``) cannot change: a rerun is that config.
* **The id and run**: new, as a new submit gets them (the run is named by the id, checkpoints go
  under the storage root) unless the overrides set ``trainer.experiment_name`` or
  ``trainer.default_local_dir``. An old job's own run name is not carried over: a rerun trains
  afresh (``rayjobs resume`` continues a run).
* **The code**: the old job's durable snapshot in the queue's store, never this directory
  (``enqueue --code-of ID`` on the cluster; a snapshot that is gone is refused there, nothing queued).
* **verl's command line**: the keys the old job gave verl (its recorded entrypoint), valued from the
  new config, then the overrides (in their canonical form: ``+key`` for a key verl lacks), so what
  verl composes is the recorded config with the overrides.
"""

from __future__ import annotations

import json
import secrets
import shlex
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from rayjobs.contract.meta import JobMeta
from rayjobs.errors import ConfigError
from rayjobs.submit import pipeline
from rayjobs.config import compose
from rayjobs.config.compose import Composed, is_own, override_key
from rayjobs.submit.pipeline import Prepared
from rayjobs.submit.spec import RUNNER, Context, build_spec

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard

#: Keys that name the run: a rerun gets fresh ones unless its own overrides set them.
FRESH_KEYS = ("trainer.experiment_name", "trainer.default_local_dir")
#: Keys rayjobs sets on verl's command line itself (spec.verl_args).
FORCED_KEYS = FRESH_KEYS + ("trainer.logger",)
#: rayjobs keys a rerun cannot change, and why.
FIXED_OWN = {
    "rayjobs.address": "a rerun runs on the cluster that keeps the job's code: pick it with --address",
    "rayjobs.working_dir": "a rerun runs the job's code snapshot: to run other code, submit it",
    "rayjobs.excludes": "a rerun runs the job's code snapshot as it was kept: to ship other files, submit them",
    "rayjobs.follow": "rayjobs rerun does not follow the job: rayjobs tail NEW_ID",
    "rayjobs.dry_run": "a rerun's dry run is rayjobs rerun --dry-run ID",
}
#: What the new job's working_dir says (the queue gives it the snapshot's path at admission).
SNAPSHOT_URI = "rayjobs-snapshot://{}"


@dataclass(frozen=True)
class Recorded:
    """An earlier job's config as it was submitted."""

    raw: dict  #: the composed config, interpolations unresolved, no ``hydra`` node
    experiment: str
    overrides: tuple[str, ...]  #: as the job was submitted (``+exp=...`` included)
    preset: tuple[str, ...]  #: the keys its verl command line set from the preset
    source: str  #: where the config came from, in words


@dataclass(frozen=True)
class RerunPlan:
    """A rerun, checked: the new job (its config and JobSpec) and what it reruns."""

    old: str
    prepared: Prepared
    source: str
    notes: tuple[str, ...] = ()

    @property
    def job_id(self) -> str:
        """The new job's id."""
        return self.prepared.spec.submission_id

    @property
    def dry_run(self) -> bool:
        """``--dry-run``: check, print, queue nothing."""
        return bool(self.prepared.composed.cfg.rayjobs.dry_run)

    def report(self) -> str:
        """What ``rayjobs rerun --dry-run`` prints: a submit's dry-run JSON, with where it comes from."""
        doc = json.loads(pipeline.dry_run_report([self.prepared]))
        head = {"rerun_of": self.old, "config_from": self.source,
                "code": f"the code snapshot of {self.old} kept by the cluster's queue"}
        return json.dumps({**head, **doc}, indent=2, default=str)


def plan(old: str, meta: Mapping[str, Any], overrides: Sequence[str], *, address: Optional[str] = None,
         dry_run: bool = False) -> RerunPlan:
    """Build and check the rerun of job ``old`` (its metadata ``meta``) with ``overrides``. No cluster I/O.

    Args:
        old: the full id of the job to rerun.
        meta: its metadata (Ray's, or the queue's record of it).
        overrides: Hydra overrides on its recorded config.
        address: the cluster's address as given (the new job's ``rayjobs.address``).
        dry_run: mark the plan as a dry run.

    Returns:
        The plan: the new job under a new id, checked as a submit checks it.

    Raises:
        ConfigError: the job is not rayjobs', its config cannot be had, or an override is refused
            (one line; nothing is queued).
    """
    overrides = [str(o) for o in overrides]
    check_overrides(old, overrides)
    return plan_from(old, meta, recorded(old, meta), overrides, address=address, dry_run=dry_run)


def plan_from(old: str, meta: Mapping[str, Any], rec: Recorded, overrides: Sequence[str], *,
              address: Optional[str] = None, dry_run: bool = False, tag: Optional[Mapping[str, str]] = None,
              submission_id: Optional[str] = None, preflight: bool = True) -> RerunPlan:
    """A new job from ``old``'s recorded config ``rec`` (:func:`recorded`) with ``overrides``, checked.

    The evaluation of a checkpoint (:mod:`rayjobs.submit.evaluate`) is built this way too.

    Args:
        old: the job whose config and code snapshot the new job takes.
        meta: its metadata.
        rec: its config as submitted.
        overrides: Hydra overrides on that config (already checked by the caller).
        address: the cluster's address as given (the new job's ``rayjobs.address``).
        dry_run: mark the plan as a dry run.
        tag: the new job's metadata that says what it is to ``old`` (default ``rerun_of=<old>``).
        submission_id: the new job's id (default: a new id, as a submit makes it).
        preflight: run a submit's preflight on it here (a caller with several runs it once for all).

    Returns:
        The plan.

    Raises:
        ConfigError: an override is refused, or the new config fails the checks (one line).
    """
    cfg = apply(rec.raw, overrides, address=address, dry_run=dry_run)
    merged, preset, notes = merge(old, rec, overrides)
    composed = Composed(cfg=cfg, experiment=rec.experiment, overrides=merged, preset=preset)
    spec = new_spec(old, meta, composed, tag=tag)
    if submission_id:
        spec = replace(spec, submission_id=submission_id)
    prepared = Prepared(composed, spec)
    if preflight:
        pipeline.run_preflight([prepared])
    return RerunPlan(old, prepared, rec.source, tuple(notes))


def send(d: "Dashboard", p: RerunPlan) -> str:
    """Check ``p`` against the live cluster and queue it with the old job's code snapshot; its id.

    Raises:
        ConfigError: it can never fit the cluster. SubmitError: the snapshot is gone (nothing queued).
    """
    return pipeline.send([p.prepared], dashboard=d, code_of=p.old)[0]


def check_overrides(old: str, overrides: Sequence[str]) -> None:
    """Refuse what a rerun cannot change: the preset, config groups, where it runs and with what code."""
    for ov in overrides:
        key = override_key(ov)
        if key == "exp" or key.startswith("hydra.") or "/" in key or "@" in key:
            raise ConfigError(f"{ov}: a rerun keeps {old}'s preset and config groups and changes keys only; "
                              f"to change those, submit it: python -m rayjobs.submit +exp=... [overrides]")
        if key in FIXED_OWN:
            raise ConfigError(f"{ov}: {FIXED_OWN[key]}")


# --------------------------------------------------------------------------- the old config
def recorded(old: str, meta: Mapping[str, Any]) -> Recorded:
    """``old``'s config as submitted: its local record, else composed again and checked by hash.

    Raises:
        ConfigError: not a rayjobs job, or no way to its exact config from here.
    """
    from rayjobs import ledger

    experiment = JobMeta.from_ray(meta).experiment
    if not experiment:
        raise ConfigError(f"{old} was not submitted through rayjobs (its metadata names no experiment): "
                          f"nothing to rerun; submit it with python -m rayjobs.submit")
    entry = ledger.find(old) or {}
    path = Path(entry.get("config") or ledger.run_dir(old) / "config.yaml")
    if not entry or not path.is_file():
        return _recomposed(old, meta, experiment)
    import yaml

    raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(raw, dict) or not isinstance(raw.get("rayjobs"), dict):
        raise ConfigError(f"the local record of {old}'s config ({path}) is not a config: restore it or delete it "
                          f"(then the config is composed again from its preset)")
    keys = entrypoint_keys(str(entry.get("entrypoint") or ""), str(raw["rayjobs"].get("entrypoint") or ""))
    if keys is None:  # not the command line rayjobs builds: the preset file's keys are the best guess
        keys = tuple(compose.preset_keys(experiment))
    return Recorded(raw, experiment, tuple(entry.get("overrides") or ()), keys, "its local record")


def _recomposed(old: str, meta: Mapping[str, Any], experiment: str) -> Recorded:
    """No local record: compose the job's preset and overrides again; it must give the same config."""
    from rayjobs.config import configcache
    from rayjobs.submit.spec import config_hash

    jm = JobMeta.from_ray(meta)
    overrides = list(jm.overrides)
    if not any(override_key(o) == "exp" for o in overrides):
        overrides.insert(0, f"+exp={experiment}")
    why = f"{old} has no local record of its config on this machine"
    try:
        c = compose.compose(overrides)
    except ConfigError as e:
        raise ConfigError(f"{why}, and composing it again fails: {e}") from None
    if config_hash(c.cfg) != jm.config_hash:
        raise ConfigError(f"{why}, and its preset {experiment} with its overrides composes to another config now "
                          f"(a preset, a default or your settings changed since): rerun it where it was submitted, or submit it anew")
    return Recorded(configcache.raw(c.cfg), experiment, tuple(overrides), tuple(c.preset),
                    "its preset and overrides composed again (the config it ran with, by its hash)")


def entrypoint_keys(entrypoint: str, command: str) -> Optional[tuple[str, ...]]:
    """The keys a verl job's command line set (``RUNNER command key=value ...``); None if it is not one."""
    try:
        words, head = shlex.split(entrypoint), shlex.split(RUNNER) + shlex.split(command)
    except ValueError:
        return None
    if not command or words[:len(head)] != head:
        return None
    return tuple(override_key(w) for w in words[len(head):] if "=" in w and not w.startswith("~"))


# --------------------------------------------------------------------------- the new config
def apply(raw: dict, overrides: Sequence[str], *, address: Optional[str], dry_run: bool) -> Any:
    """The recorded config with ``overrides``, composed by Hydra and checked as a submit's is.

    The recorded config is the primary config and rayjobs' typed schema sits under it, so the
    override grammar, struct mode and the ``rayjobs.*`` types are Hydra's own, as for a submit.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from rayjobs import settings
    from rayjobs.config import schema

    # How this command runs, not what: never taken over from the old submit.
    base = dict(raw, rayjobs=dict(raw["rayjobs"], dry_run=bool(dry_run), follow=False, address=address))
    settings.current()  # a broken settings file: one line naming it (the storage resolver reads them)
    compose.register_resolvers()
    schema.register()
    with tempfile.TemporaryDirectory(prefix="rayjobs-rerun-") as tmp:
        doc = {"defaults": [schema.SCHEMA_NAME, "_self_"], **base}
        (Path(tmp) / "recorded.yaml").write_text(pipeline.dump_yaml(doc))
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=tmp, version_base=None), compose.translate_errors(overrides):
                cfg = hydra_compose(config_name="recorded", overrides=list(overrides))
        finally:
            GlobalHydra.instance().clear()
    schema.check_values(cfg.rayjobs)
    compose.check_types(cfg, overrides)
    compose.check_absolute(cfg, overrides)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def merge(old: str, rec: Recorded, overrides: Sequence[str]) -> tuple[tuple[str, ...], dict[str, Any], list[str]]:
    """The rerun's overrides (the old ones, then the new ones, one per key), its preset keys, and notes.

    What :func:`rayjobs.submit.spec.verl_overrides` makes of them is verl's command line: a key verl
    lacks is added (``+key``) whichever way it was typed, and a deleted one (``~key``) leaves
    verl's line when only the old job had added it.
    """
    verl_keys = compose.verl_schema()
    new_keys = {override_key(o) for o in overrides}
    out: dict[str, str] = {}
    notes = []
    for ov in rec.overrides:
        key = override_key(ov)
        if key in FRESH_KEYS:
            if key not in new_keys:
                notes.append(f"{old} set {ov}; the rerun is a new run of its own (pass {key}=... to reuse it)")
            continue
        out[key] = ov
    preset = {k: None for k in rec.preset if k not in out and k not in FORCED_KEYS}
    for ov in overrides:
        key = override_key(ov)
        out.pop(key, None)  # the newest value last, once
        verl_has = not verl_keys or key in verl_keys
        if is_own(key):
            out[key] = ov
        elif ov.startswith("~"):
            preset.pop(key, None)
            if verl_has:
                out[key] = ov
        else:
            out[key] = f"{'' if verl_has else '+'}{key}={ov.split('=', 1)[1]}"
    return tuple(out.values()), preset, notes


def new_spec(old: str, meta: Mapping[str, Any], c: Composed, tag: Optional[Mapping[str, str]] = None) -> Any:
    """The new job's JobSpec: a new id as a submit makes it, the old job's git state (it is its
    code), ``tag`` in its metadata (default ``rerun_of=<old>``)."""
    jm = JobMeta.from_ray(meta)
    ctx = Context(now=datetime.now().astimezone(), suffix=secrets.token_hex(2), working_dir=SNAPSHOT_URI.format(old),
                  git_sha=jm.git_sha, git_dirty=jm.git_dirty)
    spec = build_spec(c, ctx)
    return replace(spec, metadata=MappingProxyType(spec.meta.with_(**(tag if tag is not None else {"rerun_of": old})).to_ray()))

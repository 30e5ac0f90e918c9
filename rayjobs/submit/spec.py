"""JobSpec: exactly what is handed to ``JobSubmissionClient.submit_job`` -- and how it is built.

:func:`build_spec` is pure: a composed config plus a :class:`Context` (time, random suffix, git
state, sweep) in, a frozen :class:`JobSpec` out. Dry-run prints it; submit hands
:meth:`JobSpec.submit_kwargs` to Ray unchanged. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field, fields
from datetime import datetime
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from rayjobs.contract.meta import JobMeta
from rayjobs.shared import SECRET_PATTERN, __version__
from rayjobs.contract.ranking import point_label
from rayjobs.config.compose import Composed, is_own, override_key
from rayjobs.config.derive import values_of
from rayjobs.config.schema import after_ids
from rayjobs.errors import ConfigError

#: The wrapper every job runs under (per-attempt metrics file, retries, queue admission).
RUNNER = "python3 -m rayjobs.oncluster.runner --"
#: Env vars verl 0.9.1 sets itself in ray.init; setting them in the job's runtime_env makes
#: verl's ray.init fail with "Failed to merge the Job's runtime env".
VERL_OWNED_ENV = frozenset({"VERL_FULL_DETERMINISM", "VLLM_BATCH_INVARIANT", "VERL_RL_INSIGHT_ENABLE"})


@dataclass(frozen=True)
class JobSpec:
    """One Ray job, field for field the keyword arguments of ``submit_job``."""

    entrypoint: str
    submission_id: str
    runtime_env: Mapping[str, Any]
    metadata: Mapping[str, str]
    entrypoint_num_cpus: Optional[float] = None
    entrypoint_num_gpus: Optional[float] = None
    entrypoint_memory: Optional[int] = None
    entrypoint_resources: Optional[Mapping[str, float]] = None

    @property
    def meta(self) -> JobMeta:
        """:attr:`metadata` typed (every key is read in :mod:`rayjobs.contract.meta`)."""
        return JobMeta.from_ray(self.metadata)

    def submit_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``JobSubmissionClient.submit_job`` (plain dicts, Nones dropped)."""
        return {k: v for k, v in self.to_json().items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (what dry-run prints as the submit request)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _plain(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@dataclass(frozen=True)
class Context:
    """Everything :func:`build_spec` needs from the outside world, gathered by the caller."""

    now: datetime
    suffix: str  #: 4 hex chars, random
    working_dir: str  #: absolute
    git_sha: str = ""
    git_dirty: bool = False
    sweep: Optional[str] = None  #: sweep id shared by all points of a -m run
    point: Optional[int] = None  #: index of this point in the sweep
    sweep_overrides: tuple[str, ...] = field(default_factory=tuple)  #: the overrides varying in the sweep


def slug(text: str, limit: int = 60) -> str:
    """Filesystem/id-safe form: ``algorithm.kl_ctrl.kl_coef=0.01`` -> ``kl_coef=0.01``."""
    text = re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_")
    return text[:limit]


def job_id(experiment: str, ctx: Context) -> str:
    """Readable id: ``<exp>-<YYYYmmdd-HHMMSS>-<4 hex>`` (sweep points: ``<sweep id>-<n>``)."""
    if ctx.sweep is not None:
        return f"{ctx.sweep}-{ctx.point}"
    return f"{slug(experiment, 40)}-{ctx.now:%Y%m%d-%H%M%S}-{ctx.suffix}"


def sweep_id(experiment: str, now: datetime, suffix: str) -> str:
    """Sweep id: same shape as a job id."""
    return f"{slug(experiment, 40)}-{now:%Y%m%d-%H%M%S}-{suffix}"


# --------------------------------------------------------------------------- overrides
_BARE = re.compile(r"^[A-Za-z0-9_./:@+-]+$")
_LOOKS_TYPED = re.compile(r"^([-+]?[0-9._]+([eE][-+]?[0-9]+)?|true|false|null|none|inf|-inf|nan)$", re.I)


def format_value(v: Any) -> str:
    """A Python value in Hydra's override grammar (the inverse of Hydra's parser)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(format_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{k}:{format_value(x)}" for k, x in v.items()) + "}"
    s = str(v)
    if s and _BARE.match(s) and not _LOOKS_TYPED.match(s):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_overrides(c: Composed, forced: Mapping[str, Any]) -> list[str]:
    """The verl overrides, in order: preset keys, the user's, then rayjobs' forced keys.

    Values come from the composed config, resolved, so ``${rayjobs.storage}`` and sweep values
    arrive as plain values; overrides that are not plain keys (``~key``, group choices) pass as
    typed. Each key appears once.
    """
    from rayjobs.config.compose import verl_schema

    vals = values_of(c)
    verl_keys = verl_schema()
    out: dict[str, str] = {}
    for key in c.preset:
        # A preset may add keys verl's defaults lack (e.g. inside `override_config: {}`); on
        # verl's command line those need `++` (add or override), or verl's struct mode refuses them.
        add = "++" if verl_keys and key not in verl_keys else ""
        out[key] = f"{add}{key}={format_value(vals.value(key))}"
    for ov in c.overrides:
        if is_own(ov):
            continue
        key = override_key(ov)
        if ov.startswith("~") or "=" not in ov or "@" in key or vals.select(key, "__absent__") == "__absent__":
            out[key] = ov
        else:
            plus = "+" if ov.startswith("+") else ""
            out[key] = f"{plus}{key}={format_value(vals.value(key))}"
    for key, value in forced.items():
        out.pop(key, None)
        out[key] = f"{key}={format_value(value)}"
    return list(out.values())


# --------------------------------------------------------------------------- demand
def gpu_groups(cfg: Any) -> list[int]:
    """verl's GPU demand: one STRICT_PACK group of ``n`` GPU bundles per node-group.

    ``[trainer.n_gpus_per_node] * trainer.nnodes``, plus a separate reward pool when enabled
    (verl ``init_resource_pool_mgr``). Each bundle also takes 3 CPUs.
    """
    from omegaconf import OmegaConf

    return _gpu_groups(lambda key, default: OmegaConf.select(cfg, key, default=default))


def _gpu_groups(select: Callable[[str, Any], Any]) -> list[int]:
    def num(key: str, default: int = 0) -> int:
        v = select(key, default)
        try:
            return int(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={v!r} must be an integer (it sets the job's GPU demand)")

    groups = [num("trainer.n_gpus_per_node", 8)] * num("trainer.nnodes", 1)
    if select("reward.reward_model.enable_resource_pool", False):
        groups += [num("reward.reward_model.n_gpus_per_node")] * num("reward.reward_model.nnodes")
    return [g for g in groups if g > 0]


def config_hash(cfg: Any) -> str:
    """Stable short hash of the composed (unresolved) config."""
    from rayjobs.config import configcache

    return _digest(json.dumps(configcache.raw(cfg), sort_keys=True, default=str))


def _digest(doc: str) -> str:
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- build
def job_env(rj: Any) -> dict[str, str]:
    """``rayjobs.env`` as the job's env vars; a secret-looking or verl-owned name is refused."""
    env = {str(k): str(v) for k, v in (rj.env or {}).items()}
    for name in env:
        if SECRET_PATTERN.search(name):
            raise ConfigError(
                f"rayjobs.env.{name} looks like a secret: a job's env is readable by anyone who can list jobs; "
                f"put it in the cluster's environment instead (bootstrap secrets, see README)"
            )
        if name in VERL_OWNED_ENV:
            raise ConfigError(f"rayjobs.env.{name} is set by verl itself; setting it makes verl's ray.init fail: remove it")
    return env


def base_metadata(c: Composed, ctx: Context) -> JobMeta:
    """The metadata every rayjobs job carries, typed (Ray's ``str -> str`` form is its ``to_ray()``)."""
    from rayjobs.config.derive import canonical_json

    own = values_of(c).read("own_metadata", ("rayjobs",), _own_metadata)
    return JobMeta(rayjobs=__version__, experiment=c.experiment, overrides=tuple(c.overrides), sweep=ctx.sweep or "",
                   sweep_overrides=tuple(ctx.sweep_overrides), git_sha=ctx.git_sha, git_dirty=bool(ctx.git_dirty),
                   config_hash=_digest(canonical_json(c)), submitted_at=ctx.now.isoformat(timespec="milliseconds"),
                   **own)


def _own_metadata(cfg: Any) -> dict[str, Any]:
    """The metadata a job takes from its ``rayjobs`` node (read once for all the points of a sweep that
    share it): JobMeta's fields."""
    rj = cfg.rayjobs
    return {
        "priority": int(rj.priority), "max_retries": int(rj.max_retries), "kind": str(rj.kind),
        "user": str(rj.user or _submitter(rj)), "preemptible": bool(rj.preemptible),
        "preempt_wait_s": float(rj.preempt_wait_s),
        # the ids as typed (a sweep id stands for its points): the queue resolves them when it queues
        "after": tuple(after_ids(rj.after)),
        "halving": _halving(rj.halving) if str(rj.halving.metric or "") else "",
        # rayjobs.warm=false (issue 50: rayjobs.oncluster.warmth reads it, a key of Ray's metadata only)
        "extra": {} if rj.warm else {"warm": "0"},
    }


def _halving(h: Any) -> str:
    from rayjobs.contract.halving import Halving

    return Halving(str(h.metric), tuple(int(r) for r in h.rungs), str(h.mode), float(h.keep),
                   bool(h.shuffle)).to_json()


def _submitter(rj: Any) -> str:
    """Who submits: the door's user when a team's door login is the target (a member may queue only
    as itself), else the OS user."""
    from rayjobs import settings

    target = settings.resolve_target(str(rj.address) if rj.get("address") else None)
    if target.door:
        from rayjobs.client.door import login_user

        return login_user(target) or _os_user()
    return _os_user()


def _os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's uid)
        return "unknown"


def verl_args(c: Composed, run: str, storage: str) -> tuple[list[str], dict[str, Any]]:
    """A verl job's command-line overrides and run metadata (run name, dirs, GPU groups).

    The user's ``trainer.experiment_name`` / ``default_local_dir`` win (then a resubmission resumes
    that run); otherwise the run is named by rayjobs and checkpoints go under the storage root.
    """
    from omegaconf import OmegaConf

    vals = values_of(c)
    project = str(vals.select("trainer.project_name", "rayjobs"))
    if any(override_key(o) == "trainer.experiment_name" for o in c.overrides):
        run = vals.read("experiment_name", ("trainer.experiment_name",), lambda cfg: str(cfg.trainer.experiment_name), str)
    ckpt = vals.select("trainer.default_local_dir")
    user_dir = any(override_key(o) == "trainer.default_local_dir" for o in c.overrides)
    ckpt = str(ckpt) if user_dir else f"{storage}/checkpoints/{project}/{run}"
    logger = vals.read("logger", ("trainer.logger",),
                       lambda cfg: list(OmegaConf.to_container(cfg.trainer.logger, resolve=True) or []))
    forced: dict[str, Any] = {
        "trainer.experiment_name": run,
        "trainer.default_local_dir": ckpt,
        "trainer.logger": logger + ([] if "file" in logger else ["file"]),
    }
    meta = {"run": run, "run_dir": f"{storage}/runs/{project}/{run}", "checkpoint_dir": ckpt,
            "gpu_groups": tuple(_gpu_groups(vals.select))}
    return verl_overrides(c, forced), meta


def wandb_run(run: str) -> dict[str, str]:
    """One W&B run per job across its attempts, resumes and preemptions: a stable id from the run name
    (verl's tracker passes none), resumed when it exists. A rerun is a new run name, so a new W&B run."""
    import hashlib

    rid = f"{slug(run, 54)}-{hashlib.sha1(run.encode()).hexdigest()[:8]}"  # W&B ids: <= 64, no / : # ? %
    return {"WANDB_RUN_ID": rid, "WANDB_RESUME": "allow"}


def build_spec(c: Composed, ctx: Context) -> JobSpec:
    """The Ray job for one composed point. Pure: same inputs, same spec."""
    vals = values_of(c)
    own = vals.read("own", ("rayjobs",), _own)
    sid = job_id(c.experiment, ctx)
    run = sid
    if ctx.sweep is not None and ctx.sweep_overrides:
        run = f"{ctx.sweep}_{slug(point_label(ctx.sweep_overrides, '-'), 80)}"
    meta = base_metadata(c, ctx)
    if own["kind"] == "verl":
        args, more = verl_args(c, run, own["storage"])
    elif own["kind"] == "command":
        args = own["args"]
        more = {"run": run, "run_dir": f"{own['storage']}/runs/{slug(c.experiment, 40)}/{run}"}
    else:
        raise ConfigError(f"rayjobs.kind={own['kind']!r} is not one of: verl, command")
    meta = meta.with_(**more)
    env = dict(own["env"])
    if own["kind"] == "verl" and "wandb" in str(vals.select("trainer.logger", "")):
        env = {**wandb_run(meta.run), **env}  # the user's own WANDB_RUN_ID wins
    entrypoint = " ".join([RUNNER, own["entrypoint"]] + [shlex.quote(a) for a in args])
    runtime_env: dict[str, Any] = {"working_dir": ctx.working_dir, "excludes": list(own["excludes"])}
    if env:
        runtime_env["env_vars"] = env
    return JobSpec(entrypoint=entrypoint, submission_id=sid, runtime_env=MappingProxyType(runtime_env),
                   metadata=MappingProxyType(meta.to_ray()))


def _own(cfg: Any) -> dict[str, Any]:
    """What a spec takes from the ``rayjobs`` node, checked in build_spec's order (the same for every
    point of a sweep that sweeps no ``rayjobs`` key, so read once)."""
    from omegaconf import OmegaConf

    rj = cfg.rayjobs
    storage = str(rj.storage)
    if not storage.startswith("/"):
        raise ConfigError(f"rayjobs.storage={storage!r} is a relative path; give an absolute path on the cluster's shared storage")
    own = {"storage": storage, "env": job_env(rj), "kind": rj.kind}
    if rj.kind == "command":
        own["args"] = [str(a) for a in OmegaConf.to_container(rj.args, resolve=True)]
    return {**own, "entrypoint": str(rj.entrypoint), "excludes": list(rj.excludes)}

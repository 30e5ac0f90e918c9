"""Preflight: catch on the laptop, in about a second, what would otherwise fail on the GPUs.

Three layers, cheapest first; every failure is one :class:`~rayjobs.preflight.problem.Problem`
line (key, value, rule, fix) and the submit stops with exit 2 before anything reaches the cluster:

1. :mod:`rayjobs.preflight.rules` -- rayjobs' own rules, pure and torch-free, for what verl only
   finds once the GPUs are allocated (rollout backend, estimator, critic for GAE, batch sizes
   against the GPU count, parallel sizes, loggers, path forms).
2. verl's own validation (:mod:`rayjobs.preflight.verlcheck`, run by the warm
   :mod:`rayjobs.preflight.helper` process) when verl imports here; otherwise a one-time note says
   so and layer 1 is the (weaker) check.
3. :mod:`rayjobs.preflight.clusterfiles`, :mod:`rayjobs.preflight.tools` and
   :mod:`rayjobs.preflight.secretnames` -- what the job reads on the cluster: data files and model
   dirs, a reward function for every data_source (when the cluster's storage is visible here: the
   embedded cluster), the multi-turn tool config and its classes (in the working_dir) and the agent
   loop that calls them, secrets by name.

:func:`check_all` runs them over every point of a submission (dry-run included);
:func:`check_cluster` adds what needs the live cluster (:mod:`rayjobs.preflight.livecluster`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Sequence

from rayjobs.errors import ConfigError
from rayjobs.preflight.clusterfiles import runtime_problems
from rayjobs.preflight.keys import get_key, runs_verl_trainer
from rayjobs.preflight.problem import UNSET, VERL_FIX, Problem, note
from rayjobs.preflight.rules import config_problems
from rayjobs.preflight.secretnames import cluster_env_names
from rayjobs.preflight.tools import tool_problems
from rayjobs.config.derive import plain_configs

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard

#: Seconds spent in the last check_all (read by scripts/bench_preflight.py).
last_timing: dict[str, float] = {}


def _enabled(prepared: Sequence[Any]) -> bool:
    from omegaconf import OmegaConf

    return bool(OmegaConf.select(prepared[0].composed.cfg, "rayjobs.preflight", default=True))


def _label(p: Any, i: int) -> str:
    vary = list(p.spec.meta.sweep_overrides)
    return f"sweep point {i}" + (f" ({', '.join(vary)})" if vary else "")


def verl_projection(d: dict) -> str:
    """What verl 0.9.1's validation reads (validate_config, need_critic/need_reference_policy,
    RolloutConfig), as a key: sweep points that differ elsewhere (kl_coef, lr, epochs) share it."""
    alg = d.get("algorithm") or {}
    proj = {"trainer": {k: (d.get("trainer") or {}).get(k) for k in ("n_gpus_per_node", "nnodes")},
            "data": d.get("data"), "actor_rollout_ref": d.get("actor_rollout_ref"), "critic": d.get("critic"),
            "algorithm": {k: alg.get(k) for k in ("adv_estimator", "use_kl_in_reward", "rollout_correction")}}
    return json.dumps(proj, sort_keys=True, default=str)


def check_all(prepared: Sequence[Any]) -> None:
    """Check every point (``Prepared``) before anything is submitted.

    Raises:
        ConfigError: the last problem found (every one is printed first, one line each).
    """
    if not prepared or not _enabled(prepared):
        return
    t0 = time.perf_counter()
    plains = plain_configs([p.composed for p in prepared])
    t_res = time.perf_counter()
    where: dict[str, Any] = {}
    per_point = [_own_problems(p, cfg, where) for p, cfg in zip(prepared, plains)]
    t1 = time.perf_counter()
    distinct = _verl_problems(plains, per_point) if not any(per_point) else 0
    last_timing.clear()
    last_timing.update({"resolve_s": t_res - t0, "own_s": t1 - t_res, "verl_s": time.perf_counter() - t1 if distinct else 0.0,
                        "verl_configs": distinct, "total_s": time.perf_counter() - t0, "points": len(prepared)})
    report(prepared, per_point)


def _own_problems(p: Any, cfg: dict, where: dict[str, Any]) -> list[Problem]:
    """Layers 1 and 3 for one point (rules, then files, reward and secrets when verl's trainer runs).

    ``where``: the target and the secret names of the cluster, found once per check (on first need).
    """
    probs = config_problems(cfg)
    if not (runs_verl_trainer(cfg) and get_key(cfg, "rayjobs.kind", "verl") == "verl"):
        return probs + _prepare_problems(cfg, where)
    if not where:
        from rayjobs import settings

        where["target"] = target = settings.resolve_target(get_key(cfg, "rayjobs.address"))
        where["names"] = _secret_names(target.embedded)
        if not target.embedded:
            note("remote cluster: data files and model dirs on its storage are not visible from here "
                 "(verl checks them on the cluster when the job starts)")
    wd, visible = str(p.spec.runtime_env.get("working_dir", os.getcwd())), where["target"].embedded
    return (probs + runtime_problems(cfg, where["names"] or None, wd, files_visible=visible)
            + tool_problems(cfg, wd, files_visible=visible))


def _prepare_problems(cfg: dict, where: dict[str, Any]) -> list[Problem]:
    """``+exp=prepare_data`` from a path: on the embedded head the job reads it on this machine, so it must be here."""
    source = str(get_key(cfg, "rayjobs.prepare.source", "auto"))
    if "prepare_data" not in str(get_key(cfg, "rayjobs.entrypoint", "")) or source in ("auto", "hub", "sample"):
        return []
    from rayjobs import settings

    target = where.get("target") or settings.resolve_target(get_key(cfg, "rayjobs.address"))
    if not target.embedded or os.path.exists(source):
        return []
    return [Problem("rayjobs.prepare.source", source, "no such file or directory on this machine (the embedded head "
                    "reads it here)", "give a directory with train.*/test.* files or one data file, or "
                    "rayjobs.prepare.source=auto|hub|sample")]


def note_daily(name: str, msg: str) -> None:
    """A note said at most once a day on this machine (a stamp file in the local state dir)."""
    from rayjobs import settings

    stamp = settings.home() / "notes" / name
    try:
        if time.time() - stamp.stat().st_mtime < 86400:
            return
    except OSError:
        pass
    note(msg)
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    except OSError:
        pass


def _verl_problems(plains: list[dict], per_point: list[list[Problem]]) -> int:
    """Layer 2: verl's own validation, once per distinct projection; the number of configs validated."""
    from rayjobs.preflight import helper, verlcheck

    idx = [i for i, d in enumerate(plains) if get_key(d, "rayjobs.kind", "verl") == "verl"]
    if not idx:
        return 0
    keys = [verl_projection(plains[i]) for i in idx]
    first: dict[str, int] = {}
    for i, k in zip(idx, keys):
        first.setdefault(k, i)
    configs = [{k: v for k, v in plains[i].items() if k != "rayjobs"} for i in first.values()]
    results, why = helper.validate(configs)
    if results is None:
        note_daily("verl-validation", f"verl's own validation skipped here ({why}; verl checks again before the "
                   f"GPUs); for it: {verlcheck.INSTALL_HINT}")
        return len(first)
    by_key = dict(zip(first.keys(), results))
    for i, k in zip(idx, keys):
        per_point[i] += [Problem(r["key"], UNSET, r["rule"], VERL_FIX) for r in by_key[k]]
    return len(first)


def _secret_names(embedded: bool) -> set[str]:
    """Names of the cluster's environment, from local knowledge only (dry-run checks them too);
    an empty set when unknown, with a note."""
    names = cluster_env_names(embedded)
    if names is None:
        note("the cluster record lists no secret names: secrets (e.g. WANDB_API_KEY) are not checked")
        return set()
    return names


def report(prepared: Sequence[Any], per_point: list[list[Problem]]) -> None:
    """Print every problem as one line; raise ConfigError with the last (exit 2, nothing submitted)."""
    seen: dict[str, list[int]] = {}
    for i, probs in enumerate(per_point):
        for pr in probs:
            seen.setdefault(pr.line(), []).append(i)
    if not seen:
        return
    n = len(prepared)
    lines = []
    for ln, pts in seen.items():
        if n == 1:
            lines.append(ln)
        elif len(pts) == n:
            lines.append(f"every sweep point: {ln}")
        else:
            more = f" (and {len(pts) - 1} more points)" if len(pts) > 1 else ""
            lines.append(f"{_label(prepared[pts[0]], pts[0])}{more}: {ln}")
    for ln in lines[:-1]:
        print(f"error: {ln}", file=sys.stderr)
    raise ConfigError(lines[-1])




def check_cluster(d: "Dashboard", prepared: Sequence[Any]) -> None:
    """What needs the live cluster, on a real submit: Ray/verl versions (unless
    ``rayjobs.preflight=false``), per-node GPU fit (always).

    Raises:
        ConfigError: a version that does not match, or a job that can never fit (nothing submitted).
    """
    if not prepared:
        return
    from rayjobs.preflight import livecluster

    if _enabled(prepared):
        problems = livecluster.version_problems(d)
        report(prepared, [list(problems) for _ in prepared])
    # Not a preflight option: a job that can never fit would wait in the queue forever.
    livecluster.check_fit(d, prepared)

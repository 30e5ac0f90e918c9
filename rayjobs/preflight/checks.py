"""Preflight: catch on the laptop, in about a second, what would otherwise fail on the GPUs.

Three layers, cheapest first; every failure is one :class:`rayjobs.preflight.rules.Problem` line (key,
value, rule, fix) and the submit stops with exit 2 before anything reaches the cluster:

1. :mod:`rayjobs.preflight.rules` -- rayjobs' own rules, pure and torch-free, for what verl only finds once
   the GPUs are allocated (rollout backend, estimator, critic for GAE, batch sizes against the GPU
   count, parallel sizes, loggers, path forms), with the pinned verl's facts read from its source.
2. verl's own validation (:mod:`rayjobs.preflight.verlcheck`, a warm helper process) when verl imports
   here; otherwise a one-time note says so and layer 1 is the (weaker) check.
3. :mod:`rayjobs.preflight.clusterfiles` -- what needs the cluster's files and environment (data files and model
   dirs present, a reward function for every data_source, secrets by name). Run here when the
   cluster's storage is local (the embedded cluster); for a remote cluster, on the cluster.

This module runs them over every point of a submission (:func:`check_all`, resolving the points
with :mod:`rayjobs.submit.configcache`) and reports. :func:`check_cluster` (called from ``submit.send``, the only
place with a live client) adds the Ray/verl version match and the per-node fit of the GPU groups.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from typing import Any, Iterable, Optional, Sequence

from rayjobs.errors import ConfigError
from rayjobs.preflight.clusterfiles import cluster_env_names, runtime_problems
from rayjobs.submit.configcache import resolve_points
from rayjobs.preflight.rules import (CPUS_PER_GPU, UNSET, VERL_FIX, Problem, config_problems, get_key, note, runs_verl_trainer,
                           verl_facts)

#: Seconds spent in the last check_all (read by scripts/bench_preflight.py).
last_timing: dict[str, float] = {}

# =========================================================================== orchestration
def _enabled(prepared: Sequence[Any]) -> bool:
    from omegaconf import OmegaConf

    return bool(OmegaConf.select(prepared[0].composed.cfg, "rayjobs.preflight", default=True))


def _label(p: Any, i: int) -> str:
    try:
        vary = json.loads(p.spec.metadata.get("sweep_overrides", "[]"))
    except (ValueError, AttributeError):
        vary = []
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
    """Check every point (``submit.Prepared``) before anything is submitted; raise ConfigError."""
    if not prepared or not _enabled(prepared):
        return
    from rayjobs import settings
    from rayjobs.preflight import verlcheck
    from rayjobs.preflight import helper

    t0 = time.perf_counter()
    plains = resolve_points([p.composed.cfg for p in prepared])
    t_res = time.perf_counter()
    target = settings.resolve_target(get_key(plains[0], "rayjobs.address"))
    per_point: list[list[Problem]] = []
    names: Optional[set[str]] = None
    for p, cfg in zip(prepared, plains):
        probs = config_problems(cfg)
        if runs_verl_trainer(cfg) and get_key(cfg, "rayjobs.kind", "verl") == "verl":
            if not target.embedded:
                note("remote cluster: data files and model dirs on its storage are not visible from here "
                     "(verl checks them on the cluster when the job starts)")
            if names is None:
                names = _secret_names(target.embedded)
            probs += runtime_problems(cfg, names or None, str(p.spec.runtime_env.get("working_dir", os.getcwd())),
                                      files_visible=target.embedded)
        per_point.append(probs)
    t1 = time.perf_counter()
    verl_s, distinct = 0.0, 0
    idx = [i for i, d in enumerate(plains) if get_key(d, "rayjobs.kind", "verl") == "verl"]
    if idx and not any(per_point):
        keys = [verl_projection(plains[i]) for i in idx]
        first = {}
        for i, k in zip(idx, keys):
            first.setdefault(k, i)
        distinct = len(first)
        configs = []
        for i in first.values():
            d = dict(plains[i])
            d.pop("rayjobs", None)
            configs.append(d)
        results, why = helper.validate(configs)
        if results is None:
            note(f"verl's own validation did not run ({why}); only rayjobs' own checks ran (batch sizes, micro-batches, "
                 f"rollout backend, estimator, critic, paths, reward), and verl validates again in the job's "
                 f"driver before it allocates GPUs. To run it here: {verlcheck.INSTALL_HINT}")
        else:
            by_key = dict(zip(first.keys(), results))
            for i, k in zip(idx, keys):
                per_point[i] += [Problem(r["key"], UNSET, r["rule"], VERL_FIX) for r in by_key[k]]
        verl_s = time.perf_counter() - t1
    last_timing.clear()
    last_timing.update({"resolve_s": t_res - t0, "own_s": t1 - t_res, "verl_s": verl_s, "verl_configs": distinct,
                        "total_s": time.perf_counter() - t0, "points": len(prepared)})
    report(prepared, per_point)


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


# =========================================================================== with the live cluster
def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def fits(groups: Sequence[int], nodes: Iterable[dict]) -> bool:
    """Can these GPU groups be placed, each group on one node (STRICT_PACK), with 3 CPUs per GPU?

    Best fit, largest group first. (Same rule as the queue's admission; the queue's
    ``rayjobs.oncluster.capacity`` can replace this function one for one.)
    """
    free = [{"GPU": float(n.get("GPU", 0)), "CPU": float(n.get("CPU", 0))} for n in nodes]
    for g in sorted(groups, reverse=True):
        cands = [n for n in free if n["GPU"] >= g and n["CPU"] >= CPUS_PER_GPU * g]
        if not cands:
            return False
        best = min(cands, key=lambda n: (n["GPU"] - g, n["CPU"] - CPUS_PER_GPU * g))
        best["GPU"] -= g
        best["CPU"] -= CPUS_PER_GPU * g
    return True


def cluster_nodes(client: Any) -> Optional[list[dict]]:
    """Per alive node: total and free GPU/CPU, from the dashboard's cluster status."""
    try:
        r = client._do_request("GET", "/api/cluster_status?format=0")
        by_node = r.json()["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"]
    except Exception:
        return None
    out = []
    for usage in by_node.values():
        gu, gt = usage.get("GPU", [0.0, 0.0])
        cu, ct = usage.get("CPU", [0.0, 0.0])
        out.append({"total": {"GPU": gt, "CPU": ct}, "free": {"GPU": gt - gu, "CPU": ct - cu}})
    return out


def check_cluster(client: Any, prepared: Sequence[Any], target: Any = None) -> None:
    """Checks that need the live cluster: Ray/verl versions, per-node fit. Raises ConfigError."""
    if not prepared or not _enabled(prepared):
        return
    from importlib.metadata import version

    from rayjobs import settings
    from rayjobs.client import dashboard

    problems: list[Problem] = []
    cluster_ray = str(dashboard.dashboard_version(client).get("ray_version") or "")
    mine = version("ray")
    if cluster_ray:
        a, b = _version_tuple(mine), _version_tuple(cluster_ray)
        if a[:1] != b[:1] or b < (2, 52):
            problems.append(Problem("ray", cluster_ray, f"the cluster runs Ray {cluster_ray}, this client Ray {mine}; rayjobs "
                                                        f"needs the same major version and >= 2.52 (token auth)",
                                    f"pip install 'ray[default]=={cluster_ray}' here, or upgrade the cluster image"))
        elif a[:2] != b[:2]:
            note(f"the cluster runs Ray {cluster_ray}, this client Ray {mine} (minor versions differ; usually fine)")
    embedded = target is None or getattr(target, "embedded", False) or getattr(target, "source", "") == "embedded"
    if not embedded:
        rec = settings.remembered_cluster()
        theirs = str(rec.get("verl") or rec.get("verl_version") or (rec.get("versions") or {}).get("verl") or "")
        ours = verl_facts()["version"]
        if theirs and _version_tuple(theirs)[:2] != _version_tuple(ours)[:2]:
            problems.append(Problem("verl", theirs, f"the cluster runs verl {theirs} but the config was composed and checked "
                                                    f"against verl {ours} here (their config keys differ)",
                                    f"pip install --no-deps verl=={theirs} here (or rebuild the cluster image with {ours})"))
        elif not theirs:
            note("the cluster record has no verl version: the client/cluster verl match is not checked")
    per_point = [list(problems) for _ in prepared]
    fit = _fit_problems(client, prepared)
    for i, pr in fit:
        per_point[i].append(pr)
    report(prepared, per_point)


def _verdict(groups: list[int], nodes: list[dict]) -> tuple[str, str]:
    """("fits" | "wait" | "never", reason), from the queue's ``rayjobs.oncluster.capacity`` when present."""
    try:
        from rayjobs.oncluster import capacity
    except ImportError:
        capacity = None
    if capacity is not None:
        cn = capacity.nodes_from_ray({str(i): n["total"] for i, n in enumerate(nodes)},
                                     {str(i): n["free"] for i, n in enumerate(nodes)})
        v = capacity.fit(groups, cn)
        return v.state, v.reason
    shape = ", ".join(f"{n['total']['GPU']:g} GPU + {n['total']['CPU']:g} CPU" for n in nodes)
    if not fits(groups, [n["total"] for n in nodes]):
        return "never", f"needs GPU groups {groups} (each on one node, {CPUS_PER_GPU} CPUs per GPU); the cluster: {shape}"
    if not fits(groups, [n["free"] for n in nodes]):
        free = ", ".join(f"{n['free']['GPU']:g} GPU + {n['free']['CPU']:g} CPU" for n in nodes)
        return "wait", f"needs GPU groups {groups}; free now: {free}"
    return "fits", ""


def _fit_problems(client: Any, prepared: Sequence[Any]) -> list[tuple[int, Problem]]:
    demands = []
    for p in prepared:
        try:
            demands.append([int(g) for g in json.loads(p.spec.metadata.get("gpu_groups", "[]")) if int(g) > 0])
        except ValueError:
            demands.append([])
    if not any(demands):
        return []
    nodes = cluster_nodes(client)
    if nodes is None:
        note("could not read the cluster's nodes: per-node fit not checked")
        return []
    if sum(n["total"]["GPU"] for n in nodes) == 0:  # a CPU-only dev/test cluster (the queue's check says so)
        if importlib.util.find_spec("rayjobs.oncluster.capacity") is None:
            note("the cluster declares no GPUs (a CPU-only dev/test cluster): GPU fit not checked")
        return []
    out: list[tuple[int, Problem]] = []
    waiting = []
    for i, (p, groups) in enumerate(zip(prepared, demands)):
        if not groups:
            continue
        state, reason = _verdict(groups, nodes)
        # "Can never fit" is refused by the queue's check in submit.send, from the state API's node
        # list; /api/cluster_status, read here, lags a node that just joined by seconds, so it
        # only informs the "waits in the queue" note and never refuses a job.
        if state == "wait":
            waiting.append(reason)
    if waiting and not out:
        note(f"{len(waiting)} of {len(prepared)} job(s) do not fit the free capacity now and wait in the queue "
             f"(first: {waiting[0]})")
    return out

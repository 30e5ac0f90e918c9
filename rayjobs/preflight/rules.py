"""rayjobs' own rules on a composed verl config: pure, torch-free, no I/O beyond verl's source files.

What verl only finds once the GPUs are allocated (rollout backend, advantage estimator, critic for
GAE, batch sizes against the GPU count, parallel sizes, loggers, path forms), checked on the
laptop against the pinned verl's facts (:mod:`rayjobs.preflight.verlfacts`). Every failure is one
:class:`~rayjobs.preflight.problem.Problem` line (key, value, rule, fix). Layer 1 of
:mod:`rayjobs.preflight.checks`.
"""

from __future__ import annotations

import math
from typing import Any

from rayjobs.errors import closest
from rayjobs.preflight.keys import as_list, get_key, int_key, model_keys, need_critic, need_reference_policy, path_kind
from rayjobs.preflight.problem import Problem
from rayjobs.preflight.verlfacts import verl_facts
from rayjobs.config.configcache import plain


def config_problems(cfg: Any) -> list[Problem]:
    """rayjobs' own rules on one composed verl config (pure, no I/O, no torch)."""
    cfg = plain(cfg)
    if get_key(cfg, "rayjobs.kind", "verl") != "verl":
        return []
    out: list[Problem] = []
    for check in (_topology, _rollout, _algorithm, _batch_sizes, _parallel, _ray_kwargs, _loggers, _path_forms):
        out += check(cfg)
    return out


def _topology(cfg: Any) -> list[Problem]:
    out = []
    for key in ("trainer.nnodes", "trainer.n_gpus_per_node"):
        v = int_key(cfg, key)
        if v is None or v < 1:
            out.append(Problem(key, get_key(cfg, key), "must be an integer >= 1 (verl asks for [n_gpus_per_node] * nnodes GPUs)",
                               f"set {key} to the per-node GPU groups the job needs, e.g. {key}=1"))
    return out


def _rollout(cfg: Any) -> list[Problem]:
    facts = verl_facts()
    key = "actor_rollout_ref.rollout.name"
    name = get_key(cfg, key)
    out = []
    if name in (None, "???", ""):
        out.append(Problem(key, name, f"verl {facts['version']} has no default rollout backend",
                           f"set {key}=vllm (or one of {', '.join(facts['rollout'])})"))
    elif name not in facts["rollout"]:
        extra = " (the hf rollout was removed in verl 0.6)" if name == "hf" else ""
        best = closest(str(name), facts["rollout"], 1)
        out.append(Problem(key, name, f"is not a rollout backend of verl {facts['version']}{extra}; its workers would "
                                      f"fail after the GPUs are allocated",
                           f"use one of {', '.join(facts['rollout'])}" + (f" (did you mean {best[0]}?)" if best else "")))
    mode = get_key(cfg, "actor_rollout_ref.rollout.mode")
    if mode == "sync":
        out.append(Problem("actor_rollout_ref.rollout.mode", mode, "sync rollout was removed from verl (only async remains)",
                           "remove the override or set actor_rollout_ref.rollout.mode=async"))
    return out


def _algorithm(cfg: Any) -> list[Problem]:
    facts = verl_facts()
    out = []
    adv = get_key(cfg, "algorithm.adv_estimator")
    if adv not in facts["estimators"]:
        best = closest(str(adv), facts["estimators"], 1)
        out.append(Problem("algorithm.adv_estimator", adv, f"is not an advantage estimator registered in verl "
                                                           f"{facts['version']}; it fails at the first training step",
                           f"use one of {', '.join(facts['estimators'])}" + (f" (did you mean {best[0]}?)" if best else "")))
    if need_critic(cfg):
        path = get_key(cfg, "critic.model.path")
        why = "GAE needs a critic" if get_key(cfg, "critic.enable") is None else "critic.enable=true"
        if path in (None, "", "???"):
            out.append(Problem("critic.model.path", path, f"{why}, and the critic has no model",
                               "set critic.model.path (usually the actor's model, e.g. the same hub id)"))
        elif str(path) == "~/models/deepseek-llm-7b-chat":
            out.append(Problem("critic.model.path", path, f"{why}, and this is verl's placeholder default (a path that "
                                                          f"exists on no cluster)",
                               "set critic.model.path to the critic's model (hub id or absolute path)"))
    return out


def _one_of(cfg: Any, section: str, a: str, b: str) -> list[Problem]:
    va, vb = get_key(cfg, f"{section}.{a}"), get_key(cfg, f"{section}.{b}")
    if va is None and vb is None:
        return [Problem(f"{section}.{b}", None, f"neither {a} nor {b} is set (exactly one must be, unless use_dynamic_bsz)",
                        f"set {section}.{b}=<micro batch per GPU, e.g. 4>")]
    if va is not None and vb is not None:
        return [Problem(f"{section}.{a}", va, f"is set together with {b}={vb} (exactly one may be; {a} is deprecated)",
                        f"remove the {section}.{a} override (keep {b})")]
    if vb is not None and (not isinstance(vb, int) or vb < 1):
        return [Problem(f"{section}.{b}", vb, "must be an integer >= 1", f"set {section}.{b}=1 or more")]
    return []


def _batch_sizes(cfg: Any) -> list[Problem]:
    nn, gp = int_key(cfg, "trainer.nnodes"), int_key(cfg, "trainer.n_gpus_per_node")
    tbs, rn = int_key(cfg, "data.train_batch_size"), int_key(cfg, "actor_rollout_ref.rollout.n")
    out: list[Problem] = []
    if tbs is None or tbs < 1:
        return [Problem("data.train_batch_size", get_key(cfg, "data.train_batch_size"), "must be an integer >= 1", "set data.train_batch_size")]
    if rn is None or rn < 1:
        return [Problem("actor_rollout_ref.rollout.n", get_key(cfg, "actor_rollout_ref.rollout.n"), "must be an integer >= 1",
                        "set actor_rollout_ref.rollout.n (responses per prompt; >1 for GRPO)")]
    if not nn or not gp or nn < 1 or gp < 1:
        return out  # reported by _topology
    n_gpus = nn * gp
    a = "actor_rollout_ref.actor"
    dyn = bool(get_key(cfg, f"{a}.use_dynamic_bsz", False))
    strategy = str(get_key(cfg, f"{a}.strategy", "fsdp"))
    if not dyn:
        if strategy != "megatron" and tbs * rn % n_gpus:
            step = n_gpus // math.gcd(n_gpus, rn)
            good = sorted({max(step, tbs // step * step), (tbs // step + 1) * step})
            out.append(Problem("data.train_batch_size", tbs,
                               f"train_batch_size x rollout.n = {tbs} x {rn} = {tbs * rn} is not divisible by the GPU count "
                               f"trainer.nnodes x n_gpus_per_node = {nn} x {gp} = {n_gpus}",
                               f"use a multiple of {step} (e.g. data.train_batch_size={' or '.join(map(str, good))}) or change the GPU count"))
        out += _one_of(cfg, a, "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")
        out += _one_of(cfg, "actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")
        if need_reference_policy(cfg):
            out += _one_of(cfg, "actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")
        out += _mini(cfg, a, tbs, rn, n_gpus, strategy)
    if need_critic(cfg) and not bool(get_key(cfg, "critic.use_dynamic_bsz", dyn)):
        out += _one_of(cfg, "critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")
        out += _mini(cfg, "critic", tbs, rn, n_gpus, str(get_key(cfg, "critic.strategy", "fsdp")))
    return out


def _mini(cfg: Any, section: str, tbs: int, rn: int, n_gpus: int, strategy: str) -> list[Problem]:
    key = f"{section}.ppo_mini_batch_size"
    mini = int_key(cfg, key)
    if mini is None or mini < 1:
        return [Problem(key, get_key(cfg, key), "must be an integer >= 1", f"set {key}")]
    if tbs < mini:
        return [Problem(key, mini, f"is larger than data.train_batch_size={tbs} (a step must hold at least one mini-batch)",
                        f"set {key} <= {tbs}, or raise data.train_batch_size")]
    if strategy in ("fsdp", "fsdp2"):
        sp = max(int_key(cfg, f"{section}.ulysses_sequence_parallel_size", 1) or 1,
                 int_key(cfg, f"{section}.fsdp_config.ulysses_sequence_parallel_size", 1) or 1)
        if n_gpus % sp:
            return [Problem(f"{section}.ulysses_sequence_parallel_size", sp, f"does not divide the GPU count {n_gpus}",
                            "use a sequence-parallel size that divides nnodes x n_gpus_per_node")]
        dp = n_gpus // sp
        if mini * rn % dp:
            step = dp // math.gcd(dp, rn)
            return [Problem(key, mini, f"ppo_mini_batch_size x rollout.n = {mini} x {rn} = {mini * rn} is not divisible by the "
                                       f"data-parallel size {dp} (GPUs / sequence parallel); verl's workers assert this at "
                                       f"the first update, on the GPUs",
                            f"use a multiple of {step} for {key}")]
    return []


def _parallel(cfg: Any) -> list[Problem]:
    nn, gp = int_key(cfg, "trainer.nnodes"), int_key(cfg, "trainer.n_gpus_per_node")
    key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    tp = int_key(cfg, key, 1)
    if not nn or not gp or tp is None:
        return []
    n = nn * gp
    if tp < 1 or n % tp or tp > n:
        return [Problem(key, tp, f"rollout replicas of {tp} GPUs do not tile the job's {n} GPUs (nnodes x n_gpus_per_node)",
                        f"use a tensor parallel size that divides {n}")]
    return []


def _ray_kwargs(cfg: Any) -> list[Problem]:
    out = []
    for k in ("num_cpus", "num_gpus"):
        key = f"ray_kwargs.ray_init.{k}"
        v = get_key(cfg, key)
        if v is not None:
            out.append(Problem(key, v, "a Ray job connects to the running cluster, where ray.init refuses num_cpus/num_gpus "
                                       "(ValueError at start)", f"remove the override (leave {key}=null)"))
    return out


def _loggers(cfg: Any) -> list[Problem]:
    facts = verl_facts()
    out = []
    for name in as_list(get_key(cfg, "trainer.logger")):
        if name not in facts["loggers"]:
            best = closest(name, facts["loggers"], 1)
            out.append(Problem("trainer.logger", get_key(cfg, "trainer.logger"),
                               f"{name!r} is not a logger backend of verl {facts['version']} (it fails when training starts)",
                               f"use some of {', '.join(facts['loggers'])}" + (f" (did you mean {best[0]}?)" if best else "")))
    return out


def _path_forms(cfg: Any) -> list[Problem]:
    out = []
    for key in ("data.train_files", "data.val_files"):
        for f in as_list(get_key(cfg, key)):
            kind = path_kind(f)
            if kind in ("home", "relative", "hub"):
                out.append(Problem(key, f, "data files must be absolute paths on the cluster's shared storage (verl reads them "
                                           "from whichever node runs its TaskRunner; ~ and relative paths resolve per node)",
                                   f"use an absolute path, e.g. {key}=${{rayjobs.storage}}/data/<name>/train.parquet"))
    for key in model_keys(cfg):
        v = get_key(cfg, key)
        if v in (None, "???") or "critic" in key and str(v) == "~/models/deepseek-llm-7b-chat":
            continue
        if path_kind(str(v)) in ("home", "relative"):
            out.append(Problem(key, v, "a model must be a hub id (org/name), an absolute path on shared storage, or hdfs:// "
                                       "(~ is not expanded by verl; relative paths resolve per node)",
                               f"use an absolute path or a hub id for {key}"))
    return out

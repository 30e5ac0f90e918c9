"""Preflight: catch on the laptop, in about a second, what would otherwise fail on the GPUs.

Three layers, cheapest first; every failure is one :class:`Problem` line (key, value, rule, fix)
and the submit stops with exit 2 before anything reaches the cluster:

1. :func:`config_problems` -- rayjobs' own rules, pure and torch-free, for what verl only finds
   once the GPUs are allocated (rollout backend, advantage estimator, critic for GAE, batch sizes
   against the GPU count, parallel sizes, loggers, path forms). The pinned verl's facts (rollout
   registry, estimators, loggers, reward data sources) are read from its installed *source files*,
   never by importing it.
2. verl's own validation (:mod:`rayjobs.preflight_verl`, a warm helper process) when verl imports
   here; otherwise a one-time note says so and layer 1 is the (weaker) check.
3. :func:`runtime_problems` -- what needs the cluster's files and environment (data files and
   model dirs present, a reward function for every data_source, secrets by name). Run here when
   the cluster's storage is local (the embedded cluster); for a remote cluster, on the cluster.

:func:`check_cluster` (called from ``submit.send``, the only place with a live client) adds the
Ray/verl version match and the per-node fit of the job's GPU groups.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from rayjobs.errors import ConfigError, closest

VERL_FIX = "change the key(s) verl names (or skip every check with rayjobs.preflight=false)"
_UNSET = object()
#: Secrets a logger backend needs in the cluster's environment, unless disabled by a mode variable.
LOGGER_SECRETS = {"wandb": ("WANDB_API_KEY", "WANDB_MODE", ("offline", "disabled", "dryrun")),
                  "swanlab": ("SWANLAB_API_KEY", "SWANLAB_MODE", ("offline", "local", "disabled"))}
CPUS_PER_GPU = 3  #: verl's bundle is {"GPU": 1, "CPU": 3} (max_colocate_count)
_NOTES: set[str] = set()
#: Seconds spent in the last check_all (read by scripts/bench_preflight.py).
last_timing: dict[str, float] = {}


@dataclass(frozen=True)
class Problem:
    """One failed rule: ``key=value: rule; fix: fix``."""

    key: str
    value: Any
    rule: str
    fix: str

    def line(self) -> str:
        shown = "" if self.value is _UNSET or self.value is None and self.key.startswith("(") else f"={_show(self.value)}"
        return f"{self.key}{shown}: {self.rule}; fix: {self.fix}"


def _show(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    return json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v)


def note(msg: str) -> None:
    """Print a preflight note once per process."""
    if msg not in _NOTES:
        _NOTES.add(msg)
        print(f"rayjobs: preflight: {msg}", file=sys.stderr)


# =========================================================================== verl facts (source, no import)
def _verl_root() -> Optional[Path]:
    try:
        from rayjobs.compose import verl_config_dir

        return verl_config_dir().parent.parent
    except Exception:
        return None


def _read(rel: str) -> str:
    root = _verl_root()
    try:
        return (root / rel).read_text() if root else ""
    except OSError:
        return ""


@functools.lru_cache(maxsize=1)
def verl_facts() -> dict[str, Any]:
    """Names the pinned verl accepts, parsed from its source (fallback: verl 0.9.1's values)."""
    base = _read("workers/rollout/base.py")
    backends = sorted(set(re.findall(r'\(\s*"(\w+)"\s*,\s*"async"\s*\)\s*:', base))) or ["sglang", "trtllm", "vllm"]
    algos = _read("trainer/ppo/core_algos.py")
    enum = dict((k, v) for k, v in re.findall(r'^\s+([A-Z_]+)\s*=\s*"([\w-]+)"', algos.split("ADV_ESTIMATOR_REGISTRY")[0], re.M))
    est = {enum.get(a, a) if a else b for a, b in re.findall(r'@register_adv_est\(\s*(?:AdvantageEstimator\.(\w+)|"([\w-]+)")', algos)}
    est = sorted(est) or ["gae", "gdpo", "gpg", "grpo", "grpo_passk", "grpo_vectorized", "opo", "optimal_token_baseline",
                          "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "rloo_vectorized",
                          "tir_optimal_token_baseline"]
    m = re.search(r"supported_backend\s*=\s*\[(.*?)\]", _read("utils/tracking.py"), re.S)
    loggers = re.findall(r'"(\w+)"', m.group(1)) if m else ["wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard",
                                                             "console", "clearml", "trackio", "file", "rl_insight"]
    exact, prefixes = _reward_sources(_read("utils/reward_score/__init__.py"))
    from rayjobs.compose import verl_version

    return {"version": verl_version(), "rollout": backends, "estimators": est, "loggers": loggers,
            "reward_exact": exact, "reward_prefixes": prefixes}


def _reward_sources(src: str) -> tuple[frozenset, tuple]:
    """data_source values ``default_compute_score`` handles: exact names and prefixes (from its AST)."""
    exact: set[str] = set()
    prefixes: list[str] = []
    try:
        tree = ast.parse(src)
        fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "default_compute_score")
        for n in ast.walk(fn):
            if isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and n.left.id == "data_source":
                for op, right in zip(n.ops, n.comparators):
                    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant):
                        exact.add(right.value)
                    elif isinstance(op, ast.In) and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                        exact.update(e.value for e in right.elts if isinstance(e, ast.Constant))
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "startswith"
                  and isinstance(n.func.value, ast.Name) and n.func.value.id == "data_source" and n.args
                  and isinstance(n.args[0], ast.Constant)):
                prefixes.append(n.args[0].value)
    except (SyntaxError, StopIteration):
        pass
    if not exact:
        exact = {"openai/gsm8k", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
                 "math_dapo", "math", "math_dapo_reasoning", "codecontests", "apps", "codeforces", "taco",
                 "hiyouga/geometry3k"}
        prefixes = ["aime"]
    return frozenset(exact), tuple(prefixes)


def reward_known(data_source: str) -> bool:
    f = verl_facts()
    return data_source in f["reward_exact"] or any(data_source.startswith(p) for p in f["reward_prefixes"])


# =========================================================================== config helpers
def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """Value at dotted ``key`` of a resolved plain config (``"???"`` = mandatory and unset)."""
    cur = cfg
    for part in key.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return default
    return cur


def _int(cfg: Any, key: str, default: int = 0) -> Optional[int]:
    v = _get(cfg, key, default)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def need_critic(cfg: Any) -> bool:
    """verl's ``need_critic``: ``critic.enable`` if set, else GAE."""
    enable = _get(cfg, "critic.enable")
    return bool(enable) if enable is not None else _get(cfg, "algorithm.adv_estimator") == "gae"


def need_reference_policy(cfg: Any) -> bool:
    return bool(_get(cfg, "algorithm.use_kl_in_reward", False) or _get(cfg, "actor_rollout_ref.actor.use_kl_loss", False))


def runs_verl_trainer(cfg: Any) -> bool:
    """True when the job's entrypoint is verl's trainer (which reads data/model/reward at run time)."""
    return "verl.trainer.main_ppo" in str(_get(cfg, "rayjobs.entrypoint", "python3 -m verl.trainer.main_ppo"))


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def path_kind(value: str) -> str:
    """``absolute`` | ``url`` (hdfs://, pkg://...) | ``hub`` (org/name) | ``home`` (~) | ``relative``."""
    if value.startswith("/"):
        return "absolute"
    if "://" in value:
        return "url"
    if value.startswith("~"):
        return "home"
    if _HUB_ID.match(value) and not value.startswith((".", "..")):
        return "hub"
    return "relative"


def _as_list(v: Any) -> list[str]:
    if v is None or v == "???":
        return []
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


# =========================================================================== resolving points fast
_REF = re.compile(r"(?<![\w.])(\.*)([A-Za-z_]\w*(?:\.\w+)*)")


def _interp_refs(raw: Any, refs: tuple[set[str], set[str]]) -> tuple[set[str], set[str]]:
    """What the ``${...}`` strings in ``raw`` may read: (absolute dotted names, names in relative refs).

    Over-approximates (resolver names and literal words count as names too): a false hit only
    costs one full resolve.
    """
    if isinstance(raw, dict):
        for v in raw.values():
            _interp_refs(v, refs)
    elif isinstance(raw, list):
        for v in raw:
            _interp_refs(v, refs)
    elif isinstance(raw, str) and "${" in raw:
        for dots, name in _REF.findall(raw):
            if dots:
                refs[1].update(name.split("."))
            else:
                refs[0].add(name)
    return refs


def _read_by_interp(path: tuple, refs: tuple[set[str], set[str]]) -> bool:
    """Might an interpolation read the leaf at ``path`` (itself, a parent or a child of it)?"""
    key = ".".join(str(k) for k in path)
    return (any(r == key or key.startswith(r + ".") or r.startswith(key + ".") for r in refs[0])
            or bool(set(map(str, path)) & refs[1]))


def _leaf_diff(a: Any, b: Any, path: tuple = ()) -> Optional[list[tuple[tuple, Any]]]:
    """Leaves where ``b`` differs from ``a`` (same shape), or None if the shapes differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return None
        out: list[tuple[tuple, Any]] = []
        for k in a:
            d = _leaf_diff(a[k], b[k], path + (k,))
            if d is None:
                return None
            out += d
        return out
    if isinstance(a, dict) or isinstance(b, dict):
        return None
    return [] if a == b else [(path, b)]


_PLAIN: dict[int, tuple[Any, dict]] = {}


def plain(cfg: Any) -> dict:
    """The resolved plain form of a composed config (cached per config object)."""
    if isinstance(cfg, dict):
        return cfg
    hit = _PLAIN.get(id(cfg))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    return resolve_points([cfg])[0]


def resolve_points(cfgs: Sequence[Any]) -> list[dict]:
    """Resolved plain dicts of a sweep's points, resolving the full tree once.

    A point whose unresolved tree differs from the first point's only in leaves that no
    interpolation reads (see :func:`_read_by_interp`) is the first
    point's resolved tree with those leaves replaced; any other point is resolved in full.
    """
    from omegaconf import OmegaConf

    from rayjobs import compose

    out: list[dict] = []
    with compose.memo_interpolations():
        raws = [compose.raw(c) for c in cfgs]
        first = OmegaConf.to_container(cfgs[0], resolve=True, throw_on_missing=False)
        refs = _interp_refs(raws[0], (set(), set()))
        for c, raw in zip(cfgs, raws):
            diff = _leaf_diff(raws[0], raw) if out else []
            if diff is None or any(isinstance(v, (str, list)) and "${" in json.dumps(v, default=str) or _read_by_interp(p, refs)
                                   for p, v in diff):
                d = OmegaConf.to_container(c, resolve=True, throw_on_missing=False)
            elif not diff:
                d = first
            else:  # shares all but the changed paths with `first` (plain dicts are read-only here)
                d = compose.with_leaves(first, diff)
            if len(_PLAIN) > 512:
                _PLAIN.clear()
            _PLAIN[id(c)] = (c, d)
            out.append(d)
    return out


# =========================================================================== layer 1: rayjobs' own rules
def config_problems(cfg: Any) -> list[Problem]:
    """rayjobs' own rules on one composed verl config (pure, no I/O, no torch)."""
    cfg = plain(cfg)
    if _get(cfg, "rayjobs.kind", "verl") != "verl":
        return []
    out: list[Problem] = []
    for check in (_topology, _rollout, _algorithm, _batch_sizes, _parallel, _ray_kwargs, _loggers, _path_forms):
        out += check(cfg)
    return out


def _topology(cfg: Any) -> list[Problem]:
    out = []
    for key in ("trainer.nnodes", "trainer.n_gpus_per_node"):
        v = _int(cfg, key)
        if v is None or v < 1:
            out.append(Problem(key, _get(cfg, key), "must be an integer >= 1 (verl asks for [n_gpus_per_node] * nnodes GPUs)",
                               f"set {key} to the per-node GPU groups the job needs, e.g. {key}=1"))
    return out


def _rollout(cfg: Any) -> list[Problem]:
    facts = verl_facts()
    key = "actor_rollout_ref.rollout.name"
    name = _get(cfg, key)
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
    mode = _get(cfg, "actor_rollout_ref.rollout.mode")
    if mode == "sync":
        out.append(Problem("actor_rollout_ref.rollout.mode", mode, "sync rollout was removed from verl (only async remains)",
                           "remove the override or set actor_rollout_ref.rollout.mode=async"))
    return out


def _algorithm(cfg: Any) -> list[Problem]:
    facts = verl_facts()
    out = []
    adv = _get(cfg, "algorithm.adv_estimator")
    if adv not in facts["estimators"]:
        best = closest(str(adv), facts["estimators"], 1)
        out.append(Problem("algorithm.adv_estimator", adv, f"is not an advantage estimator registered in verl "
                                                           f"{facts['version']}; it fails at the first training step",
                           f"use one of {', '.join(facts['estimators'])}" + (f" (did you mean {best[0]}?)" if best else "")))
    if need_critic(cfg):
        path = _get(cfg, "critic.model.path")
        why = "GAE needs a critic" if _get(cfg, "critic.enable") is None else "critic.enable=true"
        if path in (None, "", "???"):
            out.append(Problem("critic.model.path", path, f"{why}, and the critic has no model",
                               "set critic.model.path (usually the actor's model, e.g. the same hub id)"))
        elif str(path) == "~/models/deepseek-llm-7b-chat":
            out.append(Problem("critic.model.path", path, f"{why}, and this is verl's placeholder default (a path that "
                                                          f"exists on no cluster)",
                               "set critic.model.path to the critic's model (hub id or absolute path)"))
    return out


def _one_of(cfg: Any, section: str, a: str, b: str) -> list[Problem]:
    va, vb = _get(cfg, f"{section}.{a}"), _get(cfg, f"{section}.{b}")
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
    nn, gp = _int(cfg, "trainer.nnodes"), _int(cfg, "trainer.n_gpus_per_node")
    tbs, rn = _int(cfg, "data.train_batch_size"), _int(cfg, "actor_rollout_ref.rollout.n")
    out: list[Problem] = []
    if tbs is None or tbs < 1:
        return [Problem("data.train_batch_size", _get(cfg, "data.train_batch_size"), "must be an integer >= 1", "set data.train_batch_size")]
    if rn is None or rn < 1:
        return [Problem("actor_rollout_ref.rollout.n", _get(cfg, "actor_rollout_ref.rollout.n"), "must be an integer >= 1",
                        "set actor_rollout_ref.rollout.n (responses per prompt; >1 for GRPO)")]
    if not nn or not gp or nn < 1 or gp < 1:
        return out  # reported by _topology
    n_gpus = nn * gp
    a = "actor_rollout_ref.actor"
    dyn = bool(_get(cfg, f"{a}.use_dynamic_bsz", False))
    strategy = str(_get(cfg, f"{a}.strategy", "fsdp"))
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
    if need_critic(cfg) and not bool(_get(cfg, "critic.use_dynamic_bsz", dyn)):
        out += _one_of(cfg, "critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")
        out += _mini(cfg, "critic", tbs, rn, n_gpus, str(_get(cfg, "critic.strategy", "fsdp")))
    return out


def _mini(cfg: Any, section: str, tbs: int, rn: int, n_gpus: int, strategy: str) -> list[Problem]:
    key = f"{section}.ppo_mini_batch_size"
    mini = _int(cfg, key)
    if mini is None or mini < 1:
        return [Problem(key, _get(cfg, key), "must be an integer >= 1", f"set {key}")]
    if tbs < mini:
        return [Problem(key, mini, f"is larger than data.train_batch_size={tbs} (a step must hold at least one mini-batch)",
                        f"set {key} <= {tbs}, or raise data.train_batch_size")]
    if strategy in ("fsdp", "fsdp2"):
        sp = max(_int(cfg, f"{section}.ulysses_sequence_parallel_size", 1) or 1,
                 _int(cfg, f"{section}.fsdp_config.ulysses_sequence_parallel_size", 1) or 1)
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
    nn, gp = _int(cfg, "trainer.nnodes"), _int(cfg, "trainer.n_gpus_per_node")
    key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    tp = _int(cfg, key, 1)
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
        v = _get(cfg, key)
        if v is not None:
            out.append(Problem(key, v, "a Ray job connects to the running cluster, where ray.init refuses num_cpus/num_gpus "
                                       "(ValueError at start)", f"remove the override (leave {key}=null)"))
    return out


def _loggers(cfg: Any) -> list[Problem]:
    facts = verl_facts()
    out = []
    for name in _as_list(_get(cfg, "trainer.logger")):
        if name not in facts["loggers"]:
            best = closest(name, facts["loggers"], 1)
            out.append(Problem("trainer.logger", _get(cfg, "trainer.logger"),
                               f"{name!r} is not a logger backend of verl {facts['version']} (it fails when training starts)",
                               f"use some of {', '.join(facts['loggers'])}" + (f" (did you mean {best[0]}?)" if best else "")))
    return out


def model_keys(cfg: Any) -> list[str]:
    keys = ["actor_rollout_ref.model.path", "actor_rollout_ref.model.tokenizer_path"]
    if need_critic(cfg):
        keys += ["critic.model.path", "critic.model.tokenizer_path"]
    return keys


def _path_forms(cfg: Any) -> list[Problem]:
    out = []
    for key in ("data.train_files", "data.val_files"):
        for f in _as_list(_get(cfg, key)):
            kind = path_kind(f)
            if kind in ("home", "relative", "hub"):
                out.append(Problem(key, f, "data files must be absolute paths on the cluster's shared storage (verl reads them "
                                           "from whichever node runs its TaskRunner; ~ and relative paths resolve per node)",
                                   f"use an absolute path, e.g. {key}=${{rayjobs.storage}}/data/<name>/train.parquet"))
    for key in model_keys(cfg):
        v = _get(cfg, key)
        if v in (None, "???") or "critic" in key and str(v) == "~/models/deepseek-llm-7b-chat":
            continue
        if path_kind(str(v)) in ("home", "relative"):
            out.append(Problem(key, v, "a model must be a hub id (org/name), an absolute path on shared storage, or hdfs:// "
                                       "(~ is not expanded by verl; relative paths resolve per node)",
                               f"use an absolute path or a hub id for {key}"))
    return out


# =========================================================================== layer 3: files and environment
def custom_reward(cfg: Any) -> tuple[str, Optional[str], str]:
    """(key, path, function name) of the custom reward function, verl 0.9.1's key first."""
    for base in ("reward.custom_reward_function", "custom_reward_function"):
        path = _get(cfg, f"{base}.path")
        if path:
            return f"{base}.path", str(path), str(_get(cfg, f"{base}.name") or "compute_score")
    return "reward.custom_reward_function.path", None, "compute_score"


def runtime_problems(cfg: Any, env_names: Optional[set[str]], working_dir: str, files_visible: bool = True) -> list[Problem]:
    """Checks against the cluster's files (when visible from here) and environment (names only)."""
    cfg = plain(cfg)
    if _get(cfg, "rayjobs.kind", "verl") != "verl" or not runs_verl_trainer(cfg):
        return []
    out: list[Problem] = []
    data_ok: list[str] = []
    if files_visible:
        for key in ("data.train_files", "data.val_files"):
            for f in _as_list(_get(cfg, key)):
                if path_kind(f) == "absolute":
                    if os.path.isfile(f):
                        data_ok.append(f)
                    else:
                        out.append(Problem(key, f, "no such file on the cluster's storage",
                                           "create it first (python -m rayjobs.submit +exp=prepare_data) or fix the path"))
        for key in model_keys(cfg):
            v = _get(cfg, key)
            if isinstance(v, str) and path_kind(v) == "absolute":
                if not os.path.isdir(v):
                    out.append(Problem(key, v, "no such model directory on the cluster's storage",
                                       "copy the model there or use its hub id"))
                elif not os.path.isfile(os.path.join(v, "config.json")):
                    out.append(Problem(key, v, "the directory has no config.json (not a Hugging Face model dir)",
                                       "point it at the directory that holds config.json and the tokenizer"))
    out += _reward(cfg, working_dir, data_ok, files_visible)
    if env_names is not None:
        out += _secrets(cfg, env_names)
    return out


def _reward(cfg: Any, working_dir: str, data_files: list[str], files_visible: bool) -> list[Problem]:
    key, path, name = custom_reward(cfg)
    if path:
        if path.startswith("pkg://") or "://" in path:
            return []
        full = path if os.path.isabs(path) else os.path.join(working_dir, path)
        if not os.path.isabs(path) or files_visible:
            if not os.path.isfile(full):
                where = "the job's working_dir" if not os.path.isabs(path) else "the cluster's storage"
                return [Problem(key, path, f"no such file in {where} ({full})", "fix the path (relative paths ship with the working_dir)")]
            try:
                tree = ast.parse(Path(full).read_text())
                names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            except (SyntaxError, OSError, ValueError) as e:
                return [Problem(key, path, f"cannot be parsed as Python ({type(e).__name__})", "fix the reward file")]
            if name not in names:
                nkey = key.rsplit(".", 1)[0] + ".name"
                return [Problem(nkey, name, f"{path} defines no function {name!r}" + (f" (it has: {', '.join(sorted(names))})" if names else ""),
                                f"set {nkey} to the reward function's name")]
        return []
    if _get(cfg, "reward.reward_model.enable", False) or _get(cfg, "reward.reward_manager.source", "register") != "register":
        return []  # a reward model or a custom reward manager scores the data
    field = str(_get(cfg, "data.reward_fn_key", "data_source") or "data_source")
    out = []
    for f in data_files:
        sources = _column_values(f, field)
        if sources is None:
            continue
        if sources == ["<missing column>"]:
            out.append(Problem("data.reward_fn_key", field, f"{f} has no {field!r} column, which verl uses to pick the reward "
                                                            f"function", "regenerate the data (prepare_data) or set data.reward_fn_key"))
            continue
        unknown = [s for s in sources if not reward_known(s)]
        if unknown:
            known = sorted(verl_facts()["reward_exact"])
            out.append(Problem("data.train_files" if f in _as_list(_get(cfg, "data.train_files")) else "data.val_files", f,
                               f"rows have {field}={unknown[0]!r}, for which verl {verl_facts()['version']}'s "
                               f"default_compute_score has no reward function (NotImplementedError at the first reward, mid-run)",
                               f"set reward.custom_reward_function.path=<your_reward.py>, or use a known {field} "
                               f"({', '.join(known[:4])}, ...)"))
    return out


def _column_values(path: str, column: str) -> Optional[list[str]]:
    """Distinct values of one column of a parquet file (None: not parquet / pyarrow missing)."""
    if not path.endswith(".parquet"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _column_values_cached(path, column, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _column_values_cached(path: str, column: str, _mtime: int, _size: int) -> Optional[list[str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        note("pyarrow is not installed: the reward-per-data_source check is skipped")
        return None
    try:
        if column not in pq.read_schema(path).names:
            return ["<missing column>"]
        col = pq.read_table(path, columns=[column]).column(column)
        return sorted({str(v) for v in col.unique().to_pylist()})
    except Exception as e:
        note(f"could not read {path}: {type(e).__name__}")
        return None


def _secrets(cfg: Any, env_names: set[str]) -> list[Problem]:
    out = []
    env = {str(k): str(v) for k, v in (_get(cfg, "rayjobs.env") or {}).items()}
    for name in _as_list(_get(cfg, "trainer.logger")):
        if name in LOGGER_SECRETS:
            secret, mode_var, off = LOGGER_SECRETS[name]
            if env.get(mode_var, "").lower() in off or secret in env_names:
                continue
            out.append(Problem("trainer.logger", _get(cfg, "trainer.logger"),
                               f"{name} needs {secret} in the cluster's environment and the cluster has none (verl fails "
                               f"at {name}.init, after the GPUs are up)",
                               f"put {secret} into the cluster's environment (bootstrap secrets), or drop {name}: "
                               f"trainer.logger=[console]"))
    return out


def cluster_env_names(embedded_cluster: bool) -> Optional[set[str]]:
    """Names (never values) of the environment the cluster's jobs get; None if unknown.

    Embedded cluster: read from the head's processes (or, before it starts, this process's
    environment, which it will inherit). Remote cluster: the ``secrets`` list of the cluster record
    that ``rayjobs up``/``connect`` saved (the bootstrap's readiness record lists secret names).
    """
    from rayjobs import settings

    if embedded_cluster:
        try:
            from rayjobs import embedded

            rec = embedded.running()
        except Exception:
            rec = None
        for pid in (rec or {}).get("pids", []):
            try:
                raw = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            return {kv.split(b"=", 1)[0].decode(errors="replace") for kv in raw.split(b"\0") if b"=" in kv}
        return set(os.environ)
    rec = settings.remembered_cluster()
    names = rec.get("secrets", rec.get("secret_names"))
    return set(names) if isinstance(names, list) else None


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
    from rayjobs import preflight_verl, settings

    t0 = time.perf_counter()
    plains = resolve_points([p.composed.cfg for p in prepared])
    t_res = time.perf_counter()
    target = settings.resolve_target(_get(plains[0], "rayjobs.address"))
    per_point: list[list[Problem]] = []
    for p, cfg in zip(prepared, plains):
        probs = config_problems(cfg)
        if runs_verl_trainer(cfg) and _get(cfg, "rayjobs.kind", "verl") == "verl":
            if not target.embedded:
                note("remote cluster: data files and model dirs on its storage are not visible from here "
                     "(verl checks them on the cluster when the job starts)")
            probs += runtime_problems(cfg, None, str(p.spec.runtime_env.get("working_dir", os.getcwd())),
                                      files_visible=target.embedded)
        per_point.append(probs)
    t1 = time.perf_counter()
    verl_s, distinct = 0.0, 0
    idx = [i for i, d in enumerate(plains) if _get(d, "rayjobs.kind", "verl") == "verl"]
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
        results, why = preflight_verl.validate(configs)
        if results is None:
            note(f"verl's own validation did not run ({why}); only rayjobs' own checks ran (batch sizes, micro-batches, "
                 f"rollout backend, estimator, critic, paths, reward), and verl validates again in the job's "
                 f"driver before it allocates GPUs. To run it here: {preflight_verl.INSTALL_HINT}")
        else:
            by_key = dict(zip(first.keys(), results))
            for i, k in zip(idx, keys):
                per_point[i] += [Problem(r["key"], _UNSET, r["rule"], VERL_FIX) for r in by_key[k]]
        verl_s = time.perf_counter() - t1
    last_timing.clear()
    last_timing.update({"resolve_s": t_res - t0, "own_s": t1 - t_res, "verl_s": verl_s, "verl_configs": distinct,
                        "total_s": time.perf_counter() - t0, "points": len(prepared)})
    report(prepared, per_point)


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
    ``rayjobs.capacity`` can replace this function one for one.)
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

    from rayjobs import jobs, settings

    problems: list[Problem] = []
    cluster_ray = str(jobs.dashboard_version(client).get("ray_version") or "")
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
    plains = [plain(p.composed.cfg) for p in prepared]
    verl_points = [i for i, d in enumerate(plains) if runs_verl_trainer(d) and _get(d, "rayjobs.kind", "verl") == "verl"]
    if verl_points:
        names = cluster_env_names(embedded)
        if names is None:
            note("the cluster record lists no secret names: secrets (e.g. WANDB_API_KEY) are not checked")
        else:
            for i in verl_points:
                per_point[i] += _secrets(plains[i], names)
    fit = _fit_problems(client, prepared)
    for i, pr in fit:
        per_point[i].append(pr)
    report(prepared, per_point)


def _verdict(groups: list[int], nodes: list[dict]) -> tuple[str, str]:
    """("fits" | "wait" | "never", reason), from the queue's ``rayjobs.capacity`` when present."""
    try:
        from rayjobs import capacity
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
        if importlib.util.find_spec("rayjobs.capacity") is None:
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

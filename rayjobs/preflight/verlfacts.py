"""Facts about the pinned verl, read from its installed *source files*, never by importing it.

``import verl`` pulls torch, tensordict and transformers (6-16 s); the compose-only laptop install
(``pip install --no-deps verl``) has none of them. The names verl accepts (rollout backends,
advantage estimators, logger backends, the ``data_source`` values its default reward handles, agent
loops and tool-call parsers) are
parsed from the files instead, with verl 0.9.1's values as the fallback.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any, Optional

#: Secrets a logger backend needs in the cluster's environment, unless disabled by a mode variable.
LOGGER_SECRETS = {"wandb": ("WANDB_API_KEY", "WANDB_MODE", ("offline", "disabled", "dryrun")),
                  "swanlab": ("SWANLAB_API_KEY", "SWANLAB_MODE", ("offline", "local", "disabled"))}


def _verl_root() -> Optional[Path]:
    try:
        from rayjobs.config.compose import verl_config_dir

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
    from rayjobs.config.compose import verl_version

    return {"version": verl_version(), "rollout": backends, "estimators": est, "loggers": loggers,
            "reward_exact": exact, "reward_prefixes": prefixes, **_agent_facts()}


def _agent_facts() -> dict[str, list[str]]:
    """The agent loops (``@register("name")``) and tool-call parsers (``@ToolParser.register``) of verl."""
    root = _verl_root()
    loops: set[str] = set()
    for f in sorted((root / "experimental" / "agent_loop").glob("*.py")) if root else []:
        loops.update(re.findall(r'^@register\(\s*"([\w-]+)"', _read(str(f.relative_to(root))), re.M))
    parsers = re.findall(r'^@ToolParser\.register\(\s*"([\w.-]+)"', _read("experimental/agent_loop/tool_parser.py"), re.M)
    return {"agent_loops": sorted(loops) or ["single_turn_agent", "tool_agent"],
            "tool_parsers": sorted(set(parsers)) or ["deepseek_v4", "gemma4", "glm", "gpt-oss", "hermes", "kimi",
                                                     "minimax", "qwen3_coder", "seed"]}


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


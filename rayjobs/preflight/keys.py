"""Reading keys of a resolved plain verl config (dicts and lists), and what they imply.

What verl derives from its config (does it need a critic, a reference policy, which keys name
models, is the entrypoint verl's trainer) is spelled here once for every preflight layer.
"""

from __future__ import annotations

import re
from typing import Any, Optional

def get_key(cfg: Any, key: str, default: Any = None) -> Any:
    """Value at dotted ``key`` of a resolved plain config (``"???"`` = mandatory and unset)."""
    cur = cfg
    for part in key.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return default
    return cur


def int_key(cfg: Any, key: str, default: int = 0) -> Optional[int]:
    v = get_key(cfg, key, default)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def need_critic(cfg: Any) -> bool:
    """verl's ``need_critic``: ``critic.enable`` if set, else GAE."""
    enable = get_key(cfg, "critic.enable")
    return bool(enable) if enable is not None else get_key(cfg, "algorithm.adv_estimator") == "gae"


def need_reference_policy(cfg: Any) -> bool:
    return bool(get_key(cfg, "algorithm.use_kl_in_reward", False) or get_key(cfg, "actor_rollout_ref.actor.use_kl_loss", False))


def runs_verl_trainer(cfg: Any) -> bool:
    """True when the job's entrypoint is verl's trainer (which reads data/model/reward at run time)."""
    return "verl.trainer.main_ppo" in str(get_key(cfg, "rayjobs.entrypoint", "python3 -m verl.trainer.main_ppo"))


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


def as_list(v: Any) -> list[str]:
    if v is None or v == "???":
        return []
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


def model_keys(cfg: Any) -> list[str]:
    keys = ["actor_rollout_ref.model.path", "actor_rollout_ref.model.tokenizer_path"]
    if need_critic(cfg):
        keys += ["critic.model.path", "critic.model.tokenizer_path"]
    return keys


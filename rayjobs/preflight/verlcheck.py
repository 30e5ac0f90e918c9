"""verl's own validation, run where verl imports: in the warm helper process on the client.

``import verl`` pulls in torch, tensordict, transformers and datasets (6-11 s on a 2-core laptop),
far over the one-second budget of a submit. So the client never imports verl itself: the first
submit that needs it starts a warm helper process (:mod:`rayjobs.preflight.helper`) which imports verl
once and runs this module's :class:`Validator` for every later submit (~0.1 s per distinct config).

Per config it runs exactly what verl 0.9.1's ``main()`` runs in the driver before ``ray.init``
(``validate_config`` with ``need_reference_policy``/``need_critic``), plus
``omega_conf_to_dataclass`` of the rollout config, which catches what otherwise only fails in the
rollout workers (``mode=sync``, EP/TP/PP rules). The critic's ``HFModelConfig`` loads the model's
HF config and tokenizer: a local directory that exists here is used as is; a hub id or a path that
only exists on the cluster is replaced by a tiny stub model (config.json + a 64-token tokenizer, no
weights), so the batch-size rules are still checked offline and the model itself is not. On the
cluster, verl runs the same validation itself in the job's driver before it allocates any GPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import warnings
from pathlib import Path
from typing import Optional

#: What ``import verl`` + validation needs beyond rayjobs' own dependencies.
REQUIRED = ("torch", "tensordict", "transformers", "datasets", "codetiming")
#: The pip line that makes verl's validation available on a laptop (CPU torch, ~1.7 GB).
INSTALL_HINT = "pip install torch==2.13.0 -e '.[dev,preflight]'"  #: the README's own line
MODE_ENV = "RAYJOBS_PREFLIGHT_VERL"  #: auto (helper process, default) | inprocess | off


def missing_modules() -> list[str]:
    """The modules verl's validation needs that are not installed here (no import, fast)."""
    return [m for m in REQUIRED if importlib.util.find_spec(m) is None]


def verl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:
        return "none"


# =========================================================================== inside the verl process
def stub_model(root: Path) -> str:
    """A tiny local HF model dir (config.json with one architecture + tokenizer, no weights)."""
    d = root / "stub-model"
    if (d / "config.json").is_file() and (d / "tokenizer.json").is_file():
        return str(d)
    tmp = root / f"stub-model.{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(60)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(tmp)
    Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, architectures=["Qwen2ForTokenClassification"]).save_pretrained(tmp)
    from rayjobs.contract.files import place

    place(tmp, d)  # False: another process made it first
    return str(d) if (d / "config.json").is_file() else str(tmp)


def _short(e: BaseException) -> tuple[str, str]:
    """(full_key or "", first meaningful line) of a verl/Hydra exception."""
    text = str(e)
    key = ""
    m = re.search(r"full_key:\s*(\S+)", text)
    if m:
        key = m.group(1)
    name = type(e).__name__
    inner = re.search(r"\n\s*(\w+(?:Error|Exception))\((.*)\)\s*(?:\n|$)", text, re.S)
    if inner:  # Hydra's InstantiationException wraps verl's own error: show that one
        name, text = inner.group(1), inner.group(2).strip().strip("'\"")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("full_key")]
    msg = lines[0] if lines else name
    return key, f"{name}: {msg}"[:400]


def validate_one(cfg: dict, stub_dir: str) -> list[dict]:
    """verl's checks on one resolved verl config (a plain dict). Returns problems as dicts."""
    from omegaconf import OmegaConf

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    ver = verl_version()
    conf = OmegaConf.create(cfg)
    problems: list[dict] = []
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            use_critic, use_ref = bool(need_critic(conf)), bool(need_reference_policy(conf))
        except Exception as e:  # e.g. adv_estimator missing
            key, msg = _short(e)
            return [{"key": key or "algorithm", "rule": f"verl {ver} need_critic/need_reference_policy failed: {msg}"}]
        if use_critic:
            model = conf.critic.model
            for k in ("path", "tokenizer_path", "hf_config_path"):
                v = model.get(k)
                if v and not os.path.isdir(str(v)):
                    model[k] = stub_dir  # hub id or a path that only exists on the cluster
        try:
            validate_config(conf, use_reference_policy=use_ref, use_critic=use_critic)
        except Exception as e:
            key, msg = _short(e)
            problems.append({"key": key or "(config)", "rule": f"verl {ver} validate_config rejected it: {msg}"})
        try:
            omega_conf_to_dataclass(conf.actor_rollout_ref.rollout)
        except Exception as e:
            key, msg = _short(e)
            problems.append({"key": key or "actor_rollout_ref.rollout",
                             "rule": f"verl {ver} RolloutConfig (checked in the rollout workers, on the GPUs) rejects it: {msg}"})
    return problems


_STUB = ""


def _worker_init(stub: str) -> None:
    global _STUB
    _STUB = stub
    with contextlib.suppress(Exception):  # Linux: die with the helper, even if it is SIGKILLed
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _worker_validate(cfg: dict) -> list[dict]:
    return validate_one(cfg, _STUB)


class Validator:
    """Validates configs with a cache (resubmits repeat), in parallel for sweeps (forked workers)."""

    def __init__(self, root: Path, workers: int = 0):
        import verl  # noqa: F401  (the expensive part, once)
        from verl.trainer.ppo.utils import need_critic  # noqa: F401
        from verl.utils.config import validate_config  # noqa: F401

        self.stub = stub_model(root)
        self.cache: dict[str, list[dict]] = {}
        self.pool = None
        if workers > 1:
            import concurrent.futures
            import multiprocessing

            # forked after the imports: the workers share the imported verl (copy-on-write)
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                initializer=_worker_init, initargs=(self.stub,))

    def __call__(self, cfg: dict) -> list[dict]:
        return self.many([cfg])[0]

    def many(self, cfgs: list[dict]) -> list[list[dict]]:
        keys = [hashlib.sha1(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest() for c in cfgs]
        todo = {k: c for k, c in zip(keys, cfgs) if k not in self.cache}
        if len(self.cache) + len(todo) > 1024:
            self.cache.clear()
        if self.pool is not None and len(todo) >= 3:
            results = list(self.pool.map(_worker_validate, todo.values()))
        else:
            results = [validate_one(c, self.stub) for c in todo.values()]
        self.cache.update(zip(todo.keys(), results))
        return [self.cache[k] for k in keys]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

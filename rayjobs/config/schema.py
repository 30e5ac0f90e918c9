"""rayjobs' own keys (``rayjobs.*``) as a typed structured config, registered with Hydra's ConfigStore.

verl's keys are typed by verl's own YAML tree; rayjobs' keys are typed here, the ecosystem's way: a
dataclass stored as ``rayjobs_schema`` and listed in ``conf/config.yaml``'s defaults before the
values of that file and of the presets. So a wrong type (``rayjobs.priority=high``) or an unknown
key (``rayjobs.prioirty=1``) fails while Hydra composes, in one line, whether preflight is on or
off; :func:`check_values` adds the ranges a type cannot say (retries >= 0, a non-empty entrypoint,
a known kind). The defaults themselves live in ``conf/config.yaml`` (with their comments);
``rayjobs.halving.*`` is :class:`rayjobs.contract.halving.Halving` (the file restates its defaults,
tests/test_halving.py holds them equal).
"""

# No ``from __future__ import annotations`` here: OmegaConf reads these annotations as types.
from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass
from typing import Any, Dict, List, Optional, Union, get_args, get_origin

import re

from rayjobs.contract.halving import MODES, Halving
from rayjobs.errors import ConfigError

#: The name the schema is stored under in Hydra's ConfigStore (``conf/config.yaml`` lists it).
SCHEMA_NAME = "rayjobs_schema"
KINDS = ("verl", "command")
DATASETS = ("gsm8k", "math", "gsm8k_tool")  #: what scripts/prepare_data.py makes
SOURCES = ("auto", "hub", "sample")  #: else a directory or a file


@dataclass
class PrepareConfig:
    """``+exp=prepare_data``: which dataset, from where."""

    dataset: str = "gsm8k"  #: gsm8k | math | gsm8k_tool
    source: str = "auto"  #: auto | hub | sample | a directory | a file


def _halving_config() -> type:
    """``rayjobs.halving.*`` as Hydra types it: :class:`rayjobs.contract.halving.Halving`'s fields and
    defaults (the one definition: what a sweep's points carry and the queue reads), made editable,
    its ``metric`` empty (off) and its ``rungs`` a list.

    Successive halving of a sweep (``rayjobs.halving.metric`` turns it on): at each rung a point
    goes on only in the top ``keep`` of the points there so far; the others stop at a checkpoint.
    """
    own = {f.name: f.default for f in fields(Halving)}
    as_hydra = {"metric": (str, field(default="")), "rungs": (List[int], field(default_factory=list))}
    order = ["metric", "mode", "rungs", *(n for n in own if n not in ("metric", "mode", "rungs"))]  # as resolved before
    cls = make_dataclass("HalvingConfig", [(name, *as_hydra.get(name, (type(own[name]), field(default=own[name]))))
                                           for name in order])
    cls.__module__, cls.__doc__ = __name__, _halving_config.__doc__
    return cls


HalvingConfig = _halving_config()


@dataclass
class ClusterShape:
    """The cluster's shape, for presets that follow it (``grpo_7b``); from ``rayjobs up/connect``."""

    nnodes: int = 1
    gpus_per_node: int = 1


@dataclass
class RayjobsConfig:
    """Every ``rayjobs.*`` key, typed. See ``conf/config.yaml`` for what each does."""

    dry_run: bool = False
    priority: int = 0
    max_retries: int = 0
    preemptible: bool = False
    preempt_wait_s: float = 900.0
    warm: bool = True  #: may its rollout attach to a kept engine, and keep its own (issue 50)
    after: Any = None  #: job/sweep ids: ID, [ID1, ID2] or "ID1,ID2" (normalised by :func:`after_ids`)
    user: str = ""
    evaluate: bool = False  #: the preset expands into one evaluation per job of ``after`` (eval_checkpoint)
    kind: str = "verl"
    entrypoint: str = "python3 -m verl.trainer.main_ppo"
    args: List[str] = field(default_factory=list)
    working_dir: Optional[str] = None
    excludes: List[str] = field(default_factory=list)
    address: Optional[str] = None
    storage: str = ""
    follow: bool = False
    env: Dict[str, str] = field(default_factory=dict)
    preflight: bool = True
    #: queue a job that can never fit the cluster as it is now (a cluster that scales): not refused at submit
    wait_for_capacity: bool = False
    prepare: PrepareConfig = field(default_factory=PrepareConfig)
    halving: HalvingConfig = field(default_factory=HalvingConfig)
    cluster: ClusterShape = field(default_factory=ClusterShape)


@dataclass
class _Root:
    rayjobs: RayjobsConfig = field(default_factory=RayjobsConfig)


def register() -> None:
    """Store the schema in Hydra's ConfigStore (idempotent; done before every composition)."""
    from hydra.core.config_store import ConfigStore

    # A plain root with one typed child: verl's untyped tree merges beside it at the root.
    ConfigStore.instance().store(name=SCHEMA_NAME, node={"rayjobs": RayjobsConfig}, provider="rayjobs")


def _leaves(cls: Any, prefix: str) -> list[tuple[str, Any]]:
    out = []
    for f in fields(cls):
        if is_dataclass(f.type):
            out += _leaves(f.type, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", f.type))
    return out


#: Every ``rayjobs.*`` leaf key and its type.
LEAVES: dict[str, Any] = dict(_leaves(RayjobsConfig, "rayjobs."))


def own_keys() -> list[str]:
    """Every ``rayjobs.*`` key (dotted), for "did you mean" hints."""
    return list(LEAVES)


def type_words(key: str) -> Optional[str]:
    """``rayjobs.priority`` -> ``an integer``; None for a key that is not one of rayjobs' leaves."""
    t = LEAVES.get(key)
    if t is None:
        return None
    if get_origin(t) is Union:  # Optional[X]
        t = next(a for a in get_args(t) if a is not type(None))
    words = {int: "an integer", bool: "true or false", str: "a string", float: "a number"}
    if t in words:
        return words[t]
    return {list: "a list", dict: "a mapping"}.get(get_origin(t), str(t))


def check_values(rj: Any) -> None:
    """What a type cannot say: ranges and choices of rayjobs' own keys (one line, exit 2).

    Args:
        rj: the composed ``rayjobs`` node.

    Raises:
        ConfigError: naming the key, the value and what is allowed.
    """
    unknown = sorted(set(rj.keys()) - {f.name for f in fields(RayjobsConfig)})
    if unknown:  # `+rayjobs.x=1` adds a key even to a typed node: refuse it here
        from rayjobs.errors import did_you_mean

        key = f"rayjobs.{unknown[0]}"
        raise ConfigError(f"unknown config key {key!r}{did_you_mean(key, own_keys())}: rayjobs has no such key")
    if int(rj.max_retries) < 0:
        raise ConfigError(f"rayjobs.max_retries={rj.max_retries}: must be 0 or more (the number of new attempts "
                          f"after a failed one)")
    if str(rj.kind) not in KINDS:
        raise ConfigError(f"rayjobs.kind={rj.kind!r}: must be one of {', '.join(KINDS)}")
    if not str(rj.entrypoint or "").strip():
        raise ConfigError("rayjobs.entrypoint is empty: give the command the job runs "
                          "(default: python3 -m verl.trainer.main_ppo)")
    if not float(rj.preempt_wait_s) > 0:
        raise ConfigError(f"rayjobs.preempt_wait_s={rj.preempt_wait_s}: must be more than 0 (seconds a preempted "
                          f"job may run on to reach its next checkpoint)")
    after_ids(rj.after)  # raises for a value that names no ids
    if rj.user and not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", str(rj.user)):
        raise ConfigError(f"rayjobs.user={rj.user!r}: letters, digits and _ . @ - only (at most 64)")
    for name in rj.env or {}:
        if not str(name).replace("_", "").isalnum() or str(name)[:1].isdigit():
            raise ConfigError(f"rayjobs.env.{name}: not an environment variable name (letters, digits, _)")
    check_prepare(rj.prepare)
    check_halving(rj.halving)


def check_halving(h: Any) -> None:
    """``rayjobs.halving.*``: off without a metric; on, increasing positive rungs and 0 < keep < 1."""
    rungs = [int(r) for r in (h.rungs or [])]
    if not str(h.metric or "").strip():
        if rungs:
            raise ConfigError("rayjobs.halving.rungs is set but rayjobs.halving.metric is not: name the metric the "
                              "points are ranked by, e.g. rayjobs.halving.metric=val-core/openai/gsm8k/reward/mean@1")
        return
    if str(h.mode) not in MODES:
        raise ConfigError(f"rayjobs.halving.mode={h.mode!r}: must be max (higher is better) or min")
    if not rungs or any(r <= 0 for r in rungs) or rungs != sorted(set(rungs)):
        raise ConfigError(f"rayjobs.halving.rungs={rungs}: give the steps to compare at, increasing and positive, "
                          f"e.g. rayjobs.halving.rungs=[50,100,200]")
    if not 0 < float(h.keep) < 1:
        raise ConfigError(f"rayjobs.halving.keep={h.keep}: the fraction that goes on at a rung, between 0 and 1 "
                          f"(default 1/3)")


def check_prepare(prep: Any) -> None:
    """``rayjobs.prepare.*``: a known dataset, a source that is a choice or a path (one line, exit 2)."""
    from rayjobs.errors import did_you_mean

    dataset, source = str(prep.dataset or ""), str(prep.source or "")
    if dataset not in DATASETS:
        raise ConfigError(f"rayjobs.prepare.dataset={dataset!r}: must be one of {', '.join(DATASETS)}"
                          f"{did_you_mean(dataset, DATASETS) if dataset else ''}")
    if not source.strip():
        raise ConfigError("rayjobs.prepare.source is empty: give auto, hub, sample, a directory with "
                          "train.*/test.* or one data file")


def after_ids(value: Any) -> List[str]:
    """``rayjobs.after`` as a list of job/sweep ids: ``ID``, ``"ID1,ID2"`` or ``[ID1, ID2]``.

    Raises:
        ConfigError: a value that is not ids (a mapping, an empty item).
    """
    if value is None or value == "":
        return []
    items: List[Any]
    if isinstance(value, str):
        items = value.split(",")
    elif hasattr(value, "__iter__") and not hasattr(value, "keys"):
        items = [x for v in value for x in str(v).split(",")]
    else:
        raise ConfigError(f"rayjobs.after={value!r}: give job or sweep ids (ID, [ID1,ID2] or 'ID1,ID2')")
    ids = [str(i).strip() for i in items]
    if not all(re.fullmatch(r"[A-Za-z0-9_.:-]+", i) for i in ids):
        raise ConfigError(f"rayjobs.after={value!r}: not job or sweep ids (letters, digits and _ . : - only; "
                          f"several as [ID1,ID2])")
    return list(dict.fromkeys(ids))

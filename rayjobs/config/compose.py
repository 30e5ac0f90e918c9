"""Compose an experiment: verl's own config tree + rayjobs presets + the user's overrides.

The search path, first match wins: ``./conf`` (the user's presets), the packaged ``conf/``
(root ``config.yaml`` and the ``exp/`` presets), then verl's ``trainer/config`` directory, found
without importing verl (``verl/__init__`` imports torch). So verl keys keep verl's names and are
checked by Hydra's struct mode against the pinned verl version; rayjobs' own keys live under
``rayjobs.``.

This module and ``hydra_plugins/rayjobs_launcher`` are the only places that touch Hydra internals.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from rayjobs import settings
from rayjobs.errors import ConfigError, closest, did_you_mean
from rayjobs.config import schema

CONFIG_NAME = "config"
#: Groups and key prefixes that belong to rayjobs/Hydra, never passed on to verl.
OWN_PREFIXES = ("rayjobs.", "hydra.", "exp")

_ABS_KEYS = ("trainer.default_local_dir", "trainer.resume_from_path", "rayjobs.storage")


def packaged_conf_dir() -> Path:
    """The packaged ``conf/`` (inside the wheel, or at the repo root for a source checkout)."""
    here = Path(__file__).resolve().parents[1]  # the rayjobs package
    for cand in (here / "conf", here.parent / "conf"):
        if (cand / f"{CONFIG_NAME}.yaml").is_file():
            return cand
    raise ConfigError(f"rayjobs' own conf/ is missing next to {here}; reinstall rayjobs (pip install -e .)")


@functools.lru_cache(maxsize=1)
def verl_config_dir() -> Path:
    """verl's ``trainer/config`` directory, located without executing ``verl/__init__``."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "verl's config tree is not installed on this machine; run "
            "`pip install --no-deps verl==0.9.1` (YAML only, no torch) and retry"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def verl_version() -> str:
    """The installed verl version (from its metadata; verl itself is never imported)."""
    try:
        from importlib.metadata import version

        return version("verl")
    except Exception:
        return "unknown"


def search_dirs() -> list[Path]:
    """Config directories in priority order (first match wins)."""
    dirs = []
    user = Path.cwd() / "conf"
    if (user / "exp").is_dir():
        dirs.append(user)
    dirs += [packaged_conf_dir(), verl_config_dir()]
    return dirs


def experiments() -> list[str]:
    """Names of all presets visible from here (user presets included)."""
    names = set()
    for d in search_dirs()[:-1]:
        names.update(p.stem for p in (d / "exp").glob("*.yaml"))
    return sorted(names)


# --------------------------------------------------------------------------- resolvers
def _cluster_shape(what: str) -> int:
    """Shape of the target cluster for presets that follow it (``grpo_7b``).

    Read locally, never from the network (dry-run touches no cluster): the cluster remembered by
    ``rayjobs up/connect``, else SkyPilot's variables when run on a node, else 1.
    """
    rec = settings.remembered_cluster()
    env = {"nnodes": "SKYPILOT_NUM_NODES", "gpus_per_node": "SKYPILOT_NUM_GPUS_PER_NODE"}[what]
    rec_key = {"nnodes": "nodes", "gpus_per_node": "gpus_per_node"}[what]
    for value in (os.environ.get(f"RAYJOBS_CLUSTER_{what.upper()}"), rec.get(rec_key), os.environ.get(env)):
        if value not in (None, ""):
            return int(value)
    return 1


def _scripts_dir() -> str:
    return str(Path(__file__).resolve().parents[2] / "scripts")


def register_resolvers() -> None:
    """Register rayjobs' OmegaConf resolvers (idempotent)."""
    from omegaconf import OmegaConf

    pairs = {
        "rayjobs_home": lambda: str(settings.home()),
        "rayjobs_storage": lambda: str(settings.storage_root()),
        "rayjobs_cluster": _cluster_shape,
        "rayjobs_scripts": _scripts_dir,
    }
    for name, fn in pairs.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


# --------------------------------------------------------------------------- hydra
C_YAML = True  #: use_c_yaml() on/off (the tests compare both)


def use_c_yaml() -> bool:
    """Let OmegaConf (and so Hydra) read YAML with libyaml's parser, same rules.

    OmegaConf builds a pure-Python loader on every file; composing verl's ~30 config files with
    it costs ~75 ms more per composition (measured). The C loader below keeps OmegaConf's rules (its
    implicit resolvers, no timestamps, duplicate keys refused); tests compare every preset's
    composed config with and without it. No-op without libyaml, and with an OmegaConf that has no
    ``_utils.get_yaml_loader`` (2.4, as bundled for the GPU machine: ``+exp=`` crashed there).
    """
    import yaml
    from omegaconf import _utils

    if not C_YAML or not hasattr(yaml, "CSafeLoader") or not hasattr(_utils, "get_yaml_loader") \
            or getattr(_utils.get_yaml_loader, "_rayjobs", False):
        return False
    py_loader = _utils.get_yaml_loader()

    class Loader(yaml.CSafeLoader):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[str] = set()
            for key, _ in node.value:
                if key.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    if key.value in seen:
                        raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                                f"found duplicate key {key.value}", key.start_mark)
                    seen.add(key.value)
            return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)

    Loader.yaml_implicit_resolvers = {k: list(v) for k, v in py_loader.yaml_implicit_resolvers.items()}
    Loader.yaml_constructors = dict(py_loader.yaml_constructors)

    def get_yaml_loader() -> Any:
        return Loader

    get_yaml_loader._rayjobs = True  # type: ignore[attr-defined]
    get_yaml_loader.python_loader = _utils.get_yaml_loader  # type: ignore[attr-defined]
    _utils.get_yaml_loader = get_yaml_loader
    return True


def make_hydra() -> Any:
    """A fresh global Hydra instance over :func:`search_dirs` (used for compose and -m)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    settings.current()  # a broken settings file: one line naming it, before Hydra starts
    register_resolvers()
    schema.register()
    use_c_yaml()
    # Hydra finds plugins by walking the hydra_plugins namespace, which an editable install does
    # not extend: add the source tree's copy of the rayjobs launcher/sweeper to it.
    import hydra_plugins

    src = str(Path(__file__).resolve().parents[2] / "hydra_plugins")
    if os.path.isdir(src) and src not in list(hydra_plugins.__path__):
        hydra_plugins.__path__.append(src)

    sp = create_config_search_path(None)
    for d in search_dirs():
        # Hydra requires its structured-config ("schema") source to stay last.
        sp.prepend(provider="rayjobs", path=f"file://{d}", anchor=SearchPathQuery(provider="schema"))
    GlobalHydra.instance().clear()
    return Hydra.create_main_hydra2(task_name="rayjobs", config_search_path=sp)


@dataclass(frozen=True)
class Composed:
    """One composed experiment point, checked and ready for :func:`rayjobs.submit.spec.build_spec`."""

    cfg: Any  #: the full composed DictConfig (verl keys at the root, ``rayjobs.*``, no ``hydra``)
    experiment: str  #: the preset name chosen with ``+exp=``
    overrides: tuple[str, ...]  #: the user's command-line overrides, as typed
    #: the verl keys the preset sets (flat), and those the settings set (``trainer.project_name``)
    preset: dict[str, Any] = field(default_factory=dict)


def compose(overrides: Sequence[str]) -> Composed:
    """Compose one experiment point from command-line ``overrides`` (``+exp=..`` included)."""
    from hydra.types import RunMode

    overrides = list(overrides)
    check_shapes(overrides)
    hydra = make_hydra()
    with translate_errors(overrides):
        cfg = hydra.compose_config(
            config_name=CONFIG_NAME, overrides=overrides, run_mode=RunMode.RUN, with_log_configuration=False
        )
    return finish(cfg, overrides)


def check_shapes(overrides: Sequence[str]) -> None:
    """An override that is no ``KEY=VALUE`` at all (``''``, ``=3``), named in one line before Hydra's parser
    answers with its grammar."""
    for o in overrides:
        if not o.strip():
            raise ConfigError("an empty override (''): give KEY=VALUE, e.g. trainer.total_epochs=2, or drop the "
                              "empty argument")
        if o.lstrip("+~").startswith("="):
            raise ConfigError(f"override {o!r} has no key: give KEY=VALUE, e.g. trainer.total_epochs=2 "
                              f"(+KEY=VALUE adds a new key on purpose)")


def finish(cfg: Any, overrides: Sequence[str]) -> Composed:
    """Check a composed config (with its ``hydra`` node) and strip Hydra's part."""
    from omegaconf import OmegaConf, open_dict

    choices = cfg.hydra.runtime.choices if "hydra" in cfg else {}
    experiment = choices.get("exp") if choices else None
    if not experiment:
        raise ConfigError(f"no experiment selected: add +exp=NAME (available: {', '.join(experiments())})")
    preset = preset_keys(experiment)
    with open_dict(cfg):
        del cfg["hydra"]
        preset.update(apply_settings(cfg, overrides))
    schema.check_values(cfg.rayjobs)
    warn_new_groups(overrides)
    check_types(cfg, overrides)
    check_absolute(cfg, overrides)
    OmegaConf.set_readonly(cfg, True)
    return Composed(cfg=cfg, experiment=str(experiment), overrides=tuple(overrides), preset=preset)


def apply_settings(cfg: Any, overrides: Sequence[str]) -> dict[str, Any]:
    """The settings' W&B keys, written into a composed config (open for writing) once, here.

    ``wandb.project`` becomes ``trainer.project_name``, ``wandb.entity`` and ``wandb.mode`` the job's
    non-secret ``WANDB_ENTITY`` and ``WANDB_MODE`` (``rayjobs.env``), unless the command line sets
    them: the command line wins, then the settings, then the preset's own value (a preset's project
    name is the seed recipe's, not the team's). ``trainer.project_name`` also names the run's
    checkpoint and metrics dirs (``<storage>/checkpoints/<project>/<run>``), so the settings' project
    decides those too.

    Returns:
        The verl keys set here (they go on verl's command line as a preset's keys do).
    """
    s = settings.current()
    typed = {override_key(o) for o in overrides}
    verl_keys: dict[str, Any] = {}
    if s.wandb.project and "trainer.project_name" not in typed and "trainer" in cfg:
        cfg.trainer.project_name = s.wandb.project
        verl_keys["trainer.project_name"] = s.wandb.project
    if s.wandb.entity and "rayjobs.env.WANDB_ENTITY" not in typed:
        cfg.rayjobs.env["WANDB_ENTITY"] = s.wandb.entity
    if s.wandb.mode and "rayjobs.env.WANDB_MODE" not in typed:
        cfg.rayjobs.env["WANDB_MODE"] = s.wandb.mode
    return verl_keys


def is_own(override_or_key: str) -> bool:
    """True for rayjobs/Hydra keys and groups (not passed on to verl)."""
    key = override_key(override_or_key)
    return key == "exp" or key.startswith(OWN_PREFIXES[:2])


def override_key(override: str) -> str:
    """``+a.b=1`` -> ``a.b``; ``~a.b`` -> ``a.b``; ``actor@x=y`` -> ``actor@x``."""
    return override.split("=", 1)[0].lstrip("+~")


def preset_keys(experiment: str) -> dict[str, Any]:
    """The verl keys a preset sets, flattened (``{"data.train_batch_size": 256, ...}``)."""
    return dict(_preset_keys(experiment, tuple(str(d) for d in search_dirs()[:-1])))


@functools.lru_cache(maxsize=64)
def _preset_keys(experiment: str, dirs: tuple[str, ...], _depth: int = 0) -> dict[str, Any]:
    """The verl keys a preset sets, flattened (``{"data.train_batch_size": 256, ...}``).

    Read from the preset file itself (it is ``# @package _global_``), following its defaults
    list within ``exp/`` (a preset may extend another); values stay unresolved so
    interpolations such as ``${rayjobs.storage}`` are resolved later against the full config.
    """
    import yaml

    for d in dirs:
        path = Path(d) / "exp" / f"{experiment}.yaml"
        if path.is_file():
            data = yaml.safe_load(path.read_text()) or {}
            out: dict[str, Any] = {}
            for entry in data.pop("defaults", None) or []:
                if isinstance(entry, str) and entry != "_self_" and _depth < 8:
                    out.update(_preset_keys(entry.split("/")[-1], dirs, _depth + 1))
            out.update({k: v for k, v in flatten(data) if not is_own(k)})
            return out
    return {}


def flatten(d: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Flatten nested dicts to dotted keys; lists and empty dicts are leaves."""
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from flatten(v, key + ".")
        else:
            yield key, v


@functools.lru_cache(maxsize=1)
def verl_schema() -> dict[str, Any]:
    """verl's flattened default config (its generated reference file): key -> default value."""
    import yaml

    path = verl_config_dir() / "_generated_ppo_trainer.yaml"
    try:
        return dict(flatten(yaml.safe_load(path.read_text()) or {}))
    except OSError:
        return {}


_WARNED: set[str] = set()


def warn_new_groups(overrides: Sequence[str]) -> None:
    """``+nosuchgroup=x``: a new top-level key verl's config has no group for; verl ignores it, so say so once."""
    import sys

    tops = {k.split(".", 1)[0] for k in verl_schema()}
    for ov in overrides:
        key = override_key(ov)
        if ov.startswith("+") and not ov.startswith("++") and "=" in ov and not is_own(ov) and tops \
                and key.split(".", 1)[0].split("@", 1)[0] not in tops and key not in _WARNED:
            _WARNED.add(key)  # once per key, not once per sweep point
            print(f"rayjobs: warning: {ov}: verl's config has no {key.split('.', 1)[0]!r}, so verl ignores it"
                  f"{did_you_mean(key.split('.', 1)[0], sorted(tops))}", file=sys.stderr)


_TYPE_NAMES = {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "a string"}


def check_types(cfg: Any, overrides: Sequence[str], value_of: Optional[Callable[[str], Any]] = None) -> None:
    """Hydra accepts ``trainer.nnodes=two``; verl would fail on the GPUs. Catch it here.

    ``value_of``: a key's value (default: selected from ``cfg``; a derived sweep point has no tree).
    """
    from omegaconf import OmegaConf

    verl_keys = verl_schema()
    for ov in overrides:
        if "=" not in ov or ov.startswith("~") or is_own(ov):
            continue
        key = override_key(ov)
        default = verl_keys.get(key)
        if default is None or isinstance(default, str) and "${" in default:
            continue
        value = value_of(key) if value_of else OmegaConf.select(cfg, key, throw_on_missing=False)
        if isinstance(value, str) and "${" in value:
            continue
        want = type(default)
        ok = (
            isinstance(value, bool) if want is bool
            else isinstance(value, int) and not isinstance(value, bool) if want is int
            else isinstance(value, (int, float)) and not isinstance(value, bool) if want is float
            else True
        )
        if value is not None and not ok and want in _TYPE_NAMES:
            raise ConfigError(
                f"{key}={value!r} has the wrong type: verl expects {_TYPE_NAMES[want]} "
                f"(default {default!r}); fix the value and resubmit"
            )


def check_absolute(cfg: Any, overrides: Sequence[str], value_of: Optional[Callable[[str], Any]] = None) -> None:
    """User-set paths that verl resolves against the job's temp dir must be absolute (design §5)."""
    from omegaconf import OmegaConf

    for key in {override_key(o) for o in overrides} & set(_ABS_KEYS):
        value = value_of(key) if value_of else OmegaConf.select(cfg, key)
        if value and not str(value).startswith("${") and not os.path.isabs(str(value)) and "://" not in str(value):
            raise ConfigError(
                f"{key}={value!r} is a relative path; verl would write it under Ray's temporary "
                f"working dir and resume would break: give an absolute path on shared storage, or "
                f"leave it unset and rayjobs puts it under rayjobs.storage"
            )


class translate_errors:
    """Context manager: Hydra/OmegaConf composition errors -> one-line :class:`ConfigError`."""

    def __init__(self, overrides: Sequence[str]):
        self.overrides = list(overrides)

    def __enter__(self) -> "translate_errors":
        return self

    def __exit__(self, et: Any, e: Any, tb: Any) -> bool:
        if e is None or isinstance(e, ConfigError):
            return False
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if not isinstance(e, (HydraException, OmegaConfBaseException)):
            return False
        raise ConfigError(explain(e, self.overrides)) from e


def explain(e: BaseException, overrides: Sequence[str]) -> str:
    """A one-line explanation of a composition error, with the closest valid names."""
    msg = str(e)
    m = re.search(r"Could not find '([^']*)'", msg) or re.search(r"Could not load '([^']*)'", msg)
    if m and m.group(1).startswith("exp/"):
        name = m.group(1).split("/", 1)[1]
        return (
            f"unknown experiment {name!r}{did_you_mean(name, experiments())}; "
            f"available: {', '.join(experiments())}"
        )
    wrong = _wrong_type(e)
    if wrong:
        return wrong
    m = re.search(r"Could not override '([^']*)'", msg) or re.search(r"Key '([^']*)' is not in struct", msg)
    if m and m.group(1).startswith("rayjobs.env."):
        name = m.group(1).split(".", 2)[2]
        return (f"rayjobs.env.{name}: a job's environment takes new names with a +: +rayjobs.env.{name}=VALUE")
    if m:
        key = m.group(1)
        if "." not in key:  # "Key 'kl_coeff' is not in struct": find the full key from the overrides
            key = next((override_key(o) for o in overrides if override_key(o).endswith("." + key)), key)
        keys = list(verl_schema()) + schema.own_keys()
        best = closest(key, keys, n=3) or closest(key.rsplit(".", 1)[-1], keys, n=3)
        hint = f" (did you mean: {', '.join(best)}?)" if best else ""
        if key.startswith("rayjobs."):  # rayjobs' keys are a fixed schema: a + would be refused next
            return f"unknown config key {key!r}{hint}: rayjobs has no such key (`python -m rayjobs.submit --help` lists them)"
        return f"unknown config key {key!r}{hint}; verl keys keep verl's names, rayjobs' own keys start with rayjobs. (use +{key}=... to add a new key on purpose)"
    first = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
    return f"invalid configuration: {first}"


def _wrong_type(e: BaseException) -> Optional[str]:
    """A value Hydra could not give a typed key (``rayjobs.priority=high``), in one line; else None."""
    from omegaconf.errors import ValidationError

    cause: Optional[BaseException] = e
    while cause is not None and not isinstance(cause, ValidationError):
        cause = cause.__cause__
    if cause is None:
        return None
    m = re.search(r"Error merging override (\S+?)=(.*)$", str(e).strip().splitlines()[0])
    if m:
        key, value = m.group(1).lstrip("+~"), m.group(2)
    elif getattr(cause, "full_key", None):  # a sweep point's value, set by the launcher
        key, value = str(cause.full_key), str(getattr(cause, "value", "?"))
    else:
        return None
    want = schema.type_words(key)
    what = f"must be {want}" if want else str(cause).splitlines()[0]
    return f"{key}={value!r}: {what}; fix the value and resubmit"


@contextlib.contextmanager
def memo_interpolations() -> Iterator[None]:
    """Parse each ``${...}`` string once for the whole sweep.

    OmegaConf re-parses an interpolation with ANTLR on every access (~1 ms each, ~110 in verl's
    config), and every point of a sweep carries the same strings. Parse trees are only visited,
    never changed, so sharing them is safe.
    """
    import omegaconf.base as ob

    orig = ob.parse
    cache: dict[tuple, Any] = {}

    def parse(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE") -> Any:
        key = (value, parser_rule, lexer_mode)
        tree = cache.get(key)
        if tree is None:
            tree = cache[key] = orig(value, parser_rule, lexer_mode)
        return tree

    ob.parse = parse
    try:
        yield
    finally:
        ob.parse = orig

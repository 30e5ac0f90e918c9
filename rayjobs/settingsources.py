"""The settings: everything environment-specific, typed, and where each value comes from.

What differs between one user's or team's setup and another's -- the storage root, the SkyPilot
cluster (name, infra, GPUs, image, idle time, bucket), which secrets the cluster gets (by name),
the W&B project and entity -- is read from here, never written into code. Sources, highest first
(the one precedence, also in the README; ``rayjobs config`` shows each value's source):

1. the command line (``rayjobs.storage=``, ``rayjobs up key=value``, ``-c NAME``, ``connect NAME``,
   ``trainer.project_name=``, ``+rayjobs.env.WANDB_ENTITY=``): applied by the command that takes
   it, on top of what is resolved here;
2. environment variables ``RAYJOBS_<KEY>`` (dots become ``_``): ``RAYJOBS_STORAGE``,
   ``RAYJOBS_CLUSTER_NAME``, ``RAYJOBS_WANDB_ENTITY``, ``RAYJOBS_SECRETS=A,B``, ...;
3. the project's ``rayjobs.yaml``: in the current directory, else the nearest parent directory up to
   the git checkout's root (never above it; outside a checkout only the current directory);
4. the user's ``$RAYJOBS_HOME/settings.yaml`` (``~/.rayjobs/settings.yaml``);
5. the remembered cluster (``rayjobs connect``): its name and its storage root;
6. the built-in defaults below (the cluster's shape left empty: ``bootstrap/cluster.yaml``'s).

Merged per key: a project file that sets only ``wandb.project`` leaves every other key to the
layers below it. A list (``secrets``) is replaced whole, never appended to.

Secrets' *values* never go in a settings file (a repo's ``rayjobs.yaml`` is committed and read by
everyone): a secret-looking key with a value is refused, naming the file and the key. Only names.

This module is pure but for reading the files it is given (no Ray, Hydra or OmegaConf; PyYAML only
when a file exists): :mod:`rayjobs.settings` hands it the real world (cwd, environment, home, the
remembered cluster).
"""

from __future__ import annotations

import os
import re
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from rayjobs.errors import ConfigError, did_you_mean
from rayjobs.shared import SECRET_PATTERN

PROJECT_FILE = "rayjobs.yaml"
USER_FILE = "settings.yaml"
ENV_PREFIX = "RAYJOBS_"
#: Source labels (``rayjobs config`` prints them).
DEFAULT = "default"
REMEMBERED = "remembered cluster"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: ``wandb.mode``'s values: W&B's own ``WANDB_MODE`` values.
WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun")
#: ``cluster.door``: the head's door on its loopback only, or also over TLS on its network address.
DOORS = ("loopback", "network")


# --------------------------------------------------------------------------- the schema
def _key(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ClusterSettings:
    """The SkyPilot cluster ``rayjobs up`` launches and ``connect``/``down`` talk to."""

    name: str = _key("rayjobs", "SkyPilot cluster name (up, connect, down)")
    infra: str = _key("", "where up launches: k8s, aws, gcp/us-central1, ... (empty: bootstrap/cluster.yaml's)")
    accelerators: str = _key("", "GPUs per node, e.g. H100:8 (empty: bootstrap/cluster.yaml's)")
    num_nodes: Optional[int] = _key(None, "number of nodes (empty: bootstrap/cluster.yaml's)")
    image: str = _key("", "the nodes' container image, a full ref (empty: bootstrap/cluster.yaml's)")
    idle_minutes: int = _key(30, "minutes without a running or queued Ray job before autostop")
    bucket: str = _key("", "bucket mounted at the storage root on the nodes (empty: bootstrap/cluster.yaml's)")
    volume: str = _key("", "a SkyPilot volume (k8s PVC) mounted at the storage root instead of a bucket")
    door: str = _key("loopback", "where the head's door (the queue API) listens: loopback (the owner's tunnel) or "
                                 "network (also TLS on the head's address, for teammates' tokens)")


@dataclass(frozen=True)
class WandbSettings:
    """Where verl's wandb logger writes: a job's project (``trainer.project_name``), entity and mode."""

    project: str = _key("", "W&B project: the default trainer.project_name of a submit (also names its "
                            "checkpoint dir); empty: the preset's")
    entity: str = _key("", "W&B entity (team or user): WANDB_ENTITY in the job's environment; empty: W&B's default")
    mode: str = _key("", "WANDB_MODE in the job's environment: offline (W&B writes into the job's run dir, no key "
                         "needed), disabled, online; empty: W&B's default (online, needs WANDB_API_KEY on the cluster)")


@dataclass(frozen=True)
class Settings:
    """The effective settings (every layer but the command line) and where each value came from."""

    storage: str = _key("", "absolute storage root the jobs write to (checkpoints, metrics, data, the queue); "
                            "empty: the remembered cluster's, else $RAYJOBS_HOME/storage")
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    secrets: tuple[str, ...] = _key(("WANDB_API_KEY", "HF_TOKEN"),
                                    "names of the environment variables rayjobs up forwards as SkyPilot secrets")
    wandb: WandbSettings = field(default_factory=WandbSettings)
    #: dotted key -> where its value came from (``default``, ``env RAYJOBS_X``, a file, ...)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: the settings files that exist and were read, as shown to the user, highest first
    files: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def get(self, key: str) -> Any:
        """The value of a dotted key (``"cluster.name"``)."""
        node: Any = self
        for part in key.split("."):
            node = getattr(node, part)
        return node

    def source(self, key: str) -> str:
        """Where ``key``'s value came from."""
        return self.sources.get(key, DEFAULT)


def _leaves(cls: Any, prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for f in fields(cls):
        if f.name in ("sources", "files"):
            continue
        if f.default_factory is not MISSING and is_dataclass(f.default_factory):
            out += _leaves(f.default_factory, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", f))
    return out


#: Every settings key (dotted) -> its dataclass field (type, default, and what it is for in ``metadata['help']``).
KEYS: dict[str, Any] = dict(_leaves(Settings))


def env_var(key: str) -> str:
    """``cluster.name`` -> ``RAYJOBS_CLUSTER_NAME`` (``storage`` -> ``RAYJOBS_STORAGE``)."""
    return ENV_PREFIX + key.upper().replace(".", "_")


# --------------------------------------------------------------------------- values
def _kind(key: str) -> str:
    t = str(KEYS[key].type)
    return "int" if "int" in t else "list" if "tuple" in t else "str"


def check_value(key: str, value: Any, where: str, from_env: bool = False) -> Any:
    """One value for ``key``, typed and checked; ``where`` names its source in the error.

    Raises:
        ConfigError: one line naming the source, the key and what is expected.
    """
    kind = _kind(key)
    # A variable is named with its value, except a list: names pasted with a value must not be echoed.
    at = (f"{where}={value!r}" if kind != "list" else where) if from_env else f"{where}: {key}"
    if kind == "int":
        if from_env and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{at} must be a whole number{'' if from_env else f', not {value!r}'}")
        low = 1 if key == "cluster.num_nodes" else 0
        if value < low:
            raise ConfigError(f"{at} must be at least {low}")
        return value
    if kind == "list":
        items = [s.strip() for s in value.split(",") if s.strip()] if from_env and isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{at} must be a list of environment variable names, e.g. [WANDB_API_KEY, HF_TOKEN]")
        for i, name in enumerate(items):
            # Never echo an item: a value pasted here by mistake would land in a terminal or a log.
            if not isinstance(name, str) or not _NAME.match(name):
                raise ConfigError(f"{at}[{i}] is not an environment variable name (letters, digits, _): list the "
                                  f"secrets' names only, their values stay in your shell")
            if name.startswith("RAY_"):
                raise ConfigError(f"{at}[{i}] = {name}: Ray's own variables are not forwarded as secrets "
                                  f"(rayjobs up makes and forwards RAY_AUTH_TOKEN itself)")
        return tuple(items)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # `project: 2024` is a name, not a number
    if not isinstance(value, str):
        raise ConfigError(f"{at} must be a string, not {value!r}")
    return _checked_str(key, value.strip(), at)


def _checked_str(key: str, value: str, at: str) -> str:
    if key == "storage" and value:
        value = os.path.expanduser(value)
        if not os.path.isabs(value):
            raise ConfigError(f"{at} = {value!r} is a relative path; it must be absolute (e.g. /mnt/shared/rayjobs), "
                              f"because jobs run in a temporary dir")
    if key == "cluster.name" and (not value or any(c.isspace() or c == "/" for c in value)):
        raise ConfigError(f"{at} = {value!r} is not a cluster name (no spaces or /)")
    if key == "wandb.mode" and value and value not in WANDB_MODES:
        raise ConfigError(f"{at} = {value!r} is not a W&B mode: one of {', '.join(WANDB_MODES)}"
                          f"{did_you_mean(value, WANDB_MODES)}")
    if key == "cluster.door" and value not in DOORS:
        raise ConfigError(f"{at} = {value!r}: one of {', '.join(DOORS)}")
    return value


# --------------------------------------------------------------------------- files
_PARSED: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}


def read_file(path: Path, shown: str) -> dict[str, Any]:
    """A settings file's values, flat (``{"cluster.name": "x"}``), checked; cached per file version.

    Raises:
        ConfigError: one line naming ``shown`` (the file) and what is wrong: YAML syntax (with the
            line), not a mapping, a secret's value, an unknown key (with the closest), a wrong type.
    """
    try:
        st = path.stat()
        version = (st.st_mtime_ns, st.st_size)
        hit = _PARSED.get(str(path))
        if hit and hit[0] == version:
            return hit[1]
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read it ({e.strerror}); fix its permissions or remove it") from None
    flat = parse(text, shown)
    _PARSED[str(path)] = (version, flat)
    return flat


def parse(text: str, shown: str) -> dict[str, Any]:
    """A settings file's text -> its checked values, flat (see :func:`read_file`)."""
    import yaml

    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        why = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{shown}{line}: not valid YAML ({why}); fix the file") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{shown}: must be a mapping of settings (key: value), e.g. 'storage: /mnt/shared/rayjobs'")
    _refuse_secret_values(doc, shown)
    out: dict[str, Any] = {}
    for key, value in _flatten(doc):
        if key not in KEYS:
            group = [k for k in KEYS if k.startswith(key + ".")]
            if group and value is None:  # `wandb:` with nothing under it
                continue
            if group:
                raise ConfigError(f"{shown}: {key} must be a mapping of {', '.join(group)}")
            hint = did_you_mean(key, KEYS) or f" (valid keys: {', '.join(KEYS)})"
            raise ConfigError(f"{shown}: unknown key {key!r}{hint}; fix or remove it (`rayjobs config` shows each "
                              f"setting and its source)")
        if value is not None:  # `key:` with no value leaves the key to the layers below
            out[key] = check_value(key, value, shown)
    return out


def _flatten(d: Mapping[Any, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in KEYS:  # (a mapping where a value belongs: the type check says so)
            out += _flatten(v, key + ".")
        else:
            out.append((key, v))
    return out


def _refuse_secret_values(d: Mapping[Any, Any], shown: str, prefix: str = "") -> None:
    """A secret-looking key with a value anywhere in the file: refused, value never echoed."""
    for k, v in d.items():
        key = f"{prefix}{k}"
        if key == "secrets" and isinstance(v, (list, tuple)):
            continue  # the names to forward: checked as names
        if key == "secrets" and isinstance(v, str):  # maybe names, maybe a value: never echoed
            raise ConfigError(f"{shown}: secrets must be a list of environment variable names, "
                              f"e.g. [WANDB_API_KEY, HF_TOKEN]")
        if isinstance(v, dict):
            _refuse_secret_values(v, shown, key + ".")
        elif SECRET_PATTERN.search(str(k)) and v not in (None, "", [], {}):
            var = str(k) if _NAME.match(str(k)) and str(k).isupper() else "the secret"
            raise ConfigError(f"{shown}: {key} holds what looks like a secret's value; secrets never go in a settings "
                              f"file (it is read, and often committed, as plain text): remove it, export {var} in "
                              f"your shell and list its name under 'secrets:'")


def project_file(cwd: Path) -> Optional[Path]:
    """The project's ``rayjobs.yaml``: in ``cwd``, else the nearest parent up to the git root.

    Outside a git checkout only ``cwd`` counts (a file in some parent directory is not the project's).
    """
    dirs = [cwd, *cwd.parents]
    root = next((i for i, d in enumerate(dirs) if (d / ".git").exists()), None)
    for d in dirs[: (root + 1) if root is not None else 1]:
        if (d / PROJECT_FILE).is_file():
            return d / PROJECT_FILE
    return None


def shown_path(path: Path, cwd: Path, home: Optional[Path] = None) -> str:
    """How a file is named in messages: ``./rayjobs.yaml``, ``../rayjobs.yaml``, ``~/.rayjobs/settings.yaml``."""
    if path.parent == cwd:
        return f"./{path.name}"
    if cwd in path.parents:
        return f"./{path.relative_to(cwd)}"
    if path.parent in cwd.parents:
        return "/".join([".."] * (len(cwd.parts) - len(path.parent.parts)) + [path.name])
    home = home or Path.home()
    return f"~/{path.relative_to(home)}" if home in path.parents else str(path)


# --------------------------------------------------------------------------- the precedence
def env_layer(environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """``RAYJOBS_<KEY>`` variables that are set (non-empty): key -> (value, source)."""
    out = {}
    for key in KEYS:
        var = env_var(key)
        raw = environ.get(var)
        if raw not in (None, ""):
            out[key] = (check_value(key, raw, var, from_env=True), f"env {var}")
    return out


def resolve(cwd: Path, environ: Mapping[str, str], home: Path,
            remembered: Optional[Mapping[str, Any]] = None) -> Settings:
    """The effective settings from every layer but the command line (see the module docstring).

    Args:
        cwd: where the project's ``rayjobs.yaml`` is looked for.
        environ: the environment (``RAYJOBS_*``).
        home: ``$RAYJOBS_HOME`` (its ``settings.yaml`` is the user's file).
        remembered: the remembered cluster's record (``name``, ``storage``), if any.

    Returns:
        The typed :class:`Settings`, with each key's source.

    Raises:
        ConfigError: a bad file or variable, in one line naming it and the key.
    """
    values: dict[str, tuple[Any, str]] = {k: (f.default, DEFAULT) for k, f in KEYS.items()}
    rec = remembered or {}
    for key, rec_key in (("cluster.name", "name"), ("storage", "storage")):
        if isinstance(rec.get(rec_key), str) and rec[rec_key]:
            values[key] = (rec[rec_key], REMEMBERED)
    files = []
    for path in (home / USER_FILE, project_file(cwd)):  # lowest first: the project file wins
        if path is not None and path.is_file():
            shown = shown_path(path, cwd)
            files.insert(0, shown)
            values.update({k: (v, shown) for k, v in read_file(path, shown).items()})
    values.update(env_layer(environ))
    return build({k: v for k, (v, _) in values.items()}, {k: s for k, (_, s) in values.items()}, tuple(files))


def build(values: Mapping[str, Any], sources: Mapping[str, str], files: Sequence[str] = ()) -> Settings:
    """A :class:`Settings` from flat values (missing keys keep their defaults)."""
    cluster = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("cluster.")}
    wandb = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("wandb.")}
    top = {k: v for k, v in values.items() if "." not in k}
    return replace(Settings(**top), cluster=ClusterSettings(**cluster), wandb=WandbSettings(**wandb),
                   sources=dict(sources), files=tuple(files))

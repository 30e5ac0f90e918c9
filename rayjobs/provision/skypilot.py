"""The provision plane: ``rayjobs up`` / ``connect`` / ``cluster`` / ``down``.

* ``up`` builds the SkyPilot task from ``bootstrap/cluster.yaml`` (parameters: infra, accelerators,
  num_nodes, image, disk_size, ...; validated by SkyPilot's own schema; those not on the command line
  come from the settings' ``cluster.*`` and ``storage``, see :func:`up_params`), launches it with a
  Ray auth token (kept in ``$RAYJOBS_HOME/clusters/<name>/auth_token``, 0600) and the local values
  of the settings' ``secrets`` (names; default WANDB_API_KEY, HF_TOKEN) as SkyPilot secrets,
  follows the bootstrap job until the head says the cluster is complete (the job fails, naming the
  missing ranks, otherwise), starts the autostop sentinel and connects. Re-running it on a live
  cluster changes nothing there (the node script is idempotent) and brings back nodes that lost
  their Ray.
* ``connect`` (:mod:`rayjobs.provision.tunnel`) opens the SSH tunnel to the head's Jobs API and remembers
  the cluster; ``cluster`` (:mod:`rayjobs.views.clusterview`) shows nodes, GPUs used/free and the queue.
* ``down`` closes the tunnel and tears the cluster down with SkyPilot.

SkyPilot is imported only inside ``up``/``down`` (it takes seconds to import).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from rayjobs import settings
from rayjobs.errors import ConfigError, RayjobsError, did_you_mean
from rayjobs.provision import tunnel
from rayjobs.provision.clusterdir import DEFAULT_NAME, ClusterError, cluster_dir, cluster_name, local_token
from rayjobs.settingsources import DEFAULT, DOORS, REMEMBERED, Settings
from rayjobs.shared import source_commit

__all__ = ["DEFAULT_NAME", "ClusterError", "up", "down", "parse_params", "up_params", "build_task", "task_config",
           "task_defaults", "local_token", "cluster_dir", "cluster_name"]

BOOTSTRAP = Path(__file__).resolve().parents[2] / "bootstrap"
#: `rayjobs up` parameters (key=value) -> what they set.
UP_KEYS = {
    "infra": "resources.infra (k8s, aws, gcp/us-central1, ...)",
    "accelerators": "resources.accelerators per node (H100:1, H100:8, ...)",
    "num_nodes": "number of nodes",
    "idle_minutes": "minutes without a running or queued Ray job before autostop (sentinel)",
    "image": "resources.image_id (docker:...)",
    "disk_size": "resources.disk_size in GB",
    "memory": "resources.memory (128+)",
    "use_spot": "resources.use_spot (true/false)",
    "autodown": "tear down (not stop) when idle; default true on k8s (which cannot stop)",
    "bucket": "bucket mounted at the storage root (file_mounts, MOUNT_CACHED)",
    "volume": "a SkyPilot volume (k8s PVC) mounted at the storage root instead of a bucket",
    "storage": "the storage root path on the nodes (/mnt/rayjobs)",
    "join_timeout": "seconds the head waits for every node before failing",
    "door": "loopback (the owner's tunnel) or network: the head also serves its door over TLS for teammates",
}


#: `rayjobs up` parameters the settings give a default for: parameter -> settings key.
FROM_SETTINGS = {"infra": "cluster.infra", "accelerators": "cluster.accelerators", "num_nodes": "cluster.num_nodes",
                 "image": "cluster.image", "idle_minutes": "cluster.idle_minutes", "bucket": "cluster.bucket",
                 "volume": "cluster.volume", "storage": "storage", "door": "cluster.door"}


# --------------------------------------------------------------------------- task
def up_params(given: dict[str, str], s: Settings) -> tuple[dict[str, str], dict[str, str]]:
    """The parameters of ``rayjobs up``: the command line's (``given``), then the settings'. Pure.

    A settings value that is empty leaves ``bootstrap/cluster.yaml``'s. A ``bucket=`` or ``volume=``
    on the command line leaves both settings unused (they are one choice: where the storage root
    lives). ``storage`` comes only from a settings file or ``RAYJOBS_STORAGE``: the remembered
    cluster's root describes a cluster, and the built-in one is this machine's.

    Args:
        given: the command line's parameters (:func:`parse_params`).
        s: the effective settings (:func:`rayjobs.settings.current`).

    Returns:
        (the parameters, and for each taken from the settings its source).
    """
    params, taken = dict(given), {}
    for param, key in FROM_SETTINGS.items():
        value, source = s.get(key), s.source(key)
        if param in given or value in (None, "") or param in ("bucket", "volume") and {"bucket", "volume"} & set(given):
            continue
        if param in ("storage", "door") and source in (DEFAULT, REMEMBERED):
            continue
        params[param], taken[param] = str(value), source
    return params, taken


def task_defaults() -> dict[str, Any]:
    """What ``bootstrap/cluster.yaml`` gives the settings left empty (``cluster.infra`` ..., for
    ``rayjobs config``); ``{}`` when the file is not there (an installed rayjobs without a checkout)."""
    try:
        cfg = task_config({})
    except (OSError, ValueError, KeyError):
        return {}
    res, envs = cfg.get("resources") or {}, cfg.get("envs") or {}
    image = str(res.get("image_id") or "")
    return {"cluster.infra": res.get("infra", ""), "cluster.accelerators": res.get("accelerators", ""),
            "cluster.num_nodes": cfg.get("num_nodes", 1),
            "cluster.image": image[len("docker:"):] if image.startswith("docker:") else image,
            "cluster.bucket": envs.get("RAYJOBS_BUCKET", "")}


def base_image_note() -> str:
    """What ``rayjobs config`` says beside ``bootstrap/cluster.yaml``'s image: it is only a base (an
    older verl and torch), over which the nodes' setup installs the pinned stack (its
    ``VERL_VERSION``/``VLLM_VERSION``, the torch of the ``cluster`` extra); ``""`` without the file."""
    try:
        envs = task_config({}).get("envs") or {}
    except (OSError, ValueError, KeyError):
        return ""
    torch = _cluster_pin("torch")
    return (f"a base image: the nodes' setup installs the pinned verl {envs.get('VERL_VERSION', '?')} + vLLM "
            f"{envs.get('VLLM_VERSION', '?')}{f' (torch {torch})' if torch else ''} over it; one with it all "
            f"inside: scripts/build_image.sh")


def _cluster_pin(name: str) -> str:
    """The version the ``cluster`` extra pins for ``name`` (``==``), from rayjobs' installed metadata."""
    import re
    from importlib.metadata import PackageNotFoundError, requires

    try:
        reqs = requires("rayjobs") or []
    except PackageNotFoundError:
        return ""
    for r in reqs:
        m = re.match(rf"{re.escape(name)}(\[[^]]*\])?==([^;\s]+)\s*;.*extra == .cluster.", r)
        if m:
            return m.group(2)
    return ""


def parse_params(pairs: list[str]) -> dict[str, str]:
    """``["infra=aws", "num_nodes=4"]`` -> dict; unknown keys name the closest valid ones."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {pair!r} (keys: {', '.join(UP_KEYS)})")
        if key not in UP_KEYS:
            raise ConfigError(f"unknown parameter {key!r}{did_you_mean(key, UP_KEYS)}; valid: {', '.join(UP_KEYS)}")
        out[key] = value.strip()
    return out


def _bool(key: str, value: str) -> bool:
    v = value.lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{key}={value!r}: expected true or false")


def _int(key: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"{key}={value!r}: expected a whole number") from None
    if n < (0 if key == "idle_minutes" else 1):
        raise ConfigError(f"{key}={value!r}: must be at least {0 if key == 'idle_minutes' else 1}")
    return n


def task_config(params: dict[str, str], workdir: Optional[str] = None,
                secrets: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """``bootstrap/cluster.yaml`` as a dict, with ``params`` applied (not yet validated).

    ``secrets`` (if given) replace the YAML's placeholders: only the ones with a value are sent, and
    their names (all of them) go to the node script as ``RAYJOBS_SECRETS`` (it logs and records
    which the Ray processes got).
    """
    import yaml

    cfg = yaml.safe_load((BOOTSTRAP / "cluster.yaml").read_text())
    res = cfg.setdefault("resources", {})
    envs = cfg.setdefault("envs", {})
    if secrets is not None:
        cfg["secrets"] = {k: v for k, v in secrets.items() if v}
        envs["RAYJOBS_SECRETS"] = ",".join(k for k in secrets if k != "RAY_AUTH_TOKEN")
    for key, value in params.items():
        if key in ("infra", "accelerators", "memory"):
            res[key] = value
        elif key == "image":
            res["image_id"] = pinned_image(value if value.startswith("docker:") else f"docker:{value}")
        elif key == "disk_size":
            res["disk_size"] = _int(key, value)
        elif key == "use_spot":
            res["use_spot"] = _bool(key, value)
        elif key == "num_nodes":
            cfg["num_nodes"] = _int(key, value)
        elif key == "bucket":
            envs["RAYJOBS_BUCKET"] = value
        elif key == "join_timeout":
            envs["RAYJOBS_JOIN_TIMEOUT"] = str(_int(key, value))
        elif key == "door":
            if value not in DOORS:
                raise ConfigError(f"door={value!r}: one of {', '.join(DOORS)} (network: the head also serves "
                                  f"its door over TLS on its address, for teammates)")
            envs["RAYJOBS_DOOR"] = value
        elif key == "storage":
            if not value.startswith("/"):
                raise ConfigError(f"storage={value!r} must be an absolute path on the nodes")
            envs["RAYJOBS_STORAGE"] = value
    root = envs["RAYJOBS_STORAGE"]
    mounts = cfg.pop("file_mounts", {}) or {}
    mount = next(iter(mounts.values()), {"name": "${RAYJOBS_BUCKET}", "mode": "MOUNT_CACHED"})
    if params.get("volume"):
        cfg["volumes"] = {root: params["volume"]}
    else:
        cfg["file_mounts"] = {root: mount}
    infra = str(res.get("infra", ""))
    autodown = _bool("autodown", params["autodown"]) if "autodown" in params else infra.startswith(("k8s", "kubernetes"))
    res.setdefault("autostop", {})["down"] = autodown
    if workdir:
        cfg["workdir"] = workdir
    commit = source_commit()
    if commit:  # the nodes label themselves with it; an image of this very commit skips the install
        envs["RAYJOBS_COMMIT"] = commit
    return cfg


def pinned_image(image_id: str) -> str:
    """``image_id`` (``docker:repo:tag``) if its tag pins it; one line (exit 2) for ``latest`` or no tag.

    One image for every node, tied to a commit (``scripts/build_image.sh`` tags it with the commit):
    a moving tag would let nodes started on different days run different stacks.
    """
    ref = image_id.split(":", 1)[1] if image_id.startswith("docker:") else image_id
    if "@sha256:" in ref:
        return image_id
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    if not tag or tag == "latest":
        raise ConfigError(f"image={ref!r} is not pinned ({'the tag latest moves' if tag else 'no tag'}): use a tag "
                          f"tied to a commit (scripts/build_image.sh REGISTRY/NAME prints it) or @sha256:<digest>")
    return image_id


def build_task(params: dict[str, str], workdir: Optional[str] = None,
               secrets: Optional[dict[str, str]] = None) -> Any:
    """The SkyPilot ``Task`` (SkyPilot's schema check runs here, offline)."""
    import sky

    try:
        return sky.Task.from_yaml_config(task_config(params, workdir, secrets))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"SkyPilot rejected the cluster task: {' '.join(str(e).split())[:300]}") from e


def sentinel_task(idle_minutes: int, workdir: Optional[str] = None) -> Any:
    import sky
    import yaml

    cfg = yaml.safe_load((BOOTSTRAP / "sentinel.yaml").read_text())
    cfg["envs"]["RAYJOBS_IDLE_MINUTES"] = str(idle_minutes)
    if workdir:
        cfg["workdir"] = workdir
    return sky.Task.from_yaml_config(cfg)


def _sky() -> Any:
    try:
        import sky
    except ImportError:
        raise ConfigError("SkyPilot is not installed: pip install 'rayjobs[sky]' (skypilot==0.14.1)") from None
    return sky


#: Tries of a SkyPilot call its local API server refused (it is started by SkyPilot's client on the
#: first call and may not listen yet on a busy machine), and the wait between them.
API_SERVER_TRIES, API_SERVER_WAIT_S = 3, 2.0


def _sky_call(what: str, name: str, fn: Any, *args: Any, **kw: Any) -> Any:
    """Call SkyPilot; its exceptions become one-line :class:`ClusterError` messages. A call its local
    API server refused the connection of never reached it: it is made again (bounded)."""
    for attempt in range(1, API_SERVER_TRIES + 1):
        try:
            return fn(*args, **kw)
        except RayjobsError:
            raise
        except Exception as e:
            if e.__class__.__name__ == "ClusterDoesNotExist":
                raise ClusterError(f"no SkyPilot cluster named {name!r} (`sky status` lists them)") from e
            if attempt < API_SERVER_TRIES and _local_server_refused(e):
                time.sleep(API_SERVER_WAIT_S)
                continue
            raise ClusterError(f"SkyPilot {what} of {name!r} failed: {' '.join(str(e).split())[:300]}") from e
    raise AssertionError("unreachable")


def _local_server_refused(e: BaseException) -> bool:
    """Did SkyPilot's local API server refuse the connection (the request never reached it)?"""
    text = str(e)
    return ("Connection refused" in text or "ApiServerConnectionError" in type(e).__name__) and (
        "127.0.0.1" in text or "localhost" in text)


# --------------------------------------------------------------------------- up / down
def up(name: str, params: dict[str, str], out: Any = None, sdk: Any = None) -> dict[str, Any]:
    """Launch (or re-bootstrap) the cluster, wait until it is complete, start the sentinel, connect.

    ``params`` are the command line's; the settings fill in the rest (:func:`up_params`) and name
    the secrets to forward (their values from this shell).
    """
    out = out or sys.stderr
    sky = sdk or _sky()
    s = settings.current()
    params, taken = up_params(params, s)
    said = {k: src for k, src in taken.items() if src != DEFAULT}
    if said:
        print("rayjobs: from the settings: " + ", ".join(f"{k}={params[k]} ({src})" for k, src in said.items()),
              file=out)
    idle = _int("idle_minutes", params.pop("idle_minutes"))
    workdir = str(BOOTSTRAP.parent)
    build_task(params, workdir)  # bad parameters fail here, before anything touches the cluster
    token = local_token(name)
    if token is None:
        try:  # a cluster someone else started: keep its token (a new one would lock its Ray out)
            tunnel.remote_state(name)
            token = local_token(name)
        except ClusterError:
            token = None
    token = token or local_token(name, create=True)
    assert token is not None
    task = build_task(params, workdir, {"RAY_AUTH_TOKEN": token.read_text().strip(), **_secrets(s, out)})
    print(f"rayjobs: launching {name} ({task.num_nodes} node(s), {_describe(task)}) ...", file=out)
    job_id, _ = _sky_call("launch", name, lambda: sky.stream_and_get(sky.launch(task, cluster_name=name)))
    tee = _Tee(out)
    rc = _sky_call("logs", name, sky.tail_logs, name, job_id, follow=True, output_stream=tee)
    if rc != 0:
        detail = tee.error or f"the bootstrap job {job_id} ended with code {rc}"
        raise ClusterError(f"{name} is not ready: {detail}; full log: sky logs {name} {job_id}")
    _sky_call("exec (sentinel)", name, lambda: sky.stream_and_get(sky.exec(sentinel_task(idle, workdir), cluster_name=name)))
    print(f"rayjobs: {name} is ready; autostop after {idle} idle minute(s) (no running or queued Ray job)", file=out)
    rec = tunnel.connect(name, out=out)
    print("rayjobs: once per storage root, prepare the presets' data: "
          "python -m rayjobs.submit -m +exp=prepare_data rayjobs.prepare.dataset=gsm8k,math", file=out)
    return rec


def _secrets(s: Settings, out: Any) -> dict[str, str]:
    """The settings' secret names with this shell's values; says (names only) which are not set."""
    values = {k: os.environ.get(k, "") for k in s.secrets}
    missing = [k for k, v in values.items() if not v]
    print(f"rayjobs: secrets for the cluster (names from {s.source('secrets')}): "
          f"{', '.join(k for k, v in values.items() if v) or 'none'}"
          + (f"; not set in this shell, not forwarded: {', '.join(missing)}" if missing else ""), file=out)
    return values


def _describe(task: Any) -> str:
    r = next(iter(task.resources))
    gpus = ", ".join(f"{k}:{v:g}" for k, v in (r.accelerators or {}).items()) or "no GPUs"
    return f"{gpus} each, {r.cloud or 'any infra'}"


class _Tee:
    """Passes SkyPilot's log stream through and keeps the node script's `error:` line."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.error = ""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if "error: " in line:
                self.error = line.split("error: ", 1)[1].strip()
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def down(name: str, out: Any = None, sdk: Any = None) -> None:
    """Close the tunnel, forget the cluster, tear it down with SkyPilot (the bucket stays)."""
    out = out or sys.stderr
    rec = settings.remembered_cluster()
    if rec.get("name") == name:
        tunnel.disconnect()
    sky = sdk or _sky()
    print(f"rayjobs: tearing down {name} ...", file=out)
    _sky_call("down", name, lambda: sky.stream_and_get(sky.down(name)))
    token = cluster_dir(name) / "auth_token"
    token.unlink(missing_ok=True)
    print(f"rayjobs: {name} is down (the storage bucket/volume is kept)", file=out)

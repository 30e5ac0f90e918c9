"""The provision plane: ``rayjobs up`` / ``connect`` / ``cluster`` / ``down``.

* ``up`` builds the SkyPilot task from ``bootstrap/cluster.yaml`` (parameters: infra, accelerators,
  num_nodes, image, disk_size, ...; validated by SkyPilot's own schema), launches it with a Ray auth
  token (kept in ``$RAYJOBS_HOME/clusters/<name>/auth_token``, 0600) and the local WANDB_API_KEY /
  HF_TOKEN as SkyPilot secrets, follows the bootstrap job until the head says the cluster is
  complete (the job fails, naming the missing ranks, otherwise), starts the autostop sentinel and
  connects. Re-running it on a live cluster changes nothing there (the node script is idempotent)
  and brings back nodes that lost their Ray.
* ``connect`` reads the head's readiness record and token over SSH (SkyPilot writes an SSH config
  entry per cluster), opens ``ssh -N -L 127.0.0.1:<local>:127.0.0.1:8265 <cluster>`` (or reuses a
  live one) and remembers the cluster in ``$RAYJOBS_HOME/cluster.json``, so later commands need
  no address.
* ``cluster`` shows nodes, GPUs used/free and the queue; ``down`` closes the tunnel and tears
  the cluster down with SkyPilot.

SkyPilot is imported only inside ``up``/``down`` (it takes seconds to import).
"""

from __future__ import annotations

import json
import os
import secrets as _secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from rayjobs import settings
from rayjobs.errors import ClusterUnreachable, ConfigError, RayjobsError, did_you_mean

BOOTSTRAP = Path(__file__).resolve().parent.parent / "bootstrap"
DEFAULT_NAME = "rayjobs"
REMOTE_DASHBOARD_PORT = 8265
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
}


class ClusterError(RayjobsError):
    """Provisioning, bootstrap or tunnel failure (one line: what failed and what to run)."""


# --------------------------------------------------------------------------- task
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

    ``secrets`` (if given) replace the YAML's placeholders: only the ones with a value are sent.
    """
    import yaml

    cfg = yaml.safe_load((BOOTSTRAP / "cluster.yaml").read_text())
    if secrets is not None:
        cfg["secrets"] = {k: v for k, v in secrets.items() if v}
    res = cfg.setdefault("resources", {})
    envs = cfg.setdefault("envs", {})
    for key, value in params.items():
        if key in ("infra", "accelerators", "memory"):
            res[key] = value
        elif key == "image":
            res["image_id"] = value if ":" in value.split("/")[0] else f"docker:{value}"
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
    return cfg


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


# --------------------------------------------------------------------------- local state
def cluster_dir(name: str) -> Path:
    return settings.home() / "clusters" / name


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".new")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, value.encode())
    os.close(fd)
    os.replace(tmp, path)


def local_token(name: str, create: bool = False) -> Optional[Path]:
    path = cluster_dir(name) / "auth_token"
    if not path.exists() and create:
        _write_secret(path, _secrets.token_hex(32))
    return path if path.exists() else None


def _sky() -> Any:
    try:
        import sky
    except ImportError:
        raise ConfigError("SkyPilot is not installed: pip install 'rayjobs[sky]' (skypilot==0.14.1)") from None
    return sky


def _sky_call(what: str, name: str, fn: Any, *args: Any, **kw: Any) -> Any:
    """Call SkyPilot; its exceptions become one-line :class:`ClusterError` messages."""
    try:
        return fn(*args, **kw)
    except RayjobsError:
        raise
    except Exception as e:
        if e.__class__.__name__ == "ClusterDoesNotExist":
            raise ClusterError(f"no SkyPilot cluster named {name!r} (`sky status` lists them)") from e
        raise ClusterError(f"SkyPilot {what} of {name!r} failed: {' '.join(str(e).split())[:300]}") from e


# --------------------------------------------------------------------------- up / down
def up(name: str, params: dict[str, str], out: Any = None, sdk: Any = None) -> dict[str, Any]:
    """Launch (or re-bootstrap) the cluster, wait until it is complete, start the sentinel, connect."""
    out = out or sys.stderr
    sky = sdk or _sky()
    params = dict(params)
    idle = _int("idle_minutes", params.pop("idle_minutes", "30"))
    workdir = str(BOOTSTRAP.parent)
    build_task(params, workdir)  # bad parameters fail here, before anything touches the cluster
    token = local_token(name)
    if token is None:
        try:  # a cluster someone else started: keep its token (a new one would lock its Ray out)
            _remote_state(name)
            token = local_token(name)
        except ClusterError:
            token = None
    token = token or local_token(name, create=True)
    assert token is not None
    task = build_task(params, workdir, {"RAY_AUTH_TOKEN": token.read_text().strip(),
                                        **{k: os.environ.get(k, "") for k in ("WANDB_API_KEY", "HF_TOKEN")}})
    print(f"rayjobs: launching {name} ({task.num_nodes} node(s), {_describe(task)}) ...", file=out)
    job_id, _ = _sky_call("launch", name, lambda: sky.stream_and_get(sky.launch(task, cluster_name=name)))
    tee = _Tee(out)
    rc = _sky_call("logs", name, sky.tail_logs, name, job_id, follow=True, output_stream=tee)
    if rc != 0:
        detail = tee.error or f"the bootstrap job {job_id} ended with code {rc}"
        raise ClusterError(f"{name} is not ready: {detail}; full log: sky logs {name} {job_id}")
    _sky_call("exec (sentinel)", name, lambda: sky.stream_and_get(sky.exec(sentinel_task(idle, workdir), cluster_name=name)))
    print(f"rayjobs: {name} is ready; autostop after {idle} idle minute(s) (no running or queued Ray job)", file=out)
    rec = connect(name, out=out)
    print("rayjobs: once per storage root, prepare the presets' data: "
          "python -m rayjobs.submit -m +exp=prepare_data rayjobs.prepare.dataset=gsm8k,math", file=out)
    return rec


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
        disconnect()
    sky = sdk or _sky()
    print(f"rayjobs: tearing down {name} ...", file=out)
    _sky_call("down", name, lambda: sky.stream_and_get(sky.down(name)))
    token = cluster_dir(name) / "auth_token"
    token.unlink(missing_ok=True)
    print(f"rayjobs: {name} is down (the storage bucket/volume is kept)", file=out)


# --------------------------------------------------------------------------- ssh + tunnel
def _ssh_config(name: str) -> Optional[str]:
    cfg = os.environ.get("RAYJOBS_SSH_CONFIG")
    if cfg:
        return cfg
    sky_cfg = Path.home() / ".sky" / "generated" / "ssh" / name  # SkyPilot's per-cluster entry
    return str(sky_cfg) if sky_cfg.exists() else None


def _ssh(name: str, *extra: str) -> list[str]:
    cmd = ["ssh"]
    cfg = _ssh_config(name)
    if cfg:
        cmd += ["-F", cfg]
    return cmd + ["-o", "BatchMode=yes", "-o", "ConnectTimeout=20", *extra, name]


def _remote_state(name: str) -> dict[str, Any]:
    """The head's readiness record, and its token stored locally (one SSH round trip)."""
    node_dir = os.environ.get("RAYJOBS_REMOTE_NODE_DIR", "~/.rayjobs/node")
    script = f'd={node_dir}; cat "$d/ready.json" && echo @@token@@ && cat "$d/auth_token"'
    try:
        r = subprocess.run(_ssh(name) + [script], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ClusterError(f"ssh {name} failed ({e.__class__.__name__}); is the cluster up? (`sky status {name}`)") from e
    if r.returncode != 0 or "@@token@@" not in r.stdout:
        why = (r.stderr.strip().splitlines() or ["no readiness record on the head"])[-1]
        raise ClusterError(f"cannot read {name}'s readiness record over ssh ({why}): run `rayjobs up` (or `sky status {name}`)")
    doc, token = r.stdout.split("@@token@@", 1)
    try:
        rec = json.loads(doc)
    except ValueError as e:
        raise ClusterError(f"{name}'s readiness record is not JSON: run `rayjobs up` again") from e
    if token.strip():
        _write_secret(cluster_dir(name) / "auth_token", token.strip())
    return rec


def _free_port(preferred: int) -> int:
    from rayjobs.embedded import free_port

    port = free_port(preferred)
    if port is None:
        raise ClusterError("no free local port for the tunnel")
    return port


def _tunnel_alive(tunnel: dict[str, Any]) -> bool:
    """Our ssh process is still there (the PID is checked against its command line)."""
    pid = tunnel.get("pid")
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, TypeError):
        return False
    return bool(cmd) and cmd[0].endswith(b"ssh") and tunnel.get("forward", "").encode() in cmd


def _dashboard_up(url: str, timeout: float = 2.0) -> bool:
    from rayjobs.embedded import _alive

    return _alive(url, timeout=timeout)


def connect(name: Optional[str] = None, port: Optional[int] = None, out: Any = None,
            timeout: float = 60.0) -> dict[str, Any]:
    """Open (or reuse) the SSH tunnel to ``name``'s Jobs API and remember the cluster."""
    out = out or sys.stderr
    rec = settings.remembered_cluster()
    name = name or rec.get("name") or DEFAULT_NAME
    tunnel = rec.get("tunnel") or {}
    if rec.get("name") == name and _tunnel_alive(tunnel) and (port in (None, tunnel.get("local_port"))) \
            and _dashboard_up(rec["address"]):
        print(f"rayjobs: reusing the tunnel to {name} at {rec['address']} (ssh pid {tunnel['pid']})", file=out)
        return rec
    if rec.get("name") == name:
        disconnect()
    state = _remote_state(name)
    local = _free_port(port or REMOTE_DASHBOARD_PORT)
    remote = int(str(state.get("dashboard", "127.0.0.1:8265")).rsplit(":", 1)[-1])
    forward = f"127.0.0.1:{local}:127.0.0.1:{remote}"
    log = cluster_dir(name) / "tunnel.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as err:
        proc = subprocess.Popen(
            _ssh(name, "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=30",
                 "-o", "ServerAliveCountMax=3", "-L", forward),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    url = f"http://127.0.0.1:{local}"
    deadline = time.monotonic() + timeout
    while not _dashboard_up(url, timeout=1.0):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.terminate()
            why = (log.read_text().strip().splitlines() or ["no answer"])[-1]
            raise ClusterError(f"the SSH tunnel to {name} did not come up ({why}); check `ssh {name}`")
        time.sleep(0.2)
    new = {
        "name": name,
        "address": url,
        "storage": state.get("storage"),
        "token_path": str(cluster_dir(name) / "auth_token"),
        "nodes": state.get("nodes"),
        "gpus_per_node": state.get("gpus_per_node"),
        "gpus": state.get("gpus"),
        "ray_version": state.get("ray_version"),
        "verl_version": state.get("verl_version"),
        "tunnel": {"pid": proc.pid, "local_port": local, "forward": forward, "ssh_host": name},
        "connected_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path = settings.cluster_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(new, indent=2) + "\n")
    print(f"rayjobs: connected to {name}: {new['nodes']} node(s) x {new['gpus_per_node']} GPU(s), "
          f"Jobs API at {url} (ssh pid {proc.pid}); storage {new['storage']}", file=out)
    return new


def disconnect() -> bool:
    """Close the remembered tunnel (by PID, only if it is still our ssh) and forget the cluster."""
    rec = settings.remembered_cluster()
    tunnel = rec.get("tunnel") or {}
    closed = False
    if _tunnel_alive(tunnel):
        try:
            os.kill(int(tunnel["pid"]), signal.SIGTERM)
            closed = True
        except ProcessLookupError:
            pass
    settings.cluster_file().unlink(missing_ok=True)
    return closed


# --------------------------------------------------------------------------- view
def view() -> dict[str, Any]:
    """Nodes (GPUs/CPUs used and total), job counts and the queue of the current target."""
    from rayjobs import jobs

    target = settings.resolve_target()
    if target.embedded:
        from rayjobs import embedded

        target = embedded.ensure(quiet=True)
    c = jobs.client(target)
    try:
        nodes = _get(c, "/api/v0/nodes?detail=true&limit=10000")["data"]["result"]["result"]
        status = _get(c, "/api/cluster_status?format=0")["data"]["clusterStatus"]
        usage = (status.get("loadMetricsReport") or {}).get("usageByNode") or {}
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ClusterUnreachable(f"could not read the cluster's nodes at {target.address}: {e}") from e
    rows = []
    for n in nodes:
        if str(n.get("state")) != "ALIVE":
            continue
        use = usage.get(n["node_id"], {})
        total = n.get("resources_total", {})
        gpu_used, gpu_total = (use.get("GPU") or [0.0, total.get("GPU", 0.0)])[:2]
        cpu_used, cpu_total = (use.get("CPU") or [0.0, total.get("CPU", 0.0)])[:2]
        rows.append({"ip": n.get("node_ip"), "head": bool(n.get("is_head_node")), "node_id": n["node_id"],
                     "gpus": gpu_total, "gpus_used": gpu_used, "cpus": cpu_total, "cpus_used": cpu_used})
    rows.sort(key=lambda r: (not r["head"], str(r["ip"])))
    all_jobs = jobs.list_jobs(c)
    from rayjobs import queueview

    overlay: dict[str, Any] = queueview.overlay(c, all_jobs)
    counts: dict[str, int] = {}
    queued = []
    for j in all_jobs:
        sid = j.submission_id or j.job_id
        st = (overlay.get(sid) or {}).get("status") or str(getattr(j.status, "value", j.status)).split(".")[-1]
        counts[st] = counts.get(st, 0) + 1
        if st == "QUEUED":
            queued.append({"id": sid, "queue_position": overlay[sid].get("queue_position")})
    queued.sort(key=lambda q: q["queue_position"] or 0)
    rec = settings.remembered_cluster()
    return {
        "name": rec.get("name") if target.source.startswith("cluster") else target.source,
        "address": target.address,
        "nodes": rows,
        "gpus": sum(r["gpus"] for r in rows),
        "gpus_used": sum(r["gpus_used"] for r in rows),
        "gpus_free": sum(r["gpus"] - r["gpus_used"] for r in rows),
        "jobs": counts,
        "queue": queued,
    }


def _get(c: Any, path: str) -> Any:
    r = c._do_request("GET", path)
    if r.status_code != 200:
        raise RuntimeError(f"GET {path}: HTTP {r.status_code}")
    return r.json()


def render(v: dict[str, Any]) -> str:
    """The human view of :func:`view`."""
    lines = [f"cluster {v['name']} at {v['address']}: {len(v['nodes'])} node(s), "
             f"GPUs {v['gpus_used']:g} used / {v['gpus_free']:g} free / {v['gpus']:g} total"]
    lines.append(f"  {'NODE':<18}{'ROLE':<8}{'GPU used/total':>16}{'CPU used/total':>16}")
    for r in v["nodes"]:
        lines.append(f"  {str(r['ip']):<18}{'head' if r['head'] else 'worker':<8}"
                     f"{r['gpus_used']:>9g}/{r['gpus']:<6g}{r['cpus_used']:>9g}/{r['cpus']:<6g}")
    order = ["RUNNING", "QUEUED", "PENDING", "SUCCEEDED", "FAILED", "STOPPED"]
    jobs = ", ".join(f"{v['jobs'][s]} {s}" for s in order if v["jobs"].get(s)) or "none"
    lines.append(f"jobs: {jobs}")
    for q in v["queue"]:
        lines.append(f"  queued #{q['queue_position']}: {q['id']}")
    return "\n".join(lines)

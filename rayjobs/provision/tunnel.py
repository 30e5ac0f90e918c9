"""The laptop's way in: an SSH tunnel to the head's loopback-only Jobs API (``rayjobs connect``).

``connect`` reads the head's readiness record and token over SSH (SkyPilot writes an SSH config
entry per cluster), opens ``ssh -N -L 127.0.0.1:<local>:127.0.0.1:8265 <cluster>`` (or reuses a
live one) and remembers the cluster in ``$RAYJOBS_HOME/cluster.json``, so later commands need no
address. ``disconnect`` closes it by PID (only if it is still our ssh) and forgets the cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from rayjobs import settings
from rayjobs.provision.clusterdir import DEFAULT_NAME, REMOTE_DASHBOARD_PORT, ClusterError, cluster_dir, write_secret


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


def remote_state(name: str) -> dict[str, Any]:
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
        write_secret(cluster_dir(name) / "auth_token", token.strip())
    return rec


def _free_port(preferred: int) -> int:
    from rayjobs.client.embedded import free_port

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
    from rayjobs.client.dashboard import Dashboard

    return Dashboard(settings.Target(url, "tunnel"), timeout=timeout).alive()


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
    state = remote_state(name)
    local = _free_port(port or REMOTE_DASHBOARD_PORT)
    remote = int(str(state.get("dashboard", "127.0.0.1:8265")).rsplit(":", 1)[-1])
    forward = f"127.0.0.1:{local}:127.0.0.1:{remote}"
    extra = _extra_forwards(state, taken={local})
    log = cluster_dir(name) / "tunnel.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as err:
        proc = subprocess.Popen(
            _ssh(name, "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=30",
                 "-o", "ServerAliveCountMax=3", "-L", forward,
                 *[a for f in extra.values() for a in ("-L", f["forward"])]),
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
    new = _record(name, url, state, extra, tunnel={"pid": proc.pid, "local_port": local, "forward": forward,
                                                "ssh_host": name, "forwards": [f["forward"] for f in extra.values()]})
    path = settings.cluster_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(new, indent=2) + "\n")
    print(f"rayjobs: connected to {name}: {new['nodes']} node(s) x {new['gpus_per_node']} GPU(s), "
          f"Jobs API at {url} (ssh pid {proc.pid}); storage {new['storage']}", file=out)
    print(metrics_help(new), file=out)
    return new


def _record(name: str, url: str, state: dict[str, Any], extra: dict[str, dict[str, Any]],
            tunnel: dict[str, Any]) -> dict[str, Any]:
    """The remembered cluster: what the head's readiness record says, and the tunnel's ports."""
    return {
        "name": name,
        "address": url,
        "storage": state.get("storage"),
        "token_path": str(cluster_dir(name) / "auth_token"),
        "nodes": state.get("nodes"),
        "gpus_per_node": state.get("gpus_per_node"),
        "gpus": state.get("gpus"),
        "ray_version": state.get("ray_version"),
        "verl_version": state.get("verl_version"),
        "secrets": state.get("secrets"),  # names the cluster's jobs get (preflight's secret check)
        # Tunnelled head-loopback ports: the queue's API, the metrics gateway (every node's Ray
        # metrics), and the head's Prometheus / Grafana when someone starts them there (see metrics_help).
        **{k: f"http://127.0.0.1:{f['local']}" for k, f in extra.items()},
        "ray_temp_dir": state.get("ray_temp_dir"),
        "tunnel": tunnel,
        "connected_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


#: Head-loopback ports tunnelled besides the Jobs API: name -> (the ready record's key or a fixed
#: remote port, the preferred local port). ``api`` is the queue's API (every rayjobs command talks
#: to it); Prometheus and Grafana are the user's to start on the head (metrics_help says how, with
#: Ray's own configs), bound to its loopback like the rest.
FORWARDS = {"api": ("api", 8263), "metrics": ("metrics", 8264), "prometheus": (9090, 9090), "grafana": (3000, 3000)}


def _extra_forwards(state: dict[str, Any], taken: set[int]) -> dict[str, dict[str, Any]]:
    """``{name: {"local": port, "forward": "127.0.0.1:L:127.0.0.1:R"}}`` for :data:`FORWARDS`."""
    out = {}
    for name, (remote, preferred) in FORWARDS.items():
        if isinstance(remote, str):
            addr = state.get(remote)
            if not addr:  # an older node script, or the gateway is off (RAYJOBS_METRICS_PORT=0)
                continue
            remote = int(str(addr).rsplit(":", 1)[-1])
        local = _free_port(preferred)
        while local in taken:
            local = _free_port(local + 1)
        taken.add(local)
        out[name] = {"local": local, "forward": f"127.0.0.1:{local}:127.0.0.1:{remote}"}
    return out


def metrics_help(rec: dict[str, Any]) -> str:
    """How to see the cluster's metrics from here: the gateway, and Prometheus + Grafana on the
    head with the configs Ray wrote into its session dir (their ports stay on the head's loopback)."""
    name, metrics = rec["name"], rec.get("metrics")
    if not metrics:
        return (f"rayjobs: {name}'s head serves no metrics gateway (set RAYJOBS_METRICS_PORT, or run "
                f"`rayjobs up` again with this rayjobs); `rayjobs cluster` shows no GPU use")
    ray_metrics = f"{rec.get('ray_temp_dir') or '/tmp/ray'}/session_latest/metrics"
    return "\n".join([
        f"rayjobs: every node's Ray metrics (GPU utilisation and memory, CPU, RAM, network): {metrics}/metrics "
        f"(Prometheus text; `rayjobs cluster` shows them per node)",
        f"rayjobs: Prometheus + Grafana with Ray's own configs and dashboards, on the head's loopback:",
        f"  ssh {name} 'nohup prometheus --config.file={ray_metrics}/prometheus/prometheus.yml "
        f"--web.listen-address=127.0.0.1:9090 >/tmp/prometheus.log 2>&1 &'",
        f"  ssh {name} 'GF_SERVER_HTTP_ADDR=127.0.0.1 nohup grafana server --homepath /usr/share/grafana "
        f"--config {ray_metrics}/grafana/grafana.ini >/tmp/grafana.log 2>&1 &'",
        f"  then Prometheus at {rec.get('prometheus')}, Grafana at {rec.get('grafana')} (folder Ray); "
        f"or scrape {metrics}/metrics from a Prometheus here with honor_labels: true",
    ])


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

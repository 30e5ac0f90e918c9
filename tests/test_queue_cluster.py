"""A real multi-node Ray cluster with fake GPUs, for the queue tests and benchmarks (no tests here).

Every node is a ``ray start`` on 127.0.0.1 (several raylets on one IP work when each has its own
ports and worker-port range), declaring ``--num-gpus``/``--num-cpus`` (Ray does not check GPUs).
It runs inside whatever network namespace the caller is in (the test session's, or a benchmark's
private one). ``HOME`` and ``RAY_AUTH_MODE`` are pinned so a stray ``~/.ray/auth_token`` cannot
switch auth on; the cluster is stopped by PID only (never the `ray` CLI's stop).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional, Sequence

from rayjobs.client import headprocs

REPO = Path(__file__).resolve().parent.parent


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free port, never one handed out before in this process: a port picked but not yet bound
    is free again, and the kernel gave it twice (gcs and node manager, 'used by other components')."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free port not handed out already in 100 tries")


class FakeGpuCluster:
    """``nodes``: one ``(gpus, cpus)`` per node, the first is the head."""

    def __init__(self, root: Path, nodes: Sequence[tuple[int, int]] = ((2, 6), (2, 6)),
                 env: Optional[dict[str, str]] = None, worker_port_base: int = 30000) -> None:
        from rayjobs.shared import HEAD_ENV

        self.root = Path(root)
        self.nodes = list(nodes)
        self.gcs_port = free_port()
        self.dash_port = free_port()
        self.worker_port_base = worker_port_base
        self.env = dict(os.environ)
        for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            self.env.pop(var, None)
        self.env.update(HEAD_ENV)
        # Its own storage root: the queue's durable store lives there (not the test session's).
        self.env.update({"HOME": str(self.root / "home"), "RAY_AUTH_MODE": "disabled",
                         "RAYJOBS_STORAGE": str(self.root / "storage"), "RAYJOBS_DASHBOARD": self.address,
                         "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
        self.env.update(env or {})
        self.ray = shutil.which("ray", path=self.env["PATH"]) or "ray"

    @property
    def address(self) -> str:
        """The dashboard / Jobs API URL."""
        return f"http://127.0.0.1:{self.dash_port}"

    @property
    def gcs(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def _node_cmd(self, i: int, gpus: int, cpus: int) -> list[str]:
        lo = self.worker_port_base + i * 1000
        cmd = [self.ray, "start", "--node-ip-address=127.0.0.1", f"--num-gpus={gpus}", f"--num-cpus={cpus}",
               f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
               f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
               f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
               f"--min-worker-port={lo}", f"--max-worker-port={lo + 999}",
               "--object-store-memory=100000000", "--disable-usage-stats"]
        if i == 0:
            cmd += ["--head", f"--port={self.gcs_port}", "--dashboard-host=127.0.0.1",
                    f"--dashboard-port={self.dash_port}", f"--ray-client-server-port={free_port()}",
                    "--include-dashboard=true"]
        else:
            cmd += [f"--address={self.gcs}"]
        # Each node its own temp dir (as on separate machines): nodes sharing one would share
        # runtime_resources/, and one node's runtime-env agent deletes a working_dir another uses.
        cmd.append(f"--temp-dir={self.root / f'ray{i}'}")
        return cmd

    def start(self, timeout: float = 120.0) -> "FakeGpuCluster":
        (self.root / "home").mkdir(parents=True, exist_ok=True)
        for i, (gpus, cpus) in enumerate(self.nodes):
            env = dict(self.env)
            if i > 0:  # =0 keeps the head on 127.0.0.1, but a worker node refuses to join with it
                env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
            out = subprocess.run(self._node_cmd(i, gpus, cpus), env=env, capture_output=True, text=True,
                                 timeout=timeout)
            if out.returncode != 0:
                self.stop()
                raise RuntimeError(f"ray start (node {i}) failed: {out.stderr[-2000:]}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                alive = [n for n in self.state("/api/v0/nodes?limit=100") if n.get("state") == "ALIVE"]
                if len(alive) == len(self.nodes) and self._jobs_ready():
                    return self
            except Exception:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the fake cluster did not form {len(self.nodes)} nodes within {timeout:.0f} s")

    def _jobs_ready(self) -> bool:
        """The Jobs API answers and the autoscaler's view (``/api/cluster_status``, which lags a
        joining node by seconds; preflight reads it) lists every node."""
        with urllib.request.urlopen(self.address + "/api/jobs/", timeout=5) as r:
            if r.status != 200:
                return False
        with urllib.request.urlopen(self.address + "/api/cluster_status?format=0", timeout=5) as r:
            usage = json.loads(r.read())["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"]
        return len(usage) == len(self.nodes)

    def state(self, path: str) -> Any:
        """GET a state-API path; returns ``data.result.result``."""
        with urllib.request.urlopen(self.address + path, timeout=10) as r:
            return json.loads(r.read())["data"]["result"]["result"]

    def pids(self) -> list[int]:
        """Every process of this cluster: those whose command lines name its temp dir or GCS address, and
        their descendants (Ray's renamed workers, each job's supervisor and driver)."""
        return headprocs.with_descendants(headprocs.pids_naming(
            *(str(self.root / f"ray{i}") for i in range(len(self.nodes))),
            f"127.0.0.1:{self.gcs_port}", f"--gcs-address={self.gcs}", f"--address={self.gcs}"))

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM then SIGKILL every PID of this cluster (never the `ray` CLI's stop)."""
        headprocs.terminate(self.pids, timeout, poll=0.2)

    def dashboard(self) -> Any:
        """rayjobs' client of this cluster (no token: the test cluster runs without auth)."""
        from rayjobs.client.dashboard import Dashboard
        from rayjobs.settings import Target

        return Dashboard(Target(self.address, "test cluster"))

    def client(self) -> Any:
        """Ray's own Jobs SDK client, what the tests check the cluster with."""
        return self.dashboard().sdk

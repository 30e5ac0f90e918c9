"""Real multi-node Ray clusters with fake GPUs, for the tests of the ``cluster`` tier (and benchmarks).

Every node is a ``ray start`` on 127.0.0.1 (several raylets on one IP work when each has its own
ports and worker-port range), declaring ``--num-gpus``/``--num-cpus`` (Ray does not check GPUs),
with a stand-in ``nvidia-smi`` first on its PATH (``tests/workloads/bin``: "GPU processes" from
:attr:`FakeGpuCluster.apps`). It runs inside whatever network namespace the caller is in (the test
session's, or a benchmark's private one). ``HOME`` and ``RAY_AUTH_MODE`` are pinned so a stray
``~/.ray/auth_token`` cannot switch auth on; a cluster is stopped by PID only (never the ``ray``
CLI's stop). The queue starts with the head (as the node script starts it) and the laptop finds its
API as it finds any head's: from the file the queue writes into the head's log dir.

:class:`Clusters` is the one factory: the session shares a cluster between the tests that ask for
the same shape and head settings; a test that breaks its cluster (kills the head) asks for a
``fresh`` one of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional, Sequence

from rayjobs.client import headprocs

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "tests" / "workloads" / "bin"
_HANDED_OUT: set[int] = set()
#: Worker ports per node: a range each, all of them below the ephemeral range free_port draws from.
WORKER_PORTS = 100
#: A cluster's worker ports: a slot of up to 4 nodes' ranges, from 20000 up to the ephemeral range
#: (32768). Below 20000 is Ray's own default range, where the embedded head's workers bind.
SLOT, FIRST_SLOT, SLOTS = 4 * WORKER_PORTS, 20000, (32768 - 20000) // (4 * WORKER_PORTS)


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
    """``nodes``: one ``(gpus, cpus)`` per node, the first is the head; ``env``: the head's settings."""

    def __init__(self, root: Path, nodes: Sequence[tuple[int, int]] = ((2, 6), (2, 6)),
                 env: Optional[dict[str, str]] = None, worker_port_base: int = 30000) -> None:
        from rayjobs.shared import HEAD_ENV

        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.nodes = list(nodes)
        self.gcs_port, self.dash_port, self.api_port = free_port(), free_port(), free_port()
        self.worker_port_base = worker_port_base
        self.apps = self.root / "gpu-apps"  #: the fake nvidia-smi's "GPU processes" (pid,MiB[,PATH] lines)
        self.smi_calls = self.root / "gpu-calls"
        self.apps.write_text("")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
        self.env.update(HEAD_ENV)
        # Its own storage root: the queue's durable store lives there (not the test session's).
        # Its own TMPDIR (its nodes share it, as processes of one machine do), removed with it: Ray's
        # dashboard leaves its multiprocessing pymp-* dir there on every stop.
        self.env.update({"HOME": str(self.root / "home"), "RAY_AUTH_MODE": "disabled", "TMPDIR": str(self.root / "tmp"),
                         "RAYJOBS_STORAGE": str(self.root / "storage"), "RAYJOBS_DASHBOARD": self.address,
                         "RAYJOBS_API_PORT": str(self.api_port), "FAKE_NVIDIA_SMI_APPS": str(self.apps),
                         "FAKE_NVIDIA_SMI_CALLS": str(self.smi_calls), "RAYJOBS_REAP_GPU_WAIT_S": "20",
                         "PATH": os.pathsep.join([str(BIN), os.path.dirname(sys.executable), os.environ.get("PATH", "")])})
        self.env.update(env or {})
        self.ray = shutil.which("ray", path=self.env["PATH"]) or "ray"
        self._queue: Optional[KeptQueue] = None

    # ------------------------------------------------------------------ where it is
    @property
    def address(self) -> str:
        """The dashboard / Jobs API URL."""
        return f"http://127.0.0.1:{self.dash_port}"

    @property
    def gcs(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def storage(self) -> Path:
        """Its storage root: its own, unless its settings name another (one several clusters share)."""
        return Path(self.env.get("RAYJOBS_STORAGE") or self.root / "storage")

    @property
    def queue_store(self) -> Path:
        """Its queue's store on its storage root: named by ``RAYJOBS_QUEUE_NAME`` in its settings, else
        by the id its head made once on its machine (here: under its own HOME), as any head started
        outside the node script and the embedded head."""
        from rayjobs.shared import made_once_id

        made = self.root / "home" / ".rayjobs" / "node" / "cluster_id"
        return self.storage / "queue" / (self.env.get("RAYJOBS_QUEUE_NAME") or made_once_id(str(made)))

    def client_env(self, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        """A laptop command's environment for this cluster (its address; the API found from the head)."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_API_SERVER_ADDRESS", "RAYJOBS_API_ADDRESS")}
        env["RAY_ADDRESS"] = self.address
        env.update(extra or {})
        return env

    # ------------------------------------------------------------------ life
    def _node_cmd(self, i: int, gpus: int, cpus: int) -> list[str]:
        lo = self.worker_port_base + i * WORKER_PORTS
        cmd = [self.ray, "start", "--node-ip-address=127.0.0.1", f"--num-gpus={gpus}", f"--num-cpus={cpus}",
               f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
               f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
               f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
               f"--min-worker-port={lo}", f"--max-worker-port={lo + WORKER_PORTS - 1}",
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

    def start(self, timeout: float = 120.0, *, queue: bool = True) -> "FakeGpuCluster":
        """Start every node, wait until they and the Jobs API are up; then the queue (``queue``),
        as the node script does (a head restarted by hand starts without: the first command
        starts it)."""
        for d in ("home", "tmp"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._queue = None
        for i, (gpus, cpus) in enumerate(self.nodes):
            env = dict(self.env)
            if i > 0:  # =0 keeps the head on 127.0.0.1, but a worker node refuses to join with it
                env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
            out = self._start_node(i, gpus, cpus, env, timeout)
            if out.returncode != 0:
                self.stop(hard=True)
                raise RuntimeError(f"ray start (node {i}) failed: {out.stderr[-2000:]}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                alive = [n for n in self.state("/api/v0/nodes?limit=100") if n.get("state") == "ALIVE"]
                if len(alive) == len(self.nodes) and self._jobs_ready():
                    break
            except Exception:
                pass
            time.sleep(0.3)
        else:
            self.stop(hard=True)
            raise RuntimeError(f"the fake cluster did not form {len(self.nodes)} nodes within {timeout:.0f} s")
        if queue:
            self.start_queue()
        return self

    def _start_node(self, i: int, gpus: int, cpus: int, env: dict[str, str], timeout: float) -> Any:
        """``ray start`` of node ``i``; once more if its raylet missed Ray's fixed 30-s window to
        register with the GCS (seen at a load average of 30 on 2 cores), after stopping what that
        try started: only the processes naming the node's temp dir (what a test left of the
        cluster before, e.g. a crashed session's orphans, stays as the test made it)."""
        out = subprocess.run(self._node_cmd(i, gpus, cpus), env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0 and "timed out during startup" in out.stderr:
            headprocs.terminate(lambda: headprocs.pids_naming(str(self.root / f"ray{i}")), 10.0, poll=0.2)
            out = subprocess.run(self._node_cmd(i, gpus, cpus), env=env, capture_output=True, text=True,
                                 timeout=timeout)
        return out

    def start_queue(self, timeout: float = 120.0) -> dict[str, Any]:
        """``python3 -m rayjobs.door.host start`` against this cluster (what the node script runs)."""
        r = subprocess.run([sys.executable, "-m", "rayjobs.door.host", "start"],
                           env=dict(self.env, RAY_ADDRESS=self.gcs), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"the queue did not start: {r.stderr[-2000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def answers(self) -> bool:
        """Its dashboard answers (one bounded request)."""
        try:
            with urllib.request.urlopen(self.address + "/api/version", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

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

    def stop(self, timeout: float = 20.0, *, hard: bool = False) -> None:
        """SIGTERM then SIGKILL every PID of this cluster (``hard``: SIGKILL at once, the session's end)."""
        self._queue = None
        left = headprocs.terminate(self.pids, 0.0 if hard else timeout, poll=0.2)
        if hard and left:  # SIGKILL is not an exit: a killed process stays listed until it is reaped
            headprocs.terminate(self.pids, 10.0, poll=0.1)

    # ------------------------------------------------------------------ clients
    def dashboard(self) -> Any:
        """rayjobs' client of this cluster (no token: the test cluster runs without auth)."""
        from rayjobs.client.dashboard import Dashboard
        from rayjobs.contract.target import Target

        return Dashboard(Target(self.address, "test cluster"))

    def client(self) -> Any:
        """Ray's own Jobs SDK client, what the tests check Ray with."""
        return self.dashboard().sdk

    def queue(self) -> Any:
        """The queue's API (:class:`rayjobs.client.queueapi.QueueAPI`'s calls), found as any command
        finds it, and kept (:class:`KeptQueue`)."""
        if self._queue is None:
            self._queue = KeptQueue(self.dashboard())
        return self._queue

    def settle(self, timeout: float = 120.0) -> None:
        """Stop whatever a test before left waiting or running, and wait until nothing runs (the
        next test sharing this cluster starts on free GPUs)."""
        q = self.queue()
        live = [v["submission_id"] for v in q.jobs() if v["state"] in ("waiting", "admitted")]
        if live:
            q.stop(live)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = q.summary()
            if not s.waiting and not s.admitted and not s.gate:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the shared cluster did not settle within {timeout:.0f} s: {s}")


class KeptQueue:
    """A test cluster's queue API, found once and kept for its calls; found afresh, as a command
    finds it, when it stops answering (its actor or head restarted). Finding it reads a file
    through the head's log API: ~16 ms of the cluster's CPU, against ~1 ms for a call, and the
    tests poll the queue all the time."""

    def __init__(self, dashboard: Any) -> None:
        self._d = dashboard

    def __getattr__(self, name: str) -> Any:
        from rayjobs.client.queueapi import QueueDown

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return getattr(self._d.queue, name)(*args, **kwargs)
            except QueueDown:
                self._d.forget_queue()
                return getattr(self._d.queue, name)(*args, **kwargs)

        return call


class Clusters:
    """The session's clusters: one per shape and head settings, shared; ``fresh`` ones are the test's.

    A shared cluster that only one test file has asked for (its own shape or head settings) is
    stopped when that file ends (:meth:`file_done`): no later file asks for it, and an idle Ray
    cluster costs ~12 % of a core and ~1 GB. The ``common`` ones (the conftest's ``one_node``) stay
    until every file that uses them has ended (:meth:`common_done`: the test process runs those
    files as one unit), at most :attr:`MAX_SHARED` of all kinds at once.
    """

    #: Shared clusters kept alive at once (the least recently used one is stopped beyond it).
    MAX_SHARED = 3

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rjc", dir="/tmp"))
        self.shared: dict[Any, FakeGpuCluster] = {}
        self.fresh: list[FakeGpuCluster] = []
        self.users: dict[Any, set[str]] = {}  #: shared key -> the test files that asked for it
        self.common: set[Any] = set()
        self._n = 0

    def get(self, nodes: Sequence[tuple[int, int]] = ((2, 6),), env: Optional[dict[str, str]] = None, *,
            fresh: bool = False, start: bool = True, common: bool = False, own: str = "") -> FakeGpuCluster:
        """A cluster of ``nodes`` with the head settings ``env``: the session's shared one (settled:
        nothing of an earlier test waits or runs), or a ``fresh`` one this call starts (the fixture
        stops it; ``start`` False leaves that to the test). ``common``: many files share it, kept
        past the end of the file that asked. ``own``: a shared one of that name, apart from the
        others of its shape and settings (the tests of one file that restart or crash its head:
        one start for them all, not one each; a head left down is started again)."""
        key = (tuple(map(tuple, nodes)), tuple(sorted((env or {}).items())), own)
        if not fresh:
            self.users.setdefault(key, set()).add(_current_file())
            if common:
                self.common.add(key)
        if not fresh and key in self.shared:
            c = self.shared.pop(key)
            self.shared[key] = c  # the most recently used last
            if own and not c.answers():  # a test before left its head down (it failed midway)
                c.stop(hard=True)
                c.start()
            c.settle()
            return c
        self._n += 1
        c = FakeGpuCluster(self.root / f"c{self._n}", nodes, env, worker_port_base=self._worker_ports())
        if fresh:
            self.fresh.append(c)
            return c.start() if start else c
        while len(self.shared) >= self.MAX_SHARED:
            old = next(iter(self.shared))
            self.shared.pop(old).stop(hard=True)
        self.shared[key] = c
        return c.start()

    def _worker_ports(self) -> int:
        """The first worker port of a new cluster: a slot no live cluster of this test process
        holds, in this test process's own share of the slots. Two raylets that hand out the same
        range race to bind the same ports (each checks a port is free, then its worker binds it a
        second later), and a worker or a driver that loses the race dies."""
        count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
        index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").lstrip("gw") or 0) % count
        share = SLOTS // count
        held = {c.worker_port_base for c in [*self.shared.values(), *self.fresh]}
        free = [FIRST_SLOT + (index * share + k) * SLOT for k in range(share)]
        for base in free:
            if base not in held:
                return base
        raise RuntimeError(f"all {share} worker-port slots of this test process are held by live clusters")

    def file_done(self, path: str) -> None:
        """The test file ``path`` ended: stop the shared clusters no other file has asked for."""
        self._stop_shared(lambda k: k not in self.common and self.users.get(k) == {path})

    def common_done(self) -> None:
        """Every file that shares the common clusters has ended (its unit, ``tests/units.py``): stop them."""
        self._stop_shared(lambda k: k in self.common)

    def _stop_shared(self, which: Any) -> None:
        for key in [k for k in self.shared if which(k)]:
            self.shared.pop(key).stop(hard=True)

    def stop_fresh(self) -> None:
        """Stop the fresh clusters (at the end of the test that asked for them)."""
        while self.fresh:
            self.fresh.pop().stop(hard=True)

    def close(self) -> None:
        for c in [*self.shared.values(), *self.fresh]:
            c.stop(hard=True)
        shutil.rmtree(self.root, ignore_errors=True)
        if os.environ.get("RAYJOBS_CLUSTER_STATS"):  # how many clusters this test process started
            with open(os.environ["RAYJOBS_CLUSTER_STATS"], "a") as f:
                f.write(f"{os.getpid()} started {self._n} clusters, shared at most {self.MAX_SHARED} at once\n")


def _current_file() -> str:
    """The test file running now (pytest's ``PYTEST_CURRENT_TEST``: ``tests/x.py::test (setup)``)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]

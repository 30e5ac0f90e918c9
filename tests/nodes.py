"""Fake machines for multi-node tests: one network + PID + mount namespace per "node".

Layout (design §6)::

    <prefix>sw  ("switch" namespace)  bridge br0 ── veth ── <prefix>n0  eth0 10.200.X.10/24  (rank 0)
                                                 ── veth ── <prefix>n1  eth0 10.200.X.11/24  (rank 1) ...

* Every node namespace gets ``lo`` up, an ``eth0`` on a /24 test subnet that exists only inside
  these namespaces, and a default route via ``eth0`` (so Ray's address probe picks it). There is no
  uplink: nothing leaves the namespaces.
* A node "boots" by starting a small init (PID 1) under ``unshare --pid --fork --mount-proc`` in its
  network namespace, with a private ``/tmp`` (a bind mount of the node's own dir). Every command
  run "on the node" enters that init's net, PID and mount namespaces (``nsenter``), so the node's
  scripts see only the node's own processes and files, as on a real machine, and processes that
  daemonize (``ray start``) keep living after the script that started them exits.
* :meth:`Node.crash` kills every PID of the node's namespace (a node failure); :meth:`Node.boot`
  again is a reboot (same address, same disk, fresh processes).
* Everything is stopped by PID (``ip netns pids``), never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).parent))
import netns  # noqa: E402

# PID 1 of a node: a private /tmp, then reap orphans (daemonized Ray processes end up here).
_INIT = r"""
import os, subprocess, sys, time
# Paths under /tmp that every node must still see (the checkout and its venv, when they live
# there, as in a CI clone): bind them into the private /tmp first, then mount it recursively.
for keep in sys.argv[3:]:
    inner = os.path.join(sys.argv[1], os.path.relpath(keep, "/tmp"))
    os.makedirs(inner, exist_ok=True)
    subprocess.run(["mount", "--bind", keep, inner], check=True)
subprocess.run(["mount", "--rbind", sys.argv[1], "/tmp"], check=True)
open(sys.argv[2], "w").write("up")  # node dirs live outside /tmp, so the mount hides nothing
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _under_tmp() -> list[str]:
    """The checkout and the Python prefix, if they live under /tmp (outermost first, no duplicates)."""
    repo = Path(__file__).resolve().parent.parent
    paths = {str(p) for p in (repo, Path(sys.prefix).resolve(), Path(sys.executable).resolve().parent.parent)
             if str(p).startswith("/tmp/")}
    out: list[str] = []
    for p in sorted(paths, key=len):
        if not any(p == o or p.startswith(o + "/") for o in out):
            out.append(p)
    return out


class Node:
    def __init__(self, net: "Net", rank: int) -> None:
        self.net = net
        self.rank = rank
        self.ns = f"{net.prefix}n{rank}"
        self.ip = f"{net.subnet}.{10 + rank}"
        self.dir = net.root / f"n{rank}"
        self.home = self.dir / "home"
        self.tmp = self.dir / "tmp"
        self.init_pid: Optional[int] = None
        self._unshare: Optional[subprocess.Popen] = None

    # ------------------------------------------------------------------ lifecycle
    def create(self) -> None:
        for d in (self.home, self.tmp):
            d.mkdir(parents=True, exist_ok=True)
        netns.create(self.ns)
        veth = f"{self.net.prefix}v{self.rank}"
        _ip("-n", self.ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns", self.net.switch)
        _ip("-n", self.net.switch, "link", "set", veth, "master", "br0")
        _ip("-n", self.net.switch, "link", "set", veth, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.ip}/24", "dev", "eth0")
        _ip("-n", self.ns, "link", "set", "eth0", "up")
        _ip("-n", self.ns, "route", "add", "default", "dev", "eth0")

    def boot(self, timeout: float = 20.0) -> None:
        """Start the node's PID 1 (fresh PID and mount namespaces, private /tmp)."""
        marker = self.dir / "booted"
        marker.unlink(missing_ok=True)
        self._unshare = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, "unshare", "--pid", "--fork", "--mount-proc",
             sys.executable, "-c", _INIT, str(self.tmp), str(marker), *_under_tmp()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.exists():
                self.init_pid = self._find_init()
                if self.init_pid:
                    return
            if self._unshare.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"node {self.ns} did not boot")

    def _find_init(self) -> Optional[int]:
        # `ip netns exec` execs unshare (same PID); unshare forks the init (PID 1 inside).
        assert self._unshare is not None
        try:
            kids = Path(f"/proc/{self._unshare.pid}/task/{self._unshare.pid}/children").read_text().split()
        except OSError:
            return None
        return int(kids[0]) if kids else None

    def pids(self) -> list[int]:
        return netns.pids(self.ns)

    def crash(self, timeout: float = 10.0) -> None:
        """Kill every process of this node (SIGKILL, by PID): a node failure."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.pids()
            if not live:
                break
            for pid in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        if self._unshare is not None:
            try:
                self._unshare.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.init_pid = None

    # ------------------------------------------------------------------ running things on it
    def argv(self, cmd: Sequence[str]) -> list[str]:
        assert self.init_pid, f"node {self.ns} is not booted"
        return ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-m", "--", *cmd]

    def env(self, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        """A clean per-node environment: own HOME, auth mode pinned, no address leaking in."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RAY_", "RAYJOBS_", "SKYPILOT_"))}
        env.update(HOME=str(self.home), RAY_AUTH_MODE="token", TMPDIR="/tmp")
        env.update(extra or {})
        return env

    def run(self, cmd: Sequence[str], env: Optional[dict[str, str]] = None, timeout: float = 120.0,
            **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(cmd), env=self.env(env), capture_output=True, text=True,
                              timeout=timeout, **kw)

    def popen(self, cmd: Sequence[str], env: Optional[dict[str, str]] = None, **kw) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.STDOUT)
        return subprocess.Popen(self.argv(cmd), env=self.env(env), text=True, **kw)


class Host:
    """A plain network namespace on the switch (e.g. the user's laptop): no init, no default route."""

    def __init__(self, net: "Net", name: str, ip: str) -> None:
        self.net, self.ip = net, ip
        self.ns = f"{net.prefix}{name}"
        self.dir = net.root / name

    def create(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        netns.create(self.ns)
        veth = f"{self.net.prefix}v{self.ns[-2:]}"
        _ip("-n", self.ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns", self.net.switch)
        _ip("-n", self.net.switch, "link", "set", veth, "master", "br0")
        _ip("-n", self.net.switch, "link", "set", veth, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.ip}/24", "dev", "eth0")
        _ip("-n", self.ns, "link", "set", "eth0", "up")

    def run(self, cmd: Sequence[str], env: Optional[dict[str, str]] = None, timeout: float = 120.0,
            **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns, *cmd], env=env, capture_output=True,
                              text=True, timeout=timeout, **kw)

    def destroy(self) -> None:
        netns.destroy(self.ns)


def host_pid(popen: subprocess.Popen, timeout: float = 10.0) -> int:
    """The host-side PID of the program ``Node.popen`` started (nsenter forks it into the node)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{popen.pid}/task/{popen.pid}/children").read_text().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        time.sleep(0.05)
    raise RuntimeError("the program did not start in the node")


class Net:
    """A switch namespace with a bridge, and ``n`` nodes attached to it."""

    def __init__(self, n: int, root: Optional[Path] = None, prefix: str = "", subnet: str = "10.200.7") -> None:
        # Outside /tmp: each node mounts its own private dir over /tmp.
        self.root = Path(root or tempfile.mkdtemp(prefix="rjn", dir="/var/tmp"))
        assert not str(self.root).startswith("/tmp/"), "node dirs must live outside /tmp"
        self.prefix = prefix or f"rn{os.getpid() % 100000}"
        self.subnet = subnet
        self.switch = f"{self.prefix}sw"
        self.nodes = [Node(self, r) for r in range(n)]
        self.hosts: list[Host] = []
        self._created = False

    @property
    def ips(self) -> list[str]:
        return [n.ip for n in self.nodes]

    def create(self, boot: bool = True) -> "Net":
        netns.create(self.switch)
        self._created = True
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for node in self.nodes:
            node.create()
            if boot:
                node.boot()
        return self

    def add_host(self, name: str, ip: str) -> Host:
        host = Host(self, name, ip)
        host.create()
        self.hosts.append(host)
        return host

    def skypilot_env(self, node: Node, gpus_per_node: int = 1, ips: Optional[list[str]] = None) -> dict[str, str]:
        """The variables SkyPilot sets for a task's `run` on this node."""
        ips = ips or self.ips
        return {
            "SKYPILOT_NODE_RANK": str(node.rank),
            "SKYPILOT_NODE_IPS": "\n".join(ips),
            "SKYPILOT_NUM_NODES": str(len(ips)),
            "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus_per_node),
            "SKYPILOT_TASK_ID": f"sky-test-{self.prefix}",
        }

    def destroy(self) -> None:
        for host in self.hosts:
            host.destroy()
        for node in self.nodes:
            node.crash()
            netns.destroy(node.ns)
        if self._created:
            netns.destroy(self.switch)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Net":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

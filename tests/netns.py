"""Network namespaces for tests: every Ray node of the suite runs inside one we create.

The whole pytest process enters a fresh namespace with only ``lo`` up (``setns``), so the Ray
heads it starts and every client (in-process or subprocess) use 127.0.0.1 only and nothing can
reach the machine's real interfaces. Without root (or without ``ip``) the suite runs on plain
loopback and says so. Multi-node tests build their own namespaces on top (see ``tests/nodes.py``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from typing import Optional

CLONE_NEWNET = 0x40000000


def can_use() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def create(name: str, lo_only: bool = True) -> None:
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)


def enter(name: str) -> None:
    """Move this process (and every child it starts later) into namespace ``name``."""
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns failed")
    finally:
        os.close(fd)


def pids(name: str) -> list[int]:
    """The processes in namespace ``name``, but for the ``ip`` that lists them (run from inside it,
    it lists itself: a wait for the namespace to empty would never end)."""
    proc = subprocess.Popen(["ip", "netns", "pids", name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out, _ = proc.communicate()
    return [int(p) for p in out.split() if p.strip().isdigit() and int(p) != proc.pid]


def destroy(name: str, exclude: Optional[set[int]] = None, timeout: float = 10.0) -> None:
    """Stop every process we started in ``name`` (by PID), then delete the namespace."""
    from rayjobs.client.headprocs import terminate

    exclude = exclude or set()
    terminate(lambda: [p for p in pids(name) if p not in exclude], timeout)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)

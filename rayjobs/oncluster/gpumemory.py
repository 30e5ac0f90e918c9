"""GPU memory on this machine as ``nvidia-smi`` lists it: per pid, and waiting until a set of holders is gone.

A process's GPU memory can outlive the process: the driver tears a CUDA context down after its
process has left ``/proc`` (seen on the H200: a halved sweep point's worker, ended by Ray when its
trainer stopped, still listed with 1,454 MiB when the next point was admitted). So the pids a reap
waits for include those ``nvidia-smi`` lists that are no process of this machine any more. A pid
that stays listed though no process here has it for a whole wait is another PID namespace's (a
container sharing the GPU, where the driver reports the host's pids): :func:`remember_foreign`
keeps it in a file per machine, so later reaps do not wait for it again while it is listed.

No Ray import; plain ``/proc`` and ``nvidia-smi`` work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Callable, Iterable, Optional

NVIDIA_SMI_ARGS = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
NVIDIA_SMI_TIMEOUT_S = 10.0
POLL_S = 0.05
#: The start time a holder gone from ``/proc`` is waited for with: no live process has it, so a
#: pid reused by a new process is never taken for it.
GONE = ""


def parse_compute_apps(text: str) -> dict[int, Optional[int]]:
    """``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`` -> {pid: MiB}.

    Args:
        text: its stdout, one ``pid, MiB`` line per process and GPU (a process on two GPUs is
            listed twice: its MiB are summed); ``[N/A]``/``[Not Supported]`` memory gives None.

    Returns:
        GPU memory per pid (None where nvidia-smi does not say).
    """
    out: dict[int, Optional[int]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        pid = int(parts[0])
        mib = int(parts[1]) if parts[1].isdigit() else None
        if mib is None:
            out.setdefault(pid, None)
        else:
            out[pid] = (out.get(pid) or 0) + mib
    return out


def gpu_apps() -> dict[int, Optional[int]]:
    """GPU memory per pid from ``nvidia-smi`` on PATH; {} where there is none (or it fails)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, *NVIDIA_SMI_ARGS], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_compute_apps(out.stdout) if out.returncode == 0 else {}


def wait_freed(holders: dict[int, str], seconds: float, start_of: Callable[[int], Optional[str]],
               poll_s: float = POLL_S) -> dict[int, Optional[int]]:
    """Ask ``nvidia-smi`` until it lists none of ``holders`` (pid -> start time, :data:`GONE` for one
    already gone from ``/proc``: a pid reused by another process is not theirs), for at most
    ``seconds``; those still listed then (pid -> MiB). ``start_of(pid)``: its start time, None if gone."""
    deadline = time.monotonic() + seconds
    while True:
        listed = {}
        for pid, mib in gpu_apps().items():
            start = start_of(pid)
            if pid in holders and (start is None or start == holders[pid]):
                listed[pid] = mib
        if not listed or time.monotonic() >= deadline:
            return listed
        time.sleep(poll_s)


# --------------------------------------------------------------------------- pids of no process here
def _memo_path() -> str:
    return os.path.join(tempfile.gettempdir(), f"rayjobs-reap-{os.getuid()}", "foreign-gpu-pids.json")


def foreign() -> set[int]:
    """The pids remembered as another PID namespace's (listed through a whole wait, no process here)."""
    try:
        d = os.lstat(os.path.dirname(_memo_path()))
        if d.st_uid != os.getuid():  # not ours (a shared /tmp): trust nothing in it
            return set()
        with open(_memo_path()) as f:
            return {int(p) for p in json.load(f)}
    except (OSError, ValueError, TypeError):
        return set()


def remember_foreign(pids: Iterable[int], listed: Iterable[int]) -> None:
    """Add ``pids`` to the memo; keep only those ``nvidia-smi`` still lists (``listed``): a pid it
    no longer lists may be a process of this machine's later (best effort: a memo not written
    costs a later reap one more wait)."""
    now_listed = set(listed)
    keep = sorted((foreign() | set(pids)) & now_listed)
    path = _memo_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(keep, f)
        os.replace(tmp, path)
    except OSError:
        pass

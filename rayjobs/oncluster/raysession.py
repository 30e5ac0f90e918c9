"""Is the Ray session this runner was started in still alive? (A runner outlives a crashed head.)

Ray's job runner (:mod:`rayjobs.oncluster.runner`) is a plain process, not a Ray worker. When the
head's Ray dies hard (every process of its session ended by PID, as a crash or an OOM kill of the
head does), the job supervisors can linger and the runners under them go on: seen on the GPU
machine (docs/gpu-e2e.md §7), where a runner held before its trainer (a pre-started job) was still
waiting after the restart, and started a trainer at the admission of its job's *new* Ray job,
beside the new runner: two trainers for one GPU, one failed "Total available GPUs 0".

A runner's session is the ``session_*`` dir its driver log (its stdout) lives in. At its start the
runner finds that session's raylet (the process whose command line names
``--raylet_socket_name=<session>/sockets/raylet``); the session is alive while that PID still runs
that raylet. A read of ``/proc/PID/cmdline``: no Ray import, no connection (a ``connect`` to the
raylet's socket would work too, but the raylet logs every such probe). Whatever cannot be told
(stdout not a Ray driver log, no raylet found at the start) counts as alive: only a session known to
be dead stops a runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rayjobs.oncluster import attemptlog


def own_session(log: Optional[Path] = None) -> Optional[Path]:
    """The ``session_*`` dir of this process's driver log (``.../session_X/logs/job-driver-*.log``)."""
    log = log if log is not None else attemptlog.own_log()
    if log is None:
        return None
    for parent in log.parents:
        if parent.name.startswith("session_") and parent.name != "session_latest":
            return parent
    return None


def _raylet_mark(session: Path) -> bytes:
    return f"--raylet_socket_name={session}/sockets/raylet".encode()


def raylet_pid(session: Path) -> Optional[int]:
    """The PID of ``session``'s raylet on this machine, if one runs."""
    mark = _raylet_mark(session)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if mark in (d / "cmdline").read_bytes():
                return int(d.name)
        except OSError:
            continue
    return None


class SessionWatch:
    """This process's Ray session, told alive or dead by its raylet's PID (found once, at start)."""

    def __init__(self, session: Optional[Path]) -> None:
        self.session = session
        self.pid = raylet_pid(session) if session is not None else None

    @classmethod
    def of_this_process(cls) -> "SessionWatch":
        return cls(own_session())

    def alive(self) -> bool:
        """False only when the raylet found at the start no longer runs (its PID gone or reused)."""
        if self.session is None or self.pid is None:
            return True
        try:
            return _raylet_mark(self.session) in Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return False

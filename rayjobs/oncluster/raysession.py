"""Is the Ray session this runner was started in still alive? (A runner outlives a crashed head.)

Ray's job runner (:mod:`rayjobs.oncluster.runner`) is a plain process, not a Ray worker. When the
head's Ray dies hard (every process of its session ended by PID, as a crash or an OOM kill of the
head does), the job supervisors can linger and the runners under them go on: seen on the GPU
machine (docs/gpu-e2e.md §7), where a runner held before its trainer (a pre-started job) was still
waiting after the restart, and started a trainer at the admission of its job's *new* Ray job,
beside the new runner: two trainers for one GPU, one failed "Total available GPUs 0".

A runner's session is the ``session_*`` dir its driver log (its stdout) lives in; it is alive while
one of that session's raylet sockets accepts a connection. This reads nothing from Ray, imports no
Ray module and costs one ``connect`` on a Unix socket, so the held runner can ask every few
seconds. Whatever cannot be told (stdout not a Ray driver log, no sockets dir) counts as alive:
only a session known to be dead stops a runner.
"""

from __future__ import annotations

import socket
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


def alive(session: Optional[Path]) -> bool:
    """False only when ``session`` has raylet sockets and none of them accepts a connection."""
    if session is None:
        return True
    sockets = [p for p in (session / "sockets").glob("raylet*") if p.is_socket()]
    if not sockets:  # not a Ray session laid out as Ray 2.x lays it out: cannot tell
        return True
    for path in sockets:  # a crashed raylet leaves its socket file behind: connect() is refused
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2.0)
        try:
            s.connect(str(path))
            return True
        except (ConnectionRefusedError, FileNotFoundError):
            continue  # nobody listens there any more
        except OSError:  # anything else (a timeout, a path too long): cannot tell, so alive
            return True
        finally:
            s.close()
    return False

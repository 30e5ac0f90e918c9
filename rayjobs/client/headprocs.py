"""The processes of a Ray head rayjobs started: found by PID, stopped by PID, nothing else touched.

Several of a head's processes do not name its temp dir on their command line (Ray's client server,
the dashboard and runtime-env agents, which rename themselves ``ray::DashboardAgent``..., the
dashboard's module processes, workers, and each job's driver, which Ray starts in a session of its
own). So the head's ``ray start`` runs in a new session whose id is recorded, and the head's
processes are: those of that session, those whose command line names the temp dir, and every
descendant of those. Never the ``ray`` CLI's stop, never by name: other Rays on the machine
(SkyPilot's own, another user's) must survive.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Optional


class _Proc(NamedTuple):
    ppid: int
    sid: int
    start: int  #: start time (clock ticks since boot): a PID reused later has another
    cmdline: bytes


def _procs() -> dict[int, _Proc]:
    """A snapshot of this user's processes (zombies left out: they hold no port or memory)."""
    uid, out = os.geteuid(), {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if p.stat().st_uid != uid:
                continue
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X"):
            out[int(p.name)] = _Proc(int(fields[1]), int(fields[3]), int(fields[19]), cmdline)
    return out


def start_time(pid: int) -> Optional[int]:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _sid(rec: dict[str, Any], procs: dict[int, _Proc]) -> Optional[int]:
    """The head's session id, unless it may now be someone else's.

    The kernel keeps a session id reserved while any member lives, so it is ours as long as the
    head runs; it is distrusted after a reboot or if a live leader with that PID is not our
    ``ray start`` (the head died long ago and the PID was reused).
    """
    sid = rec.get("sid")
    if not sid or rec.get("boot_id") != boot_id():
        return None
    leader = procs.get(sid)
    return None if leader and leader.start != rec.get("sid_start") else sid


def with_descendants(pids: Iterable[int], procs: Optional[dict[int, _Proc]] = None) -> list[int]:
    """``pids`` (those alive) and every live descendant of them.

    Ray renames its workers (``ray::JobSupervisor``, ``ray::IDLE``) and starts each job's driver in a
    session of its own under one, so only the process tree finds them all.
    """
    procs = _procs() if procs is None else procs
    found = {pid for pid in pids if pid in procs}
    children: dict[int, list[int]] = {}
    for pid, p in procs.items():
        children.setdefault(p.ppid, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return sorted(found)


def head_pids(rec: dict[str, Any], procs: Optional[dict[int, _Proc]] = None,
              roots: Iterable[int] = ()) -> list[int]:
    """Live PIDs of the head ``rec`` describes: its session, what names its temp dir, and
    every descendant of those (and of ``roots``); never this process or its ancestors."""
    procs = _procs() if procs is None else procs
    temp = str(rec["temp_dir"]).encode()
    sid = _sid(rec, procs)
    found = {pid for pid, p in procs.items()
             if (sid and p.sid == sid) or temp + b"/" in p.cmdline or temp + b" " in p.cmdline}
    found |= {pid for pid in roots if pid in procs}
    found = set(with_descendants(found, procs))
    me, mine = os.getpid(), set()
    while me in procs and me not in mine:
        mine.add(me)
        me = procs[me].ppid
    return sorted(found - mine - {os.getpid()})


def pids_naming(*marks: str) -> list[int]:
    """PIDs of the processes whose command line contains any of ``marks`` (this process excluded)."""
    wanted = [m.encode() for m in marks]
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if any(m in cmdline for m in wanted):
            pids.append(int(p.name))
    return sorted(pids)


def terminate(live: Callable[[], Iterable[int]], timeout: float = 20.0, poll: float = 0.1) -> list[int]:
    """SIGTERM the PIDs ``live()`` lists, wait up to half of ``timeout``; then the same with SIGKILL.

    Returns the PIDs still alive at the end. By PID only: never the ``ray`` CLI's stop, which
    would also stop Rays we did not start.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal(list(live()), sig)
        deadline = time.monotonic() + timeout / 2
        while time.monotonic() < deadline and list(live()):
            time.sleep(poll)
    return sorted(live())


def stop_head(rec: dict[str, Any], timeout: float) -> list[int]:
    """Terminate every process of the head ``rec`` in Ray's own order; the PIDs that survived.

    Ray's own shutdown order: the raylet first (it stops its workers and agents), the GCS last (the others
    report to it). All at once, the GCS and the raylet hang in their shutdown (measured on Ray
    2.60: alive 12 s after SIGTERM); in this order the head is gone in ~1.5 s. SIGTERM gets half
    of ``timeout``, then SIGKILL whatever is left.
    """
    procs = _procs()
    # Remember each by PID and start time: once a parent dies its children are reparented and no
    # longer look like descendants, and a PID reused meanwhile is not ours.
    seen = {pid: procs[pid].start for pid in head_pids(rec, procs)}

    def live() -> dict[int, _Proc]:
        now = _procs()
        alive = [pid for pid, st in seen.items() if pid in now and now[pid].start == st]
        for pid in head_pids(rec, now, roots=alive):  # and what they spawned meanwhile
            seen.setdefault(pid, now[pid].start)
        return {pid: now[pid] for pid, st in seen.items() if pid in now and now[pid].start == st}

    def raylets(ps: dict[int, _Proc]) -> list[int]:
        return [pid for pid, p in ps.items() if b"/raylet/raylet " in p.cmdline]

    def all_but_gcs(ps: dict[int, _Proc]) -> list[int]:
        return [pid for pid, p in ps.items() if b"/gcs/gcs_server " not in p.cmdline]

    deadline = time.monotonic() + timeout / 2
    for phase in (raylets, all_but_gcs, lambda ps: list(ps)):
        group = phase(live())
        _signal(group, signal.SIGTERM)
        while time.monotonic() < deadline and set(group) & set(live()):
            time.sleep(0.1)
    _signal(live(), signal.SIGKILL)
    deadline = time.monotonic() + timeout / 2
    while time.monotonic() < deadline and live():
        time.sleep(0.1)
    return sorted(live())


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

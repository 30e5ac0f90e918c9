"""The embedded local head (``rayjobs local start|status|stop``): started or reused, what it is doing,
stopped by PID. The command line only words what these return."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Optional

from rayjobs.contract.status import IN_RAY
from rayjobs.errors import ClusterUnreachable, RayjobsError


@dataclasses.dataclass(frozen=True)
class LocalStart:
    """What :func:`start_local` found or did: the head's dashboard ``address``; ``reused``: it was
    running already (``up_s``: for how long, None where that cannot be told)."""

    address: str
    reused: bool
    up_s: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class LocalStatus:
    """The embedded head as ``rayjobs local status`` shows it.

    ``record``: its record (ports, PIDs, session dir), None when it is not running; ``helper``: the
    warm preflight helper in one line; ``up_s``: seconds since its ``ray start`` (None: unknown);
    ``health``: its queue's ``GET /v1/health`` as a dict (None: not asked, or it did not answer).
    """

    record: Optional[dict[str, Any]]
    helper: str
    up_s: Optional[float] = None
    health: Optional[dict[str, Any]] = None


def start_local(*, say: Optional[Callable[[str], None]] = None) -> LocalStart:
    """Start the embedded head on 127.0.0.1, or reuse the running one; returns once it accepts jobs.

    Args:
        say: told in one line when a start begins (it takes a while).

    Returns:
        Its address, whether it was running already and for how long.

    Raises:
        ClusterUnreachable: it does not start, or a running one cannot accept jobs (the line says to
            stop and start it again).
    """
    from rayjobs.client import embedded

    rec = embedded.running()
    if rec is None:
        if say is not None:
            say("starting the embedded local Ray head on 127.0.0.1 ...")
        return LocalStart(str(embedded.ensure(quiet=True).address), reused=False)
    # A head started earlier (or by an older rayjobs) is reused as is: it must accept jobs too,
    # or `local start` would exit 0 in front of a head that refuses every submit.
    try:
        embedded.wait_ready(rec, timeout=10.0)
    except ClusterUnreachable as e:
        raise ClusterUnreachable(f"{e}; run `rayjobs local stop`, then `rayjobs local start`") from e
    return LocalStart(str(embedded.target(rec).address), reused=True, up_s=uptime_s(rec))


def local_status(*, health: bool = True) -> LocalStatus:
    """The embedded head's record, uptime and (``health``) its queue's health, and the preflight
    helper's line. Never starts anything; the health is asked for a few seconds at most."""
    from rayjobs.client import embedded
    from rayjobs.preflight import helper

    rec = embedded.running()
    line = helper.status_line().removeprefix("rayjobs: ")
    if rec is None:
        return LocalStatus(None, line)
    return LocalStatus(rec, line, uptime_s(rec), _health(rec) if health else None)


def _queue(rec: dict[str, Any]) -> Any:
    """The running head's queue API client, found without starting anything (bounded: 5 s)."""
    from rayjobs.client import embedded
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.client.queueapi import connect_queue

    return connect_queue(Dashboard(embedded.target(rec)), start=False, timeout=5.0)


def _health(rec: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The head's queue's health, or None if it does not answer."""
    try:
        return dataclasses.asdict(_queue(rec).health())
    except RayjobsError:
        return None


def uptime_s(rec: dict[str, Any]) -> Optional[float]:
    """Seconds since the head's ``ray start`` (its process start time, in clock ticks since this
    machine's boot); None where that cannot be told (another boot, no /proc)."""
    from rayjobs.client import headprocs

    if rec.get("sid_start") is None or rec.get("boot_id") != headprocs.boot_id():
        return None
    try:
        since_boot = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, since_boot - rec["sid_start"] / os.sysconf("SC_CLK_TCK"))


def local_running_jobs() -> list[str]:
    """The ids of the jobs in Ray on the running embedded head (what a stop ends); [] when it is
    not running or does not answer."""
    from rayjobs.client import embedded

    rec = embedded.running()
    if not rec:
        return []
    try:
        jobs = _queue(rec).views(status=list(IN_RAY))
    except Exception:  # noqa: BLE001 (a head already going down: nothing to name)
        return []
    return [j.submission_id for j in jobs]


def stop_local() -> bool:
    """Stop the embedded head by PID (never Ray's own stop command, which ends every Ray on the machine);
    returns once every process of it is gone. False: there was none.

    Raises:
        RayjobsError: some of its processes survived SIGKILL (named; the record is kept).
    """
    from rayjobs.client import embedded

    return embedded.stop()

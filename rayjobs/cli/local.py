"""Commands for the embedded local cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import click

from rayjobs.cli.common import _say
from rayjobs.cli.group import main
from rayjobs.contract.status import IN_RAY
from rayjobs.errors import ClusterUnreachable, run_cli


@main.group("local")
def local() -> None:
    """The embedded local Ray head (127.0.0.1), used when no cluster is configured."""


def _start() -> str:
    """Start (or reuse) the head; its address once it can accept a job."""
    from rayjobs.client import embedded

    rec = embedded.running()
    if rec is None:
        _say("starting the embedded local Ray head on 127.0.0.1 ...")
        return str(embedded.ensure(quiet=True).address)  # returns once it accepts jobs
    # A head started earlier (or by an older rayjobs) is reused as is: it must accept jobs too,
    # or `local start` would exit 0 in front of a head that refuses every submit.
    try:
        embedded.wait_ready(rec, timeout=10.0)
    except ClusterUnreachable as e:
        raise ClusterUnreachable(f"{e}; run `rayjobs local stop`, then `rayjobs local start`") from e
    up = uptime_s(rec)
    _say(f"the embedded local Ray head is already running{f' (up {duration(up)})' if up is not None else ''}: "
         f"nothing to start")
    return str(embedded.target(rec).address)


@local.command("start")
def local_start() -> None:
    """Start (or reuse) the embedded head; prints its dashboard URL once it accepts jobs."""
    click.echo(run_cli(_start))


@local.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the head's whole record (ports, PIDs, session dir) as JSON.")
def local_status(as_json: bool) -> None:
    """Say whether the embedded head runs: its address, uptime, jobs, the warm preflight helper
    (exit 1 if it is not running). --json: its record, for scripts."""
    from rayjobs.client import embedded
    from rayjobs.preflight import helper

    rec = embedded.running()
    helper_line = helper.status_line().removeprefix("rayjobs: ")
    if not rec:
        _say(helper_line)
        _say("the embedded local cluster is not running: `rayjobs local start` starts it (a submit starts it too)")
        raise SystemExit(1)
    if as_json:
        _say(helper_line)
        click.echo(json.dumps(rec, indent=2))
        return
    click.echo("\n".join(status_words(rec, _health(rec), helper_line, uptime_s(rec))))


def status_words(rec: dict[str, Any], health: Optional[dict[str, Any]], helper_line: str,
                 up_s: Optional[float]) -> list[str]:
    """``rayjobs local status`` in plain words, one fact a line: the head and its address, the jobs,
    the warm preflight helper, where its logs are (``health``: the queue's ``GET /v1/health``, None
    when it does not answer)."""
    up = f", up {duration(up_s)}" if up_s is not None else ""
    lines = [f"the embedded local Ray head is running at {rec['dashboard']} (Ray dashboard and Jobs API){up}"]
    api = rec.get("api") or "its queue API"
    if health is None:
        lines.append(f"jobs: unknown: the queue at {api} does not answer (`rayjobs local stop`, then "
                     f"`rayjobs local start`, restarts it)")
    else:
        lines.append(f"jobs: {health['admitted']} running, {health['waiting']} waiting (`rayjobs list`); "
                     f"the queue's API: {api}")
    lines.append(helper_line)
    logs = f"{rec['session_dir']}/logs" if rec.get("session_dir") else f"{rec['temp_dir']}/session_latest/logs"
    lines.append(f"logs: {logs}; the whole record (ports, PIDs): rayjobs local status --json")
    return lines


def _health(rec: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The head's queue's health (bounded: a few seconds), or None if it does not answer."""
    import dataclasses

    from rayjobs.client import embedded
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.client.queueapi import connect_queue
    from rayjobs.errors import RayjobsError

    try:
        return dataclasses.asdict(connect_queue(Dashboard(embedded.target(rec)), start=False, timeout=5.0).health())
    except RayjobsError:
        return None


def uptime_s(rec: dict[str, Any]) -> Optional[float]:
    """Seconds since the head's ``ray start`` (its process start time, in clock ticks since this
    machine's boot); None where that cannot be told (another boot, no /proc)."""
    import os

    from rayjobs.client import headprocs

    if rec.get("sid_start") is None or rec.get("boot_id") != headprocs.boot_id():
        return None
    try:
        since_boot = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, since_boot - rec["sid_start"] / os.sysconf("SC_CLK_TCK"))


def duration(s: float) -> str:
    """``42 s``, ``5 min``, ``2 h 13 min``, ``3 d 4 h``."""
    s = int(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


@local.command("stop")
def local_stop() -> None:
    """Stop the embedded head by PID (never the `ray` CLI's stop, which ends every Ray on the machine);
    returns once every process of it is gone."""
    from rayjobs.client import embedded

    _warn_running(embedded)
    ok = run_cli(embedded.stop)
    click.echo("rayjobs: embedded local cluster stopped" if ok else "rayjobs: nothing to stop", err=True)


def _warn_running(embedded: Any) -> None:
    """Name the jobs a stop of the head ends (they are not lost: each resumes after the next start)."""
    rec = embedded.running()
    if not rec:
        return
    try:
        from rayjobs.client.dashboard import Dashboard
        from rayjobs.client.queueapi import connect_queue

        q = connect_queue(Dashboard(embedded.target(rec)), start=False, timeout=5.0)
        jobs = q.jobs(status=list(IN_RAY))
    except Exception:  # noqa: BLE001 (a head already going down: nothing to name)
        return
    ids = [j["submission_id"] for j in jobs]
    if ids:
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        click.echo(f"rayjobs: warning: stopping the embedded head ends the running job(s) {', '.join(ids[:5])}{more}; "
                   f"after `rayjobs local start` each resumes from its last checkpoint as a new attempt (when "
                   f"rayjobs.max_retries allows), else it ends FAILED (cluster restarted)", err=True)


"""Commands for the embedded local cluster."""

from __future__ import annotations

import json
from typing import Any, Optional

import click

from rayjobs.cli.common import _say
from rayjobs.cli.group import main
from rayjobs.errors import run_cli


@main.group("local")
def local() -> None:
    """The embedded local Ray head (127.0.0.1), used when no cluster is configured."""


def _start() -> str:
    """Start (or reuse) the head; its address once it can accept a job."""
    from rayjobs import api

    got = api.start_local(say=_say)
    if got.reused:
        up = f" (up {duration(got.up_s)})" if got.up_s is not None else ""
        _say(f"the embedded local Ray head is already running{up}: nothing to start")
    return got.address


@local.command("start")
def local_start() -> None:
    """Start (or reuse) the embedded head; prints its dashboard URL once it accepts jobs."""
    click.echo(run_cli(_start))


@local.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the head's whole record (ports, PIDs, session dir) as JSON.")
def local_status(as_json: bool) -> None:
    """Say whether the embedded head runs: its address, uptime, jobs, the warm preflight helper
    (exit 1 if it is not running). --json: its record, for scripts."""
    from rayjobs import api

    st = api.local_status(health=not as_json)
    if st.record is None:
        _say(st.helper)
        _say("the embedded local cluster is not running: `rayjobs local start` starts it (a submit starts it too)")
        raise SystemExit(1)
    if as_json:
        _say(st.helper)
        click.echo(json.dumps(st.record, indent=2))
        return
    click.echo("\n".join(status_words(st.record, st.health, st.helper, st.up_s)))


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
    from rayjobs import api

    _warn_running(api.local_running_jobs())
    ok = run_cli(api.stop_local)
    click.echo("rayjobs: embedded local cluster stopped" if ok else "rayjobs: nothing to stop", err=True)


def _warn_running(ids: list[str]) -> None:
    """Name the jobs a stop of the head ends (they are not lost: each resumes after the next start)."""
    if ids:
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        click.echo(f"rayjobs: warning: stopping the embedded head ends the running job(s) {', '.join(ids[:5])}{more}; "
                   f"after `rayjobs local start` each resumes from its last checkpoint as a new attempt (when "
                   f"rayjobs.max_retries allows), else it ends FAILED (cluster restarted)", err=True)

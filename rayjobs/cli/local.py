"""Commands for the embedded local cluster."""

from __future__ import annotations

import json
from typing import Any

import click

from rayjobs.cli.group import main
from rayjobs.errors import ClusterUnreachable, run_cli


@main.group("local")
def local() -> None:
    """The embedded local Ray head (127.0.0.1), used when no cluster is configured."""


def _start() -> str:
    """Start (or reuse) the head; its address once it can accept a job."""
    from rayjobs.client import embedded

    address = embedded.ensure().address
    rec = embedded.running()
    if rec:
        # A head started earlier (or by an older rayjobs) is reused as is: it must accept jobs too,
        # or `local start` would exit 0 in front of a head that refuses every submit.
        try:
            embedded.wait_ready(rec, timeout=10.0)
        except ClusterUnreachable as e:
            raise ClusterUnreachable(f"{e}; run `rayjobs local stop`, then `rayjobs local start`") from e
    return str(address)


@local.command("start")
def local_start() -> None:
    """Start (or reuse) the embedded head; prints its dashboard URL once it accepts jobs."""
    click.echo(run_cli(_start))


@local.command("status")
def local_status() -> None:
    """Print the embedded head's record as JSON (exit 1 if it is not running); the warm preflight
    helper's state goes to stderr."""
    from rayjobs.client import embedded

    rec = embedded.running()
    from rayjobs.preflight import helper

    click.echo(helper.status_line(), err=True)
    if not rec:
        click.echo("rayjobs: the embedded local cluster is not running: `rayjobs local start` starts it (a submit "
                   "starts it too)", err=True)
        raise SystemExit(1)
    click.echo(json.dumps(rec, indent=2))


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
        jobs = q.jobs(status=["PENDING", "RUNNING"])
    except Exception:  # noqa: BLE001 (a head already going down: nothing to name)
        return
    ids = [j["submission_id"] for j in jobs]
    if ids:
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        click.echo(f"rayjobs: warning: stopping the embedded head ends the running job(s) {', '.join(ids[:5])}{more}; "
                   f"after `rayjobs local start` each resumes from its last checkpoint as a new attempt (when "
                   f"rayjobs.max_retries allows), else it ends FAILED (cluster restarted)", err=True)


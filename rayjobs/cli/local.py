"""Commands for the embedded local cluster."""

from __future__ import annotations

import json

import click

from rayjobs.cli import main
from rayjobs.errors import run_cli


@main.group("local")
def local() -> None:
    """The embedded local Ray head (127.0.0.1), used when no cluster is configured."""


@local.command("start")
def local_start() -> None:
    """Start (or reuse) the embedded head; prints its dashboard URL."""
    from rayjobs import embedded

    click.echo(run_cli(lambda: embedded.ensure()).address)


@local.command("status")
def local_status() -> None:
    """Print the embedded head's record as JSON (exit 1 if it is not running)."""
    from rayjobs import embedded

    rec = embedded.running()
    if not rec:
        click.echo("rayjobs: the embedded local cluster is not running", err=True)
        raise SystemExit(1)
    click.echo(json.dumps(rec, indent=2))


@local.command("stop")
def local_stop() -> None:
    """Stop the embedded head by PID (never the `ray` CLI's stop, which ends every Ray on the machine)."""
    from rayjobs import embedded

    ok = embedded.stop()
    click.echo("rayjobs: embedded local cluster stopped" if ok else "rayjobs: nothing to stop", err=True)

"""``rayjobs usage``: where the team's GPU-hours went."""

from __future__ import annotations

import json
from typing import Optional

import click

from rayjobs.cli.group import main
from rayjobs.errors import run_cli


@main.command("usage")
@click.option("--user", default=None, help="Only this user's jobs.")
@click.option("--sweep", default=None, help="Only this sweep's points.")
@click.option("--since", default=None, help="Only jobs queued or active in this window: 7d, 12h, 30m.")
@click.option("--jobs", "top", default=20, show_default=True, help="How many of the largest jobs to list.")
@click.option("--address", default=None, help="The cluster (default: the settings' target).")
@click.option("--json", "as_json", is_flag=True, help="Print the split as JSON (GPU-seconds).")
def usage_cmd(user: Optional[str], sweep: Optional[str], since: Optional[str], top: int, address: Optional[str],
              as_json: bool) -> None:
    """The GPU-hours the queue handed out, per user, sweep and job, split into productive (steps
    kept), redone (steps trained again after a retry, preemption or stop), start-up (admission to
    the first step) and held idle (allocated, no step); apart, the hours waited in the queue; ETTR
    = productive / allocated."""
    from rayjobs import api
    from rayjobs.views import usagetable

    doc = run_cli(lambda: api.usage(user=user, sweep=sweep, since=since, address=address,
                                    say=lambda m: click.echo(f"rayjobs: {m}", err=True)))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for line in usagetable.lines(doc, jobs=top):
        click.echo(line)

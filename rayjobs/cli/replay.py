"""``rayjobs replay``: the team's own history, run again under the queue's rules and the baselines."""

from __future__ import annotations

import json
from typing import Optional

import click

from rayjobs.cli.group import main
from rayjobs.errors import run_cli


@main.command("replay")
@click.option("--since", default="30d", show_default=True, help="The history to replay: 30d, 12h, 90m.")
@click.option("--policy", "policies", multiple=True,
              help="Only this policy (repeat for more): rayjobs, fifo, priority_hol, easy_backfill, kueue, rayjobs_no_halving.")
@click.option("--quota", default=None, help="What if the queue had this per-user GPU quota: 8, or alice=16,*=8.")
@click.option("--plot", default=None, help="Write the CDF of waits per policy to this PNG.")
@click.option("--save-trace", default=None, help="Write the history as a trace file (JSON Lines) too.")
@click.option("--address", default=None, help="The cluster (default: the settings' target).")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as one JSON object.")
def replay_cmd(since: str, policies: tuple[str, ...], quota: Optional[str], plot: Optional[str],
               save_trace: Optional[str], address: Optional[str], as_json: bool) -> None:
    """The jobs with GPUs that ran on the cluster lately, replayed on a simulated cluster of the same
    nodes: the queue's rules beside plain Ray, SkyPilot's queue, Slurm's EASY backfill and Kueue
    (waits, utilisation, goodput, fairness), and what the queue recorded."""
    from rayjobs import api
    from rayjobs.sim import table

    doc = run_cli(lambda: api.replay(since=since, policies=policies, quota=quota, address=address, plot=plot,
                                     save_trace=save_trace, say=lambda m: click.echo(f"rayjobs: {m}", err=True)))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    left = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in doc["trace"]["left_out"].items() if n)
    c = doc["cluster"]
    click.echo(f"{doc['trace']['jobs']} jobs replayed on {c['nodes']} x {c['gpus_per_node']} GPUs"
               + (f" (left out: {left})" if left else ""))
    for line in table.columns(dict(doc["policies"], recorded=doc["recorded"])):
        click.echo(line)

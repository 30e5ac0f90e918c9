"""``rayjobs plot`` and ``rayjobs compare``: a sweep's curves, as a PNG and as rows side by side."""

from __future__ import annotations

import json
from typing import Any, Optional

import click

from rayjobs.cli.group import main
from rayjobs.cli.common import ADDRESS, _exit, _pipe_safe, _say
from rayjobs.errors import run_cli


@main.command("plot")
@click.argument("job_ids", nargs=-1)
@click.option("--sweep", default=None, metavar="S", help="Plot every job of sweep S.")
@click.option("--metric", "metric_names", multiple=True, metavar="M", help="Metric to plot (repeatable; default critic/score/mean).")
@click.option("--no-val", is_flag=True, help="Leave out the val-core/* panels.")
@click.option("-o", "--output", default="curves.png", show_default=True, metavar="FILE.png")
@click.option("--json", "as_json", is_flag=True, help="Also print the plotted data as JSON on stdout.")
@ADDRESS
def plot_cmd(job_ids: tuple[str, ...], sweep: Optional[str], metric_names: tuple[str, ...], no_val: bool,
             output: str, as_json: bool, address: Optional[str]) -> None:
    """One PNG: a curve per job over steps (legend: sweep overrides), plus val-core metrics."""

    def go() -> int:
        from rayjobs import api

        data = api.plot_jobs(job_ids, sweep=sweep, metrics=metric_names, val=not no_val, output=output,
                             address=address, say=_say)
        click.echo(json.dumps(data) if as_json else output)
        _say(f"wrote {output} ({len(data['jobs'])} job(s): {', '.join(data['metrics'])})")
        empty = [f"{j['id']} ({j.get('status') or '?'})" for j in data["jobs"] if not j.get("steps")]
        if empty:
            _say(f"nothing logged by: {', '.join(empty)}")
        return 0

    _exit(run_cli(go))


@main.command("compare")
@click.option("--sweep", default=None, metavar="S", help="The sweep (its id, or a unique start of it).")
@click.option("--metric", "metric_names", multiple=True, metavar="M",
              help="Metric to compare (repeatable; the first ranks the points) [default: critic/score/mean and the "
                   "val-core reward, which ranks them].")
@click.option("--mode", default="auto", show_default=True, metavar="auto|max|min",
              help="Best = highest (max) or lowest (min) value; auto: lowest for a metric named ...loss..., else highest.")
@click.option("--json", "as_json", is_flag=True, help="A JSON list of the rows (one per point) on stdout.")
@ADDRESS
def compare_cmd(sweep: Optional[str], metric_names: tuple[str, ...], mode: str, as_json: bool,
                address: Optional[str]) -> None:
    """One row per sweep point: the swept values, status, steps, the last and best value of each
    metric (best@step), the last checkpoint; * marks the best point.

    The curves are read as `rayjobs plot --sweep S` reads them. While the cluster cannot be
    reached, the rows come from the local record (STATUS* = the final state kept here), exit 0.
    """

    def go() -> int:
        from rayjobs import api
        from rayjobs.errors import ConfigError
        from rayjobs.views import compare

        if not sweep:
            raise ConfigError("name the sweep: rayjobs compare --sweep S (`rayjobs list` shows sweep ids)")
        rows = api.compare_sweep(sweep, metrics=metric_names, mode=mode, address=address, say=_say)
        if as_json:
            click.echo(json.dumps(rows, indent=2, default=str))
        else:
            click.echo(compare.table(rows), nl=False)
        _compare_notes(rows)
        return 0

    _exit(run_cli(_pipe_safe(go)))


def _compare_notes(rows: list[dict[str, Any]]) -> None:
    """What ranks the points and which logged nothing yet (stderr)."""
    if not rows:
        return
    rank = rows[0]["ranked_by"]
    if any(r["best"] for r in rows):
        mode = next(r["metrics"][rank]["mode"] for r in rows if r["metrics"].get(rank))
        _say(f"* = the best point: the {'highest' if mode == 'max' else 'lowest'} {rank} any point reached "
             f"(:best columns, value@step); --metric M ranks by M, --mode min|max")
    else:
        _say(f"no point logged {rank} yet: no best point")
    empty = [f"{r['id']} ({r['status']})" for r in rows if not any(r["metrics"].values())]
    if empty:
        _say(f"nothing logged by: {', '.join(empty)}")

"""``rayjobs up | connect | cluster | down``: the cluster's life cycle (SkyPilot + SSH tunnel)."""

from __future__ import annotations

import json
from typing import Optional

import click

from rayjobs.cli.group import main
from rayjobs.errors import run_cli


@main.command("up", context_settings={"ignore_unknown_options": True})
@click.argument("params", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("-c", "--name", default=None, help="SkyPilot cluster name (default: the settings' cluster.name).")
def up_cmd(params: tuple[str, ...], name: Optional[str]) -> None:
    """Launch (or re-bootstrap) the Ray cluster and connect to it; returns when it is ready.

    KEY=VALUE: infra=k8s accelerators=H100:1 num_nodes=2 idle_minutes=30 image=... disk_size=256
    memory=128+ use_spot=false autodown=... bucket=... volume=... storage=/mnt/rayjobs join_timeout=900.
    Defaults: the settings (`rayjobs config`: cluster.*, storage), then bootstrap/cluster.yaml.
    Running it again on a live cluster changes nothing there and brings back nodes that lost their Ray.
    """
    from rayjobs import api

    run_cli(lambda: api.cluster_up(name=name, params=params))


@main.command("connect")
@click.argument("name", required=False)
@click.option("--port", type=int, default=None, help="Local port for the tunnel (default 8265, else a free one).")
@click.option("--close", is_flag=True, help="Close the tunnel and forget the cluster.")
def connect_cmd(name: Optional[str], port: Optional[int], close: bool) -> None:
    """Open (or reuse) an SSH tunnel to the cluster's Jobs API and remember the cluster.

    Uses SkyPilot's SSH config entry for NAME (default: the settings' cluster.name, else the
    remembered cluster, else `rayjobs`); later commands then need no address. Prints the local
    dashboard URL on stdout.
    """
    from rayjobs import api

    if close:
        closed = api.disconnect_cluster()
        click.echo("rayjobs: tunnel closed" if closed else "rayjobs: no open tunnel", err=True)
        return
    rec = run_cli(lambda: api.connect_cluster(name=name, port=port))
    click.echo(rec["address"])


@main.command("cluster")
@click.option("--json", "as_json", is_flag=True, help="Print the view as JSON.")
@click.option("--address", default=None, metavar="URL", help="The cluster's dashboard (default: the settings' precedence).")
def cluster_cmd(as_json: bool, address: Optional[str]) -> None:
    """Nodes (GPUs reserved, GPU utilisation and memory, CPU, RAM), versions per node, the queue, use per user.

    GPU utilisation and memory come from Ray's Prometheus metrics (through the head's metrics
    gateway when connected with `rayjobs connect`); a warning on stderr when the client's rayjobs or
    verl differ from the cluster's.
    """
    from rayjobs import api
    from rayjobs.views import clusterview

    v = run_cli(lambda: api.cluster_view(address=address))
    click.echo(json.dumps(v, indent=2) if as_json else clusterview.render(v))
    for w in v["warnings"]:
        click.echo(f"rayjobs: warning: {w}", err=True)


@main.command("down")
@click.argument("name", required=False)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def down_cmd(name: Optional[str], yes: bool) -> None:
    """Tear the cluster down (running jobs are lost; the storage bucket/volume is kept).

    First every ended job of the connected cluster is kept in the local record (final state, log
    tail, metrics), so `rayjobs list`, `status` and `plot` still show them afterwards.
    """
    from rayjobs import api

    name = run_cli(lambda: api.cluster_name(name))
    if not yes:
        click.confirm(f"Tear down the SkyPilot cluster {name!r}? Running jobs are lost", abort=True, err=True)
    _keep_history(name)
    run_cli(lambda: api.cluster_down(name))


def _keep_history(name: str) -> None:
    """Keep the final copy of every ended job of cluster ``name`` before it goes (never blocks the
    teardown: an unreachable cluster or a failed read is said, and the teardown goes on)."""
    from rayjobs import api, settings
    from rayjobs.errors import RayjobsError
    from rayjobs.contract.status import TERMINAL

    def say(msg: str) -> None:
        click.echo(f"rayjobs: {msg}", err=True)

    target = settings.resolve_target(None)
    if target.source != f"cluster {name}":
        say(f"not keeping {name}'s jobs in the local record: the connected cluster is {target.address or 'the embedded one'} "
            f"(`rayjobs connect {name}` first to keep them); `rayjobs list` keeps what it saw")
        return
    try:
        rows = api.list_jobs(keep=True)
    except RayjobsError as e:
        say(f"could not keep {name}'s jobs in the local record ({e}); it has what list/status saw last")
        return
    ended = sum(1 for r in rows if r.get("status") in TERMINAL)
    say(f"kept {ended} ended job(s) of {name} in the local record; {len(rows) - ended} not ended (lost with the cluster)")

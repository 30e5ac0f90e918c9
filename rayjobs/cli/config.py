"""``rayjobs config``: the effective settings and where each value came from."""

from __future__ import annotations

import json
from typing import Any

import click

from rayjobs.cli.group import main
from rayjobs.errors import run_cli


@main.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print {key: {value, source}} as JSON.")
def config_cmd(as_json: bool) -> None:
    """Print the effective settings, one per line: `key = value  (source)`.

    Sources, highest first: the command line of the command that takes a key, RAYJOBS_<KEY>
    variables, ./rayjobs.yaml (up to the git root), $RAYJOBS_HOME/settings.yaml, the remembered
    cluster (rayjobs connect), the defaults. A bad settings file is one line, exit 2.
    """
    from rayjobs import api

    eff = run_cli(api.effective_settings)
    if eff.get("cluster.image", {}).get("source") == "bootstrap/cluster.yaml":
        # its verl and torch are older than the pins: say in the same line that setup installs them over it
        eff["cluster.image"]["note"] = api.base_image_note()
    for note in run_cli(api.settings_notes):
        click.echo(f"rayjobs: {note}", err=True)
    if as_json:
        click.echo(json.dumps(eff, indent=2))
        return
    width = max(len(k) for k in eff)
    for key, row in eff.items():
        note = f"; {row['note']}" if row.get("note") else ""
        click.echo(f"{key:<{width}} = {_shown(key, row['value'])}  ({row['source']}{note})")


def _shown(key: str, value: Any) -> str:
    if key == "address" and value is None:
        return "the embedded local head (127.0.0.1, started on first use)"
    if isinstance(value, list):
        return ", ".join(value) if value else "[]"
    return '""' if value in ("", None) else str(value)

"""The ``rayjobs`` click group every command module registers on."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayjobs")
def main() -> None:
    """Run many verl experiments on one long-lived Ray cluster.

    Submit with: python -m rayjobs.submit +exp=NAME [verl.key=value ...] (add -m for a sweep).
    """

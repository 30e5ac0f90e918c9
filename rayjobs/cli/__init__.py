"""``rayjobs``: the thin command line over the library.

Commands live in small modules of this package, each registering on :data:`main`; heavy imports
(ray, hydra, rich) happen inside the commands so ``rayjobs --help`` stays instant.
"""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayjobs")
def main() -> None:
    """Run many verl experiments on one long-lived Ray cluster.

    Submit with: python -m rayjobs.submit +exp=NAME [verl.key=value ...] (add -m for a sweep).
    """


# Each module registers its commands on `main` (imports are light: click only).
from rayjobs.cli import cluster, jobs, local  # noqa: E402,F401

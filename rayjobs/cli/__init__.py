"""``rayjobs``: the thin command line over the library.

Commands live in small modules of this package, each registering on :data:`rayjobs.cli.group.main`;
heavy imports (ray, hydra, rich) happen inside the commands so ``rayjobs --help`` stays instant.
"""

from rayjobs.cli import cluster, config, curves, jobs, local, people, replay, ui, usage  # noqa: F401  (each registers its commands)
from rayjobs.cli.group import main

__all__ = ["main"]

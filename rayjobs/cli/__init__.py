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


from rayjobs.cli import local as _local  # noqa: E402,F401  (registers commands)

for _mod in ("jobs", "cluster"):
    try:
        __import__(f"rayjobs.cli.{_mod}")
    except ImportError as _e:  # a module not written yet must not break the others
        if f"rayjobs.cli.{_mod}" not in str(_e):
            raise

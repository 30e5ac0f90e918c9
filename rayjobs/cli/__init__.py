"""``rayjobs``: the thin command line over the library.

Commands live in small modules of this package, each registering on :data:`rayjobs.cli.group.main`;
every module here is imported, so a new command is its module alone (no list to extend). Heavy
imports (ray, hydra, rich) happen inside the commands so ``rayjobs --help`` stays instant.
"""

import importlib
import pkgutil

from rayjobs.cli.group import main

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "__main__":  # (runs the command line when imported)
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["main"]

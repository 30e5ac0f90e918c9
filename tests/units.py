"""How the suite is dealt to its test processes (pytest-xdist, three: pyproject.toml): in units of whole files.

A unit is one test file, or all the files that use one of the session's long-lived heads (the
embedded head, the shared 1-node fake-GPU cluster): so each such head runs in one test process, not
in several (an idle Ray head costs ~12 % of a core and ~1 GB, and its start ~11 s of CPU). The units go
the longest first (``tests/file_seconds.json``): a long one dealt last keeps one process busy alone.

The test processes collect the tests and know their fixtures; the controlling process, which deals
the units, does not: each test process writes the file -> unit map to :data:`MAP_ENV`'s path, and
:class:`UnitScheduling` (xdist's file scheduling, by unit) reads it once collection is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from rayjobs.contract.files import write_atomic

MAP_ENV = "RAYJOBS_TEST_UNITS"  #: path of the file -> unit map (set by the controlling process)


def shared_head(item: Any) -> Optional[str]:
    """Which of the session's long-lived heads a test uses: ``one_node``, ``two_nodes`` (the shared
    fake-GPU clusters; some files name theirs ``cluster``), ``embedded`` (the conftest's ``cluster``)
    or none."""
    names = set(getattr(item, "fixturenames", ()))
    for name in ("one_node", "two_nodes"):
        if name in names:
            return name
    return "embedded" if names & {"cluster", "client"} else None


def units_of(items: list[Any]) -> dict[str, str]:
    """Each test file's unit: the head its tests share, else the file itself. A file that uses two
    heads joins their units into one (named ``embedded+one_node``): each head still lives in one
    test process, and a unit's end may stop all of its heads (:func:`heads_of`)."""
    used: dict[str, set[str]] = {}
    for item in items:
        head = shared_head(item)
        used.setdefault(item.location[0], set()).update([head] if head else [])
    joined = {h: {h} for hs in used.values() for h in hs}  # head -> the heads of its unit
    for hs in used.values():
        together = set().union(*(joined[h] for h in hs))
        for h in together:
            joined[h] = together
    return {f: "+".join(sorted(joined[min(hs)])) if hs else f for f, hs in used.items()}


def heads_of(unit: str) -> set[str]:
    """The long-lived heads a unit shares (none for a unit of one file)."""
    return set(unit.split("+")) & {"embedded", "one_node", "two_nodes"}


def publish(unit: dict[str, str]) -> None:
    """Write the map where the controlling process reads it (a test process; no-op without xdist)."""
    path = os.environ.get(MAP_ENV)
    if path:
        write_atomic(path, json.dumps(unit, sort_keys=True).encode(), fsync=False)


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's file scheduling, with the map's units as its scopes."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        _units: Optional[dict[str, str]] = None

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:
                try:
                    self._units = json.loads(Path(os.environ[MAP_ENV]).read_text())
                except (KeyError, OSError, ValueError):
                    self._units = {}
            path = nodeid.split("::", 1)[0]
            return self._units.get(path, path)

    return UnitScheduling(config, log)

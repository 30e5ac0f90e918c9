"""A sweep's successive-halving settings, as a job's metadata carries them (``halving``: JSON).

The rule that reads them runs on the cluster (:mod:`rayjobs.oncluster.halving`); the submit side
writes them from ``rayjobs.halving.*``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

MODES = ("max", "min")


@dataclass(frozen=True)
class Halving:
    """A sweep's halving settings (``rayjobs.halving.*``)."""

    metric: str
    rungs: tuple[int, ...]
    mode: str = "max"
    keep: float = 1 / 3
    shuffle: bool = True  #: its points start in a shuffled order fixed by the sweep's id

    def to_json(self) -> str:
        return json.dumps({"metric": self.metric, "rungs": list(self.rungs), "mode": self.mode, "keep": self.keep,
                           "shuffle": self.shuffle})

    @classmethod
    def from_json(cls, text: str) -> Optional["Halving"]:
        """The settings a job's metadata carries; None for none (or a value this version cannot read)."""
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(str(d["metric"]), tuple(int(r) for r in d["rungs"]), str(d.get("mode", "max")),
                       float(d.get("keep", 1 / 3)), bool(d.get("shuffle", False)))  # (older sweeps: in order)
        except (ValueError, KeyError, TypeError):
            return None

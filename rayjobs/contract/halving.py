"""A sweep's successive-halving settings, as a job's metadata carries them (``halving``: JSON).

The rule that reads them runs on the cluster (:mod:`rayjobs.oncluster.halving`); the submit side
writes them from ``rayjobs.halving.*``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

MODES = ("max", "min")
#: ``shuffle`` of a sweep whose metadata has none: it was queued before the setting existed, to run in
#: its own order (every sweep queued since carries its value; the default, for new ones, is True).
QUEUED_BEFORE_SHUFFLE = False


@dataclass(frozen=True)
class Halving:
    """A sweep's halving settings (``rayjobs.halving.*``)."""

    metric: str  #: a metric verl logs (``val-core/openai/gsm8k/reward/mean@1``)
    rungs: tuple[int, ...]  #: steps, increasing
    mode: str = "max"  #: max | min
    keep: float = 0.333  #: the fraction that goes on at a rung (a third, as conf/config.yaml says)
    #: start the points in a shuffled order, fixed by the sweep's id (false: the sweep's own order).
    #: A grid lists near-alike points side by side, and a rung's first arrivals go on against few rivals.
    shuffle: bool = True

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
            return cls(str(d["metric"]), tuple(int(r) for r in d["rungs"]), str(d.get("mode", cls.mode)),
                       float(d.get("keep", cls.keep)), bool(d.get("shuffle", QUEUED_BEFORE_SHUFFLE)))
        except (ValueError, KeyError, TypeError):
            return None

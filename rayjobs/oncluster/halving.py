"""Successive halving of a sweep, asynchronous as ASHA (Li et al., MLSys 2020), pure: no I/O.

A sweep submitted with ``rayjobs.halving.metric`` carries its settings in every point's metadata
(:class:`Halving`, JSON). When a running point's history reaches a rung (a step of ``rungs``), its
value there is compared with the values the sweep's points reached that rung with *so far* (never
waiting for the others): it goes on if it ranks within the top ``keep`` of them (at least the
first, so the first point to reach a rung always goes on), else the queue stops it at its next
checkpoint and its GPUs go to the next waiting point. A halved point keeps its checkpoint; a
resumed one (``rayjobs resume``) is its user's choice and is not halved again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from rayjobs.contract.halving import Halving


@dataclass(frozen=True)
class Verdict:
    """A point's standing at a rung: its rank among the points there so far (1 = best), of how many."""

    rung: int
    value: Optional[float]  #: None: the metric was not logged by the rung (it goes on, unjudged)
    rank: int
    of: int
    goes_on: bool

    def text(self) -> str:
        """``halved at step 100: 0.41, rank 7 of 9``."""
        return f"halved at step {self.rung}: {self.value:.4g}, rank {self.rank} of {self.of}"


def value_at(history: Mapping[int, Mapping[str, float]], metric: str, rung: int) -> tuple[bool, Optional[float]]:
    """(reached, value): has the run logged a step at or past ``rung``, and the metric's value at the
    last step at or before it where it was logged (None if it never was)."""
    if not history or max(history) < rung:
        return False, None
    logged = [s for s, data in history.items() if s <= rung and metric in data]
    return True, (float(history[max(logged)][metric]) if logged else None)


def judge(h: Halving, rung: int, value: Optional[float], others: Sequence[float]) -> Verdict:
    """Rank ``value`` against the values ``others`` (the sweep's other points at this rung so far).

    Ties rank alike (the better rank: a tie never halves one of two equal points and not the other);
    the top ``ceil(keep * n)`` go on, at least one.
    """
    if value is None or math.isnan(value):
        return Verdict(rung, None, 0, len(others) + 1, True)
    better = sum(1 for v in others if (v > value if h.mode == "max" else v < value))
    n = len(others) + 1
    rank = better + 1
    return Verdict(rung, value, rank, n, rank <= max(1, math.ceil(h.keep * n)))


def rungs_due(h: Halving, history: Mapping[int, Mapping[str, float]], judged: Sequence[int]) -> list[tuple[int, Optional[float]]]:
    """The rungs the run has reached and that were not judged yet, with its value at each, in order."""
    out = []
    for rung in h.rungs:
        if rung in judged:
            continue
        reached, value = value_at(history, h.metric, rung)
        if not reached:
            break
        out.append((rung, value))
    return out

"""The one did-you-mean: the names closest to a mistyped one, for every "no such ..." message (an
unknown config key, experiment, sweep, status; a job id the resolver of :mod:`~rayjobs.contract.ids`
cannot match), on the laptop and on the head alike."""

from __future__ import annotations

import difflib
from typing import Iterable

#: How alike a name must be to be offered (difflib's ratio): ``grpo_7bb`` -> ``grpo_7b``.
CUTOFF = 0.5


def closest(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The ``n`` candidates closest to ``word`` (difflib ratio, at least :data:`CUTOFF`), best first;
    else the ones that hold ``word`` or that it holds (``grpo`` -> ``grpo_7b``)."""
    cands = sorted(set(candidates))
    best = difflib.get_close_matches(word, cands, n=n, cutoff=CUTOFF)
    if not best:
        best = [c for c in cands if word and (word in c or c in word)][:n]
    return best


def did_you_mean(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """``" (did you mean: a, b?)"`` or an empty string."""
    best = closest(word, candidates, n)
    return f" (did you mean: {', '.join(best)}?)" if best else ""

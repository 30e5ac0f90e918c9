"""The format of a run's metrics files (``<run_dir>/metrics.<attempt>.jsonl``, verl's ``file`` logger:
one ``{"step": N, "data": {...}}`` per line): read by the laptop's views and by the queue's halving.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator, Optional

from rayjobs.contract.paths import metrics_files


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    """(step, data) per line of verl's file logger; torn or foreign lines are skipped."""
    try:
        f = path.open("rb")
    except OSError:
        return
    with f:
        for raw in f:
            try:
                rec = json.loads(raw)
                step = int(rec["step"])
                data = {str(k): float(v) for k, v in rec.get("data", {}).items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)}
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            yield step, data


def merge_attempts(attempts: Iterable[Iterable[tuple[int, dict[str, float]]]]) -> dict[int, dict[str, float]]:
    """One history from several attempts: a resumed attempt's steps replace the earlier ones."""
    out: dict[int, dict[str, float]] = {}
    for records in attempts:
        first = True
        for step, data in records:
            if first:  # an attempt resumed at step s invalidates what the older ones logged after s
                for s in [s for s in out if s > step]:
                    del out[s]
                first = False
            out.setdefault(step, {}).update(data)
    return dict(sorted(out.items()))


def run_history(run_dir: Optional[str], attempts: Optional[Iterable[int]] = None) -> dict[int, dict[str, float]]:
    """A run's merged history (``{step: data}``) from its metrics files (of ``attempts`` only, when given)."""
    keep = None if attempts is None else set(attempts)
    files = [p for a, p in metrics_files(run_dir).items() if keep is None or a in keep]
    return merge_attempts(read_jsonl(p) for p in files)


def run_steps(run_dir: Optional[str], attempts: Optional[Iterable[int]] = None) -> list[tuple[int, int, dict[str, float]]]:
    """A run's merged history as ``(step, attempt, data)`` in step order: :func:`run_history`'s rule
    (a resumed attempt's steps replace the older ones'), each step tagged with the attempt whose
    file gave it last."""
    keep = None if attempts is None else set(attempts)
    out: dict[int, tuple[int, dict[str, float]]] = {}
    for attempt, path in metrics_files(run_dir).items():
        if keep is not None and attempt not in keep:
            continue
        first = True
        for step, data in read_jsonl(path):
            if first:
                for s in [s for s in out if s > step]:
                    del out[s]
                first = False
            merged = dict(out[step][1]) if step in out else {}
            merged.update(data)
            out[step] = (attempt, merged)
    return [(s, a, d) for s, (a, d) in sorted(out.items())]

"""A run's metrics files: what verl's ``file`` logger wrote, one file per attempt.

``rayjobs.oncluster.runner`` points verl's file logger at ``<run_dir>/metrics.<attempt>.jsonl`` (one
``{"step": N, "data": {...}}`` per line), so the history of a run survives its log and a resumed
attempt adds a file instead of rewriting one. Read where the storage is visible (the cluster, or a
laptop with it mounted); the console log's step lines (:func:`history_from_log`) are the fallback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from rayjobs.contract import paths
from rayjobs.contract.metrics import merge_attempts, read_jsonl  # noqa: F401  (the file format: the contract's)

if TYPE_CHECKING:
    from rayjobs.contract.wire import JobView


def jsonl_files(run_dir: Optional[str]) -> list[Path]:
    """``<run_dir>/metrics.<attempt>.jsonl`` files, by attempt, if that dir is readable here."""
    return list(paths.metrics_files(run_dir).values())


def last_jsonl_record(path: Path, window: int = 1 << 16) -> Optional[tuple[int, dict[str, float]]]:
    """The last complete record of a JSONL file, reading only its tail."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - window))
            tail = f.read()
    except OSError:
        return None
    for raw in reversed(tail.split(b"\n")):
        try:
            rec = json.loads(raw)
            return int(rec["step"]), {str(k): float(v) for k, v in rec.get("data", {}).items()
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return None


def history_from_log(dash: Any, job: "JobView") -> dict[int, dict[str, float]]:
    """{step: metrics} from the job's console log (step lines; a later attempt's steps win)."""
    from rayjobs.views import logparse

    node = job.driver_node_id
    if not node or dash is None:
        return {}
    out: dict[int, dict[str, float]] = {}
    split = logparse.LineSplitter()
    for chunk in dash.iter_log(job.submission_id, node, -1):
        text = split.feed_text(chunk)
        if "step:" not in text and "validation metrics:" not in text:
            continue
        for line in logparse.clean_block(text).split("\n"):
            b = logparse.body(line)
            parsed = logparse.parse_step(b) if "step:" in b else None
            if parsed:
                step, data = parsed
                for s in [s for s in out if s > step]:  # a resumed attempt redoes these steps
                    del out[s]
                out.setdefault(step, {}).update(data)
    return dict(sorted(out.items()))

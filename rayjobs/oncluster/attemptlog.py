"""What one attempt of a job wrote: its part of the driver log, and its metrics file.

Ray's job supervisor starts the entrypoint (this runner) with stdout and stderr appended to the
job's driver log on the head (``job-driver-<id>.log``), and the trainer inherits both. So the
runner finds the log through its own stdout (``/proc/self/fd/1``) and reads, after each attempt,
only what that attempt appended: the start (verl prints ``Total training steps: N`` early) and the
end (the last steps, the traceback), each bounded, so a log of millions of lines costs the same
few MB. The metrics file (verl's file logger, one JSON line per step) gives the last step too.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HEAD_BYTES = 256 << 10  #: verl's start-up lines (the step total comes before the first step)
TAIL_BYTES = 2 << 20  #: the end of the attempt: last steps and the traceback
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TOTAL = re.compile(r"Total training steps: (\d+)")
STEP = re.compile(r"(?:^|[\s|\r])step:(\d+) - ")


@dataclass(frozen=True)
class AttemptLog:
    """The facts of one attempt's output that the runner judges it by."""

    total_steps: Optional[int]  #: verl's ``Total training steps`` (None: not a verl-like trainer, or not read)
    last_step: Optional[int]  #: the last step it logged (console or metrics file), None if none
    tail: str  #: the end of its output, ANSI codes removed (the traceback, if it died of one)


def own_log() -> Optional[Path]:
    """The driver log this process appends to (its stdout), or None when stdout is not a file."""
    try:
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    p = Path(target)
    return p if target.startswith("/") and p.is_file() else None


def size(path: Optional[Path]) -> int:
    """The log's length now (where the next attempt's output will start)."""
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _read(path: Path, start: int) -> tuple[str, str]:
    """The first ``HEAD_BYTES`` and last ``TAIL_BYTES`` written from ``start`` on (the same text if short)."""
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(start)
        head = f.read(min(HEAD_BYTES, max(0, end - start)))
        f.seek(max(start, end - TAIL_BYTES))
        tail = f.read()
    return ANSI.sub("", head.decode("utf-8", "replace")), ANSI.sub("", tail.decode("utf-8", "replace"))


def last_metrics_step(path: Optional[Path]) -> Optional[int]:
    """The ``step`` of the last complete line of a metrics JSONL file (its last 64 KB read)."""
    if path is None:
        return None
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - (64 << 10)))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def read_attempt(log: Optional[Path], start: int, metrics: Optional[Path]) -> AttemptLog:
    """What the attempt whose output began at byte ``start`` of ``log`` wrote (bounded reads)."""
    head = tail = ""
    if log is not None:
        try:
            head, tail = _read(log, start)
        except OSError:
            pass
    m = TOTAL.search(head) or TOTAL.search(tail)
    steps = [int(s) for s in STEP.findall(tail)]
    last = max([s for s in (max(steps, default=None), last_metrics_step(metrics)) if s is not None], default=None)
    return AttemptLog(int(m.group(1)) if m else None, last, tail)

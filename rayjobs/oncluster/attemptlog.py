"""What one attempt of a job wrote: its part of the driver log, and its metrics file.

Ray's job supervisor starts the entrypoint (this runner) with stdout and stderr appended to the
job's driver log on the head (``job-driver-<id>.log``), and the trainer inherits both. So the
runner finds the log through its own stdout (``/proc/self/fd/1``) and reads, after each attempt,
only what that attempt appended: the start (verl prints ``Total training steps: N`` early) and the
end (the last steps, the traceback), each bounded, so a log of millions of lines costs the same
few MB. The metrics file (verl's file logger, one JSON line per step) gives the last step too.

When the job ends, its runner keeps the log's end on the storage root (:func:`keep_tail`): a head
whose Ray restarts serves only its new session's logs, and the storage root outlives it.
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
KEPT_BYTES = 1 << 20  #: the most of a job's log its runner keeps on the storage root ...
KEPT_LINES = 2000  #: ... in lines
#: lines of the log's start worth keeping when the kept end lacks them: the step total, the W&B run
HEAD_FACTS = ("Total training steps", "wandb.ai")


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


def keep_tail(log: Optional[Path], run_dir: Optional[str], job_id: str) -> Optional[Path]:
    """Keep the end of this job's driver log ``log`` (the last :data:`KEPT_LINES` lines, at most
    :data:`KEPT_BYTES`) at :func:`rayjobs.contract.paths.kept_log`, written atomically: first a line
    saying where the whole log stays, then the lines of the log's start the end lacks (the step
    total, the W&B run), then the end. The kept file, or None (no log file, no run dir, a disk that
    refused it: the job's own outcome never depends on it)."""
    if log is None or not run_dir or not job_id:
        return None
    import socket  # here: a runner held in the queue's standby imports only what it needs to wait

    from rayjobs.contract.files import write_atomic
    from rayjobs.contract.paths import KEPT_NOTE, kept_log

    try:
        with log.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(0)
            head = f.read(min(HEAD_BYTES, size))
            f.seek(max(0, size - KEPT_BYTES))
            end = f.read()
        lines = end.splitlines(keepends=True)[1 if size > KEPT_BYTES else 0:][-KEPT_LINES:]
        tail = ANSI.sub("", b"".join(lines).decode("utf-8", "replace"))
        facts = [ln for ln in ANSI.sub("", head.decode("utf-8", "replace")).splitlines()
                 if any(k in ln for k in HEAD_FACTS) and ln not in tail][:2]
        note = KEPT_NOTE.format(lines=len(lines), size=size, path=log, host=socket.gethostname())
        dest = kept_log(run_dir, job_id)
        write_atomic(dest, "".join(x + "\n" for x in [note, *facts]).encode() + tail.encode())
        return dest
    except OSError:
        return None

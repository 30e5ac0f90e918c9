"""Where a run's files live on the storage root (the same absolute paths on every node).

A *run* is verl's ``trainer.experiment_name``: a job and the ``rayjobs resume`` of it share one, so
they share these paths. Layout::

    <storage>/checkpoints/<project>/<run>/                    verl's trainer.default_local_dir
        latest_checkpointed_iteration.txt                     verl's tracker: the last COMPLETE checkpoint
        global_step_<N>/
    <storage>/runs/<project>/<run>/
        metrics.<attempt>.jsonl                               verl's file logger, one file per attempt
        stop-at-checkpoint.json                               a request to stop after the next checkpoint
        log.<job id>.tail                                     the end of a job's driver log, kept by its runner
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

#: verl's checkpoint tracker (written last, after a checkpoint is complete).
TRACKER = "latest_checkpointed_iteration.txt"
#: The stop-at-the-next-checkpoint request a job's runner watches for.
STOP_REQUEST = "stop-at-checkpoint.json"
_METRICS = re.compile(r"^metrics\.(\d+)\.jsonl$")


@dataclass(frozen=True)
class RunPaths:
    """A run's directories (absolute strings, as the job's metadata carries them)."""

    run_dir: str
    checkpoint_dir: str = ""

    @classmethod
    def of(cls, storage: str, project: str, run: str, checkpoint_dir: Optional[str] = None) -> "RunPaths":
        """The default layout under ``storage`` (``checkpoint_dir``: the user's own, if set)."""
        return cls(f"{storage}/runs/{project}/{run}", checkpoint_dir or f"{storage}/checkpoints/{project}/{run}")

    def metrics(self, attempt: int) -> Path:
        """Attempt ``attempt``'s metrics file (verl's ``file`` logger writes it)."""
        return metrics_file(self.run_dir, attempt)

    def attempts(self) -> dict[int, Path]:
        """The run's metrics files on disk, by attempt number."""
        return metrics_files(self.run_dir)

    def tracker(self) -> Optional[Path]:
        return Path(self.checkpoint_dir) / TRACKER if self.checkpoint_dir else None

    def stop_request(self) -> Path:
        return Path(self.run_dir) / STOP_REQUEST


def metrics_file(run_dir: Union[str, Path], attempt: int) -> Path:
    """``<run_dir>/metrics.<attempt>.jsonl``: attempt ``attempt``'s metrics file (the one spelling of it)."""
    return Path(run_dir) / f"metrics.{attempt}.jsonl"


def metrics_files(run_dir: Optional[str]) -> dict[int, Path]:
    """``{attempt: metrics file}`` of the run dir, in attempt order (none when it is not there)."""
    if not run_dir:
        return {}
    try:
        names = [p for p in Path(run_dir).iterdir() if _METRICS.match(p.name)]
    except OSError:
        return {}
    return dict(sorted((int(_METRICS.match(p.name).group(1)), p) for p in names))  # type: ignore[union-attr]


def attempt_of(path: Path) -> Optional[int]:
    """The attempt number of a metrics file's name (None for another file)."""
    m = _METRICS.match(Path(path).name)
    return int(m.group(1)) if m else None


#: The first line of a kept log's end (:func:`kept_log`): how much it holds and where the whole log stays.
KEPT_NOTE = "[rayjobs] kept on the storage root: the last {lines} lines of this job's log ({size} bytes in all); " \
            "the whole log: {path} on {host}"
_WHOLE = re.compile(r"^\[rayjobs\] kept on the storage root: .*; the whole log: (?P<path>\S+) on (?P<host>\S+)\s*$", re.M)


def kept_log(run_dir: str, job_id: str) -> Path:
    """Where a job's runner keeps the end of its driver log when the job ends. It outlives the
    head's Ray session, whose log dir (and so the job's log) a restarted head no longer serves."""
    return Path(run_dir) / f"log.{job_id}.tail"


def whole_log_of(kept: str) -> Optional[tuple[str, str]]:
    """(path, host) of the whole log a kept log's end names in its first line, or None."""
    m = _WHOLE.search(kept[:4096])
    return (m.group("path"), m.group("host")) if m else None

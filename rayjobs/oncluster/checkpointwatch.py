"""What the runner watches while a trainer runs: verl's checkpoints, and a request to stop at the next one.

verl saves ``<default_local_dir>/global_step_N/`` and then, last, writes N into
``latest_checkpointed_iteration.txt``; so the tracker only ever names a complete checkpoint (a save
cut off leaves the previous N, which is also what ``resume_mode=auto`` resumes from). The watch
logs ``[rayjobs] checkpoint saved: step N`` each time the tracker changes -- the line ``rayjobs
status`` and ``rayjobs stop`` read the last checkpoint from -- and acts on
``<run_dir>/stop-at-checkpoint.json``, which ``rayjobs stop --at-checkpoint`` leaves through a
control job: once the tracker moves past the step it named when the request was seen (or the
request's timeout passes), the job is stopped through Ray (STOPPED, the head's grace period), so
it is never cut off mid-save by it.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from rayjobs.contract.files import place, write_atomic
from rayjobs.contract.paths import STOP_REQUEST as STOP_MARK, TRACKER
POLL_S = 1.0
SAVED = "checkpoint saved: step {}"  #: the runner's log line (after "[rayjobs] "); views parse it
LAST = "last checkpoint: step {}"


def saved_step(checkpoint_dir: Optional[str]) -> Optional[int]:
    """The step of the last complete checkpoint in ``checkpoint_dir`` (verl's tracker file), or None."""
    if not checkpoint_dir:
        return None
    try:
        return int((Path(checkpoint_dir) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


ASIDE = ".incomplete"  #: where half-written checkpoint folders are moved, inside the checkpoint dir
STEP_DIR = re.compile(r"^global_step_(\d+)$")


def set_aside_incomplete(checkpoint_dir: Optional[str]) -> list[str]:
    """Move every ``global_step_N`` newer than the tracker's step into ``.incomplete/`` (kept, not deleted).

    Such a folder is a save that was cut off (verl writes the tracker last): left in place, the
    next attempt would write its own save of step N into a folder holding the dead attempt's
    partial shards, and any tool that picks the newest ``global_step_*`` would take it. Returns
    the folders moved, for the log.
    """
    if not checkpoint_dir or not os.path.isdir(checkpoint_dir):
        return []
    done = saved_step(checkpoint_dir) or 0
    moved = []
    for d in sorted(Path(checkpoint_dir).iterdir()):
        m = STEP_DIR.match(d.name)
        if not m or int(m.group(1)) <= done or not d.is_dir():
            continue
        dest = Path(checkpoint_dir) / ASIDE / f"{d.name}.{time.strftime('%Y%m%dT%H%M%S')}"
        dest.parent.mkdir(exist_ok=True)
        if not place(d, dest):
            continue
        moved.append(f"{d.name} -> {ASIDE}/{dest.name}")
    return moved


def last_logged_step(metrics: Optional[Path]) -> Optional[int]:
    """The last step in a metrics file of verl's file logger (its last 64 KiB), or None."""
    if metrics is None:
        return None
    try:
        with open(metrics, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue
        if isinstance(step, int):
            return step
    return None


def ask_stop(run_dir: Path, job_id: str, timeout_s: float, reason: str = "", by: str = "",
             at_step: Optional[int] = None) -> None:
    """Leave the request (a control job or the queue's preemption calls this on the cluster): stop
    after the next checkpoint; ``reason`` is said in the job's log ("preempted by X"); ``by``: the
    job a preemption stops it for (what :func:`withdraw_stop` names); ``at_step``: a checkpoint at
    or past this step will do, even one saved before the request was seen (successive halving: the
    rung's own checkpoint holds everything its verdict was made on)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    body = {"job_id": job_id, "asked_at": time.time(), "timeout_s": float(timeout_s), "reason": reason, "by": by,
            **({"at_step": int(at_step)} if at_step is not None else {})}
    write_atomic(run_dir / STOP_MARK, json.dumps(body).encode())


def withdraw_stop(run_dir: Path, job_id: str, by: str) -> bool:
    """Take back a preemption's request (the job it was for no longer waits): the runner, not yet
    stopping, sees it gone and trains on. A user's request (no ``by``, or another) is left alone.
    True if the request was there and is gone."""
    mark = run_dir / STOP_MARK
    try:
        req = json.loads(mark.read_text())
    except (OSError, ValueError):
        return False
    if req.get("job_id") != job_id or req.get("by") != by:
        return False
    mark.unlink(missing_ok=True)
    return True


class CheckpointWatch:
    """A daemon thread for one attempt: logs new checkpoints, honours a stop-at-checkpoint request."""

    def __init__(self, checkpoint_dir: Optional[str], run_dir: Optional[Path], job_id: str,
                 log: Callable[[str], None], on_stop: Callable[[str], Optional[bool]], since: float,
                 on_asked: Optional[Callable[[], None]] = None, metrics: Optional[Path] = None) -> None:
        """``since``: when this job's runner started (a request made before it is stale);
        ``on_asked``: called once a request is seen (to get the stop ready: imports, a client);
        ``metrics``: this attempt's metrics file (its last step: has anything been trained since
        the last checkpoint? If not, a stop loses nothing and happens at once). ``on_stop``'s
        answer is kept as ``through_ray``: did the stop go through Ray's Jobs API?"""
        self.checkpoint_dir, self.run_dir, self.job_id, self.metrics = checkpoint_dir, run_dir, job_id, metrics
        self.log, self.on_stop, self.on_asked = log, on_stop, on_asked
        self.last = saved_step(checkpoint_dir)
        self.asked: Optional[tuple[float, Optional[int], float]] = None  #: (deadline, step then, timeout)
        self.fired = False
        self.through_ray: Optional[bool] = None
        self.since = since
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rayjobs-checkpoints", daemon=True)

    def start(self) -> "CheckpointWatch":
        if self.last is not None:
            self.log(LAST.format(self.last))
        self._thread.start()
        return self

    def close(self, wait_s: float = 5.0) -> None:
        """Stop watching, after one last look: the trainer's final save often lands within the last
        poll before it exits, and unlogged it would be a checkpoint no view knows of. ``wait_s``:
        how long an ``on_stop`` under way may still take."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=wait_s)  # wakes at once unless an on_stop is under way
        step = saved_step(self.checkpoint_dir)
        if step is not None and step != self.last:
            self.last = step
            self.log(SAVED.format(step))

    def _run(self) -> None:
        # a request is looked for 4x a second (a stat), and once one is seen 5x as often: the steps
        # run past the save are redone on resume
        while not self._done.wait(POLL_S / 4 if self.asked is None else POLL_S / 20):
            step = saved_step(self.checkpoint_dir)
            if step is not None and step != self.last:
                self.last = step
                self.log(SAVED.format(step))
            try:
                self._check_request(step)
            except Exception as e:  # noqa: BLE001 (never let a watch take the runner down)
                self.log(f"stop at checkpoint: {type(e).__name__}: {e}")

    def _request(self) -> Optional[dict[str, Any]]:
        """The request for this job made since its runner started (an older one is dropped)."""
        if self.run_dir is None:
            return None
        mark = self.run_dir / STOP_MARK
        try:
            req = json.loads(mark.read_text())
        except (OSError, ValueError):
            return None
        if req.get("job_id") != self.job_id or float(req.get("asked_at") or 0) < self.since - 5:
            mark.unlink(missing_ok=True)  # left from an earlier job of this run (a resume's)
            return None
        return req

    def _check_request(self, step: Optional[int]) -> None:
        if self.fired:
            return
        if self.asked is None:
            req = self._request()
            if req is None:
                return
            timeout = float(req.get("timeout_s") or 3600)
            at = req.get("at_step")
            then = at - 1 if isinstance(at, int) else step  # it fires at a checkpoint past ``then``
            self.asked = (time.monotonic() + timeout, then, timeout)
            since = f"the last one is step {step}" if step is not None else "none yet"
            why = str(req.get("reason") or "stop at checkpoint asked")
            self.log(f"{why}: stopping once the next checkpoint is saved ({since}; at most {timeout:g} s)")
            if self.on_asked is not None:
                self.on_asked()
            trained = last_logged_step(self.metrics)
            if step is not None and then is not None and step > then:
                self._fire(f"checkpoint step {step} saved (at or past step {then + 1}, as asked)")
            elif step is not None and trained is not None and trained <= step:
                self._fire(f"nothing trained since checkpoint step {step}: nothing to lose")
            return
        deadline, then, timeout = self.asked
        if self.run_dir is not None and not (self.run_dir / STOP_MARK).exists():
            self.asked = None  # withdrawn (only a preemption's is: the job it was for no longer waits)
            self.log("stop at checkpoint called off: the request was withdrawn; training goes on")
        elif step is not None and (then is None or step > then):
            self._fire(f"checkpoint step {step} saved")
        elif time.monotonic() >= deadline:
            self._fire(f"no new checkpoint within {timeout:g} s; the steps since {'step ' + str(then) if then is not None else 'the start'} will be redone")

    def _fire(self, reason: str) -> None:
        self.fired = True
        if self.run_dir is not None:
            (self.run_dir / STOP_MARK).unlink(missing_ok=True)
        self.log(f"stopping at checkpoint: {reason}")
        self.through_ray = bool(self.on_stop(reason))

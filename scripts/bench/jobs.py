"""A benchmark's jobs: sent as a sweep or with the submit command, Ray's status of them, bounded waits,
and the times their runners print (``[rayjobs] admitted after ... running from ...``,
``[rayjobs] attempt finished ... at ...``): one machine's clock, read back from the job's log."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any, Optional, Sequence

from bench import REPO  # noqa: F401  (puts tests/ on sys.path)

from rayjobs.shared import parse_stamp  # noqa: E402

ADMITTED = re.compile(r"\[rayjobs\] admitted after [\d.]+ s at (\S+ \S+ UTC)")
RUNNING = re.compile(r"\[rayjobs\] admitted after [\d.]+ s at \S+ \S+ UTC, running from (\S+ \S+ UTC)")
FINISHED = re.compile(r"\[rayjobs\] attempt finished with exit code -?\d+ after [\d.]+ s at (\S+ \S+ UTC)")
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


def stamps(pattern: re.Pattern, log: str) -> list[float]:
    """Every time ``pattern``'s group names in ``log`` (each attempt's, in order)."""
    return [t for t in (parse_stamp(m) for m in pattern.findall(log)) if t is not None]


def log_of(client: Any, sid: str) -> str:
    """A job's log through Ray's SDK; "" for one Ray does not know (still waiting in the queue)."""
    try:
        return client.get_job_logs(sid)
    except RuntimeError:
        return ""


def ray_status(client: Any, sid: str) -> str:
    """Ray's status of a job (``RUNNING``); QUEUED while the queue holds it (Ray does not know it yet)."""
    try:
        return str(client.get_job_status(sid)).split(".")[-1]
    except RuntimeError as e:
        if "does not exist" in str(e) or "404" in str(e):
            return "QUEUED"
        raise


def wait_ray(client: Any, ids: Sequence[str], want: Sequence[str] = ENDED, timeout: float = 600,
             every: float = 0.5) -> dict[str, str]:
    """Poll Ray until every job of ``ids`` is in one of ``want`` (bounded): their statuses."""
    deadline = time.monotonic() + timeout
    st: dict[str, str] = {}
    while time.monotonic() < deadline:
        st = {i: ray_status(client, i) for i in ids}
        if all(s in want for s in st.values()):
            return st
        time.sleep(every)
    raise RuntimeError(f"jobs not {'/'.join(want)} after {timeout:.0f} s: {st}")


def wait_admitted(client: Any, sid: str, timeout: float = 120) -> float:
    """When the queue admitted ``sid``, by its runner's line (waits for it, bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = stamps(ADMITTED, log_of(client, sid))
        if got:
            return got[0]
        time.sleep(0.3)
    raise RuntimeError(f"{sid} not admitted after {timeout:.0f} s")


def runs(client: Any, ids: Sequence[str]) -> list[tuple[float, float, float, str]]:
    """(admitted: the queue's decision, running: the runner's start, finished: its trainer's exit, id)
    per job, by admission; each job must have ended."""
    out = []
    for i in ids:
        log = client.get_job_logs(i)
        a, r, f = stamps(ADMITTED, log), stamps(RUNNING, log), stamps(FINISHED, log)
        if not a or not r or not f:
            raise RuntimeError(f"{i}: no admission/finish line in its log:\n{log[-1500:]}")
        out.append((a[0], r[0], f[-1], i))
    return sorted(out)


def send_points(c: Any, points: Sequence[Sequence[str]], *, hold_gpus: bool = True) -> tuple[list[str], float]:
    """Compose every point of ``+exp=fake_ppo`` (the stand-in holding its GPUs), then send them together
    as one sweep (one point: one job), in this process: (ids, seconds the send alone took)."""
    from rayjobs.submit import pipeline
    from rayjobs.config import compose

    held = ["+fake.hold_gpus=true"] if hold_gpus else []
    cs = [compose.compose(["+exp=fake_ppo", f"rayjobs.address={c.address}", *held, *p]) for p in points]
    prepared = pipeline.prepare(cs, sweep=len(cs) > 1)
    t = time.monotonic()
    ids = pipeline.send(prepared, address=c.address)
    return ids, time.monotonic() - t


def submit_cmd(c: Any, *args: str, cwd: Optional[str] = None, timeout: float = 300) -> tuple[float, float, list[str]]:
    """``python -m rayjobs.submit ARGS`` against ``c``, as a user runs it: (command start, its exit,
    the ids it printed); it must succeed."""
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "rayjobs.submit", *args], cwd=cwd, env=c.client_env(),
                       capture_output=True, text=True, timeout=timeout)
    t1 = time.time()
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"submit failed ({r.returncode}): {r.stderr[-2000:]}")
    return t0, t1, r.stdout.split()


def queue_events(gcs: Optional[str] = None) -> list[tuple[float, str, str]]:
    """The queue actor's recent events (time, what, detail), through a Ray driver of this process
    (``gcs``: connected for this call only; None: the driver this process already has)."""
    import ray

    if gcs:
        ray.init(address=gcs, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    try:
        snap = ray.get(ray.get_actor("queue", namespace="rayjobs").snapshot.remote(), timeout=60)
        return [tuple(e) for e in snap["events"]]
    finally:
        if gcs:
            ray.shutdown()


# --------------------------------------------------------------------------- what a run leaves on disk
#: verl's checkpoint tracker in a run's checkpoint dir: the step of its last complete save.
TRACKER = "latest_checkpointed_iteration.txt"


def attempts(run_dir: str) -> dict[int, list[int]]:
    """{attempt: [steps it logged]} from a run's per-attempt metrics files (verl's file logger)."""
    from pathlib import Path

    out = {}
    for f in Path(run_dir).glob("metrics.*.jsonl"):
        out[int(f.name.split(".")[1])] = [json.loads(ln)["step"] for ln in f.read_text().splitlines() if ln.strip()]
    return dict(sorted(out.items()))


def saved_step(checkpoint_dir: str) -> Optional[int]:
    """The step of the run's last complete checkpoint (its tracker), or None."""
    from pathlib import Path

    try:
        return int((Path(checkpoint_dir) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None

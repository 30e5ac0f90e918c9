"""Watch who holds GPU memory, by job (docs/gpu-e2e.md §5): ``python3 scripts/gpu/gpuwatch.py OUT [SECONDS]``.

Every 0.5 s: ``nvidia-smi --query-compute-apps=pid,used_memory`` and, for each process, the job it
belongs to (the ``RAYJOBS_JOB`` mark every process of a rayjobs job carries, read from
``/proc/PID/environ``). A line is written to OUT only when the set changes:
``<epoch s> <UTC> total=<MiB> <job>:<pid>:<MiB> ...`` (``-`` for a process of no job). Bounded by
SECONDS (default 3600). ``--report OUT LOG...``: for each ``admitted ... at <UTC>`` line of the
rayjobs runner logs LOG, which jobs still held GPU memory at that moment.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime, timezone


def job_of(pid: str) -> str:
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return "?"
    for kv in env:
        if kv.startswith(b"RAYJOBS_JOB="):
            return kv.split(b"=", 1)[1].decode() or "-"
    return "-"


def sample() -> list[tuple[str, str, int]]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            rows.append((job_of(parts[0]), parts[0], int(float(parts[1] or 0))))
    return sorted(rows)


def watch(out: str, seconds: float) -> None:
    last = None
    deadline = time.time() + seconds
    with open(out, "a") as f:
        while time.time() < deadline:
            rows = sample()
            key = [(j, p) for j, p, _ in rows]
            if key != last:
                now = time.time()
                utc = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]
                total = sum(m for _, _, m in rows)
                f.write(f"{now:.3f} {utc} total={total} " + " ".join(f"{j}:{p}:{m}" for j, p, m in rows) + "\n")
                f.flush()
                last = key
            time.sleep(0.5)


ADMITTED = re.compile(r"\[rayjobs\] admitted after [\d.]+ s at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC")


def report(out: str, logs: list[str]) -> None:
    """At each admission in the runner logs: the GPU holders the watch saw last before it."""
    samples = []
    for line in open(out):
        t, _, _, *procs = line.split()
        samples.append((float(t), procs))
    for path in logs:
        job = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        for m in ADMITTED.finditer(open(path, errors="replace").read()):
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
            before = [p for t, p in samples if t <= at]
            held = before[-1] if before else []
            print(f"{job} admitted at {m.group(1)} UTC: GPU memory then held by "
                  f"{', '.join(held) if held else 'nobody'}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:
        report(sys.argv[2], sys.argv[3:])
    else:
        watch(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 3600)

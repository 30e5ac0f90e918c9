#!/usr/bin/env python3
"""Benchmark ``rayjobs tail``: line latency vs ``ray job logs -f`` (side by side, one run) and the
memory of a tail that follows a ~1 GiB log. Writes the ``tail`` section of docs/benchmarks.md.

Everything runs in a private network namespace (the harness), on a fresh embedded head of its own
($RAYJOBS_HOME in a temp dir), stopped by PID at the end. Bounded: a few minutes at most.

    sudo .venv/bin/python scripts/bench_tail.py [--lines 300] [--gib 1.0]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import REPO, doc, session  # noqa: E402
from bench.sample import proc_kb  # noqa: E402
from bench.timing import median, pct  # noqa: E402

PY = sys.executable
TICKER = '''
import random, sys, time
n, warmup = int(sys.argv[1]), float(sys.argv[2])
time.sleep(warmup)  # both followers attach first
rnd = random.Random(7)
for i in range(n):
    print(f"tick {i} {time.time():.6f}", flush=True)
    time.sleep(rnd.uniform(0.02, 0.08))  # no fixed phase against a follower's poll period
'''
BULK = '''
import sys, time
total, rate, warmup = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
time.sleep(warmup)
out = sys.stdout.buffer
pad = b"x" * 1012
t0, written, i = time.time(), 0, 0
while written < total:
    block = b"".join(b"%010d " % (i + k) + pad + b"\\n" for k in range(1024))  # 1 MiB, 1024-byte lines
    out.write(block)
    out.flush()
    written += len(block)
    i += 1024
    ahead = written / rate - (time.time() - t0)
    if ahead > 0:
        time.sleep(ahead)
print(f"bulk done {i} lines", flush=True)
'''
TICK = re.compile(r"tick (\d+) (\d+\.\d+)")


def followers(address: str, job_id: str, token_path: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Both followers of ``job_id``: (command, environment)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ray_env = dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_path)
    ray_env.pop("RAY_AUTH_TOKEN", None)
    return {
        "rayjobs tail": ([PY, "-m", "rayjobs.cli", "tail", job_id, "--plain"], env),  # the embedded head
        "ray job logs -f": ([str(Path(PY).with_name("ray")), "job", "logs", "-f", job_id, "--address", address], ray_env),
    }


def latency(head: dict[str, Any], n: int) -> dict[str, dict]:
    """Both followers on one job printing ``n`` stamped lines: each line's delay, per follower."""
    job = head["client"].submit_job(entrypoint=f"python3 ticker.py {n} 8", runtime_env={"working_dir": head["wd"]})
    arrivals: dict[str, dict[int, float]] = {}

    def pump(got: dict[int, float], stream: Any) -> None:
        for line in stream:
            now, m = time.time(), TICK.search(line)
            if m:
                i = int(m.group(1))
                got[i] = now - float(m.group(2)) if i not in got else float("nan")  # nan marks a repeat
    procs, threads = [], []
    for name, (cmd, env) in followers(head["address"], job, head["token"]).items():
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
        arrivals[name] = {}
        procs.append(p)
        threads.append(threading.Thread(target=pump, args=(arrivals[name], p.stdout), daemon=True))
        threads[-1].start()
    for p in procs:
        try:
            p.wait(timeout=120 + n * 0.1)
        except subprocess.TimeoutExpired:
            p.kill()
    for th in threads:
        th.join(10)
    out = {}
    for name, got in arrivals.items():
        lat = [v for v in got.values() if v == v]
        out[name] = {"lines": len(got), "repeats": len(got) - len(lat), "median": median(lat), "p90": pct(lat, 0.9),
                     "max": max(lat, default=float("nan"))}
    return out


def follow(cmd: list[str], env: dict[str, str], limit: float = 240.0) -> dict[str, Any]:
    """One follower, its stdout drained by a pipe reader, its RSS sampled every 0.25 s."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
    state = {"bytes": 0, "lines": 0, "first": 0.0, "last": 0.0}

    def drain() -> None:
        while b := p.stdout.read1(1 << 20):
            state["last"] = time.monotonic()
            state["first"] = state["first"] or state["last"]
            state["bytes"] += len(b)
            state["lines"] += b.count(b"\n")
    th = threading.Thread(target=drain, daemon=True)
    th.start()
    samples = []  # (seconds, bytes received, rss KiB)
    while p.poll() is None and time.monotonic() - t0 < limit:
        if rss := proc_kb(p.pid):
            samples.append((time.monotonic() - t0, state["bytes"], rss))
        time.sleep(0.25)
    timed_out = p.poll() is None
    if timed_out:
        p.kill()
    p.wait()
    th.join(10)
    moving = [s for s in samples if s[1] >= 16 << 20]
    first = moving[0] if moving else (samples[0] if samples else (0, 0, 0))
    return {"bytes": state["bytes"], "lines": state["lines"], "wall_s": time.monotonic() - t0, "timed_out": timed_out,
            "rss_start_mib": first[2] / 1024, "rss_peak_mib": max((s[2] for s in samples), default=0) / 1024,
            "rss_end_mib": (samples[-1][2] if samples else 0) / 1024,
            "mib_s": state["bytes"] / (1 << 20) / max(1e-9, state["last"] - state["first"]),
            "samples": [(round(s[0], 1), s[1] >> 20, round(s[2] / 1024, 1)) for s in samples[:: max(1, len(samples) // 12)]]}


def memory(head: dict[str, Any], gib: float, rate_mib_s: float) -> dict[str, dict]:
    """Each follower, one after the other, of one job writing ``gib`` GiB of log."""
    total = int(gib * (1 << 30))
    job = head["client"].submit_job(entrypoint=f"python3 bulk.py {total} {rate_mib_s * (1 << 20)} 6",
                                    runtime_env={"working_dir": head["wd"]})
    return {name: follow(cmd, env) for name, (cmd, env) in followers(head["address"], job, head["token"]).items()}


def report(lat: dict, mem: dict, a: argparse.Namespace) -> str:
    """The section."""
    rows = [(name, f"{r['lines']}/{a.lines}", r["repeats"], *(f"{r[k]:.3f} s" for k in ("median", "p90", "max")))
            for name, r in (("`rayjobs tail --plain`", lat["rayjobs tail"]), ("`ray job logs -f`", lat["ray job logs -f"]))]
    mrows = [(f"`{name}`", f"{r['bytes'] / (1 << 30):.2f} GiB{' (cut off at the time limit)' if r['timed_out'] else ''}",
              r["lines"], f"{r['wall_s']:.0f} s", f"{r['mib_s']:.0f} MiB/s",
              *(f"{r[k]:.0f} MiB" for k in ("rss_start_mib", "rss_peak_mib", "rss_end_mib"))) for name, r in mem.items()]
    samples = mem.get("rayjobs tail", {}).get("samples")
    over = ("\n\n`rayjobs tail` RSS over the run (s, MiB received, RSS MiB): "
            + ", ".join(f"({x}, {y}, {z})" for x, y, z in samples)) if samples else ""
    return f"""## Following a job's log: `rayjobs tail` vs `ray job logs -f`

`scripts/bench_tail.py` (Ray {version("ray")}, {platform.machine()}, {os.cpu_count()} cores, private network \
namespace, embedded head on 127.0.0.1, token auth). Measured {time.strftime('%Y-%m-%d')}.

**Latency** from a `print(..., flush=True)` in the job to the line read from the follower's stdout, both \
followers attached to the same job at the same time; {a.lines} lines at random 20-80 ms intervals.

{doc.table(["follower", "lines received", "repeated", "median", "p90", "max"], rows)}

**Memory** of a follower while the job writes {a.gib:g} GiB of log ({int(a.gib * (1 << 30)) // 1024} lines of 1 KiB, at up to \
{a.rate:g} MiB/s), stdout drained by a pipe reader; `rayjobs tail` follows it while it is written, \
`ray job logs -f` then reads the same (finished) log. RSS is sampled every 0.25 s; "start" = once \
16 MiB had arrived; throughput = bytes / (last byte - first byte).

{doc.table(["follower", "received", "lines", "wall", "throughput", "RSS start", "RSS peak", "RSS end"], mrows)}{over}

How: `rayjobs tail` reads `GET /api/v0/logs/stream?submission_id=..&node_id=..&lines=-1&interval=0.05` \
(Ray's state API follow mode: the agent re-reads the file every 50 ms) over one HTTP connection, in a \
reader thread feeding a bounded queue; `ray job logs -f` uses the Jobs API websocket, whose agent side \
polls the file once a second (`JobManager.LOG_TAIL_SLEEP_S = 1`). After a dashboard restart the stream is \
reopened and the bytes already printed are skipped (Ray 2.60's HTTP log API has no byte offset for job \
logs), so no line is lost or repeated (tests/test_tail.py kills and restarts the dashboard mid-tail)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=256.0, help="MiB/s the bulk job writes at most")
    a = doc.parse(ap, {"lines": 20, "gib": 0.01})
    with session.run("rjbt", project=False) as r:
        (r.work / "ticker.py").write_text(TICKER)
        (r.work / "bulk.py").write_text(BULK)
        from rayjobs.client import embedded
        from rayjobs.client.dashboard import Dashboard

        target = embedded.ensure(quiet=True)
        try:
            head = {"client": Dashboard(target).sdk, "address": target.address, "wd": str(r.work),
                    "token": str(embedded.token_file())}
            print("latency ...", file=sys.stderr)
            lat = latency(head, a.lines)
            print(lat, file=sys.stderr)
            print("memory ...", file=sys.stderr)
            mem = memory(head, a.gib, a.rate)
            print({k: {kk: vv for kk, vv in v.items() if kk != "samples"} for k, v in mem.items()}, file=sys.stderr)
        finally:
            embedded.stop()
    doc.publish(a, "tail", report(lat, mem, a))
    return 0


if __name__ == "__main__":
    sys.exit(main())

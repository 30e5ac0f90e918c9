#!/usr/bin/env python3
"""Benchmark ``rayjobs tail``: line latency vs ``ray job logs -f`` (side by side, one run) and the
memory of a tail that follows a ~1 GiB log. Writes the ``tail`` section of docs/benchmarks.md.

Everything runs in a private network namespace (benchlib), on a fresh embedded head of its own
($RAYJOBS_HOME in a temp dir), stopped by PID at the end. Bounded: a few minutes at most.

    sudo .venv/bin/python scripts/bench_tail.py [--lines 300] [--gib 1.0]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

REPO = benchlib.REPO
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


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def submit(client, workdir: Path, entrypoint: str) -> str:
    return client.submit_job(entrypoint=entrypoint, runtime_env={"working_dir": str(workdir)})


def followers(target, job_id: str, token_path: str) -> dict[str, list[str]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ray_env = dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_path)
    ray_env.pop("RAY_AUTH_TOKEN", None)
    ray_bin = str(Path(PY).with_name("ray"))
    return {
        "rayjobs tail": ([PY, "-m", "rayjobs.cli", "tail", job_id, "--plain"], env),  # the embedded head
        "ray job logs -f": ([ray_bin, "job", "logs", "-f", job_id, "--address", target.address], ray_env),
    }


def latency(target, client, workdir: Path, n: int) -> dict[str, dict]:
    job = submit(client, workdir, f"python3 ticker.py {n} 8")
    procs = {}
    arrivals: dict[str, dict[int, float]] = {}
    tick = re.compile(r"tick (\d+) (\d+\.\d+)")

    def pump(name: str, stream) -> None:
        got = arrivals[name]
        for line in stream:
            now = time.time()
            m = tick.search(line)
            if m:
                i = int(m.group(1))
                got[i] = now - float(m.group(2)) if i not in got else float("nan")  # nan marks a repeat
    threads = []
    for name, (cmd, env) in followers(target, job, str(target_token_path())).items():
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
        procs[name] = p
        arrivals[name] = {}
        th = threading.Thread(target=pump, args=(name, p.stdout), daemon=True)
        th.start()
        threads.append(th)
    for p in procs.values():
        try:
            p.wait(timeout=120 + n * 0.1)
        except subprocess.TimeoutExpired:
            p.kill()
    for th in threads:
        th.join(10)
    out = {}
    for name, got in arrivals.items():
        lat = [v for v in got.values() if v == v]
        out[name] = {"lines": len(got), "repeats": len(got) - len(lat), "median": statistics.median(lat) if lat else float("nan"),
                     "p90": pct(lat, 0.9) if lat else float("nan"), "max": max(lat) if lat else float("nan")}
    return out


def memory(target, client, workdir: Path, gib: float, rate_mib_s: float) -> dict[str, dict]:
    total = int(gib * (1 << 30))
    job = submit(client, workdir, f"python3 bulk.py {total} {rate_mib_s * (1 << 20)} 6")
    results = {}
    for name, (cmd, env) in followers(target, job, str(target_token_path())).items():
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
        state = {"bytes": 0, "lines": 0, "first": 0.0, "last": 0.0}

        def drain() -> None:
            while True:
                b = p.stdout.read1(1 << 20)
                if not b:
                    break
                state["last"] = time.monotonic()
                state["first"] = state["first"] or state["last"]
                state["bytes"] += len(b)
                state["lines"] += b.count(b"\n")
        th = threading.Thread(target=drain, daemon=True)
        th.start()
        samples = []  # (seconds, bytes received, rss KiB)
        limit = 240.0
        while p.poll() is None and time.monotonic() - t0 < limit:
            rss = rss_kib(p.pid)
            if rss:
                samples.append((time.monotonic() - t0, state["bytes"], rss))
            time.sleep(0.25)
        timed_out = p.poll() is None
        if timed_out:
            p.kill()
        p.wait()
        th.join(10)
        wall = time.monotonic() - t0
        moving = [s for s in samples if s[1] >= 16 << 20]
        first = moving[0] if moving else (samples[0] if samples else (0, 0, 0))
        results[name] = {
            "bytes": state["bytes"], "lines": state["lines"], "wall_s": wall, "timed_out": timed_out,
            "rss_start_mib": first[2] / 1024, "rss_peak_mib": max((s[2] for s in samples), default=0) / 1024,
            "rss_end_mib": (samples[-1][2] if samples else 0) / 1024,
            "mib_s": state["bytes"] / (1 << 20) / max(1e-9, state["last"] - state["first"]),
            "samples": [(round(s[0], 1), s[1] >> 20, round(s[2] / 1024, 1)) for s in samples[:: max(1, len(samples) // 12)]],
        }
    results["_expected_lines"] = total // 1024
    return results


_TOKEN: list[Path] = []


def target_token_path() -> Path:
    return _TOKEN[0]


def report(lat: dict, mem: dict, args: argparse.Namespace) -> str:
    rj, ray = lat["rayjobs tail"], lat["ray job logs -f"]
    lines = [
        "## Following a job's log: `rayjobs tail` vs `ray job logs -f`",
        "",
        f"`scripts/bench_tail.py` (Ray {ray_version()}, {platform.machine()}, {os.cpu_count()} cores, private network "
        f"namespace, embedded head on 127.0.0.1, token auth). Measured {time.strftime('%Y-%m-%d')}.",
        "",
        f"**Latency** from a `print(..., flush=True)` in the job to the line read from the follower's stdout, both "
        f"followers attached to the same job at the same time; {args.lines} lines at random 20-80 ms intervals.",
        "",
        "| follower | lines received | repeated | median | p90 | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in (("`rayjobs tail --plain`", rj), ("`ray job logs -f`", ray)):
        lines.append(f"| {name} | {r['lines']}/{args.lines} | {r['repeats']} | {r['median']:.3f} s | {r['p90']:.3f} s | {r['max']:.3f} s |")
    exp = mem.pop("_expected_lines")
    lines += [
        "",
        f"**Memory** of a follower while the job writes {args.gib:g} GiB of log ({exp} lines of 1 KiB, at up to "
        f"{args.rate:g} MiB/s), stdout drained by a pipe reader; `rayjobs tail` follows it while it is written, "
        f"`ray job logs -f` then reads the same (finished) log. RSS is sampled every 0.25 s; \"start\" = once "
        f"16 MiB had arrived; throughput = bytes / (last byte - first byte).",
        "",
        "| follower | received | lines | wall | throughput | RSS start | RSS peak | RSS end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in mem.items():
        note = " (cut off at the time limit)" if r["timed_out"] else ""
        lines.append(f"| `{name}` | {r['bytes'] / (1 << 30):.2f} GiB{note} | {r['lines']} | {r['wall_s']:.0f} s | "
                     f"{r['mib_s']:.0f} MiB/s | {r['rss_start_mib']:.0f} MiB | {r['rss_peak_mib']:.0f} MiB | {r['rss_end_mib']:.0f} MiB |")
    rjm = mem.get("rayjobs tail", {})
    if rjm.get("samples"):
        lines += ["", "`rayjobs tail` RSS over the run (s, MiB received, RSS MiB): "
                  + ", ".join(f"({a}, {b}, {c})" for a, b, c in rjm["samples"])]
    lines += [
        "",
        "How: `rayjobs tail` reads `GET /api/v0/logs/stream?submission_id=..&node_id=..&lines=-1&interval=0.05` "
        "(Ray's state API follow mode: the agent re-reads the file every 50 ms) over one HTTP connection, in a "
        "reader thread feeding a bounded queue; `ray job logs -f` uses the Jobs API websocket, whose agent side "
        "polls the file once a second (`JobManager.LOG_TAIL_SLEEP_S = 1`). After a dashboard restart the stream is "
        "reopened and the bytes already printed are skipped (Ray 2.60's HTTP log API has no byte offset for job "
        "logs), so no line is lost or repeated (tests/test_tail.py kills and restarts the dashboard mid-tail).",
    ]
    return "\n".join(lines)


def ray_version() -> str:
    from importlib.metadata import version

    return version("ray")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=256.0, help="MiB/s the bulk job writes at most")
    ap.add_argument("--no-write", action="store_true", help="print the section instead of writing docs/benchmarks.md")
    args = ap.parse_args()
    root = benchlib.isolated_home("rjbt")
    wd = root / "wd"
    wd.mkdir()
    (wd / "ticker.py").write_text(TICKER)
    (wd / "bulk.py").write_text(BULK)
    sys.path.insert(0, str(REPO))
    try:
        with benchlib.private_netns():
            from rayjobs.client import embedded
            from rayjobs.client.dashboard import Dashboard

            target = embedded.ensure(quiet=True)
            _TOKEN.append(embedded.token_file())
            try:
                client = Dashboard(target).sdk
                print("latency ...", file=sys.stderr)
                lat = latency(target, client, wd, args.lines)
                print(lat, file=sys.stderr)
                print("memory ...", file=sys.stderr)
                mem = memory(target, client, wd, args.gib, args.rate)
                print({k: {kk: vv for kk, vv in v.items() if kk != "samples"} if isinstance(v, dict) else v
                       for k, v in mem.items()}, file=sys.stderr)
            finally:
                embedded.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = report(lat, mem, args)
    if args.no_write:
        print(text)
    else:
        benchlib.write_section("tail", text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

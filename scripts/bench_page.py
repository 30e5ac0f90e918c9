"""Benchmark: the team's page's first load of the queue with 10,000 waiting jobs, side by side with
the door's job list on the same queue (``GET /v1/jobs``, the request ``rayjobs list --json`` makes).

The real door (its app, the queue service, its store, users, sessions) over the fast tier's fake
Jobs API (no Ray: a queue of 10,000 waiting jobs is the door's work, not Ray's), served by uvicorn
on 127.0.0.1 in this process, asked over HTTP by ``requests`` as a browser and the CLI would:

* page: ``GET /`` with the session cookie (the HTML: the first 50 of the line, filters, pager) and
  the five files it loads (style, htmx, uPlot, its script; the browser caches them after);
* page refresh: ``GET /page/queue`` (what the page asks every 3 s);
* list: ``GET /v1/jobs?limit=100000`` with a bearer token, and its JSON parsed (every job's view);
* ``--pages N``: N open pages for ``--pages-s`` seconds, polling as the page's script and htmx do
  (half the queue page: its partial every 3 s; half a running job's page: its partial and its
  metrics every 5 s, its log long-polled from its offset), from a client process of their own,
  while the job's log gains a line a second and its metrics a step every 2 s; the door process's
  CPU (user+sys) over that time, against the same time with none open.

Usage::

    .venv/bin/python scripts/bench_page.py [--jobs 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

STATIC = ["/static/page.css", "/static/vendor/uplot/uPlot.min.css", "/static/vendor/htmx/htmx.min.js",
          "/static/vendor/uplot/uPlot.iife.min.js", "/static/page.js"]


def door_with_queue(root: Path, waiting: int) -> Any:
    """The in-process door (tests/test_door_api.py's) with 2 running jobs and ``waiting`` behind them."""
    from test_door_api import Door
    from test_queueapi import job

    d = Door(root)
    d.send("alice", "run-a", groups=(2,))
    d.send("bob", "run-b")
    jobs = [job(f"w{i:05d}", (2,), storage=d.storage, user=("alice", "bob", "carol")[i % 3]) for i in range(waiting)]
    r = d.http.post("/v1/jobs", json={"jobs": jobs, "code": d.code})
    assert r.status_code == 201, r.text[:300]
    d.tick()
    return d


def serve(app: Any) -> tuple[str, Any]:
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def timed(fn: Callable[[], int], rounds: int) -> tuple[float, float, int]:
    """(median s, max s, bytes) over ``rounds`` calls (one unmeasured call first)."""
    fn()
    times, size = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        size = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), max(times), size


def poll_pages(base: str, token: str, n: int, seconds: float, job: str) -> None:
    """(the client process) ``n`` open pages polling for ``seconds``, as the page's htmx and script do."""
    import concurrent.futures

    def one(k: int) -> int:
        s = requests.Session()
        s.post(base + "/login", data={"token": token}, timeout=30)
        end, asked, offset = time.monotonic() + seconds, 0, 0
        plan = [("/page/queue", 3.0)] if k % 2 == 0 else [(f"/page/jobs/{job}", 5.0), (f"/page/jobs/{job}/metrics", 5.0)]
        due = {p: time.monotonic() + (k % 10) * 0.3 for p, _ in plan}  # not all at once
        log = None if k % 2 == 0 else concurrent.futures.ThreadPoolExecutor(1)
        follow = None
        while time.monotonic() < end:
            for path, every in plan:
                if time.monotonic() >= due[path]:
                    s.get(base + path, timeout=30)
                    due[path] += every
                    asked += 1
            if log is not None and (follow is None or follow.done()):
                if follow is not None:
                    r = follow.result()
                    offset = int(r.headers["X-Rayjobs-Next"])
                    asked += 1
                    if r.content:
                        time.sleep(1.0)  # the page's script: the next poll a second after bytes came
                follow = log.submit(s.get, f"{base}/page/jobs/{job}/log", params={"offset": offset, "wait": 20},
                                    timeout=60)
            time.sleep(0.05)
        if log is not None:
            log.shutdown(wait=True, cancel_futures=True)
        return asked

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        print(json.dumps({"requests": sum(pool.map(one, range(n)))}))


def grow(d: Any, job: str, stop: threading.Event) -> None:
    """The running job's log gains a line a second and its metrics a step every 2 s (as verl's would)."""
    log = Path(d.svc.ray_logs) / f"job-driver-{job}.log"
    run_dir = Path(d.svc.records[job].meta.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    step = 0
    while not stop.wait(1.0):
        step += 1
        with open(log, "a") as f:
            f.write(f"step:{step} - critic/score/mean:{step / 100}\n")
        if step % 2 == 0:
            with open(run_dir / "metrics.1.jsonl", "a") as f:
                f.write(json.dumps({"step": step // 2, "data": {"critic/score/mean": step / 100}}) + "\n")


def pages_cpu(base: str, token: str, n: int, seconds: float, job: str) -> tuple[float, float, int]:
    """(% of a core with none open, with ``n`` open, requests they made) for this process (the door)."""
    import os
    import subprocess

    def cpu() -> float:
        t = os.times()
        return t.user + t.system

    c0 = cpu()
    time.sleep(seconds)
    idle = (cpu() - c0) / seconds
    c0 = cpu()
    out = subprocess.run([sys.executable, __file__, "--client", base, token, str(n), str(seconds), job],
                         capture_output=True, text=True, timeout=seconds + 120)
    busy = (cpu() - c0) / seconds
    asked = json.loads(out.stdout.strip().splitlines()[-1])["requests"]
    return 100 * idle, 100 * busy, asked


def main() -> None:
    if sys.argv[1:2] == ["--client"]:
        base, token, n, seconds, job = sys.argv[2:7]
        poll_pages(base, token, int(n), float(seconds), job)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pages", type=int, default=20, help="open pages polling (0: not measured)")
    ap.add_argument("--pages-s", type=float, default=30.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = door_with_queue(Path(tmp), a.jobs)
        base, server = serve(d.app)
        browser = requests.Session()
        assert browser.post(base + "/login", data={"token": d.tokens["alice"]}, timeout=30).status_code == 200
        cli = requests.Session()
        cli.headers["Authorization"] = f"Bearer {d.tokens['alice']}"

        def page() -> int:
            r = browser.get(base + "/", timeout=60)
            assert r.status_code == 200 and "w00000" in r.text
            return len(r.content) + sum(len(browser.get(base + p, timeout=60).content) for p in STATIC)

        def refresh() -> int:
            return len(browser.get(base + "/page/queue", timeout=60).content)

        def listed() -> int:
            r = cli.get(base + "/v1/jobs", params={"limit": 100_000}, timeout=60)
            assert len(r.json()["jobs"]) == a.jobs + 2
            return len(r.content)

        rows = [("page: GET / + its 5 files (first load)", timed(page, a.rounds)),
                ("page: GET /page/queue (its 3 s refresh)", timed(refresh, a.rounds)),
                ("list: GET /v1/jobs (what `rayjobs list --json` asks), parsed", timed(listed, a.rounds))]
        stop = threading.Event()
        threading.Thread(target=grow, args=(d, "run-a", stop), daemon=True).start()
        cpu = pages_cpu(base, d.tokens["alice"], a.pages, a.pages_s, "run-a") if a.pages else None
        stop.set()
        server.should_exit = True
    print(f"{a.jobs:,} waiting + 2 running; {a.rounds} rounds each (median / max), this machine")
    for name, (med, worst, size) in rows:
        print(f"  {name:<62} {med:6.3f} s / {worst:6.3f} s  {size / 1024:8.0f} KiB")
    if cpu:
        print(f"  {a.pages} open pages for {a.pages_s:.0f} s ({cpu[2]} requests): the door's process {cpu[1]:.1f} % "
              f"of a core (none open: {cpu[0]:.1f} %)")
    print(json.dumps({name: {"median_s": round(m, 4), "max_s": round(w, 4), "bytes": s} for name, (m, w, s) in rows}
                     | ({"pages": {"n": a.pages, "idle_pct": round(cpu[0], 2), "open_pct": round(cpu[1], 2),
                                   "requests": cpu[2]}} if cpu else {})))


if __name__ == "__main__":
    main()

"""Benchmark: the team's page's first load of the queue with 10,000 waiting jobs, side by side with
the door's job list on the same queue (``GET /v1/jobs``, the request ``rayjobs list --json`` makes).

The real door (its app, the queue service, its store, users, sessions) over the fast tier's fake
Jobs API (no Ray: a queue of 10,000 waiting jobs is the door's work, not Ray's), served by uvicorn
on 127.0.0.1 in this process, asked over HTTP by ``requests`` as a browser and the CLI would:

* page: ``GET /`` with the session cookie (the HTML: the first 50 of the line, filters, pager) and
  the five files it loads (style, htmx, uPlot, its script; the browser caches them after);
* page refresh: ``GET /page/queue`` (what the page asks every 3 s);
* list: ``GET /v1/jobs?limit=100000`` with a bearer token, and its JSON parsed (every job's view).

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
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
        server.should_exit = True
    print(f"{a.jobs:,} waiting + 2 running; {a.rounds} rounds each (median / max), this machine")
    for name, (med, worst, size) in rows:
        print(f"  {name:<62} {med:6.3f} s / {worst:6.3f} s  {size / 1024:8.0f} KiB")
    print(json.dumps({name: {"median_s": round(m, 4), "max_s": round(w, 4), "bytes": s} for name, (m, w, s) in rows}))


if __name__ == "__main__":
    main()

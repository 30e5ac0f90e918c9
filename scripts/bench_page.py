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
  while the job's log gains a line about a second apart (0.5-1.5 s, stamped with its write time) and
  its metrics a step every 2 s; the door process's CPU (user+sys) over that time, against the same
  time with none open; and each stamped line's lag behind its write when a job page's long poll
  brought it back (the first answer, the backlog from before the page opened, not counted).
* ``--head``: on a real fake-GPU Ray head instead (``scripts/bench_door_load.py``'s: 1 node x 2 GPUs
  in a namespace, its members and a chain of fake-verl jobs holding both GPUs; its helpers are
  imported, not copied): a command job of no GPUs prints a stamped line about a second apart (its
  real driver log); for ``--pages-s`` seconds with none open, then as long with ``--pages`` open
  (half queue pages, half that job's page, as above), admission rounds as bench_door_load runs them
  (the holder stopped, the next job's ``admitted_at`` against the first sample of both GPUs free in
  Ray's view) and the queue actor's CPU (all its threads, ``/proc``), and the job pages' lag.

Usage::

    .venv/bin/python scripts/bench_page.py [--jobs 10000] [--rounds 7] [--pages 20] [--pages-s 30]
    sudo .venv/bin/python scripts/bench_page.py --head [--pages 20] [--pages-s 90]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

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


def stamps(text: str, now: float) -> list[float]:
    """The lag behind its log of each line a grower stamped (``... at=<time.time()>``), seen at ``now``."""
    return [now - float(w[3:]) for line in text.splitlines() for w in line.split() if w.startswith("at=")]


class OpenPage:
    """One open page (the client process's thread ``k``): even ``k`` a queue page (its partial every
    3 s), odd ``k`` a job page (its partial and metrics every 5 s, its log long-polled from its
    offset as page.js does: the next poll a second after bytes came, at once after none)."""

    def __init__(self, base: str, token: str, job: str, k: int) -> None:
        self.base, self.job, self.k, self.asked = base, job, k, 0
        self.lags: list[float] = []  #: each stamped line's lag behind its log when its poll came back
        self.errors: dict[str, int] = {}  #: failed requests by kind (a browser retries: so do we)
        self.s = requests.Session()
        self.s.post(base + "/login", data={"token": token}, timeout=30)
        self.log_s = requests.Session()  # the log's fetch: a connection of its own, as in a browser
        self.log_s.cookies.update(self.s.cookies)
        self.plan = [("/page/queue", 3.0)] if k % 2 == 0 else [(f"/page/jobs/{job}", 5.0), (f"/page/jobs/{job}/metrics", 5.0)]

    def refresh(self, end: float) -> None:
        due = {p: time.monotonic() + (self.k % 10) * 0.3 for p, _ in self.plan}  # not all at once
        while time.monotonic() < end:
            for path, every in self.plan:
                if time.monotonic() >= due[path]:
                    self.get(self.s, path, timeout=30)
                    due[path] += every
            time.sleep(0.05)

    def follow(self, end: float) -> None:
        """The log's long poll (a thread of its own, as the browser's fetch runs beside htmx)."""
        offset, first = 0, True
        while time.monotonic() < end:
            r = self.get(self.log_s, f"/page/jobs/{self.job}/log", params={"offset": offset, "wait": 20}, timeout=60)
            seen = time.time()
            if r is None:
                time.sleep(4.0)  # page.js: the next try 4 s after a failure
                continue
            offset = int(r.headers.get("X-Rayjobs-Next", offset))
            if r.content and not first:  # the first answer is the backlog from before the page opened
                self.lags.extend(stamps(r.text, seen))
            first = False
            if r.headers.get("X-Rayjobs-Over") == "1" and not r.content:
                return  # the job ended and its log is read: page.js stops following
            if r.content:
                time.sleep(1.0)

    def get(self, s: Any, path: str, **kw: Any) -> Any:
        """One request (counted); None, and an error counted by its kind, if it failed."""
        self.asked += 1
        try:
            r = s.get(self.base + path, **kw)
        except requests.RequestException as e:
            kind = f"{path.rsplit('/', 1)[-1]}: {type(e).__name__}"
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return None
        if r.status_code >= 400:
            kind = f"{path.rsplit('/', 1)[-1]}: HTTP {r.status_code}"
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return None
        return r

    def run(self, seconds: float) -> "OpenPage":
        end = time.monotonic() + seconds
        log = threading.Thread(target=self.follow, args=(end,), daemon=True)
        if self.k % 2:
            log.start()
        self.refresh(end)
        if self.k % 2:
            log.join(timeout=30)
        return self


def poll_pages(base: str, token: str, n: int, seconds: float, job: str) -> None:
    """(the client process) ``n`` open pages polling for ``seconds``: one JSON line, the requests
    they made and the log's lag behind its writer as the job pages saw it."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        pages = list(pool.map(lambda k: OpenPage(base, token, job, k).run(seconds), range(n)))
    errors: dict[str, int] = {}
    for p in pages:
        for k, v in p.errors.items():
            errors[k] = errors.get(k, 0) + v
    print(json.dumps({"requests": sum(p.asked for p in pages), "errors": errors,
                      "lags": [round(x, 4) for p in pages for x in p.lags]}))


def grow(d: Any, job: str, stop: threading.Event) -> None:
    """The running job's log gains a line a second and its metrics a step every 2 s (as verl's would)."""
    log = Path(d.svc.ray_logs) / f"job-driver-{job}.log"
    run_dir = Path(d.svc.records[job].meta.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    step, rng = 0, random.Random(0)
    while not stop.wait(rng.uniform(0.5, 1.5)):  # about a second apart, not in step with the page's polls
        step += 1
        with open(log, "a") as f:
            f.write(f"step:{step} - critic/score/mean:{step / 100} at={time.time():.6f}\n")
        if step % 2 == 0:
            with open(run_dir / "metrics.1.jsonl", "a") as f:
                f.write(json.dumps({"step": step // 2, "data": {"critic/score/mean": step / 100}}) + "\n")


def pages(base: str, token: str, n: int, seconds: float, job: str) -> dict[str, Any]:
    """``n`` open pages for ``seconds`` from a client process of their own: its JSON line."""
    import subprocess

    out = subprocess.run([sys.executable, __file__, "--client", base, token, str(n), str(seconds), job],
                         capture_output=True, text=True, timeout=seconds + 120)
    if out.returncode != 0:
        raise RuntimeError(f"the pages' client process failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pages_cpu(base: str, token: str, n: int, seconds: float, job: str) -> dict[str, Any]:
    """This process's (the door's) CPU, % of a core, with none open and with ``n`` open, and what they saw."""
    import os

    def cpu() -> float:
        t = os.times()
        return t.user + t.system

    c0 = cpu()
    time.sleep(seconds)
    idle = (cpu() - c0) / seconds
    c0 = cpu()
    got = pages(base, token, n, seconds, job)
    return dict(got, idle=100 * idle, busy=100 * (cpu() - c0) / seconds)


def lag_line(lags: list[float]) -> str:
    if not lags:
        return "no stamped line came back"
    return (f"median {statistics.median(lags):.2f} s, max {max(lags):.2f} s over {len(lags)} lines "
            f"({sum(x > 2 for x in lags)} over 2 s)")


# --------------------------------------------------------------------------- on a real head (--head)
#: A command job of no GPUs (it starts at once) whose log gains a line stamped with its write time
#: about a second apart: the job the open job pages show.
STAMP = ("import random, sys, time\nfor i in range(int(sys.argv[1])):\n"
         "    print(f'line {i} at={time.time():.6f}', flush=True)\n    time.sleep(random.uniform(0.5, 1.5))\n")


def stamp_job(base: str, token: str) -> str:
    """Upload the stamping script as alice and queue it (no GPUs); its id once it runs."""
    from clusterops import wait_until
    from rayjobs.contract import wire

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("stamp.py", STAMP)
    key = wire.code_key(hashlib.sha256(buf.getvalue()).hexdigest())
    auth = {"Authorization": f"Bearer {token}"}
    up = requests.put(f"{base}/v1/code/{key}", data=buf.getvalue(), timeout=60, headers={**auth, "Content-Type": "application/zip"})
    assert up.status_code in (200, 201), up.text
    job = {"entrypoint": "python3 -u stamp.py 3000", "submission_id": "page-stamp",
           "metadata": {"kind": "command", "gpu_groups": "[]"}}
    r = requests.post(f"{base}/v1/jobs", json={"jobs": [job], "code": key}, headers=auth, timeout=60)
    assert r.status_code == 201, r.text
    wait_until(lambda: requests.get(f"{base}/v1/jobs/page-stamp", timeout=30).json()["status"] == "RUNNING", 120,
               "the stamping job to run", 0.5)
    return "page-stamp"


def head_phase(c: Any, ctx: dict[str, Any], gpus: Any, n: int, seconds: float, job: str) -> dict[str, Any]:
    """``n`` open pages (0: none) for ``seconds`` while admission rounds go on: the rounds, the queue
    actor's CPU (all its threads; its busiest), what the pages saw, the load average."""
    import bench_door_load as load

    adm: list[dict[str, Any]] = []
    until = time.monotonic() + seconds
    rounds = threading.Thread(target=lambda: ctx.update(holder=load.rounds_during(c, ctx["holder"], gpus, until, adm)),
                              daemon=True)
    rounds.start()
    cpu0, t0 = load.threads_cpu(ctx["pid"]), time.monotonic()
    seen = pages(ctx["page"], ctx["tokens"][0], n, seconds, job) if n else time.sleep(seconds) or {}
    cpu = load.cpu_between(cpu0, load.threads_cpu(ctx["pid"]), time.monotonic() - t0)
    rounds.join(timeout=240)
    out = {"pages": n, "seconds": seconds, "cpu": cpu, "adm": [x["react_gpus"] for x in adm], "load": os.getloadavg()[0],
           "requests": seen.get("requests", 0), "errors": seen.get("errors", {}), "lags": seen.get("lags", [])}
    print(f"[bench] {n} pages: {json.dumps(out)}", flush=True)
    return out


def on_a_head(seconds: float, n: int) -> dict[str, Any]:
    """The fake-GPU head of bench_door_load.py (its setup: members, a chain holding both GPUs), the
    stamping job, then admission rounds with none open and with ``n`` open pages."""
    import bench_door_load as load
    from bench import sample, session

    r: dict[str, Any] = {"load": [os.getloadavg()[0]], "phases": []}
    with session.run("rjpg") as run, run.cluster(((2, 6),), {}) as c:
        ctx = load.setup(c, 2 * int(seconds // 4) + 4)  # a round takes ~4.5 s on a quiet machine: enough for both phases
        ctx["page"] = f"http://127.0.0.1:{c.api_port}"
        job = stamp_job(ctx["page"], ctx["tokens"][0])
        gpus = sample.GpuSampler(c.gcs, every=0.01)
        try:
            for k in (0, n):
                r["phases"].append(head_phase(c, ctx, gpus, k, seconds, job))
        finally:
            gpus.close()
            requests.post(f"{ctx['page']}/v1/jobs/{job}/stop", timeout=30)
    r["load"].append(os.getloadavg()[0])
    return r


def head_report(r: dict[str, Any]) -> None:
    for ph in r["phases"]:
        adm = ph["adm"]
        print(f"  {ph['pages']:>2} open pages, {ph['seconds']:.0f} s ({ph['requests']} requests): queue actor "
              f"{ph['cpu']['pct']:.1f} % of a core (busiest thread {ph['cpu']['top'][0][1]:.1f} %); admission "
              f"GPUs free -> admitted: {', '.join(f'{x:.3f}' for x in adm) or '-'} s (max "
              f"{max(adm, default=float('nan')):.3f}; {sum(x > 0.1 for x in adm)} over 0.1 s); load {ph['load']:.1f}")
        if ph["pages"]:
            print(f"     a job page's log behind its real driver log: {lag_line(ph['lags'])}; errors: "
                  f"{ph['errors'] or 'none'}")
    print(json.dumps(r))


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
    ap.add_argument("--head", action="store_true", help="on a real fake-GPU head instead: admission rounds and the "
                    "queue actor's CPU with none and with --pages open pages, --pages-s each")
    a = ap.parse_args()
    if a.head:
        head_report(on_a_head(a.pages_s, a.pages))
        return
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
        print(f"  {a.pages} open pages for {a.pages_s:.0f} s ({cpu['requests']} requests): the door's process "
              f"{cpu['busy']:.1f} % of a core (none open: {cpu['idle']:.1f} %)")
        print(f"  a job page's log behind the line's write (a line a second): {lag_line(cpu['lags'])}; errors: "
              f"{cpu['errors'] or 'none'}")
    print(json.dumps({name: {"median_s": round(m, 4), "max_s": round(w, 4), "bytes": s} for name, (m, w, s) in rows}
                     | ({"pages": {"n": a.pages, "idle_pct": round(cpu["idle"], 2), "open_pct": round(cpu["busy"], 2),
                                   "requests": cpu["requests"], "lags": cpu["lags"]}} if cpu else {})))


if __name__ == "__main__":
    main()

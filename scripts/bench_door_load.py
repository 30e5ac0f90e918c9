"""Benchmark: a team's load on the door (issue 47 item 7) -- N concurrent clients for D seconds, side by
side with the same read load on Ray's dashboard of the same head, and the queue's admission reaction
while it lasts.

One real 1-node fake-GPU Ray head (2 GPUs, the tests' factory) in a private network namespace; the
door (the queue actor's FastAPI app, on the head's loopback) and Ray's dashboard of that head:

* clients: ``--procs`` processes (4) share the N threads, so no one interpreter's GIL is the
  bottleneck being measured (a 100-thread client in one process measured mostly itself);
* setup: the owner (loopback, the test head runs without Ray's token auth) makes 5 members through
  ``POST /v1/users``; alice uploads a tiny code zip once (``PUT /v1/code/KEY``); a chain of fake-verl
  jobs holding both GPUs (priority 10, each waiting behind the one before) is queued as the owner;
* door mix, per client count N of the sweep: N threads in a client process of their own, each with
  its own ``requests.Session`` (one connection) and a member's token, doing for D seconds (bounded
  in count too) a mix: ``GET /v1/jobs?limit=100000`` (what ``rayjobs list`` asks; 45 %),
  ``GET /v1/jobs/ID`` (``rayjobs status``; 43 %), a followed log (``GET /v1/jobs/ID/log/stream?offset=``
  of a running job when one is listed, from the bytes it had; at most 64 KiB or 4 s; the head ends a
  stream after 3 s: ``RAYJOBS_DOOR_STREAM_S``; 10 %) and a submit (``POST /v1/jobs`` of a 1-GPU
  command job naming the uploaded code; 2 %: they wait behind the chain and are stopped after the
  phase). Meanwhile, in this process, admission rounds as ``bench_backlog.py`` measures them: the
  chain's holder (its trainer holding both GPUs, the next pre-started) is stopped, and the next job's
  ``admitted_at`` is set against the moment both GPUs were free in Ray's view (a driver here
  sampling ``ray.available_resources()``);
* door list / dashboard list, per N: the same threads doing only the list: ``GET /v1/jobs`` against
  ``GET /api/jobs/`` of Ray's dashboard (with ``Authorization: Bearer``, as the cluster token would
  be sent; this head does not check it);
* per phase: errors by status, reads' p50/p99, requests/s, the queue actor's CPU (all its threads and
  its busiest, the event loop's), the clients' CPU, and the event-loop thread's state sampled from
  /proc every 5 ms (running, or waiting in which system call: a loop blocked on a synchronous reply
  shows as ``futex``, which a profiler of busy samples does not see); ``--profile``: ``py-spy record``
  (non-blocking) of the queue actor in every mix phase, its busiest frames (inclusive and self).
* the mix with pauses (``--think-s``, mean 1 s) is the team; ``--stress-s``: the same mix back to back.

    sudo .venv/bin/python scripts/bench_door_load.py [--clients 100] [--seconds 60] [--sweep 10,30,50]
                                                   [--sweep-s 20] [--stress-s 20] [--think-s 1] [--procs 4] [--profile]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc, sample, session  # noqa: E402
from bench.timing import median, pct  # noqa: E402

import bench_backlog  # noqa: E402  (its admission round, reused as it is)
from door_load_report import READS, markdown  # noqa: E402
from clusterops import wait_until  # noqa: E402

MEMBERS = ("alice", "bob", "carol", "dave", "erin")
CHAIN = ["trainer.nnodes=1", "trainer.n_gpus_per_node=2", "+fake.hold_gpus=true", "+fake.steps=1",
         "+fake.hold_s=900", "rayjobs.priority=10"]
MIX = (("list", 45), ("status", 43), ("follow", 10), ("submit", 2))
LOOP = "import sys, time\nfor i in range(int(sys.argv[1])):\n    print(f'line {i}', flush=True)\n    time.sleep(0.1)\n"
MAX_REQUESTS = 100_000  #: per client and phase: the loop is bounded in count as well as in time


# --------------------------------------------------------------------------- the client process
class Client:
    """One client thread's session and what it saw."""

    def __init__(self, spec: dict[str, Any], k: int) -> None:
        import requests

        self.spec, self.k, self.rng = spec, k, random.Random(k)
        self.http = requests.Session()
        self.http.trust_env = False
        self.http.mount("http://", requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=1))
        self.http.headers["Authorization"] = f"Bearer {spec['tokens'][k % len(spec['tokens'])]}"
        self.known: list[str] = list(spec["ids"])
        self.running: list[str] = []
        self.offsets: dict[str, int] = {}
        self.lat: dict[str, list[tuple[float, float]]] = {}  #: kind -> (start, seconds)
        self.errors: Counter = Counter()
        self.submitted: list[str] = []

    def pick(self) -> str:
        if self.spec["only"]:  # a list-only phase: the door's list, or Ray's dashboard's
            return "list"
        x, acc = self.rng.uniform(0, 100), 0
        for kind, share in MIX:
            acc += share
            if x < acc:
                return kind
        return "list"

    def one(self, kind: str, i: int) -> None:
        base, t0 = self.spec["base"], time.monotonic()
        try:
            status, took = getattr(self, "do_" + kind)(base, i, t0)
        except Exception as e:  # noqa: BLE001 (a refused connection, a timeout: an error of the load)
            self.errors[f"{kind}: {type(e).__name__}"] += 1
            time.sleep(0.05)  # a client that failed does not spin
            return
        if status >= 400:
            self.errors[f"{kind}: HTTP {status}"] += 1
            time.sleep(0.05)
        else:
            self.lat.setdefault(kind, []).append((t0, took))

    def do_list(self, base: str, i: int, t0: float) -> tuple[int, float]:
        if self.spec["only"] == "dashboard":
            r = self.http.get(self.spec["dash"] + "/api/jobs/", timeout=(5, 60))
            return r.status_code, time.monotonic() - t0
        r = self.http.get(base + "/jobs", params={"limit": 100_000}, timeout=(5, 60))
        took = time.monotonic() - t0
        if r.status_code == 200:
            jobs = r.json()["jobs"]
            self.running = [j["submission_id"] for j in jobs if j["status"] == "RUNNING"]
            self.known = [j["submission_id"] for j in jobs] or self.known
        return r.status_code, took

    def do_status(self, base: str, i: int, t0: float) -> tuple[int, float]:
        r = self.http.get(f"{base}/jobs/{self.rng.choice(self.known)}", timeout=(5, 60))
        return r.status_code, time.monotonic() - t0

    def do_follow(self, base: str, i: int, t0: float) -> tuple[int, float]:
        job = self.rng.choice(self.running or self.known)
        r = self.http.get(f"{base}/jobs/{job}/log/stream", params={"offset": self.offsets.get(job, 0)},
                          stream=True, timeout=(5, 30))
        took = time.monotonic() - t0  # the answer's head: what a follower waits for before its first byte
        got = 0
        with r:
            if r.status_code < 400:
                for chunk in r.iter_content(8192):
                    got += len(chunk)
                    if got >= 65536 or time.monotonic() - t0 > 4.0:
                        break
        self.offsets[job] = self.offsets.get(job, 0) + got
        return r.status_code, took

    def do_submit(self, base: str, i: int, t0: float) -> tuple[int, float]:
        sid = f"load-{self.spec['phase']}-{self.k}-{i}"
        job = {"entrypoint": "python3 -u loop.py 5", "submission_id": sid,
               "metadata": {"kind": "command", "gpu_groups": "[1]"}}
        r = self.http.post(base + "/jobs", json={"jobs": [job], "code": self.spec["code"]}, timeout=(5, 60))
        if r.status_code == 201:
            self.submitted.append(sid)
        return r.status_code, time.monotonic() - t0

    def run(self, end: float) -> None:
        think = float(self.spec["think"])
        if think > 0:  # not all at once
            time.sleep(min(self.rng.uniform(0, think), max(0.0, end - time.monotonic())))
        for i in range(MAX_REQUESTS):
            if time.monotonic() >= end:
                break
            self.one(self.pick(), i)
            if think > 0:  # a person's pause between commands (exponential, mean ``think``)
                time.sleep(min(self.rng.expovariate(1.0 / think), max(0.0, end - time.monotonic())))


def client_main(spec: dict[str, Any]) -> dict[str, Any]:
    """(a client process) a thread for each client of ``spec["ks"]`` for ``spec["seconds"]``: what they
    saw, one JSON doc."""
    clients = [Client(spec, k) for k in spec["ks"]]
    start = time.monotonic()
    end = start + spec["seconds"]
    threads = [threading.Thread(target=c.run, args=(end,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=spec["seconds"] + 120)
    wall = time.monotonic() - start
    lat: dict[str, list[tuple[float, float]]] = {}
    for c in clients:
        for kind, xs in c.lat.items():
            lat.setdefault(kind, []).extend((round(t - start, 3), round(s, 5)) for t, s in xs)
    errors = sum((c.errors for c in clients), Counter())
    return {"wall": wall, "lat": lat, "errors": dict(errors), "submitted": [s for c in clients for s in c.submitted],
            "alive": sum(t.is_alive() for t in threads)}


def load(spec: dict[str, Any], procs: int) -> dict[str, Any]:
    """Run the clients in ``procs`` processes of their own (their threads' GIL is not one
    interpreter's, nor this process's); what they saw, merged, and their CPU (% of a core)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    runs = []
    for j in range(max(1, min(procs, spec["n"]))):
        p = subprocess.Popen([sys.executable, __file__, "--client"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        p.stdin.write(json.dumps(dict(spec, ks=list(range(j, spec["n"], procs)))))
        p.stdin.close()
        p.stdin = None  # written and closed: communicate() below only reads
        runs.append(p)
    outs = []
    for p in runs:
        out, err = p.communicate(timeout=spec["seconds"] + 300)
        if p.returncode != 0:
            raise RuntimeError(f"a client process failed: {err[-3000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    merged: dict[str, Any] = {"wall": max(o["wall"] for o in outs), "lat": {}, "errors": Counter(), "submitted": [],
                              "alive": sum(o["alive"] for o in outs)}
    for o in outs:
        for kind, xs in o["lat"].items():
            merged["lat"].setdefault(kind, []).extend(xs)
        merged["errors"].update(o["errors"])
        merged["submitted"] += o["submitted"]
    merged["errors"] = dict(merged["errors"])
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    merged["client_cpu_pct"] = 100 * used / merged["wall"]
    return merged


# --------------------------------------------------------------------------- the head's side
def threads_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (utime + stime) of every thread of ``pid``, by ``name:tid``."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        f = stat.rsplit(")", 1)[1].split()
        out[f"{name}:{task.name}"] = (int(f[11]) + int(f[12])) / sample.TICK
    return out


def cpu_between(a: dict[str, float], b: dict[str, float], wall: float) -> dict[str, Any]:
    """% of a core of the whole process and of its three busiest threads between two readings."""
    per = {k: 100 * (v - a.get(k, 0.0)) / wall for k, v in b.items()}
    top = sorted(per.items(), key=lambda kv: -kv[1])[:3]
    return {"pct": round(sum(per.values()), 1), "top": [(k, round(v, 1)) for k, v in top]}


def profile(pid: int, seconds: float, out: Path) -> Optional[subprocess.Popen]:
    """``py-spy record`` of the queue actor, non-blocking (it never pauses the process), raw stacks."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        print("note: no py-spy beside this python: no profile", file=sys.stderr)
        return None
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "50",
                             "--format", "raw", "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


#: Linux x86-64 system calls a waiting thread sits in (``/proc/PID/task/TID/syscall``'s first field).
SYSCALLS = {"7": "poll", "232": "epoll_wait", "281": "epoll_pwait", "202": "futex (a lock, the GIL, a reply)",
            "0": "read", "1": "write", "74": "fsync", "75": "fdatasync", "23": "select", "270": "pselect6"}


class LoopSampler:
    """What one thread (the queue actor's event loop) is doing, sampled from /proc every ``every`` s:
    running (on a CPU or runnable), or waiting in which system call -- a blocked loop shows here, where
    a profiler of busy samples does not see it."""

    def __init__(self, pid: int, tid: int, every: float = 0.005) -> None:
        self.base, self.every, self.seen = Path(f"/proc/{pid}/task/{tid}"), every, Counter()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        for _ in range(10_000_000):  # bounded; stopped by close()
            if self._stop.wait(self.every):
                return
            try:
                state = (self.base / "stat").read_text().rsplit(")", 1)[1].split()[0]
                call = (self.base / "syscall").read_text().split()[0]
            except (OSError, IndexError):
                continue
            self.seen["running" if state == "R" or call == "running" else SYSCALLS.get(call, f"syscall {call}")] += 1

    def close(self) -> dict[str, float]:
        self._stop.set()
        self._t.join(timeout=5)
        n = sum(self.seen.values()) or 1
        return {k: round(100.0 * v / n, 1) for k, v in self.seen.most_common(6)}


#: Frames every busy stack of a Ray worker has: left out of the summary.
BASE_FRAMES = ("threading.py", "default_worker.py", "worker.py:", "tracing_helper.py", "base_events.py", "events.py",
               "thread.py:", "runners.py")


def hot_frames(raw: Path, n: int = 10) -> dict[str, list[tuple[str, float]]]:
    """py-spy's raw stacks of the queue actor (its busy threads' samples): the frames most often on
    the stack (inclusive, the common bottom frames left out) and most often on top (self), as %."""
    total, incl, own = 0, Counter(), Counter()
    for line in raw.read_text().splitlines() if raw.exists() else []:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames, k = stack.split(";"), int(count)
        total += k
        own[frames[-1]] += k
        for f in set(frames):
            if not any(b in f for b in BASE_FRAMES):
                incl[f] += k
    pct_of = lambda c: [(f, 100.0 * v / total) for f, v in c.most_common(n)] if total else []  # noqa: E731
    return {"samples": [("busy samples", float(total))], "inclusive": pct_of(incl), "self": pct_of(own)}


def rounds_during(c: Any, holder: str, gpus: Any, until: float, out: list[dict[str, Any]]) -> str:
    """Admission rounds (``bench_backlog.admission_round``) until ``until``: the holder's trainer has
    both GPUs and the next job is pre-started, then it is stopped; the holder left at the end."""
    while time.monotonic() < until - 8:
        left = max(5.0, until - time.monotonic())
        try:
            wait_until(lambda: bench_backlog.holds_gpus(c, holder), left, f"{holder} to hold the GPUs", 0.5)
            line = c.queue().summary().line
            if not line:  # the chain is spent: the rounds end here (the phase goes on without)
                break
            line0 = line[0].submission_id
            wait_until(lambda: line0 in bench_backlog.standby_in_ray(c), max(5.0, until - time.monotonic()),
                       f"{line0} pre-started", 0.5)
        except AssertionError:
            break
        time.sleep(2.0)  # the standby's runner settled in Ray
        if time.monotonic() > until - 3:
            break
        out.append(bench_backlog.admission_round(c, holder, gpus))
        print(f"[bench] admission: {json.dumps(out[-1])}", flush=True)
        holder = out[-1]["next"]
    return holder


#: A round's steps in the queue's own events (its trainer seen gone by a reading, that reading
#: applied by the tick, the early reap begun and back), after the job it held the GPUs for.
STEPS = (("gone_read", "trainer gone (read)"), ("gone_applied", "trainer left"), ("reap_began", "reap began (early)"),
         ("reaped", "early reap returned"))


def steps_of(adm: list[dict[str, Any]]) -> None:
    """Each round's ``steps``: when (s after both GPUs were free in Ray's view) the queue's reader saw
    the holder's trainer gone, the tick applied it, its early reap began and returned, the next was admitted."""
    from bench import jobs

    try:
        events = jobs.queue_events()  # (this process's driver: the GPU sampler's)
    except Exception as e:  # noqa: BLE001 (the breakdown is extra: the round stands without it)
        print(f"[bench] no queue events: {type(e).__name__}: {e}", flush=True)
        return
    for x in adm:
        if x.get("react_gpus") is None:
            continue
        freed = x["admitted_at"] - x["react_gpus"]
        x["steps"] = {k: next((t - freed for t, w, d in events if w == what and d == x["holder"] and t >= x["asked"]), None)
                      for k, what in STEPS}
        x["steps"]["admitted"] = x["react_gpus"]


def summary(res: dict[str, Any]) -> dict[str, Any]:
    """A phase's numbers: requests/s, errors, p50/p99/max per kind and over the reads."""
    lat = {k: [s for _, s in v] for k, v in res["lat"].items()}
    reads = [s for k in READS for s in lat.get(k, [])]
    done = sum(map(len, lat.values())) + sum(res["errors"].values())
    kinds = {k: {"n": len(v), "p50": median(v), "p99": pct(v, 0.99), "max": max(v)} for k, v in lat.items()}
    return {"rps": done / res["wall"], "n": done, "errors": res["errors"], "kinds": kinds,
            "reads": {"n": len(reads), "p50": median(reads), "p99": pct(reads, 0.99), "max": max(reads, default=0.0)},
            "alive": res["alive"]}


# --------------------------------------------------------------------------- the run
def code_zip() -> tuple[str, bytes]:
    from rayjobs.contract import wire

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("loop.py", LOOP)
    body = buf.getvalue()
    return wire.code_key(hashlib.sha256(body).hexdigest()), body


def setup(c: Any, chain: int) -> dict[str, Any]:
    """The members and their tokens, the code uploaded once, the chain queued (its first holding the
    GPUs): what the phases share."""
    import requests

    from bench import jobs
    from rayjobs.contract import wire

    base = f"http://127.0.0.1:{c.api_port}{wire.PREFIX}"
    tokens = []
    for name in MEMBERS:  # the owner on loopback (no token: this head runs without Ray's token auth)
        r = requests.post(base + "/users", json={"name": name, "role": "member"}, timeout=30)
        assert r.status_code == 201, r.text
        tokens.append(r.json()["token"])
    key, body = code_zip()
    up = requests.put(f"{base}/code/{key}", data=body, timeout=60,
                      headers={"Content-Type": "application/zip", "Authorization": f"Bearer {tokens[0]}"})
    assert up.status_code in (200, 201), up.text
    ids, _ = jobs.send_points(c, [CHAIN + [f"trainer.total_epochs={k + 1}"] for k in range(chain)], hold_gpus=False)
    wait_until(lambda: bench_backlog.holds_gpus(c, ids[0]), 240, "the chain's first job to hold the GPUs", 0.5)
    pid = c.queue().health().pid
    return {"base": base, "tokens": tokens, "code": key, "ids": ids, "holder": ids[0], "pid": pid,
            "loop_tid": loop_thread(pid, base, tokens[0])}


def loop_thread(pid: int, base: str, token: str) -> int:
    """The queue actor's event-loop thread: its busiest while 200 lists are asked of the door."""
    import requests

    before = threads_cpu(pid)
    with requests.Session() as s:
        for _ in range(200):
            s.get(base + "/jobs", params={"limit": 100_000}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    after = threads_cpu(pid)
    busiest = max(after, key=lambda k: after[k] - before.get(k, 0.0))
    return int(busiest.rsplit(":", 1)[1])


def phase(c: Any, ctx: dict[str, Any], kind: str, n: int, seconds: float, gpus: Any, spy_dir: Optional[Path]) -> dict[str, Any]:
    """One phase: ``kind`` (mix, list: the door; dashboard: Ray's) with ``n`` clients for ``seconds``;
    admission rounds meanwhile in a mix."""
    spec = {"n": n, "seconds": seconds, "base": ctx["base"], "dash": c.address, "tokens": ctx["tokens"],
            "ids": ctx["ids"], "code": ctx["code"], "only": {"mix": None, "stress": None}.get(kind, kind), "phase": f"{kind}{n}",
            "think": 0.0 if kind == "stress" else ctx["think"]}
    adm: list[dict[str, Any]] = []
    until = time.monotonic() + seconds
    rounds = threading.Thread(target=lambda: ctx.update(holder=rounds_during(c, ctx["holder"], gpus, until, adm)),
                              daemon=True)
    if kind in ("mix", "stress"):
        rounds.start()
    spy = profile(ctx["pid"], seconds, spy_dir / f"{kind}{n}.raw") if spy_dir else None
    loop = LoopSampler(ctx["pid"], ctx["loop_tid"])
    cpu0, t0 = threads_cpu(ctx["pid"]), time.monotonic()
    res = load(spec, ctx["procs"])
    cpu = cpu_between(cpu0, threads_cpu(ctx["pid"]), time.monotonic() - t0)
    if rounds.ident is not None:
        rounds.join(timeout=240)
        steps_of(adm)
    if res["submitted"]:  # they waited behind the chain; stopped, so every phase starts with the same line
        c.queue().stop(res["submitted"])
    out = dict(summary(res), kind=kind, clients=n, seconds=seconds, cpu=cpu, adm=adm, load=os.getloadavg()[0],
               submitted=len(res["submitted"]), client_cpu=res["client_cpu_pct"], loop=loop.close())
    if spy is not None:
        try:
            spy.wait(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            spy.kill()
        out["profile"] = hot_frames(spy_dir / f"{kind}{n}.raw")
    print(f"[bench] {kind} x{n}: {json.dumps({k: v for k, v in out.items() if k != 'profile'}, default=str)}", flush=True)
    return out


def plan(a: argparse.Namespace) -> list[tuple[int, float]]:
    """(clients, seconds) per step: the sweep's counts for ``--sweep-s``, then ``--clients`` for ``--seconds``."""
    counts = [int(x) for x in a.sweep.split(",") if x.strip() and int(x) != a.clients]
    return [(n, a.sweep_s) for n in sorted(counts)] + [(a.clients, a.seconds)]


def main() -> None:
    if sys.argv[1:2] == ["--client"]:
        print(json.dumps(client_main(json.loads(sys.stdin.read()))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=100, help="concurrent clients of the main step")
    ap.add_argument("--seconds", type=float, default=60, help="seconds of each phase of the main step")
    ap.add_argument("--sweep", default="10,30,50", help="client counts before the main step (comma separated)")
    ap.add_argument("--sweep-s", type=float, default=20, help="seconds of each phase of the sweep's steps")
    ap.add_argument("--think-s", type=float, default=1.0,
                    help="each client's mean pause between requests (exponential; 0: back to back, a stress test)")
    ap.add_argument("--stress-s", type=float, default=20,
                    help="per client count, a mix phase this long with no pause between requests (0: none)")
    ap.add_argument("--procs", type=int, default=4, help="client processes the clients are spread over")
    ap.add_argument("--profile", action="store_true", help="py-spy the queue actor in each mix phase")
    a = doc.parse(ap, {"clients": 4, "seconds": 20, "sweep": "2", "sweep_s": 5, "stress_s": 5})
    steps = plan(a)
    chain = 2 + sum(int((s + a.stress_s) // 8) + 2 for _, s in steps)
    r: dict[str, Any] = {"load": [os.getloadavg()[0]], "steps": steps, "phases": [], "think": a.think_s, "procs": a.procs}
    t0 = time.monotonic()
    with session.run("rjdl") as run, run.cluster(((2, 6),), {"RAYJOBS_DOOR_STREAM_S": "3"}) as c:
        ctx = dict(setup(c, chain), think=a.think_s, procs=a.procs)
        gpus = sample.GpuSampler(c.gcs, every=0.01)
        try:
            for n, seconds in steps:
                for kind in ("mix", "list", "dashboard", "stress"):
                    if kind == "stress" and not a.stress_s:
                        continue
                    spy_dir = run.root if a.profile and kind in ("mix", "stress") else None
                    r["phases"].append(phase(c, ctx, kind, n, a.stress_s if kind == "stress" else seconds, gpus, spy_dir))
        finally:
            gpus.close()
        r["jobs_listed"] = len(c.queue().jobs())
    r["load"].append(os.getloadavg()[0])
    r["took"] = time.monotonic() - t0
    print(json.dumps(r, default=str), flush=True)
    doc.publish(a, "door-load", markdown(r, a))


if __name__ == "__main__":
    main()

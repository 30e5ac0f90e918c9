"""Benchmark the cluster-side queue (issues 4, 15): idle gap, GPU utilisation, the cost of a backlog.

All run on real Ray clusters declaring fake GPUs (the tests' factory, ``tests/clusters.py``), inside a
private network namespace, with the verl stand-in holding STRICT_PACK placement groups.

* Idle gap: a blocker holds the whole 1-node cluster (2 GPUs); N jobs needing both GPUs are queued
  behind it; the blocker is stopped. Gap = next job's start - previous job's end, where end is the
  trainer's exit seen by the runner and start the runner's admission (the trainer starts right
  after). Baseline, same cluster: Ray's own PENDING mechanism (``entrypoint_num_gpus=2``), the
  entrypoint printing its own start and end time.
* Utilisation: a mix of 1- and 2-GPU jobs queued behind a blocker on 2 nodes x 2 GPUs. Utilisation
  = allocated GPU-seconds (admission to end) / (4 x makespan), against the ideal packing of the
  same jobs (their measured durations, zero overhead, per-node fit; best of a few list orders)
  and the lower bound GPU-seconds / 4.
* Backlog: N jobs (default 500) waiting behind a job that holds the cluster: the head's processes
  and RSS before and after, for rayjobs' queue (records) and for Ray's own PENDING jobs.

    sudo .venv/bin/python scripts/bench_queue.py [--jobs 8] [--backlog 500]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc, jobs, sample, session, timing  # noqa: E402
from bench.timing import median  # noqa: E402

#: A job's step in the idle-gap part's second workload: long enough for the queue's pre-started
#: next job to be ready (it is pre-started once the running trainer has its GPUs; Ray's job start
#: takes ~3 s here), as it is for any job of minutes.
LONG_STEP_S = 6.0
#: GPUs idle (median, min, max) of the issue-4 design, tree fa3d638, its own bench_gap with 1-s jobs,
#: on this machine on 2026-12-01 (that tree's runner cannot run under this one's: measured apart).
OLD_DESIGN_GPU_IDLE = (1.46, 1.11, 1.80)
WHOLE = ["trainer.nnodes=1", "trainer.n_gpus_per_node=2", "+fake.steps=1"]  #: a job needing the 1-node cluster
PARTS = ("gap", "gap_cold", "gap_long", "gap_long_noreap", "util", "backlog", "history")


# --------------------------------------------------------------------------- idle gap
def gap_ours(c: Any, n: int, step_s: float) -> dict[str, list[float]]:
    """``n`` jobs of one ``step_s`` step queued behind a blocker, released: the gaps between them."""
    client = c.client()
    blocker = jobs.send_points(c, [WHOLE + ["+fake.hold_s=600"]])[0][0]
    jobs.wait_admitted(client, blocker)
    ids = jobs.send_points(c, [WHOLE + [f"+fake.step_s={step_s:g}", f"trainer.total_epochs={k + 1}"] for k in range(n)])[0]
    time.sleep(3)  # every job queued
    gpus = sample.GpuSampler(c.gcs, every=0.005)
    client.stop_job(blocker)
    st = jobs.wait_ray(client, ids)
    gpus.close()
    assert all(s == "SUCCEEDED" for s in st.values()), st
    rs = jobs.runs(client, ids)
    idle = [p for p in gpus.idle_periods(2) if rs[0][0] < p[0] < rs[-1][0]]  # 1st -> 2nd, ... (not the stopped blocker)
    react = []  # GPUs free in Ray's view -> the next job admitted
    for freed, _ in idle:
        nxt = min((a for a, _, _, _ in rs if a >= freed), default=None)
        if nxt is not None:
            react.append(nxt - freed)
    return {"ours": [b[1] - a[2] for a, b in zip(rs, rs[1:])],  # next runner's start - previous trainer's exit
            "decide": [b[0] - a[2] for a, b in zip(rs, rs[1:])],  # next admission - previous trainer's exit
            "start": [r - a for a, r, _, _ in rs],  # Ray's job start: admission -> runner running
            "react": react, "gpu_idle": [taken - freed for freed, taken in idle]}


def gap_ray(c: Any, n: int) -> list[float]:
    """What a user has instead: ``n`` Ray jobs PENDING until ``entrypoint_num_gpus=2`` frees, each
    printing its own start and end: the gaps between one's end and the next one's start."""
    client = c.client()
    ep = "sh -c 'echo start $(date +%s.%N); python3 -c \"import time; time.sleep(1)\"; echo end $(date +%s.%N)'"
    rids = [client.submit_job(entrypoint=ep, entrypoint_num_gpus=2) for _ in range(n)]
    st = jobs.wait_ray(client, rids)
    assert all(s == "SUCCEEDED" for s in st.values()), st
    spans = sorted((float(re.search(r"start ([\d.]+)", log).group(1)), float(re.search(r"end ([\d.]+)", log).group(1)))
                   for log in map(client.get_job_logs, rids))
    return [b[0] - a[1] for a, b in zip(spans, spans[1:])]


def bench_gap(r: session.Run, n: int, standby: bool = True, with_ray: bool = True, step_s: float = 1.0,
              reap: bool = True) -> dict[str, Any]:
    """The idle gap of ``n`` jobs on a fresh 1-node cluster; ``standby``: the queue pre-starts the next
    job (its default) or starts each cold (``RAYJOBS_QUEUE_STANDBY=0``); ``reap``: it reaps an ended
    job's leftovers before it admits the next (its default) or not (``RAYJOBS_REAP=0``); ``with_ray``:
    Ray's own PENDING jobs after, on the same cluster."""
    env = {"RAYJOBS_QUEUE_STANDBY": "1" if standby else "0", "RAYJOBS_REAP": "1" if reap else "0"}
    with r.cluster(((2, 6),), env) as c:
        out: dict[str, Any] = gap_ours(c, n, step_s)
        if with_ray:
            out["ray"] = gap_ray(c, n)
    return out


# --------------------------------------------------------------------------- utilisation
def ideal_makespan(jobs_: list[tuple[int, float]], nodes: int = 2, per_node: int = 2) -> float:
    """Best makespan of ``jobs_`` (gpus, seconds) on ``nodes`` x ``per_node`` GPUs, zero overhead.

    Event simulation of greedy list scheduling (whenever GPUs free, start the first job in the
    list that fits a node, best fit), for a few list orders (as queued, longest first, biggest
    first); the best is reported.
    """
    def simulate(order: list[tuple[int, float]]) -> float:
        free = [per_node] * nodes
        t, running, todo = 0.0, [], list(order)
        while todo or running:
            for j in list(todo):
                k = next((i for i in sorted(range(nodes), key=lambda i: free[i]) if free[i] >= j[0]), None)
                if k is not None:
                    free[k] -= j[0]
                    running.append((t + j[1], k, j[0]))
                    todo.remove(j)
            running.sort()
            t, k, g = running.pop(0)
            free[k] += g
        return t

    orders = [jobs_, sorted(jobs_, key=lambda j: -j[1]), sorted(jobs_, key=lambda j: (-j[0], -j[1]))]
    return min(simulate(o) for o in orders)


def bench_util(r: session.Run) -> dict[str, Any]:
    """A mix of 1- and 2-GPU jobs behind a blocker on 2 nodes x 2 GPUs, released at once: the makespan."""
    sizes = [2, 1, 1, 2, 1, 2, 1, 1, 2, 1, 2, 1]
    with r.cluster(((2, 6), (2, 6))) as c:
        client = c.client()
        blocker = jobs.send_points(c, [["trainer.nnodes=2", "trainer.n_gpus_per_node=2", "+fake.steps=1", "+fake.hold_s=600"]])[0][0]
        jobs.wait_admitted(client, blocker)
        ids = jobs.send_points(c, [["trainer.nnodes=1", f"trainer.n_gpus_per_node={g}", "+fake.steps=2", "+fake.step_s=1.5",
                                    f"trainer.total_epochs={k + 1}"] for k, g in enumerate(sizes)])[0]
        time.sleep(3)
        client.stop_job(blocker)
        st = jobs.wait_ray(client, ids)
        assert all(s == "SUCCEEDED" for s in st.values()), st
        iv = [(a, f, i) for a, _, f, i in jobs.runs(client, ids)]
        crashed = sum("Total available GPUs" in client.get_job_logs(i) for i in ids)
    size = dict(zip(ids, sizes))
    gpu_s = sum(size[i] * (f - a) for a, f, i in iv)
    makespan = max(f for _, f, _ in iv) - min(a for a, _, _ in iv)
    return {"makespan": makespan, "gpu_s": gpu_s, "lb": gpu_s / 4, "n": len(ids), "n1": sizes.count(1), "n2": sizes.count(2),
            "ideal": ideal_makespan([(size[i], f - a) for a, f, i in sorted(iv, key=lambda x: ids.index(x[2]))]),
            "crashed": crashed, "mean_job_s": statistics.mean(f - a for a, f, _ in iv)}


# --------------------------------------------------------------------------- backlog and history
def bench_backlog(r: session.Run, n: int) -> dict[str, Any]:
    """What ``n`` waiting jobs cost the head: rayjobs' queue vs Ray's own PENDING jobs, one cluster each."""
    out: dict[str, Any] = {"n": n}
    with r.cluster(((2, 6),)) as c:
        blocker = jobs.send_points(c, [WHOLE + ["+fake.hold_s=3600"]])[0][0]
        jobs.wait_admitted(c.client(), blocker)
        out["ours_base"] = sample.settled(c)
        jobs.send_points(c, [WHOLE + ["trainer.total_epochs=1"]])  # the first waiting job: pre-started
        out["ours_one"] = sample.settled(c)
        out["ours_submit_s"] = jobs.send_points(c, [WHOLE + [f"trainer.total_epochs={k + 2}"] for k in range(n - 1)])[1]
        out["ours"] = sample.settled(c)
    with r.cluster(((2, 6),)) as c:
        client = c.client()
        hold = client.submit_job(entrypoint="python3 -c 'import time; time.sleep(3600)'", entrypoint_num_gpus=2)
        jobs.wait_ray(client, [hold], ("RUNNING",), timeout=120)
        out["ray_base"] = sample.settled(c)
        t = time.monotonic()
        for _ in range(n):
            client.submit_job(entrypoint="python3 -c 'print(1)'", entrypoint_num_gpus=2)
        out["ray_submit_s"] = time.monotonic() - t
        out["ray"] = sample.settled(c)
    return out


def _finished_record(k: int, now: float) -> dict[str, Any]:
    """A finished job's record as the queue writes it (a sweep point of fake_ppo, its final metrics)."""
    sid = f"fake_ppo-20261101-000000-{k:04x}"
    meta = {"rayjobs": "0.1.0", "experiment": "fake_ppo", "run": sid, "sweep": "fake_ppo-20261101-000000", "kind": "verl",
            "priority": "0", "max_retries": "0", "overrides": f'["trainer.total_epochs={k}"]',
            "submitted_at": "2026-11-01T00:00:00.000+00:00", "run_dir": f"/storage/runs/x/{sid}"}
    return {"id": sid, "state": "done", "status": "SUCCEEDED" if k % 10 else "FAILED", "queued_at": now - 9000 + k,
            "admitted_at": now - 8000 + k, "finished_at": now - 7000 + k, "message": "", "pruned": True,
            "spec": {"entrypoint": "python3 -m rayjobs.oncluster.runner", "submission_id": sid, "metadata": meta},
            "final": {"step": 100, "data": {"critic/score/mean": 0.5 + k / 10000}, "attempts": 1}}


def bench_history(r: session.Run, n: int, ray_jobs: int) -> dict[str, Any]:
    """`rayjobs list` over ``n`` finished jobs in the queue's history (pruned from Ray's table), then
    again with ``ray_jobs`` finished jobs in Ray's own table, side by side with `ray job list`."""
    from rayjobs.contract.record import JobRecord
    from rayjobs.oncluster.store import QueueStore

    with r.cluster(((2, 6),), start=False) as c:
        store, now = QueueStore(c.queue_store), time.time()
        for k in range(n):  # what n finished jobs leave in the store (written before the head starts)
            store.put(JobRecord.from_json(_finished_record(k, now)))
        c.start()
        env, bin_ = dict(os.environ), os.path.dirname(sys.executable)
        rj = [os.path.join(bin_, "rayjobs"), "list", "--address", c.address]
        ray_cli = [os.path.join(bin_, "ray"), "job", "list", "--address", c.address]
        timing.timed(rj, env=env)  # the first command revives the queue: it reloads the store
        shown = len(json.loads(timing.command(rj + ["--json"], env=env)[1]))
        alone = [timing.timed(rj, env=env) for _ in range(5)]
        client = c.client()
        jobs.wait_ray(client, [client.submit_job(entrypoint="true", entrypoint_num_cpus=1) for _ in range(ray_jobs)],
                      timeout=1800)
        both = timing.interleaved({"rayjobs": lambda: timing.timed(rj, env=env), "ray": lambda: timing.timed(ray_cli, env=env)}, 5)
    return {"n": n, "shown": shown, "ray_jobs": ray_jobs, "alone": alone, "rayjobs": both["rayjobs"], "ray": both["ray"]}


# --------------------------------------------------------------------------- the section
GAP_TEXT = """## Queue (issues 4, 15) — `scripts/bench_queue.py`

Real Ray 2.60 clusters with fake GPUs in a private network namespace, the verl stand-in holding
STRICT_PACK placement groups of {{GPU: 1, CPU: 3}}; {cores} cores shared with other work
(load average {load0:.1f} at the start, {load1:.1f} at the end of this run; a part reused with
`--resume` keeps the figures of the run that measured it{note}).

**Idle gap** between one job's end and the next queued job's start ({jobs} jobs needing the whole
1-node cluster, queued behind a blocker, then released), with the queue's pre-started next job
(its default) and with every job started cold (`RAYJOBS_QUEUE_STANDBY=0`), each on a fresh cluster
in this run, and Ray's own PENDING jobs on the first. "Process" gap: the next job's workload
starts minus the previous workload's process exit (for rayjobs: the next runner's own start, the
"running from" time of its admission line, minus the previous "attempt finished" line; for Ray:
the entrypoint's own `date` lines), the definition behind
Ray's measured 1.2-1.5 s. A driver in the benchmark also sampled the free GPUs in Ray's view every
5 ms: "reaction" is GPUs free -> next job admitted; "GPUs idle" is GPUs free -> GPUs taken again.

Jobs of one 1-s step (the issue-4 workload):

{short}

Jobs of one {long_s:g}-s step (long enough for the pre-started job to be ready, as for any real job):

{long}

Reaping (issue 16, `rayjobs.oncluster.reaper`): before the next job is admitted onto GPUs, the
queue ends what the previous one left on the nodes (an orphaned engine holding GPU memory). It
reaps as soon as the trainer's Ray drivers are dead, so "reaction" now includes noticing that
(a GCS lookup per tick) and the reap itself (12-34 ms measured on one node); the rows with
reaping off show what that costs against admitting on Ray's view alone.

Targets: next job admitted ≤ 0.1 s after the GPUs free ("reaction") and the idle gap not
worse than before (0.47 s median GPUs idle with the issue-4 design, where every waiting job was a
live Ray job with its runner started: 5 processes and ~356 MB each). Now only the queue's first
waiting job is pre-started (`rayjobs.oncluster.standby`): Ray starts its supervisor and runner
while the GPUs are still busy, and the runner holds, polling a go file on the head's disk every
10 ms; at admission the queue writes that file and the trainer starts at once, so what remains of
"GPUs idle" is the reaction plus the trainer's own start-up (Python, `ray.init`, verl's check)
before it creates its placement groups, {long_idle:.1f} s here with jobs long enough for the
pre-started one to be ready. Started cold, Ray's job start (its supervisor actor, the runtime env,
the runner) comes first, {cold_start:.1f} s here. The queue pre-starts the next job only once the
running trainer has its GPUs (its placement groups), so Ray's job start does not take CPU from
the start-up the GPUs wait for; with the 1-s jobs of the first table that is sometimes too late
(the "admitted -> runner running" row: the rest of Ray's job start). The issue-4 design (commit
fa3d638, every waiting job pre-started), run with its own tree's `bench_gap` on this machine in
the same session, 1-s jobs: GPUs idle {old[0]:.2f} s median ({old[1]:.2f}-{old[2]:.2f}; its 0.47 s of issue 4
was on a quieter machine). So with jobs longer than Ray's job start (any real job) the GPUs
idle as long as before -- what is left is the trainer's own start-up, which any design that
starts the trainer at admission pays -- and with 1-s jobs about 1 s longer. The queue sees the driver end (it
polls every {poll:g} s while jobs wait, every 20 ms for 3 s after a job ended) and admits
the next job then; a negative process gap means the next runner started before the previous one
printed its last line (Ray frees a trainer's placement groups when its driver disconnects, a
moment before its process is gone). With Ray PENDING the raylet hands the freed GPUs straight to
the next pending job's supervisor (they never show as free), and they stay unused until its
entrypoint runs: its GPU idle time is its process gap, and verl could not use GPUs held as
entrypoint resources anyway.
"""
BACKLOG_TEXT = """
**A backlog of {n} waiting jobs** behind a job holding the whole 1-node cluster, side by side
(each on a fresh cluster; every process of the cluster and its descendants -- Ray's workers, job
supervisors, drivers -- and their RSS once settled: idle, then with one job waiting, then with all):

{table}

Target: < 50 MB in all and no process per job for 500 waiting jobs. A waiting rayjobs job is a
JSON file on the storage root (its code once per content hash), and a line in the queue's status
file; it reaches Ray only when it is admitted -- except the one pre-started next job, a constant
that does not grow with the backlog (`RAYJOBS_QUEUE_STANDBY=0` on the head removes it, and with it
the idle-gap gain above). "Sending them took": rayjobs' send of the composed and checked sweep
(its enqueue requests, each a small Ray job, until the queue shows every job) against {n}
`submit_job` calls of Ray's SDK in one loop.
"""
HISTORY_TEXT = """
**History**: `rayjobs list` over {n} finished jobs in the queue's history (records in the store,
pruned from Ray's job table; {shown} rows shown), median of 5: **{alone:.2f} s**
(target < 1 s). Then {ray_jobs} more finished jobs kept in Ray's own table, interleaved, same cluster:

{table}

`rayjobs list` lists Ray's jobs with one GET of `/api/jobs/` and checks the connection with one
GET of `/api/version`, so it never imports Ray's job SDK, and prints plain columns off a terminal
(before: 5.26 s here, of which ~1 s importing the SDK and ~2.8 s rich laying out 2,000 rows).
The history file (one JSON line per finished job, in the head's log dir) is read in one request;
Ray's table is pruned of a finished job after `RAYJOBS_RETENTION_S` (default 6 h), so it stays short
on a cluster that ran thousands of jobs. Each command includes its interpreter start.
"""
UTIL_TEXT = """
**GPU utilisation** over a queue of {n} jobs ({n1} x 1 GPU, {n2} x 2 GPUs, ~{mean_job_s:.1f} s each
from admission to end) on 2 nodes x 2 GPUs, queued behind a blocker and released at once:

{table}

Jobs that failed on verl's resource check: {crashed}. "Allocated" counts a job's GPUs from its
admission (they are reserved for it from then on), so each job's own start-up is in it. The measured
makespan is {of_ideal:.0%} of that packing's (a greedy estimate, not a proven optimum; the lower bound
is the hard limit); what separates them is the idle gap above and fragmentation: Ray places each STRICT_PACK group on the least-loaded node (it spreads),
so two 1-GPU jobs can take one GPU on each node and a 2-GPU job then waits for one of them.
"""
GAP_ROWS = (("gpu_idle", "GPUs idle"), ("react", "reaction"), ("ours", "process gap"), ("start", "admitted -> runner running"))
MECHANISM = ["mechanism", "median s", "min s", "max s", "all (s)"]


def gap_tables(got: dict[str, Any]) -> tuple[str, str]:
    """The idle gap's two tables: 1-s jobs (pre-started, cold, Ray PENDING), then long jobs."""
    pre, cold = "rayjobs queue, next job pre-started", "rayjobs queue, cold start"
    short = [[f"{pre}: GPUs idle (free -> next trainer's placement groups)", *doc.stats(got["gap"]["gpu_idle"])],
             [f"{pre}: reaction (GPUs free -> admitted)", *doc.stats(got["gap"]["react"])],
             [f"{pre}: process gap", *doc.stats(got["gap"]["ours"])],
             [f"{pre}: admitted -> runner running", *doc.stats(got["gap"]["start"])]]
    short += [[f"{cold}: {what}", *doc.stats(got["gap_cold"][k])] for k, what in GAP_ROWS[:3]]
    short += [[f"{cold}: admitted -> runner running (Ray's job start)", *doc.stats(got["gap_cold"]["start"])],
              ["Ray PENDING (`entrypoint_num_gpus=2`): process gap", *doc.stats(got["gap"]["ray"])]]
    long = [[f"{pre}: {what}", *doc.stats(got["gap_long"][k])] for k, what in GAP_ROWS]
    long += [["the same, reaping off (`RAYJOBS_REAP=0`): GPUs idle", *doc.stats(got["gap_long_noreap"]["gpu_idle"])],
             ["the same, reaping off: reaction", *doc.stats(got["gap_long_noreap"]["react"])]]
    return doc.table(MECHANISM, short, "lrrrl"), doc.table(MECHANISM, long, "lrrrl")


def backlog_table(back: dict[str, Any]) -> str:
    """Processes and RSS the backlog added: rayjobs' pre-started job, its records; Ray's PENDING jobs."""
    n = back["n"]
    grow = lambda k, base: (back[k][0] - back[base][0], back[k][1] - back[base][1])  # noqa: E731
    (one_p, one_mb), (rec_p, rec_mb) = grow("ours_one", "ours_base"), grow("ours", "ours_one")
    (ours_p, ours_mb), (ray_p, ray_mb) = grow("ours", "ours_base"), grow("ray", "ray_base")
    return doc.table(["waiting jobs", "processes on the head", "RSS on the head", "per job", "sending them took"], [
        ["rayjobs: the first waiting job, pre-started (one, whatever the backlog)", f"{one_p:+d}", f"{one_mb:+.1f} MB", "", ""],
        [f"rayjobs: {n - 1} more waiting jobs, records in the queue's store (one sweep)", f"{rec_p:+d}", f"{rec_mb:+.1f} MB",
         f"{rec_mb / max(1, n - 1) * 1024:.0f} KB", f"{back['ours_submit_s']:.1f} s"],
        [f"rayjobs in all, {n} waiting", f"{ours_p:+d}", f"{ours_mb:+.1f} MB", "", ""],
        [f"Ray PENDING (`entrypoint_num_gpus=2`), {n} jobs", f"{ray_p:+d}", f"{ray_mb:+.1f} MB",
         f"{ray_mb / n * 1024:.0f} KB", f"{back['ray_submit_s']:.1f} s"]])


def markdown(got: dict[str, Any], a: argparse.Namespace, load1: float) -> str:
    """The section, from every part's result."""
    from rayjobs.oncluster.queueservice import WAIT_POLL_S

    short, long = gap_tables(got)
    hist, util, back = got["history"], got["util"], got["backlog"]
    md = GAP_TEXT.format(cores=os.cpu_count(), load0=got["_load0"], load1=load1, note="; " + a.note if a.note else "",
                         jobs=a.jobs, short=short, long=long, long_s=LONG_STEP_S, long_idle=median(got["gap_long"]["gpu_idle"]),
                         cold_start=median(got["gap_cold"]["start"]), old=OLD_DESIGN_GPU_IDLE, poll=WAIT_POLL_S)
    md += BACKLOG_TEXT.format(n=back["n"], table=backlog_table(back))
    md += HISTORY_TEXT.format(n=hist["n"], shown=hist["shown"], alone=median(hist["alone"]), ray_jobs=hist["ray_jobs"],
                              table=doc.table(["command", "median s", "min s", "max s"], [
                                  [f"`rayjobs list` ({hist['n']} from the history + {hist['ray_jobs']} from Ray's table)",
                                   *doc.stats(hist["rayjobs"], every=False)],
                                  [f"`ray job list` ({hist['ray_jobs']} jobs in Ray's table)", *doc.stats(hist["ray"], every=False)]]))
    u = lambda makespan: f"{util['gpu_s'] / (4 * makespan):.0%}"  # noqa: E731
    return md + UTIL_TEXT.format(**util, of_ideal=util["makespan"] / util["ideal"], table=doc.table(["", "makespan s", "utilisation"], [
        ["measured (allocated GPU-s / (4 x makespan))", f"{util['makespan']:.1f}", u(util["makespan"])],
        ["\"ideal\" packing of the same jobs (zero overhead, per-node fit, best of 3 greedy list orders)", f"{util['ideal']:.1f}",
         u(util["ideal"])],
        ["lower bound (GPU-s / 4)", f"{util['lb']:.1f}", "100%"]]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--backlog", type=int, default=500, help="waiting jobs for the backlog cost (rayjobs vs Ray PENDING)")
    ap.add_argument("--history", type=int, default=2000, help="finished jobs in the queue's history for `rayjobs list`")
    ap.add_argument("--ray-jobs", type=int, default=200, help="finished jobs in Ray's own table for `ray job list`")
    ap.add_argument("--only", choices=PARTS, action="append",
                    help="run only these parts (the doc section is written once every part has a result)")
    ap.add_argument("--parts", default="/tmp/rayjobs-bench-queue-parts.json",
                    help="each part's result is kept here; --resume reuses those of an earlier run")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--note", default="", help="said after the load line (what else shared the machine)")
    a = doc.parse(ap, {"jobs": 2, "backlog": 5, "history": 20, "ray_jobs": 3, "parts": "/tmp/rayjobs-bench-queue-quick.json"})
    got: dict[str, Any] = json.loads(Path(a.parts).read_text()) if a.resume and os.path.exists(a.parts) else {}
    got.setdefault("_load0", os.getloadavg()[0])
    with session.run("rjq") as r:
        parts: dict[str, Callable[[], Any]] = {
            "gap": lambda: bench_gap(r, a.jobs), "gap_cold": lambda: bench_gap(r, a.jobs, False, False),
            "gap_long": lambda: bench_gap(r, a.jobs, True, False, step_s=LONG_STEP_S),
            "gap_long_noreap": lambda: bench_gap(r, a.jobs, True, False, step_s=LONG_STEP_S, reap=False),
            "util": lambda: bench_util(r), "backlog": lambda: bench_backlog(r, a.backlog),
            "history": lambda: bench_history(r, a.history, a.ray_jobs)}
        for name in a.only or [p for p in PARTS if p not in got]:
            got[name] = parts[name]()
            Path(a.parts).write_text(json.dumps(got, default=str))  # a later part's failure keeps this one's result
    if set(PARTS) - set(got):
        print(json.dumps(got, indent=1, default=str))
        return
    doc.publish(a, "queue", markdown(got, a, os.getloadavg()[0]))


if __name__ == "__main__":
    main()

"""Benchmark successive halving of a sweep (``rayjobs.halving.*``): GPU-seconds saved, the best point kept.

One real Ray cluster with fake GPUs (3 nodes x 2 GPUs, ``tests/clusters.py``), inside a private
network namespace, with the verl stand-in holding a STRICT_PACK placement group of one GPU per
point. The same 27-point grid (9 ``+fake.score_offset`` x 3 ``+fake.score_peak``: a point's score
rises by the same slope until its peak, then falls, so a high-offset point that peaks early leads
at the first rungs and ends behind a low-offset one that peaks late) is run:

* A: in full (no halving);
* B: with halving (``rayjobs.halving.metric=critic/score/mean``, rungs ``[4,8]``, keep 1/3), and again
  with each further rung setting of ``--rungs`` while the time budget allows.

Every job of a run ended before the next run is submitted. Per run: GPU-seconds (sum over the jobs
of admission -> end, from the queue's view, x their GPUs; Ray's start -> end too), the ratio to A,
whether the grid's best final point SUCCEEDED, wall time from the submit to its end, and how many
"crossing" points (final value in the grid's top third, value at the setting's first rung not)
were halved. The curves are fake_verl.py's formula (checked against run A's final metrics).

Each run's raw result (every job's view, the submit time) is kept in ``--dump`` as it ends;
``--resume`` reuses the runs found there and runs only the missing settings (none missing: it only
writes the section again).

    .venv/bin/python scripts/bench_halving.py [--steps 16] [--step-s 0.3] [--rungs 4,8 --rungs 8] [--budget-s 840]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
import benchlib  # noqa: E402

from clusters import FakeGpuCluster  # noqa: E402  (benchlib puts tests/ on sys.path)

METRIC = "critic/score/mean"
#: Scrambled, so the points that start first (and so reach a rung first, where ASHA lets them on
#: against fewer rivals) are neither the best nor the worst.
OFFSETS = (0.16, 0.0, 0.28, 0.08, 0.32, 0.04, 0.2, 0.12, 0.24)
PEAKS = (6, 11, 16)
KEEP = 0.333
NODES = ((2, 6), (2, 6), (2, 6))
Point = tuple[float, int]


def score(offset: float, peak: int, step: int, steps: int) -> float:
    """``critic/score/mean`` of fake_verl.py at ``step`` (its formula, word for word)."""
    return 0.1 + 0.8 * min(step, peak) / steps - 0.05 * max(0, step - peak) + offset


def top_third(values: dict[Point, float]) -> set[Point]:
    """The points ranked within the top ceil(n / 3), ties ranking alike (as the queue ranks them)."""
    cut = math.ceil(len(values) / 3)
    return {p for p, v in values.items() if sum(1 for w in values.values() if w > v) < cut}


def point_of(view: dict[str, Any]) -> Point:
    """(offset, peak) of a job, from the overrides in its metadata."""
    ov = view["metadata"].get("overrides", "[]")
    kv = dict(o.lstrip("+").split("=", 1) for o in (json.loads(ov) if isinstance(ov, str) else ov) if "=" in o)
    return float(kv["fake.score_offset"]), int(kv["fake.score_peak"])


def submit_grid(c: FakeGpuCluster, work: Path, steps: int, step_s: float, rungs: Optional[str]) -> tuple[list[str], float]:
    """``python -m rayjobs.submit -m`` of the grid, as a user would (cwd: the project); (ids, submit time)."""
    args = ["-m", "+exp=fake_ppo", "+fake.hold_gpus=true", f"+fake.steps={steps}", f"+fake.step_s={step_s}",
            "trainer.save_freq=2", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
            f"+fake.score_offset={','.join(map(str, OFFSETS))}", f"+fake.score_peak={','.join(map(str, PEAKS))}"]
    if rungs:
        args += [f"rayjobs.halving.metric={METRIC}", f"rayjobs.halving.rungs=[{rungs}]", f"rayjobs.halving.keep={KEEP}"]
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "rayjobs.submit", *args], cwd=work, env=c.client_env(),
                       capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        raise RuntimeError(f"submit failed ({r.returncode}): {r.stderr[-3000:]}")
    ids = r.stdout.split()
    if len(ids) != len(OFFSETS) * len(PEAKS):
        raise RuntimeError(f"expected {len(OFFSETS) * len(PEAKS)} ids, got {ids}\n{r.stderr[-2000:]}")
    return ids, t0


def wait_ended(c: FakeGpuCluster, ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    """Poll the queue (GET /v1/jobs?sweep=) until every job of ``ids`` has ended, bounded; their views.
    A poll the queue does not answer in time (a loaded machine) is tried again until the deadline."""
    from rayjobs.client.queueapi import QueueDown

    q = c.queue()
    sweep = q.job(ids[0])["metadata"]["sweep"]
    deadline = time.monotonic() + timeout
    got: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        try:
            got = {v["submission_id"]: v for v in q.jobs(sweep=sweep) if v["submission_id"] in ids}
        except QueueDown as e:
            print(f"[bench] {e}: polling again", flush=True)
            continue
        if len(got) == len(ids) and all(v["state"] == "done" for v in got.values()):
            return got
        time.sleep(1.0)
    left = {i: (v["state"], v.get("status")) for i, v in got.items() if v["state"] != "done"}
    raise RuntimeError(f"{len(left)} jobs not ended after {timeout:.0f} s: {left}")


def gpu_s(v: dict[str, Any], ray_clock: bool = False) -> float:
    """GPU-seconds a job held: admission -> end (queue), or Ray's start -> end (``ray_clock``); 1 GPU each."""
    if ray_clock:
        return (v["end_time"] - v["start_time"]) / 1000.0 if v.get("start_time") and v.get("end_time") else 0.0
    return float(v["finished_at"]) - float(v["admitted_at"]) if v.get("admitted_at") and v.get("finished_at") else 0.0


def trained(v: dict[str, Any]) -> int:
    """The last step a job logged (its final metrics' step)."""
    return int((v.get("final") or {}).get("step") or 0)


def summarize(raw: dict[str, Any], steps: int) -> dict[str, Any]:
    """One run's figures (see the module docstring) from its raw result (:func:`run_once`)."""
    views, t0, rungs = raw["views"], raw["t0"], raw["rungs"]
    pts = {point_of(v): v for v in views.values()}
    final = {p: score(*p, steps, steps) for p in pts}
    best = max(final, key=final.get)
    bv = pts[best]
    measured = {p: (v.get("final") or {}).get("data", {}).get(METRIC) for p, v in pts.items()}
    mismatch = [p for p, m in measured.items() if pts[p]["status"] == "SUCCEEDED" and (m is None or abs(m - final[p]) > 1e-9)]
    halved = {p: v["halved"] for p, v in pts.items() if v.get("halved")}
    out: dict[str, Any] = {
        "rungs": rungs, "took_s": raw["took_s"],
        "gpu_s": sum(gpu_s(v) for v in views.values()), "ray_gpu_s": sum(gpu_s(v, True) for v in views.values()),
        "status": {s: sum(1 for v in views.values() if v["status"] == s) for s in sorted({v["status"] for v in views.values()})},
        "best": best, "best_status": bv["status"], "best_wall": float(bv["finished_at"]) - t0,
        "makespan": max(float(v["finished_at"]) for v in views.values()) - t0, "final_mismatch": mismatch,
        "steps": sum(trained(v) for v in views.values()), "halved": len(halved),
        "halved_finished": sum(1 for p in halved if pts[p]["status"] == "SUCCEEDED"),
        "halved_past": [trained(pts[p]) - int(h["rung"]) for p, h in halved.items()]}
    if rungs:
        first = int(rungs.split(",")[0])
        crossing = top_third(final) - top_third({p: score(*p, first, steps) for p in pts})
        out.update(crossing=len(crossing), crossing_halved=sum(1 for p in crossing if p in halved),
                   top_halved=sum(1 for p in top_third(final) if p in halved),
                   rung_at={r: sum(1 for h in halved.values() if h["rung"] == r) for r in sorted({h["rung"] for h in halved.values()})})
    return out


def run_once(c: FakeGpuCluster, work: Path, steps: int, step_s: float, rungs: Optional[str], timeout: float) -> dict[str, Any]:
    """Submit the grid (with halving at ``rungs``, or none) and wait until every point ended: the raw
    result (rungs, submit time ``t0``, ``took_s``, every job's view), kept in the dump as it is."""
    t = time.monotonic()
    ids, t0 = submit_grid(c, work, steps, step_s, rungs)
    raw = {"rungs": rungs, "t0": t0, "views": wait_ended(c, ids, timeout), "took_s": time.monotonic() - t}
    print(f"[bench] rungs={rungs}: {json.dumps(summarize(raw, steps), default=str)}", flush=True)
    return raw


def table(runs: list[dict[str, Any]]) -> str:
    """The per-run table of the doc section."""
    a = runs[0]
    rows = ["| run | rungs | GPU-s (admitted -> end) | B / A | GPU-s (Ray start -> end) | B / A | steps trained | statuses "
            "| halved (of them still SUCCEEDED) | best point | submit -> best point's end s | submit -> last end s "
            "| crossing points halved | top-third points halved |",
            "|---|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|"]
    for k, r in enumerate(runs):
        st = ", ".join(f"{n} {s}" for s, n in r["status"].items())
        cross = f"{r['crossing_halved']} of {r['crossing']}" if "crossing" in r else "-"
        top = f"{r['top_halved']} of {math.ceil(27 / 3)}" if "top_halved" in r else "-"
        rows.append(f"| {'A (full grid)' if k == 0 else f'B{k}'} | {'[' + r['rungs'] + ']' if r['rungs'] else 'none'} "
                    f"| {r['gpu_s']:.1f} | {r['gpu_s'] / a['gpu_s']:.0%} | {r['ray_gpu_s']:.1f} | {r['ray_gpu_s'] / a['ray_gpu_s']:.0%} "
                    f"| {r['steps']} | {st} | {r['halved']} ({r['halved_finished']}) | {r['best_status']} | {r['best_wall']:.1f} "
                    f"| {r['makespan']:.1f} | {cross} | {top} |")
    return "\n".join(rows)


def markdown(runs: list[dict[str, Any]], a: argparse.Namespace, note: str) -> str:
    """The doc section."""
    base, bs = runs[0], runs[1:]
    best = base["best"]
    b1 = bs[0] if bs else None
    verdict = (f"**{b1['gpu_s'] / base['gpu_s']:.0%}** of the full grid's GPU-seconds with rungs [{b1['rungs']}] "
               f"(target ≤ 40 %: {'met' if b1['gpu_s'] / base['gpu_s'] <= 0.40 else 'missed'}); the grid's best point "
               f"{'SUCCEEDED' if b1['best_status'] == 'SUCCEEDED' else 'did NOT succeed (' + b1['best_status'] + ')'}") if b1 else "no halved run"
    halvings = "; ".join(f"[{r['rungs']}]: " + ", ".join(f"{n} at step {s}" for s, n in r["rung_at"].items()) for r in bs)
    mism = sum(len(r["final_mismatch"]) for r in runs)
    late = "".join(
        f"\n- [{r['rungs']}]: {r['steps']} steps trained, {r['steps'] / base['steps']:.0%} of the full grid's; a halved point "
        f"trained {min(r['halved_past'], default=0)}-{max(r['halved_past'], default=0)} steps past the rung it was halved at."
        + (" No halved point stopped before its last step: the runner's stop at the next checkpoint took effect only at "
           f"the final one (the queue's verdict plus the runner's reaction took longer, under this load, than the "
           f"rest of the {a.steps * a.step_s:g} s of training), so the GPU-s difference is the jobs' start-up and teardown "
           "varying with the load, not training saved." if r["steps"] >= base["steps"] else "") for r in bs)
    return f"""## Successive halving — `scripts/bench_halving.py`

One fake-GPU Ray cluster (3 nodes x 2 GPUs) in a private network namespace, {os.cpu_count()} cores shared
with other helpers' tests and benchmarks ({note}). The same 27-point sweep, `python -m rayjobs.submit -m
+exp=fake_ppo` with `+fake.score_offset={','.join(map(str, OFFSETS))}` x `+fake.score_peak={','.join(map(str, PEAKS))}`,
{a.steps} steps of {a.step_s:g} s, 1 GPU each, `trainer.save_freq=2`: the score rises 0.05 a step until
its peak and then falls 0.05 a step, so a high-offset point peaking at 6 leads at steps 4 and 8 and
ends far behind a low-offset one peaking at 16. Run A is the full grid, each B the same grid with
`rayjobs.halving.metric={METRIC} rayjobs.halving.rungs=[..] rayjobs.halving.keep={KEEP}`; every job of a
run ended before the next was submitted. **One run each** (no medians: 2 cores, shared).

{table(runs)}

- {verdict}. Best final point: offset {best[0]:g}, peak {best[1]} (final {score(*best, a.steps, a.steps):.2f}).
- GPU-s: per job, the queue's admission -> end (its GPUs are reserved from admission: the job's
  start-up is in it), x 1 GPU; Ray's start -> end beside it. "Steps trained": the sum of every
  job's last logged step ({27 * a.steps} for the full grid). Points halved: {halvings or '-'}.
  "Still SUCCEEDED": halved (the record keeps `halved`) but the trainer reached its last step
  before the stop took effect.
- Crossing points: final value in the grid's top third (the 9 best) while their value at the
  setting's first rung was not; at step 4 every point that has not peaked yet has the same slope,
  so the rung ranks by offset alone and a late bloomer is indistinguishable from an early peaker.
  Top-third points halved: of the grid's 9 best by final value, how many B halved.
- Final `{METRIC}` of every SUCCEEDED point against fake_verl.py's formula: {mism} mismatches.{late}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--step-s", type=float, default=0.3)
    ap.add_argument("--rungs", action="append", help="a halved run's rungs, comma-separated (repeatable); default 4,8 then 8")
    ap.add_argument("--budget-s", type=float, default=840, help="no further halved run starts past this (s since start)")
    ap.add_argument("--run-timeout-s", type=float, default=300, help="the longest one run may take to end")
    ap.add_argument("--dump", default="/tmp/rayjobs-bench-halving.json", help="each run's raw result is kept here")
    ap.add_argument("--resume", action="store_true", help="reuse the runs in --dump (same steps), run only the others")
    ap.add_argument("--note", default="", help="said in the section (what else shared the machine)")
    a = ap.parse_args()
    t_start = time.monotonic()
    done: dict[str, Any] = json.loads(Path(a.dump).read_text()) if a.resume and os.path.exists(a.dump) else {"runs": {}}
    want = [None, *(a.rungs or ["4,8", "8"])]
    todo = [r for r in want if str(r) not in done["runs"]]
    load0 = done.get("load0", os.getloadavg()[0])
    if todo:
        run_all(a, todo, done, t_start)
    runs = [summarize(done["runs"][str(r)], a.steps) for r in want if str(r) in done["runs"]]
    note = a.note or f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    md = markdown(runs, a, note)
    benchlib.write_section("halving", md)
    print(md)


def run_all(a: argparse.Namespace, todo: list[Optional[str]], done: dict[str, Any], t_start: float) -> None:
    """Run the settings ``todo`` on one fresh cluster, each kept in ``done`` and the dump as it ends."""
    root = benchlib.isolated_home("rjh")
    work = root / "project"  # the user's project: ./conf/exp/fake_ppo.yaml and workloads/fake_verl.py
    shutil.copytree(benchlib.REPO / "tests" / "workloads", work / "workloads", ignore=shutil.ignore_patterns("conf"))
    shutil.copytree(benchlib.REPO / "tests" / "workloads" / "conf", work / "conf")
    done.setdefault("load0", os.getloadavg()[0])
    last = 0.0
    try:
        with benchlib.private_netns():
            c = FakeGpuCluster(root / "c", nodes=NODES).start()
            try:
                for rungs in todo:
                    spent = time.monotonic() - t_start
                    if rungs is not None and last and spent + last > a.budget_s:
                        print(f"[bench] skipping rungs=[{rungs}]: {spent:.0f} s spent, budget {a.budget_s:.0f} s", flush=True)
                        break
                    done["runs"][str(rungs)] = raw = run_once(c, work, a.steps, a.step_s, rungs, a.run_timeout_s)
                    last = raw["took_s"]
                    Path(a.dump).write_text(json.dumps(done))
            finally:
                c.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

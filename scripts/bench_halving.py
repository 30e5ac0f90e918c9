"""Benchmark successive halving of a sweep (``rayjobs.halving.*``): GPU-seconds saved, the best point kept.

One real Ray cluster with fake GPUs (3 nodes x 2 GPUs, ``tests/clusters.py``), inside a private
network namespace, with the verl stand-in holding a STRICT_PACK placement group of one GPU per
point. The same 27-point grid (9 ``+fake.score_offset`` x 3 ``+fake.score_peak``, the peaks as
fractions of ``--steps``: a point's score rises by the same slope until its peak, then falls, so a
high-offset point that peaks early leads at the first rungs and ends behind a low-offset one that
peaks late) is run:

* A: in full (no halving);
* B: with halving (``rayjobs.halving.metric=critic/score/mean``, keep 1/3), once per rung setting of
  ``--rungs`` (default: 1/4 and 1/2 of the steps, then 1/8, 1/4 and 1/2) while the time budget allows.

Every job of a run ended before the next run is submitted. Per run: GPU-seconds (sum over the jobs
of admission -> end, from the queue's view, x their GPUs; Ray's start -> end too), the ratio to A,
whether the grid's best final point SUCCEEDED, wall time from the submit to its end, and how many
"crossing" points (final value in the grid's top third, value at the setting's first rung not)
were halved. The curves are fake_verl.py's formula (checked against run A's final metrics).

Where a job's time goes: while a run waits, the script samples every point's metrics file (the
step-N line is written the moment step N ends) every ``--sample-s``; before the cluster goes, it
reads each job's log (the runner's ``trainer started ... at`` stamp, the checkpoint watch's lines).
With the queue's admission / end and Ray's start, that splits each job into admission -> Ray's
start -> the trainer's start -> its first step (start-up), training, and last step -> end; and a
halved point into its rung's step -> the queue's verdict -> its last step -> its end.

Each run's raw result (every job's view, the samples, the logs, the submit time) is kept in
``--dump`` as it ends; ``--resume`` reuses the runs found there (same steps, step time, peaks and
save_freq) and runs only the missing settings (none missing: it only writes the section again).

    .venv/bin/python scripts/bench_halving.py [--steps 32] [--step-s 1.75] [--rungs 8,16 --rungs 4,8,16] [--budget-s 1500]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
import tuneasha  # noqa: E402
from bench import doc, jobs, session  # noqa: E402
from halving_report import (KEEP, METRIC, NODES, OFFSETS, PEAK_FRACTIONS, RUNG_FRACTIONS, markdown, peaks,  # noqa: E402
                            score, summarize, sweep_order, tune_section)

def submit_grid(c: Any, work: Path, a: argparse.Namespace, rungs: Optional[str]) -> tuple[list[str], float]:
    """``python -m rayjobs.submit -m`` of the grid, as a user would (cwd: the project); (ids, submit time)."""
    args = ["-m", "+exp=fake_ppo", "+fake.hold_gpus=true", f"+fake.steps={a.steps}", f"+fake.step_s={a.step_s}",
            f"trainer.save_freq={a.save_freq}", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
            f"+fake.score_offset={','.join(map(str, OFFSETS))}", f"+fake.score_peak={','.join(map(str, a.peak_steps))}"]
    if rungs:
        args += [f"rayjobs.halving.metric={METRIC}", f"rayjobs.halving.rungs=[{rungs}]", f"rayjobs.halving.keep={KEEP}"]
    t0, _, ids = jobs.submit_cmd(c, *args, cwd=str(work), timeout=240)
    if len(ids) != len(OFFSETS) * len(a.peak_steps):
        raise RuntimeError(f"expected {len(OFFSETS) * len(a.peak_steps)} ids, got {ids}")
    return ids, t0


def sample_steps(run_dirs: dict[str, str], seen: dict[str, dict[int, float]], sizes: dict[str, int]) -> None:
    """The first time each job's metrics files show each step (a file is read again only when it grew)."""
    now = time.time()
    for jid, rd in run_dirs.items():
        try:
            files = [p for p in Path(rd).iterdir() if p.name.startswith("metrics.") and p.name.endswith(".jsonl")]
        except OSError:
            continue
        for p in files:
            try:
                size = p.stat().st_size
            except OSError:
                continue
            if sizes.get(str(p)) == size:
                continue
            sizes[str(p)] = size
            for line in p.read_bytes().splitlines():
                try:
                    step = int(json.loads(line)["step"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line being written
                seen[jid].setdefault(step, now)


def wait_ended(c: Any, ids: list[str], timeout: float, sample_s: float) -> tuple[dict[str, dict[str, Any]], dict[str, dict[int, float]]]:
    """Poll the queue (GET /v1/jobs?sweep=, every second) until every job of ``ids`` has ended, bounded,
    sampling the jobs' metrics files every ``sample_s`` meanwhile; (their views, {job: {step: first seen}}).
    A poll the queue does not answer in time (a loaded machine) is tried again until the deadline."""
    from rayjobs.client.queueapi import QueueDown

    q = c.queue()
    sweep = q.job(ids[0])["metadata"]["sweep"]
    deadline = time.monotonic() + timeout
    got: dict[str, dict[str, Any]] = {}
    seen: dict[str, dict[int, float]] = {i: {} for i in ids}
    sizes: dict[str, int] = {}
    run_dirs: dict[str, str] = {}
    next_poll = 0.0
    while time.monotonic() < deadline:
        if time.monotonic() >= next_poll:
            next_poll = time.monotonic() + 1.0
            try:
                got = {v["submission_id"]: v for v in q.jobs(sweep=sweep) if v["submission_id"] in ids}
            except QueueDown as e:
                print(f"[bench] {e}: polling again", flush=True)
                continue
            run_dirs.update({i: v["metadata"]["run_dir"] for i, v in got.items() if v["metadata"].get("run_dir")})
            if len(got) == len(ids) and all(v["state"] == "done" for v in got.values()):
                sample_steps(run_dirs, seen, sizes)
                return got, seen
        sample_steps(run_dirs, seen, sizes)
        time.sleep(sample_s)
    left = {i: (v["state"], v.get("status")) for i, v in got.items() if v["state"] != "done"}
    raise RuntimeError(f"{len(left)} jobs not ended after {timeout:.0f} s: {left}")


ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAYJOBS_LINE = re.compile(r"\[rayjobs\] .*")


def job_logs(c: Any, ids: list[str]) -> dict[str, list[str]]:
    """Each job's ``[rayjobs]`` log lines (the runner's and its checkpoint watch's), from Ray's Jobs API."""
    d = c.dashboard()
    out: dict[str, list[str]] = {}
    for i in ids:
        try:
            text = d.logs(i)
        except Exception as e:  # noqa: BLE001 (a log the head lost: that job's breakdown has gaps)
            out[i] = [f"(no log: {e})"]
            continue
        out[i] = [m.group(0) for line in ANSI.sub("", text).replace("\r", "\n").splitlines()
                  if (m := RAYJOBS_LINE.search(line))]
    return out


def queue_events(c: Any, ids: list[str]) -> list[list[Any]]:
    """The queue actor's recent events (time, what, detail) about ``ids`` (its ``reap took`` ones: how
    long the reap at each job's end took), through a Ray driver of this process for a moment."""
    try:
        events = jobs.queue_events(c.gcs)
    except Exception as e:  # noqa: BLE001 (the breakdown then lacks the reaps)
        print(f"[bench] no queue events: {type(e).__name__}: {e}", flush=True)
        return []
    want = set(ids)
    return [list(e) for e in events if str(e[2]).split(":")[0].split(" ")[0] in want]


def run_once(c: Any, work: Path, a: argparse.Namespace, rungs: Optional[str]) -> dict[str, Any]:
    """Submit the grid (with halving at ``rungs``, or none) and wait until every point ended: the raw
    result (rungs, submit time ``t0``, ``took_s``, every job's view, the step samples, the jobs' rayjobs
    log lines), kept in the dump as it is."""
    t = time.monotonic()
    ids, t0 = submit_grid(c, work, a, rungs)
    views, seen = wait_ended(c, ids, a.run_timeout_s, a.sample_s)
    took = time.monotonic() - t
    raw = {"rungs": rungs, "t0": t0, "views": views, "took_s": took, "seen": seen, "logs": job_logs(c, ids),
           "events": queue_events(c, ids)}
    s = summarize(raw, a.steps, a.step_s)
    s.pop("timelines")
    print(f"[bench] rungs={rungs}: {json.dumps(s, default=str)}", flush=True)
    return raw


def load_dump(a: argparse.Namespace) -> dict[str, Any]:
    """The dump's runs, when ``--resume`` and it was made with the same settings (else none)."""
    params = {"steps": a.steps, "step_s": a.step_s, "peaks": list(a.peak_steps), "save_freq": a.save_freq}
    if not (a.resume and os.path.exists(a.dump)):
        return {"runs": {}, "params": params}
    done = json.loads(Path(a.dump).read_text())
    if done.get("params") != params:
        raise SystemExit(f"--resume: {a.dump} was made with {done.get('params')}, not {params}: run without --resume "
                         f"or give another --dump")
    return done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--step-s", type=float, default=1.75)
    ap.add_argument("--peaks", default=",".join(map(str, PEAK_FRACTIONS)),
                    help="the grid's score peaks as fractions of --steps, comma-separated (default: 6,11,16 of 16)")
    ap.add_argument("--save-freq", type=int, default=2, help="trainer.save_freq (a halved point stops at its next save)")
    ap.add_argument("--rungs", action="append",
                    help="a halved run's rungs in steps, comma-separated (repeatable); default 1/4,1/2 then 1/8,1/4,1/2 of --steps")
    ap.add_argument("--budget-s", type=float, default=1500, help="no further halved run starts past this (s since start)")
    ap.add_argument("--run-timeout-s", type=float, default=1200, help="the longest one run may take to end")
    ap.add_argument("--sample-s", type=float, default=0.25, help="how often the metrics files are sampled")
    ap.add_argument("--dump", default="/tmp/rayjobs-bench-halving.json", help="each run's raw result is kept here")
    ap.add_argument("--resume", action="store_true", help="reuse the runs in --dump (same settings), run only the others")
    ap.add_argument("--section", default="halving",
                    help="the docs/benchmarks.md section to write (halving-tune holds the --rungs 4,12 --tune 4,3 run)")
    ap.add_argument("--note", default="", help="said in the section (what else shared the machine)")
    ap.add_argument("--tune", action="append", default=None,
                    help="GRACE,RF: also Ray Tune's ASHAScheduler (grace_period, reduction_factor) over the same curves on "
                         "the same cluster, and a rayjobs run at its rungs (repeatable; default 4,3; 'none' for neither)")
    a = doc.parse(ap, {"steps": 4, "step_s": 0.5, "rungs": ["2"], "tune": ["none"], "budget_s": 900,
                       "dump": "/tmp/rayjobs-bench-halving-quick.json"})
    a.peak_fractions = tuple(float(x) for x in a.peaks.split(","))
    a.peak_steps = peaks(a.steps, a.peak_fractions)
    default_rungs = [",".join(str(max(1, round(f * a.steps))) for f in fr) for fr in RUNG_FRACTIONS]
    t_start = time.monotonic()
    done = load_dump(a)
    a.tune_settings = [] if a.tune == ["none"] else [tuple(int(x) for x in t.split(",")) for t in (a.tune or ["4,3"])]
    matched = [",".join(map(str, tuneasha.rungs_of(g, rf, a.steps))) for g, rf in a.tune_settings]
    want = [None, *(a.rungs or default_rungs)]
    want += [r for r in matched if r not in want]
    todo = [r for r in want if str(r) not in done["runs"]]
    tune_todo = [t for t in a.tune_settings if f"{t[0]},{t[1]}" not in done.setdefault("tune", {})]
    load0 = done.get("load0", os.getloadavg()[0])
    if todo or tune_todo:
        run_all(a, todo, done, t_start, tune_todo)
    runs = [summarize(done["runs"][str(r)], a.steps, a.step_s) for r in want if str(r) in done["runs"]]
    final = lambda p: score(*p, a.steps, a.steps)  # noqa: E731
    tunes = [tuneasha.summarize(done["tune"][f"{g},{rf}"], a.steps, a.step_s, final)
             for g, rf in a.tune_settings if f"{g},{rf}" in done["tune"]]
    note = a.note or f"load average {load0:.1f} at the start, {done.get('load1', os.getloadavg()[0]):.1f} at the end"
    doc.publish(a, a.section, markdown(runs, a, note) + tune_section(runs, tunes, a))


def run_all(a: argparse.Namespace, todo: list[Optional[str]], done: dict[str, Any], t_start: float,
            tune_todo: list[tuple[int, int]]) -> None:
    """Run the settings ``todo`` on one fresh cluster, then Tune's ``tune_todo`` on it, each kept in ``done``
    and the dump as it ends."""
    done.setdefault("load0", os.getloadavg()[0])
    last = 0.0
    with session.run("rjh") as r, r.cluster(NODES) as c:
        for rungs in todo:
            spent = time.monotonic() - t_start
            if rungs is not None and last and spent + last > a.budget_s:
                print(f"[bench] skipping rungs=[{rungs}]: {spent:.0f} s spent, budget {a.budget_s:.0f} s", flush=True)
                break
            done["runs"][str(rungs)] = raw = run_once(c, r.work, a, rungs)
            last = raw["took_s"]
            done["load1"] = os.getloadavg()[0]
            Path(a.dump).write_text(json.dumps(done))
        for g, rf in tune_todo:
            raw = tuneasha.run_tune(c.gcs, sweep_order(done), steps=a.steps, step_s=a.step_s, grace=g, rf=rf,
                                    metric=METRIC, storage=r.root / "tune")
            print(f"[bench] tune grace={g} rf={rf}: {raw['took_s']:.1f} s, "
                  f"{sum(t['steps'] for t in raw['trials'])} steps", flush=True)
            done["tune"][f"{g},{rf}"] = raw
            done["load1"] = os.getloadavg()[0]
            Path(a.dump).write_text(json.dumps(done))


if __name__ == "__main__":
    main()

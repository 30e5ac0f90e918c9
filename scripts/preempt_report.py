"""The preemption benchmark's section of docs/benchmarks.md, from its raw results (``bench_preempt.py``'s
``--out``): the high job's time to start with preemption, side by side with rayjobs' queue and Ray's PENDING
jobs without it, where the time goes, and the steps each preemption redid."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc  # noqa: E402
from bench.timing import median  # noqa: E402

GPUS = 2  #: the cluster's fake GPUs (one node)
STEP_S = 1.0  #: the fill jobs' step time; the checkpoint interval is save_freq x this


def to_start(rounds: list[dict[str, Any]], since: str = "t0") -> list[float]:
    """Seconds from ``since`` to the high job's runner running, per round (with preemption: the
    rounds where it preempted a job; one that found a GPU free is counted apart)."""
    return [r["running"] - r[since] for r in rounds if r.get(since) is not None and r.get("preempted", True)]


def waited(rounds: list[dict[str, Any]]) -> list[float]:
    """Submit command start -> the first running job's end the high job could take (baselines)."""
    return [min(r["freed"], r["running"]) - r["t0"] for r in rounds if r.get("freed")]


PARTS = (("submit", "submit command start -> the queue has the job (compose, checks, upload, enqueue)"),
         ("decide", "-> victim asked to stop at its next checkpoint (the queue's decision)"),
         ("save", "-> the victim's next checkpoint saved (0 if nothing was trained since the last: stops at once)"),
         ("fire", "-> the victim's runner fires the stop (its line in the job's log; the watch looks every 0.2 s once asked)"),
         ("admit", "-> high job admitted (Ray's stop: SIGTERM, the trainer's drivers gone; the queue reaps, admits)"),
         ("start", "-> high job's runner running (pre-started while it waited: the go file)"),
         ("requeue", "(victim) trainer's exit -> back in the queue (Ray's STOPPED, the reap)"))


def parts(res: dict[str, Any]) -> dict[str, list[float]]:
    """A preemption mode's rounds split where the time goes (each a list over the rounds)."""
    by_round = {p["round"]: p for p in res["preemptions"]}
    out: dict[str, list[float]] = {k: [] for k, _ in PARTS}
    for k, r in enumerate(res["rounds"]):
        p = by_round.get(k)
        if not p or not p["asked"] or not p["fired"]:
            continue
        saved = p["save"][0] if p["save"] and p["save"][0] <= p["fired"] + 0.1 else p["asked"]  # none: stopped at once
        for key, a, b in (("submit", r["t0"], r["queued"]), ("decide", r["queued"], p["asked"]), ("save", p["asked"], saved),
                          ("fire", saved, p["fired"]), ("admit", p["fired"], r["admitted"]), ("start", r["admitted"], r["running"])):
            out[key].append(b - a)
        if p["requeued"] and p["exit"]:
            out["requeue"].append(p["requeued"] - p["exit"])
    return out


def verdict(xs: list[float], bound: float) -> str:
    worst = max(xs, default=float("nan"))
    return f"**{'met' if worst <= bound else 'missed'}** (worst {worst:.2f} s, bound {bound:g} s)"


def time_table(got: dict[str, Any], a: argparse.Namespace) -> tuple[str, list[str]]:
    """The time-to-start table, side by side with what a user has without preemption, and the verdicts."""
    rows, verdicts = [], []
    for k in a.intervals:
        res = got[f"preempt{k}"]
        iv, ours, queued = res["interval"], to_start(res["rounds"]), to_start(res["rounds"], "queued")
        rows += [[f"rayjobs, preemptible jobs, checkpoint every {iv:g} s: submit command start -> running", *doc.stats(ours)],
                 ["the same, from the job in the queue (the preemption's own part)", *doc.stats(queued)]]
        verdicts.append(f"checkpoint every {iv:g} s: from the submit command's start {verdict(ours, iv + 5)}; "
                        f"from the job in the queue {verdict(queued, iv + 5)}")
    free = sum(not r.get("preempted", True) for k in a.intervals for r in got[f"preempt{k}"]["rounds"])
    verdicts.append(f"rounds whose high job found a GPU free and preempted nothing (left out above): {free}")
    q, r = got["queue"]["rounds"], got["ray"]["rounds"]
    rows += [[f"rayjobs, jobs of {a.job_s:g} s not preemptible (first in line when a GPU frees): submit command "
              "start -> running", *doc.stats(to_start(q))],
             ["of which: until one of them ended (its runner's exit line, a moment after its GPU is free)", *doc.stats(waited(q))],
             [f"Ray PENDING (`ray job submit --entrypoint-num-gpus=1`), jobs of {a.job_s:g} s: command start -> "
              "entrypoint running", *doc.stats(to_start(r))],
             ["of which: until one of them ended (Ray's end time of the job)", *doc.stats(waited(r))]]
    return doc.table(["mechanism", "median s", "min s", "max s", "all (s)"], rows, "lrrrl"), verdicts


def parts_table(got: dict[str, Any], a: argparse.Namespace) -> str:
    split = {k: parts(got[f"preempt{k}"]) for k in a.intervals}
    return doc.table(["where the time goes (median s)", *(f"every {got[f'preempt{k}']['interval']:g} s" for k in a.intervals)],
                     [[what, *(f"{median(split[k][key]):.2f}" if split[k][key] else "-" for k in a.intervals)]
                      for key, what in PARTS])


def redo_table(got: dict[str, Any], a: argparse.Namespace) -> str:
    rows = []
    for k in a.intervals:
        res = got[f"preempt{k}"]
        pre = res["preemptions"]
        back = [p["back"] - p["exit"] for p in pre if p.get("back") and p.get("exit")]
        rows.append([f"{res['interval']:g} s ({k} steps of {STEP_S:g} s)", len(pre), ", ".join(str(p["redo_record"]) for p in pre),
                     ", ".join(str(p["redo_files"]) for p in pre), f"{sum(p['resumed_ok'] for p in pre)}/{len(pre)}",
                     f"{sum(p['no_step_lost'] for p in pre)}/{len(pre)}", f"{median(back):.1f}"])
    return doc.table(["checkpoint every", "preemptions", "steps redone (the queue's record)", "steps redone (metrics files)",
                      "resumed from the checkpoint it stopped at", "no step lost",
                      "victim: trainer exit -> running again (median s)"], rows, "lrllrrr")


SECTION = """## Preemption (issue 18) — `scripts/bench_preempt.py`

`sudo .venv/bin/python scripts/bench_preempt.py --rounds {a.rounds} --ray-rounds {a.ray_rounds} --intervals {intervals} --job-s {a.job_s:g}`
({took:.1f} min). One real Ray 2.60 cluster, 1 node declaring {gpus} fake GPUs, in a private network
namespace; the verl stand-in holding a STRICT_PACK placement group of {{GPU: 1, CPU: 3}} and saving a
checkpoint every `trainer.save_freq` steps of {step_s:g} s. {cores} cores shared with other work: 1-min load
average {load0:.1f} at the start (after waiting {waited:.0f} s for it to drop to {a.max_load:g} or less),
{load1:.1f} at the end{note}.

Each round: the cluster full ({gpus} jobs of 1 GPU training), a pause (the rounds' pauses spread
evenly, from a random offset, over one checkpoint interval with preemption and over one job's length
without, so the submits land all over the cycle a submit at a random moment would hit), then a 1-GPU job of `rayjobs.priority=10` (2 steps of 0.5 s) sent with `python -m rayjobs.submit`,
timed from the command's start to its runner's start (the "running from" time of its admission line;
the trainer starts right after). The next round waits for it to end and the cluster to be full again.
The modes, one after the other on the same cluster:
- **preemption**: a preemptible sweep (`rayjobs.preemptible=true`, default `preempt_wait_s`) of
  {gpus} long points; the queue stops the youngest at its next checkpoint, the high job takes its
  GPU, the victim resumes from that checkpoint when the high job is done (the same point is the
  youngest again next round).
- **no preemption, rayjobs' queue**: a sweep of jobs of {a.job_s:g} s, not preemptible, with a backlog
  behind them; the high job is first in line and starts when the first of them ends.
- **Ray PENDING**: Ray jobs holding `entrypoint_num_gpus=1` for {a.job_s:g} s each; the high job sent with
  `ray job submit --no-wait --entrypoint-num-gpus=1` waits PENDING until one ends (Ray has no
  priorities and no preemption); its entrypoint prints its own start.

{table}

Target: at most one checkpoint interval plus 5 s.
{verdicts}

Without preemption the high job waits for the remaining time of the shortest running job: here
jobs of {a.job_s:g} s, a median of **{q:.1f} s** (rayjobs' queue) and **{r:.1f} s** (Ray PENDING) from the
command's start. Ratio of the medians, without / with preemption: {ratios}. Without preemption the
wait grows with the jobs' length (a high job arriving at a random moment among {gpus} jobs of
length L waits about L / {gpus1}; real RL jobs run for hours); with it, it is bounded by the
checkpoint interval whatever the jobs' length.

{parts}

Steps redone per preemption (the queue's `preempted.redo`, `rayjobs status --json`'s `redo_steps`,
checked against the victims' per-attempt metrics files: the steps of attempt k past the checkpoint
attempt k+1 resumed from):

{redo}
"""
EXPLAIN = """
Where the time goes (figures: medians for {ivs}):
- **Waiting for the victim's next save** ({save} s) is the only part that grows with the
  interval: a submit at a random moment waits half an interval on average, one at most. A victim
  that trained nothing since its last save stops at once ({at_once} of {npre} rounds here).
- **The rest is the bound's 5 s.** The queue decides at once ({decide} s). The victim's runner reads
  the request (a file on the storage root) within 1 s and then looks for the save every 0.2 s: its
  "stopping at checkpoint" line shows in the job's log {fire} s after the save. The stop goes through Ray's Jobs API (SIGTERM to the
  trainer's process group: the checkpoint is on disk, nothing is lost); the queue admits the high
  job as soon as the trainer's Ray drivers are gone and what it left on the node is reaped
  ({admit} s), without waiting for Ray to call the victim STOPPED (that comes {requeue} s after the
  trainer's exit line). The high job was pre-started while it waited (the queue's standby), so its
  runner ran {start} s after admission; started cold it pays Ray's job start (the no-preemption
  baseline, whose pre-started job is the backlog's next: {cold:.2f} s median from admission to running).
- **The submit command** ({submit} s: Hydra composition, checks, upload, the enqueue job) is
  in the rows "from the submit command's start", not in those "from the job in the queue"; every
  submit pays it (the submit section above).
- **Steps redone** ({redo}): only what the trainer logs between the save and
  the SIGTERM. With steps of {step_s:g} s that is a step whenever the stop through Ray's Jobs API takes
  longer than one (on this machine it competes for the 2 cores with the high job's submit and
  pre-start; earlier runs of this script here had 1-2 in some rounds); with verl's steps of
  minutes, none. Each victim resumed from the checkpoint it stopped at
  as a new attempt under the same id and logged every step once past it (the table's last columns);
  the victims were stopped with `rayjobs stop` at the end of each mode (they were made to run on).
- **The victim's resume waits about 10 s more**: the queue deletes its old run from Ray's job table
  before it submits the same id again, and not earlier than 10 s after that run ended (Ray's monitor
  of the old run pings it every second; deleted sooner, Ray writes the old run's end onto the new
  one). That delays the victim ({back:.1f} s median from its trainer's exit to running again),
  never the high job; here the high job (a few seconds) ended first, so its GPU idled for the rest;
  behind a high job of minutes or hours it does not.
- **Without preemption** the high job, first in line, waits for the shortest running job to end
  and then for its own start. Ray's own PENDING job waits the same way, but without priorities:
  behind a backlog of pending jobs it would also wait its turn (there was none here).
"""


def markdown(a: argparse.Namespace, got: dict[str, Any]) -> str:
    """docs/benchmarks.md's section of this benchmark."""
    table, verdicts = time_table(got, a)
    q, r = (median(to_start(got[m]["rounds"])) for m in ("queue", "ray"))
    ratios = "; ".join(f"checkpoint every {got[f'preempt{k}']['interval']:g} s: "
                       f"{q / median(to_start(got[f'preempt{k}']['rounds'])):.1f}x (rayjobs' queue), "
                       f"{r / median(to_start(got[f'preempt{k}']['rounds'])):.1f}x (Ray PENDING)" for k in a.intervals)
    md = SECTION.format(a=a, intervals=",".join(map(str, a.intervals)), took=got["_took"] / 60, gpus=GPUS, gpus1=GPUS + 1,
                        step_s=STEP_S, cores=os.cpu_count(), load0=got["_load0"], waited=got["_waited"], load1=got["_load1"],
                        note="; " + a.note if a.note else "", table=table, verdicts="\n".join("- " + v for v in verdicts),
                        q=q, r=r, ratios=ratios, parts=parts_table(got, a), redo=redo_table(got, a))
    sp = {k: parts(got[f"preempt{k}"]) for k in a.intervals}
    med = {key: " / ".join(f"{median(sp[k][key]):.2f}" if sp[k][key] else "-" for k in a.intervals) for key, _ in PARTS}
    pre = [p for k in a.intervals for p in got[f"preempt{k}"]["preemptions"]]
    return md + EXPLAIN.format(
        ivs=" / ".join(f"{got[f'preempt{k}']['interval']:g} s" for k in a.intervals), **med, npre=len(pre),
        at_once=sum(1 for k in a.intervals for x in sp[k]["save"] if x < 0.01), step_s=STEP_S,
        redo=", ".join(str(p["redo_record"]) for p in pre),
        back=median([p["back"] - p["exit"] for p in pre if p.get("back") and p.get("exit")]),
        cold=median([x["running"] - x["admitted"] for x in got["queue"]["rounds"]]))

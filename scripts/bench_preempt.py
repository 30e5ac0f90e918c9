"""Benchmark preemption at a checkpoint (issue 18): a high-priority job's time to start on a cluster
full of preemptible jobs, and the steps redone per preemption, side by side with what a user has
without it.

One real Ray cluster (1 node, 2 fake GPUs) in a private network namespace, the verl stand-in
holding STRICT_PACK placement groups and saving a checkpoint every ``trainer.save_freq`` steps of
``+fake.step_s`` (so the checkpoint interval is known). Modes, one after the other on that cluster:

* preemption, for each checkpoint interval asked (default 5 s and 15 s): the cluster full of a
  preemptible sweep (one 1-GPU point per GPU, long); each round, after a pause (the rounds' pauses
  spread evenly over one interval, so the submits land all over the victims' checkpoint interval;
  the time to the next save is what a submit at a random moment waits), a fresh 1-GPU job of
  ``rayjobs.priority=10`` is submitted with the submit command (``python -m rayjobs.submit``), and
  timed to its start; the queue stops the youngest point at its next checkpoint, the high job
  starts, and the victim resumes from that checkpoint once the high job is done (the next round
  waits for that). Steps redone: the queue's record of each preemption (``preempted.redo``,
  ``rayjobs status``'s ``redo_steps``), checked against the victims' per-attempt metrics files.
* no preemption (rayjobs' queue): the same high job on the same cluster full of the same kind of
  jobs, ``--job-s`` long and not preemptible, with a backlog behind them: the queue admits it first
  when a GPU frees (pauses spread over one job's length).
* Ray's own PENDING job: a cluster full of Ray jobs holding ``entrypoint_num_gpus=1`` each, and
  the high job sent with ``ray job submit --entrypoint-num-gpus=1`` (Ray has no priority and no
  preemption: it starts when a job ends).

Without preemption the wait is the remaining time of the shortest running job: here jobs of
``--job-s`` seconds (longer than the bound of either interval, short enough for a 10-minute run);
real RL jobs run for hours. Times are one machine's clock: the runner's admission line,
the queue actor's events (read through a driver of this process), files sampled every 50 ms.

    sudo .venv/bin/python scripts/bench_preempt.py [--rounds 5] [--intervals 5,15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
import benchlib  # noqa: E402
from bench_queue import FINISHED, RUNNING, submit_points, wait_admitted  # noqa: E402

from clusters import FakeGpuCluster  # noqa: E402  (benchlib puts tests/ on sys.path)

from rayjobs.shared import parse_stamp  # noqa: E402

GPUS = 2
STEP_S = 1.0  #: the fill jobs' step time; the checkpoint interval is save_freq x this
ONE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1")
HIGH = (*ONE, "+fake.steps=2", "+fake.step_s=0.5", "rayjobs.priority=10")  #: the high-priority job: short


# --------------------------------------------------------------------------- observation
class Watcher:
    """Every 50 ms, for each fill job: its checkpoint tracker (verl's ``latest_checkpointed_iteration.txt``:
    when each save landed) and the new lines of its driver log on the head's disk (when its runner's
    watch fired the stop): to split a high job's wait into "until the next save" and the rest."""

    def __init__(self, logs_dir: Path) -> None:
        self.logs_dir = logs_dir
        self.jobs: dict[str, Path] = {}
        self.saves: list[tuple[float, str, int]] = []  #: (time seen, job, step)
        self.fired: list[tuple[float, str]] = []  #: (time seen, job): "[rayjobs] stopping at checkpoint: ..."
        self._last: dict[str, Optional[int]] = {}
        self._pos: dict[str, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def watch(self, sid: str, checkpoint_dir: str) -> None:
        self.jobs[sid] = Path(checkpoint_dir) / "latest_checkpointed_iteration.txt"

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for sid, f in list(self.jobs.items()):
                try:
                    step: Optional[int] = int(f.read_text().strip())
                except (OSError, ValueError):
                    step = None
                if step is not None and step != self._last.get(sid):
                    self._last[sid] = step
                    self.saves.append((time.time(), sid, step))
                self._tail(sid)

    def _tail(self, sid: str) -> None:
        try:
            with open(self.logs_dir / f"job-driver-{sid}.log", "rb") as fh:
                fh.seek(self._pos.get(sid, 0))
                new = fh.read()
                self._pos[sid] = fh.tell()
        except OSError:
            return
        if b"[rayjobs] stopping at checkpoint:" in new:
            self.fired.append((time.time(), sid))

    def first_after(self, sid: str, t: float) -> Optional[tuple[float, int]]:
        """(time, step) of ``sid``'s first save seen after ``t``."""
        return next(((at, s) for at, j, s in self.saves if j == sid and at > t), None)

    def fired_after(self, sid: str, t: float) -> Optional[float]:
        return next((at for at, j in self.fired if j == sid and at > t), None)

    def close(self) -> None:
        self._stop.set()
        self._t.join()


def record(c: FakeGpuCluster, sid: str) -> dict[str, Any]:
    """The queue's record of a job (its durable store on the cluster's storage root)."""
    from rayjobs.oncluster.store import QueueStore

    return QueueStore(c.queue_store).get(sid) or {}


def meta(rec: dict[str, Any]) -> dict[str, Any]:
    return (rec.get("spec") or {}).get("metadata") or {}


def attempts(run_dir: str) -> dict[int, list[int]]:
    """{attempt: [steps it logged]} from a run's per-attempt metrics files (verl's file logger)."""
    out = {}
    for f in Path(run_dir).glob("metrics.*.jsonl"):
        out[int(f.name.split(".")[1])] = [json.loads(ln)["step"] for ln in f.read_text().splitlines() if ln.strip()]
    return dict(sorted(out.items()))


def training(c: FakeGpuCluster, sid: str) -> bool:
    """Is ``sid`` training now: admitted, its current attempt (one per preemption so far) has logged
    a step in the last 2.5 steps' time? (The record says "admitted" for a moment after a preempted
    trainer has exited, until the queue has seen its end: the recent step tells them apart.)"""
    rec = record(c, sid)
    if rec.get("state") != "admitted":
        return False
    f = Path(meta(rec).get("run_dir", "/nonexistent")) / f"metrics.{int(rec.get('preemptions') or 0) + 1}.jsonl"
    try:
        st = f.stat()
    except OSError:
        return False
    return st.st_size > 0 and time.time() - st.st_mtime < 2.5 * STEP_S


def wait_training(c: FakeGpuCluster, ids: list[str], n: int, timeout: float = 180) -> list[str]:
    """Wait until ``n`` of ``ids`` are training (the cluster full again); those ids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [i for i in ids if training(c, i)]
        if len(busy) >= n:
            return busy
        time.sleep(0.3)
    raise RuntimeError(f"the cluster did not fill again within {timeout:.0f} s")


def queue_events(c: FakeGpuCluster) -> list[tuple[float, str, str]]:
    """The queue actor's recent events (time, what, detail)."""
    import ray

    return [tuple(e) for e in ray.get(ray.get_actor("queue", namespace="rayjobs").snapshot.remote())["events"]]


def event_at(events: list[tuple[float, str, str]], what: str, detail: str) -> Optional[float]:
    return next((t for t, w, d in events if w == what and d == detail), None)


# --------------------------------------------------------------------------- one high-priority job
def submit_cli(c: FakeGpuCluster, *overrides: str) -> tuple[float, float, str]:
    """Submit one job with the submit command, as a user would: (command start, its exit, the id)."""
    cmd = [sys.executable, "-m", "rayjobs.submit", "+exp=fake_ppo", f"rayjobs.address={c.address}",
           "+fake.hold_gpus=true", *overrides]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    t1 = time.time()
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"submit failed ({r.returncode}): {r.stderr[-2000:]}")
    return t0, t1, r.stdout.split()[-1]


def running_from(client: Any, sid: str) -> float:
    """The runner's own start (its admission line's "running from" time): the trainer starts right after."""
    m = RUNNING.search(client.get_job_logs(sid))
    if not m:
        raise RuntimeError(f"{sid}: no admission line")
    return parse_stamp(m.group(1))


def wait_status(client: Any, sid: str, want: tuple[str, ...], timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = str(client.get_job_status(sid)).split(".")[-1]
        if st in want:
            return st
        time.sleep(0.3)
    raise RuntimeError(f"{sid} not {want} after {timeout:.0f} s: {client.get_job_info(sid)}")


def high_round(c: FakeGpuCluster, client: Any, k: int) -> dict[str, Any]:
    """Submit round ``k``'s high-priority job and wait for it to end: times of its submit, admission and start."""
    t0, t1, sid = submit_cli(c, *HIGH, f"trainer.total_epochs={k + 1}")
    adm = wait_admitted(client, sid, timeout=300)
    run = running_from(client, sid)
    st = wait_status(client, sid, ("SUCCEEDED", "FAILED", "STOPPED"))
    if st != "SUCCEEDED":
        raise RuntimeError(f"the high-priority job {sid} {st}: {client.get_job_logs(sid)[-1500:]}")
    return {"id": sid, "t0": t0, "returned": t1, "admitted": adm, "running": run}


# --------------------------------------------------------------------------- modes
def spread(n: int, span: float, rng: random.Random) -> list[float]:
    """``n`` pauses evenly spread over ``[0, span)`` from a random offset, in random order: the
    submits land at evenly spread points of the cycle they sample (n random draws cluster, n being small)."""
    u = rng.random()
    xs = [span * (k + u) / n for k in range(n)]
    rng.shuffle(xs)
    return xs


def fill_points(n: int, steps: int, save_freq: int, preemptible: bool) -> list[list[str]]:
    """``n`` 1-GPU sweep points of ``steps`` steps of STEP_S, a checkpoint every ``save_freq`` steps."""
    extra = ["rayjobs.preemptible=true"] if preemptible else []
    return [[*ONE, f"+fake.steps={steps}", f"+fake.step_s={STEP_S:g}", f"trainer.save_freq={save_freq}", *extra,
             f"trainer.total_epochs={i + 1}"] for i in range(n)]


def stop_all(c: FakeGpuCluster, ids: list[str]) -> None:
    """``rayjobs stop`` the fill jobs (running: stopped; waiting: never start), and wait for it."""
    r = subprocess.run([sys.executable, "-m", "rayjobs.cli", "stop", *ids, "--address", c.address, "--wait", "120"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        view = subprocess.run([sys.executable, "-m", "rayjobs.cli", "list", "--address", c.address], capture_output=True,
                              text=True, timeout=120)
        states = {i: (record(c, i).get("state"), record(c, i).get("status")) for i in ids}
        raise RuntimeError(f"rayjobs stop failed ({r.returncode}): {r.stderr[-1500:]}\n{view.stdout}\n{states}")


def preempt_mode(c: FakeGpuCluster, save_freq: int, rounds: int, rng: random.Random) -> dict[str, Any]:
    """Rounds of a high-priority job on a cluster full of preemptible jobs (checkpoint every
    ``save_freq`` x STEP_S): each round's times, and what each preemption cost the victims."""
    client, interval = c.client(), save_freq * STEP_S
    cps = Watcher(c.root / "ray0" / "session_latest" / "logs")
    fill = submit_points(c, fill_points(GPUS, 100000, save_freq, True))
    for sid in fill:
        cps.watch(sid, meta(record(c, sid))["checkpoint_dir"])
    out: list[dict[str, Any]] = []
    pauses = spread(rounds, interval, rng)  # land all over the victims' checkpoint interval
    try:
        for k in range(rounds):
            wait_training(c, fill, GPUS)
            time.sleep(pauses[k])
            out.append(high_round(c, client, k))
        wait_training(c, fill, GPUS)  # the last victim resumed too
        events = queue_events(c)
        pre = victims(c, fill, events, out, cps)
        for r in out:
            r["queued"] = event_at(events, "queued", r["id"])
            r["preempted"] = any(w == "preempting" and d.endswith(f" for {r['id']}") for _, w, d in events)
    finally:
        cps.close()
    stop_all(c, fill)
    return {"interval": interval, "save_freq": save_freq, "rounds": out, "preemptions": pre}


def victims(c: FakeGpuCluster, fill: list[str], events: list, rounds: list[dict[str, Any]],
            cps: Watcher) -> list[dict[str, Any]]:
    """Per preemption: which round, the victim, when it was asked, its save, the steps redone by the
    queue's record and by its metrics files, and whether the next attempt resumed right after it."""
    out = []
    highs = {r["id"]: k for k, r in enumerate(rounds)}
    client = c.client()
    for sid in fill:
        rec = record(c, sid)
        log = client.get_job_logs(sid)  # one log across its attempts
        exits = [parse_stamp(x) for x in FINISHED.findall(log)]  # each attempt's trainer exit
        starts = [parse_stamp(x) for x in RUNNING.findall(log)]  # each attempt's runner start
        runs = attempts(meta(rec)["run_dir"])
        steps_seen = [s for a in runs.values() for s in a]
        infos = [h["preempted"] for h in rec.get("history") or [] if "preempted" in h]
        for n, info in enumerate(infos, start=1):
            mine, nxt = runs.get(n, []), runs.get(n + 1, [])
            resumed_from = nxt[0] - 1 if nxt else None
            asked = event_at(events, "preempting", f"{sid} for {info['by']}")
            save = cps.first_after(sid, asked) if asked else None
            out.append({"round": highs.get(info["by"]), "victim": sid, "by": info["by"], "asked": asked,
                        "save": save, "fired": cps.fired_after(sid, asked) if asked else None, "exit": next((x for x in exits if asked and x > asked), None),
                        "back": next((x for x in starts if asked and x > asked), None), "requeued": event_at(events, "preempted", f"{sid} by {info['by']}"),
                        "ckpt": info["checkpoint_step"], "redo_record": info["redo"],
                        "redo_files": len([s for s in mine if resumed_from is not None and s > resumed_from]),
                        "resumed_from": resumed_from,
                        "resumed_ok": bool(nxt) and resumed_from == info["checkpoint_step"]
                        and nxt == list(range(nxt[0], nxt[0] + len(nxt)))})
        out_steps_ok = sorted(set(steps_seen)) == list(range(1, max(steps_seen, default=0) + 1))
        for p in out:
            if p["victim"] == sid:
                p["no_step_lost"] = out_steps_ok
    return sorted(out, key=lambda p: p["round"] if p["round"] is not None else -1)


def queue_mode(c: FakeGpuCluster, rounds: int, job_s: float, rng: random.Random) -> dict[str, Any]:
    """The same rounds on a cluster full of jobs of ``job_s`` s that are NOT preemptible, with a
    backlog behind them (so it stays full): the queue starts the high job first when a GPU frees.
    Each high job is sent at a random moment of the running jobs' lives."""
    client = c.client()
    # a backlog that lasts: each round takes at most ~2 job lengths (the pause, the wait) plus the high job
    fill = submit_points(c, fill_points(GPUS * (3 * rounds + 1), int(job_s / STEP_S), 5, False))
    out = []
    pauses = spread(rounds, job_s, rng)  # land all over the running jobs' lives
    for k in range(rounds):
        wait_training(c, fill, GPUS, timeout=job_s + 180)
        time.sleep(pauses[k])
        out.append(high_round(c, client, 100 + k))
    events = queue_events(c)
    ends = sorted(parse_stamp(x) for f in fill for x in FINISHED.findall(logs_of(client, f)))  # trainers' exits
    for r in out:
        r["queued"] = event_at(events, "queued", r["id"])
        r["freed"] = next((e for e in ends if e > (r["queued"] or r["t0"])), None)  # the first GPU it could get
    stop_all(c, fill)
    return {"rounds": out}


def logs_of(client: Any, sid: str) -> str:
    """A job's log; "" for one Ray never had (still waiting in the queue)."""
    try:
        return client.get_job_logs(sid)
    except RuntimeError:
        return ""


def ray_full(client: Any, fill: list[str], more: Callable[[], str], timeout: float) -> None:
    """Wait until GPUS of Ray's fill jobs run, replacing each that ended (``fill`` is updated)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = {f: str(client.get_job_status(f)).split(".")[-1] for f in fill}
        fill[:] = [f for f in fill if st[f] not in ("SUCCEEDED", "FAILED", "STOPPED")]
        fill += [more() for _ in range(GPUS - len(fill))]
        if sum(st.get(f) == "RUNNING" for f in fill) == GPUS:
            return
        time.sleep(0.3)
    raise RuntimeError(f"Ray's fill jobs did not run within {timeout:.0f} s")


RAY_START = re.compile(r"^start ([\d.]+)$", re.M)


def ray_mode(c: FakeGpuCluster, rounds: int, job_s: float, rng: random.Random) -> dict[str, Any]:
    """Ray's own mechanism: the cluster full of Ray jobs holding ``entrypoint_num_gpus=1`` for
    ``job_s`` s; the high job sent with ``ray job submit --entrypoint-num-gpus=1`` stays PENDING
    until one ends (no priority, no preemption); its entrypoint prints its own start."""
    client = c.client()
    sleep = f"python3 -c 'import time; time.sleep({job_s:g})'"
    fill = [client.submit_job(entrypoint=sleep, entrypoint_num_gpus=1) for _ in range(GPUS)]
    every = list(fill)
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    out = []
    pauses = spread(rounds, job_s, rng)

    def more() -> str:
        every.append(client.submit_job(entrypoint=sleep, entrypoint_num_gpus=1))
        return every[-1]

    try:
        for k in range(rounds):
            ray_full(client, fill, more, job_s + 120)
            time.sleep(pauses[k])
            ray_full(client, fill, more, job_s + 120)  # one that ended meanwhile replaced: full when it is sent
            sid = f"high-{k}-{os.getpid()}"
            t0 = time.time()
            benchlib.timed([ray_cli, "job", "submit", "--address", c.address, "--no-wait", "--submission-id", sid,
                            "--entrypoint-num-gpus=1", "--", "python3", "-c",
                            "import time; print('start', time.time(), flush=True); time.sleep(1)"])
            t1 = time.time()
            st = wait_status(client, sid, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=job_s + 180)
            if st != "SUCCEEDED":
                raise RuntimeError(f"Ray's high job {st}: {client.get_job_info(sid).message} {client.get_job_logs(sid)[-1500:]}")
            out.append({"id": sid, "t0": t0, "returned": t1,
                        "running": float(RAY_START.search(client.get_job_logs(sid)).group(1))})
    finally:
        for f in fill:
            client.stop_job(f)
    ends = sorted(client.get_job_info(f).end_time / 1000.0 for f in every if client.get_job_info(f).end_time)
    for r in out:
        r["freed"] = next((e for e in ends if e > r["t0"]), None)
    return {"rounds": out}


# --------------------------------------------------------------------------- summary
def stats(xs: list[float]) -> str:
    """``| median | min | max | all |`` cells."""
    if not xs:
        return "| - | - | - | - |"
    return (f"| {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} | "
            f"{', '.join(f'{x:.2f}' for x in xs)} |")


def to_start(rounds: list[dict[str, Any]], since: str = "t0") -> list[float]:
    """Seconds from ``since`` to the high job's runner running, per round (with preemption: the
    rounds where it preempted a job; one that found a GPU free is counted apart)."""
    return [r["running"] - r[since] for r in rounds if r.get(since) is not None and r.get("preempted", True)]


def parts(res: dict[str, Any]) -> dict[str, list[float]]:
    """A preemption mode's rounds split where the time goes (each a list over the rounds)."""
    by_round = {p["round"]: p for p in res["preemptions"]}
    out: dict[str, list[float]] = {k: [] for k in ("submit", "decide", "save", "fire", "admit", "start", "requeue")}
    for k, r in enumerate(res["rounds"]):
        p = by_round.get(k)
        if not p or not p["asked"] or not p["fired"]:
            continue
        saved = p["save"][0] if p["save"] and p["save"][0] <= p["fired"] + 0.1 else p["asked"]  # none: stopped at once
        out["submit"].append(r["queued"] - r["t0"])
        out["decide"].append(p["asked"] - r["queued"])
        out["save"].append(saved - p["asked"])
        out["fire"].append(p["fired"] - saved)
        out["admit"].append(r["admitted"] - p["fired"])
        out["start"].append(r["running"] - r["admitted"])
        if p["requeued"] and p["exit"]:
            out["requeue"].append(p["requeued"] - p["exit"])
    return out


def verdict(xs: list[float], bound: float) -> str:
    worst = max(xs, default=float("nan"))
    return f"**{'met' if worst <= bound else 'missed'}** (worst {worst:.2f} s, bound {bound:g} s)"


def time_table(got: dict[str, Any], a: argparse.Namespace) -> tuple[str, list[str]]:
    """The time-to-start table and the verdict lines."""
    rows, verdicts = [], []
    for k in a.intervals:
        res = got[f"preempt{k}"]
        iv = res["interval"]
        rows.append(f"| rayjobs, preemptible jobs, checkpoint every {iv:g} s: submit command start -> running "
                    + stats(to_start(res["rounds"])))
        rows.append("| the same, from the job in the queue (the preemption's own part) "
                    + stats(to_start(res["rounds"], "queued")))
        verdicts.append(f"checkpoint every {iv:g} s: from the submit command's start {verdict(to_start(res['rounds']), iv + 5)}; "
                        f"from the job in the queue {verdict(to_start(res['rounds'], 'queued'), iv + 5)}")
    free = sum(not r.get("preempted", True) for k in a.intervals for r in got[f"preempt{k}"]["rounds"])
    verdicts.append(f"rounds whose high job found a GPU free and preempted nothing (left out above): {free}")
    q, r = got["queue"]["rounds"], got["ray"]["rounds"]
    rows.append(f"| rayjobs, jobs of {a.job_s:g} s not preemptible (first in line when a GPU frees): submit command "
                "start -> running " + stats(to_start(q)))
    rows.append("| of which: until one of them ended (its runner's exit line, a moment after its GPU is free) " + stats(waited(q)))
    rows.append(f"| Ray PENDING (`ray job submit --entrypoint-num-gpus=1`), jobs of {a.job_s:g} s: command start -> "
                "entrypoint running " + stats(to_start(r)))
    rows.append("| of which: until one of them ended (Ray's end time of the job) " + stats(waited(r)))
    head = "| mechanism | median s | min s | max s | all (s) |\n|---|---:|---:|---:|---|\n"
    return head + "\n".join(rows), verdicts


def waited(rounds: list[dict[str, Any]]) -> list[float]:
    """Submit command start -> the first running job's end the high job could take (baselines)."""
    return [min(r["freed"], r["running"]) - r["t0"] for r in rounds if r.get("freed")]


def parts_table(got: dict[str, Any], a: argparse.Namespace) -> str:
    names = [("submit", "submit command start -> the queue has the job (compose, checks, upload, enqueue)"),
             ("decide", "-> victim asked to stop at its next checkpoint (the queue's decision)"),
             ("save", "-> the victim's next checkpoint saved (0 if nothing was trained since the last: stops at once)"),
             ("fire", "-> the victim's runner fires the stop (its line in the job's log; the watch looks every 0.2 s once asked)"),
             ("admit", "-> high job admitted (Ray's stop: SIGTERM, the trainer's drivers gone; the queue reaps, admits)"),
             ("start", "-> high job's runner running (pre-started while it waited: the go file)"),
             ("requeue", "(victim) trainer's exit -> back in the queue (Ray's STOPPED, the reap)")]
    split = {k: parts(got[f"preempt{k}"]) for k in a.intervals}
    head = "| where the time goes (median s) | " + " | ".join(f"every {got[f'preempt{k}']['interval']:g} s" for k in a.intervals)
    lines = [head + " |", "|---|" + "---:|" * len(a.intervals)]
    for key, what in names:
        cells = [f"{statistics.median(split[k][key]):.2f}" if split[k][key] else "-" for k in a.intervals]
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def redo_table(got: dict[str, Any], a: argparse.Namespace) -> str:
    lines = ["| checkpoint every | preemptions | steps redone (the queue's record) | steps redone (metrics files) "
             "| resumed from the checkpoint it stopped at | no step lost | victim: trainer exit -> running again (median s) |",
             "|---|---:|---|---|---:|---:|---:|"]
    for k in a.intervals:
        res = got[f"preempt{k}"]
        pre = res["preemptions"]
        back = [p["back"] - p["exit"] for p in pre if p.get("back") and p.get("exit")]
        lines.append(f"| {res['interval']:g} s ({k} steps of {STEP_S:g} s) | {len(pre)} "
                     f"| {', '.join(str(p['redo_record']) for p in pre)} | {', '.join(str(p['redo_files']) for p in pre)} "
                     f"| {sum(p['resumed_ok'] for p in pre)}/{len(pre)} | {sum(p['no_step_lost'] for p in pre)}/{len(pre)} "
                     f"| {statistics.median(back) if back else float('nan'):.1f} |")
    return "\n".join(lines)


def write_doc(a: argparse.Namespace, got: dict[str, Any]) -> None:
    """docs/benchmarks.md's section of this benchmark (printed too)."""
    table, verdicts = time_table(got, a)
    q, r = (statistics.median(to_start(got[m]["rounds"])) for m in ("queue", "ray"))
    ratios = "; ".join(f"checkpoint every {got[f'preempt{k}']['interval']:g} s: "
                       f"{q / statistics.median(to_start(got[f'preempt{k}']['rounds'])):.1f}x (rayjobs' queue), "
                       f"{r / statistics.median(to_start(got[f'preempt{k}']['rounds'])):.1f}x (Ray PENDING)"
                       for k in a.intervals)
    md = f"""## Preemption (issue 18) — `scripts/bench_preempt.py`

`sudo .venv/bin/python scripts/bench_preempt.py --rounds {a.rounds} --ray-rounds {a.ray_rounds} --intervals {','.join(map(str, a.intervals))} --job-s {a.job_s:g}`
({got['_took'] / 60:.1f} min). One real Ray 2.60 cluster, 1 node declaring {GPUS} fake GPUs, in a private network
namespace; the verl stand-in holding a STRICT_PACK placement group of {{GPU: 1, CPU: 3}} and saving a
checkpoint every `trainer.save_freq` steps of {STEP_S:g} s. {os.cpu_count()} cores shared with other work: 1-min load
average {got['_load0']:.1f} at the start (after waiting {got['_waited']:.0f} s for it to drop to {a.max_load:g} or less),
{got['_load1']:.1f} at the end{'; ' + a.note if a.note else ''}.

Each round: the cluster full ({GPUS} jobs of 1 GPU training), a pause (the rounds' pauses spread
evenly, from a random offset, over one checkpoint interval with preemption and over one job's length
without, so the submits land all over the cycle a submit at a random moment would hit), then a 1-GPU job of `rayjobs.priority=10` (2 steps of 0.5 s) sent with `python -m rayjobs.submit`,
timed from the command's start to its runner's start (the "running from" time of its admission line;
the trainer starts right after). The next round waits for it to end and the cluster to be full again.
The modes, one after the other on the same cluster:
- **preemption**: a preemptible sweep (`rayjobs.preemptible=true`, default `preempt_wait_s`) of
  {GPUS} long points; the queue stops the youngest at its next checkpoint, the high job takes its
  GPU, the victim resumes from that checkpoint when the high job is done (the same point is the
  youngest again next round).
- **no preemption, rayjobs' queue**: a sweep of jobs of {a.job_s:g} s, not preemptible, with a backlog
  behind them; the high job is first in line and starts when the first of them ends.
- **Ray PENDING**: Ray jobs holding `entrypoint_num_gpus=1` for {a.job_s:g} s each; the high job sent with
  `ray job submit --no-wait --entrypoint-num-gpus=1` waits PENDING until one ends (Ray has no
  priorities and no preemption); its entrypoint prints its own start.

{table}

Target: at most one checkpoint interval plus 5 s.
{chr(10).join('- ' + v for v in verdicts)}

Without preemption the high job waits for the remaining time of the shortest running job: here
jobs of {a.job_s:g} s, a median of **{q:.1f} s** (rayjobs' queue) and **{r:.1f} s** (Ray PENDING) from the
command's start. Ratio of the medians, without / with preemption: {ratios}. Without preemption the
wait grows with the jobs' length (a high job arriving at a random moment among {GPUS} jobs of
length L waits about L / {GPUS + 1}; real RL jobs run for hours); with it, it is bounded by the
checkpoint interval whatever the jobs' length.

{parts_table(got, a)}

Steps redone per preemption (the queue's `preempted.redo`, `rayjobs status --json`'s `redo_steps`,
checked against the victims' per-attempt metrics files: the steps of attempt k past the checkpoint
attempt k+1 resumed from):

{redo_table(got, a)}
"""
    benchlib.write_section("preempt", md + explain(got, a))
    print(md + explain(got, a))


def explain(got: dict[str, Any], a: argparse.Namespace) -> str:
    """What the numbers mean (from this run's figures)."""
    sp = {k: parts(got[f"preempt{k}"]) for k in a.intervals}

    def med(key: str) -> str:
        return " / ".join(f"{statistics.median(sp[k][key]):.2f}" if sp[k][key] else "-" for k in a.intervals)

    pre = [p for k in a.intervals for p in got[f"preempt{k}"]["preemptions"]]
    at_once = sum(1 for k in a.intervals for x in sp[k]["save"] if x < 0.01)
    redo = [p["redo_record"] for p in pre]
    back = [p["back"] - p["exit"] for p in pre if p.get("back") and p.get("exit")]
    cold = [r["running"] - r["admitted"] for r in got["queue"]["rounds"]]
    ivs = " / ".join(f"{got[f'preempt{k}']['interval']:g} s" for k in a.intervals)
    return f"""
Where the time goes (figures: medians for {ivs}):
- **Waiting for the victim's next save** ({med('save')} s) is the only part that grows with the
  interval: a submit at a random moment waits half an interval on average, one at most. A victim
  that trained nothing since its last save stops at once ({at_once} of {len(pre)} rounds here).
- **The rest is the bound's 5 s.** The queue decides at once ({med('decide')} s). The victim's runner reads
  the request (a file on the storage root) within 1 s and then looks for the save every 0.2 s: its
  "stopping at checkpoint" line shows in the job's log {med('fire')} s after the save. The stop goes through Ray's Jobs API (SIGTERM to the
  trainer's process group: the checkpoint is on disk, nothing is lost); the queue admits the high
  job as soon as the trainer's Ray drivers are gone and what it left on the node is reaped
  ({med('admit')} s), without waiting for Ray to call the victim STOPPED (that comes {med('requeue')} s after the
  trainer's exit line). The high job was pre-started while it waited (the queue's standby), so its
  runner ran {med('start')} s after admission; started cold it pays Ray's job start (the no-preemption
  baseline, whose pre-started job is the backlog's next: {statistics.median(cold):.2f} s median from admission to running).
- **The submit command** ({med('submit')} s: Hydra composition, checks, upload, the enqueue job) is
  in the rows "from the submit command's start", not in those "from the job in the queue"; every
  submit pays it (the submit section above).
- **Steps redone** ({', '.join(map(str, redo))}): only what the trainer logs between the save and
  the SIGTERM. With steps of {STEP_S:g} s that is a step whenever the stop through Ray's Jobs API takes
  longer than one (on this machine it competes for the 2 cores with the high job's submit and
  pre-start; earlier runs of this script here had 1-2 in some rounds); with verl's steps of
  minutes, none. Each victim resumed from the checkpoint it stopped at
  as a new attempt under the same id and logged every step once past it (the table's last columns);
  the victims were stopped with `rayjobs stop` at the end of each mode (they were made to run on).
- **The victim's resume waits about 10 s more**: the queue deletes its old run from Ray's job table
  before it submits the same id again, and not earlier than 10 s after that run ended (Ray's monitor
  of the old run pings it every second; deleted sooner, Ray writes the old run's end onto the new
  one). That delays the victim ({statistics.median(back) if back else float('nan'):.1f} s median from its trainer's exit to running again),
  never the high job; here the high job (a few seconds) ended first, so its GPU idled for the rest;
  behind a high job of minutes or hours it does not.
- **Without preemption** the high job, first in line, waits for the shortest running job to end
  and then for its own start. Ray's own PENDING job waits the same way, but without priorities:
  behind a backlog of pending jobs it would also wait its turn (there was none here).
"""




# --------------------------------------------------------------------------- run
def wait_quiet(max_load: float, max_wait_s: float, every: float = 60.0) -> tuple[float, float]:
    """Wait (bounded) for the 1-min load average to drop to ``max_load``: (load, seconds waited)."""
    t = time.monotonic()
    while os.getloadavg()[0] > max_load and time.monotonic() - t + every <= max_wait_s:
        print(f"load average {os.getloadavg()[0]:.1f} > {max_load:g}: waiting {every:g} s", file=sys.stderr)
        time.sleep(every)
    return os.getloadavg()[0], time.monotonic() - t


def project(root: Path) -> Path:
    """A user's project dir (./conf/exp/fake_ppo.yaml + workloads/fake_verl.py), made the current dir."""
    work = root / "project"
    shutil.copytree(benchlib.REPO / "tests" / "workloads", work)
    (work / "workloads").mkdir(exist_ok=True)
    shutil.copy(benchlib.REPO / "tests" / "workloads" / "fake_verl.py", work / "workloads" / "fake_verl.py")
    os.chdir(work)
    return work


def run_all(a: argparse.Namespace, root: Path, got: dict[str, Any]) -> dict[str, Any]:
    """Every mode not in ``got`` yet, on one cluster; the raw results (each part saved to --out as it ends)."""
    import ray

    rng = random.Random(a.seed)
    c = FakeGpuCluster(root / "cluster", nodes=((GPUS, 3 * GPUS + 2),)).start()
    try:
        ray.init(address=c.gcs, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        for part in [p for p in a.parts if p not in got]:
            t = time.monotonic()
            if part.startswith("preempt"):
                got[part] = preempt_mode(c, int(part[len("preempt"):]), a.rounds, rng)
            elif part == "queue":
                got[part] = queue_mode(c, a.rounds, a.job_s, rng)
            elif part == "ray":
                got[part] = ray_mode(c, a.ray_rounds, a.job_s, rng)
            got[part]["took_s"] = time.monotonic() - t
            print(f"{part}: {time.monotonic() - t:.0f} s", file=sys.stderr)
            Path(a.out).write_text(json.dumps(got, indent=1, default=str))  # a later part's failure keeps it
    finally:
        ray.shutdown()
        c.stop()
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5, help="high-priority jobs per mode")
    ap.add_argument("--ray-rounds", type=int, default=3, help="rounds of Ray's own PENDING baseline")
    ap.add_argument("--intervals", default="5,15", help="checkpoint intervals to try, in steps of 1 s (save_freq)")
    ap.add_argument("--job-s", type=float, default=24.0, help="length of the jobs in the baselines without preemption")
    ap.add_argument("--only", action="append", help="parts: preempt<K>, queue, ray (default: all)")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--max-load", type=float, default=2.5, help="wait for the 1-min load to drop to this first")
    ap.add_argument("--max-wait-s", type=float, default=1200.0)
    ap.add_argument("--out", default="/tmp/rayjobs-bench-preempt.json", help="the raw results, saved after each part")
    ap.add_argument("--resume", action="store_true", help="keep the parts already in --out, run the others")
    ap.add_argument("--no-doc", action="store_true", help="print the results, do not write docs/benchmarks.md")
    ap.add_argument("--note", default="", help="said after the load line (what else shared the machine)")
    ap.add_argument("--from-json", help="write the doc from an earlier run's --out file (no run)")
    a = ap.parse_args()
    a.intervals = [int(x) for x in a.intervals.split(",")]
    a.parts = a.only or [f"preempt{k}" for k in a.intervals] + ["queue", "ray"]
    if a.from_json:
        write_doc(a, json.loads(Path(a.from_json).read_text()))
        return
    got = json.loads(Path(a.out).read_text()) if a.resume and Path(a.out).exists() else {}
    load0, waited = wait_quiet(a.max_load, a.max_wait_s)
    root = benchlib.isolated_home("rjpre")
    project(root)
    t = time.monotonic()
    with benchlib.private_netns():
        try:
            run_all(a, root, got)
        finally:
            from rayjobs.preflight import helper

            helper.stop_helper()
    if "_load0" not in got:  # a resumed run keeps the figures of the run that measured the first parts
        got.update(_load0=load0, _waited=waited, _took=0.0)
    got.update(_load1=os.getloadavg()[0], _took=got["_took"] + time.monotonic() - t)
    Path(a.out).write_text(json.dumps(got, indent=1, default=str))
    shutil.rmtree(root, ignore_errors=True)
    if a.no_doc or set(a.parts) != {f"preempt{k}" for k in a.intervals} | {"queue", "ray"}:
        print(json.dumps(got, indent=1, default=str))
        return
    write_doc(a, got)


if __name__ == "__main__":
    main()

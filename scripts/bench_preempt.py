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
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc, jobs, session, timing  # noqa: E402
from bench.jobs import FINISHED, RUNNING, stamps  # noqa: E402

from clusterops import wait_until  # noqa: E402

from preempt_report import GPUS, STEP_S, markdown  # noqa: E402
ONE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1")
HIGH = (*ONE, "+fake.steps=2", "+fake.step_s=0.5", "rayjobs.priority=10")  #: the high-priority job: short
RAY_START = re.compile(r"^start ([\d.]+)$", re.M)
Event = tuple[float, str, str]  #: the queue actor's (time, what, detail)


# --------------------------------------------------------------------------- observation
class Watcher:
    """Every 50 ms, for each fill job: its checkpoint tracker (verl's ``latest_checkpointed_iteration.txt``:
    when each save landed) and the new lines of its driver log on the head's disk (when its runner's
    watch fired the stop): to split a high job's wait into "until the next save" and the rest."""

    def __init__(self, logs_dir: Path) -> None:
        self.logs_dir = logs_dir
        self.jobs: dict[str, str] = {}  #: job -> its checkpoint dir
        self.saves: list[tuple[float, str, int]] = []  #: (time seen, job, step)
        self.fired: list[tuple[float, str]] = []  #: (time seen, job): "[rayjobs] stopping at checkpoint: ..."
        self._last: dict[str, Optional[int]] = {}
        self._pos: dict[str, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for sid, ckpt in list(self.jobs.items()):
                step = jobs.saved_step(ckpt)
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


def record(c: Any, sid: str) -> dict[str, Any]:
    """The queue's record of a job (its durable store on the cluster's storage root), as JSON."""
    from rayjobs.oncluster.store import QueueStore

    rec = QueueStore(c.queue_store).get(sid)
    return rec.to_json() if rec else {}


def meta(rec: dict[str, Any]) -> dict[str, Any]:
    return (rec.get("spec") or {}).get("metadata") or {}


def training(c: Any, sid: str) -> bool:
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


def wait_training(c: Any, ids: list[str], n: int, timeout: float = 180) -> list[str]:
    """Wait until ``n`` of ``ids`` are training (the cluster full again); those ids."""
    return wait_until(lambda: (busy := [i for i in ids if training(c, i)]) and len(busy) >= n and busy,
                      timeout, "the cluster to fill again", every=0.3)


def event_at(events: list[Event], what: str, detail: str) -> Optional[float]:
    return next((t for t, w, d in events if w == what and d == detail), None)


# --------------------------------------------------------------------------- one high-priority job
def high_round(c: Any, k: int) -> dict[str, Any]:
    """Submit round ``k``'s high-priority job and wait for it to end: times of its submit, admission and start."""
    client = c.client()
    t0, t1, ids = jobs.submit_cmd(c, "+exp=fake_ppo", "+fake.hold_gpus=true", *HIGH, f"trainer.total_epochs={k + 1}")
    sid = ids[-1]
    adm = jobs.wait_admitted(client, sid, timeout=300)
    st = jobs.wait_ray(client, [sid], timeout=180, every=0.3)[sid]
    if st != "SUCCEEDED":
        raise RuntimeError(f"the high-priority job {sid} {st}: {client.get_job_logs(sid)[-1500:]}")
    return {"id": sid, "t0": t0, "returned": t1, "admitted": adm, "running": stamps(RUNNING, client.get_job_logs(sid))[0]}


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


def stop_all(c: Any, ids: list[str]) -> None:
    """``rayjobs stop`` the fill jobs (running: stopped; waiting: never start), and wait for it."""
    r = subprocess.run([sys.executable, "-m", "rayjobs.cli", "stop", *ids, "--address", c.address, "--wait", "120"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        states = {i: (record(c, i).get("state"), record(c, i).get("status")) for i in ids}
        raise RuntimeError(f"rayjobs stop failed ({r.returncode}): {r.stderr[-1500:]}\n{states}")


def preempt_mode(c: Any, save_freq: int, rounds: int, rng: random.Random) -> dict[str, Any]:
    """Rounds of a high-priority job on a cluster full of preemptible jobs (checkpoint every
    ``save_freq`` x STEP_S): each round's times, and what each preemption cost the victims."""
    cps = Watcher(c.root / "ray0" / "session_latest" / "logs")
    fill = jobs.send_points(c, fill_points(GPUS, 100000, save_freq, True))[0]
    for sid in fill:
        cps.jobs[sid] = meta(record(c, sid))["checkpoint_dir"]
    out: list[dict[str, Any]] = []
    pauses = spread(rounds, save_freq * STEP_S, rng)  # land all over the victims' checkpoint interval
    try:
        for k in range(rounds):
            wait_training(c, fill, GPUS)
            time.sleep(pauses[k])
            out.append(high_round(c, k))
        wait_training(c, fill, GPUS)  # the last victim resumed too
        events = jobs.queue_events()
        pre = victims(c, fill, events, out, cps)
        for r in out:
            r["queued"] = event_at(events, "queued", r["id"])
            r["preempted"] = any(w == "preempting" and d.endswith(f" for {r['id']}") for _, w, d in events)
    finally:
        cps.close()
    stop_all(c, fill)
    return {"interval": save_freq * STEP_S, "save_freq": save_freq, "rounds": out, "preemptions": pre}


def victims(c: Any, fill: list[str], events: list[Event], rounds: list[dict[str, Any]], cps: Watcher) -> list[dict[str, Any]]:
    """Per preemption: which round, the victim, when it was asked, its save, the steps redone by the
    queue's record and by its metrics files, and whether the next attempt resumed right after it."""
    out = []
    highs = {r["id"]: k for k, r in enumerate(rounds)}
    for sid in fill:
        rec, log = record(c, sid), c.client().get_job_logs(sid)  # one log across its attempts
        exits, starts = stamps(FINISHED, log), stamps(RUNNING, log)  # each attempt's trainer exit, runner start
        runs = jobs.attempts(meta(rec)["run_dir"])
        steps_seen = sorted({s for a in runs.values() for s in a})
        for n, info in enumerate((h["preempted"] for h in rec.get("history") or [] if "preempted" in h), start=1):
            mine, nxt = runs.get(n, []), runs.get(n + 1, [])
            resumed_from = nxt[0] - 1 if nxt else None
            asked = event_at(events, "preempting", f"{sid} for {info['by']}")
            out.append({"round": highs.get(info["by"]), "victim": sid, "by": info["by"], "asked": asked,
                        "save": cps.first_after(sid, asked) if asked else None, "fired": cps.fired_after(sid, asked) if asked else None,
                        "exit": next((x for x in exits if asked and x > asked), None),
                        "back": next((x for x in starts if asked and x > asked), None),
                        "requeued": event_at(events, "preempted", f"{sid} by {info['by']}"),
                        "ckpt": info["checkpoint_step"], "redo_record": info["redo"],
                        "redo_files": len([s for s in mine if resumed_from is not None and s > resumed_from]),
                        "resumed_from": resumed_from, "no_step_lost": steps_seen == list(range(1, len(steps_seen) + 1)),
                        "resumed_ok": bool(nxt) and resumed_from == info["checkpoint_step"]
                        and nxt == list(range(nxt[0], nxt[0] + len(nxt)))})
    return sorted(out, key=lambda p: p["round"] if p["round"] is not None else -1)


def queue_mode(c: Any, rounds: int, job_s: float, rng: random.Random) -> dict[str, Any]:
    """The same rounds on a cluster full of jobs of ``job_s`` s that are NOT preemptible, with a
    backlog behind them (so it stays full): the queue starts the high job first when a GPU frees.
    Each high job is sent at a random moment of the running jobs' lives."""
    # a backlog that lasts: each round takes at most ~2 job lengths (the pause, the wait) plus the high job
    fill = jobs.send_points(c, fill_points(GPUS * (3 * rounds + 1), int(job_s / STEP_S), 5, False))[0]
    out = []
    pauses = spread(rounds, job_s, rng)  # land all over the running jobs' lives
    for k in range(rounds):
        wait_training(c, fill, GPUS, timeout=job_s + 180)
        time.sleep(pauses[k])
        out.append(high_round(c, 100 + k))
    events = jobs.queue_events()
    ends = sorted(x for f in fill for x in stamps(FINISHED, jobs.log_of(c.client(), f)))  # trainers' exits
    for r in out:
        r["queued"] = event_at(events, "queued", r["id"])
        r["freed"] = next((e for e in ends if e > (r["queued"] or r["t0"])), None)  # the first GPU it could get
    stop_all(c, fill)
    return {"rounds": out}


def ray_full(client: Any, fill: list[str], more: Callable[[], str], timeout: float) -> None:
    """Wait until GPUS of Ray's fill jobs run, replacing each that ended (``fill`` is updated)."""
    def full() -> bool:
        st = {f: jobs.ray_status(client, f) for f in fill}
        fill[:] = [f for f in fill if st[f] not in jobs.ENDED]
        fill.extend(more() for _ in range(GPUS - len(fill)))
        return sum(st.get(f) == "RUNNING" for f in fill) == GPUS
    wait_until(full, timeout, "Ray's fill jobs to run", every=0.3)


def ray_mode(c: Any, rounds: int, job_s: float, rng: random.Random) -> dict[str, Any]:
    """What a user has instead: the cluster full of Ray jobs holding ``entrypoint_num_gpus=1`` for ``job_s``
    s; the high job sent with ``ray job submit --entrypoint-num-gpus=1`` stays PENDING until one ends
    (no priority, no preemption); its entrypoint prints its own start."""
    client = c.client()
    sleep = f"python3 -c 'import time; time.sleep({job_s:g})'"
    every: list[str] = []

    def more() -> str:
        every.append(client.submit_job(entrypoint=sleep, entrypoint_num_gpus=1))
        return every[-1]
    fill = [more() for _ in range(GPUS)]
    ray_cli, out = os.path.join(os.path.dirname(sys.executable), "ray"), []
    try:
        for k, pause in enumerate(spread(rounds, job_s, rng)):
            ray_full(client, fill, more, job_s + 120)
            time.sleep(pause)
            ray_full(client, fill, more, job_s + 120)  # one that ended meanwhile replaced: full when it is sent
            sid, t0 = f"high-{k}-{os.getpid()}", time.time()
            timing.timed([ray_cli, "job", "submit", "--address", c.address, "--no-wait", "--submission-id", sid,
                          "--entrypoint-num-gpus=1", "--", "python3", "-c",
                          "import time; print('start', time.time(), flush=True); time.sleep(1)"])
            t1 = time.time()
            if (st := jobs.wait_ray(client, [sid], timeout=job_s + 180, every=0.3)[sid]) != "SUCCEEDED":
                raise RuntimeError(f"Ray's high job {st}: {client.get_job_info(sid).message} {client.get_job_logs(sid)[-1500:]}")
            out.append({"id": sid, "t0": t0, "returned": t1, "running": float(RAY_START.search(client.get_job_logs(sid)).group(1))})
    finally:
        for f in fill:
            client.stop_job(f)
    ends = sorted(client.get_job_info(f).end_time / 1000.0 for f in every if client.get_job_info(f).end_time)
    for r in out:
        r["freed"] = next((e for e in ends if e > r["t0"]), None)
    return {"rounds": out}


# --------------------------------------------------------------------------- run
def run_all(a: argparse.Namespace, r: session.Run, got: dict[str, Any]) -> dict[str, Any]:
    """Every mode not in ``got`` yet, on one cluster; the raw results (each part saved to --out as it ends)."""
    import ray

    rng = random.Random(a.seed)
    with r.cluster(((GPUS, 3 * GPUS + 2),)) as c:
        ray.init(address=c.gcs, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        try:
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
    ap.add_argument("--note", default="", help="said after the load line (what else shared the machine)")
    ap.add_argument("--from-json", help="write the doc from an earlier run's --out file (no run)")
    a = doc.parse(ap, {"rounds": 1, "ray_rounds": 1, "intervals": "3", "job_s": 8.0, "max_wait_s": 0.0,
                       "out": "/tmp/rayjobs-bench-preempt-quick.json"})
    a.intervals = [int(x) for x in a.intervals.split(",")]
    a.parts = a.only or [f"preempt{k}" for k in a.intervals] + ["queue", "ray"]
    if a.from_json:
        return doc.publish(a, "preempt", markdown(a, json.loads(Path(a.from_json).read_text())))
    got = json.loads(Path(a.out).read_text()) if a.resume and Path(a.out).exists() else {}
    load0, waited = session.wait_quiet(a.max_load, a.max_wait_s)
    t = time.monotonic()
    with session.run("rjpre") as r:
        try:
            run_all(a, r, got)
        finally:
            from rayjobs.preflight import helper

            helper.stop_helper()
    if "_load0" not in got:  # a resumed run keeps the figures of the run that measured the first parts
        got.update(_load0=load0, _waited=waited, _took=0.0)
    got.update(_load1=os.getloadavg()[0], _took=got["_took"] + time.monotonic() - t)
    Path(a.out).write_text(json.dumps(got, indent=1, default=str))
    if set(a.parts) != {f"preempt{k}" for k in a.intervals} | {"queue", "ray"}:
        print(json.dumps(got, indent=1, default=str))
        return
    doc.publish(a, "preempt", markdown(a, got))


if __name__ == "__main__":
    main()

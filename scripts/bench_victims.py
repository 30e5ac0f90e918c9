"""Benchmark which victims a preemption picks (issue 32): the least work lost vs the old order.

The queue stops preemptible lower-priority jobs so that a waiting high-priority one fits. By default
it picks the set that loses the least work (GPUs x seconds since each one's last checkpoint:
``rayjobs/oncluster/policy.py`` ``cheapest_victims``); the head's ``RAYJOBS_PREEMPT_ORDER=priority``
keeps the old order (lowest priority, then the youngest). This script runs the same workload under
each order, one head after the other (each a fresh ``tests/clusters.py`` FakeGpuCluster: 1 node,
4 fake GPUs, 12 CPUs), inside a private network namespace and an isolated ``$RAYJOBS_HOME``:

* the cluster filled with 4 preemptible 1-GPU jobs of the verl stand-in (``+fake.hold_gpus=true``,
  ``+fake.step_s`` s a step), each saving a checkpoint every K steps (``--intervals``, default
  5, 10, 20, 40), submitted one after the other with the submit command, the shortest interval first:
  the youngest (the old order's first victim) is the one that saves least often;
* then rounds, each after a pause (the same spread-out pauses under both orders, so the submits land
  at different moments of the victims' checkpoint intervals): a job of ``rayjobs.priority=10`` and a
  few short steps (1 GPU; 2 GPUs in round ``--two-gpu-round``) submitted with the submit command;
  the round waits until it SUCCEEDED and every victim is back and training (bounded waits).

Per round, from the queue's job view (``GET /v1/jobs/ID``): the victims (``preempting_for``, their
``preempt_why`` while they are being preempted), what each fill job had trained since its last
checkpoint when the queue chose (its tracker's mtime, sampled every 0.1 s), the steps each victim
redoes (``preempted.redo``, checked against its per-attempt metrics files), the GPU-seconds redone
(redo x step_s x GPUs), and the high job's wait (``queued_at`` -> ``admitted_at``; and from the
submit command's start). Medians over the rounds, per order, and the ratio least-work / priority.

    sudo .venv/bin/python scripts/bench_victims.py [--rounds 5] [--intervals 5,10,20,40] [--step-s 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
import benchlib  # noqa: E402

from clusters import FakeGpuCluster  # noqa: E402  (benchlib puts tests/ on sys.path)

NODES = ((4, 12),)  #: 1 node, 4 fake GPUs, 12 CPUs (each GPU bundle of the stand-in takes 3)
ORDERS = {"priority": {"RAYJOBS_PREEMPT_ORDER": "priority"}, "least-work": {}}  #: head env per order
TRACKER = "latest_checkpointed_iteration.txt"
PHI = 0.6180339887  #: the rounds' pauses: base + frac(i x PHI) x the longest interval (spread out, no pattern)


# --------------------------------------------------------------------------- small helpers
def wait_for(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.3) -> Any:
    """Poll ``pred`` until it returns something truthy (that value); bounded by ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def project(root: Path) -> Path:
    """The user's project, as the tests' ``workdir``: ./workloads (the stand-in) and ./conf (presets)."""
    work = root / "project"
    shutil.copytree(benchlib.REPO / "tests" / "workloads", work / "workloads", ignore=shutil.ignore_patterns("conf"))
    shutil.copytree(benchlib.REPO / "tests" / "workloads" / "conf", work / "conf")
    return work


def submit(c: FakeGpuCluster, work: Path, *overrides: str) -> tuple[float, float, str]:
    """One job with the submit command, as a user would: (command start, its exit, the id)."""
    cmd = [sys.executable, "-m", "rayjobs.submit", "+exp=fake_ppo", "+fake.hold_gpus=true", "trainer.nnodes=1",
           *overrides]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=work, env=c.client_env(), capture_output=True, text=True, timeout=300)
    t1 = time.time()
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"submit failed ({r.returncode}): {r.stderr[-2000:]}")
    return t0, t1, r.stdout.split()[-1]


def view(c: FakeGpuCluster, sid: str) -> dict[str, Any]:
    got = c.queue().job(sid)
    if got is None:
        raise RuntimeError(f"the queue has no record of {sid}")
    return got


def attempts(run_dir: str) -> dict[int, list[int]]:
    """{attempt: [steps it logged]} from a run's per-attempt metrics files (verl's file logger)."""
    out = {}
    for f in Path(run_dir).glob("metrics.*.jsonl"):
        out[int(f.name.split(".")[1])] = [json.loads(ln)["step"] for ln in f.read_text().splitlines() if ln.strip()]
    return dict(sorted(out.items()))


def training(v: dict[str, Any], fresh_s: float) -> bool:
    """Is the job of view ``v`` training now: admitted, RUNNING in Ray, not being preempted, and its
    newest attempt's metrics file written within ``fresh_s``?"""
    if v["state"] != "admitted" or v["status"] != "RUNNING" or v.get("preempting_for"):
        return False
    files = sorted(Path(v["metadata"]["run_dir"]).glob("metrics.*.jsonl"), key=lambda f: int(f.name.split(".")[1]))
    if not files:
        return False
    st = files[-1].stat()
    return st.st_size > 0 and time.time() - st.st_mtime < fresh_s


def since_checkpoint(v: dict[str, Any]) -> Optional[float]:
    """Seconds since the job's last complete checkpoint (its tracker's mtime; None: no checkpoint yet)."""
    try:
        mtime = (Path(v["metadata"]["checkpoint_dir"]) / TRACKER).stat().st_mtime
    except OSError:
        return None
    return time.time() - mtime


def saved(v: dict[str, Any]) -> Optional[int]:
    """The step of the job's last complete checkpoint (its tracker), or None."""
    try:
        return int((Path(v["metadata"]["checkpoint_dir"]) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- the workload
def fill(c: FakeGpuCluster, work: Path, a: argparse.Namespace) -> dict[str, int]:
    """The cluster full of preemptible 1-GPU jobs, the shortest checkpoint interval first (the oldest):
    {id: K}. Each starts once the one before trains, then ``--stagger-s`` more (their ages differ)."""
    fills: dict[str, int] = {}
    fresh = max(2.0, 10 * a.step_s)
    for k in a.intervals:
        _, _, sid = submit(c, work, "trainer.n_gpus_per_node=1", "rayjobs.preemptible=true", f"+fake.steps={a.fill_steps}",
                           f"+fake.step_s={a.step_s}", f"trainer.save_freq={k}", *a.fill_extra)
        fills[sid] = k
        wait_for(lambda: training(view(c, sid), fresh), 180, f"fill job {sid} (K={k}) to train")
        time.sleep(a.stagger_s)
    return fills


def watch_choice(c: FakeGpuCluster, fills: dict[str, int], high: str, before: dict[str, int],
                 timeout: float) -> dict[str, Any]:
    """Poll the queue's views (every 0.1 s) until it preempts fill jobs for ``high``: the victims, their
    ``preempt_why`` (None if one was already back in line when seen), and what each fill job had
    trained since its last checkpoint at that moment (and that checkpoint's step)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        views = {v["submission_id"]: v for v in c.queue().jobs()}
        victims = [s for s in fills if views[s].get("preempting_for") == high
                   or (views[s]["preemptions"] > before[s] and (views[s]["preempted"] or {}).get("by") == high)]
        if victims:
            return {"seen_at": time.time(), "victims": victims, "why": {s: views[s].get("preempt_why") for s in victims},
                    "since_s": {s: since_checkpoint(views[s]) for s in fills}, "saved": {s: saved(views[s]) for s in fills}}
        if high in views and views[high]["state"] != "waiting":
            raise RuntimeError(f"{high} left the line without a preemption: {views[high]}")
        time.sleep(0.1)
    raise RuntimeError(f"no preemption for {high} within {timeout:.0f} s")


def one_round(c: FakeGpuCluster, work: Path, fills: dict[str, int], gpus: int, a: argparse.Namespace) -> dict[str, Any]:
    """Submit one high-priority job, see whom it preempts, wait until it SUCCEEDED and its victims train again."""
    before = {sid: int(view(c, sid)["preemptions"] or 0) for sid in fills}
    load = os.getloadavg()[0]
    t0, t1, high = submit(c, work, f"trainer.n_gpus_per_node={gpus}", "rayjobs.priority=10", "+fake.steps=3",
                          "+fake.step_s=0.2")
    choice = watch_choice(c, fills, high, before, 120)
    done = wait_for(lambda: (v := view(c, high))["state"] == "done" and v, 240, f"{high} to end")
    if done["status"] != "SUCCEEDED":
        raise RuntimeError(f"{high} ended {done['status']}: {done.get('message')}")
    fresh = max(2.0, 10 * a.step_s)
    back = {}
    for sid in choice["victims"]:
        back[sid] = wait_for(lambda: (v := view(c, sid))["preemptions"] > before[sid] and training(v, fresh) and v,
                             240, f"victim {sid} to train again")
    victims = []
    for sid in choice["victims"]:
        p, at_ask = back[sid]["preempted"] or {}, choice["saved"][sid]
        waited = (p["checkpoint_step"] - at_ask) // fills[sid] if None not in (p.get("checkpoint_step"), at_ask) else None
        victims.append({"id": sid, "k": fills[sid], "gpus": 1, "preemption": back[sid]["preemptions"], "by": p.get("by"),
                        "checkpoint_step": p.get("checkpoint_step"), "step": p.get("step"), "redo": p.get("redo"),
                        "redo_gpu_s": (p.get("redo") or 0) * a.step_s * 1, "why": choice["why"][sid],
                        "saved_at_ask": at_ask, "saves_waited": waited})
    return {"high": high, "gpus": gpus, "load": load, "submit_start": t0, "submit_end": t1, "queued_at": done["queued_at"],
            "admitted_at": done["admitted_at"], "wait_s": done["admitted_at"] - done["queued_at"],
            "user_wait_s": done["admitted_at"] - t0, "since_s": {fills[s]: v for s, v in choice["since_s"].items()},
            "victims": victims, "redo_gpu_s": sum(v["redo_gpu_s"] for v in victims)}


def crosscheck(c: FakeGpuCluster, fills: dict[str, int], rounds: list[dict[str, Any]]) -> list[str]:
    """Each victim's redo as its metrics files say it (steps logged by the stopped attempt past the
    step the next attempt resumed from) vs the queue's ``preempted.redo``: the mismatches, a line each."""
    out = []
    runs = {sid: attempts(view(c, sid)["metadata"]["run_dir"]) for sid in fills}
    for r in rounds:
        for v in r["victims"]:
            n, att = v["preemption"], runs[v["id"]]
            if n not in att or n + 1 not in att or not att[n + 1]:
                out.append(f"{v['id']} (K={v['k']}): attempts {n}/{n + 1} missing: {sorted(att)}")
                continue
            resumed = att[n + 1][0] - 1
            files = max(att[n][-1:] or [0]) - resumed
            if files != v["redo"] or resumed != v["checkpoint_step"]:
                out.append(f"{v['id']} (K={v['k']}) preemption {n}: queue redo {v['redo']} from step "
                           f"{v['checkpoint_step']}, files {files} from step {resumed}")
    return out


def run_order(order: str, root: Path, work: Path, a: argparse.Namespace) -> dict[str, Any]:
    """The whole workload under one head setting, on a fresh cluster (stopped after)."""
    print(f"[bench] order={order}: starting the cluster (load {os.getloadavg()[0]:.1f})", flush=True)
    t_start, load0 = time.monotonic(), os.getloadavg()
    c = FakeGpuCluster(root / order, nodes=NODES, env=ORDERS[order]).start()
    rounds: list[dict[str, Any]] = []
    try:
        fills = fill(c, work, a)
        for i in range(a.rounds):
            pause = a.pause_s + ((i * PHI) % 1.0) * max(a.intervals) * a.step_s
            time.sleep(pause)
            r = one_round(c, work, fills, 2 if i + 1 == a.two_gpu_round else 1, a)
            r.update(round=i + 1, pause_s=pause)
            rounds.append(r)
            print(f"[bench] {order} round {i + 1}: {r['gpus']} GPU, victims K={[v['k'] for v in r['victims']]}, "
                  f"redo {[v['redo'] for v in r['victims']]} steps, wait {r['wait_s']:.1f} s", flush=True)
        mismatches = crosscheck(c, fills, rounds)
        c.queue().stop(list(fills))
    finally:
        c.stop()
    return {"order": order, "fills": {s: k for s, k in fills.items()}, "rounds": rounds, "mismatches": mismatches,
            "load": [load0, os.getloadavg()], "took_s": time.monotonic() - t_start}


# --------------------------------------------------------------------------- the report
def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def stats(res: dict[str, Any]) -> dict[str, Any]:
    rs = res["rounds"]
    redo = [v["redo"] for r in rs for v in r["victims"] if v["redo"] is not None]
    chosen: dict[int, int] = {}
    for r in rs:
        for v in r["victims"]:
            chosen[v["k"]] = chosen.get(v["k"], 0) + 1
    return {"redo_steps": med(redo), "redo_gpu_s": med([r["redo_gpu_s"] for r in rs]),
            "redo_gpu_s_sum": sum(r["redo_gpu_s"] for r in rs), "wait_s": med([r["wait_s"] for r in rs]),
            "user_wait_s": med([r["user_wait_s"] for r in rs]), "chosen": dict(sorted(chosen.items())),
            "preemptions": len(redo)}


def round_rows(res: dict[str, Any], intervals: list[int]) -> list[str]:
    rows = []
    for r in res["rounds"]:
        got = {int(k): x for k, x in r["since_s"].items()}  # (int keys turn str through JSON)
        since = ", ".join(f"{got[k]:.1f}" if got.get(k) is not None else "-" for k in intervals)
        victims = ", ".join(f"K={v['k']}" for v in r["victims"])
        redo = ", ".join(str(v["redo"]) for v in r["victims"])
        waited = ", ".join(str(v.get("saves_waited", "-")) for v in r["victims"])
        load = f"{r['load']:.0f}" if "load" in r else "-"
        rows.append(f"| {res['order']} | {r['round']} | {r['gpus']} | {load} | {r['pause_s']:.1f} | {since} | {victims} | "
                    f"{waited} | {redo} | {r['redo_gpu_s']:.1f} | {r['wait_s']:.1f} | {r['user_wait_s']:.1f} |")
    return rows


def markdown(results: list[dict[str, Any]], a: argparse.Namespace) -> str:
    s = {res["order"]: stats(res) for res in results}
    ks = ", ".join(map(str, a.intervals))
    lines = [
        "## Preemption victims: least work lost vs lowest priority, then youngest (`scripts/bench_victims.py`)", "",
        f"1 node x 4 fake GPUs (12 CPUs), one fresh head per order, in a private network namespace. The cluster full "
        f"of 4 preemptible 1-GPU verl stand-ins ({a.fill_steps} steps of {a.step_s:g} s), checkpoint every K = {ks} "
        f"steps, submitted in that order ({a.stagger_s:g} s apart once each trains: the K={max(a.intervals)} job is the "
        f"youngest); {a.rounds} rounds of a `rayjobs.priority=10` job (3 steps of 0.2 s; 2 GPUs in round "
        f"{a.two_gpu_round}), each after a pause (the same under both orders), each waited for until it SUCCEEDED and "
        f"its victims trained again. Fill jobs' extra overrides: `{' '.join(a.fill_extra) or '(none)'}`.", "",
        "| order | preemptions | steps redone / preemption (median) | GPU-s redone / round (median) | GPU-s redone, all rounds "
        "| high job's wait in the queue, s (median) | from the submit command's start, s | victims chosen (K: times) |",
        "|---|---|---|---|---|---|---|---|"]
    for o, st in s.items():
        lines.append(f"| {o} | {st['preemptions']} | {st['redo_steps']:g} | {st['redo_gpu_s']:.2f} | {st['redo_gpu_s_sum']:.2f} "
                     f"| {st['wait_s']:.1f} | {st['user_wait_s']:.1f} | "
                     f"{', '.join(f'K={k}: {n}' for k, n in st['chosen'].items())} |")
    if "priority" in s and "least-work" in s and s["priority"]["redo_gpu_s"]:
        lines += ["", f"Ratio least-work / priority, GPU-seconds redone per round (medians): "
                      f"{s['least-work']['redo_gpu_s'] / s['priority']['redo_gpu_s']:.2f} "
                      f"(all rounds summed: {s['least-work']['redo_gpu_s_sum'] / max(1e-9, s['priority']['redo_gpu_s_sum']):.2f}); "
                      f"high job's wait: {s['least-work']['wait_s'] / max(1e-9, s['priority']['wait_s']):.2f}."]
    lines += ["", "Per round: load = 1-min load average at the submit; since-checkpoint = seconds each fill job (K = "
                  f"{ks}) had trained since its last save when the preemption was first seen (polled every 0.1 s); "
                  "saves waited = checkpoints the victim saved from then until the one its stop came after (1: the "
                  "next one, as meant); wait = the high job's `queued_at` -> `admitted_at`.", "",
              "| order | round | GPUs | load | pause s | since-checkpoint s | victims | saves waited | redo steps "
              "| GPU-s redone | wait s | from submit s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        lines += round_rows(res, a.intervals)
    lines.append("")
    for res in results:
        lines += [f"- {res['order']}: redo mismatch (queue vs metrics files): {m}" for m in res["mismatches"]]
        whys = sorted({str(v["why"]) for r in res["rounds"] for v in r["victims"]})
        lines.append(f"- {res['order']}: `preempt_why` seen: " + "; ".join(f'"{w}"' for w in whys))
    loads = "; ".join(f"{res['order']} {res['load'][0][0]:.1f} -> {res['load'][1][0]:.1f}" for res in results)
    took = sum(res["took_s"] for res in results)
    lines += ["", f"Load average (1 min) at the start -> end of each order: {loads}, on {os.cpu_count()} cores shared "
                  f"with other work (`os.getloadavg()`); {took:.0f} s in all. {a.note}"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--two-gpu-round", type=int, default=3, help="this round's high job takes 2 GPUs (0: none)")
    ap.add_argument("--intervals", default="5,10,20,40", help="the fill jobs' trainer.save_freq, oldest first")
    ap.add_argument("--step-s", type=float, default=0.1)
    ap.add_argument("--fill-steps", type=int, default=6000, help="long enough to outlast every round")
    ap.add_argument("--fill-extra", action="append", default=[], help="more overrides of the fill jobs (repeatable)")
    ap.add_argument("--stagger-s", type=float, default=2.0)
    ap.add_argument("--pause-s", type=float, default=2.0, help="each round's pause: this + a spread-out part")
    ap.add_argument("--orders", default="priority,least-work")
    ap.add_argument("--out", default="/tmp/bench_victims.json")
    ap.add_argument("--note", default="")
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--from-json", help="render the results a run saved (--out) instead of running")
    a = ap.parse_args()
    a.intervals = [int(x) for x in a.intervals.split(",")]
    if a.from_json:
        results = json.loads(Path(a.from_json).read_text())
    else:
        root = benchlib.isolated_home("rjv")
        work = project(root)
        with benchlib.private_netns():
            results = [run_order(order, root, work, a) for order in a.orders.split(",")]
        Path(a.out).write_text(json.dumps(results, indent=1, default=str))
        shutil.rmtree(root, ignore_errors=True)
    md = markdown(results, a)
    if not a.no_doc:
        benchlib.write_section("victims", md)
    print(md)


if __name__ == "__main__":
    main()

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
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc, jobs, session  # noqa: E402
from bench.timing import median  # noqa: E402

from clusterops import view, wait_until  # noqa: E402

NODES = ((4, 12),)  #: 1 node, 4 fake GPUs, 12 CPUs (each GPU bundle of the stand-in takes 3)
ORDERS = {"priority": {"RAYJOBS_PREEMPT_ORDER": "priority"}, "least-work": {}}  #: head env per order
PHI = 0.6180339887  #: the rounds' pauses: base + frac(i x PHI) x the longest interval (spread out, no pattern)


def submit(c: Any, *overrides: str) -> tuple[float, float, str]:
    """One job of the stand-in with the submit command, as a user would: (command start, its exit, the id)."""
    t0, t1, ids = jobs.submit_cmd(c, "+exp=fake_ppo", "+fake.hold_gpus=true", "trainer.nnodes=1", *overrides)
    return t0, t1, ids[-1]


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
        return time.time() - (Path(v["metadata"]["checkpoint_dir"]) / jobs.TRACKER).stat().st_mtime
    except OSError:
        return None


# --------------------------------------------------------------------------- the workload
def fill(c: Any, a: argparse.Namespace) -> dict[str, int]:
    """The cluster full of preemptible 1-GPU jobs, the shortest checkpoint interval first (the oldest):
    {id: K}. Each starts once the one before trains, then ``--stagger-s`` more (their ages differ)."""
    fills: dict[str, int] = {}
    fresh = max(2.0, 10 * a.step_s)
    for k in a.intervals:
        _, _, sid = submit(c, "trainer.n_gpus_per_node=1", "rayjobs.preemptible=true", f"+fake.steps={a.fill_steps}",
                           f"+fake.step_s={a.step_s}", f"trainer.save_freq={k}", *a.fill_extra)
        fills[sid] = k
        wait_until(lambda: training(view(c, sid), fresh), 180, f"fill job {sid} (K={k}) to train", every=0.3)
        time.sleep(a.stagger_s)
    return fills


def watch_choice(c: Any, fills: dict[str, int], high: str, before: dict[str, int], timeout: float) -> dict[str, Any]:
    """Poll the queue's views (every 0.1 s) until it preempts fill jobs for ``high``: the victims, their
    ``preempt_why`` (None if one was already back in line when seen), and what each fill job had
    trained since its last checkpoint at that moment (and that checkpoint's step)."""
    def chosen() -> Optional[dict[str, Any]]:
        views = {v["submission_id"]: v for v in c.queue().jobs()}
        victims = [s for s in fills if views[s].get("preempting_for") == high
                   or (views[s]["preemptions"] > before[s] and (views[s]["preempted"] or {}).get("by") == high)]
        if not victims and high in views and views[high]["state"] != "waiting":
            raise RuntimeError(f"{high} left the line without a preemption: {views[high]}")
        return victims and {"seen_at": time.time(), "victims": victims,
                            "why": {s: views[s].get("preempt_why") for s in victims},
                            "since_s": {s: since_checkpoint(views[s]) for s in fills},
                            "saved": {s: jobs.saved_step(views[s]["metadata"]["checkpoint_dir"]) for s in fills}}
    return wait_until(chosen, timeout, f"a preemption for {high}", every=0.1)


def one_round(c: Any, fills: dict[str, int], gpus: int, a: argparse.Namespace) -> dict[str, Any]:
    """Submit one high-priority job, see whom it preempts, wait until it SUCCEEDED and its victims train again."""
    before = {sid: int(view(c, sid)["preemptions"] or 0) for sid in fills}
    load = os.getloadavg()[0]
    t0, t1, high = submit(c, f"trainer.n_gpus_per_node={gpus}", "rayjobs.priority=10", "+fake.steps=3", "+fake.step_s=0.2")
    choice = watch_choice(c, fills, high, before, 120)
    done = wait_until(lambda: (v := view(c, high))["state"] == "done" and v, 240, f"{high} to end", every=0.3)
    if done["status"] != "SUCCEEDED":
        raise RuntimeError(f"{high} ended {done['status']}: {done.get('message')}")
    fresh = max(2.0, 10 * a.step_s)
    victims = []
    for sid in choice["victims"]:
        back = wait_until(lambda: (v := view(c, sid))["preemptions"] > before[sid] and training(v, fresh) and v,
                          240, f"victim {sid} to train again", every=0.3)
        p, at_ask = back["preempted"] or {}, choice["saved"][sid]
        waited = (p["checkpoint_step"] - at_ask) // fills[sid] if None not in (p.get("checkpoint_step"), at_ask) else None
        victims.append({"id": sid, "k": fills[sid], "gpus": 1, "preemption": back["preemptions"], "by": p.get("by"),
                        "checkpoint_step": p.get("checkpoint_step"), "step": p.get("step"), "redo": p.get("redo"),
                        "redo_gpu_s": (p.get("redo") or 0) * a.step_s * 1, "why": choice["why"][sid],
                        "saved_at_ask": at_ask, "saves_waited": waited})
    return {"high": high, "gpus": gpus, "load": load, "submit_start": t0, "submit_end": t1, "queued_at": done["queued_at"],
            "admitted_at": done["admitted_at"], "wait_s": done["admitted_at"] - done["queued_at"],
            "user_wait_s": done["admitted_at"] - t0, "since_s": {fills[s]: v for s, v in choice["since_s"].items()},
            "victims": victims, "redo_gpu_s": sum(v["redo_gpu_s"] for v in victims)}


def crosscheck(c: Any, fills: dict[str, int], rounds: list[dict[str, Any]]) -> list[str]:
    """Each victim's redo as its metrics files say it (steps logged by the stopped attempt past the
    step the next attempt resumed from) vs the queue's ``preempted.redo``: the mismatches, a line each."""
    out = []
    runs = {sid: jobs.attempts(view(c, sid)["metadata"]["run_dir"]) for sid in fills}
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


def run_order(r: session.Run, order: str, a: argparse.Namespace) -> dict[str, Any]:
    """The whole workload under one head setting, on a fresh cluster (stopped after)."""
    print(f"[bench] order={order}: starting the cluster (load {os.getloadavg()[0]:.1f})", flush=True)
    t_start, load0 = time.monotonic(), os.getloadavg()
    rounds: list[dict[str, Any]] = []
    with r.cluster(NODES, ORDERS[order]) as c:
        fills = fill(c, a)
        for i in range(a.rounds):
            pause = a.pause_s + ((i * PHI) % 1.0) * max(a.intervals) * a.step_s
            time.sleep(pause)
            rounds.append(dict(one_round(c, fills, 2 if i + 1 == a.two_gpu_round else 1, a), round=i + 1, pause_s=pause))
            print(f"[bench] {order} round {i + 1}: {rounds[-1]['gpus']} GPU, victims K={[v['k'] for v in rounds[-1]['victims']]}, "
                  f"redo {[v['redo'] for v in rounds[-1]['victims']]} steps, wait {rounds[-1]['wait_s']:.1f} s", flush=True)
        mismatches = crosscheck(c, fills, rounds)
        c.queue().stop(list(fills))
    return {"order": order, "fills": fills, "rounds": rounds, "mismatches": mismatches,
            "load": [load0, os.getloadavg()], "took_s": time.monotonic() - t_start}


# --------------------------------------------------------------------------- the report
def stats(res: dict[str, Any]) -> dict[str, Any]:
    """An order's medians over its rounds, and which victims it chose."""
    rs = res["rounds"]
    redo = [v["redo"] for r in rs for v in r["victims"] if v["redo"] is not None]
    chosen: dict[int, int] = {}
    for r in rs:
        for v in r["victims"]:
            chosen[v["k"]] = chosen.get(v["k"], 0) + 1
    return {"redo_steps": median(redo), "redo_gpu_s": median([r["redo_gpu_s"] for r in rs]),
            "redo_gpu_s_sum": sum(r["redo_gpu_s"] for r in rs), "wait_s": median([r["wait_s"] for r in rs]),
            "user_wait_s": median([r["user_wait_s"] for r in rs]), "chosen": dict(sorted(chosen.items())),
            "preemptions": len(redo)}


def round_rows(res: dict[str, Any], intervals: list[int]) -> list[list[str]]:
    """A row per round of one order."""
    rows = []
    for r in res["rounds"]:
        got = {int(k): x for k, x in r["since_s"].items()}  # (int keys turn str through JSON)
        rows.append([res["order"], r["round"], r["gpus"], f"{r['load']:.0f}" if "load" in r else "-", f"{r['pause_s']:.1f}",
                     ", ".join(f"{got[k]:.1f}" if got.get(k) is not None else "-" for k in intervals),
                     ", ".join(f"K={v['k']}" for v in r["victims"]),
                     ", ".join(str(v.get("saves_waited", "-")) for v in r["victims"]),
                     ", ".join(str(v["redo"]) for v in r["victims"]), f"{r['redo_gpu_s']:.1f}", f"{r['wait_s']:.1f}",
                     f"{r['user_wait_s']:.1f}"])
    return rows


def markdown(results: list[dict[str, Any]], a: argparse.Namespace) -> str:
    """The section: the orders side by side, then every round."""
    s = {res["order"]: stats(res) for res in results}
    ks = ", ".join(map(str, a.intervals))
    orders = [[o, st["preemptions"], f"{st['redo_steps']:g}", f"{st['redo_gpu_s']:.2f}", f"{st['redo_gpu_s_sum']:.2f}",
               f"{st['wait_s']:.1f}", f"{st['user_wait_s']:.1f}", ", ".join(f"K={k}: {n}" for k, n in st["chosen"].items())]
              for o, st in s.items()]
    ratio = ""
    if "priority" in s and "least-work" in s and s["priority"]["redo_gpu_s"]:
        lw, pr = s["least-work"], s["priority"]
        ratio = (f"\n\nRatio least-work / priority, GPU-seconds redone per round (medians): {lw['redo_gpu_s'] / pr['redo_gpu_s']:.2f} "
                 f"(all rounds summed: {lw['redo_gpu_s_sum'] / max(1e-9, pr['redo_gpu_s_sum']):.2f}); "
                 f"high job's wait: {lw['wait_s'] / max(1e-9, pr['wait_s']):.2f}.")
    notes = []
    for res in results:
        notes += [f"- {res['order']}: redo mismatch (queue vs metrics files): {m}" for m in res["mismatches"]]
        whys = sorted({str(v["why"]) for r in res["rounds"] for v in r["victims"]})
        notes.append(f"- {res['order']}: `preempt_why` seen: " + "; ".join(f'"{w}"' for w in whys))
    loads = "; ".join(f"{res['order']} {res['load'][0][0]:.1f} -> {res['load'][1][0]:.1f}" for res in results)
    return f"""## Preemption victims: least work lost vs lowest priority, then youngest (`scripts/bench_victims.py`)

1 node x 4 fake GPUs (12 CPUs), one fresh head per order, in a private network namespace. The cluster full \
of 4 preemptible 1-GPU verl stand-ins ({a.fill_steps} steps of {a.step_s:g} s), checkpoint every K = {ks} \
steps, submitted in that order ({a.stagger_s:g} s apart once each trains: the K={max(a.intervals)} job is the \
youngest); {a.rounds} rounds of a `rayjobs.priority=10` job (3 steps of 0.2 s; 2 GPUs in round \
{a.two_gpu_round}), each after a pause (the same under both orders), each waited for until it SUCCEEDED and \
its victims trained again. Fill jobs' extra overrides: `{' '.join(a.fill_extra) or '(none)'}`.

{doc.table(["order", "preemptions", "steps redone / preemption (median)", "GPU-s redone / round (median)",
            "GPU-s redone, all rounds", "high job's wait in the queue, s (median)", "from the submit command's start, s",
            "victims chosen (K: times)"], orders, "l" * 8)}{ratio}

Per round: load = 1-min load average at the submit; since-checkpoint = seconds each fill job (K = \
{ks}) had trained since its last save when the preemption was first seen (polled every 0.1 s); \
saves waited = checkpoints the victim saved from then until the one its stop came after (1: the \
next one, as meant); wait = the high job's `queued_at` -> `admitted_at`.

{doc.table(["order", "round", "GPUs", "load", "pause s", "since-checkpoint s", "victims", "saves waited", "redo steps",
            "GPU-s redone", "wait s", "from submit s"], [row for res in results for row in round_rows(res, a.intervals)],
           "l" * 12)}

{chr(10).join(notes)}

Load average (1 min) at the start -> end of each order: {loads}, on {os.cpu_count()} cores shared \
with other work (`os.getloadavg()`); {sum(res["took_s"] for res in results):.0f} s in all. {a.note}"""


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
    ap.add_argument("--from-json", help="render the results a run saved (--out) instead of running")
    a = doc.parse(ap, {"rounds": 1, "two_gpu_round": 0, "fill_steps": 3000, "orders": "least-work"})
    a.intervals = [int(x) for x in a.intervals.split(",")]
    if a.from_json:
        results = json.loads(Path(a.from_json).read_text())
    else:
        with session.run("rjv") as r:
            results = [run_order(r, order, a) for order in a.orders.split(",")]
        Path(a.out).write_text(json.dumps(results, indent=1, default=str))
    doc.publish(a, "victims", markdown(results, a))


if __name__ == "__main__":
    main()

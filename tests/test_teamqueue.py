"""A shared cluster's queue rules on a real 1-node Ray cluster declaring 4 fake GPUs (14 CPUs):
preemption at a checkpoint, dependencies between jobs, per-user GPU quotas.

The workload is the verl stand-in holding its GPUs (placement groups) and saving checkpoints every
``trainer.save_freq`` steps, resuming from them (``resume_mode=auto``). Everything goes through
the real queue API, the real queue actor and the real runner; the cluster is the session's one of
this shape and head settings (quota 2 GPUs per user, backfill guard 600 s).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import FakeGpuCluster, cli_json, cli_on, submit_on, view, wait_done, wait_until
from test_queue import admitted_at, submit

TEAM = ((4, 14),)
TEAM_ENV = {"RAYJOBS_QUOTA_GPUS": "2", "RAYJOBS_QUEUE_BACKFILL_S": "600"}


@pytest.fixture
def team_cluster(clusters: Any) -> FakeGpuCluster:
    return clusters.get(TEAM, env=TEAM_ENV)


@pytest.fixture
def tclient(team_cluster: FakeGpuCluster) -> Any:
    return team_cluster.client()


def row(cluster: FakeGpuCluster, sid: str) -> dict[str, Any]:
    """What ``rayjobs status --json`` says of the job (the queue's word, no progress)."""
    from rayjobs.api import Job

    return Job(sid, dashboard=cluster.dashboard()).row(progress=False)


def steps_of(run_dir: str) -> dict[int, list[int]]:
    """{attempt: [steps it logged]} from the run's per-attempt metrics files."""
    out = {}
    for f in sorted(Path(run_dir).glob("metrics.*.jsonl")):
        out[int(f.name.split(".")[1])] = [json.loads(ln)["step"] for ln in f.read_text().splitlines() if ln.strip()]
    return out


def run_dir(cluster: FakeGpuCluster, sid: str) -> str:
    return view(cluster, sid)["metadata"]["run_dir"]


ONE_GPU = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1")


def test_high_priority_job_preempts_a_preemptible_sweep_point_at_its_checkpoint(team_cluster, tclient, workdir):
    # The cluster full: a non-preemptible 2-GPU job (it holds its GPUs until stopped) and a preemptible
    # 2-point sweep of 1 GPU each (28 s of steps: still training when high comes, on a loaded machine).
    keep = submit(team_cluster, "trainer.nnodes=1", "trainer.n_gpus_per_node=2", "+fake.steps=1", "+fake.hold_s=600")
    r = submit_on(team_cluster, "-m", "+exp=fake_ppo", "+fake.hold_gpus=true",
                  *ONE_GPU, "+fake.steps=70", "+fake.step_s=0.4", "trainer.save_freq=5",
                  "rayjobs.preemptible=true", "rayjobs.preempt_wait_s=120", "+fake.score_offset=0,0.1", cwd=workdir)
    assert r.returncode == 0, r.stderr
    points = r.stdout.split()
    wait_until(lambda: all(admitted_at(tclient, p) for p in [keep, *points]), 120, "the cluster to be full")
    wait_until(lambda: all(row(team_cluster, p)["step"] or "saved: step 5" in tclient.get_job_logs(p)
                           for p in points), 120, "the points to train")
    # The queue picks the point whose stop loses the least work (GPU-s since its last checkpoint):
    # either one, by a few tenths of a second. Both are followed from before the preemption.
    tails = {p: subprocess.Popen([sys.executable, "-m", "rayjobs.cli", "tail", p, "--plain"], env=team_cluster.client_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in points}
    high = submit(team_cluster, *ONE_GPU, "+fake.steps=3", "+fake.step_s=0.2", "rayjobs.priority=10")
    # status/list say it: QUEUED (PREEMPTED by high) while it waits to run again, with the steps it redoes
    def preempted() -> Any:
        for p in points:
            r = row(team_cluster, p)
            if r["status"] == "QUEUED" and r.get("preempted_by") == high and r.get("redo_steps") is not None:
                return p, r
        return None
    victim, queued = wait_until(preempted, 120, "a point to be back in the queue, preempted", every=0.2)
    tail = tails.pop(victim)
    other_tail = tails.popitem()[1]
    assert wait_done(team_cluster, high) == "SUCCEEDED", tclient.get_job_logs(high)[-1500:]
    for p in points:  # as rayjobs sees them (Ray shows the preempted run STOPPED for a while)
        assert wait_done(team_cluster, p) == "SUCCEEDED", tclient.get_job_logs(p)[-2000:]
    tclient.stop_job(keep)
    assert wait_done(team_cluster, keep) == "STOPPED"
    log = tclient.get_job_logs(victim)  # one log: the stopped run's, then the resumed one's (appended)
    assert f"preempted by {high}: stopping once the next checkpoint is saved" in log, log[-3000:]
    assert log.index("preempted by") < log.rindex("Resuming from"), log[-3000:]
    runs = steps_of(run_dir(team_cluster, victim))
    assert len(runs) == 2, runs  # attempt 1 (stopped at its checkpoint), attempt 2 (resumed)
    first, second = runs[1], runs[2]
    ckpt = second[0] - 1  # attempt 2 resumed from the checkpoint the stop waited for
    assert ckpt % 5 == 0 and ckpt > 0 and first[:ckpt] == list(range(1, ckpt + 1)), runs
    assert second == list(range(ckpt + 1, 71)), runs  # no step lost past that checkpoint
    # Steps the stop let run past the checkpoint (its latency: ~1 s here; redone by attempt 2): said as they were.
    redo = len(first) - ckpt
    assert first == list(range(1, len(first) + 1)) and queued["redo_steps"] == redo, (runs, queued)
    # the high-priority job started once the victim had stopped at its checkpoint
    assert admitted_at(tclient, high) > admitted_at(tclient, victim) - 1e-6
    # the others were never touched: one attempt each, no preemption in their logs
    for other in [keep, *[p for p in points if p != victim]]:
        assert "preempted by" not in tclient.get_job_logs(other)
        assert len(steps_of(run_dir(team_cluster, other))) == 1
    rec = row(team_cluster, victim)
    assert rec["status"] == "SUCCEEDED" and rec["preemptible"]
    out, err = tail.communicate(timeout=120)
    assert tail.returncode == 0, err[-2000:]
    other_out, other_err = other_tail.communicate(timeout=120)
    assert other_tail.returncode == 0 and "PREEMPTED" not in other_err, other_err[-2000:]
    assert f"PREEMPTED by {high}" in err, err[-2000:]
    steps = [int(ln.split("step:")[1].split(" ")[0]) for ln in out.splitlines() if " step:" in ln]
    assert steps == first + second, (steps, runs)  # one log: each attempt's steps once, in order (redone ones twice)


def test_dependency_chain_fails_with_its_cause_and_never_starts(team_cluster, tclient, workdir):
    a = submit(team_cluster, *ONE_GPU, "+fake.steps=2", "+fake.step_s=0.3", "+fake.config_error=true")
    b = submit(team_cluster, *ONE_GPU, "+fake.steps=2", f"rayjobs.after={a}")
    ok = submit(team_cluster, *ONE_GPU, "+fake.steps=2", "+fake.step_s=0.3")
    c = submit(team_cluster, *ONE_GPU, "+fake.steps=1", f"rayjobs.after={ok}")
    assert wait_done(team_cluster, a, timeout=120) == "FAILED"
    got = wait_until(lambda: (lambda r: r if r["status"] == "FAILED" else None)(row(team_cluster, b)), 60,
                     "the dependent job to fail")
    assert got["cause"] == f"dependency failed: {a} FAILED", got
    assert b not in {j.submission_id for j in tclient.list_jobs()}  # it never reached Ray: never started
    assert wait_done(team_cluster, c, timeout=120) == "SUCCEEDED"
    assert admitted_at(tclient, c) > admitted_at(tclient, ok)
    listed = cli_json(team_cluster, "list")
    assert {r["id"]: r["after"] for r in listed if r["id"] in (b, c)} == {b: [a], c: [ok]}
    # an id the queue does not know: one line, exit 2, nothing queued
    before = {v["submission_id"] for v in team_cluster.queue().jobs()}
    r = submit_on(team_cluster, "+exp=fake_ppo", "rayjobs.after=nosuchjob-123", cwd=workdir)
    assert r.returncode == 2 and "rayjobs.after=nosuchjob-123: no job or sweep matches" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stdout.strip() == "" and {v["submission_id"] for v in team_cluster.queue().jobs()} == before


def test_a_users_quota_holds_while_others_wait(team_cluster, tclient, workdir):
    # 4 GPUs, quota 2 per user. Alice asks for 3 x 1 GPU, Bob for one 3-GPU job. Alice gets her 2;
    # her third waits for her quota (not for GPUs: two are free) while Bob waits. Her first two hold
    # their GPUs until stopped, so what is read in between cannot depend on how fast this machine is.
    blocker = submit(team_cluster, "trainer.nnodes=1", "trainer.n_gpus_per_node=4", "+fake.steps=1",
                     "+fake.hold_s=600", "rayjobs.user=carol")
    wait_until(lambda: admitted_at(tclient, blocker), 90, "the blocker to start")
    held_on, short = ("+fake.steps=1", "+fake.hold_s=600"), ("+fake.steps=1", "+fake.hold_s=2")
    alice = [submit(team_cluster, *ONE_GPU, *opts, "rayjobs.user=alice") for opts in (held_on, held_on, short)]
    bob = submit(team_cluster, "trainer.nnodes=1", "trainer.n_gpus_per_node=3", *short, "rayjobs.user=bob",
                 "rayjobs.preflight=false")  # (the PPO batch sizes do not divide by 3 GPUs; the stand-in does not care)
    tclient.stop_job(blocker)
    wait_until(lambda: all(admitted_at(tclient, a) for a in alice[:2]), 90, "alice's first two jobs")
    held = row(team_cluster, alice[2])
    assert held["status"] == "QUEUED" and held["held"] == "quota", held
    assert "quota: alice holds 2 of 2 GPUs while others wait" in held["message"], held
    r = cli_on(team_cluster, "list")
    assert "(quota)" in next(ln for ln in r.stdout.splitlines() if ln.startswith(alice[2])), r.stdout
    users = cli_json(team_cluster, "cluster")["users"]
    assert users["alice"] == {"gpus": 2, "running": 2, "waiting": 1, "quota": 2}, users
    assert users["bob"]["waiting"] == 1 and users["bob"]["gpus"] == 0, users
    assert "user alice: 2 GPU(s) (quota 2), 2 running, 1 waiting" in cli_on(team_cluster, "cluster").stdout
    # One of her first two ends: her third starts then (she holds 2 again), never beside them.
    tclient.stop_job(alice[0])
    assert wait_done(team_cluster, alice[2]) == "SUCCEEDED"
    first_end = tclient.get_job_info(alice[0]).end_time / 1000
    assert admitted_at(tclient, alice[2]) >= first_end - 0.5, (admitted_at(tclient, alice[2]), first_end)
    tclient.stop_job(alice[1])
    assert wait_done(team_cluster, bob) == "SUCCEEDED"
    assert [wait_done(team_cluster, a) for a in alice[:2]] == ["STOPPED", "STOPPED"]


def test_a_users_stop_of_a_job_being_preempted_ends_it_not_requeued(team_cluster, tclient, workdir):
    # A job being preempted (or going back in line after it) that its user stops must end STOPPED:
    # not be put back in line and resumed (the queue took the user's stop for the preemption's).
    keep = submit(team_cluster, "trainer.nnodes=1", "trainer.n_gpus_per_node=2", "+fake.steps=400", "+fake.step_s=0.4")
    pre = ("rayjobs.preemptible=true", "rayjobs.preempt_wait_s=120", "+fake.steps=400", "+fake.step_s=0.4")
    # a: a checkpoint every 8 s, priority 5, so only b (no checkpoint: it stops only by force) is
    # below high1; the least-work order alone would take a whenever a saved after b started.
    a = submit(team_cluster, *ONE_GPU, *pre, "trainer.save_freq=20", "rayjobs.priority=5")
    wait_until(lambda: admitted_at(tclient, a), 120, "the first preemptible job to start")
    b = submit(team_cluster, *ONE_GPU, *pre, "trainer.save_freq=1000")
    wait_until(lambda: all(admitted_at(tclient, j) for j in (keep, b)), 120, "the cluster to be full")
    wait_until(lambda: all("step:2 " in tclient.get_job_logs(j) for j in (a, b)), 120, "both to train")

    high1 = submit(team_cluster, *ONE_GPU, "+fake.steps=2", "+fake.step_s=0.2", "rayjobs.priority=3")
    wait_until(lambda: row(team_cluster, b).get("preempting_for") == high1, 60, "b to be preempted", every=0.2)
    r = cli_on(team_cluster, "stop", b, "--wait", "120")  # a plain stop, mid-preemption
    assert r.returncode == 0 and r.stdout.strip() == f"{b} STOPPED", (r.stdout, r.stderr)
    assert wait_done(team_cluster, high1) == "SUCCEEDED", tclient.get_job_logs(high1)[-1500:]

    high2 = submit(team_cluster, "trainer.nnodes=1", "trainer.n_gpus_per_node=2", "+fake.steps=2", "+fake.step_s=0.2",
                   "rayjobs.priority=10")  # b's GPU (free) and a's
    wait_until(lambda: row(team_cluster, a).get("preempting_for") == high2, 60, "a to be preempted", every=0.2)
    r = cli_on(team_cluster, "stop", a, "--at-checkpoint", "--wait", "120")
    assert r.returncode == 0 and r.stdout.strip() == f"{a} STOPPED", (r.stdout, r.stderr)
    assert wait_done(team_cluster, high2) == "SUCCEEDED", tclient.get_job_logs(high2)[-1500:]
    # the queue's record of each is done (a requeued one would be waiting again): the queue's decision, final
    wait_until(lambda: all(view(team_cluster, j)["state"] == "done" for j in (a, b)), 60, "a and b to be done")
    for j in (a, b):  # ended there: STOPPED, one attempt, never back in line nor resumed
        assert j not in {v.submission_id for v in team_cluster.queue().summary().line}
        got = row(team_cluster, j)
        assert got["status"] == "STOPPED" and got.get("redo_steps") is None, got
        assert str(tclient.get_job_status(j)).endswith("STOPPED")
        assert len(steps_of(run_dir(team_cluster, j))) == 1
        assert "Resuming from" not in tclient.get_job_logs(j)
    # a ended at its checkpoint: the next one, or -- asked before a step past its last -- that one
    assert re.search(r"stopping at checkpoint: (nothing trained since )?checkpoint step", tclient.get_job_logs(a))
    cli_on(team_cluster, "stop", keep)


def test_a_preemption_is_called_off_when_the_job_it_was_for_is_stopped(team_cluster, tclient, workdir):
    # The job a preemption was for, stopped by its user while it waits: the victim trains on, one
    # attempt, never stopped nor resumed (it stopped at its timeout and went back in line before).
    keep = submit(team_cluster, "trainer.nnodes=1", "trainer.n_gpus_per_node=2", "+fake.steps=400", "+fake.step_s=0.4")
    fill = submit(team_cluster, *ONE_GPU, "+fake.steps=400", "+fake.step_s=0.4")
    # no checkpoint before its end: the stop waits for one, or for the request's 30-s timeout
    v = submit(team_cluster, *ONE_GPU, "rayjobs.preemptible=true", "rayjobs.preempt_wait_s=30", "+fake.steps=90",
               "+fake.step_s=0.4", "trainer.save_freq=1000")
    wait_until(lambda: all(admitted_at(tclient, j) for j in (keep, fill, v)), 120, "the cluster to be full")
    wait_until(lambda: "step:2 " in tclient.get_job_logs(v), 120, "the victim to train")
    high = submit(team_cluster, *ONE_GPU, "+fake.steps=2", "+fake.step_s=0.2", "rayjobs.priority=10")
    wait_until(lambda: f"preempted by {high}: stopping once" in tclient.get_job_logs(v), 60, "the stop to be asked",
               every=0.2)
    r = cli_on(team_cluster, "stop", high, "--wait", "60")
    assert r.returncode == 0 and r.stdout.strip() == f"{high} STOPPED", (r.stdout, r.stderr)
    wait_until(lambda: "stop at checkpoint called off" in tclient.get_job_logs(v), 60, "the runner to call it off")
    assert not row(team_cluster, v).get("preempting_for")
    assert wait_done(team_cluster, v) == "SUCCEEDED", tclient.get_job_logs(v)[-2000:]
    log = tclient.get_job_logs(v)
    assert "stopping at checkpoint" not in log and "Resuming from" not in log, log[-2000:]
    runs = steps_of(run_dir(team_cluster, v))
    assert runs == {1: list(range(1, 91))}, runs
    assert row(team_cluster, high)["status"] == "STOPPED"
    for j in (keep, fill):
        cli_on(team_cluster, "stop", j)

"""The queue through a restart or a crash of the head's Ray (fake GPUs, clusters of the tests' own):
it keeps its backlog and resumes the running job; the old session's runners never act in the new
one; a finished job outlives Ray's job table. The tests that restart or crash the head share one
cluster of this file's own (``restartable``: started once, not once a test; each test leaves it
restarted and running, and the factory starts it again if one left it down); the retention test has
a head with its own settings. This file is a unit of its own for the test processes (tests/units.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import (FakeGpuCluster, admitted_time, cli_json, cli_on, log_of, log_so_far, send_on, standby_in_ray,
                      view, wait_done, waiting_line, wait_until)

WHOLE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=2")


def test_finished_jobs_outlive_rays_job_table(fresh_clusters, workdir):
    """With a retention of 0 s the queue deletes a finished job from Ray's table at once; `rayjobs
    list`, `status` and `logs` still show it, from the queue's history. (Its head's settings are its
    own: fresh, so it is stopped once the test ends, not kept idle beside the shared one.)"""
    c = fresh_clusters.get(((2, 6),), env={"RAYJOBS_RETENTION_S": "0", "RAYJOBS_PRUNE_EVERY_S": "1"}, fresh=True)
    sid = send_on(c, *WHOLE, "+fake.steps=3")
    assert wait_done(c, sid, timeout=120) == "SUCCEEDED", (view(c, sid), log_so_far(c, sid)[-2000:])
    wait_until(lambda: sid not in {j.submission_id for j in c.client().list_jobs()}, 60, "Ray to forget the job")
    wait_until(lambda: view(c, sid)["pruned"], 30, "the queue's record to say Ray pruned it")  # marked once the prune returns
    rows = {r["id"]: r for r in cli_json(c, "list")}
    assert rows[sid]["status"] == "SUCCEEDED" and rows[sid]["step"] == 3 and rows[sid]["score"] > 0.8, rows.get(sid)
    st = cli_on(c, "status", sid[:-1], "--json")
    assert st.returncode == 0 and json.loads(st.stdout)["status"] == "SUCCEEDED", st.stderr
    logs = cli_on(c, "logs", sid)
    assert logs.returncode == 0 and "step:3 - " in logs.stdout, logs.stderr
    t = cli_on(c, "tail", sid)
    assert t.returncode == 0 and "step:3 - " in t.stdout and "from the queue's history" in t.stderr


@pytest.fixture
def restartable(clusters: Any) -> FakeGpuCluster:
    """The 1-node cluster (2 fake GPUs) the head-restart tests of this file share, settled: nothing
    of a test before waits or runs. A test stops, crashes and starts its head as it needs."""
    return clusters.get(((2, 6),), own="head_restart")


def test_head_restart_keeps_the_queue_and_resumes_the_running_job(restartable, workdir):
    c = restartable
    one = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1", "+fake.hold_gpus=true")
    ckpt = ["trainer.save_freq=2", "+fake.step_s=1.5", "rayjobs.max_retries=1"]
    running = send_on(c, *one, "+fake.steps=20", *ckpt)  # (30 s: still training when the head goes)
    doomed = send_on(c, *one, "+fake.steps=200", "+fake.step_s=1")  # no retry left
    later = [send_on(c, *WHOLE, "+fake.steps=2", "+fake.hold_gpus=true") for _ in range(2)]
    wait_until(lambda: "local_global_step_folder" in log_so_far(c, running), 120, "a checkpoint of the running job")
    wait_until(lambda: "step:1 - " in log_so_far(c, doomed), 60, "the second job to run")
    assert [waiting_line(c).get(i) for i in later] == [1, 2]
    c.stop()  # the head's Ray goes down: its job table and the queue actor with it
    c.start(queue=False)  # `ray start` by hand, as on a cluster rayjobs did not start: no queue
    # any rayjobs command brings the queue back; it reloads the backlog from the store
    r = cli_on(c, "list", "--json", timeout=180)
    assert r.returncode == 0, r.stderr
    assert {running, doomed, *later} <= {row["id"] for row in json.loads(r.stdout)}
    assert wait_done(c, running, timeout=240) == "SUCCEEDED", log_so_far(c, running)[-2000:]
    log = log_of(c, running)
    assert "Resuming from" in log and "attempt 2 of run" in log, log[-2000:]
    # attempt 1's log is the old Ray session's: status says where it stays (issue 28 item 5)
    st = cli_on(c, "status", running).stdout
    m = re.search(r"attempt 1: lost with the head's Ray \(found at [^)]+\); its log stays on the head: (\S+)", st)
    assert m, st
    assert "attempt 1 of run" in Path(m.group(1)).read_text(), m.group(1)
    for i in later:
        assert wait_done(c, i, timeout=180) == "SUCCEEDED", log_so_far(c, i)[-1500:]
    starts = [admitted_time(c, i) for i in later]
    assert starts[0] < starts[1], starts
    rows = {row["id"]: row for row in cli_json(c, "list")}
    assert all(rows[i]["status"] == "SUCCEEDED" for i in (running, *later))
    assert (rows[doomed]["status"], rows[doomed]["cause"]) == ("FAILED", "cluster restarted"), rows[doomed]
    assert f"{doomed} " in (out := cli_on(c, "list").stdout) and "FAILED (cluster restarted)" in out
    st = cli_on(c, "status", doomed)
    assert "status: FAILED (cluster restarted)" in st.stdout, st.stdout + st.stderr
    assert doomed not in {j.submission_id for j in c.client().list_jobs()}  # never resubmitted


def runners_of(sid: str) -> list[int]:
    """PIDs of rayjobs runners (``python3 -m rayjobs.oncluster.runner``) of job ``sid`` on this host
    (its command line names the job: the trainer's experiment_name)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            if b"rayjobs.oncluster.runner" in cmd and sid.encode() in cmd:
                found.append(int(d.name))
        except OSError:
            continue
    return found


def test_a_crashed_heads_runners_never_act_in_the_new_session(restartable, workdir):
    """The head's Ray killed hard (its own processes by PID, as restart_head on the GPU machine
    does): the old session's job runners live on. The held runner of the pre-started job must not
    take its job's next admission (seen on the H200: two trainers for one GPU, the second failed
    'Total available GPUs 0'), and the running job's runner must not retry outside any Ray job."""
    from rayjobs.client import headprocs

    c = restartable
    ckpt = ["trainer.save_freq=2", "+fake.step_s=1.0", "rayjobs.max_retries=2", "+fake.hold_gpus=true"]
    running = send_on(c, *WHOLE, "+fake.steps=20", *ckpt)  # (20 s: still training when the head dies, under load)
    queued = send_on(c, *WHOLE, "+fake.steps=2", "+fake.hold_gpus=true")
    wait_until(lambda: "local_global_step_folder" in log_so_far(c, running), 120, "a checkpoint of the running job")
    wait_until(lambda: standby_in_ray(c) == [queued], 90, "the waiting job to be pre-started")
    wait_until(lambda: runners_of(queued), 60, "the pre-started job's runner to hold")
    old_runners = {sid: runners_of(sid) for sid in (running, queued)}
    assert all(old_runners.values()), old_runners
    tail = subprocess.Popen([sys.executable, "-m", "rayjobs.cli", "tail", running, "--plain"], env=c.client_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tailed: list[str] = []
    reader = threading.Thread(target=lambda: tailed.extend(tail.stdout), daemon=True)
    reader.start()
    wait_until(lambda: any("checkpoint saved: step" in ln for ln in tailed), 60, "the tail to follow the job")
    # a crash of the head's Ray: only the processes that name its temp dir (gcs, raylet, dashboard..)
    head = headprocs.pids_naming(str(c.root / "ray0"))
    for pid in head:
        os.kill(pid, signal.SIGKILL)
    c.start(queue=False)
    r = cli_on(c, "list", "--json", timeout=180)  # brings the queue back
    assert r.returncode == 0, r.stderr
    # the old session's runners end by themselves, without starting anything (a few s: their checks)
    wait_until(lambda: not any(p in runners_of(s) for s, ps in old_runners.items() for p in ps), 60,
               f"the old session's runners to end: {old_runners}")
    assert wait_done(c, running, timeout=300) == "SUCCEEDED", log_so_far(c, running)[-2000:]
    assert wait_done(c, queued, timeout=180) == "SUCCEEDED", log_so_far(c, queued)[-2000:]
    assert "attempt 1 of run" in log_so_far(c, queued), log_so_far(c, queued)[-2000:]  # its only trainer
    assert [p.name for p in _run_dir(c, queued).glob("metrics.*.jsonl")] == ["metrics.1.jsonl"]
    # the running job: its attempts are the first one (cut by the crash) and the new session's,
    # never one started by its old runner after the crash
    files = sorted(p.name for p in _run_dir(c, running).glob("metrics.*.jsonl"))
    assert files == ["metrics.1.jsonl", "metrics.2.jsonl"], files
    assert list(view(c, running)["attempts"]) == [1, 2], view(c, running)
    # a tail started before the crash follows the job through it to its end
    try:
        tail.wait(timeout=120)
    finally:
        tail.kill()
    reader.join(10)
    out = "".join(tailed)
    assert tail.returncode == 0 and "attempt 2 of run" in out, out[-3000:]


def _run_dir(c: FakeGpuCluster, sid: str) -> Path:
    """The job's run dir, from its runner's line ``... (0 retries left; metrics: DIR/metrics.N.jsonl)``."""
    ln = next(ln for ln in log_so_far(c, sid).splitlines() if "metrics: " in ln and "[rayjobs] attempt" in ln)
    return Path(ln.split("metrics: ", 1)[1].rstrip(")")).parent


def test_an_ended_jobs_log_is_shown_after_a_restart_of_the_heads_ray(restartable, workdir):
    """Jobs that ended before the head's Ray restarted: Ray serves only the new session's logs, and
    this laptop kept nothing of them. `logs`/`tail` show the whole log (its file is readable here)
    and, once that is gone too, the end its runner kept on the storage root, saying where the whole
    log stays; `status` of the FAILED one keeps its failures and error (issue 45 item 1)."""
    from rayjobs import ledger

    c = restartable
    ok = send_on(c, *WHOLE, "+fake.steps=3")
    bad = send_on(c, *WHOLE, "+fake.config_error=true")
    assert (wait_done(c, ok, timeout=120), wait_done(c, bad, timeout=120)) == ("SUCCEEDED", "FAILED")
    assert ledger.kept(ok) is None and ledger.kept(bad) is None
    c.stop()
    c.start()
    logs = cli_on(c, "logs", ok)
    assert logs.returncode == 0 and "step:3 - " in logs.stdout and "yet" not in logs.stderr, logs.stdout + logs.stderr
    assert f"its whole log is read from {c.root}/ray0/session_" in logs.stderr, logs.stderr
    st = cli_on(c, "status", bad)
    assert "\nfailures: \n  attempt 1: config error" in st.stdout and "\nerror: " in st.stdout, st.stdout + st.stderr
    for f in (c.root / "ray0").glob(f"session_*/logs/job-driver-{ok}.log"):
        f.unlink()  # as on a head machine replaced: only the storage root is left
    t = cli_on(c, "tail", ok)
    assert t.returncode == 0 and "step:3 - " in t.stdout, t.stdout + t.stderr
    assert re.search(rf"the last \d+ lines its runner kept on the storage root \(/\S+/runs/\S+/log\.{ok}\.tail\)", t.stderr), t.stderr
    assert f"the whole log stays at {c.root}/ray0/session_" in t.stderr and "from the queue's history" in t.stderr

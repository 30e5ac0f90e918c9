"""The backlog queue on real Ray clusters (fake GPUs): a waiting job costs a record, not a process;
the queue survives a restart of the head's Ray; the store survives a writer cut off mid-write; two
clients submitting at once each get their jobs queued, once, in order."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import (FakeGpuCluster, cli_json, cli_on, log_of, send_on, submit_on, view, wait_done,
                      wait_until)

from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State
from rayjobs.oncluster.store import QueueStore

WHOLE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=2")
#: The budget of the issue: 500 waiting jobs grow the head by < 50 MB, no process per job.
MB_PER_WAITING_JOB = 50 / 500


def line(c: FakeGpuCluster) -> dict[str, int]:
    """{id: place in line} of the jobs waiting in the queue (its API: GET /v1/jobs?status=QUEUED)."""
    return {v["submission_id"]: int(v["queue_position"]) for v in c.queue().jobs(status=["QUEUED"])}


def _transient(pid: int) -> bool:
    """Ray's job supervisor checks each job's driver with ``while kill -s 0 PID; do sleep 1; done``:
    its ``sleep`` comes and goes every second, whatever the backlog (not a cost of a job)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x001\x00"
    except OSError:
        return True


def footprint(cluster: FakeGpuCluster) -> tuple[int, float]:
    """(processes, MB of RSS) of every process of the cluster."""
    pids = [p for p in cluster.pids() if not _transient(p)]
    kb = 0
    for p in pids:
        try:
            kb += next(int(ln.split()[1]) for ln in Path(f"/proc/{p}/status").read_text().splitlines()
                       if ln.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return len(pids), kb / 1024


def settled_footprint(cluster: FakeGpuCluster, seconds: float = 6.0) -> tuple[int, float]:
    """The footprint once short-lived processes (a request job, Ray's idle workers) have gone."""
    time.sleep(seconds)
    return min((footprint(cluster) for _ in range(3)), key=lambda f: f[0])


def processes(cluster: FakeGpuCluster) -> dict[int, str]:
    """What runs, for a failure's message."""
    out = {}
    for p in cluster.pids():
        try:
            out[p] = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:80].decode(errors="replace")
        except OSError:
            pass
    return out


def submit(c: FakeGpuCluster, *overrides: str) -> str:
    """One job of the verl stand-in, sent as `python -m rayjobs.submit` does; its id."""
    return send_on(c, *overrides)


def sweep(c: FakeGpuCluster, *args: str) -> list[str]:
    """``python -m rayjobs.submit -m +exp=fake_ppo ARGS`` (a sweep), as a user runs it; its ids."""
    r = submit_on(c, "-m", "+exp=fake_ppo", *args, cwd=Path.cwd(), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def standby_in_ray(c: FakeGpuCluster) -> list[str]:
    """The ids of the jobs the queue pre-started (tagged, not ended) that Ray lists."""
    from rayjobs.shared import STANDBY_KEY

    return [j.submission_id for j in c.client().list_jobs()
            if (j.metadata or {}).get(STANDBY_KEY) and str(j.status).split(".")[-1] in ("PENDING", "RUNNING")]


def test_200_waiting_jobs_cost_records_not_processes(one_node, workdir):
    c = one_node
    blocker = submit(c, *WHOLE, "+fake.hold_gpus=true", "+fake.steps=1", "+fake.hold_s=900")
    wait_until(lambda: blocker in {j.submission_id for j in c.client().list_jobs()}, 60, "the blocker to start")
    idle = settled_footprint(c)
    # The first waiting job is pre-started (the queue's standby): one job's processes, whatever the backlog.
    first = [submit(c, *WHOLE, "+fake.steps=1", "trainer.total_epochs=1")]
    wait_until(lambda: standby_in_ray(c) == first, 60, "the first waiting job to be pre-started")
    before, procs_before = settled_footprint(c), processes(c)
    standby = (before[0] - idle[0], before[1] - idle[1])
    assert standby[0] <= 8 and standby[1] < 300, f"the pre-started job costs {standby} (processes, MB)"
    ids = first + sweep(c, *WHOLE, "+fake.steps=1", "trainer.total_epochs=range(2,201)")
    assert len(ids) == 200 and len(set(ids)) == 200
    got = wait_until(lambda: (lambda x: x if len(x) == 200 else None)(line(c)), 60, "200 waiting jobs")
    assert [got[i] for i in ids] == list(range(1, 201))  # submission (sweep point) order
    after = settled_footprint(c)
    grew_procs, grew_mb = after[0] - before[0], after[1] - before[1]
    new = sorted(set(processes(c).values()) - set(procs_before.values()))
    assert grew_procs <= 0, f"{grew_procs} more processes for 199 more waiting jobs ({before} -> {after}): {new}"
    assert grew_mb < 200 * MB_PER_WAITING_JOB, f"the head grew by {grew_mb:.1f} MB for 199 more waiting jobs"
    assert standby_in_ray(c) == first  # still one, the first
    in_ray = {j.submission_id for j in c.client().list_jobs()}
    assert not set(ids[1:]) & in_ray  # the others are nothing in Ray: a record each, on disk
    store = QueueStore(c.storage / "queue" / "default")
    assert all(store.get(i).state == State.WAITING for i in ids)
    # stop them all while queued: they never start
    r = cli_on(c, "stop", "--sweep", ids[1].rsplit("-", 1)[0], *first, "--wait", "60", timeout=300)
    assert r.returncode == 0, r.stderr
    assert all(ln.endswith(" STOPPED") for ln in r.stdout.strip().splitlines()), r.stdout[-500:]
    assert len(r.stdout.strip().splitlines()) == 200, r.stdout[-500:]
    assert all(store.get(i).status == "STOPPED" for i in ids)
    for i in set(ids) & {j.submission_id for j in c.client().list_jobs()}:  # the pre-started one(s)
        assert "[rayjobs] attempt" not in _log(c, i)  # never trained


def test_the_next_waiting_job_is_pre_started_and_shows_queued_until_admitted(one_node, workdir):
    c = one_node
    blocker = submit(c, *WHOLE, "+fake.hold_gpus=true", "+fake.steps=1", "+fake.hold_s=900")
    ids = [submit(c, *WHOLE, "+fake.steps=2", "+fake.hold_gpus=true", f"trainer.total_epochs={k}") for k in (1, 2, 3)]
    wait_until(lambda: standby_in_ray(c) == ids[:1], 90, "the first waiting job to be pre-started")
    # in Ray (PENDING while Ray sets up its driver), then RUNNING: held before its trainer
    wait_until(lambda: str(c.client().get_job_status(ids[0])) == "RUNNING", 60, "the pre-started job to run in Ray")
    rows = {r["id"]: r for r in cli_json(c, "list")}
    assert [(rows[i]["status"], rows[i]["queue_position"]) for i in ids] == [("QUEUED", 1), ("QUEUED", 2), ("QUEUED", 3)]
    st = cli_json(c, "status", ids[0])
    assert (st["status"], st["queue_position"]) == ("QUEUED", 1), st
    jobs = cli_json(c, "cluster")["jobs"]
    assert (jobs.get("QUEUED"), jobs.get("RUNNING")) == (3, 1), jobs  # the blocker runs; three wait
    assert "[rayjobs] attempt" not in _log(c, ids[0])

    # stopped while pre-started: it never trains, and the next one is pre-started instead
    r = cli_on(c, "stop", ids[0], "--wait", "60")
    assert r.returncode == 0 and r.stdout.strip() == f"{ids[0]} STOPPED", (r.stdout, r.stderr)
    wait_until(lambda: standby_in_ray(c) == ids[1:2], 90, "the next waiting job to be pre-started")
    assert "[rayjobs] attempt" not in _log(c, ids[0])

    cli_on(c, "stop", blocker, "--wait", "0")
    for i in ids[1:]:
        assert wait_done(c, i, timeout=180) == "SUCCEEDED", _log(c, i)[-1500:]
        assert "[rayjobs] admitted after" in _log(c, i) and "attempt 1 of run" in _log(c, i)
    assert _admitted(c, ids[1]) < _admitted(c, ids[2])
    assert cli_json(c, "status", ids[0])["status"] == "STOPPED"


def test_head_restart_keeps_the_queue_and_resumes_the_running_job(fresh_clusters, workdir):
    c = fresh_clusters.get(((2, 6),), fresh=True)
    one = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1", "+fake.hold_gpus=true")
    ckpt = ["trainer.save_freq=2", "+fake.step_s=1.5", "rayjobs.max_retries=1"]
    running = submit(c, *one, "+fake.steps=20", *ckpt)  # (30 s: still training when the head goes)
    doomed = submit(c, *one, "+fake.steps=200", "+fake.step_s=1")  # no retry left
    later = [submit(c, *WHOLE, "+fake.steps=2", "+fake.hold_gpus=true") for _ in range(2)]
    wait_until(lambda: "local_global_step_folder" in _log(c, running), 120, "a checkpoint of the running job")
    wait_until(lambda: "step:1 - " in _log(c, doomed), 60, "the second job to run")
    assert [line(c).get(i) for i in later] == [1, 2]
    c.stop()  # the head's Ray goes down: its job table and the queue actor with it
    c.start(queue=False)  # `ray start` by hand, as on a cluster rayjobs did not start: no queue
    # any rayjobs command brings the queue back; it reloads the backlog from the store
    r = cli_on(c, "list", "--json", timeout=180)
    assert r.returncode == 0, r.stderr
    assert {running, doomed, *later} <= {row["id"] for row in json.loads(r.stdout)}
    assert wait_done(c, running, timeout=240) == "SUCCEEDED", _log(c, running)[-2000:]
    log = log_of(c, running)
    assert "Resuming from" in log and "attempt 2 of run" in log, log[-2000:]
    # attempt 1's log is the old Ray session's: status says where it stays (issue 28 item 5)
    st = cli_on(c, "status", running).stdout
    m = re.search(r"attempt 1: lost with the head's Ray \(found at [^)]+\); its log stays on the head: (\S+)", st)
    assert m, st
    assert "attempt 1 of run" in Path(m.group(1)).read_text(), m.group(1)
    for i in later:
        assert wait_done(c, i, timeout=180) == "SUCCEEDED", _log(c, i)[-1500:]
    starts = [_admitted(c, i) for i in later]
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


def test_a_crashed_heads_runners_never_act_in_the_new_session(fresh_clusters, workdir):
    """The head's Ray killed hard (its own processes by PID, as restart_head on the GPU machine
    does): the old session's job runners live on. The held runner of the pre-started job must not
    take its job's next admission (seen on the H200: two trainers for one GPU, the second failed
    'Total available GPUs 0'), and the running job's runner must not retry outside any Ray job."""
    from rayjobs.client import headprocs

    c = fresh_clusters.get(((2, 6),), fresh=True)
    ckpt = ["trainer.save_freq=2", "+fake.step_s=1.0", "rayjobs.max_retries=2", "+fake.hold_gpus=true"]
    running = submit(c, *WHOLE, "+fake.steps=20", *ckpt)  # (20 s: still training when the head dies, under load)
    queued = submit(c, *WHOLE, "+fake.steps=2", "+fake.hold_gpus=true")
    wait_until(lambda: "local_global_step_folder" in _log(c, running), 120, "a checkpoint of the running job")
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
    assert wait_done(c, running, timeout=300) == "SUCCEEDED", _log(c, running)[-2000:]
    assert wait_done(c, queued, timeout=180) == "SUCCEEDED", _log(c, queued)[-2000:]
    assert "attempt 1 of run" in _log(c, queued), _log(c, queued)[-2000:]  # its only trainer
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
    ln = next(ln for ln in _log(c, sid).splitlines() if "metrics: " in ln and "[rayjobs] attempt" in ln)
    return Path(ln.split("metrics: ", 1)[1].rstrip(")")).parent


def _log(c: FakeGpuCluster, sid: str) -> str:
    """The job's log ("" while it has none: still waiting, not in Ray yet)."""
    try:
        return log_of(c, sid)
    except Exception:  # noqa: BLE001
        return ""


def _admitted(c: FakeGpuCluster, sid: str) -> float:
    """When the queue admitted the job (its record)."""
    return float(view(c, sid)["admitted_at"])


WRITER = r"""
import os, signal, sys
from pathlib import Path
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State
from rayjobs.oncluster.store import QueueStore
s = QueueStore(Path(sys.argv[1]))
big = "x" * 2_000_000
if sys.argv[2] == "cut":  # die between the data write and the rename: the worst moment
    os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
else:
    print("writing", flush=True)
n = 0
while True:
    n += 1
    s.put(JobRecord(id="job-1", state=State.WAITING, spec={"pad": big}, note=str(n)))
"""


def test_a_writer_cut_mid_write_leaves_the_old_record(tmp_path):
    store = QueueStore(tmp_path / "q")
    store.put(JobRecord(id="job-1", state=State.WAITING, spec={}, note="0"))
    w = subprocess.run([sys.executable, "-c", WRITER, str(store.root), "cut"], timeout=60)
    assert w.returncode == -signal.SIGKILL
    assert list(store.stray_tmp())  # what the cut writer left: its half-done version, aside
    assert [(r.id, r.note) for r in store.all().values()] == [("job-1", "0")]  # the old one, whole
    assert not store.unreadable
    for k in range(5):  # and killed at any moment of a stream of 2 MB writes
        w = subprocess.Popen([sys.executable, "-c", WRITER, str(store.root), "run"], stdout=subprocess.PIPE, text=True)
        assert w.stdout.readline().strip() == "writing"
        time.sleep(0.05 * k)
        w.send_signal(signal.SIGKILL)
        w.wait()
        recs = store.all()
        assert list(recs) == ["job-1"] and recs["job-1"].state == State.WAITING, recs  # whole, and once
        assert not store.unreadable
    for t in list(store.stray_tmp()):  # the queue removes these when it starts
        t.unlink()
    assert QueueStore(store.root).all().keys() == {"job-1"}


def test_two_clients_submitting_at_once(one_node, workdir):
    c = one_node
    blocker = submit(c, *WHOLE, "+fake.hold_gpus=true", "+fake.steps=1", "+fake.hold_s=900")
    args = ["-m", "+exp=fake_ppo", *WHOLE, "+fake.steps=1"]
    procs = [subprocess.Popen([sys.executable, "-m", "rayjobs.submit", *args, f"trainer.total_epochs={a}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=c.client_env())
             for a in ("1,2,3", "4,5,6")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-800:] for o in outs]
    ids = [i for out, _ in outs for i in out.split()]
    assert len(ids) == 6 and len(set(ids)) == 6
    positions = wait_until(lambda: (lambda x: x if len(x) == 6 else None)(line(c)), 60, "6 waiting jobs")
    assert set(positions) == set(ids)  # each once
    assert sorted(positions.values()) == [1, 2, 3, 4, 5, 6]
    for points in (ids[:3], ids[3:]):  # each sweep's points stay in order
        assert [positions[i] for i in points] == sorted(positions[i] for i in points)
    c.client().stop_job(blocker)


def test_finished_jobs_outlive_rays_job_table(clusters, workdir):
    """With a retention of 0 s the queue deletes a finished job from Ray's table at once; `rayjobs
    list`, `status` and `logs` still show it, from the queue's history."""
    c = clusters.get(((2, 6),), env={"RAYJOBS_RETENTION_S": "0", "RAYJOBS_PRUNE_EVERY_S": "1"})
    sid = submit(c, *WHOLE, "+fake.steps=3")
    assert wait_done(c, sid, timeout=120) == "SUCCEEDED", (view(c, sid), _log(c, sid)[-2000:])
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

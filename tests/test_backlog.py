"""The backlog queue on real Ray clusters (fake GPUs): a waiting job costs a record, not a process;
the next one is pre-started; the store survives a writer cut off mid-write; two clients submitting
at once each get their jobs queued, once, in order. (A restart of the head's Ray:
tests/test_head_restart.py.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import (FakeGpuCluster, admitted_time, cli_json, cli_on, log_so_far, send_on, standby_in_ray,
                      submit_on, waiting_line, wait_done, wait_until)

from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State
from rayjobs.oncluster.store import QueueStore

WHOLE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=2")
#: The budget of the issue: 500 waiting jobs grow the head by < 50 MB, no process per job.
MB_PER_WAITING_JOB = 50 / 500


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
    got = wait_until(lambda: (lambda x: x if len(x) == 200 else None)(waiting_line(c)), 60, "200 waiting jobs")
    assert [got[i] for i in ids] == list(range(1, 201))  # submission (sweep point) order
    after = settled_footprint(c)
    grew_procs, grew_mb = after[0] - before[0], after[1] - before[1]
    new = sorted(set(processes(c).values()) - set(procs_before.values()))
    assert grew_procs <= 0, f"{grew_procs} more processes for 199 more waiting jobs ({before} -> {after}): {new}"
    assert grew_mb < 200 * MB_PER_WAITING_JOB, f"the head grew by {grew_mb:.1f} MB for 199 more waiting jobs"
    assert standby_in_ray(c) == first  # still one, the first
    in_ray = {j.submission_id for j in c.client().list_jobs()}
    assert not set(ids[1:]) & in_ray  # the others are nothing in Ray: a record each, on disk
    store = QueueStore(c.queue_store)
    assert all(store.get(i).state == State.WAITING for i in ids)
    # stop them all while queued: they never start
    r = cli_on(c, "stop", "--sweep", ids[1].rsplit("-", 1)[0], *first, "--wait", "60", timeout=300)
    assert r.returncode == 0, r.stderr
    assert all(ln.endswith(" STOPPED") for ln in r.stdout.strip().splitlines()), r.stdout[-500:]
    assert len(r.stdout.strip().splitlines()) == 200, r.stdout[-500:]
    assert all(store.get(i).status == "STOPPED" for i in ids)
    for i in set(ids) & {j.submission_id for j in c.client().list_jobs()}:  # the pre-started one(s)
        assert "[rayjobs] attempt" not in log_so_far(c, i)  # never trained


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
    assert "[rayjobs] attempt" not in log_so_far(c, ids[0])

    # stopped while pre-started: it never trains, and the next one is pre-started instead
    r = cli_on(c, "stop", ids[0], "--wait", "60")
    assert r.returncode == 0 and r.stdout.strip() == f"{ids[0]} STOPPED", (r.stdout, r.stderr)
    wait_until(lambda: standby_in_ray(c) == ids[1:2], 90, "the next waiting job to be pre-started")
    assert "[rayjobs] attempt" not in log_so_far(c, ids[0])

    cli_on(c, "stop", blocker, "--wait", "0")
    for i in ids[1:]:
        assert wait_done(c, i, timeout=180) == "SUCCEEDED", log_so_far(c, i)[-1500:]
        assert "[rayjobs] admitted after" in log_so_far(c, i) and "attempt 1 of run" in log_so_far(c, i)
    assert admitted_time(c, ids[1]) < admitted_time(c, ids[2])
    assert cli_json(c, "status", ids[0])["status"] == "STOPPED"


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
    positions = wait_until(lambda: (lambda x: x if len(x) == 6 else None)(waiting_line(c)), 60, "6 waiting jobs")
    assert set(positions) == set(ids)  # each once
    assert sorted(positions.values()) == [1, 2, 3, 4, 5, 6]
    for points in (ids[:3], ids[3:]):  # each sweep's points stay in order
        assert [positions[i] for i in points] == sorted(positions[i] for i in points)
    c.client().stop_job(blocker)

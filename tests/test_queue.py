"""The cluster-side queue on a real 2-node Ray cluster declaring fake GPUs (2 GPU + 6 CPU per node).

The workload is the verl stand-in with ``+fake.hold_gpus=true``: verl's resource check (its
``ValueError`` when GPUs are short), then STRICT_PACK placement groups of {CPU: 3, GPU: 1} bundles.
Start order is read from each runner's ``[rayjobs] admitted after .. s at <UTC time, ms>`` line.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import pytest

from conftest import FakeGpuCluster, cli_on, log_of, send_on, submit_on, view, wait_done, wait_until

from rayjobs.shared import parse_stamp

BACKFILL_S = 10  #: the starvation guard on this cluster (head env RAYJOBS_QUEUE_BACKFILL_S)
RESOURCE_ERROR = "Total available GPUs"
WHOLE_CLUSTER = ("trainer.nnodes=2", "trainer.n_gpus_per_node=2")  # 2 groups of 2 GPUs = all 4


@pytest.fixture
def gpu_cluster(clusters: Any) -> FakeGpuCluster:
    return clusters.get(((2, 6), (2, 6)), env={"RAYJOBS_QUEUE_BACKFILL_S": str(BACKFILL_S)})


@pytest.fixture
def gclient(gpu_cluster: FakeGpuCluster) -> Any:
    return gpu_cluster.client()


def submit(cluster: FakeGpuCluster, *overrides: str) -> str:
    """A job of the verl stand-in that holds its GPUs in placement groups, as verl does."""
    return send_on(cluster, "+fake.hold_gpus=true", *overrides)


def admitted_at(client: Any, sid: str) -> Optional[float]:
    """When the queue admitted the job (its runner's line); None while Ray does not have it yet
    (a submit returns once the queue holds the job, admitted or not, before Ray knows the id)."""
    try:
        log = client.get_job_logs(sid)
    except RuntimeError as e:
        if "does not exist" not in str(e) and "404" not in str(e):
            raise
        return None
    m = re.search(r"\[rayjobs\] admitted after [\d.]+ s at (\S+ \S+ UTC)", log)
    return parse_stamp(m.group(1)) if m else None


def queued(cluster: FakeGpuCluster) -> dict[str, int]:
    """{id: position} of the jobs the queue holds (they are records: Ray does not know them yet)."""
    return {v["submission_id"]: int(v["queue_position"]) for v in cluster.queue().jobs(status=["QUEUED"])}


def test_sweep_of_3x_the_cluster_all_succeed(gpu_cluster, gclient, workdir):
    # 6 points x 2 GPUs = 12 GPUs = 3x the cluster; without the queue, verl's check kills the extra ones
    r = submit_on(gpu_cluster, "-m", "+exp=fake_ppo", "+fake.hold_gpus=true",
                       "trainer.n_gpus_per_node=2", "+fake.steps=2", "+fake.step_s=0.5",
                       "trainer.total_epochs=1,2,3,4,5,6", cwd=workdir)
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()
    assert len(ids) == 6
    seen_queued = wait_until(lambda: queued(gpu_cluster), 90, "a QUEUED job with a position")
    assert min(seen_queued.values()) == 1
    statuses = {i: wait_done(gpu_cluster, i, timeout=240) for i in ids}
    logs = {i: gclient.get_job_logs(i) for i in ids}
    assert all(s == "SUCCEEDED" for s in statuses.values()), {i: logs[i][-800:] for i in ids if statuses[i] != "SUCCEEDED"}
    assert not [i for i in ids if RESOURCE_ERROR in logs[i]]
    waited = [float(re.search(r"\[rayjobs\] admitted after ([\d.]+) s", logs[i]).group(1)) for i in ids]
    assert sum(w > 1.0 for w in waited) >= 2, waited  # they waited in the queue, then ran


def test_never_fitting_job_is_refused_at_submit(gpu_cluster, gclient, workdir):
    before = len(gclient.list_jobs())
    # (the tests' preset waits for capacity, for their GPU-less embedded head: not here)
    r = submit_on(gpu_cluster, "+exp=fake_ppo", "trainer.n_gpus_per_node=4", "rayjobs.wait_for_capacity=false", cwd=workdir)
    assert r.returncode == 2 and r.stdout == ""
    err = r.stderr.strip().splitlines()[-1]
    assert "needs 1 group of 4 GPU + 12 CPU on one node, but no node has 4 GPU + 12 CPU" in err
    assert "2 x (2 GPU + 6 CPU)" in err
    assert len(gclient.list_jobs()) == before


def test_order_priority_stop_and_actor_restart(gpu_cluster, gclient, workdir):
    blocker = submit(gpu_cluster, *WHOLE_CLUSTER, "+fake.steps=1", "+fake.hold_s=600")
    wait_until(lambda: admitted_at(gclient, blocker), 90, "the blocker to start")
    job = lambda *extra: submit(gpu_cluster, *WHOLE_CLUSTER, "+fake.steps=1", "+fake.step_s=0.2", *extra)
    b = job()
    c = job()
    d = job("rayjobs.priority=10")  # later, but higher priority: starts first
    e = job()  # stopped while queued: never starts
    want = {d: 1, b: 2, c: 3, e: 4}
    wait_until(lambda: queued(gpu_cluster) == want, 120, f"positions {want}")

    r = cli_on(gpu_cluster, "stop", e)  # a waiting job: cancelled in the queue
    assert r.returncode == 0 and r.stdout.strip() == f"{e} STOPPED", (r.stdout, r.stderr)
    wait_until(lambda: queued(gpu_cluster) == {d: 1, b: 2, c: 3}, 30, "the stopped job to leave the queue")

    # the queue actor crashes and restarts: it reloads the backlog from its store, the order survives
    kill = gclient.submit_job(entrypoint="python3 -c \"import ray; ray.init(namespace='rayjobs'); "
                                         "ray.kill(ray.get_actor('queue'), no_restart=False)\"")
    wait_until(lambda: str(gclient.get_job_status(kill)) in ("SUCCEEDED", "FAILED"), 90, "the kill job to end")
    assert str(gclient.get_job_status(kill)) == "SUCCEEDED", gclient.get_job_logs(kill)
    wait_until(lambda: queued(gpu_cluster) == {d: 1, b: 2, c: 3}, 60, "the queue to be rebuilt after the restart")

    gclient.stop_job(blocker)
    for sid in (d, b, c):
        assert wait_done(gpu_cluster, sid, timeout=180) == "SUCCEEDED", log_of(gpu_cluster, sid)[-1500:]
    starts = {sid: admitted_at(gclient, sid) for sid in (d, b, c)}
    assert starts[d] < starts[b] < starts[c], starts
    assert e not in {j.submission_id for j in gclient.list_jobs()}  # it never reached Ray
    assert view(gpu_cluster, e)["status"] == "STOPPED"
    assert not [s for s in (b, c, d) if RESOURCE_ERROR in gclient.get_job_logs(s)]


def test_two_node_job_is_not_starved_by_one_gpu_jobs(gpu_cluster, gclient, workdir):
    # 3 of 4 GPUs busy; then a 2-node job (all 4 GPUs); then a batch of later 1-GPU jobs. With
    # backfill only, a 1-GPU job would take every GPU that frees and the 2-node job would wait for
    # the whole stream. Policy: backfill only while it has waited < BACKFILL_S, then hold the rest.
    one_gpu = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1", "+fake.steps=1")
    fillers = [submit(gpu_cluster, *one_gpu, "+fake.hold_s=600") for _ in range(3)]  # (stopped below)
    wait_until(lambda: all(admitted_at(gclient, f) for f in fillers), 90, "the fillers to start")
    big = submit(gpu_cluster, *WHOLE_CLUSTER, "+fake.steps=1")
    stream = [submit(gpu_cluster, *one_gpu, "+fake.hold_s=5") for _ in range(6)]
    # the guard trips while the fillers still hold their GPUs; then they are stopped
    wait_until(lambda: any("no backfill" in str(v.get("message")) for v in gpu_cluster.queue().jobs(status=["QUEUED"])),
               120, "the starvation guard to hold the stream")
    r = cli_on(gpu_cluster, "stop", *fillers)
    assert r.returncode == 0, r.stderr
    assert wait_done(gpu_cluster, big, timeout=240) == "SUCCEEDED", log_of(gpu_cluster, big)[-1500:]
    for s in stream:
        assert wait_done(gpu_cluster, s, timeout=240) == "SUCCEEDED", log_of(gpu_cluster, s)[-1500:]
    t_big = admitted_at(gclient, big)
    after = [s for s in stream if admitted_at(gclient, s) > t_big]
    assert len(after) >= 4, (t_big, {s: admitted_at(gclient, s) for s in stream})
    assert not [s for s in fillers + stream + [big] if RESOURCE_ERROR in gclient.get_job_logs(s)]

"""The GPU gate holds for every way a job ends (issue 45 item 11): no job is admitted onto GPUs while
the last job's memory is still on them -- after a normal end, a failure, a stop now, a stop at a
checkpoint, a halving stop, a preemption, a run lost with the head.

Seen on the H200: at the change from a halved sweep point to the next point, the next was admitted
0.37 s before the GPU was empty; the halved point's worker (1,454 MiB) was still on it. Ray had ended
the worker itself (its trainer was stopped) before the queue's reap looked, and the reap waited only
for GPU memory of pids still in ``/proc``: a CUDA context outlives its process while the driver
tears it down. Every way a trainer is stopped takes that path; a normal end mostly does not (the
reap finds the workers alive and ends them itself).

Two tiers: the queue's gate on the real service with a fake Ray (each way's events in the order the
queue sees them, the reap held until the test lets it go), and a real 1-node cluster whose verl
stand-in's workers hold "GPU memory" (the fake nvidia-smi) that the driver frees 1 s after each
worker's process ended.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from queuefakes import FakeCluster
from schedfakes import node
from test_queueapi import Api, job

from rayjobs.contract.halving import Halving
from rayjobs.oncluster.clusterstate import Observed

H = Halving("critic/score/mean", (2,), keep=0.5)


class GateCluster(FakeCluster):
    """The fake node, plus trainers that left (their drivers dead, their placement groups gone): Ray
    shows their GPUs free, and the queue sees them gone -- before or after Ray's job ends, as the
    test says."""

    def __init__(self, gpus: int) -> None:
        super().__init__([node("n0", gpus)])
        self.left: set[str] = set()

    def observe(self, running: Any) -> Observed:
        from rayjobs.contract import capacity

        used = sum(r.req.gpus for i, r in running.items() if i not in self.left)
        n = self.nodes[0]
        nodes = [capacity.Node(n.id, n.gpus, n.cpus, n.gpus - used, n.cpus - 3 * used)]
        gone = {i for i, r in running.items() if i in self.left and not r.ending}
        # what a preemption would free: each job's GPUs (and 3 CPUs a GPU) on the one node
        held = {i: {"n0": [float(r.req.gpus), 3.0 * r.req.gpus]} for i, r in running.items()}
        return Observed(nodes, {i: [] for i in running}, gone, held)


class GpuMemory:
    """Each job's GPU memory, freed once a reap of it returns (the real reap waits until nvidia-smi
    lists none of it); the reaps wait until the test lets them go."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.calls: list[tuple[str, bool]] = []
        self.freed: dict[str, float] = {}

    def reap(self, job_id: str, spare_live: bool = False) -> list[str]:
        self.calls.append((job_id, spare_live))
        self.go.wait(30)
        self.freed.setdefault(job_id, time.time())
        return []


def spin(api: Api, n: int = 20) -> None:
    for _ in range(n):
        api.svc.tick()
        api.svc.admitter.poll(list(api.svc.state.running), force=True)
        time.sleep(0.005)


def status(api: Api, job_id: str) -> str:
    return api.get(job_id)["status"]


def until(api: Api, pred: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        spin(api, 1)
        if pred():
            return
    raise AssertionError(f"never: {what}")


# --------------------------------------------------------------------------- each way a job ends
def trainer_exits(api: Api, a: str, how: str, cluster: GateCluster) -> None:
    """Its trainer exits (the queue sees it gone), then its Ray job ends ``how``."""
    cluster.left.add(a)
    spin(api)
    api.jobs.end(a, how)


def stop_now(api: Api, a: str, cluster: GateCluster) -> None:
    """``rayjobs stop``: Ray's stop ends the job before the queue sees its trainer gone."""
    assert api.http.post(f"/v1/jobs/{a}/stop").status_code == 200


def stop_at_checkpoint(api: Api, a: str, cluster: GateCluster) -> None:
    """``rayjobs stop --at-checkpoint``: the queue leaves the runner its request; the runner stops it."""
    r = api.http.post(f"/v1/jobs/{a}/stop", params={"mode": "checkpoint", "timeout_s": 30})
    assert r.status_code == 200 and r.json()["outcome"] == "at_checkpoint"
    trainer_exits(api, a, "STOPPED", cluster)


def halved(api: Api, a: str, cluster: GateCluster) -> None:
    """Its sweep's halving: at the rung it ranks below the point before it; stopped at its checkpoint."""
    api.svc.state.reached("s", 2, "s-0", 0.9)  # the sweep's earlier point there
    run_dir = Path(api.get(a)["metadata"]["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.1.jsonl").write_text(json.dumps({"step": 2, "data": {H.metric: 0.1}}) + "\n")
    until(api, lambda: bool(api.get(a)["halved"]), f"{a} halved")
    trainer_exits(api, a, "STOPPED", cluster)


def preempted(api: Api, a: str, cluster: GateCluster) -> None:
    """A job of higher priority waits: the queue stops ``a`` at its checkpoint and requeues it."""
    until(api, lambda: api.get(a)["preempting_for"] == "b", f"{a} preempted for b")
    trainer_exits(api, a, "STOPPED", cluster)


def lost(api: Api, a: str, cluster: GateCluster) -> None:
    """The head's Ray restarted: Ray no longer knows the run."""
    api.jobs.ray.pop(a)


WAYS: list[tuple[str, Callable[..., None], dict[str, Any], str]] = [
    ("a normal end", lambda api, a, c: trainer_exits(api, a, "SUCCEEDED", c), {}, "SUCCEEDED"),
    ("a failure", lambda api, a, c: trainer_exits(api, a, "FAILED", c), {}, "FAILED"),
    ("a stop now", stop_now, {}, "STOPPED"),
    ("a stop at a checkpoint", stop_at_checkpoint, {}, "STOPPED"),
    ("a halving stop", halved, {"sweep": "s", "halving": H.to_json()}, "STOPPED"),
    ("a preemption", preempted, {"preemptible": True}, "QUEUED"),
    ("a run lost with the head", lost, {}, "FAILED"),
]


@pytest.mark.parametrize("way,end,meta,after", WAYS, ids=[w[0] for w in WAYS])
def test_no_job_is_admitted_onto_gpus_the_last_jobs_memory_still_holds(tmp_path, way, end, meta, after):
    mem, cluster = GpuMemory(), GateCluster(2)
    api = Api(tmp_path, cluster=cluster, reap=mem.reap)
    a = "s-1" if "sweep" in meta else "a"
    assert api.http.post("/v1/jobs", json={"jobs": [job(a, (2,), storage=api.storage, **meta)],
                                           "code": api.code}).status_code == 201
    until(api, lambda: status(api, a) == "RUNNING", f"{a} running")
    assert api.queue("b", groups=(2,), priority=10 if way == "a preemption" else 0).status_code == 201
    spin(api)
    assert status(api, "b") == "QUEUED"
    end(api, a, cluster)
    spin(api, 60)
    # its GPUs look free to Ray, but its memory is still on them: b waits for the reap
    assert status(api, "b") == "QUEUED" and a in {j for j, _ in mem.calls}, (way, mem.calls)
    assert api.http.get("/v1/queue").json()["gate"].startswith("cleaning the GPUs"), way
    mem.go.set()
    until(api, lambda: status(api, "b") in ("PENDING", "RUNNING"), "b admitted")
    assert float(api.svc.records["b"].admitted_at) >= mem.freed[a], way
    until(api, lambda: status(api, a) == after, f"{a} {after}")


# --------------------------------------------------------------------------- a real cluster
#: Two fake GPUs' worth of verl's workers, each holding 1,454 MiB that the driver frees 4 s after its
#: process ended (a CUDA context torn down; more than the queue takes to see a trainer gone and reap
#: it, so the reap always finds the workers gone and their memory listed): what it must wait for.
WORKERS = ("+fake.hold_gpus=true", "+fake.actors=true", "+fake.worker_mib=1454", "+fake.worker_free_s=4.0",
           "trainer.n_gpus_per_node=2")


def freed_at(c: Any, job_id: str) -> list[float]:
    """When the fake driver freed each of the job's workers' memory (epoch s)."""
    log = Path(f"{c.apps}.freed")
    rows = [ln.split() for ln in log.read_text().splitlines()] if log.exists() else []
    return [float(t) for _, t, job in rows if job == job_id]


def workers(c: Any, job_id: str) -> int:
    """The job's workers the fake nvidia-smi lists (their memory held)."""
    return sum(1 for ln in c.apps.read_text().splitlines() if f".held-{job_id}-" in ln)


def ended_by_test(c: Any, way: str, a: str) -> None:
    if way == "a stop at a checkpoint":
        c.queue().stop([a], mode="checkpoint", timeout_s=120)


#: A's knobs, B's, A's status once B runs: the ways the old reaper let B in early on this cluster (a
#: normal end and a preemption happened to wait there, and a stop now takes a failure's reap path:
#: the fast tier above holds all seven ways to the rule).
REAL = {
    "a failure": (("+fake.steps=40", "+fake.step_s=0.5", "+fake.fail_at=6"), (), "FAILED"),
    "a stop at a checkpoint": (("+fake.steps=400", "+fake.step_s=0.3", "trainer.save_freq=3"), (), "STOPPED"),
}


@pytest.fixture
def gate_node(clusters: Any) -> Any:
    """A 1-node cluster (2 fake GPUs) of this file's own: its unit runs beside the others'."""
    return clusters.get(((2, 6),), env={"RAYJOBS_REAP_GPU_WAIT_S": "30"})


@pytest.mark.parametrize("way", [*REAL, "a halving stop"])
def test_on_a_real_cluster_the_next_job_waits_until_the_last_ones_gpu_memory_is_freed(gate_node, workdir, way):
    """Each way on a 1-node cluster (2 fake GPUs): A's workers hold the GPUs; B, needing
    both, waits; A ends; B is admitted only once the driver freed A's workers' memory. Before the
    fix B was admitted while it was still listed (measured: a failure 3.9 s, a stop at a checkpoint
    3.8 s, a halving stop 3.1 s before it was freed; a normal end and a preemption happened to wait):
    the reap took the ended workers' pids for no holders of A's."""
    from conftest import send_on, submit_ids, view, wait_done, wait_until

    c = gate_node
    if way == "a halving stop":  # 3 points, one at a time: the middle one is halved at step 2, the last waits for it
        ids = submit_ids(c, "-m", "+exp=fake_ppo", *WORKERS, "+fake.steps=6", "+fake.step_s=0.5", "trainer.save_freq=2",
                         "+fake.score_offset=0.5,0.0,0.4", "rayjobs.halving.metric=critic/score/mean",
                         "rayjobs.halving.rungs=[2]", "rayjobs.halving.keep=0.5", "rayjobs.halving.shuffle=false",
                         cwd=workdir)
        a, b = ids[1], ids[2]
        assert [wait_done(c, i, timeout=300) for i in ids] == ["SUCCEEDED", "STOPPED", "SUCCEEDED"]
        assert view(c, a)["halved"]["rank"] == 2, view(c, a)
    else:
        knobs_a, knobs_b, after = REAL[way]
        a = send_on(c, *WORKERS, *knobs_a)
        wait_until(lambda: workers(c, a) == 2, 120, f"{a}'s workers on the GPUs")
        b = send_on(c, *WORKERS, "+fake.steps=1", *knobs_b)
        ended_by_test(c, way, a)
        assert wait_done(c, b, timeout=180) == "SUCCEEDED", view(c, b)
        wait_until(lambda: view(c, a)["status"] == after, 180, f"{a} {after}")
    freed = freed_at(c, a)
    assert len(freed) == 2, (freed, Path(f"{c.apps}.freed").read_text())
    admitted = float(view(c, b)["admitted_at"])
    assert admitted >= max(freed), f"{b} admitted {max(freed) - admitted:.2f} s before {a}'s GPU memory was freed"

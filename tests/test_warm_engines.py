"""Issue 50 on a real Ray cluster (tests/clusters.py), with a stand-in verl job (tests/workloads/warm_job.py).

* Start-up stamps: with ``rayjobs.env.RAYJOBS_STAMPS=1`` Ray runs rayjobs' setup hook in the job's
  worker processes (the runtime_env the runner passes to verl's ``ray.init``), and each process's
  stamps reach the job's log under its actor's name, none folded by Ray's log dedup.
* Kept engines (rayjobs/oncluster/warmengines.py), with a stand-in engine: a job keeps its engine
  asleep after it ends; the next job of the same model attaches to it (the queue says so at its
  admission), and its step-1 score equals a cold start's of the same seed (no prefix cache, sampling
  state or weights of the job before); a job of another model, admitted, evicts it in the same pass
  and builds its own; ``rayjobs.warm=false`` neither attaches nor keeps one.
"""

from __future__ import annotations

import re

import urllib.parse

from conftest import log_of, send_on, wait_done, wait_until

STAND_IN = "rayjobs.entrypoint=python3 workloads/warm_job.py"


def test_every_worker_process_stamps_its_start_and_cuda_init(one_node, workdir) -> None:
    job = send_on(one_node, STAND_IN, "++rayjobs.env.RAYJOBS_STAMPS=1")
    assert wait_done(one_node, job) == "SUCCEEDED", log_of(one_node, job)[-3000:]
    log = log_of(one_node, job)
    assert "[rayjobs] start-up stamps: worker_process_setup_hook, VLLM_LOGGING_LEVEL" in log
    stamps = re.findall(r"\((?:(\w+) )?pid=(\d+)[^)]*\)\s*\[rayjobs-stamp\] (\d+\.\d+) (.+)", log)
    worker = [s for s in stamps if s[0] == "WorkerDict"]
    pid = worker[0][1]
    events = [e.strip() for _, p, _, e in stamps if p == pid]
    assert events[:2] == ["process started", "ray worker up"], stamps
    assert events[2:] == ["import torch begin", "import torch end", "cuda init begin", "cuda init end"], stamps
    assert re.search(r"step:1 - ", log)


def test_no_stamps_unless_asked(one_node, workdir) -> None:
    job = send_on(one_node, STAND_IN)
    assert wait_done(one_node, job) == "SUCCEEDED", log_of(one_node, job)[-3000:]
    log = log_of(one_node, job)
    assert "[rayjobs-stamp]" not in log and "start-up stamps" not in log
    assert "actor and ref model engine initialized" in log


WARM = (STAND_IN, "rayjobs.preflight=false", "+warm.build_s=1")


def _run(c, model: str, seed: int, *extra: str) -> tuple[str, float]:
    job = send_on(c, *WARM, f"actor_rollout_ref.model.path=/m/{model}", f"+warm.model={model}", f"+warm.seed={seed}", *extra)
    assert wait_done(c, job) == "SUCCEEDED", log_of(c, job)[-3000:]
    log = log_of(c, job)
    return log, float(re.search(r"step:1 - critic/score/mean:([\d.]+)", log).group(1))


def _engines(c) -> dict[str, str]:
    """{name: state} of the actors in the kept engines' namespace (Ray's state API)."""
    q = urllib.parse.urlencode({"filter_keys": "ray_namespace", "filter_predicates": "=",
                                "filter_values": "rayjobs-warm", "detail": "true", "limit": 100})
    return {a["name"]: a["state"] for a in one(c.state(f"/api/v0/actors?{q}"))}


def one(rows):
    return rows if isinstance(rows, list) else []


def test_attach_isolation_eviction_and_opt_out(fresh_clusters, workdir) -> None:
    c = fresh_clusters.get(((1, 6),), fresh=True, env={"RAYJOBS_WARM_IDLE_S": "600"})
    log_a, _ = _run(c, "a", 1)
    assert "rollout engine built (no kept engine engine-" in log_a and "kept after the job" in log_a
    kept = wait_until(lambda: {n: s for n, s in _engines(c).items() if s == "ALIVE"} or None, 30, "a kept engine")
    (name_a,) = kept

    log_b, warm = _run(c, "a", 2)
    assert f"rollout engine attached: {name_a}" in log_b, log_b[-2000:]
    assert "a warm engine of its model is on " in log_b        # the queue's admission note

    log_d, _ = _run(c, "b", 3)                                  # another model: engine a goes at its admission
    assert "rollout engine built" in log_d
    states = wait_until(lambda: (s := _engines(c)) and s.get(name_a) == "DEAD" and s, 30, "engine a evicted")
    (name_b,) = [n for n, st in states.items() if st == "ALIVE"]

    log_c, cold = _run(c, "a", 2, "rayjobs.warm=false")        # a cold start of job B's model and seed
    assert "rollout engine built (the job uses no warm engine)" in log_c and "kept after" not in log_c
    assert cold == warm                                         # nothing of the jobs before reached job B
    wait_until(lambda: _engines(c).get(name_b) == "DEAD", 30, "engine b evicted by the opted-out job")
    assert not [n for n, st in _engines(c).items() if st == "ALIVE"]

"""Issue 50 on a real Ray cluster (tests/clusters.py), with a stand-in verl job (tests/workloads/warm_job.py).

* Start-up stamps: with ``rayjobs.env.RAYJOBS_STAMPS=1`` Ray runs rayjobs' setup hook in the job's
  worker processes (the runtime_env the runner passes to verl's ``ray.init``), and each process's
  stamps reach the job's log under its actor's name, none folded by Ray's log dedup.
"""

from __future__ import annotations

import re

from conftest import log_of, send_on, wait_done

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

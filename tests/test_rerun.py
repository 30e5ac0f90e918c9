"""`rayjobs rerun ID [overrides...]` (issue 16) on a real Ray cluster with fake GPUs: the job's recorded
config with the overrides, checked as a submit is, under a new id, with the job's OWN code (the
queue's durable snapshot, not the edited working dir); `rerun_of` in status; refusals are one line,
exit 2, and nothing reaches Ray or the queue."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeGpuCluster, cli_json, cli_on, job_list, log_of, send_on, view, wait_done

ONE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1", "+fake.hold_gpus=true", "trainer.save_freq=-1", "+fake.steps=3")
EDITED = "[test] the edited fake_verl ran"


@pytest.fixture
def cluster(one_node: FakeGpuCluster) -> FakeGpuCluster:
    """The session's shared 1-node cluster (2 fake GPUs, 6 CPUs)."""
    return one_node


def submit(c: FakeGpuCluster, *overrides: str) -> str:
    """A short 1-GPU job of the verl stand-in, sent in this process (the code of the current dir)."""
    return send_on(c, *ONE, *overrides)


def rerun(c: FakeGpuCluster, *args: str) -> Any:
    return cli_on(c, "rerun", *args, timeout=300)


def log(c: FakeGpuCluster, sid: str) -> str:
    try:
        return log_of(c, sid)
    except Exception:  # noqa: BLE001  (no log: it never started)
        return ""


def steps(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"step:(\d+) - ", text)]


def store(c: FakeGpuCluster) -> Path:
    """The queue's durable store on the cluster's storage root."""
    return c.queue_store


def queue_ids(c: FakeGpuCluster) -> set[str]:
    """Every job the queue holds a record of (its API)."""
    return {v["submission_id"] for v in c.queue().jobs()}


def edit_the_code(workdir: Path) -> None:
    """The working dir's trainer now fails at once, saying so (the old job's code does not)."""
    f = workdir / "workloads" / "fake_verl.py"
    f.write_text(f.read_text().replace("\ndef main() -> int:\n",
                                       f"\ndef main() -> int:\n    print({EDITED!r}, flush=True)\n    raise SystemExit(7)\n", 1))
    assert EDITED in f.read_text()


def test_rerun_runs_the_old_code_with_the_overrides_under_a_new_id(cluster, workdir):
    sid = submit(cluster)
    assert wait_done(cluster, sid) == "SUCCEEDED", log(cluster, sid)[-2000:]
    assert max(steps(log(cluster, sid))) == 3
    edit_the_code(workdir)
    fresh = submit(cluster)  # the edit takes effect for a new submit: the test below can fail
    assert wait_done(cluster, fresh) == "FAILED" and EDITED in log(cluster, fresh)

    dry = rerun(cluster, sid, "fake.steps=6", "+fake.score_offset=0.5", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["rerun_of"] == sid and doc["submit_job"]["metadata"]["rerun_of"] == sid
    assert "fake.steps=6" in doc["submit_job"]["entrypoint"] and "+fake.score_offset=0.5" in doc["submit_job"]["entrypoint"]
    would = doc["submit_job"]["submission_id"]
    assert would not in job_list(cluster.client()) and would not in queue_ids(cluster)  # a dry run queues nothing

    r = rerun(cluster, sid, "fake.steps=6", "+fake.score_offset=0.5")
    assert r.returncode == 0, r.stderr
    new = r.stdout.strip()
    assert new and new != sid and "\n" not in new and f"reruns {sid}" in r.stderr, (r.stdout, r.stderr)
    assert wait_done(cluster, new) == "SUCCEEDED", log(cluster, new)[-2000:]
    text = log(cluster, new)
    assert EDITED not in text, text[-2000:]  # the old job's code snapshot ran, not the edited dir
    assert max(steps(text)) == 6 and "critic/score/mean:np.float64(1.4" in text, text[-2000:]  # 0.1+0.8+0.5
    meta = view(cluster, new)["metadata"]
    assert meta["rerun_of"] == sid and meta["run"] == new and meta["run"] != view(cluster, sid)["metadata"]["run"]
    assert cluster.client().get_job_info(new).metadata["rerun_of"] == sid  # what Ray ran

    # a rerun of the rerun: its own local record is the base (steps=6 and the offset stay)
    r2 = rerun(cluster, new, "fake.steps=4", "--dry-run")
    assert r2.returncode == 0, r2.stderr
    ep = json.loads(r2.stdout)["submit_job"]["entrypoint"]
    assert "fake.steps=4" in ep and "+fake.score_offset=0.5" in ep and "fake.steps=6" not in ep, ep
    assert cli_json(cluster, "status", new).get("rerun_of") == sid


def test_rerun_refuses_bad_input_with_one_line_and_queues_nothing(cluster, workdir):
    sid = submit(cluster)
    assert wait_done(cluster, sid) == "SUCCEEDED", log(cluster, sid)[-2000:]
    before_ray, before_queue = set(job_list(cluster.client())), queue_ids(cluster)
    before_files = {p.name for p in (store(cluster) / "jobs").iterdir()}
    cases = [
        (("no-such-job-xyz",), "no job matches 'no-such-job-xyz'"),
        ((sid, "trainer.no_such_key=1"), "unknown config key 'trainer.no_such_key'"),
        ((sid, "trainer.nnodes=two"), "verl expects an integer"),
        ((sid, "+fake.steps=9"), "An item is already at 'fake.steps'"),
        ((sid, "+exp=fake_ppo"), "changes keys only"),
        ((sid, "rayjobs.max_retries=-1"), "must be 0 or more"),
    ]
    for args, says in cases:
        r = rerun(cluster, *args)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert not r.stdout, (args, r.stdout)

    # the snapshot gone (what the queue's pruning does once the retention ended): refused on the cluster
    key = json.loads((store(cluster) / "jobs" / f"{sid}.json").read_text())["code"]
    shutil.rmtree(store(cluster) / "code" / key)
    r = rerun(cluster, sid, "fake.steps=4")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]  # (a preflight note may precede it)
    assert r.returncode == 2 and len(errors) == 1 and f"the code snapshot of {sid} is gone" in errors[0], r.stderr
    assert not r.stdout, r.stdout

    # nothing reached Ray (rayjobs' own small jobs aside) or the queue (its API, its store)
    assert set(job_list(cluster.client())) == before_ray
    assert queue_ids(cluster) == before_queue
    assert {p.name for p in (store(cluster) / "jobs").iterdir()} == before_files

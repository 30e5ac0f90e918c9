"""A job that can never fit the live cluster is refused before anything is queued: one line, exit 2
-- unless the user says the cluster will grow to fit it (``rayjobs.wait_for_capacity=true``; issue
45 item 3). On a real cluster that declares no GPUs (the embedded head on a laptop is one); the
per-node and node-count refusals are pure tests in test_preflight.py."""

from __future__ import annotations

from conftest import job_list, submit_on, wait_done


def test_a_gpu_job_is_refused_on_a_cluster_without_gpus_unless_it_waits_for_capacity(fresh_clusters, workdir):
    c = fresh_clusters.get(((0, 6),), fresh=True)
    r = submit_on(c, "+exp=fake_ppo", "rayjobs.wait_for_capacity=false", cwd=workdir)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and f"can never run on the cluster at {c.address}: it needs 1 group of 1 GPU + 3 CPU " \
        "on one node, but the cluster has no GPUs; run it on a cluster with GPUs" in errors[0], r.stderr
    assert c.queue().jobs() == [] and job_list(c.client()) == []  # nothing queued, nothing in Ray
    # the user says GPU nodes will join: queued (and, GPU demand not being held back there, run)
    r = submit_on(c, "+exp=fake_ppo", "rayjobs.wait_for_capacity=true", "+fake.steps=1", cwd=workdir)
    assert r.returncode == 0, r.stderr[-3000:]
    job = r.stdout.strip()
    assert "are queued for the capacity it will have (rayjobs.wait_for_capacity=true" in r.stderr, r.stderr
    assert [v["submission_id"] for v in c.queue().jobs()] == [job]
    assert wait_done(c, job, timeout=120) == "SUCCEEDED"

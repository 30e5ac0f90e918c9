"""On a real cluster: the preemption victim that loses the least work, and one W&B run per job."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import log_of, send_on, view, wait_done, wait_until

HOLD = ("+fake.hold_gpus=true", "trainer.n_gpus_per_node=1")


def test_the_victim_is_the_job_that_loses_the_least_work(one_node, workdir) -> None:
    """Two preemptible 1-GPU jobs fill the 2 GPUs: `saver` checkpoints every 2 steps, `young` (admitted
    later: the old order's victim) never. The urgent job preempts `saver`: its resume redoes the least."""
    saver = send_on(one_node, *HOLD, "rayjobs.preemptible=true", "+fake.steps=400", "+fake.step_s=0.25",
                    "trainer.save_freq=2")
    tracker = Path(view(one_node, saver)["metadata"]["checkpoint_dir"]) / "latest_checkpointed_iteration.txt"
    wait_until(tracker.exists, 120, f"{saver}'s first checkpoint")
    young = send_on(one_node, *HOLD, "rayjobs.preemptible=true", "+fake.steps=400", "+fake.step_s=0.25",
                    "trainer.save_freq=1000")
    wait_until(lambda: view(one_node, young)["status"] == "RUNNING", 120, f"{young} to run")
    urgent = send_on(one_node, *HOLD, "rayjobs.priority=10", "+fake.steps=2")
    assert wait_done(one_node, urgent, timeout=240) == "SUCCEEDED"
    # urgent starts once saver's trainer has left its GPU; saver's own Ray job ends (and the queue
    # records the preemption) a moment later, sometimes after urgent's two steps
    s = wait_until(lambda: (lambda v: v if (v.get("preempted") or {}).get("by") == urgent else None)(view(one_node, saver)),
                   60, f"{saver} to be recorded as preempted by {urgent}")
    y = view(one_node, young)
    assert "least work lost" in str(s["preempted"].get("why")), s["preempted"]
    assert not y.get("preempted") and not y.get("preemptions"), y
    for job in (saver, young):  # end them (the session's cluster is shared)
        one_node.queue().stop([job])
        wait_done(one_node, job, timeout=120)


def test_a_retried_job_keeps_one_wandb_run(one_node, workdir) -> None:
    """Both attempts of a job that crashed and resumed log to the same W&B run (offline here)."""
    sid = send_on(one_node, "trainer.logger=[console,wandb]", "+rayjobs.env.WANDB_MODE=offline", "+fake.steps=4",
                  "+fake.fail_at=3", "rayjobs.max_retries=1", "trainer.save_freq=2")
    assert wait_done(one_node, sid, timeout=180) == "SUCCEEDED"
    ids = re.findall(r"wandb run id: (\S+), resume: (\S+)", log_of(one_node, sid))
    assert len(ids) == 2 and ids[0] == ids[1] and ids[0][0] != "-" and ids[0][1] == "allow", ids

"""Retries that mean progress (issue 16), on the embedded Ray head with the verl stand-in: a
trainer killed by hand (the job's driver) resumes from its checkpoint; a save cut off by SIGKILL is
never the resume point; an attempt that exits 0 without a step is not a success; a new checkpoint
resets the retry budget; config errors and the user's reward function are not retried; each
failure's cause is one line in the log and in ``rayjobs status``. Plus the pure parts: the
classification, the bounded read of an attempt's log, moving a half-written save aside."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any, Optional

import pytest
from conftest import rayjobs_cli, rayjobs_submit, wait_terminal, wait_until

from rayjobs.oncluster import attemptlog, checkpointwatch, failurecause

BASE = ("+exp=fake_ppo",)


def submit(workdir: Path, *args: str) -> str:
    r = rayjobs_submit(*BASE, *args, cwd=workdir, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def log(client: Any, sid: str) -> str:
    try:
        return client.get_job_logs(sid)
    except Exception:  # noqa: BLE001 (not in Ray yet)
        return ""


def status_json(sid: str) -> dict[str, Any]:
    r = rayjobs_cli("status", sid, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def settled(sid: str) -> dict[str, Any]:
    """``status --json`` once the queue says the job ended: its word follows Ray's within one poll."""
    return wait_until(lambda: (lambda r: r if r["status"] in ("SUCCEEDED", "FAILED", "STOPPED") else None)(
        status_json(sid)), 30, f"the queue to say {sid} ended")


def first_steps(text: str) -> list[int]:
    """The first step of each attempt (the step after each ``attempt N of run`` line)."""
    out, want = [], False
    for line in text.splitlines():
        if "[rayjobs] attempt " in line and " of run " in line:
            want = True
        m = re.search(r"step:(\d+) - ", line)
        if want and m:
            out.append(int(m.group(1)))
            want = False
    return out


def trainer_pid(sid: str) -> Optional[int]:
    """The trainer (the job's Ray driver): the fake_verl process carrying this job's mark."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if b"fake_verl.py" in cmd and f"RAYJOBS_JOB={sid}\0".encode() in env:
            return int(d.name)
    return None


def test_a_killed_trainer_resumes_from_its_checkpoint_as_a_new_attempt(cluster, client, workdir):
    # 30 steps: the kill lands ~1-3 s after step 4 on a loaded machine, long before the end (12 s)
    sid = submit(workdir, "rayjobs.max_retries=1", "trainer.save_freq=2", "+fake.steps=30", "+fake.step_s=0.4")
    wait_until(lambda: "checkpoint saved: step 4" in log(client, sid), 120, "a checkpoint at step 4")
    pid = wait_until(lambda: trainer_pid(sid), 30, "the trainer's pid")
    os.kill(pid, signal.SIGKILL)
    assert wait_terminal(client, sid, 180) == "SUCCEEDED", log(client, sid)
    text = log(client, sid)
    assert "attempt 1 failed: killed: the trainer got SIGKILL" in text
    m = re.search(r"Resuming from \S*global_step_(\d+)", text)
    assert m and int(m.group(1)) >= 4, text
    assert first_steps(text) == [1, int(m.group(1)) + 1]  # no step lost past the checkpoint
    row = settled(sid)
    assert row["status"] == "SUCCEEDED" and row["attempt"] == 2
    assert row["failures"] == ["attempt 1: killed: the trainer got SIGKILL (the host's OOM killer, or a kill from outside)"]


def test_a_save_cut_off_by_sigkill_is_never_the_resume_point(cluster, client, workdir):
    sid = submit(workdir, "rayjobs.max_retries=1", "trainer.save_freq=2", "+fake.steps=6", "+fake.die_in_save=4")
    assert wait_terminal(client, sid, 180) == "SUCCEEDED", log(client, sid)
    text = log(client, sid)
    assert "attempt 1 failed: killed" in text
    assert "a checkpoint save was cut off: moved global_step_4 -> .incomplete/global_step_4." in text
    assert re.search(r"Resuming from \S*/global_step_2\b", text), text
    assert first_steps(text) == [1, 3]
    ckpt = Path(client.get_job_info(sid).metadata["checkpoint_dir"])
    aside = list((ckpt / ".incomplete").iterdir())
    assert len(aside) == 1 and (aside[0] / "model_world_size_1_rank_0.pt").exists()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "6"


def test_a_resume_that_trains_no_step_is_not_a_success(cluster, client, workdir):
    sid = submit(workdir, "rayjobs.max_retries=2", "trainer.save_freq=2", "+fake.steps=6", "+fake.fail_at=3",
                 "+fake.zero_on_resume=true")
    assert wait_terminal(client, sid, 180) == "FAILED", log(client, sid)
    text = log(client, sid)
    assert "attempt 2 failed: no progress: exited 0 at step 2 of 6 without training a step" in text
    assert text.count("[rayjobs] attempt 3 of run") == 0  # not retried: it would do the same again
    row = settled(sid)
    assert row["cause"].startswith("no progress: exited 0 at step 2 of 6")
    assert [f.split(": ", 2)[1] for f in row["failures"]] == ["RuntimeError", "no progress"]
    assert row["failures"][0] == "attempt 1: RuntimeError: fake crash at step 3"
    tail = rayjobs_cli("tail", sid, "--plain")
    assert tail.returncode == 1 and f"{sid} FAILED: no progress: exited 0 at step 2 of 6" in tail.stderr, tail.stderr
    listed = rayjobs_cli("list")
    assert re.search(rf"^{re.escape(sid)} .*FAILED \(no progress\)", listed.stdout, re.M), listed.stdout


def test_a_new_checkpoint_resets_the_retry_budget(cluster, client, workdir):
    # crashes at steps 3, 6 and 9, each after a new checkpoint: three failures, one retry allowed
    sid = submit(workdir, "rayjobs.max_retries=1", "trainer.save_freq=2", "+fake.steps=10", "+fake.fail_every=3")
    assert wait_terminal(client, sid, 240) == "SUCCEEDED", log(client, sid)
    text = log(client, sid)
    assert text.count("the retry budget starts again") == 2
    assert first_steps(text) == [1, 3, 7, 9]


@pytest.mark.parametrize("args, kind", [
    (("+fake.config_error=true",), "config error: omegaconf.errors.ConfigAttributeError"),
    (("+fake.reward_error=true", "reward.custom_reward_function.path=my_reward.py"), "error in your reward function: KeyError"),
])
def test_errors_in_the_run_itself_are_not_retried(cluster, client, workdir, args, kind):
    (workdir / "my_reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                          "    return float(ground_truth['label'] in solution_str)\n")
    sid = submit(workdir, "rayjobs.max_retries=2", *args)
    assert wait_terminal(client, sid, 180) == "FAILED", log(client, sid)
    text = log(client, sid)
    assert f"attempt 1 failed: {kind}" in text and "[rayjobs] attempt 2 of run" not in text
    assert "job failed: " in text and "not retried" in text
    got = settled(sid)
    assert got["status"] == "FAILED" and got["cause"].startswith(kind), got
    if "reward" in kind:
        assert "(my_reward.py:2)" in text


# --------------------------------------------------------------------------- the pure parts
NODE_DIED = """Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/verl/trainer/ppo/ray_trainer.py", line 1021, in fit
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
	class_name: WorkerDict
The actor is dead because its node has died. Node Id: 5a1c
"""


@pytest.mark.parametrize("code, tail, kind, retry", [
    (1, NODE_DIED, "node or worker lost", True),
    (1, "ray.exceptions.RayTaskError: Task failed because the node it was running on is dead or unavailable. Node IP: "
        "10.0.0.2, node ID: ab. This can happen if the node was preempted, had a hardware failure, or its raylet crashed",
     "node or worker lost", True),
    (1, "ray.exceptions.ActorDiedError: Actor died by preemption.", "preempted", True),
    (1, "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, "
        "ray::W.__init__() torch.OutOfMemoryError: CUDA out of memory.", "GPU out of memory", True),
    (1, "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "out of memory (host)", True),
    (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "GPU out of memory", True),
    (1, "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", "NCCL/driver error", True),
    (1, "omegaconf.errors.ConfigAttributeError: Key 'foo' is not in struct", "config error", False),
    (1, "ValueError: Total available GPUs 1 is less than total desired GPUs 2", "config error", False),
    (1, 'File "/tmp/job/my_reward.py", line 9, in compute_score\nKeyError: \'x\'', "error in your reward function", False),
    (-9, "step:3 - a:1", "killed", True),
    (-15, "", "preempted", True),
    (1, "RuntimeError: fake crash at step 2", "error", True),
    (2, "", "error", True),
])
def test_causes_are_classified(code, tail, kind, retry):
    c = failurecause.classify(code, tail)
    assert (c.kind, c.retry) == (kind, retry)
    assert "\n" not in c.line() and len(c.line()) < 220


def test_the_reward_frame_is_found_by_the_configured_file_name():
    tail = 'File "/ray/session/runtime_resources/working_dir_files/x/rw.py", line 4, in score\nZeroDivisionError: division by zero'
    assert failurecause.classify(1, tail, reward_files=["rw.py"]).line() == \
        "error in your reward function: ZeroDivisionError: division by zero (rw.py:4)"
    assert failurecause.classify(1, tail).kind == "error"


def test_an_attempts_log_is_read_from_its_start_and_bounded(tmp_path):
    p = tmp_path / "job-driver-x.log"
    with p.open("w") as f:
        f.write("Total training steps: 99\nstep:7 - a:1\n")  # an earlier attempt
    start = attemptlog.size(p)
    with p.open("a") as f:
        f.write("\x1b[36m(TaskRunner pid=1)\x1b[0m Total training steps: 50\n")
        for i in range(1, 100_001):  # a 100k-line attempt: only its head and tail are read
            f.write(f"(TaskRunner pid=1) step:{i % 40 + 1} - critic/score/mean:np.float64(0.5)\n")
        f.write("RuntimeError: boom\n")
    out = attemptlog.read_attempt(p, start, None)
    assert out.total_steps == 50 and out.last_step == 40
    assert out.tail.endswith("RuntimeError: boom\n") and len(out.tail) <= attemptlog.TAIL_BYTES
    metrics = tmp_path / "metrics.2.jsonl"
    metrics.write_text('{"step": 41, "data": {}}\n{"step": 4')  # the last line half-written
    assert attemptlog.read_attempt(p, start, metrics).last_step == 41
    assert attemptlog.read_attempt(None, 0, None) == attemptlog.AttemptLog(None, None, "")


def test_a_half_written_save_is_moved_aside_and_complete_ones_stay(tmp_path):
    for n in (2, 4, 6):
        (tmp_path / f"global_step_{n}").mkdir()
    (tmp_path / checkpointwatch.TRACKER).write_text("4")
    moved = checkpointwatch.set_aside_incomplete(str(tmp_path))
    assert len(moved) == 1 and moved[0].startswith("global_step_6 -> .incomplete/global_step_6.")
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_2", "global_step_4"]
    assert checkpointwatch.set_aside_incomplete(str(tmp_path)) == []  # idempotent
    assert checkpointwatch.set_aside_incomplete(str(tmp_path / "none")) == []


def test_only_a_resume_without_a_step_is_no_progress():
    from rayjobs.oncluster.runner import judge

    out = attemptlog.AttemptLog(total_steps=6, last_step=None, tail="")
    assert judge(0, out, None, []) is None  # a first attempt that trains nothing (an evaluation)
    assert judge(0, out, 2, []).kind == "no progress"
    assert judge(0, out, 2, ["trainer.val_only=true"]) is None
    assert judge(0, attemptlog.AttemptLog(6, None, ""), 6, []) is None  # resumed at the end: done
    assert judge(0, attemptlog.AttemptLog(6, 3, ""), 2, []) is None  # trained a step: progress
    assert judge(0, attemptlog.AttemptLog(None, None, ""), 2, []) is None  # not verl-like: exit 0 is all


def test_what_a_failed_attempt_left_is_ended_before_the_retry(cluster, client, workdir):
    sid = submit(workdir, "rayjobs.max_retries=1", "trainer.save_freq=1", "+fake.steps=3", "+fake.fail_at=2",
                 "+fake.orphan=true")
    assert wait_terminal(client, sid, 180) == "SUCCEEDED", log(client, sid)
    text = log(client, sid)
    orphans = [int(p) for p in re.findall(r"orphan pid (\d+)", text)]
    assert len(orphans) == 2, text  # one per attempt
    ended = re.search(rf"\[rayjobs\] ended before the next attempt: pid {orphans[0]} \(python\S*\) SIG(?:TERM|KILL)", text)
    assert ended, text  # attempt 1's orphan (deaf to SIGTERM) is gone before attempt 2 starts
    assert text.index(ended.group(0)) < text.index("[rayjobs] attempt 2 of run")
    wait_until(lambda: not Path(f"/proc/{orphans[1]}").exists(), 60, "the last attempt's orphan reaped by the queue")

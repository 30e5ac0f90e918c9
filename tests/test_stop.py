"""Stop without losing steps (issue 16), on a real Ray cluster with fake GPUs: `rayjobs stop` says
how many steps since the last checkpoint a resume redoes; `rayjobs stop --at-checkpoint` lets the
trainer save its next checkpoint and then stops it (bounded by --timeout); bad input is refused
with one line before anything is stopped. The checkpoint watch of the runner on its own, too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeGpuCluster, cli_json, cli_on, log_of, send_on, view, wait_done, wait_until

from rayjobs.contract.meta import JobMeta
from rayjobs.oncluster import checkpointwatch

ONE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1", "+fake.hold_gpus=true")


@pytest.fixture
def cluster(one_node: FakeGpuCluster) -> FakeGpuCluster:
    """The session's shared 1-node cluster (2 fake GPUs, 6 CPUs)."""
    return one_node


def submit(c: FakeGpuCluster, *overrides: str) -> str:
    """One 1-GPU job of the verl stand-in (holding its GPU as verl does), sent in this process."""
    return send_on(c, *ONE, *overrides)


def log(c: FakeGpuCluster, sid: str) -> str:
    """Its log so far ("" while the queue holds it: no log yet)."""
    try:
        return log_of(c, sid)
    except Exception:  # noqa: BLE001  (not started yet)
        return ""


def steps(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"step:(\d+) - ", text)]


def saved(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"\[rayjobs\] checkpoint saved: step (\d+)", text)]


def stop(c: FakeGpuCluster, *args: str) -> Any:
    return cli_on(c, "stop", *args, timeout=300)


def ray_status(c: FakeGpuCluster, sid: str) -> str:
    return str(c.client().get_job_status(sid))


def test_stop_says_how_many_steps_a_resume_redoes(cluster, workdir):
    sid = submit(cluster, "trainer.save_freq=4", "+fake.steps=400", "+fake.step_s=0.4")
    wait_until(lambda: saved(log(cluster, sid)) and max(steps(log(cluster, sid)), default=0) >= 6, 120,
               "a checkpoint and a few steps past it")
    r = stop(cluster, sid)
    assert r.returncode == 0 and r.stdout.strip() == f"{sid} STOPPED", (r.stdout, r.stderr)
    m = re.search(rf"{sid}: at step (\d+), last checkpoint step (\d+): (\d+) step\(s\) will be redone on resume", r.stderr)
    assert m, r.stderr
    at, ckpt, redo = map(int, m.groups())
    assert ckpt % 4 == 0 and ckpt in saved(log(cluster, sid)) and redo == at - ckpt and 0 <= redo <= 6, m.group(0)


def test_stop_at_checkpoint_stops_right_after_the_next_save(cluster, workdir):
    sid = submit(cluster, "trainer.save_freq=5", "+fake.steps=400", "+fake.step_s=1")
    wait_until(lambda: saved(log(cluster, sid)), 120, "a first checkpoint")
    before = max(saved(log(cluster, sid)))
    r = stop(cluster, sid, "--at-checkpoint", "--wait", "60")
    assert r.returncode == 0 and r.stdout.strip() == f"{sid} STOPPED", (r.stdout, r.stderr)
    assert "stops once the next one is saved" in r.stderr, r.stderr
    text = log(cluster, sid)
    assert "[rayjobs] stop at checkpoint asked" in text, text[-2000:]
    # the next save, or -- asked within a second of a save, before another step -- that one
    m = re.search(r"\[rayjobs\] stopping at checkpoint: (?:checkpoint step (\d+) saved|nothing trained since "
                  r"checkpoint step (\d+))", text)
    assert m, text[-2000:]
    at = int(m.group(1) or m.group(2))
    assert (at > before if m.group(1) else at >= before) and at % 5 == 0, m.group(0)
    # it stopped right after that save: the step under way when the runner saw it, one more on a
    # loaded machine (the watch looks every second; Ray's stop takes a moment), never the next save
    assert max(steps(text)) <= at + 2, (at, max(steps(text)))
    ckpt_dir = next(ln.split(": ", 1)[1] for ln in text.splitlines() if "local_global_step_folder: " in ln)
    assert checkpointwatch.saved_step(str(Path(ckpt_dir).parent)) == at


def test_stop_at_checkpoint_gives_up_after_its_timeout(cluster, workdir):
    sid = submit(cluster, "trainer.save_freq=1000", "+fake.steps=400", "+fake.step_s=0.4")
    wait_until(lambda: steps(log(cluster, sid)), 120, "the first steps")
    t = time.monotonic()
    r = stop(cluster, sid, "--at-checkpoint", "--timeout", "4", "--wait", "60")
    assert r.returncode == 0 and r.stdout.strip() == f"{sid} STOPPED", (r.stdout, r.stderr)
    assert time.monotonic() - t >= 4
    text = log(cluster, sid)
    # the runner's own lines say how it stopped (once seen failing at load 12: exit 15, message cut off)
    assert "no new checkpoint within 4 s; the steps since the start will be redone" in text, \
        [ln for ln in text.splitlines() if "[rayjobs]" in ln or "checkpoint" in ln.lower()][-20:]


def test_stop_refuses_bad_input_with_one_line_and_stops_nothing(cluster, workdir):
    # One job that saves no checkpoints serves every refusal of stop and resume, and the stop by a
    # prefix of its id while a plain `ray.init()` program is connected (a notebook, a benchmark's
    # probe): Ray lists that one as a job without a submission id, and naming jobs by id or prefix
    # must not trip over it (it crashed with a TypeError sorting None with the ids).
    code = f"import ray, time; ray.init(address='{cluster.gcs}'); print('up', flush=True); time.sleep(600)"
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env=cluster.env)
    try:
        sid = submit(cluster, "trainer.save_freq=-1", "+fake.steps=400", "+fake.step_s=0.4")
        plain = cluster.client().submit_job(entrypoint="python3 -c 'import time; time.sleep(300)'")
        assert driver.stdout.readline().strip() == "up"
        wait_until(lambda: any(j.submission_id is None and str(j.status) == "RUNNING"
                               for j in cluster.client().list_jobs()), 60, "Ray to list the plain driver")
        wait_until(lambda: steps(log(cluster, sid)), 120, "the first steps")
        for args, says in [((sid, "--timeout", "5"), "--timeout only goes with --at-checkpoint"),
                           ((sid, "--at-checkpoint", "--timeout", "0"), "--timeout 0: give a number of seconds > 0"),
                           ((sid, "--at-checkpoint"), f"{sid} saves no checkpoints (trainer.save_freq=-1)")]:
            r = stop(cluster, *args)
            assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
            assert not r.stdout
        wait_until(lambda: ray_status(cluster, plain) == "RUNNING", 60, "a plain Ray job to run")
        r = stop(cluster, plain, "--at-checkpoint")
        assert r.returncode == 2 and "has no checkpoint dir rayjobs knows" in r.stderr, r.stderr
        r = cli_on(cluster, "resume", sid)
        assert r.returncode == 2 and "only a stopped or failed job can be resumed" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert view(cluster, sid)["status"] == "RUNNING" and ray_status(cluster, sid) == "RUNNING"  # nothing was stopped
        assert ray_status(cluster, plain) == "RUNNING"
        r = stop(cluster, plain)
        assert r.returncode == 0 and r.stdout.strip() == f"{plain} STOPPED", (plain, r.stdout, r.stderr)
        r = stop(cluster, sid[:-1])  # by a prefix of its id, the plain driver still connected
        assert r.returncode == 0 and r.stdout.strip() == f"{sid} STOPPED", (r.stdout, r.stderr)
        r = stop(cluster, "no-such-job-xyz")
        assert r.returncode == 2 and "no job matches 'no-such-job-xyz'" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    finally:
        driver.terminate()
        driver.wait(timeout=30)
    assert wait_done(cluster, sid) == "STOPPED"
    wait_until(lambda: ray_status(cluster, plain) == "STOPPED", 60, "the plain Ray job to be stopped")
    r = cli_on(cluster, "resume", sid)
    assert r.returncode == 2 and "saved no checkpoint to resume from" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    # nothing queued: neither the queue nor Ray has a resume of it
    assert not [v for v in cluster.queue().jobs() if v["submission_id"].startswith(sid + "-r")]
    assert not [j for j in cluster.client().list_jobs() if (j.submission_id or "").startswith(sid + "-r")]


def test_resume_continues_a_stopped_job_from_its_checkpoint(cluster, workdir):
    # The resume runs the same run (its run dir, its metrics.<attempt>.jsonl files): the stopped
    # job's row must stay its own (attempt 1, the step it stopped at, its score), not take on the
    # resumed job's attempt 2, final step and score, in `rayjobs list --json` and `status --json`.
    total = 45  # (27 s: still training when a stop asked after the first save lands, on a loaded machine)
    sid = submit(cluster, "trainer.save_freq=3", f"+fake.steps={total}", "+fake.step_s=0.6")
    wait_until(lambda: saved(log(cluster, sid)), 120, "a first checkpoint")
    r = stop(cluster, sid, "--at-checkpoint", "--wait", "60")
    assert r.returncode == 0 and r.stdout.strip() == f"{sid} STOPPED", (r.stdout, r.stderr)
    # the next save, or -- asked right after one, before another step -- that one (nothing to lose)
    text = log(cluster, sid)
    m = re.search(r"stopping at checkpoint: (?:checkpoint step (\d+) saved|nothing trained since checkpoint step (\d+))",
                  text)
    assert m, text[-3000:]
    last = max(steps(text))
    assert last < total, last
    # the job's last checkpoint: that one, or -- Ray's stop reaching a loaded machine's trainer seconds
    # later -- a later one (the watch's word is when the stop was asked; the record's, where it ended)
    assert wait_done(cluster, sid) == "STOPPED"  # the queue's record settled (its checkpoint known then)
    v = view(cluster, sid)
    at = v["checkpoint_step"]
    assert v["status"] == "STOPPED" and at is not None and at >= int(m.group(1) or m.group(2)) and at % 3 == 0, (v, m[0])
    assert at < total, at  # stopped before its end: there is something to resume
    before = cli_json(cluster, "status", sid)
    assert before["status"] == "STOPPED" and before["attempt"] == 1 and before["step"] == last, before
    assert before["score"] == pytest.approx(0.1 + 0.8 * last / total) and before["checkpoint_step"] is not None, before

    r = cli_on(cluster, "resume", sid, timeout=300)
    assert r.returncode == 0, r.stderr
    new = r.stdout.strip()
    assert new == f"{sid}-r1" and f"from its checkpoint at step {at}" in r.stderr, (r.stdout, r.stderr)
    # bad input: one line, exit 2, nothing queued (the resume itself, while it waits or runs, too)
    for job, says in [(new, "only a stopped or failed job can be resumed"), ("no-such-job-xyz", "no job")]:
        r = cli_on(cluster, "resume", job)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (job, r.stderr)
    assert wait_done(cluster, new) == "SUCCEEDED", log(cluster, new)[-2000:]
    text = log(cluster, new)
    assert "Resuming from" in text and f"global_step_{at}" in text and "attempt 2 of run" in text, text[-2000:]
    assert steps(text) and steps(text)[0] == at + 1 and max(steps(text)) == total, text[-3000:]  # from the step after the checkpoint on
    st = cli_on(cluster, "status", new, "--json")
    assert st.returncode == 0 and json.loads(st.stdout).get("resumed_from") == sid, st.stdout
    r = cli_on(cluster, "resume", new)
    assert r.returncode == 2 and "SUCCEEDED: nothing to resume" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not [v for v in cluster.queue().jobs() if v["submission_id"].startswith(new + "-r")]
    assert not [j for j in cluster.client().list_jobs() if (j.submission_id or "").startswith(new + "-r")]

    _rows_stay_their_own(cluster, sid, new, before, total)


def _own(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["status"], row["attempt"], row["step"], row["score"], row["checkpoint_step"]


def _rows_stay_their_own(cluster: FakeGpuCluster, sid: str, new: str, before: dict[str, Any], total: int) -> None:
    """The resume ``new`` of ``sid`` ran the same run; ``sid``'s row is still ``before``."""
    run_dir = Path(view(cluster, sid)["metadata"]["run_dir"])  # one run: the resume's metrics are beside its own
    assert view(cluster, new)["metadata"]["run_dir"] == str(run_dir)
    assert {"metrics.1.jsonl", "metrics.2.jsonl"} <= {f.name for f in run_dir.glob("metrics.*.jsonl")}, run_dir
    resumed = cli_json(cluster, "status", new)
    assert (resumed["attempt"], resumed["step"]) == (2, total), resumed  # what the old row must not show
    assert resumed["score"] == pytest.approx(0.1 + 0.8) and resumed["resumed_from"] == sid, resumed

    listed = {row["id"]: row for row in cli_json(cluster, "list")}
    assert _own(listed[new])[:3] == ("SUCCEEDED", 2, total), listed[new]
    assert _own(listed[sid]) == _own(before), (listed[sid], before)
    assert _own(cli_json(cluster, "status", sid)) == _own(before)


# --------------------------------------------------------------------------- the watch on its own
def test_the_watch_logs_complete_checkpoints_and_fires_after_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpointwatch, "POLL_S", 0.05)
    ckpt, run = tmp_path / "ckpt", tmp_path / "run"
    ckpt.mkdir()
    (ckpt / checkpointwatch.TRACKER).write_text("10")
    lines: list[str] = []
    fired: list[str] = []
    checkpointwatch.ask_stop(run, "job-1", 60)  # made before this runner started: stale, dropped
    w = checkpointwatch.CheckpointWatch(str(ckpt), run, "job-1", lines.append, fired.append, since=time.time() + 10)
    w.start()
    time.sleep(0.3)
    assert lines == ["last checkpoint: step 10"] and not fired and not (run / checkpointwatch.STOP_MARK).exists()
    w.since = time.time() - 1
    checkpointwatch.ask_stop(run, "job-2", 60)  # another job's request (same run dir): dropped
    time.sleep(0.3)
    assert not fired
    checkpointwatch.ask_stop(run, "job-1", 60)
    wait_until(lambda: any("stop at checkpoint asked" in ln for ln in lines), 5, "the request to be seen", every=0.05)
    (ckpt / "global_step_20").mkdir()  # a save in progress: the tracker still says 10
    time.sleep(0.3)
    assert not fired
    (ckpt / checkpointwatch.TRACKER).write_text("20")  # verl writes the tracker last
    wait_until(lambda: fired, 5, "the stop", every=0.05)
    w.close()
    assert fired == ["checkpoint step 20 saved"] and "checkpoint saved: step 20" in lines
    assert not (run / checkpointwatch.STOP_MARK).exists()


def test_the_watch_logs_a_save_made_just_before_the_trainer_exits(tmp_path, monkeypatch):
    # A short job's final save lands between two polls: closing the watch still logs it, so
    # status/compare/resume know the checkpoint (it was missing from `rayjobs compare`'s rows).
    monkeypatch.setattr(checkpointwatch, "POLL_S", 60.0)
    lines: list[str] = []
    w = checkpointwatch.CheckpointWatch(str(tmp_path), tmp_path, "j", lines.append, lambda _: None,
                                        since=time.time()).start()
    (tmp_path / checkpointwatch.TRACKER).write_text("4")
    w.close()
    assert lines == ["checkpoint saved: step 4"]
    w.close()  # idempotent: nothing new, nothing logged
    assert lines == ["checkpoint saved: step 4"]


def test_the_watch_fires_at_its_timeout_without_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpointwatch, "POLL_S", 0.05)
    fired: list[str] = []
    w = checkpointwatch.CheckpointWatch(str(tmp_path / "none"), tmp_path, "j", lambda _: None, fired.append,
                                        since=time.time() - 1).start()
    checkpointwatch.ask_stop(tmp_path, "j", 0.3)
    wait_until(lambda: fired, 5, "the stop at the timeout", every=0.05)
    w.close()
    assert fired == ["no new checkpoint within 0.3 s; the steps since the start will be redone"]


def test_a_withdrawn_preemption_is_called_off_and_a_users_request_is_not(tmp_path, monkeypatch):
    """The queue takes back a preemption's request (the job it was for no longer waits): the watch
    says so and never fires. Withdrawing names the job it was for: a user's request stays."""
    monkeypatch.setattr(checkpointwatch, "POLL_S", 0.05)
    lines: list[str] = []
    fired: list[str] = []
    w = checkpointwatch.CheckpointWatch(str(tmp_path / "none"), tmp_path, "j", lines.append, fired.append,
                                        since=time.time() - 1).start()
    checkpointwatch.ask_stop(tmp_path, "j", 0.6, reason="preempted by hi", by="hi")
    wait_until(lambda: any(ln.startswith("preempted by hi: stopping once") for ln in lines), 5, "the request", every=0.05)
    assert not checkpointwatch.withdraw_stop(tmp_path, "j", "other")  # not that preemption's: kept
    assert not checkpointwatch.withdraw_stop(tmp_path, "k", "hi")  # not that job's
    assert checkpointwatch.withdraw_stop(tmp_path, "j", "hi")
    wait_until(lambda: any("called off" in ln for ln in lines), 5, "the call-off", every=0.05)
    time.sleep(0.9)  # past the request's timeout: it would have fired
    assert not fired
    checkpointwatch.ask_stop(tmp_path, "j", 0.3)  # the user's stop at checkpoint: no preemption to withdraw
    assert not checkpointwatch.withdraw_stop(tmp_path, "j", "hi")
    wait_until(lambda: fired, 5, "the user's stop at its timeout", every=0.05)
    w.close()
    assert fired == ["no new checkpoint within 0.3 s; the steps since the start will be redone"]


def test_the_watch_stops_at_once_when_nothing_was_trained_since_the_last_checkpoint(tmp_path, monkeypatch):
    """A preemption (or a stop at checkpoint) right after a save: nothing to lose, so no wait for the
    next one. Steps logged past the checkpoint: it waits, as before."""
    monkeypatch.setattr(checkpointwatch, "POLL_S", 0.05)
    ckpt, run, metrics = tmp_path / "ckpt", tmp_path / "run", tmp_path / "metrics.1.jsonl"
    ckpt.mkdir()
    (ckpt / checkpointwatch.TRACKER).write_text("10")
    metrics.write_text("".join(json.dumps({"step": s, "data": {}}) + "\n" for s in range(1, 12)))  # step 11 trained
    lines: list[str] = []
    fired: list[str] = []
    w = checkpointwatch.CheckpointWatch(str(ckpt), run, "j", lines.append, fired.append, since=time.time() - 1,
                                        metrics=metrics).start()
    checkpointwatch.ask_stop(run, "j", 60, reason="preempted by hi-1")
    wait_until(lambda: any(ln.startswith("preempted by hi-1: stopping once") for ln in lines), 5, "the request", every=0.05)
    time.sleep(0.3)
    assert not fired  # step 11 would be lost: wait for the next save
    w.close()
    metrics.write_text("".join(json.dumps({"step": s, "data": {}}) + "\n" for s in range(1, 11)))  # up to the save
    w = checkpointwatch.CheckpointWatch(str(ckpt), run, "j", lines.append, fired.append, since=time.time() - 1,
                                        metrics=metrics).start()
    checkpointwatch.ask_stop(run, "j", 60, reason="preempted by hi-2")
    wait_until(lambda: fired, 5, "the stop at once", every=0.05)
    w.close()
    assert fired == ["nothing trained since checkpoint step 10: nothing to lose"]


def test_a_request_naming_a_step_takes_a_checkpoint_at_or_past_it_even_one_saved_before(tmp_path, monkeypatch):
    """Successive halving names its rung: the rung's own checkpoint will do, though steps were
    trained past it (a halved point's steps past the rung are not worth a wait for the next save);
    without a checkpoint at or past that step yet, the watch waits for one."""
    monkeypatch.setattr(checkpointwatch, "POLL_S", 0.05)
    ckpt, run, metrics = tmp_path / "ckpt", tmp_path / "run", tmp_path / "metrics.1.jsonl"
    ckpt.mkdir()
    (ckpt / checkpointwatch.TRACKER).write_text("10")
    metrics.write_text("".join(json.dumps({"step": s, "data": {}}) + "\n" for s in range(1, 12)))  # step 11 trained
    fired: list[str] = []
    w = checkpointwatch.CheckpointWatch(str(ckpt), run, "j", lambda _: None, fired.append, since=time.time() - 1,
                                        metrics=metrics).start()
    checkpointwatch.ask_stop(run, "j", 60, reason="halved at step 10", at_step=10)
    wait_until(lambda: fired, 5, "the stop at the rung's checkpoint", every=0.05)
    w.close()
    assert fired == ["checkpoint step 10 saved (at or past step 10, as asked)"]

    fired.clear()
    lines: list[str] = []
    w = checkpointwatch.CheckpointWatch(str(ckpt), run, "j", lines.append, fired.append, since=time.time() - 1,
                                        metrics=metrics).start()
    checkpointwatch.ask_stop(run, "j", 60, reason="halved at step 15", at_step=15)  # saves every 4: at 12, 16
    wait_until(lambda: any(ln.startswith("halved at step 15: stopping once") for ln in lines), 5, "the request", every=0.05)
    (ckpt / checkpointwatch.TRACKER).write_text("12")
    time.sleep(0.3)
    assert not fired  # a save before the step named: not it
    (ckpt / checkpointwatch.TRACKER).write_text("16")
    wait_until(lambda: fired, 5, "the stop at the first save past the step", every=0.05)
    w.close()
    assert fired == ["checkpoint step 16 saved"]


def test_a_fired_stop_ends_the_trainer_at_once_and_the_runner_then_waits_for_rays_stop(tmp_path, monkeypatch):
    """The watch's stop SIGTERMs the trainer itself (not once Ray's stop, an HTTP call, reaches it),
    asks Ray's stop too, and the attempt says Ray's stop is due: the runner must not exit before it
    (the job would read FAILED, not STOPPED). Waiting, the runner dies of Ray's SIGTERM at once."""
    from rayjobs.oncluster import runner

    monkeypatch.setattr(checkpointwatch, "POLL_S", 0.05)
    asked: list[str] = []
    monkeypatch.setattr(runner, "stop_own_job", lambda job_id: asked.append(job_id) or True)
    ckpt, run = tmp_path / "ckpt", tmp_path / "run"
    ckpt.mkdir()
    (ckpt / checkpointwatch.TRACKER).write_text("4")
    meta = JobMeta.from_ray({"job_submission_id": "j", "checkpoint_dir": str(ckpt), "run_dir": str(run)})
    monkeypatch.setattr(runner, "STARTED_AT", time.time() - 1)
    checkpointwatch.ask_stop(run, "j", 60, reason="halved at step 4", at_step=4)
    t = time.monotonic()
    att = runner.run_attempt([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), meta=meta)
    assert time.monotonic() - t < 30  # the trainer's own 60 s were cut short
    assert att.code == -15 and att.stopped and att.ray_stop_due and asked == ["j"]

    waiting = subprocess.Popen([sys.executable, "-c", "from rayjobs.oncluster import runner; runner.await_ray_stop(60)"])
    time.sleep(1.0)  # imported and waiting
    waiting.terminate()
    assert waiting.wait(timeout=30) == -15  # killed by the signal, not returned after its 60 s

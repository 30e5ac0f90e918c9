"""rayjobs.oncluster.runner on its own (no Ray): the trainer starts in the job's working dir by path.

On the 2-GPU H200, a sweep point that waited in the queue died at once: while it waited, Ray
unpacked the job's working_dir package again (two raylets sharing one host's session dir), so the
runner sat in a deleted directory and the trainer it started inherited it (torch's MKL: "Cannot
load libtorch_cpu.so"). The runner now starts every attempt in the directory named by path.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import wait_until

from rayjobs.contract.meta import JobMeta
from rayjobs.oncluster import runner

PROBE = "import os; open('started-here', 'w').write(os.getcwd())"


def _enter_job_dir(tmp_path: Path, monkeypatch) -> tuple[Path, str]:
    """A job's working dir as Ray's supervisor leaves it (cwd + $PWD), and the runner's view of it."""
    job_dir = tmp_path / "_ray_pkg_abc"
    job_dir.mkdir()
    monkeypatch.chdir(job_dir)
    monkeypatch.setenv("PWD", str(job_dir))
    return job_dir, runner.start_dir()


def test_trainer_starts_in_a_working_dir_unpacked_again(tmp_path: Path, monkeypatch, capsys) -> None:
    job_dir, workdir = _enter_job_dir(tmp_path, monkeypatch)
    assert workdir == str(job_dir)

    # What Ray did while the job waited: the directory is removed and unpacked again at the same path.
    shutil.rmtree(job_dir)
    job_dir.mkdir()
    (job_dir / "conf").mkdir()
    try:
        os.getcwd()
        raise AssertionError("the test did not leave the process in a deleted directory")
    except FileNotFoundError:
        pass

    code = runner.run_attempts([sys.executable, "-c", PROBE], JobMeta(kind="command"), dict(os.environ), workdir)
    assert code == 0, capsys.readouterr()
    assert (job_dir / "started-here").read_text() == str(job_dir)
    assert "unpacked again while this job waited" in capsys.readouterr().out


def test_start_dir_ignores_a_stale_pwd(tmp_path: Path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(elsewhere))   # inherited from a shell that was somewhere else
    assert runner.start_dir() == os.getcwd() == str(tmp_path)
    monkeypatch.delenv("PWD")
    assert runner.start_dir() == str(tmp_path)


def test_trainer_waits_for_a_working_dir_being_unpacked(tmp_path: Path, monkeypatch, capsys) -> None:
    import threading

    job_dir, workdir = _enter_job_dir(tmp_path, monkeypatch)
    shutil.rmtree(job_dir)   # Ray's unpack: rmtree first, then unzip
    threading.Timer(0.5, job_dir.mkdir).start()
    code = runner.run_attempts([sys.executable, "-c", PROBE], JobMeta(kind="command"), dict(os.environ), workdir)
    assert code == 0
    assert (job_dir / "started-here").read_text() == str(job_dir)
    assert "is gone; waiting" in capsys.readouterr().out


def test_a_pre_started_runner_holds_until_the_go_file_and_drops_it(tmp_path: Path) -> None:
    """The queue's pre-started job (rayjobs.oncluster.standby): its runner starts the trainer only
    once the go file appears, reports the admission it carries, and gives up after its bound."""
    import json
    import subprocess
    import time

    go = tmp_path / "job.go"
    assert runner.hold_for_admission(go, max_s=0.2) is None  # bounded: no file, no admission
    env = dict(os.environ, RAYJOBS_STANDBY_GO=str(go),
               RAY_JOB_CONFIG_JSON_ENV_VAR=json.dumps({"metadata": {"gpu_groups": "[]"}}))
    p = subprocess.Popen([sys.executable, "-m", "rayjobs.oncluster.runner", "--", sys.executable, "-c",
                          "import os; print('trainer env has go:', 'RAYJOBS_STANDBY_GO' in os.environ)"],
                         env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.5)
    assert p.poll() is None  # held: no trainer yet
    tmp = tmp_path / ".job.go.tmp"
    tmp.write_text(json.dumps({"admitted_at": "2026-12-01 10:00:00.000 UTC", "waited_s": "12.50"}))
    tmp.rename(go)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out
    assert "[rayjobs] admitted after 12.50 s at 2026-12-01 10:00:00.000 UTC, running from" in out
    assert "trainer env has go: False" in out  # the trainer does not inherit the hold
    assert not go.exists()  # taken


@pytest.fixture
def ray_session(tmp_path: Path):
    """A Ray session dir as Ray 2.x lays it out (``logs/``, ``sockets/``), a stand-in for its raylet
    (a process whose command line names ``--raylet_socket_name=<session>/sockets/raylet``, as
    Ray's raylet does), and the driver log a runner of it writes to."""
    import subprocess
    import time

    session = tmp_path / "ray" / "session_2026-12-02_10-00-00_000000_1"
    (session / "logs").mkdir(parents=True)
    (session / "sockets").mkdir()
    mark = f"--raylet_socket_name={session}/sockets/raylet"
    raylet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", mark])
    for _ in range(500):  # its command line is the new one once it has exec'd (bounded: 5 s)
        if mark.encode() in Path(f"/proc/{raylet.pid}/cmdline").read_bytes():
            break
        time.sleep(0.01)
    yield session, raylet, session / "logs" / "job-driver-job-1.log"
    raylet.kill()
    raylet.wait()


def test_a_held_runner_ends_when_its_ray_session_dies(tmp_path: Path, ray_session) -> None:
    """The GPU machine's head restart: a pre-started job's runner outlived its session and took the
    admission of its job's next Ray job. Now it ends once its session's raylet is gone, and never
    starts a trainer, even if a go file appears later."""
    import json
    import subprocess
    import time

    from rayjobs.oncluster import raysession

    session, raylet, log = ray_session
    watch = raysession.SessionWatch(raysession.own_session(log))
    assert watch.session == session and watch.pid == raylet.pid and watch.alive()
    go = tmp_path / "job-1.0123.go"
    env = dict(os.environ, RAYJOBS_STANDBY_GO=str(go),
               RAY_JOB_CONFIG_JSON_ENV_VAR=json.dumps({"metadata": {"gpu_groups": "[]"}}))
    with log.open("a") as out:
        p = subprocess.Popen([sys.executable, "-m", "rayjobs.oncluster.runner", "--", sys.executable, "-c",
                              "print('TRAINER STARTED')"], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    time.sleep(runner.SESSION_CHECK_S * 2)
    assert p.poll() is None, log.read_text()  # its session lives: it holds
    raylet.kill()  # the raylet dies, as in a crash of the head's Ray
    raylet.wait()
    assert not watch.alive()
    assert p.wait(timeout=30) == runner.SESSION_GONE
    go.write_text("{}")
    text = log.read_text()
    assert "this job's Ray session is gone" in text and "TRAINER STARTED" not in text, text


def test_a_runner_does_not_retry_once_its_ray_session_is_gone(tmp_path: Path, ray_session) -> None:
    """A failed attempt whose Ray session died (the head crashed under it) is not retried by this
    runner: the retry would train outside any Ray job; the revived queue runs the job again."""
    import json
    import subprocess
    import time

    session, raylet, log = ray_session
    env = dict(os.environ, RAY_JOB_CONFIG_JSON_ENV_VAR=json.dumps({"metadata": {"max_retries": "2"}}))
    trainer = ("import sys, time; print('TRAINER RAN', flush=True); time.sleep(3); "
               "sys.exit('RuntimeError: NCCL error: unhandled system error')")
    with log.open("a") as out:
        p = subprocess.Popen([sys.executable, "-m", "rayjobs.oncluster.runner", "--", sys.executable, "-c", trainer],
                             env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    wait_until(lambda: "TRAINER RAN" in log.read_text(), 60, "the first attempt to run", every=0.05)
    raylet.kill()  # the head's Ray crashes while the attempt runs (it trains 3 s more)
    raylet.wait()
    code = p.wait(timeout=60)
    text = log.read_text()
    assert code == runner.SESSION_GONE, text
    assert text.count("TRAINER RAN") == 1 and "not retried here: this job's Ray session is gone" in text, text


def test_the_attempt_line_counts_as_status_does(tmp_path: Path, capsys) -> None:
    """One numbering: the run's attempt N and the retries left (it said `try 1/1 of this job` for
    the run's attempt 2 after a head restart, while `status` said attempt 2/2)."""
    once = tmp_path / "failed-once"
    crash_once = f"import os, sys; p = {str(once)!r}; (open(p, 'w'), sys.exit(3)) if not os.path.exists(p) else None"
    meta = JobMeta(kind="command", run_dir=str(tmp_path / "run"), run="r1", max_retries=1)
    code = runner.run_attempts([sys.executable, "-c", crash_once], meta, dict(os.environ), str(tmp_path))
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "[rayjobs] attempt" in ln and "of run" in ln]
    assert code == 0, out
    import re

    got = [re.sub(r" at \S+ \S+ UTC", "", ln.split("] ", 1)[1].split(";")[0]) for ln in lines]
    assert got == ["attempt 1 of run r1 (1 retry left", "attempt 2 of run r1 (0 retries left"], lines
    # its own time (tail --json orders attempt_started by it)
    from rayjobs.views.steplog import StepRecords

    recs = StepRecords("j", clock=lambda: 4e9).feed("\n".join(lines))  # read "later" than either line
    assert [(r["event"], r["ts_source"]) for r in recs] == [("attempt_started", "log")] * 2, recs
    assert recs[0]["ts"] <= recs[1]["ts"] < "2100", recs


def test_the_runner_reads_its_metadata_through_jobmeta(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's env var, typed: the job's id (Ray's key), its GPU groups described; a job whose
    metadata names no kind (not rayjobs') runs its command as given (no verl overrides)."""
    meta = {"kind": "verl", "gpu_groups": "[1, 1]", "job_submission_id": "j7", "max_retries": "2", "run": "r"}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"metadata": meta}))
    m = runner.job_metadata()
    assert (m.submission_id, m.kind, m.max_retries, m.run) == ("j7", "verl", 2, "r")
    assert runner.describe_demand(m) == "2 groups of 1 GPU + 3 CPU, each on one node"
    env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], m, {}, None, 0, 0)
    assert env["RAYJOBS_JOB"] == "j7" and any(a.endswith("RAYJOBS_JOB='j7'") for a in cmd)
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"metadata": {"job_submission_id": "raw"}}))
    m = runner.job_metadata()
    assert m.kind == "command" and runner.describe_demand(m) == "no GPUs"
    assert runner.attempt_env(["python3", "train.py"], m, {}, None, 0, 0)[1] == ["python3", "train.py"]
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "not json")
    assert runner.job_metadata().submission_id == ""

"""An embedded head of its own, stopped and started again (issue 45, items 1 and 2).

* An ended job's log outlives `rayjobs local stop && rayjobs local start`: `logs` and `tail` show it
  (never "no log yet" for a job that ended), `status` of a FAILED job keeps its `failures:` and
  `error:` lines -- though the laptop kept nothing of the job before the restart (the runner keeps
  the log's end on the storage root, and its whole log stays in the head's earlier Ray session).
* Read-only commands never start a stopped head: they answer from the local record at once, saying
  in one line that the head is down and how to start it; a command that needs the head says it
  starts it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from conftest import rayjobs_cli, rayjobs_submit, wait_until

from rayjobs.client import embedded
from rayjobs.client.dashboard import Dashboard


@pytest.fixture
def home() -> Iterator[Path]:
    """A RAYJOBS_HOME of its own (short: Ray's unix socket paths are limited); its head is stopped after."""
    root = Path(tempfile.mkdtemp(prefix="rjd", dir="/tmp"))
    try:
        yield root / "rj"
    finally:
        rayjobs_cli("local", "stop", env={"RAYJOBS_HOME": str(root / "rj")}, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def _queue_view(home: Path, job: str) -> dict:
    rec = json.loads((home / "local" / "head.json").read_text())
    v = Dashboard(embedded.target(rec)).queue.job(job)
    return v if v is not None and v.get("state") == "done" else {}


def _submit(env: dict, workdir: Path, *args: str) -> str:
    r = rayjobs_submit("+exp=fake_ppo", *args, cwd=workdir, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


def _head_procs(home: Path) -> list[int]:
    """PIDs of processes whose command line names this home (the head's temp dir is under it)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and str(home).encode() in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


@pytest.mark.cluster
def test_a_restarted_local_head_shows_ended_logs_and_a_stopped_one_is_never_started_by_a_read(home, workdir):
    """One head of its own, started three times (each start is the costly part): ended jobs' logs
    and failures after a restart, then reads of a stopped head."""
    env = {"RAYJOBS_HOME": str(home)}
    assert rayjobs_cli("local", "start", env=env).returncode == 0
    ok = _submit(env, workdir, "+fake.steps=3")
    bad = _submit(env, workdir, "+fake.config_error=true")
    views = {j: wait_until(lambda j=j: _queue_view(home, j), 120, f"{j} to end", every=0.3) for j in (ok, bad)}
    assert (views[ok]["status"], views[bad]["status"]) == ("SUCCEEDED", "FAILED"), views
    assert not (home / "runs" / ok / "final.json").exists()  # the laptop kept nothing of them yet
    for cmd in (("local", "stop"), ("local", "start")):
        r = rayjobs_cli(*cmd, env=env, timeout=180)
        assert r.returncode == 0, (cmd, r.stderr)
    _ended_logs_outlive_the_restart(home, env, ok, bad)
    _reads_never_start_a_stopped_head(home, env, workdir, {ok: "SUCCEEDED", bad: "FAILED"})


def _ended_logs_outlive_the_restart(home: Path, env: dict, ok: str, bad: str) -> None:
    logs = rayjobs_cli("logs", ok, env=env)
    assert logs.returncode == 0 and "step:3 - " in logs.stdout, logs.stdout[-2000:] + logs.stderr
    assert "yet" not in logs.stderr and "Ray no longer serves" in logs.stderr, logs.stderr
    tail = rayjobs_cli("tail", ok, env=env)
    assert tail.returncode == 0 and "step:3 - " in tail.stdout, tail.stdout[-2000:] + tail.stderr
    st = rayjobs_cli("status", bad, env=env)
    assert st.returncode == 0, st.stderr
    assert "status: FAILED" in st.stdout and "\nfailures: \n  attempt 1: config error" in st.stdout, st.stdout
    assert "\nerror: " in st.stdout, st.stdout
    js = rayjobs_cli("logs", bad, "--json", env=env)
    assert json.loads(js.stdout.splitlines()[-1])["event"] == "job_ended", js.stdout[-1000:]

    # the whole log gone too (its Ray session's files deleted): the end the runner kept on the storage root
    for f in (home / "local" / "ray").glob(f"session_*/logs/job-driver-{ok}.log"):
        f.unlink()
    logs = rayjobs_cli("logs", ok, "--tail", "5", env=env)
    assert logs.returncode == 0 and "step:3 - " in logs.stdout, logs.stdout + logs.stderr
    assert "lines its runner kept on the storage root" in logs.stderr and "the whole log stays at" in logs.stderr
    assert len(logs.stdout.splitlines()) == 5, logs.stdout


def _reads_never_start_a_stopped_head(home: Path, env: dict, workdir: Path, before: dict) -> None:
    r = rayjobs_submit("-m", "+exp=fake_ppo", "+fake.steps=1,2", cwd=workdir, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = r.stdout.split()
    for j in jobs:
        wait_until(lambda j=j: _queue_view(home, j), 120, f"{j} to end", every=0.3)
    sweep = jobs[0].rsplit("-", 1)[0]
    assert rayjobs_cli("list", "--keep", env=env).returncode == 0  # the local record keeps their final copies
    assert rayjobs_cli("local", "stop", env=env, timeout=60).returncode == 0
    assert not _head_procs(home)
    reads = {("list",): 0, ("status", jobs[0]): 0, ("logs", jobs[0]): 0, ("tail", jobs[0]): 0, ("usage",): 0,
             ("plot", "--sweep", sweep, "-o", "c.png"): 0, ("compare", "--sweep", sweep): 0, ("cluster",): 2}
    for args, code in reads.items():
        r = rayjobs_cli(*args, env=env, cwd=workdir, timeout=60)
        said = [ln for ln in r.stderr.splitlines() if "the embedded local head is not running" in ln]
        assert r.returncode == code and len(said) == 1 and "`rayjobs local start` starts it" in said[0], (args, r.stderr)
        assert not (home / "local" / "head.json").exists() and not _head_procs(home), (args, "started the head")
    listed = rayjobs_cli("list", "--json", env=env)
    assert {row["id"]: row["status"] for row in json.loads(listed.stdout)} == {**before, **{j: "SUCCEEDED" for j in jobs}}
    # a command that needs the head starts it, and says so in one line
    stop = rayjobs_cli("stop", jobs[0], env=env, timeout=180)
    assert stop.returncode == 0 and f"{jobs[0]} SUCCEEDED" in stop.stdout, stop.stdout + stop.stderr
    assert "the embedded local head is not running: starting it" in stop.stderr, stop.stderr
    assert (home / "local" / "head.json").exists() and _head_procs(home)


# --------------------------------------------------------------------------- pure (no Ray)
def test_a_read_gets_local_head_down_and_never_starts_it(tmp_path, monkeypatch, capsys):
    from rayjobs.client import connection
    from rayjobs.errors import ClusterUnreachable
    from rayjobs.views.localrows import head_down_line

    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home"))
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    started: list[bool] = []
    monkeypatch.setattr(embedded, "start", lambda *a, **k: started.append(True))
    with pytest.raises(connection.LocalHeadDown) as e:
        connection.connect(start=False)
    assert isinstance(e.value, ClusterUnreachable) and not started and capsys.readouterr().err == ""
    assert str(e.value) == "the embedded local head is not running; `rayjobs local start` starts it"
    assert head_down_line(e.value, "showing X") == ("the embedded local head is not running: showing X; "
                                                    "`rayjobs local start` starts it")
    assert head_down_line(ClusterUnreachable("gone"), "showing X") is None
    monkeypatch.setenv(embedded.NO_LOCAL_ENV, "1")  # a command that needs the head, where none may start
    with pytest.raises(ClusterUnreachable, match="forbids starting"):
        connection.connect(start=True)
    assert not started and "starting it" not in capsys.readouterr().err

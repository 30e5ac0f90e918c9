"""A teammate's day with the real CLI, on a real head, from a machine whose only route to the head is
the door's TLS port (tests/test_door_cluster.py's namespace and head): ``rayjobs login`` with the
token on stdin and the pinned fingerprint, ``python -m rayjobs.submit`` of the tests' fake job,
``list``, ``status``, ``logs``, ``cluster``, ``whoami``, ``stop``, ``rerun``, ``tail`` -- with only the
door's URL and alice's token (no cluster token, no Ray dashboard: none is reachable from there).
The owner adds her with the real CLI. Bob's stop of alice's job is one line, exit 2, and her job
runs on; a wrong fingerprint is refused and nothing is kept; her token is in her login file only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import cli_on, make_workdir, wait_until
from test_door_cluster import Team, add_user, door, status, team  # noqa: F401  (the fixtures, shared)

pytestmark = pytest.mark.cluster

#: What a teammate's shell must not carry: any way to the cluster but the door.
_NOT_THEIRS = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAYJOBS_API_ADDRESS",
               "RAYJOBS_URL", "RAYJOBS_TOKEN", "RAYJOBS_FINGERPRINT", "RAYJOBS_STORAGE")


def on_laptop(team: Team, home: Path, cwd: Path, *args: str, stdin: Optional[str] = None,
              env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    """``python -m ARGS`` on the teammate's machine, as that teammate (``home``: their RAYJOBS_HOME)."""
    e = {k: v for k, v in os.environ.items() if k not in _NOT_THEIRS}
    e.update(RAYJOBS_HOME=str(home), **(env or {}))
    return subprocess.run(["ip", "netns", "exec", team.ns, sys.executable, "-m", *args], cwd=cwd, env=e, input=stdin,
                          capture_output=True, text=True, timeout=180)


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-2000:]
    return lines[0]


def test_a_teammate_runs_the_daily_commands_through_the_door_only(door: Any, team: Team,  # noqa: F811
                                                                  tmp_path: Path) -> None:
    work = make_workdir(tmp_path / "work")
    owner = cli_on(door, "users", "add", "alice", cwd=work)  # the owner's way: the cluster's address and token
    assert owner.returncode == 0, owner.stderr[-2000:]
    token = owner.stdout.splitlines()[0]
    assert owner.stdout == token + "\n" and token.startswith("rj_") and token not in owner.stderr
    url, fingerprint = f"https://{team.head_ip}:{team.port}", door_fingerprint(owner.stderr)
    assert f"rayjobs login {url} --fingerprint {fingerprint}" in owner.stderr
    alice = {"url": url, "fingerprint": fingerprint, "token": token}
    bob = add_user(door, "bob")
    home = tmp_path / "alice"

    def rj(*args: str, **kw: Any) -> subprocess.CompletedProcess:
        return on_laptop(team, home, work, "rayjobs.cli", *args, **kw)

    wrong = rj("login", alice["url"], "--fingerprint", "sha256:" + "ab" * 32, stdin=alice["token"] + "\n")
    assert "not the pinned one" in one_line(wrong) and not (home / "login.json").exists()
    r = rj("login", alice["url"], "--fingerprint", alice["fingerprint"], stdin=alice["token"] + "\n")
    assert r.returncode == 0 and alice["token"] not in r.stdout + r.stderr, r.stderr[-2000:]
    assert (home / "login.json").stat().st_mode & 0o777 == 0o600
    me = rj("whoami")
    assert me.returncode == 0 and me.stdout.startswith(f"alice (member) at {alice['url']}"), me.stderr[-2000:]

    sub = on_laptop(team, home, work, "rayjobs.submit", "+exp=fake_ppo", "+fake.steps=3000", "+fake.step_s=0.1")
    assert sub.returncode == 0, sub.stderr[-3000:]
    (job_id,) = sub.stdout.split()
    wait_until(lambda: status(door, job_id) == "RUNNING", 90, f"{job_id} to run")
    listed = rj("list", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    row = next(x for x in json.loads(listed.stdout) if x["id"] == job_id)
    assert row["status"] == "RUNNING" and row["user"] == "alice", row
    st = rj("status", job_id, "--json")
    assert st.returncode == 0 and json.loads(st.stdout)["status"] == "RUNNING", st.stderr[-2000:]
    logged = wait_until(lambda: (g := rj("logs", job_id)).returncode == 0 and "Total training steps" in g.stdout and g,
                        60, "the job's log through the door")
    assert "Total training steps: 3000" in logged.stdout

    info = rj("cluster", "--json")
    assert info.returncode == 0, info.stderr[-2000:]
    assert [n["gpus"] for n in json.loads(info.stdout)["nodes"]] == [2.0] and json.loads(info.stdout)["address"] == url

    as_bob = {"RAYJOBS_URL": bob["url"], "RAYJOBS_TOKEN": bob["token"], "RAYJOBS_FINGERPRINT": bob["fingerprint"]}
    refused = on_laptop(team, tmp_path / "bob", work, "rayjobs.cli", "stop", job_id, env=as_bob)
    assert f"{job_id} is alice's job: only alice or an admin may stop it" in one_line(refused)
    assert status(door, job_id) == "RUNNING"  # untouched

    stopped = rj("stop", job_id)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    wait_until(lambda: status(door, job_id) == "STOPPED", 90, f"{job_id} to stop")
    again = rj("rerun", job_id, "fake.steps=2")  # her local record's config, the queue's code snapshot
    assert again.returncode == 0, again.stderr[-3000:]
    new_id = again.stdout.split()[0]
    followed = rj("tail", new_id)  # followed through the door's log stream until it ends: its exit code
    assert followed.returncode == 0 and "Total training steps: 2" in followed.stdout, followed.stderr[-2000:]
    shown = rj("status", new_id, "--json").stdout
    assert status(door, new_id) == "SUCCEEDED" and json.loads(shown)["user"] == "alice" and token not in shown
    kept = [p for p in home.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    assert kept == [home / "login.json"]  # her local record (ledger, runs, configs) never holds the token


def door_fingerprint(stderr: str) -> str:
    """The fingerprint ``rayjobs users add`` printed on stderr."""
    import re

    found = re.search(r"--fingerprint (sha256:[0-9a-f]{64})", stderr)
    assert found, stderr[-2000:]
    return found.group(1)

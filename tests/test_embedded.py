"""`rayjobs local start/stop` of an embedded head of its own (not the session's shared head).

A stop leaves no process of the head behind -- counted independently of how rayjobs finds them:
`local start` runs under a child subreaper, so every process started for the head, whatever its
session or command line, stays a descendant of it -- so a start right after it gets a head that
runs jobs; and a start whose dashboard agent cannot listen fails with one line (exit 2) instead
of leaving a head that refuses every job.

Three heads in a row in one home (a stop, a start and a submit each) all run their jobs: the laptop
never takes the queue (or the API file) of the Ray session before for the new head's, and the
home's queue store outlives its heads. (One test: each head start is ~20 s of a loaded machine.)
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import rayjobs_cli, rayjobs_submit, wait_terminal, wait_until

from rayjobs.client import embedded
from rayjobs.client.dashboard import Dashboard

MARK = "rje-driver-marker"
#: Runs `rayjobs local start` as a child subreaper (orphans are reparented to it, not to init, so
#: the whole head stays in its process tree), reaps them, and stays until its stdin closes.
SUBREAPER = r"""
import ctypes, json, os, subprocess, sys, threading, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
r = subprocess.run([sys.executable, "-m", "rayjobs.cli", "local", "start"], capture_output=True, text=True)
print(json.dumps([r.returncode, r.stdout, r.stderr]), flush=True)
def reap():
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.1)
threading.Thread(target=reap, daemon=True).start()
sys.stdin.read()
"""


class Started:
    """`rayjobs local start` under a subreaper: :meth:`pids` is every live process it started."""

    def __init__(self, home: Path) -> None:
        env = dict(os.environ, RAYJOBS_HOME=str(home))
        self.p = subprocess.Popen([sys.executable, "-c", SUBREAPER], env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def result(self, timeout: float = 150) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of `local start`."""
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert ready, "`rayjobs local start` did not return"
        rc, out, err = json.loads(self.p.stdout.readline())
        return rc, out, err

    def pids(self) -> dict[int, int]:
        """PID -> start time of every live (non-zombie) descendant."""
        kids: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit():
                    kids.setdefault(int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(d.name))
            except OSError:
                continue
        found, todo = {}, [self.p.pid]
        while todo:
            for child in kids.get(todo.pop(), []):
                st = _start_time(child)
                if st is not None:
                    found[child] = st
                todo.append(child)
        return found

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=30)


@pytest.fixture
def home() -> Iterator[Path]:
    """A RAYJOBS_HOME of its own (short: Ray's unix socket paths are limited); its head is stopped after."""
    root = Path(tempfile.mkdtemp(prefix="rje", dir="/tmp"))
    try:
        yield root / "rj"
    finally:
        rayjobs_cli("local", "stop", env={"RAYJOBS_HOME": str(root / "rj")}, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def _start_time(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])  # a zombie holds nothing


def _cmdline(pid: int, limit: int = 100) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:limit]
    except OSError:
        return "?"


def _record(home: Path) -> dict[str, Any]:
    return json.loads((home / "local" / "head.json").read_text())


def _wait_running(client: Any, job_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while str(client.get_job_status(job_id)) != "RUNNING":
        assert time.monotonic() < deadline, f"{job_id}: {client.get_job_status(job_id)}"
        time.sleep(0.2)


def _submitted(workdir: Path, env: dict[str, str], k: int) -> str:
    """A rayjobs job (recorded in this home's ledger) sent to the head running now: its one id."""
    sub = rayjobs_submit("+exp=fake_ppo", "+fake.steps=1", f"trainer.total_epochs={k + 1}", cwd=workdir, env=env)
    assert sub.returncode == 0, (k, sub.stderr[-3000:])
    assert len(sub.stdout.split()) == 1, sub.stdout
    return sub.stdout.strip()


def _new_sessions_queue(home: Path, sessions: list[str], k: int) -> Any:
    """The queue API the laptop finds for the head running now: that head's, in a Ray session none
    of the heads before had (it once took the session before's queue file: "the jobs were queued
    on the cluster, but its queue has not shown 1 of them within 30 s")."""
    d = Dashboard(embedded.target(_record(home)))
    q = d.queue
    session = str(d.version()["session_name"])
    assert q.health().session == session, (k, q.health(), session)  # the new head's queue, not the old one
    assert session not in sessions, (k, session, sessions)
    sessions.append(session)
    return q


def _ended(q: Any, job: str, k: int) -> None:
    got = wait_until(lambda: (v := q.job(job)) is not None and v["state"] == "done" and v, 120,
                     f"head {k + 1}'s job to end", every=0.3)
    assert got["status"] == "SUCCEEDED", (k, got)


def _stop_leaves_no_process(home: Path, env: dict[str, str], workdir: Path, sessions: list[str]) -> str:
    """The first head, under a subreaper, with a job running: its stop leaves none of its processes.
    Returns the id of the rayjobs job it ran (SUCCEEDED in this home's queue store)."""
    head = Started(home)
    try:
        rc, out, err = head.result()
        assert rc == 0, err
        old_id = _submitted(workdir, env, 0)
        rec = _record(home)
        assert out.strip() == rec["dashboard"]
        client = Dashboard(embedded.target(rec)).sdk
        # A running job: Ray starts its driver in a session of its own, under a worker.
        sleeper = f"python3 -c 'import time; print(\"{MARK}\", flush=True); time.sleep(600)'"
        job = client.submit_job(entrypoint=sleeper)
        _wait_running(client, job)
        deadline = time.monotonic() + 30
        while not any(MARK in _cmdline(p) for p in head.pids()):
            assert time.monotonic() < deadline, "the job's driver never showed up"
            time.sleep(0.2)
        _ended(_new_sessions_queue(home, sessions, 0), old_id, 0)
        before = head.pids()
        names = " | ".join(_cmdline(p) for p in before)
        # What outlived the old stop by ~70 s (none of them names the temp dir) is among them.
        for what in ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray.util.client.server", MARK,
                     "raylet", "gcs_server"):
            assert what in names, (what, names)

        r = rayjobs_cli("local", "stop", env=env, timeout=60)
        assert r.returncode == 0 and "stopped" in r.stderr, r.stderr
        # The budget: zero processes of the old head left when stop returns.
        left = {p for p, st in before.items() if _start_time(p) == st} | set(head.pids())
        assert not left, [(p, _cmdline(p)) for p in sorted(left)]
        assert len(before) >= 20, names  # what it stopped: ~30 processes with a job running
        assert not (home / "local" / "head.json").exists()
    finally:
        head.close()
    return old_id


@pytest.mark.cluster
def test_stop_leaves_no_process_and_each_start_after_it_runs_jobs(home, workdir, monkeypatch):
    env = {"RAYJOBS_HOME": str(home)}
    sessions: list[str] = []
    old_id = _stop_leaves_no_process(home, env, workdir, sessions)

    # Head 2, at once; on an empty storage root: a replaced head machine whose queue has never seen
    # the old job (with the same storage root, the queue's history keeps it: head 3 below)
    r = rayjobs_cli("local", "start", env=dict(env, RAYJOBS_STORAGE=str(home / "storage-of-a-new-machine")))
    assert r.returncode == 0, r.stderr
    _new_sessions_queue(home, sessions, 1)
    client = Dashboard(embedded.target(_record(home))).sdk
    job = client.submit_job(entrypoint="python3 -c \"print('second head ok')\"")
    assert wait_terminal(client, job, timeout=60) == "SUCCEEDED", client.get_job_logs(job)
    assert "second head ok" in client.get_job_logs(job)
    # Neither the new head's job table nor its queue has seen the old job: status and list fall back to the record.
    st = rayjobs_cli("status", old_id, "--json", env=env)
    assert st.returncode == 0, st.stderr
    row = json.loads(st.stdout)
    assert (row["id"], row["status"], row["source"], row["experiment"]) == (old_id, "UNKNOWN", "record", "fake_ppo")
    assert "not on the cluster" in st.stderr and "its head restarted" in row["message"]
    listed = {r["id"]: r for r in json.loads(rayjobs_cli("list", "--json", env=env).stdout)}
    assert listed[old_id]["status"] == "UNKNOWN" and listed[old_id]["source"] == "record"
    assert "UNKNOWN (record)" in rayjobs_cli("list", env=env).stdout

    # Head 3: a stop and a start of a head with a Ray session before it, on the home's own storage.
    stop = rayjobs_cli("local", "stop", env=env, timeout=60)
    assert stop.returncode == 0, stop.stderr
    start = rayjobs_cli("local", "start", env=env)
    assert start.returncode == 0, start.stderr
    job = _submitted(workdir, env, 2)
    q = _new_sessions_queue(home, sessions, 2)
    _ended(q, job, 2)
    st = rayjobs_cli("status", job, "--json", env=env)
    assert st.returncode == 0 and json.loads(st.stdout)["status"] == "SUCCEEDED", (st.stdout, st.stderr)
    # Its queue's store is named by the id this home keeps (issue 45 item 10), the same across the
    # restarts: the first head's job is still in it; the record names the head's Ray session.
    rec, name = _record(home), (home / "local" / "cluster_id").read_text().strip()
    assert (rec["session"], rec["queue"]) == (sessions[-1], name), rec
    assert q.health().store == str(home / "storage" / "queue" / name)
    assert q.job(old_id)["status"] == "SUCCEEDED"
    # A record whose head is not the one answering at its address (another network namespace's
    # 127.0.0.1, say) is not taken for it.
    monkeypatch.setenv("RAYJOBS_HOME", str(home))
    assert embedded.running()["session"] == sessions[-1]
    (home / "local" / "head.json").write_text(json.dumps(dict(rec, session="session_of_another_head")))
    try:
        assert embedded.running() is None
    finally:
        (home / "local" / "head.json").write_text(json.dumps(rec))


@pytest.mark.cluster
def test_a_start_whose_agent_cannot_listen_fails_in_one_line(home):
    """Someone takes the agent's port while the head starts (what a lingering old head did)."""
    head = Started(home)
    try:
        port, deadline = None, time.monotonic() + 30
        while port is None:  # `ray start` names the agent's port seconds before the agent binds it
            assert time.monotonic() < deadline and head.p.poll() is None, "no `ray start` seen"
            for pid in head.pids():
                m = re.search(r"ray start --head .*--dashboard-agent-listen-port=(\d+)", _cmdline(pid, 2000))
                port = int(m.group(1)) if m else port
            time.sleep(0.02)
        with socket.socket() as taker:
            taker.bind(("127.0.0.1", port))
            taker.listen()
            rc, out, err = head.result()
        assert rc == 2, (out, err)
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and errors == err.splitlines()[-1:], err
        assert f"dashboard agent could not listen on 127.0.0.1:{port}" in errors[0], errors[0]
        assert "dashboard_agent.log" in errors[0] and "was stopped" in errors[0], errors[0]
        assert out == ""
        left = head.pids()
        assert not left, [(q, _cmdline(q)) for q in sorted(left)]
        assert not (home / "local" / "head.json").exists()
    finally:
        head.close()


# --------------------------------------------------------------------------- finding the queue (no Ray)
class _StaleHead:
    """A dashboard (what :func:`rayjobs.client.queueapi.connect_queue` asks) in Ray session ``now``,
    and a queue API at ``url`` answering health as the queue of session ``queue_session``."""

    def __init__(self, now: str, queue_session: str, *, fixed: bool) -> None:
        import http.server
        import threading

        from rayjobs.contract.target import Target

        outer = self
        self.now, self.queue_session, self.started = now, queue_session, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = json.dumps({"ok": True, "version": "x", "session": outer.queue_session, "pid": 1,
                                   "started_at": 0.0, "waiting": 0, "admitted": 0, "unreadable": 0}).encode()
                self.send_response(200 if self.path == "/v1/health" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.address = "http://127.0.0.1:1"
        self.target = Target(self.address, "test", None, api=self.url if fixed else None)

    # what connect_queue reads of the dashboard
    def get_json(self, path: str, params: Any = None) -> Any:
        assert path == "/api/version"
        return {"session_name": self.now}

    def nodes(self) -> list[dict[str, Any]]:
        return [{"node_id": "head", "is_head_node": True}]

    def node_file(self, node_id: str, filename: str, lines: int = 10) -> bytes:
        # the file the queue of the session before wrote (a stale copy: same port, its session)
        return json.dumps({"port": self.port, "pid": 1, "session": self.queue_session}).encode()

    def submit(self, spec: dict[str, Any]) -> str:
        self.started += 1
        return spec["submission_id"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("fixed", [True, False], ids=["record's api url", "head's api file"])
def test_the_queue_of_a_dead_ray_session_is_never_taken_for_the_live_one(fixed):
    from rayjobs.client.queueapi import QueueDown, connect_queue

    head = _StaleHead("session_new", "session_old", fixed=fixed)
    try:
        with pytest.raises(QueueDown) as e:
            connect_queue(head, start=False, timeout=0)
        if fixed:
            assert "runs in Ray session session_old, not in the head's session_new" in str(e.value), e.value
        # and with start: it starts the new session's queue and waits for it, bounded
        with pytest.raises(QueueDown):
            connect_queue(head, start=True, timeout=1.0)
        assert head.started == 1
        head.queue_session = "session_new"  # the new session's queue now answers there
        assert connect_queue(head, start=False, timeout=0).url == head.url
    finally:
        head.close()

"""Issue 16's fault tests on real processes: a worker node dies under a running job; the dashboard
restarts while jobs wait in the queue and one is followed by ``rayjobs tail``.

* Node death: a head (no GPU) and two worker machines (1 fake GPU each), every one its own network,
  PID and mount namespace (``tests/nodes.py``), formed by the real node script. The verl stand-in
  runs one actor in its placement group's bundle (``+fake.actors=true``), so the death of that
  bundle's machine reaches the driver as verl's does (``ActorDiedError``); the runner's retry must
  resume from the last complete checkpoint on the other worker.
* Dashboard restart: a one-node cluster with 1 fake GPU (``tests/clusters.py``, one of its own: its
  dashboard is killed), so two of three jobs wait; the dashboard is SIGKILLed by PID and started
  again from its own command line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import netns  # noqa: E402
from nodes import Net, Node  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SCRIPT = str(REPO / "bootstrap" / "ray_node.py")
HEAD_URL = "http://127.0.0.1:8265"  # the node script's dashboard, on the head's loopback

needs_netns = pytest.mark.skipif(not netns.can_use() or not shutil.which("nsenter"),
                                 reason="needs root, ip and nsenter")


def wait_for(pred: Any, timeout: float, what: Any, every: float = 0.1) -> Any:
    """``pred()`` until truthy (its value), at most ``timeout`` s and ``timeout / every`` tries."""
    for _ in range(int(timeout / every) + 1):
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")


# --------------------------------------------------------------------------- a worker node dies
class Machines:
    """Three machines formed by ``bootstrap/ray_node.py``: rank 0 the head (0 GPUs), ranks 1-2 with
    1 fake GPU each; 4 CPUs declared per node (a verl bundle is 1 GPU + 3 CPU; this host has 2)."""

    def __init__(self, net: Net) -> None:
        self.net, self.head = net, net.nodes[0]
        self.workers = net.nodes[1:]
        self.token = secrets.token_hex(16)
        self.storage = net.root / "shared"  # outside /tmp: every node sees it (the shared root)
        self.project = net.root / "proj"

    def env(self, node: Node) -> dict[str, str]:
        return {**self.net.skypilot_env(node, 0 if node.rank == 0 else 1), "RAY_AUTH_TOKEN": self.token,
                "RAYJOBS_STORAGE": str(self.storage), "RAYJOBS_JOIN_TIMEOUT": "240",
                "RAY_OVERRIDE_RESOURCES": json.dumps({"CPU": 4})}

    def form(self) -> None:
        self.storage.mkdir()
        shutil.copytree(REPO / "tests" / "workloads", self.project / "workloads", ignore=shutil.ignore_patterns("conf"))
        shutil.copytree(REPO / "tests" / "workloads" / "conf", self.project / "conf")
        # The head first, the workers once it waits for them: on a loaded 2-core host three raylets
        # starting at once can miss Ray's fixed 30 s registration window.
        logs = [self.net.root / f"node{n.rank}.log" for n in self.net.nodes]
        head = self.head.popen([PY, SCRIPT], env=self.env(self.head), stdout=open(logs[0], "w"))
        wait_for(lambda: "waiting: " in logs[0].read_text() or head.poll() is not None, 180, "the head to start")
        procs = [head] + [n.popen([PY, SCRIPT], env=self.env(n), stdout=open(log, "w"))
                          for n, log in zip(self.workers, logs[1:])]
        # Workers first (the head waits for them): one that failed to start runs its script again,
        # which the node script is made for (it ends what is stale, then joins).
        for node, p, log in [*zip(self.net.nodes, procs, logs)][::-1]:
            if p.wait(timeout=300) != 0:
                again = node.run([PY, SCRIPT], env=self.env(node), timeout=300)
                assert again.returncode == 0, f"rank {node.rank}: {log.read_text()[-2000:]}{again.stderr[-2000:]}"

    def node_id(self, node: Node) -> str:
        return json.loads((node.home / ".rayjobs" / "node" / "node.json").read_text())["node_id"]

    def cli(self, module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``python -m MODULE ARGS`` on the head (its loopback reaches the dashboard), with the token."""
        env = {"RAY_AUTH_TOKEN": self.token, "RAYJOBS_STORAGE": str(self.storage),
               "RAYJOBS_PREFLIGHT_VERL": "off"}  # verl's own validation is not what this test is about
        # `env -C`: entering the node's mount namespace resets the working dir to its root.
        return self.head.run(["env", "-C", str(self.project), PY, "-m", module, *args], env=env, timeout=timeout)

    def status(self, job_id: str) -> str:
        """The job's status as ``rayjobs status --json`` shows it ("" if the command failed)."""
        r = self.cli("rayjobs.cli", "status", job_id, "--json", "--address", HEAD_URL, timeout=120)
        return json.loads(r.stdout)["status"] if r.returncode == 0 else ""

    def evidence(self, job_id: str) -> str:
        """What a failure message shows: the job's status, the end of its log, Ray's log dir."""
        logs = self.logs_dir()
        names = sorted(p.name for p in logs.glob("*job*")) if logs.is_dir() else "no log dir"
        r = self.cli("rayjobs.cli", "logs", job_id, "--address", HEAD_URL, timeout=120)
        return (f"status {self.status(job_id)!r}; log files {names}\n{self.driver_log(job_id)[-3000:]}\n"
                f"rayjobs logs: {r.stdout[-3000:]}{r.stderr[-2000:]}")

    def logs_dir(self) -> Path:
        """The head's Ray log dir as seen from outside the node (session_latest links to /tmp/...)."""
        latest = self.head.tmp / "ray" / "session_latest"
        try:
            return self.head.tmp / "ray" / Path(os.readlink(latest)).name / "logs"
        except OSError:
            return latest / "logs"

    def driver_log(self, job_id: str) -> str:
        """The job's driver log, read from the head's disk (its private /tmp) without a request."""
        path = self.logs_dir() / f"job-driver-{job_id}.log"
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""


@pytest.fixture
def machines() -> Any:
    net = Net(3)
    net.create()
    try:
        m = Machines(net)
        m.form()
        yield m
    finally:
        net.destroy()


def _actor_nodes(log: str) -> list[str]:
    """The node ids of the worker actors, in attempt order (one ``worker actors ready`` per attempt)."""
    return [ids[0] for ids in (re.findall(r"'([0-9a-f]{20,})'", ln) for ln in log.splitlines()
                               if "worker actors ready" in ln) if ids]


def _metrics_steps(storage: Path) -> dict[int, list[int]]:
    """{attempt: [steps]} from the run's per-attempt metrics files (one run in this storage)."""
    files = sorted(storage.glob("runs/*/*/metrics.*.jsonl"))
    return {int(f.name.split(".")[1]): [json.loads(ln)["step"] for ln in f.read_text().splitlines() if ln.strip()]
            for f in files}


@pytest.mark.slow
@needs_netns
def test_worker_node_death_resumes_from_the_checkpoint_on_the_other_worker(machines: Machines) -> None:
    m, steps, save = machines, 10, 3  # attempt 2 trains steps 7-10 (6 s): the resume and a save of its own (9)
    r = m.cli("rayjobs.submit", "+exp=fake_ppo", f"rayjobs.address={HEAD_URL}", "rayjobs.max_retries=2",
              f"trainer.save_freq={save}", f"+fake.steps={steps}", "+fake.step_s=1.5", "+fake.hold_gpus=true",
              "+fake.actors=true")
    assert r.returncode == 0, r.stderr[-3000:]
    job = r.stdout.strip()
    # Kill right after step 7 is logged: step 6 is saved, step 8 is still in its sleep (1.5 s; step 9's
    # save is 3 s away, room for a loaded machine), so the in-flight step cannot complete and the
    # tracker at the kill is the one attempt 2 must use.
    wait_for(lambda: "step:7 - " in m.driver_log(job), 120, lambda: f"step 7 of attempt 1:\n{m.evidence(job)}")
    first = _actor_nodes(m.driver_log(job))
    assert len(first) == 1, m.driver_log(job)[-3000:]
    victim = next(w for w in m.workers if m.node_id(w) == first[0])
    victim.crash()  # every process of that machine, SIGKILL
    tracker = next(m.storage.glob("checkpoints/*/*/latest_checkpointed_iteration.txt"))
    at_kill = int(tracker.read_text())
    assert at_kill == 6, at_kill

    wait_for(lambda: "attempt finished with exit code 0" in m.driver_log(job), 300, "a successful attempt", every=0.5)
    log = m.driver_log(job)
    # verl's driver sees its worker's death as Ray reports it: ActorUnavailableError when the call
    # finds the node's port closed before Ray has declared the node dead (its health check, ~15 s),
    # ActorDiedError after. Either ends attempt 1's traceback; the runner retries.
    died = re.search(r"^Traceback \(most recent call last\):\n(?:[ \t].*\n)+"
                     r"ray\.exceptions\.Actor(?:Died|Unavailable)Error: ", log, re.M)
    assert died and "attempt finished with exit code 1 " in log and "retrying (1/2)" in log, log[-4000:]
    assert "attempt 2 of run" in log and "attempt 3 of run" not in log, log[-4000:]
    assert f"Resuming from {tracker.parent / f'global_step_{at_kill}'}" in log, log[-4000:]
    survivor = next(w for w in m.workers if w is not victim)
    assert _actor_nodes(log) == [first[0], m.node_id(survivor)]
    by_attempt = _metrics_steps(m.storage)
    assert sorted(by_attempt) == [1, 2], by_attempt
    assert by_attempt[1][:at_kill + 1] == list(range(1, at_kill + 2))  # attempt 1 got past the checkpoint
    assert by_attempt[2] == list(range(at_kill + 1, steps + 1))  # attempt 2: from M+1, nothing skipped
    assert sorted(set(by_attempt[1]) | set(by_attempt[2])) == list(range(1, steps + 1))
    ended = ("SUCCEEDED", "FAILED", "STOPPED")
    assert wait_for(lambda: (st := m.status(job)) in ended and st, 60, "the job's end", every=1.0) == "SUCCEEDED"


# --------------------------------------------------------------------------- the dashboard restarts
@pytest.fixture
def one_gpu(fresh_clusters: Any) -> Any:
    """A one-node cluster with 1 fake GPU (4 CPUs) of this test's own: one 1-GPU job runs, the others wait."""
    return fresh_clusters.get(((1, 4),), fresh=True)


def _argv(pid: int) -> list[bytes]:
    try:
        return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def restart_dashboard(cluster: Any, pause: float = 1.0) -> None:
    """SIGKILL the cluster's dashboard by PID, then start it again from its own command line,
    environment and cwd (Ray 2.60 does not restart a dead head dashboard: nothing supervises it)."""
    from test_tail import _gone

    pid = next(p for p in cluster.pids() if len(_argv(p)) > 1 and _argv(p)[1].endswith(b"dashboard/dashboard.py"))
    argv = _argv(pid)
    env = dict(x.split(b"=", 1) for x in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in x)
    cwd = os.readlink(f"/proc/{pid}/cwd")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _gone(pid), 20, "the dashboard to die", every=0.05)
    time.sleep(pause)  # down for a while: the tail must notice, not just reconnect at once
    subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)

    def answers() -> bool:
        try:
            urllib.request.urlopen(cluster.address + "/api/version", timeout=2).close()
            return True
        except Exception:  # noqa: BLE001 (not up yet)
            return False

    wait_for(answers, 120, "the dashboard to answer again", every=0.2)


def _rows(cluster: Any) -> dict[str, dict[str, Any]]:
    from conftest import cli_json

    return {row["id"]: row for row in cli_json(cluster, "list")}


@pytest.mark.slow
def test_dashboard_restart_keeps_the_queue_and_the_tail_loses_no_line(one_gpu: Any, workdir: Path) -> None:
    from conftest import cli_on, send_on, view, wait_done
    from test_tail import Tail, steps_in

    c, steps = one_gpu, 120

    def submit(*args: str) -> str:
        return send_on(c, "+fake.hold_gpus=true", *args)

    running = submit(f"+fake.steps={steps}", "+fake.step_s=0.4")  # (48 s: a restart under load takes up to 20)
    waiting = [submit("+fake.steps=3", f"trainer.total_epochs={k}") for k in (1, 2)]
    tail = Tail(running, "--plain", "--address", c.address)
    tail.wait_for(r"step:5 - ", timeout=180)
    before = _rows(c)
    assert [(before[i]["status"], before[i]["queue_position"]) for i in waiting] == [("QUEUED", 1), ("QUEUED", 2)]
    assert before[running]["status"] == "RUNNING", before[running]

    restart_dashboard(c, pause=2.0)
    after = _rows(c)  # while the first job still runs (it has ~48 s of steps): the queue as it was
    # (on a loaded 2-core machine Ray's restarted JobManager once marked it FAILED: its message says why)
    assert after[running]["status"] == "RUNNING", (after[running].get("message"), after[running].get("error"),
                                                   steps_in(tail.stdout)[-1:])
    assert [(after[i]["status"], after[i]["queue_position"]) for i in waiting] == [("QUEUED", 1), ("QUEUED", 2)]

    assert tail.wait(300) == 0, tail.stderr
    assert "interrupted" in tail.stderr and "answers again" in tail.stderr, tail.stderr
    assert steps_in(tail.stdout) == list(range(1, steps + 1))  # every step once, in order
    logs = cli_on(c, "logs", running)
    assert logs.returncode == 0 and logs.stdout == tail.stdout  # byte for byte: nothing lost or repeated
    for i in [running, *waiting]:
        assert wait_done(c, i, timeout=240) == "SUCCEEDED", c.client().get_job_logs(i)[-1500:]
    rows = _rows(c)
    assert all(rows[i]["status"] == "SUCCEEDED" for i in [running, *waiting]), rows
    starts = [float(view(c, i)["admitted_at"]) for i in (running, *waiting)]  # the queue's record
    assert starts == sorted(starts) and len(set(starts)) == 3, starts

"""Clean GPUs between jobs (issue 16): what an ended job left running is ended before the next job
is admitted onto its GPUs, and reported; a live job's processes are never touched.

The fault: ``+fake.orphan=true`` makes the verl stand-in leave a process in its own session (out of
the trainer's process group, so Ray's job cleanup misses it), deaf to SIGTERM, registered with the
fake ``nvidia-smi`` (tests/workloads/bin) as holding 5120 MiB of a fake GPU. The cluster is a real
1-node Ray head (2 fake GPUs) whose PATH has that ``nvidia-smi`` first. A test can make the fake
list a process's memory after it ended (the driver has not freed it yet) until it removes a file.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import pytest
from conftest import REPO, FakeGpuCluster, log_of, rayjobs_cli, send_on, view, wait_done, wait_until

from rayjobs.oncluster import reaper
from rayjobs.shared import JOB_MARK_ENV

BIN = REPO / "tests" / "workloads" / "bin"
ORPHAN = re.compile(r"orphan pid (\d+)")
TRAINER = re.compile(r"\(TaskRunner pid=(\d+)\)")
#: The next job's first act: is the orphan (its pid the argument) still there?
CHECK = """import sys
pid = int(sys.argv[1])
try:
    state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
except OSError:
    state = "gone"
print(f"orphan {pid} at start: {'gone' if state in ('gone', 'Z') else 'ALIVE (' + state + ')'}", flush=True)
"""


def gone(pid: int) -> bool:
    """The process has ended (a zombie holds nothing: its parent, init here, may not reap it at once)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class DeathWatch:
    """When a process ends, to the millisecond: a thread blocked on its pidfd (readable at exit)."""

    def __init__(self, pid: int) -> None:
        self.fd = os.pidfd_open(pid)
        self.at: Optional[float] = None
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        select.select([self.fd], [], [], 600)
        self.at = time.time()
        os.close(self.fd)


# --------------------------------------------------------------------------- unit: parsing, one node
def test_environ_and_nvidia_smi_parsing():
    env = b"PATH=/bin\0RAYJOBS_JOBX=no\0RAYJOBS_JOB=fake_ppo-1\0HOME=/root\0"
    assert reaper.environ_mark(env) == "fake_ppo-1"
    assert reaper.environ_mark(b"PATH=/bin\0RAYJOBS_JOBS=x\0") is None
    assert reaper.environ_mark(b"") is None
    out = "1234, 5120\n1234, 100\n  77, [N/A]\n88,[Not Supported]\nNo running processes found\n\n"
    assert reaper.parse_compute_apps(out) == {1234: 5220, 77: None, 88: None}
    assert reaper.is_ray_own(["ray::TaskRunner.run"]) and reaper.is_ray_own(["/x/bin/raylet", "--a"])
    assert reaper.is_ray_own(["/v/bin/python3", "/v/lib/python3.11/site-packages/ray/_private/workers/default_worker.py"])
    assert not reaper.is_ray_own(["python3", "-m", "vllm.entrypoints"]) and not reaper.is_ray_own([])
    line = reaper.Reaped(12, "python3", 5120, "SIGKILL", "10.0.0.2").line()
    assert line == "pid 12 (python3, 5120 MiB GPU) SIGKILL on 10.0.0.2"


def _spawn(code: str, mark: Optional[str]) -> subprocess.Popen:
    """A real process (its own session, as an orphan), marked ``RAYJOBS_JOB=mark``; ready once it printed."""
    env = {k: v for k, v in os.environ.items() if k != JOB_MARK_ENV}
    if mark is not None:
        env[JOB_MARK_ENV] = mark
    p = subprocess.Popen([sys.executable, "-c", code + "\nprint('ready', flush=True)\nimport time; time.sleep(600)"],
                         env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_reap_node_ends_the_marked_processes_and_reports_stray_gpu_holders(tmp_path, monkeypatch):
    deaf = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)"
    procs = {"polite": _spawn("", "jobA"), "deaf": _spawn(deaf, "jobA"), "other": _spawn("", "jobA-r1"),
             "stray": _spawn("", None)}
    try:
        apps = tmp_path / "apps"
        apps.write_text(f"{procs['deaf'].pid},5120\n{procs['stray'].pid},1000\n999999999,7\n")
        monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_NVIDIA_SMI_APPS", str(apps))
        assert reaper.gpu_apps() == {procs["deaf"].pid: 5120, procs["stray"].pid: 1000}  # the dead pid is not listed
        got = {d["pid"]: d for d in reaper.reap_node("jobA", grace_s=1.0)}
        assert set(got) == {procs["polite"].pid, procs["deaf"].pid, procs["stray"].pid}, got
        assert got[procs["polite"].pid]["how"] == "SIGTERM" and got[procs["polite"].pid]["gpu_mib"] is None
        assert got[procs["deaf"].pid]["how"] == "SIGKILL" and got[procs["deaf"].pid]["gpu_mib"] == 5120
        assert got[procs["stray"].pid]["how"] == "" and got[procs["stray"].pid]["gpu_mib"] == 1000
        assert "holds a GPU and is no rayjobs job's" in reaper.Reaped(**got[procs["stray"].pid]).line()
        assert gone(procs["polite"].pid) and gone(procs["deaf"].pid)
        assert not gone(procs["other"].pid) and not gone(procs["stray"].pid)  # another job's; no job's
        assert reaper.reap_node("jobA", grace_s=1.0) == [got[procs["stray"].pid]]  # nothing left to end
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def test_the_reap_at_a_trainers_ray_exit_spares_what_a_live_runner_still_runs():
    # a stand-in runner (its command line names the runner module) whose marked child goes on
    # without Ray, as a trainer uploading its checkpoints would; and a marked orphan outside it
    runner = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; "
                               "subprocess.Popen(['sleep', '60'], env=dict(os.environ, RAYJOBS_JOB='jobS')); "
                               "time.sleep(60)", "rayjobs.oncluster.runner"])
    orphan = _spawn("", "jobS")
    try:
        child = wait_until(lambda: [p for p in reaper.scan("jobS", {})[0] if p != orphan.pid], 10, "the runner's child")[0]
        got = {d["pid"] for d in reaper.reap_node("jobS", grace_s=1.0, spare_live=True)}
        assert got == {orphan.pid} and not gone(child)
        assert {d["pid"] for d in reaper.reap_node("jobS", grace_s=1.0)} == {child}  # at the job's end: all of it
    finally:
        for p in (runner, orphan):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def _said(p: subprocess.Popen, seconds: float) -> str:
    """The next line ``p`` prints within ``seconds`` ("" if none)."""
    ready, _, _ = select.select([p.stdout], [], [], seconds)
    return p.stdout.readline().strip() if ready else ""


@pytest.mark.parametrize("first_in", ["thread", "process"])
def test_a_reap_begun_during_another_reap_of_the_job_signals_nothing_twice_and_says_how_it_ended(first_in):
    # The queue reaps a job twice, in threads of its pool (at its trainer's Ray exit, and when its
    # Ray job has ended); raylets sharing a machine reap it in processes of their own. Here the
    # second reap begins inside the first one's grace. Each used to signal the process itself and
    # say the last signal it had sent before the process ended: SIGTERM, for one the first reap's
    # SIGKILL ended (and the queue's record had that line only when it collected the second first).
    deaf = _spawn("import signal; signal.signal(signal.SIGTERM, lambda *a: print('TERM', flush=True))", "jobT")
    first: list = []
    if first_in == "thread":
        other = threading.Thread(target=lambda: first.extend(reaper.reap_node("jobT", grace_s=2.0)), daemon=True)
        other.start()
    else:
        other = subprocess.Popen([sys.executable, "-c", "import json; from rayjobs.oncluster import reaper; "
                                  "print(json.dumps(reaper.reap_node('jobT', grace_s=2.0)))"], stdout=subprocess.PIPE)
    try:
        assert _said(deaf, 60) == "TERM"  # the first reap's SIGTERM: it is in its grace now
        second = reaper.reap_node("jobT", grace_s=60.0)
        if first_in == "thread":
            other.join(60)
        else:
            first = json.loads(other.communicate(timeout=60)[0])
        assert [(d["pid"], d["how"]) for d in first] == [(deaf.pid, "SIGKILL")], first
        assert [(d["pid"], d["how"]) for d in second] == [(deaf.pid, "SIGKILL")], second  # the first one's kill
        assert gone(deaf.pid) and deaf.stdout.read().split() == []  # one SIGTERM in all
    finally:
        for p in (deaf, other) if first_in == "process" else (deaf,):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lines: str) -> Path:
    """The fake nvidia-smi on PATH, listing ``lines``; the file its calls are counted in."""
    (tmp_path / "apps").write_text(lines)
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_APPS", str(tmp_path / "apps"))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CALLS", str(tmp_path / "calls"))
    return tmp_path / "calls"


def calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_reap_ends_only_once_nvidia_smi_lists_none_of_the_jobs_gpu_memory(tmp_path, monkeypatch):
    # Seen on the H200: a job's process in its exit held 1,448 MiB (freed ~90 ms later) when the next
    # job was admitted. Here the fake lists memory until the test removes `held`: of a marked process
    # the reap ends, and of a marked one already in its exit (a zombie: its mark can no longer be read).
    polite = _spawn("", "jobG")
    exiting = subprocess.Popen([sys.executable, "-c", ""], env=dict(os.environ, **{JOB_MARK_ENV: "jobG"}))
    stray = _spawn("", None)  # no job's: listed all along, reported, not waited for
    try:
        wait_until(lambda: Path(f"/proc/{exiting.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 30,
                   "a zombie (its parent, this test, does not wait for it yet)", every=0.05)
        held = tmp_path / "held"
        held.touch()
        log = _fake_gpus(monkeypatch, tmp_path, f"{polite.pid},1448,{held}\n{exiting.pid},512,{held}\n"
                                                f"{stray.pid},1000\n")
        monkeypatch.setenv("RAYJOBS_REAP_GPU_WAIT_S", "300")  # far more than the test takes: never what ends it
        got: list = []
        t = threading.Thread(target=lambda: got.extend(reaper.reap_node("jobG", grace_s=1.0)), daemon=True)
        t.start()
        wait_until(lambda: gone(polite.pid), 30, "the marked process ended", every=0.05)
        n = calls(log)
        wait_until(lambda: calls(log) >= n + 3 or not t.is_alive(), 60, "the reap asking nvidia-smi again", every=0.05)
        assert t.is_alive(), f"the reap ended while nvidia-smi still listed the job's memory: {got}"
        held.unlink()  # the driver frees it
        t.join(60)
        assert not t.is_alive()
        assert [(d["pid"], d["how"], d["held_s"]) for d in got] == [(polite.pid, "SIGTERM", None), (stray.pid, "", None)], got
        assert f" {polite.pid}" not in log.read_text().splitlines()[-1]  # it ended on a listing without them
    finally:
        for p in (polite, exiting, stray):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def test_a_reap_waits_for_memory_listed_under_a_pid_no_process_has_any_more(tmp_path, monkeypatch):
    """Issue 45 item 11: Ray had ended a halved point's worker before the reap looked, and the driver
    still listed its 1,454 MiB; the reap, counting only pids still in /proc, returned at once and the
    next point was admitted onto it. Memory of a pid gone from /proc is waited for now; one that
    stays listed through a whole wait is another PID namespace's, remembered, not waited for again."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's own reap locks and memo
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()  # its pid is no process any more
    held = tmp_path / "held"
    held.touch()
    log = _fake_gpus(monkeypatch, tmp_path, f"{ended.pid},1454,{held}\n")
    monkeypatch.setenv(reaper.GPU_WAIT_ENV, "300")  # far more than the test takes: never what ends it
    got: list = []
    t = threading.Thread(target=lambda: got.extend(reaper.reap_node("jobW", grace_s=1.0)), daemon=True)
    t.start()
    n = calls(log)
    wait_until(lambda: calls(log) >= n + 3 or not t.is_alive(), 60, "the reap asking nvidia-smi again", every=0.05)
    assert t.is_alive(), f"the reap ended while nvidia-smi still listed an ended process's memory: {got}"
    held.unlink()  # the driver frees it
    t.join(60)
    assert not t.is_alive() and got == [], got  # nothing to end, nothing left held

    held.touch()  # listed all along now, under a pid no process here has: another namespace's
    monkeypatch.setenv(reaper.GPU_WAIT_ENV, "0.5")
    first = [reaper.Reaped(**d) for d in reaper.reap_node("jobX", grace_s=1.0)]
    assert [(r.pid, r.kind(), r.name) for r in first] == [(ended.pid, "held", "no process here")], first
    monkeypatch.setenv(reaper.GPU_WAIT_ENV, "300")
    n = calls(log)
    assert reaper.reap_node("jobY", grace_s=1.0) == []  # remembered: not waited for
    assert calls(log) == n + 1  # one listing: nothing to wait for


def test_a_reap_that_hit_its_bound_says_what_still_holds_gpu_memory(tmp_path, monkeypatch):
    p = _spawn("", "jobH")
    try:
        held = tmp_path / "held"
        held.touch()  # never removed: the memory stays listed
        _fake_gpus(monkeypatch, tmp_path, f"{p.pid},1448,{held}\n")
        monkeypatch.setenv(reaper.GPU_WAIT_ENV, "0.5")  # the head's setting; reap_job passes it to each node
        got = [reaper.Reaped(**d) for d in reaper.reap_node("jobH", grace_s=1.0)]
        assert [(r.pid, r.kind()) for r in got] == [(p.pid, "ended"), (p.pid, "held")], got
        assert got[1].line() == (f"pid {p.pid} ({got[0].name}) on {got[1].node} still holds 1448 MiB GPU 0.5 s "
                                 "after the reap began; admitted anyway")
        assert [r.kind() for r in reaper.merge([[asdict(r) for r in got]])] == ["ended", "held"]
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


# --------------------------------------------------------------------------- a real cluster
@pytest.fixture
def gpu_node(one_node: FakeGpuCluster) -> FakeGpuCluster:
    """The shared 1-node cluster: the fake nvidia-smi on its PATH, a reap's wait for GPU memory 20 s."""
    return one_node


def pid_in_log(c: FakeGpuCluster, sid: str, pattern: re.Pattern) -> int:
    m = wait_until(lambda: pattern.search(log_of(c, sid)), 120, f"{pattern.pattern} in {sid}'s log")
    return int(m.group(1))


def history(c: FakeGpuCluster, sid: str) -> dict[str, Any]:
    """The queue's record of an ended job (its view: admitted_at, reaped, ...)."""
    wait_done(c, sid, timeout=120)
    return view(c, sid)


def waiting(c: FakeGpuCluster) -> set[str]:
    return {v["submission_id"] for v in c.queue().jobs(status=["QUEUED"])}


def stray_gpu_holder(c: FakeGpuCluster) -> subprocess.Popen:
    """A GPU holder that is no job's (not marked, not Ray's): reported by every reap, never killed."""
    p = subprocess.Popen(["sleep", "600"], env={k: v for k, v in os.environ.items() if k != JOB_MARK_ENV})
    with open(c.apps, "a") as f:
        f.write(f"{p.pid},1000\n")
    return p


def test_an_orphan_holding_a_gpu_is_reaped_before_the_next_job_is_admitted(gpu_node, workdir):
    c = gpu_node
    (workdir / "workloads" / "orphan_check.py").write_text(CHECK)
    stray = stray_gpu_holder(c)
    try:
        whole = ("trainer.n_gpus_per_node=2", "+fake.hold_gpus=true", "+fake.steps=1")
        a = send_on(c, *whole, "+fake.orphan=true", "+fake.hold_s=600")
        orphan = pid_in_log(c, a, ORPHAN)
        death = DeathWatch(orphan)
        # B needs both GPUs too: it waits for A (stopped below), then checks first thing that A's orphan is gone
        b = send_on(c, "trainer.n_gpus_per_node=2", f"rayjobs.entrypoint='python3 workloads/orphan_check.py {orphan}'")
        assert b in waiting(c), "B should wait for A's GPUs"
        c.client().stop_job(a)  # SIGTERM to A's process group: the orphan, in a session of its own, stays
        assert wait_done(c, a, timeout=120) == "STOPPED", log_of(c, a)[-1500:]
        assert wait_done(c, b, timeout=120) == "SUCCEEDED", log_of(c, b)[-1500:]
        ha, hb = history(c, a), history(c, b)
        assert f"orphan {orphan} at start: gone" in log_of(c, b), log_of(c, b)[-1500:]
        assert death.at is not None and death.at <= float(hb["admitted_at"]), (death.at, hb["admitted_at"])
        # once, as SIGKILL (deaf to SIGTERM), though the queue's two reaps of A overlap (at its trainer's
        # Ray exit, and within that reap's grace at its Ray job's end): the second used to add 'SIGTERM'
        # (or, seeing the orphan in its exit, 'warning: ... no rayjobs job's'), and when the queue
        # collected it before the first, that line was all the record had (the flake, issue 28 item 12)
        killed = [ln for ln in ha["reaped"] if f"pid {orphan} " in ln]
        assert len(killed) == 1 and "(python3, 5120 MiB GPU) SIGKILL" in killed[0], ha["reaped"]
        assert [ln for ln in ha["reaped"] if ln.startswith(f"warning: pid {stray.pid} ") and "1000 MiB GPU" in ln]
        assert stray.poll() is None  # reported, never killed
        r = rayjobs_cli("status", a, "--json", "--address", c.address)
        assert r.returncode == 0, r.stderr
        assert killed[0] in json.loads(r.stdout).get("reaped", []), r.stdout  # what the laptop sees
    finally:
        stray.kill()
        stray.wait(timeout=10)


def hold_memory(c: FakeGpuCluster, pid: int, held: Path) -> None:
    """The fake nvidia-smi lists ``pid``'s memory, even after it ended, until ``held`` is removed."""
    held.touch()
    apps = c.apps
    apps.write_text("".join(f"{ln},{held}\n" if ln.split(",")[0] == str(pid) else f"{ln}\n"
                            for ln in apps.read_text().splitlines()))


def test_the_next_job_is_not_admitted_while_nvidia_smi_lists_the_ended_jobs_memory(gpu_node, workdir):
    c = gpu_node
    held = c.root / f"held-{time.monotonic_ns()}"
    whole = ("trainer.n_gpus_per_node=2", "+fake.hold_gpus=true", "+fake.steps=1")
    a = send_on(c, *whole, "+fake.orphan=true", "+fake.hold_s=600")
    orphan = pid_in_log(c, a, ORPHAN)
    hold_memory(c, orphan, held)  # as a process tearing down CUDA, or a driver that has not freed it yet
    try:
        b = send_on(c, "trainer.n_gpus_per_node=2", "+fake.steps=1")
        assert b in waiting(c), "B should wait for A's GPUs"
        c.client().stop_job(a)
        # Ray's word, not the queue's: the queue finishes A only once its reap -- held here -- returns
        wait_until(lambda: str(c.client().get_job_status(a)) == "STOPPED", 120, "Ray to stop A")
        wait_until(lambda: gone(orphan), 60, "A's orphan SIGKILLed")
        n = calls(c.smi_calls)
        wait_until(lambda: calls(c.smi_calls) >= n + 3 or b not in waiting(c), 60, "the reaper asking nvidia-smi")
        assert b in waiting(c), "B was admitted while nvidia-smi still listed A's orphan's 5120 MiB"
        freed_at = time.time()
        held.unlink()
        assert wait_done(c, b, timeout=120) == "SUCCEEDED", log_of(c, b)[-1500:]
        assert float(history(c, b)["admitted_at"]) >= freed_at
        reaped = history(c, a)["reaped"]
        assert [ln for ln in reaped if f"pid {orphan} " in ln] == [f"pid {orphan} (python3, 5120 MiB GPU) SIGKILL on 127.0.0.1"], reaped
    finally:
        held.unlink(missing_ok=True)


def test_a_live_jobs_processes_are_not_touched(gpu_node, workdir):
    c = gpu_node
    one = ("trainer.n_gpus_per_node=1", "+fake.hold_gpus=true", "+fake.steps=1", "+fake.orphan=true")
    live = send_on(c, *one, "+fake.hold_s=600")
    live_orphan, live_trainer = pid_in_log(c, live, ORPHAN), pid_in_log(c, live, TRAINER)
    ended = send_on(c, *one)
    ended_orphan = pid_in_log(c, ended, ORPHAN)
    assert wait_done(c, ended, timeout=120) == "SUCCEEDED", log_of(c, ended)[-1500:]
    reaped = history(c, ended)["reaped"]
    assert [ln for ln in reaped if ln.startswith(f"pid {ended_orphan} ")], reaped
    assert gone(ended_orphan)
    assert not gone(live_orphan) and not gone(live_trainer)  # the live job's: untouched
    assert not [ln for ln in reaped if f"pid {live_orphan} " in ln or f"pid {live_trainer} " in ln], reaped
    c.client().stop_job(live)
    assert wait_done(c, live, timeout=120) == "STOPPED"
    assert [ln for ln in history(c, live)["reaped"] if ln.startswith(f"pid {live_orphan} ")]  # now its turn
    assert gone(live_orphan)

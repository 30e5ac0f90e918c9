"""``rayjobs tail`` against the real embedded head: plain output, exit codes, Ctrl-C, a dashboard
restart mid-tail (no lost or repeated lines), and the live panel on a terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from conftest import rayjobs_cli, rayjobs_submit, wait_terminal
from jobfactory import job_view

STEP = re.compile(r"^\(TaskRunner pid=\d+\) step:(\d+) - ", re.M)


def submit(*args: str) -> str:
    r = rayjobs_submit("+exp=fake_ppo", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


class Tail:
    """``rayjobs tail ID`` in the background; its output collected line by line."""

    def __init__(self, job_id: str, *extra: str) -> None:
        # PYTHONFAULTHANDLER: a tail that hangs is sent SIGABRT by wait(), which then prints where
        # every thread of it was (a failure that says why, not only "timed out").
        # SIGINT back to its default in the child: a test run started in the background by a
        # non-interactive shell inherits SIGINT *ignored*, and Python then never raises
        # KeyboardInterrupt, so the Ctrl-C test hung (the thread dump showed tail still streaming).
        self.p = subprocess.Popen([sys.executable, "-m", "rayjobs.cli", "tail", job_id, *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.out: list[str] = []
        self.err: list[str] = []
        self.threads = [threading.Thread(target=self._pump, args=(s, acc), daemon=True)
                        for s, acc in ((self.p.stdout, self.out), (self.p.stderr, self.err))]
        for t in self.threads:
            t.start()

    @staticmethod
    def _pump(stream, acc) -> None:
        for line in stream:
            acc.append(line)

    def wait_for(self, pattern: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, "".join(self.out)):
                return
            assert self.p.poll() is None, f"tail exited early: {''.join(self.err)}"
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not seen in {timeout} s: {''.join(self.out)[-2000:]}")

    def wait(self, timeout: float = 120) -> int:
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.send_signal(signal.SIGABRT)  # the fault handler dumps every thread's stack
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                pass
            for t in self.threads:
                t.join(5)
            raise AssertionError(f"tail still running after {timeout} s; its stderr:\n{self.stderr[-6000:]}")
        finally:
            if self.p.poll() is None:
                self.p.kill()
        for t in self.threads:
            t.join(10)
        return rc

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def steps_in(text: str) -> list[int]:
    return [int(s) for s in STEP.findall(text)]


def test_tail_plain_success_and_real_format_lines(cluster, client, workdir):
    job = submit("+fake.steps=6", "+fake.step_s=0.2")
    t = Tail(job[:-1])  # a unique prefix is enough
    assert t.wait() == 0, t.stderr
    out = t.stdout
    assert "\x1b" not in out and "\r" not in out  # not a terminal: plain lines, no ANSI codes
    assert steps_in(out) == [1, 2, 3, 4, 5, 6]
    assert "(TaskRunner pid=" in out and "Total training steps: 6" in out and "np.float64(" in out
    assert "Training Progress: 100%|######| 6/6" in out
    last = t.stderr.strip().splitlines()[-1]
    assert f"{job} · SUCCEEDED" in last and "step 6/6" in last and "score 0.9" in last
    assert "W&B https://wandb.ai/rl-team/verl_examples/runs/fake" in last
    logs = rayjobs_cli("logs", job)
    assert logs.returncode == 0 and logs.stdout == out  # tail printed the whole log, once
    assert "\x1b" not in logs.stdout
    n3 = rayjobs_cli("logs", job, "--tail", "3")
    assert n3.stdout.splitlines() == out.splitlines()[-3:]
    t3 = rayjobs_cli("tail", job, "-n", "3")  # attach to a finished job: only the last 3 lines
    assert t3.returncode == 0 and t3.stdout.splitlines() == out.splitlines()[-3:]
    assert "earlier lines not shown" in t3.stderr and "step 6/6" in t3.stderr  # yet it read all of it


def test_tail_exit_codes_failed_stopped_and_ctrl_c(cluster, client, workdir):
    r = rayjobs_submit("-m", "+exp=fake_ppo", "+fake.fail_at=2,0", "+fake.steps=400", "+fake.step_s=0.1")
    assert r.returncode == 0, r.stderr
    failed, longrun = r.stdout.split()  # one submit (a sweep): a job failing at step 2, one running on
    t = Tail(failed)
    assert t.wait() == 1, t.stderr
    assert "FAILED" in t.stderr and "Traceback" in t.stdout and steps_in(t.stdout) == [1, 2]
    # the one-line summary names the exception (not Ray's message cut mid-path), without ANSI codes
    summary = t.stderr.strip().splitlines()[-1]
    assert summary.startswith(f"rayjobs: {failed} FAILED: RuntimeError: fake crash at step 2"), t.stderr
    assert "\x1b" not in t.stderr

    # Ctrl-C detaches (130) and leaves the job running
    t = Tail(longrun)
    t.wait_for(r"step:2 - ")
    t.p.send_signal(signal.SIGINT)
    assert t.wait(30) == 130
    assert f"rayjobs tail {longrun}" in t.stderr and f"rayjobs stop {longrun}" in t.stderr
    assert str(client.get_job_status(longrun)) == "RUNNING"

    t = Tail(longrun)
    t.wait_for(r"step:4 - ")
    stop = rayjobs_cli("stop", longrun)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == f"{longrun} STOPPED"
    assert t.wait(60) == 3, t.stderr
    assert "STOPPED" in t.stderr.splitlines()[-1]
    again = rayjobs_cli("stop", longrun)  # idempotent
    assert again.returncode == 0 and again.stdout.strip() == f"{longrun} STOPPED" and "already STOPPED" in again.stderr
    # tail of a job that already ended: the whole log, then its exit code at once
    t = Tail(failed)
    assert t.wait(60) == 1


def _head() -> dict:
    return json.loads((Path(os.environ["RAYJOBS_HOME"]) / "local" / "head.json").read_text())


def _dashboard_pid(temp_dir: str) -> int:
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].endswith(b"dashboard/dashboard.py") and any(temp_dir.encode() in a for a in argv):
            return int(p.name)
    raise AssertionError("no dashboard process of the embedded head")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def restart_dashboard(pause: float = 1.0) -> float:
    """Kill the head's dashboard by PID and start it again exactly as Ray started it.

    Ray 2.60 does not restart a dead head dashboard by itself (nothing supervises it; the
    raylet only restarts the per-node agent), so we reuse the killed process's own command
    line, environment and cwd from /proc. Returns the seconds until it answered again.
    """
    from rayjobs.client import embedded, headprocs

    rec = _head()
    pid = _dashboard_pid(rec["temp_dir"])
    argv = [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    env = dict(x.split(b"=", 1) for x in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in x)
    cwd = os.readlink(f"/proc/{pid}/cwd")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(pause)
    subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(rec["dashboard"] + "/api/version", timeout=2)
            break
        except urllib.error.HTTPError:
            break  # 401: it answers
        except Exception:
            time.sleep(0.2)
    # keep the head's record exact, so stopping it later kills only its own processes
    rec["pids"] = headprocs.head_pids(rec)
    (Path(os.environ["RAYJOBS_HOME"]) / "local" / "head.json").write_text(json.dumps(rec, indent=2))
    return time.monotonic() - t0


def test_tail_survives_a_dashboard_restart_without_lost_or_repeated_lines(cluster, client, workdir):
    job = submit("+fake.steps=70", "+fake.step_s=0.4")  # (28 s: the tail is still following after the restart)
    t = Tail(job)
    t.wait_for(r"step:5 - ")
    down = restart_dashboard(pause=1.0)
    assert t.p.poll() is None, t.stderr
    rc = t.wait(180)
    assert rc == 0, t.stderr
    assert "interrupted" in t.stderr and "answers again" in t.stderr, t.stderr
    steps = steps_in(t.stdout)
    assert steps == list(range(1, 71)), (down, steps)
    # byte for byte what the job wrote: nothing lost, nothing repeated
    logs = rayjobs_cli("logs", job)
    assert logs.returncode == 0 and logs.stdout == t.stdout
    assert wait_terminal(client, job) == "SUCCEEDED"


def test_tail_on_a_terminal_shows_the_live_panel(cluster, client, workdir):
    job = submit("+fake.steps=8", "+fake.step_s=1.0")  # (8 s of steps: the tail attaches while it runs)
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="140", LINES="40", TERM="xterm-256color")
    p = subprocess.Popen([sys.executable, "-m", "rayjobs.cli", "tail", job], stdin=slave, stdout=slave,
                         stderr=slave, env=env, close_fds=True)
    os.close(slave)
    data = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        elif p.poll() is not None:
            break
    rc = p.wait(30)
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", data.decode("utf-8", "replace"))
    assert rc == 0, text[-3000:]
    for want in ("SUCCEEDED", "step 8/8", "100%", "score", "0.9", "resp_len", "openai/gsm8k/reward/mean@1",
                 "W&B", "https://wandb.ai/rl-team/verl_examples/runs/fake", "attempt 1", "step:8 - "):
        assert want in text, want
    assert "ETA" in text  # shown while it ran


class _Follower:
    """A narrow stand-in for LogFollower: a heartbeat BEFORE the first byte, as the real stream
    sometimes does (the flaky `tail -n 3` printed the whole log of a finished job then)."""

    def __init__(self, items: list, status: str) -> None:
        self.items, self.job, self.seen = items, {"status": status}, 0

    @property
    def status(self) -> str:
        return self.job["status"]

    def quiet_s(self) -> float:
        return 0.0

    def __iter__(self):
        for it in self.items:
            if it:
                self.seen += len(it)
            yield it


class _View:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def update(self, *a) -> None:
        pass


def test_backlog_of_an_ended_job_waits_for_the_end_even_after_an_early_heartbeat(capsys):
    from rayjobs.views import jobtail
    from rayjobs.views import logparse

    log = b"".join(b"line %d\n" % i for i in range(10))
    for items in ([None, log[:30], None, log[30:], None], [None, None, log], [log, None]):
        view = _View()
        jobtail._stream(_Follower(items, "SUCCEEDED"), logparse.Progress(), view, jobtail._Backlog(3), "j")
        assert view.text == "line 7\nline 8\nline 9\n", items
        assert "7 earlier lines not shown" in capsys.readouterr().err
    # a live job: the backlog ends once bytes came and the stream paused; then lines go out live
    view = _View()
    jobtail._stream(_Follower([None, log, None, b"live\n"], "RUNNING"), logparse.Progress(), view,
                   jobtail._Backlog(3), "j")
    assert view.text == "line 7\nline 8\nline 9\nlive\n"


class _RestartingHead:
    """A dashboard whose queue does not answer for its first ``down`` asks (the head's Ray came back
    and its queue is starting), then answers with ``views`` in turn (the last one for ever)."""

    def __init__(self, down: int, views: list) -> None:
        self.down, self.views, self.forgotten = down, views, 0

    @property
    def queue(self):
        from rayjobs.client.queueapi import QueueDown

        head = self

        class _Q:
            def view(self, job_id):
                if head.down > 0:
                    head.down -= 1
                    raise QueueDown("the cluster's queue at http://127.0.0.1:1 does not answer (refused)")
                v = head.views.pop(0) if len(head.views) > 1 else head.views[0]
                return None if v is None else job_view(job_id, **v)
        return _Q()

    def forget_queue(self) -> None:
        self.forgotten += 1


def test_a_tail_waits_for_the_queue_of_a_restarted_head_then_follows_the_job_back_in_line(monkeypatch):
    """Ray lost the job with its head: the tail finds the new session's queue afresh each time it
    does not answer (it may take longer to start than GONE_S), and gives up only on a queue that
    answers and lacks the job for GONE_S."""
    from rayjobs.views import jobtail

    d = _RestartingHead(4, [None, {"state": "waiting", "status": "QUEUED"}])
    assert jobtail.back_in_line(d, "j", every=0.0)
    assert d.forgotten == 5  # once at the start, once per unanswered ask
    monkeypatch.setattr(jobtail, "GONE_S", 0.05)
    gone = _RestartingHead(2, [None])
    t0 = time.monotonic()
    assert not jobtail.back_in_line(gone, "j", every=0.01)
    assert time.monotonic() - t0 < 5
    done = _RestartingHead(0, [{"state": "done", "status": "SUCCEEDED"}])
    assert not jobtail.back_in_line(done, "j", every=0.01)

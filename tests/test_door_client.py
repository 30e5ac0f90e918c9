"""The laptop's client of the door (fast tier: the real door app of tests/test_door_api.py served by
uvicorn on this process's loopback, over plain HTTP and over TLS with the door's own certificate;
no Ray): ``rayjobs login`` keeps the login 0600 and reads the token from stdin or a file, never an
argument; the pin refuses any other certificate and plain http off loopback is refused; ``users``,
``audit``, ``whoami``; the daily commands through the door only; every refusal one line, exit 2.
The same from a teammate's namespace on a real head: tests/test_teammate_cli.py."""

from __future__ import annotations

import asyncio
import json
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_door_api import Door  # noqa: E402
from test_queueapi import TOKEN  # noqa: E402

from rayjobs.contract import wire  # noqa: E402


class Served:
    """``door``'s app on 127.0.0.1 over http and https (a uvicorn thread each), stopped by :meth:`close`."""

    def __init__(self, door: Door, root: Path) -> None:
        from rayjobs.door import tls

        self.door = door
        self.cert = tls.ensure(root / "door", "127.0.0.1")
        self.http, self._h = self._serve(None)
        self.https, self._s = self._serve(self.cert)

    def _serve(self, cert: Any) -> tuple[str, Any]:
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        extra = {"ssl_certfile": str(cert.cert), "ssl_keyfile": str(cert.key)} if cert else {}
        server = uvicorn.Server(uvicorn.Config(self.door.app, log_level="warning", lifespan="off", **extra))
        t = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
        t.start()
        for _ in range(200):  # bounded: 10 s
            if server.started:
                break
            time.sleep(0.05)
        return f"{'https' if cert else 'http'}://127.0.0.1:{port}", (server, t)

    def close(self) -> None:
        for server, t in (self._h, self._s):
            server.should_exit = server.force_exit = True  # keep-alive connections of the clients: no 10 s wait
            t.join(10)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("RAYJOBS_OWNER", "olga")
    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home"))
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAYJOBS_URL", "RAYJOBS_TOKEN", "RAYJOBS_FINGERPRINT",
                "RAY_AUTH_TOKEN", "RAYJOBS_API_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    s = Served(Door(tmp_path), tmp_path)
    yield s
    s.close()


def cli(*args: str, stdin: Optional[str] = None) -> Any:
    """``rayjobs ARGS`` in process: (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from rayjobs.cli import main

    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    r = runner.invoke(main, list(args), input=stdin, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def one_line_refusal(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def login_file(served: Served) -> Path:
    from rayjobs import settings

    return settings.home() / "login.json"


# --------------------------------------------------------------------------- login
def test_login_reads_the_token_from_stdin_keeps_it_0600_and_whoami_says_who(served: Served) -> None:
    tok = served.door.tokens["alice"]
    code, out, err = cli("login", served.https, "--fingerprint", served.cert.fingerprint, stdin=tok + "\n")
    assert code == 0, err
    assert tok not in out + err and "alice (member)" in err
    f = login_file(served)
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    kept = json.loads(f.read_text())
    assert kept == {"url": served.https, "token": tok, "fingerprint": served.cert.fingerprint, "user": "alice",
                    "role": "member", "storage": kept["storage"]}
    assert served.door.svc.store.root.is_relative_to(kept["storage"])  # the head's storage root: a submit's default
    code, out, err = cli("whoami")
    assert code == 0 and out.startswith(f"alice (member) at {served.https}") and tok not in out + err
    code, out, err = cli("logout")
    assert code == 0 and not f.exists()


def test_login_from_a_token_file_and_the_environment_as_a_login(served: Served, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tf = tmp_path / "tok"
    tf.write_text(served.door.tokens["vic"] + "\n")
    assert cli("login", served.http, "--token-file", str(tf))[0] == 0
    assert json.loads(login_file(served).read_text())["role"] == "viewer"
    monkeypatch.setenv("RAYJOBS_URL", served.http)
    monkeypatch.setenv("RAYJOBS_TOKEN", served.door.tokens["bob"])  # the environment wins over the file
    assert cli("whoami", "--json")[1] and json.loads(cli("whoami", "--json")[1])["name"] == "bob"


def test_login_refusals_are_one_line_exit_2_and_keep_nothing(served: Served, tmp_path: Path) -> None:
    tok = served.door.tokens["alice"]
    cases = [
        (("login", served.https, "--fingerprint", "sha256:" + "ab" * 32), tok, "not the pinned one"),
        (("login", served.https), tok, "needs its certificate's fingerprint"),
        (("login", "http://10.1.2.3:8263"), tok, "plain http:// to 10.1.2.3 is refused"),
        (("login", served.http), "rj_00000000_nope", "token"),  # the door's own 401 line
        (("login", served.http), "", "no token given"),
        (("login", served.http, "--token-file", str(tmp_path / "missing")), None, "cannot read it"),
        (("login", served.https, "--fingerprint", "sha256:zz"), tok, "no certificate fingerprint"),
    ]
    for args, stdin, words in cases:
        line = one_line_refusal(*cli(*args, stdin=stdin))
        assert words in line and tok not in line, (args, line)
        assert not login_file(served).exists(), args
    assert "error" in one_line_refusal(*cli("login", served.http, tok))  # a token as an argument is no option


# --------------------------------------------------------------------------- the door client itself
def test_the_pin_refuses_another_certificate_before_a_token_is_sent(served: Served) -> None:
    from rayjobs.client.door import Door as Client, PinRefused

    ok = Client(served.https, served.door.tokens["alice"], served.cert.fingerprint)
    assert ok.whoami() == wire.Identity("alice", "member", "token", ok.whoami().token_id)
    before = len(served.door.audit())
    with pytest.raises(PinRefused, match="not the pinned one"):
        Client(served.https, "rj_00000000_x", "sha256:" + "cd" * 32).whoami()
    assert len(served.door.audit()) == before  # no request (no 401) reached the door


def test_users_add_prints_the_token_alone_and_the_rest_on_stderr(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYJOBS_URL", served.http)
    monkeypatch.setenv("RAYJOBS_TOKEN", TOKEN)  # the cluster's own token: the owner, an admin
    code, out, err = cli("users", "add", "carol")
    assert code == 0, err
    token = out.splitlines()[0]
    assert out == token + "\n" and token.startswith("rj_") and token not in err and "carol (member)" in err
    listed = json.loads(cli("users", "list", "--json")[1])
    assert [u["name"] for u in listed] == ["alice", "bob", "carol", "vic"] and token not in json.dumps(listed)
    assert cli("users", "revoke", "carol")[0] == 0
    monkeypatch.setenv("RAYJOBS_TOKEN", token)
    assert "revoked" in one_line_refusal(*cli("whoami"))
    assert "revoked" in one_line_refusal(*cli("list"))  # not the local record's rows, exit 0
    assert "revoked" in one_line_refusal(*cli("logs", "run"))
    monkeypatch.setenv("RAYJOBS_TOKEN", served.door.tokens["alice"])
    assert "only an admin" in one_line_refusal(*cli("users", "add", "eve"))
    assert "only an admin" in one_line_refusal(*cli("users", "list"))
    mine = json.loads(cli("audit", "--json", "--since", "1h")[1])
    assert mine == [] or {e["user"] for e in mine} == {"alice"}
    monkeypatch.setenv("RAYJOBS_TOKEN", TOKEN)
    every = json.loads(cli("audit", "--json")[1])
    assert {"users.add", "users.revoke"} <= {e["action"] for e in every} and token not in json.dumps(every)
    assert "--since" in one_line_refusal(*cli("audit", "--since", "yesterday"))


# --------------------------------------------------------------------------- the daily commands, door only
def test_the_daily_commands_work_through_the_door_only(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    d = served.door
    d.send("alice", "run", groups=(2,))
    d.send("alice", "wait", groups=(2,))
    d.tick()
    (Path(d.svc.ray_logs) / "job-driver-run.log").write_text("".join(f"line {i}\n" for i in range(50)))
    monkeypatch.setenv("RAYJOBS_URL", served.https)
    monkeypatch.setenv("RAYJOBS_FINGERPRINT", served.cert.fingerprint)
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["alice"])
    code, out, err = cli("list", "--json")
    assert code == 0, err
    assert {r["id"]: r["status"] for r in json.loads(out)} == {"run": "RUNNING", "wait": "QUEUED"}
    code, out, err = cli("status", "run", "--json")
    assert code == 0 and json.loads(out)["status"] == "RUNNING", err
    code, out, err = cli("logs", "run")
    assert code == 0 and out == "".join(f"line {i}\n" for i in range(50)), err
    assert cli("logs", "run", "--tail", "2")[1] == "line 48\nline 49\n"
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["bob"])
    line = one_line_refusal(*cli("stop", "run"))
    assert "alice's job: only alice or an admin may stop it" in line
    d.tick()
    assert d.get("run")["status"] == "RUNNING"
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["alice"])
    code, out, err = cli("stop", "wait")
    assert code == 0, err
    d.tick()
    assert d.get("wait")["status"] == "STOPPED"
    assert cli("usage", "--json")[0] == 0
    code, out, err = cli("cluster", "--json")
    assert code == 0, err
    assert json.loads(out)["address"] == served.https  # its nodes: tests/test_teammate_cli.py (no Ray here)


def test_a_followed_log_through_the_door_gets_every_byte_once_across_streams(served: Served,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYJOBS_DOOR_STREAM_S", "1")  # the server ends each stream after 1 s: the client resumes
    d = served.door
    d.send("alice", "run")
    d.tick()
    log = Path(d.svc.ray_logs) / "job-driver-run.log"
    log.write_text("first\n")
    monkeypatch.setenv("RAYJOBS_URL", served.https)
    monkeypatch.setenv("RAYJOBS_FINGERPRINT", served.cert.fingerprint)
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["vic"])  # a viewer may read
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(cli("logs", "run", "-f")))
    t.start()
    for i in range(3):  # three streams' worth of lines
        time.sleep(1.2)
        with open(log, "a") as f:
            f.write(f"more {i}\n")
    d.jobs.end("run", "SUCCEEDED")
    d.tick()
    d.tick()
    t.join(60)
    assert got, "the follow did not end with the job"
    code, out, err = got[0]
    assert out == "first\nmore 0\nmore 1\nmore 2\n" and code == 0, (code, out, err)


def test_plot_reads_a_runs_metrics_through_the_door(served: Served, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from rayjobs.views import metricfiles

    d = served.door
    d.send("alice", "m")
    d.tick()
    run_dir = Path(d.svc.records["m"].meta.run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.1.jsonl").write_text("".join(json.dumps({"step": s, "data": {"loss": s}}) + "\n" for s in (1, 2)))
    (run_dir / "metrics.2.jsonl").write_text(json.dumps({"step": 2, "data": {"loss": 20}}) + "\n")
    monkeypatch.setattr(metricfiles, "jsonl_files", lambda run_dir: [])  # a laptop that does not mount the storage
    monkeypatch.setenv("RAYJOBS_URL", served.http)
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["bob"])
    code, out, err = cli("plot", "m", "--metric", "loss", "-o", str(tmp_path / "c.png"), "--json")
    assert code == 0, err
    (got,) = json.loads(out)["jobs"]
    assert got["series"] == {"loss": [[1, 1.0], [2, 20.0]]}  # the attempts merged on the head
    assert (tmp_path / "c.png").stat().st_size > 0


def test_resume_through_the_door_and_anothers_resume_is_one_line(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    d = served.door
    d.stopped_at_a_checkpoint("alice", "ok")
    monkeypatch.setenv("RAYJOBS_URL", served.http)
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["bob"])
    assert "ok is alice's job: only alice or an admin may resume it" in one_line_refusal(*cli("resume", "ok"))
    assert "ok-r1" not in d.svc.records
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["alice"])
    code, out, err = cli("resume", "ok")
    assert code == 0 and "ok-r1" in out + err, err
    assert d.svc.records["ok-r1"].meta.queued_by == "alice"


def test_a_foreign_ray_job_is_listed_and_stopped_by_an_admin_through_the_door(served: Served,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    d = served.door
    d.jobs.ray["raysubmit_y"] = {"status": "RUNNING", "metadata": {}, "driver_node_id": "n0"}
    monkeypatch.setenv("RAYJOBS_URL", served.http)
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["alice"])
    code, out, err = cli("list", "--all", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == ["raysubmit_y"], err
    assert "only an admin" in one_line_refusal(*cli("stop", "raysubmit_y"))
    assert ("stop", "raysubmit_y") not in d.jobs.calls
    monkeypatch.setenv("RAYJOBS_TOKEN", TOKEN)
    code, out, err = cli("stop", "raysubmit_y", "--wait", "0")  # exit 1: not yet stopped (the fake Ray never ends it)
    assert "asked 1 job(s) to stop" in err and ("stop", "raysubmit_y") in d.jobs.calls, err


def test_list_reads_the_jobs_once_through_the_door(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    from rayjobs.client.queueapi import QueueAPI

    d = served.door
    d.send("alice", "q1")
    d.jobs.ray["raysubmit_z"] = {"status": "RUNNING", "metadata": {}, "driver_node_id": "n0"}
    calls: list[Any] = []
    real = QueueAPI.call
    monkeypatch.setattr(QueueAPI, "call", lambda self, m, path, **kw: calls.append((m, path)) or real(self, m, path, **kw))
    monkeypatch.setenv("RAYJOBS_URL", served.http)
    monkeypatch.setenv("RAYJOBS_TOKEN", d.tokens["vic"])
    code, out, err = cli("list", "--all", "--json")
    assert code == 0 and sorted(r["id"] for r in json.loads(out)) == ["q1", "raysubmit_z"], err
    assert calls.count(("GET", "/jobs")) == 1, calls  # the queue's jobs and the foreign ones in one read

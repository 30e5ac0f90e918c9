"""The door on real heads (fake GPUs, Ray in this test process's network namespace), through raw
HTTP as any client would send it:

* a teammate's network namespace, joined to the head by a veth, whose only way to the head is the
  door's TLS port: Ray's dashboard and GCS ports and the door's loopback port do not answer from
  there; the door does, with the pinned certificate and alice's token; a wrong fingerprint is
  refused by the client, no token by the door; alice queues, reads, follows and stops her job;
* who may do what: bob (a member) cannot stop, resume or rerun alice's job (403, naming her) and
  it runs on untouched; vic (a viewer) cannot queue or upload; a revoked token is refused at once;
  the owner (an admin) can do all; the audit has every change and refusal;
* the users, the audit and the certificate survive a SIGKILL of every process of the head.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Optional

import pytest
import requests

from conftest import wait_until

import netns
from clusters import free_port

from rayjobs.contract import wire

HERE = Path(__file__).parent
LOOP = "import sys, time\nfor i in range(int(sys.argv[1])):\n    print(f'line {i}', flush=True)\n    time.sleep(0.1)\n"
pytestmark = pytest.mark.cluster


# --------------------------------------------------------------------------- a teammate's machine
class Team:
    """A network namespace joined to this test process's by one veth: ``head_ip`` is this side."""

    def __init__(self) -> None:
        n = os.getpid() % 100000
        self.ns, self.veth = f"rjteam{n}", f"rjd{n}"[:15]
        self.head_ip, self.ip = "10.201.7.1", "10.201.7.2"
        self.port = free_port()

    def create(self) -> "Team":
        netns.create(self.ns)
        for cmd in (["link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.ns],
                    ["addr", "add", f"{self.head_ip}/24", "dev", self.veth], ["link", "set", self.veth, "up"],
                    ["-n", self.ns, "addr", "add", f"{self.ip}/24", "dev", "eth0"], ["-n", self.ns, "link", "set", "eth0", "up"]):
            subprocess.run(["ip", *cmd], check=True, capture_output=True)
        return self

    def destroy(self) -> None:
        netns.destroy(self.ns)  # its end of the veth goes with it, and so the pair

    def run(self, *args: str) -> dict[str, Any]:
        """``tests/doorclient.py ARGS`` on the teammate's machine; its JSON answer."""
        r = subprocess.run(["ip", "netns", "exec", self.ns, sys.executable, str(HERE / "doorclient.py"), *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    def call(self, user: dict[str, Any], method: str, path: str, body: Optional[str] = None,
             fingerprint: Optional[str] = None) -> dict[str, Any]:
        return self.run("call", user["url"], fingerprint or user["fingerprint"], user["token"], method,
                        wire.PREFIX + path, *([body] if body else []))


@pytest.fixture(scope="module")
def team() -> Any:
    if not netns.can_use():
        pytest.skip("a teammate's namespace needs root and `ip`")
    t = Team().create()
    yield t
    t.destroy()


@pytest.fixture
def door(clusters: Any, team: Team) -> Any:
    """A 1-node head whose door also listens over TLS on the veth (``RAYJOBS_DOOR_ADDRESS``)."""
    return clusters.get(((2, 6),), {"RAYJOBS_DOOR_ADDRESS": f"{team.head_ip}:{team.port}", "RAYJOBS_DOOR_STREAM_S": "3",
                                    "RAYJOBS_OWNER": "olga"})


# --------------------------------------------------------------------------- raw HTTP on the head's loopback
def local(c: Any) -> str:
    return f"http://127.0.0.1:{c.api_port}{wire.PREFIX}"


def as_(token: Optional[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def add_user(c: Any, name: str, role: str = "member") -> dict[str, Any]:
    """The owner (on loopback, the test head runs without Ray's token auth) adds a user."""
    r = requests.post(local(c) + "/users", json={"name": name, "role": role}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def code_zip(tmp: Path) -> tuple[str, Path]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("loop.py", LOOP)
    body = buf.getvalue()
    path = tmp / "code.zip"
    path.write_bytes(body)
    return wire.code_key(hashlib.sha256(body).hexdigest()), path


def submit(job_id: str, lines: int, user: str = "") -> dict[str, Any]:
    return {"entrypoint": f"python3 -u loop.py {lines}", "submission_id": job_id,
            "metadata": {"kind": "command", "gpu_groups": "[1]", "user": user}}


def queue(c: Any, token: Optional[str], key: str, zip_path: Path, job: dict[str, Any]) -> requests.Response:
    up = requests.put(f"{local(c)}/code/{key}", data=zip_path.read_bytes(), timeout=60,
                      headers={"Content-Type": "application/zip", **as_(token)})
    if up.status_code not in (200, 201):
        return up
    return requests.post(local(c) + "/jobs", json={"jobs": [job], "code": key}, headers=as_(token), timeout=60)


def status(c: Any, job_id: str) -> str:
    r = requests.get(f"{local(c)}/jobs/{job_id}", timeout=30)
    return r.json()["status"] if r.status_code == 200 else f"HTTP {r.status_code}"


def audit(c: Any) -> list[dict[str, Any]]:
    return requests.get(local(c) + "/audit", params={"limit": 10_000}, timeout=30).json()["entries"]


# --------------------------------------------------------------------------- the tests
def test_a_teammate_reaches_only_the_door_over_tls_with_the_pinned_certificate(door, team, tmp_path) -> None:
    alice = add_user(door, "alice")
    assert alice["url"] == f"https://{team.head_ip}:{team.port}" and alice["fingerprint"].startswith("sha256:")
    assert team.run("probe", team.head_ip, str(team.port))["probe"] == "open"
    for port in (door.dash_port, door.gcs_port, door.api_port):  # Ray's dashboard, its GCS, the loopback door
        assert team.run("probe", team.head_ip, str(port))["probe"] == "closed", port
    me = team.call(alice, "GET", "/whoami")
    assert me["status"] == 200 and json.loads(me["text"])["name"] == "alice"
    wrong = team.call(alice, "GET", "/whoami", fingerprint="sha256:" + "ab" * 32)
    assert "error" in wrong and "ingerprint" in wrong["error"]  # the client refused the certificate
    anon = team.call(dict(alice, token=""), "GET", "/jobs")
    assert anon["status"] == 401 and "needs a token" in json.loads(anon["text"])["error"]
    # alice's day: upload, queue, read, follow, stop -- over TLS only
    key, zip_path = code_zip(tmp_path)
    assert team.call(alice, "PUT", f"/code/{key}", "@" + str(zip_path))["status"] in (200, 201)
    r = team.call(alice, "POST", "/jobs", json.dumps({"jobs": [submit("t-log", 40)], "code": key}))
    assert r["status"] == 201, r
    wait_until(lambda: status(door, "t-log") == "RUNNING", 60, "t-log to run")
    got = wait_until(lambda: (s := team.call(alice, "GET", "/jobs/t-log/log/stream"))["text"] and s, 30, "log bytes")
    assert got["headers"][wire.LOG_HEADER.lower()] == "whole" and "line 0\n" in got["text"]
    wait_until(lambda: status(door, "t-log") == "SUCCEEDED", 60, "t-log to succeed")
    rest = team.call(alice, "GET", f"/jobs/t-log/log/stream?offset={len(got['text'].encode())}")
    whole = team.call(alice, "GET", "/jobs/t-log/log")
    assert got["text"] + rest["text"] == whole["text"] and "line 39\n" in whole["text"]  # every byte once
    assert team.call(alice, "GET", "/jobs/t-log/log?tail=1")["text"].endswith("line 39\n")
    view = json.loads(team.call(alice, "GET", "/jobs/t-log")["text"])
    assert view["metadata"]["user"] == "alice" and view["metadata"]["queued_by"] == "alice"
    info = json.loads(team.call(alice, "GET", "/cluster")["text"])
    assert [n["gpus"] for n in info["nodes"]] == [2.0] and info["ray_version"] and info["session"]
    assert team.call(alice, "GET", "/jobs/t-log/metrics")["status"] == 200
    team.call(alice, "POST", "/jobs", json.dumps({"jobs": [submit("t-stop", 3000)], "code": key}))
    wait_until(lambda: status(door, "t-stop") == "RUNNING", 60, "t-stop to run")
    assert team.call(alice, "POST", "/jobs/t-stop/stop")["status"] == 200
    wait_until(lambda: status(door, "t-stop") == "STOPPED", 90, "t-stop to stop")


def test_who_may_do_what_on_a_real_head(door, tmp_path) -> None:
    tok = {n: add_user(door, n, r)["token"] for n, r in (("amy", "member"), ("ben", "member"), ("val", "viewer"))}
    key, zip_path = code_zip(tmp_path)
    assert queue(door, tok["amy"], key, zip_path, submit("amy-run", 3000)).status_code == 201
    wait_until(lambda: status(door, "amy-run") == "RUNNING", 60, "amy's job to run")
    ray_status = lambda: str(door.client().get_job_status("amy-run")).split(".")[-1]  # noqa: E731
    for method, path, body in (("POST", "/jobs/amy-run/stop", None), ("POST", "/jobs/stop", {"ids": ["amy-run"]}),
                               ("POST", "/jobs/amy-run/resume", {}), ("POST", "/jobs/amy-run/rerun",
                                                                     {"job": submit("ben-copy", 5)})):
        r = requests.request(method, local(door) + path, json=body, headers=as_(tok["ben"]), timeout=30)
        assert r.status_code == 403 and "amy's job: only amy or an admin" in r.json()["error"], r.text
    mine = queue(door, tok["amy"], key, zip_path, submit("amy-as-ben", 5, user="ben"))
    assert mine.status_code == 403 and "amy" in mine.json()["error"] and "ben" in mine.json()["error"]
    viewer = queue(door, tok["val"], key, zip_path, submit("val-job", 5))
    assert viewer.status_code == 403 and "not queue" in viewer.json()["error"]
    time.sleep(1.0)  # what a refused stop would have set off would show by now
    assert status(door, "amy-run") == "RUNNING" and ray_status() == "RUNNING"  # untouched
    for gone in ("ben-copy", "amy-as-ben", "val-job"):
        assert status(door, gone) == "HTTP 404", gone
    assert requests.post(local(door) + "/users/ben/revoke", timeout=30).status_code == 200
    refused = requests.get(local(door) + "/jobs", headers=as_(tok["ben"]), timeout=30)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]  # at once
    assert requests.post(local(door) + "/jobs/amy-run/stop", timeout=30).status_code == 200  # the owner: an admin
    wait_until(lambda: status(door, "amy-run") == "STOPPED", 90, "amy's job to stop")
    seen = wait_until(lambda: (a := [(e["user"], e["action"], e["status"]) for e in audit(door)])
                      and ("", "auth", 401) in a and a, 30, "the audit")
    assert ("ben", "stop", 403) in seen and ("ben", "resume", 403) in seen and ("ben", "rerun", 403) in seen
    assert ("val", "code", 403) in seen and ("amy", "queue", 403) in seen and ("olga", "stop", 200) in seen


def test_a_plain_ray_job_is_listed_and_its_log_read_through_the_door(door) -> None:
    sid = door.client().submit_job(entrypoint="python3 -c \"print('plain ray job')\"")
    wait_until(lambda: str(door.client().get_job_status(sid)).endswith("SUCCEEDED"), 60, "the plain job to end")
    listed = requests.get(local(door) + "/jobs", params={"foreign": "true"}, timeout=30).json()["jobs"]
    mine = [v for v in listed if v["submission_id"] == sid]
    assert len(mine) == 1 and mine[0]["foreign"] and mine[0]["state"] == "" and mine[0]["status"] == "SUCCEEDED"
    assert sid not in [v["submission_id"] for v in requests.get(local(door) + "/jobs", timeout=30).json()["jobs"]]
    log = requests.get(f"{local(door)}/jobs/{sid}/log", timeout=30)
    assert log.status_code == 200 and "plain ray job" in log.text and log.headers[wire.LOG_HEADER] == "whole"


def test_users_audit_and_certificate_survive_a_sigkill_of_the_whole_head(door, team, tmp_path) -> None:
    carol, dave = add_user(door, "carol"), add_user(door, "dave", "viewer")
    key, zip_path = code_zip(tmp_path)
    assert queue(door, carol["token"], key, zip_path, submit("carol-done", 5)).status_code == 201
    wait_until(lambda: status(door, "carol-done") == "SUCCEEDED", 90, "carol's job to end")
    assert requests.post(local(door) + "/users/dave/revoke", timeout=30).status_code == 200
    before = wait_until(lambda: (a := audit(door)) and any(e["target"] == ["dave"] and e["action"] == "users.revoke"
                                                           for e in a) and a, 30, "the revoke in the audit")
    door.stop(hard=True)  # SIGKILL, every process of the head at once
    assert not door.pids()
    door.start()
    me = team.call(carol, "GET", "/whoami")  # the same token, the same certificate pinned
    assert me["status"] == 200 and json.loads(me["text"])["name"] == "carol", me
    assert team.call(dave, "GET", "/whoami")["status"] == 401
    after = audit(door)
    assert after[:len(before)] == before
    users = {u["name"]: u for u in requests.get(local(door) + "/users", timeout=30).json()["users"]}
    assert users["dave"]["revoked_at"] and not users["carol"]["revoked_at"]
    log = team.call(carol, "GET", "/jobs/carol-done/log")  # its Ray session is gone; its file is on the head's disk
    assert log["status"] == 200 and "line 4\n" in log["text"], log

"""The door in process (fast tier: the real app, service, store, users and audit over a fake Jobs
API; no Ray): who may do what against every changing route, refusals before anything changes,
the audit of changes and refusals, the failed-authentication block, the new read routes (whoami,
users, audit, a job's log whole/tail/followed, its metrics, foreign jobs, the cluster) and their
answers against the OpenAPI document. The same on real heads: tests/test_door_cluster.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_queueapi import TOKEN, Api, error, job  # noqa: E402

from rayjobs.contract import wire  # noqa: E402


class Door(Api):
    """The in-process door with an admin (the cluster token), alice and bob (members), vic (viewer)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, gpus=3)
        from fastapi.testclient import TestClient

        self.tokens = {n: self.add(n, r) for n, r in (("alice", "member"), ("bob", "member"), ("vic", "viewer"))}
        self.as_ = {n: TestClient(self.app, headers={"Authorization": f"Bearer {t}"}) for n, t in self.tokens.items()}
        self.bare = TestClient(self.app)
        self.svc.ray_logs = str(root / "ray-logs")
        Path(self.svc.ray_logs).mkdir()

    def add(self, name: str, role: str) -> str:
        r = self.http.post("/v1/users", json={"name": name, "role": role})
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def send(self, who: str, *ids: str, user: str = "", groups: Any = (1,)) -> Any:
        jobs = [job(i, groups, storage=self.storage, user=user) for i in ids]
        return self.as_[who].post("/v1/jobs", json={"jobs": jobs, "code": self.code})

    def stopped_at_a_checkpoint(self, who: str, job_id: str) -> None:
        """``who``'s job ``job_id`` ran, saved step 4 and was STOPPED: ready to resume."""
        self.send(who, job_id)
        self.tick()
        ckpt = Path(self.get(job_id)["metadata"]["checkpoint_dir"])
        ckpt.mkdir(parents=True)
        (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
        self.jobs.end(job_id, "STOPPED")
        self.tick()
        self.tick()

    def audit(self) -> list[dict[str, Any]]:
        return self.http.get("/v1/audit").json()["entries"]


@pytest.fixture
def door(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Door:
    monkeypatch.setenv("RAYJOBS_OWNER", "olga")
    return Door(tmp_path)


def refused(r: Any, status: int = 403) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    return error(r)


# --------------------------------------------------------------------------- identity and users
def test_whoami_says_who_each_token_is(door: Door) -> None:
    assert door.http.get("/v1/whoami").json() == {"name": "olga", "role": "admin", "via": "cluster", "token_id": None}
    me = door.as_["alice"].get("/v1/whoami").json()
    assert (me["name"], me["role"], me["via"]) == ("alice", "member", "token") and me["token_id"] in door.tokens["alice"]
    assert door.as_["vic"].get("/v1/whoami").json()["role"] == "viewer"
    refused(door.bare.get("/v1/whoami"), 401)


def test_users_are_an_admins_and_a_token_is_shown_only_once(door: Door) -> None:
    listed = door.http.get("/v1/users").json()["users"]
    assert [u["name"] for u in listed] == ["alice", "bob", "vic"]
    assert not any(t in json.dumps(listed) for t in door.tokens.values())  # ids only
    assert "only an admin" in refused(door.as_["alice"].get("/v1/users"))
    assert "only an admin" in refused(door.as_["alice"].post("/v1/users", json={"name": "eve"}))
    assert "revoke" in refused(door.http.post("/v1/users", json={"name": "alice"}), 409)
    assert refused(door.http.post("/v1/users", json={"name": "Eve!"}), 422)
    assert refused(door.http.post("/v1/users/nobody/revoke"), 404)


def test_a_revoked_token_is_refused_at_once(door: Door) -> None:
    assert door.as_["bob"].get("/v1/jobs").status_code == 200
    r = door.http.post("/v1/users/bob/revoke")
    assert r.status_code == 200 and r.json()["revoked_at"]
    assert "revoked" in refused(door.as_["bob"].get("/v1/jobs"), 401)
    again = door.add("bob", "viewer")  # a revoked name may come back, with a new token only
    from fastapi.testclient import TestClient

    assert TestClient(door.app, headers={"Authorization": f"Bearer {again}"}).get("/v1/whoami").json()["role"] == "viewer"
    refused(door.as_["bob"].get("/v1/jobs"), 401)


# --------------------------------------------------------------------------- owners
def test_a_members_jobs_are_its_own_and_another_user_is_refused(door: Door) -> None:
    r = door.send("alice", "a1")
    assert r.status_code == 201
    meta = door.svc.records["a1"].meta
    assert (meta.user, meta.queued_by) == ("alice", "alice")
    line = refused(door.send("alice", "a2", user="bob"))
    assert "alice" in line and "bob" in line and "a2" not in door.svc.records
    assert door.send("alice", "a3", user="alice").status_code == 201
    r = door.http.post("/v1/jobs", json={"jobs": [job("o1", storage=door.storage, user="bob")], "code": door.code})
    assert r.status_code == 201
    meta = door.svc.records["o1"].meta
    assert (meta.user, meta.queued_by) == ("bob", "olga")  # an admin queues for another user, recorded


def test_a_viewer_reads_but_cannot_queue_or_upload(door: Door) -> None:
    before = set(door.svc.records)
    assert "not queue" in refused(door.send("vic", "v1"))
    assert set(door.svc.records) == before
    from test_queueapi import zip_of
    import hashlib

    body = zip_of({"x.py": "1"})
    key = wire.code_key(hashlib.sha256(body).hexdigest())
    refused(door.as_["vic"].put(f"/v1/code/{key}", content=body, headers={"Content-Type": "application/zip"}))
    assert not door.svc.store.has_code(key)
    for path in ("/v1/jobs", "/v1/queue", "/v1/usage", "/v1/health", "/v1/cluster"):
        assert door.as_["vic"].get(path).status_code == 200, path


def test_a_member_cannot_stop_resume_or_rerun_anothers_job_and_it_is_untouched(door: Door) -> None:
    door.send("alice", "run", groups=(2,))
    door.send("alice", "wait", groups=(2,))
    door.send("bob", "mine")
    door.tick()
    before = {i: door.get(i)["status"] for i in ("run", "wait", "mine")}
    assert before == {"run": "RUNNING", "wait": "QUEUED", "mine": "RUNNING"}
    assert refused(door.as_["bob"].post("/v1/jobs/run/stop")) == \
        "run is alice's job: only alice or an admin may stop it"
    assert "alice" in refused(door.as_["bob"].post("/v1/jobs/stop", json={"ids": ["mine", "wait"]}))
    assert "alice" in refused(door.as_["bob"].post("/v1/jobs/run/resume", json={}))
    assert "alice" in refused(door.as_["bob"].post("/v1/jobs/run/rerun", json={"job": job("bobs")}))
    door.tick()
    assert {i: door.get(i)["status"] for i in ("run", "wait", "mine")} == before
    assert not door.svc.records["run"].stop_asked and ("stop", "run") not in door.jobs.calls
    assert "bobs" not in door.svc.records
    refused(door.as_["vic"].post("/v1/jobs/run/stop"))
    assert door.as_["bob"].post("/v1/jobs/stop", json={"ids": ["mine"]}).status_code == 200  # its own
    assert door.http.post("/v1/jobs/wait/stop").status_code == 200  # an admin: anyone's
    assert door.as_["alice"].post("/v1/jobs/run/stop").status_code == 200


def test_a_members_own_resume_and_rerun_go_through(door: Door) -> None:
    door.stopped_at_a_checkpoint("alice", "ok")
    r = door.as_["alice"].post("/v1/jobs/ok/resume", json={})
    assert r.status_code == 201 and r.json()["metadata"]["user"] == "alice"
    assert door.svc.records["ok-r1"].meta.queued_by == "alice"
    r = door.as_["alice"].post("/v1/jobs/ok/rerun", json={"job": job("ok2", user="")})
    assert r.status_code == 201 and door.svc.records["ok2"].meta.user == "alice"
    r = door.http.post("/v1/jobs/ok/resume", json={})  # an admin: resumed already, the same run
    assert r.status_code == 200 and r.json()["submission_id"] == "ok-r1"


# --------------------------------------------------------------------------- the audit
def test_every_change_and_refusal_is_audited_and_members_read_their_own(door: Door) -> None:
    door.send("alice", "a1")
    door.send("alice", "a2", user="bob")
    door.as_["bob"].post("/v1/jobs/a1/stop")
    door.as_["bob"].get("/v1/jobs")  # a read: not audited
    door.bare.get("/v1/jobs", headers={"Authorization": "Bearer rj_00000000_" + "x" * 43})
    got = [(e["user"], e["action"], e["status"]) for e in door.audit()]
    assert got[:4] == [("olga", "code", 201)] + [("olga", "users.add", 201)] * 3  # the fixture's upload, users
    assert got[4:] == [("alice", "queue", 201), ("alice", "queue", 403), ("bob", "stop", 403), ("", "auth", 401)]
    entries = door.audit()
    assert entries[1]["target"] == ["alice"] and entries[1]["result"].startswith("added alice (member), token ")
    assert entries[4]["target"] == ["a1"] and entries[4]["result"] == "queued 1"
    assert "only alice or an admin" in entries[6]["result"] and entries[6]["target"] == ["a1"]
    mine = door.as_["alice"].get("/v1/audit").json()
    assert {e["user"] for e in mine["entries"]} == {"alice"} and mine["total"] == 2
    refused(door.as_["alice"].get("/v1/audit", params={"user": "bob"}))
    assert door.http.get("/v1/audit", params={"user": "bob"}).json()["total"] == 1
    assert door.http.get("/v1/audit", params={"since": time.time() + 60}).json()["total"] == 0
    text = (door.svc.store.root / "door" / "audit.jsonl").read_text()
    assert not any(t in text for t in [*door.tokens.values(), TOKEN])


def test_a_burst_of_failed_tokens_blocks_the_address_with_one_audit_line(door: Door) -> None:
    bad = {"Authorization": "Bearer wrong"}
    codes = [door.bare.get("/v1/jobs", headers=bad).status_code for _ in range(10)]
    assert codes == [401] * 10
    blocked = door.http.get("/v1/jobs")  # the same address, now with the right token: still refused
    assert "too many failed" in refused(blocked, 429)
    door.bare.get("/v1/jobs", headers=bad)
    lines = [json.loads(x) for x in (door.svc.store.root / "door" / "audit.jsonl").read_text().splitlines()]
    assert sum("blocked for 30 s" in e["result"] for e in lines) == 1
    assert [e["status"] for e in lines if e["status"] in (401, 429)] == [401] * 10  # the 429s: not one by one


# --------------------------------------------------------------------------- logs, metrics, foreign jobs
def test_a_jobs_log_whole_its_tail_and_none_yet(door: Door) -> None:
    door.send("alice", "run", groups=(2,))
    door.send("alice", "wait", groups=(2,))
    door.tick()
    log = Path(door.svc.ray_logs) / "job-driver-run.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    r = door.as_["vic"].get("/v1/jobs/run/log")
    assert r.status_code == 200 and r.headers[wire.LOG_HEADER] == "whole" and r.text == log.read_text()
    assert door.as_["vic"].get("/v1/jobs/run/log", params={"tail": 2}).text == "line 998\nline 999\n"
    assert door.as_["vic"].get("/v1/jobs/run/log", params={"tail": 0}).text == ""
    w = door.as_["vic"].get("/v1/jobs/wait/log")
    assert w.headers[wire.LOG_HEADER] == "none" and "waits in the queue" in w.text
    refused(door.as_["vic"].get("/v1/jobs/ghost/log"), 404)


def test_a_followed_log_resumes_at_its_offset_and_ends_with_the_job(door: Door, monkeypatch) -> None:
    monkeypatch.setenv("RAYJOBS_DOOR_STREAM_S", "1")
    door.send("alice", "run")
    door.tick()
    log = Path(door.svc.ray_logs) / "job-driver-run.log"
    log.write_text("first\n")
    got = door.as_["vic"].get("/v1/jobs/run/log/stream").content  # still running: ends after 1 s
    assert got == b"first\n"
    with open(log, "a") as f:
        f.write("second\nlast\n")
    door.jobs.end("run", "SUCCEEDED")
    door.tick()
    door.tick()
    rest = door.as_["vic"].get("/v1/jobs/run/log/stream", params={"offset": len(got)})
    assert got + rest.content == log.read_bytes()  # every byte once


def test_metrics_merge_the_attempts_of_the_run(door: Door) -> None:
    door.send("alice", "m")
    door.tick()
    run_dir = Path(door.svc.records["m"].meta.run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.1.jsonl").write_text("".join(json.dumps({"step": s, "data": {"loss": s}}) + "\n" for s in (1, 2, 3)))
    (run_dir / "metrics.2.jsonl").write_text(json.dumps({"step": 3, "data": {"loss": 30}}) + "\n{torn")
    got = door.as_["vic"].get("/v1/jobs/m/metrics").json()
    assert got["source"] == "files" and got["attempts"] == [1, 2]
    assert [(s["step"], s["attempt"], s["data"]["loss"]) for s in got["steps"]] == [(1, 1, 1), (2, 1, 2), (3, 2, 30)]
    door.send("alice", "none")
    assert door.as_["vic"].get("/v1/jobs/none/metrics").json() == {"steps": [], "attempts": [], "source": "none"}
    refused(door.as_["vic"].get("/v1/jobs/ghost/metrics"), 404)


def test_foreign_ray_jobs_join_the_list_on_request(door: Door) -> None:
    door.send("alice", "q1")
    door.jobs.ray["raysubmit_x"] = {"status": "RUNNING", "metadata": {"owner": "someone"}, "driver_node_id": "n0"}
    door.jobs.ray["starter"] = {"status": "SUCCEEDED", "metadata": {"rayjobs_role": "queue starter"}}
    plain = door.as_["vic"].get("/v1/jobs").json()["jobs"]
    assert [v["submission_id"] for v in plain] == ["q1"]
    both = door.as_["vic"].get("/v1/jobs", params={"foreign": "true"}).json()
    ids = {v["submission_id"]: v for v in both["jobs"]}
    assert set(ids) == {"q1", "raysubmit_x"} and both["total"] == 2
    assert ids["raysubmit_x"]["foreign"] is True and ids["raysubmit_x"]["state"] == ""
    assert set(ids["raysubmit_x"]) == set(wire.JobView.__dataclass_fields__)


def test_a_foreign_job_is_stopped_by_an_admin_only(door: Door) -> None:
    door.jobs.ray["raysubmit_y"] = {"status": "RUNNING", "metadata": {}, "driver_node_id": "n0"}
    assert "only an admin" in refused(door.as_["alice"].post("/v1/jobs/raysubmit_y/stop"))
    assert ("stop", "raysubmit_y") not in door.jobs.calls
    r = door.http.post("/v1/jobs/raysubmit_y/stop")
    assert r.status_code == 200 and r.json()["outcome"] == "stopping" and ("stop", "raysubmit_y") in door.jobs.calls
    refused(door.http.post("/v1/jobs/nowhere/stop"), 404)


# --------------------------------------------------------------------------- declared answers
#: The door's routes beyond the queue's own (tests/test_queueapi.py calls those): called here.
DOOR_ROUTES = {("get", "/v1/whoami"), ("get", "/v1/users"), ("post", "/v1/users"), ("get", "/v1/audit"),
               ("post", "/v1/users/{name}/revoke"), ("get", "/v1/jobs/{job_id}/metrics"), ("get", "/v1/cluster"),
               ("get", "/v1/jobs/{job_id}/log"), ("get", "/v1/jobs/{job_id}/log/stream"), ("post", "/v1/page/link")}


def test_the_new_routes_answer_as_the_openapi_document_says(door: Door, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each door route's answers, successes and refusals, validated strictly (no field undeclared)
    against the schema the document declares for their status; the logs' text answers by header."""
    from test_queueapi import Described

    monkeypatch.setenv("RAYJOBS_DOOR_STREAM_S", "1")  # a running job's followed log: 1 s of it

    door.send("alice", "j1")
    door.tick()
    d = Described(door.http.get("/v1/openapi.json").json())
    alice, vic = door.as_["alice"], door.as_["vic"]
    calls = [("get", "/v1/whoami", "/v1/whoami", None, 200, None), ("get", "/v1/whoami", "/v1/whoami", None, 401, door.bare),
             ("get", "/v1/users", "/v1/users", None, 200, None), ("get", "/v1/users", "/v1/users", None, 403, alice),
             ("post", "/v1/users", "/v1/users", {"name": "zed"}, 201, None),
             ("post", "/v1/users", "/v1/users", {"name": "zed"}, 409, None),
             ("post", "/v1/users", "/v1/users", {"name": "Zed!"}, 422, None),
             ("post", "/v1/users", "/v1/users", {"name": "yan"}, 403, vic),
             ("get", "/v1/audit", "/v1/audit", None, 200, None), ("get", "/v1/audit", "/v1/audit?user=bob", None, 403, alice),
             ("get", "/v1/audit", "/v1/audit?limit=0", None, 422, None),
             ("post", "/v1/users/{name}/revoke", "/v1/users/zed/revoke", None, 200, None),
             ("post", "/v1/users/{name}/revoke", "/v1/users/nobody/revoke", None, 404, None),
             ("post", "/v1/users/{name}/revoke", "/v1/users/zed/revoke", None, 403, alice),
             ("get", "/v1/jobs/{job_id}/metrics", "/v1/jobs/j1/metrics", None, 200, None),
             ("get", "/v1/jobs/{job_id}/metrics", "/v1/jobs/nope/metrics", None, 404, None),
             ("get", "/v1/cluster", "/v1/cluster", None, 200, None),
             ("get", "/v1/jobs", "/v1/jobs?foreign=true", None, 200, None),
             ("get", "/v1/jobs/{job_id}/log", "/v1/jobs/nope/log", None, 404, None),
             ("get", "/v1/jobs/{job_id}/log", "/v1/jobs/j1/log?tail=-1", None, 422, None),
             ("get", "/v1/jobs/{job_id}/log/stream", "/v1/jobs/nope/log/stream", None, 404, None),
             ("get", "/v1/jobs/{job_id}/log/stream", "/v1/jobs/j1/log/stream?offset=x", None, 422, None),
             ("post", "/v1/page/link", "/v1/page/link", None, 201, vic),
             ("post", "/v1/page/link", "/v1/page/link", None, 401, door.bare)]
    for method, path, url, body, status, http in calls:
        r = (http or door.http).request(method.upper(), url, json=body)
        assert r.status_code == status, (method, url, r.status_code, r.text)
        d.check(method, path, r)
    for path in ("/v1/jobs/{job_id}/log", "/v1/jobs/{job_id}/log/stream"):
        r = door.http.get(path.replace("{job_id}", "j1"), params={"tail": 5} if path.endswith("log") else {})
        text = d.doc["paths"][path]["get"]["responses"]["200"]
        assert r.status_code == 200 and "text/plain" in text["content"], (path, r.status_code, r.text)
        assert r.headers[wire.LOG_HEADER] in text["headers"][wire.LOG_HEADER]["schema"]["enum"]
        d.seen.add(("get", path, 200))
    assert {(m, p) for m, p, _ in d.seen} == DOOR_ROUTES | {("get", "/v1/jobs")}

"""The queue's HTTP API in-process: every route, its refusals, its OpenAPI document (fast tier: the
real service, store and FastAPI app over a fake Jobs API; no Ray). The same routes on a real head,
their answers checked against the head's own document, are tests/test_api_head.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from queuefakes import FakeCluster, FakeJobs  # noqa: E402
from schedfakes import node, record  # noqa: E402

from rayjobs.contract import wire  # noqa: E402

TOKEN = "s3cret-token"


def zip_of(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


class Api:
    """The service and its app; ``tick()`` turns the queue's loop until its calls in flight are back."""

    def __init__(self, root: Path, gpus: int = 2, limit: int = wire.MAX_BODY_BYTES, cluster: Any = None,
                 reap: Any = None) -> None:
        from fastapi.testclient import TestClient

        from rayjobs.door.app import create_app
        from rayjobs.oncluster.queueservice import QueueService
        from rayjobs.oncluster.store import QueueStore

        self.jobs = FakeJobs()
        self.svc = QueueService(QueueStore(root / "queue"), self.jobs, cluster or FakeCluster([node("n0", gpus)]),
                                reap=reap or (lambda job_id, **kw: []), session="session_test")
        self.svc.recover()
        self.app = create_app(self.svc, TOKEN, body_limit=limit)
        self.http = TestClient(self.app, headers={"Authorization": f"Bearer {TOKEN}"})
        self.storage = str(root / "storage")
        self.code = self.upload({"train.py": "print('hi')\n"})

    def upload(self, files: dict[str, str]) -> str:
        body = zip_of(files)
        key = wire.code_key(hashlib.sha256(body).hexdigest())
        r = self.http.put(f"/v1/code/{key}", content=body, headers={"Content-Type": "application/zip"})
        assert r.status_code in (200, 201), r.text
        return key

    def tick(self, n: int = 100) -> None:
        """Turn the loop, asking Ray about every admitted job each turn, until nothing is in flight."""
        for _ in range(n):
            self.svc.tick()
            self.svc.admitter.poll(list(self.svc.state.running), force=True)
            time.sleep(0.01)
            if not self.svc.admitter.calls and not self.svc.reaping.final:
                self.svc.tick()
                if not self.svc.admitter.calls and not self.svc.reaping.final:
                    return

    def queue(self, *ids: str, groups: Any = (1,), **kw: Any) -> Any:
        jobs = [job(i, groups, storage=self.storage, **kw) for i in ids]
        return self.http.post("/v1/jobs", json={"jobs": jobs, "code": self.code})

    def get(self, job_id: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()


def job(job_id: str, groups: Any = (1,), **meta: Any) -> dict[str, Any]:
    """A JobSubmit's JSON, with the metadata a submit gives (``meta``: :func:`schedfakes.record`'s keywords)."""
    rec = record(job_id, groups, at=time.time(), **meta)
    return {"entrypoint": "python3 -m rayjobs.oncluster.runner -- true", "submission_id": job_id,
            "metadata": rec.metadata, "runtime_env": {"env_vars": {"A": "1"}}}


@pytest.fixture
def api(tmp_path: Path) -> Api:
    return Api(tmp_path)


def error(r: Any) -> str:
    doc = r.json()
    assert set(doc) == {"error"} and "\n" not in doc["error"], doc
    return doc["error"]


# --------------------------------------------------------------------------- auth and health
def test_no_token_or_a_wrong_one_is_401(api):
    """401 for no token and for a wrong one (the door tells no token from another); 403 is kept
    for a known caller who may not (tests/test_door_api.py)."""
    from fastapi.testclient import TestClient

    bare = TestClient(api.app)
    assert bare.get("/v1/health").status_code == 401 and "needs a token" in error(bare.get("/v1/health"))
    wrong = bare.get("/v1/health", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "refused the token" in error(wrong)
    ok = api.http.get("/v1/health")
    assert ok.status_code == 200 and ok.json()["session"] == "session_test" and ok.json()["ok"] is True


def test_unknown_routes_say_where_the_routes_are(api):
    r = api.http.get("/v2/jobs")
    assert r.status_code == 404 and "/v1/openapi.json" in error(r)


# --------------------------------------------------------------------------- queue jobs
def test_queue_jobs_in_order_and_a_retry_queues_nothing_twice(api):
    r = api.queue("a", "b", "c")
    assert r.status_code == 201 and r.json() == {"ids": ["a", "b", "c"], "queued": ["a", "b", "c"], "existing": []}
    again = api.queue("a", "b", "d")
    assert again.json() == {"ids": ["a", "b", "d"], "queued": ["d"], "existing": ["a", "b"]}
    api.tick()
    states = {v["submission_id"]: (v["status"], v["queue_position"]) for v in api.http.get("/v1/jobs").json()["jobs"]}
    assert states == {"a": ("RUNNING", None), "b": ("RUNNING", None), "c": ("QUEUED", 1), "d": ("QUEUED", 2)}
    rec = json.loads((api.svc.store.path("c")).read_text())  # durable before the answer
    assert rec["state"] == "waiting" and rec["code"] == api.code and rec["version"] == 2


@pytest.mark.parametrize("body,status,words", [
    ({"jobs": [{"entrypoint": "x", "submission_id": "ok1"}, {"entrypoint": "x", "submission_id": "../etc"}]},
     422, "jobs[1].submission_id='../etc'"),
    ({"jobs": [{"entrypoint": "x", "submission_id": "ok1", "bogus": 1}]}, 422, "jobs[0].bogus: unknown field"),
    ({"jobs": [{"entrypoint": 3, "submission_id": "ok1"}]}, 422, "jobs[0].entrypoint: Input should be a valid string"),
    ({"jobs": [{"entrypoint": "x"}]}, 422, "jobs[0].submission_id: missing"),
    ({"jobs": []}, 422, "give at least one job"),
    ({"jobs": [{"entrypoint": "x", "submission_id": "ok1"}, {"entrypoint": "x", "submission_id": "ok1"}]},
     422, "in the request twice"),
    ({"jobs": [{"entrypoint": "x", "submission_id": "ok1", "runtime_env": {"working_dir": "/x"}}]},
     422, "the code travels as a snapshot"),
    ({"jobs": [{"entrypoint": "x", "submission_id": "ok1"}], "code": "z" + "0" * 32}, 409, "upload it first"),
    ({"jobs": [{"entrypoint": "x", "submission_id": "ok1"}], "code_of": "nobody"}, 404, "no record of nobody"),
])
def test_bad_requests_are_one_line_and_queue_nothing(api, body, status, words):
    body = dict(body)
    body.setdefault("code", api.code) if "code_of" not in body else None
    r = api.http.post("/v1/jobs", json=body)
    assert r.status_code == status, r.text
    assert words in error(r)
    assert api.http.get("/v1/jobs").json()["total"] == 0 and not list((api.svc.store.root / "jobs").iterdir())


def test_malformed_json_is_400(api):
    r = api.http.post("/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and error(r).startswith("the body is not JSON")


def test_a_body_over_the_limit_is_refused_before_it_is_read(tmp_path):
    small = Api(tmp_path, limit=4096)
    r = small.queue(*[f"j{i}" for i in range(40)])
    assert r.status_code == 413 and "over the API's" in error(r)
    assert small.http.get("/v1/jobs").json()["total"] == 0


def test_after_names_jobs_or_sweeps_the_queue_knows(api):
    api.queue("s1-0", "s1-1", sweep="s1")
    r = api.queue("eval", after=["s1"])
    assert r.status_code == 201
    assert json.loads(api.get("eval")["metadata"]["after"]) == ["s1-0", "s1-1"]
    bad = api.queue("eval2", after=["s9"])
    assert bad.status_code == 422 and error(bad).startswith("rayjobs.after=s9: no job or sweep matches 's9'")


# --------------------------------------------------------------------------- code
def test_code_uploads_are_checked_against_their_key_and_kept_once(api):
    body = zip_of({"a.py": "1"})
    key = wire.code_key(hashlib.sha256(body).hexdigest())
    assert api.http.get(f"/v1/code/{key}").status_code == 404
    wrong = api.http.put(f"/v1/code/{'z' + 'f' * 32}", content=body)
    assert wrong.status_code == 422 and "send it again" in error(wrong)
    notzip = b"plain text"
    k2 = wire.code_key(hashlib.sha256(notzip).hexdigest())
    assert api.http.put(f"/v1/code/{k2}", content=notzip).status_code == 422
    assert api.http.put(f"/v1/code/{key}", content=body).status_code == 201
    assert api.http.put(f"/v1/code/{key}", content=body).status_code == 200
    assert (api.svc.store.code_dir(key) / "a.py").read_text() == "1"
    evil = zip_of({"../../x.py": "boom"})
    k3 = wire.code_key(hashlib.sha256(evil).hexdigest())
    r = api.http.put(f"/v1/code/{k3}", content=evil)
    assert r.status_code == 422 and "outside its root" in error(r)


def test_a_snapshot_no_record_names_yet_outlives_the_prune_for_an_hour(api):
    """A submit uploads its code (or finds it there), then queues the jobs that name it. A prune in
    between (every second on a test cluster) once dropped the snapshot no record named yet, and
    the job failed on a working_dir that was gone: a snapshot uploaded or asked for within the
    last hour stays; past that, one no record names goes."""
    from rayjobs.oncluster import pruning
    from rayjobs.oncluster.store import CODE_GRACE_S

    store, key = api.svc.store, api.upload({"b.py": "2"})
    old = time.time() - CODE_GRACE_S - 60

    def aged() -> None:
        os.utime(store.code_dir(key), (old, old))

    pruning.prune(store, api.jobs, [])
    assert store.has_code(key)  # just uploaded
    aged()
    assert api.http.get(f"/v1/code/{key}").status_code == 200  # a submit finds it: it counts as just uploaded
    pruning.prune(store, api.jobs, [])
    assert store.has_code(key)
    aged()
    assert api.http.put(f"/v1/code/{key}", content=zip_of({"b.py": "2"})).status_code == 200  # already there: the same
    pruning.prune(store, api.jobs, [])
    assert store.has_code(key)
    aged()
    pruning.prune(store, api.jobs, [])
    assert not store.has_code(key)  # an hour old, and no record names it
    assert api.http.get(f"/v1/code/{key}").status_code == 404


# --------------------------------------------------------------------------- list, one job, summary
def test_list_filters_and_pages(api):
    api.queue("a1", "a2", user="alice")
    api.queue("b1", user="bob")
    api.tick()
    alice = api.http.get("/v1/jobs", params={"user": "alice"}).json()
    assert [v["submission_id"] for v in alice["jobs"]] == ["a1", "a2"]
    queued = api.http.get("/v1/jobs", params={"status": "QUEUED"}).json()
    assert [v["submission_id"] for v in queued["jobs"]] == ["a2"]  # fair share: bob's first job before alice's second
    page = api.http.get("/v1/jobs", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["jobs"]) == 2 and page["next"] == "2"
    rest = api.http.get("/v1/jobs", params={"limit": 2, "cursor": page["next"]}).json()
    assert [v["submission_id"] for v in rest["jobs"]] == ["b1"] and rest["next"] is None
    assert api.http.get("/v1/jobs", params={"since": time.time() + 60}).json()["total"] == 0
    assert api.http.get("/v1/jobs", params={"limit": 0}).status_code == 422


def test_the_list_follows_each_record_change(api):
    """The list reuses each job's record part until its record changes: a stop shows at once."""
    api.queue("run", "wait", groups=(2,))
    api.tick()
    before = {v["submission_id"]: v for v in api.http.get("/v1/jobs").json()["jobs"]}
    assert before["wait"]["status"] == "QUEUED" and before["wait"]["finished_at"] is None
    assert api.http.post("/v1/jobs/wait/stop").status_code == 200
    after = {v["submission_id"]: v for v in api.http.get("/v1/jobs").json()["jobs"]}
    assert after["wait"]["status"] == "STOPPED" and after["wait"]["finished_at"] is not None
    assert after["run"] == dict(before["run"], queue_position=after["run"]["queue_position"])


def test_one_job_and_the_summary_say_why_it_waits(api):
    api.queue("a", "b", groups=(2,), user="alice")
    api.tick()
    assert api.http.get("/v1/jobs/nope").status_code == 404
    b = api.get("b")
    assert b["status"] == "QUEUED" and b["queue_position"] == 1 and b["message"].startswith("waiting: needs 1 group of 2 GPU")
    s = api.http.get("/v1/queue").json()
    assert (s["waiting"], s["admitted"]) == (1, 1) and s["line"][0]["submission_id"] == "b"
    assert s["users"]["alice"] == {"gpus": 2, "running": 1, "waiting": 1, "quota": None}
    assert s["running"][0]["submission_id"] == "a" and s["running"][0]["status"] == "RUNNING"


# --------------------------------------------------------------------------- stop, resume, rerun
def test_stop_a_waiting_job_a_running_one_and_refusals(api):
    api.queue("run", "wait", groups=(2,))
    api.tick()
    r = api.http.post("/v1/jobs/stop", json={"ids": ["wait", "run"]})
    assert [(o["id"], o["outcome"]) for o in r.json()["results"]] == [("wait", "cancelled"), ("run", "stopping")]
    assert api.get("wait")["status"] == "STOPPED" and api.get("wait")["message"] == "stopped while queued: it never started"
    api.tick()
    assert ("stop", "run") in api.jobs.calls
    api.tick()
    assert api.get("run")["status"] == "STOPPED"
    done = api.http.post("/v1/jobs/run/stop")
    assert done.status_code == 409 and "has ended (STOPPED)" in error(done)
    assert api.http.post("/v1/jobs/stop", json={"ids": ["ghost"]}).status_code == 404
    bad = api.http.post("/v1/jobs/stop", json={"ids": ["run"], "mode": "later"})
    assert bad.status_code == 422 and "mode" in error(bad)


def test_stop_at_checkpoint_leaves_the_runner_its_request(api):
    api.queue("train", groups=(1,))
    api.tick()
    assert api.http.post("/v1/jobs/stop", json={"ids": ["train"], "mode": "checkpoint", "timeout_s": 0}).status_code == 422
    r = api.http.post("/v1/jobs/train/stop", params={"mode": "checkpoint", "timeout_s": 30})
    assert r.status_code == 200 and r.json()["outcome"] == "at_checkpoint"
    req = json.loads((Path(api.get("train")["metadata"]["run_dir"]) / "stop-at-checkpoint.json").read_text())
    assert req["job_id"] == "train" and req["timeout_s"] == 30


def test_resume_refuses_what_cannot_resume_and_queues_the_run_once(tmp_path):
    api = Api(tmp_path, gpus=3)
    api.queue("ok", "nockpt", "win", groups=(1,))
    api.tick()
    ckpt = Path(api.get("ok")["metadata"]["checkpoint_dir"])
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    live = api.http.post("/v1/jobs/ok/resume", json={})
    assert live.status_code == 409 and "rayjobs stop ok first" in error(live)
    for sid, how in (("ok", "STOPPED"), ("nockpt", "FAILED"), ("win", "SUCCEEDED")):
        api.jobs.end(sid, how)
    api.tick()
    api.tick()
    assert "rayjobs rerun win" in error(api.http.post("/v1/jobs/win/resume", json={}))
    assert "`rayjobs rerun nockpt` trains it again from step 0" in error(api.http.post("/v1/jobs/nockpt/resume", json={}))
    r = api.http.post("/v1/jobs/ok/resume", json={})
    assert r.status_code == 201 and r.json()["submission_id"] == "ok-r1" and r.json()["metadata"]["resumed_from"] == "ok"
    again = api.http.post("/v1/jobs/ok/resume", json={})
    assert again.status_code == 200 and again.json()["submission_id"] == "ok-r1"  # one run, one trainer


def test_rerun_queues_a_new_job_with_the_old_code(api):
    api.queue("old")
    r = api.http.post("/v1/jobs/old/rerun", json={"job": job("new")})
    assert r.status_code == 201 and r.json()["queued"] == ["new"]
    assert api.svc.records["new"].code == api.svc.records["old"].code
    gone = api.http.post("/v1/jobs/nobody/rerun", json={"job": job("new2")})
    assert gone.status_code == 404


# --------------------------------------------------------------------------- the API describes itself
def strict(node: Any) -> Any:
    """The document's schemas with no undeclared field allowed in an object that lists its fields
    (the served document lets them pass, for clients of a newer head; the head's own answers must not)."""
    if isinstance(node, dict):
        out = {k: strict(v) for k, v in node.items()}
        if "properties" in out:
            out.setdefault("additionalProperties", False)
        return out
    return [strict(v) for v in node] if isinstance(node, list) else node


class Described:
    """Checks answers against the API's own OpenAPI document (as the API serves it): each answer's
    status is declared for its route, and its body is what the document declares for that status."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc, self.components = doc, strict(doc["components"])
        self.seen: set[tuple[str, str, int]] = set()

    def check(self, method: str, route: str, r: Any) -> Any:
        import jsonschema

        op = self.doc["paths"][route][method]
        assert str(r.status_code) in op["responses"], f"{method.upper()} {route} answered {r.status_code}, undeclared"
        schema = op["responses"][str(r.status_code)]["content"]["application/json"]["schema"]
        jsonschema.validate(r.json(), {**strict(schema), "components": self.components})
        self.seen.add((method, route, r.status_code))
        return r.json()

    def routes(self) -> set[tuple[str, str]]:
        return {(m, p) for p, ops in self.doc["paths"].items() for m in ops}


def call(api: Api, d: Described, method: str, route: str, url: str = "", status: int = 200, http: Any = None,
         **kw: Any) -> Any:
    r = (http or api.http).request(method.upper(), url or route, **kw)
    assert r.status_code == status, (method, url or route, r.status_code, r.text)
    return d.check(method, route, r)


def test_every_route_answers_as_its_openapi_document_declares(tmp_path):
    """Every route of the document is called, its answers (success and refusals) validated against
    the schema the document declares for their status, no field undeclared (a finished job's
    ``spans`` was; resume, rerun, usage and code were never checked)."""
    from fastapi.testclient import TestClient

    api = Api(tmp_path, gpus=3)
    d = Described(api.http.get("/v1/openapi.json").json())
    J, ONE = "/v1/jobs", "/v1/jobs/{job_id}"
    call(api, d, "get", "/v1/health")
    call(api, d, "get", "/v1/health", status=401, http=TestClient(api.app))
    call(api, d, "put", "/v1/code/{key}", f"/v1/code/{api.upload({'b.py': '2'})}")  # there already: 200
    body = zip_of({"c.py": "3"})
    key = wire.code_key(hashlib.sha256(body).hexdigest())
    call(api, d, "get", "/v1/code/{key}", f"/v1/code/{key}", 404)
    call(api, d, "put", "/v1/code/{key}", f"/v1/code/{key}", 201, content=body)
    call(api, d, "put", "/v1/code/{key}", f"/v1/code/{'z' + 'f' * 32}", 422, content=body)
    call(api, d, "get", "/v1/code/{key}", f"/v1/code/{key}")
    call(api, d, "post", J, status=201, json={"jobs": [job(i, (1,), storage=api.storage) for i in ("ok", "wait", "x")],
                                              "code": api.code})
    call(api, d, "post", J, status=422, json={"jobs": [{"entrypoint": 3, "submission_id": "y"}], "code": api.code})
    call(api, d, "post", J, status=400, content=b"{no", headers={"Content-Type": "application/json"})
    call(api, d, "post", J, status=409, json={"jobs": [job("y")], "code": "z" + "0" * 32})
    call(api, d, "post", J, status=404, json={"jobs": [job("y")], "code_of": "nobody"})
    api.tick()
    ckpt = Path(api.get("ok")["metadata"]["checkpoint_dir"])
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    call(api, d, "post", "/v1/jobs/{job_id}/resume", "/v1/jobs/ok/resume", 409, json={})  # still running
    api.jobs.end("ok", "STOPPED")
    api.tick()
    api.tick()
    done = call(api, d, "get", ONE, "/v1/jobs/ok")
    assert done["state"] == "done" and done["spans"] and done["final"] is None, done  # it held GPUs once
    call(api, d, "get", ONE, "/v1/jobs/nope", 404)
    call(api, d, "post", "/v1/jobs/{job_id}/resume", "/v1/jobs/ok/resume", 201, json={})
    call(api, d, "post", "/v1/jobs/{job_id}/resume", "/v1/jobs/ok/resume", 200, json={})  # the same run: once
    call(api, d, "post", "/v1/jobs/{job_id}/resume", "/v1/jobs/ok/resume", 422, json={"new_id": 7})
    call(api, d, "post", "/v1/jobs/{job_id}/resume", "/v1/jobs/nope/resume", 404, json={})
    call(api, d, "post", "/v1/jobs/{job_id}/rerun", "/v1/jobs/ok/rerun", 201, json={"job": job("ok2")})
    call(api, d, "post", "/v1/jobs/{job_id}/rerun", "/v1/jobs/nope/rerun", 404, json={"job": job("ok3")})
    api.tick()
    listed = call(api, d, "get", J)
    fields = set(wire.JobView.__dataclass_fields__)
    assert all(set(v) == fields for v in listed["jobs"]), [set(v) ^ fields for v in listed["jobs"]]
    call(api, d, "get", J, f"{J}?limit=0", 422)
    call(api, d, "get", "/v1/queue")
    usage = call(api, d, "get", "/v1/usage")
    assert usage["jobs"]["ok"]["allocated"] > 0, usage
    call(api, d, "get", "/v1/usage", "/v1/usage?since=soon", 422)
    call(api, d, "post", "/v1/jobs/{job_id}/stop", "/v1/jobs/x/stop")
    call(api, d, "post", "/v1/jobs/{job_id}/stop", "/v1/jobs/ok/stop", 409)
    call(api, d, "post", "/v1/jobs/{job_id}/stop", "/v1/jobs/x/stop?mode=later", 422)
    call(api, d, "post", "/v1/jobs/stop", json={"ids": ["wait"], "mode": "checkpoint"})
    call(api, d, "post", "/v1/jobs/stop", status=404, json={"ids": ["ghost"]})
    call(api, d, "post", "/v1/jobs/stop", status=413, http=TestClient(create_small_app(api)), json={"ids": ["x"] * 400})
    from test_door_api import DOOR_ROUTES  # the door's own routes: called there

    assert {(m, p) for m, p, _ in d.seen} | DOOR_ROUTES == d.routes(), d.routes() - {(m, p) for m, p, _ in d.seen}
    declared = {(m, p, int(s)) for p, ops in d.doc["paths"].items() for m, op in ops.items() for s in op["responses"]
                if s.isdigit() and int(s) < 300 and (m, p) not in DOOR_ROUTES}
    assert declared <= d.seen, declared - d.seen  # every success a route declares was seen and checked


def create_small_app(api: Api) -> Any:
    """The same service behind an app that takes bodies of at most 1 KiB."""
    from rayjobs.door.app import create_app

    return create_app(api.svc, TOKEN, body_limit=1024)

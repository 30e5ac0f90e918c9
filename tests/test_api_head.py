"""The queue's HTTP API on a real head (the embedded one: real Ray, token auth): every route once,
and bad input as one-line JSON errors with the right status, nothing half-queued.

The in-process tests of the same routes (tests/test_queueapi.py) cover each rule on fakes; these
prove the served app, its token and its socket on a head as users reach it.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from conftest import wait_until

from rayjobs.contract import wire


@pytest.fixture(scope="module")
def api(cluster: Any) -> Any:
    from rayjobs.client.dashboard import Dashboard

    return Dashboard(cluster).queue


def _raw(api: Any, method: str, path: str, token: Any = "keep", **kw: Any) -> requests.Response:
    headers = dict(kw.pop("headers", {}))
    if token == "keep":
        headers.update(api._http.headers)
    elif token:
        headers["Authorization"] = f"Bearer {token}"
    return requests.request(method, api.url + wire.PREFIX + path, headers=headers, timeout=30, **kw)


def _one_line(r: requests.Response, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    err = r.json()["error"]
    assert isinstance(err, str) and "\n" not in err and err, r.text
    return err


def test_a_missing_token_or_a_wrong_one_is_401(api) -> None:
    assert "Authorization" in api._http.headers  # the embedded head runs with token auth
    _one_line(_raw(api, "GET", "/health", token=None), 401)
    _one_line(_raw(api, "GET", "/jobs", token="not-the-token"), 401)
    assert _raw(api, "GET", "/health").status_code == 200


def test_every_route_answers_on_the_head_as_its_openapi_document_declares(api, workdir) -> None:
    """Every route of the head's own document, called on the head: each answer's status declared for
    its route and its body what the document declares (no field undeclared)."""
    import hashlib
    import io
    import zipfile

    from conftest import rayjobs_submit
    from test_queueapi import Described

    d = Described(_raw(api, "GET", "/openapi.json").json())

    def check(method: str, route: str, status: int, path: str = "", **kw: Any) -> Any:
        r = _raw(api, method.upper(), path or route, **kw)
        assert r.status_code == status, (method, path or route, r.status_code, r.text)
        return d.check(method, wire.PREFIX + route, r)

    h = check("get", "/health", 200)
    assert h["ok"] and h["session"] and h["pid"] > 0
    check("get", "/health", 401, token=None)
    r = rayjobs_submit("+exp=fake_ppo", "+fake.steps=1", cwd=workdir)
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    wait_until(lambda: (v := api.job(sid)) and v["state"] == "done", 120, f"{sid} to end")
    done = check("get", "/jobs/{job_id}", 200, f"/jobs/{sid}")
    assert done["status"] == "SUCCEEDED" and done["spans"], done
    assert sid in {j["submission_id"] for j in check("get", "/jobs", 200)["jobs"]}
    assert "waiting" in check("get", "/queue", 200)
    assert sid in check("get", "/usage", 200)["jobs"]
    check("post", "/jobs/{job_id}/stop", 409, f"/jobs/{sid}/stop")  # a stop of a finished job
    assert check("post", "/jobs/stop", 200, json={"ids": [sid]})["results"][0]["status"] == "SUCCEEDED"
    check("post", "/jobs/{job_id}/resume", 409, f"/jobs/{sid}/resume", json={})  # it succeeded: rerun it
    again = check("post", "/jobs/{job_id}/rerun", 201, f"/jobs/{sid}/rerun",
                  json={"job": {"entrypoint": "python3 -c pass", "submission_id": f"{sid}-again"}})
    api.stop(again["ids"])  # (its answer is what this checks, not its run)
    wait_until(lambda: (v := api.job(again["ids"][0])) and v["state"] == "done", 120, "the rerun to end")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.py", "print(1)\n")
    key = wire.code_key(hashlib.sha256(buf.getvalue()).hexdigest())
    check("get", "/code/{key}", 404, f"/code/{key}")
    check("put", "/code/{key}", 201, f"/code/{key}", data=buf.getvalue(), headers={"Content-Type": "application/zip"})
    check("get", "/code/{key}", 200, f"/code/{key}")
    check("post", "/jobs", 422, json={"jobs": [{"entrypoint": 3, "submission_id": "nope-1"}]})
    # the door's own routes, on the head's real Ray (its dashboard, its files)
    assert check("get", "/whoami", 200)["role"] == "admin"
    added = check("post", "/users", 201, json={"name": "zoe", "role": "viewer"})
    assert added["token"].startswith("rj_") and check("get", "/users", 200)["users"]
    check("post", "/users/{name}/revoke", 200, "/users/zoe/revoke")
    assert check("get", "/audit", 200)["entries"]
    assert check("get", "/jobs/{job_id}/metrics", 200, f"/jobs/{sid}/metrics")["source"] in ("files", "none")
    assert check("get", "/cluster", 200)["nodes"]
    link = check("post", "/page/link", 201)  # (rayjobs ui's one-time login code)
    assert link["path"].startswith("/login/once?code=") and link["expires_in"] > 0, link
    for route in ("/jobs/{job_id}/log", "/jobs/{job_id}/log/stream"):  # text: its header says which log
        r = _raw(api, "GET", route.replace("{job_id}", sid))
        assert r.status_code == 200 and r.headers[wire.LOG_HEADER] in ("whole", "kept"), (route, r.status_code, r.text)
        d.seen.add(("get", wire.PREFIX + route, 200))
    assert {(m, p) for m, p, _ in d.seen} == d.routes(), d.routes() - {(m, p) for m, p, _ in d.seen}


@pytest.mark.parametrize("body, status", [
    (b"{not json", 400),
    (b'{"jobs": [{"submission_id": 7}]}', 422),  # wrong type
    (b'{"jobs": [], "surprise": 1}', 422),  # unknown field
])
def test_bad_bodies_are_one_line_and_queue_nothing(api, body, status) -> None:
    before = {j["submission_id"] for j in api.jobs()}
    _one_line(_raw(api, "POST", "/jobs", data=body, headers={"Content-Type": "application/json"}), status)
    assert {j["submission_id"] for j in api.jobs()} == before


def test_an_unknown_id_is_404_and_a_body_over_the_limit_413(api) -> None:
    assert "no job 'nope-123'" in _one_line(_raw(api, "GET", "/jobs/nope-123"), 404)
    _one_line(_raw(api, "POST", "/jobs", data=b"x" * (wire.MAX_BODY_BYTES + 1),
                   headers={"Content-Type": "application/json"}), 413)

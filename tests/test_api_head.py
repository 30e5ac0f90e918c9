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


def test_every_route_answers_on_the_head(api, workdir) -> None:
    from conftest import rayjobs_submit

    h = api.health()
    assert h.ok and h.session and h.pid > 0
    doc = _raw(api, "GET", "/openapi.json").json()
    assert {"/v1/health", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/stop", "/v1/jobs/{job_id}/stop",
            "/v1/jobs/{job_id}/resume", "/v1/jobs/{job_id}/rerun", "/v1/queue", "/v1/code/{key}"} <= set(doc["paths"])
    r = rayjobs_submit("+exp=fake_ppo", "+fake.steps=1", cwd=workdir)
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    got = wait_until(lambda: (v := api.job(sid)) and v["state"] == "done" and v, 120, f"{sid} to end")
    assert got["status"] == "SUCCEEDED"
    assert sid in {j["submission_id"] for j in api.jobs()}
    assert "waiting" in api.summary()
    _one_line(_raw(api, "POST", f"/jobs/{sid}/stop"), 409)  # a stop of a finished job
    outcome = api.stop([sid])[0]
    assert outcome.status == "SUCCEEDED"
    _one_line(_raw(api, "GET", "/code/z" + "0" * 32), 404)


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

"""The dashboard client's job poll, through requests and through urllib3's pool (``direct``, the
head's queue), against a small local HTTP server standing in for the dashboard (no Ray): both
give the same answers and the same errors; the queue takes only Ray's "no such job" for a job
Ray lost."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Iterator

import pytest

from rayjobs.client.dashboard import Dashboard, DashboardDown
from rayjobs.contract.target import Target
from rayjobs.errors import ClusterUnreachable, JobNotFound, SubmitError

TOKEN = "s3cret"


@pytest.fixture
def dashboard_url() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Ray's aiohttp dashboard

        def do_GET(self) -> None:  # noqa: N802
            parts = self.path.split("/")  # /api/jobs/ID, /api/jobs/ID/logs
            job = parts[3] if len(parts) > 4 else parts[-1]
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                code, body = 403, b"refused"
            elif job == "bad":
                code, body = 200, b"not json"
            elif job.startswith("busy"):
                code, body = 503, b"try again"
            elif job.startswith("j") and self.path.endswith("/logs"):
                code, body = 200, json.dumps({"logs": f"step:1 of {job}\n"}).encode()
            elif job.startswith("j") and self.path.endswith("/stop"):
                code, body = 200, json.dumps({"stopped": job == "j-live"}).encode()
            elif job.startswith("j"):
                code, body = 200, json.dumps({"submission_id": job, "status": "RUNNING"}).encode()
            else:
                code, body = 404, b"no such job"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802 (only Ray's stop is POSTed)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.do_GET() if self.path.endswith("/stop") else self.send_error(405)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("direct", [False, True], ids=["requests", "urllib3 pool"])
def test_a_job_poll_answers_and_fails_the_same_either_way(dashboard_url, direct):
    d = Dashboard(Target(dashboard_url, "test", TOKEN), timeout=5.0, direct=direct)
    for k in range(3):  # the same kept-alive connection, again and again, from two threads
        got: list[Any] = []
        t = threading.Thread(target=lambda: got.append(d.job(f"j{k}")))
        t.start()
        assert d.job(f"j{k}") == {"submission_id": f"j{k}", "status": "RUNNING"}
        t.join(10)
        assert got == [{"submission_id": f"j{k}", "status": "RUNNING"}]
    with pytest.raises(JobNotFound, match="no job 'x1'"):
        d.job("x1")
    with pytest.raises(DashboardDown, match="bad answer"):
        d.job("bad")
    with pytest.raises(ClusterUnreachable):
        Dashboard(Target(dashboard_url, "test", "wrong"), direct=direct).job("j1")
    with pytest.raises(DashboardDown, match="did not answer"):
        Dashboard(Target("http://127.0.0.1:1", "test", TOKEN), timeout=2.0, direct=direct).job("j1")


def test_stop_and_the_whole_log_go_through_the_jobs_rest_api(dashboard_url):
    """What a laptop command reads and stops goes through the dashboard's REST API (the calls the
    SDK makes), so the command need not import Ray's SDK; Ray's answers become rayjobs' errors."""
    d = Dashboard(Target(dashboard_url, "test", TOKEN), timeout=5.0)
    assert d.stop("j-live") is True and d.stop("j-done") is False
    assert d.logs("j7") == "step:1 of j7\n"
    for call in (d.stop, d.logs):
        with pytest.raises(JobNotFound, match="no job 'x1'"):
            call("x1")
        with pytest.raises(ClusterUnreachable, match="refused"):
            getattr(Dashboard(Target(dashboard_url, "test", "wrong")), call.__name__)("j1")
    with pytest.raises(SubmitError, match="could not stop j1: the dashboard .* did not answer"):
        Dashboard(Target("http://127.0.0.1:1", "test", TOKEN), timeout=2.0).stop("j1")


def test_the_queue_takes_only_rays_no_such_job_for_a_lost_job(dashboard_url):
    from rayjobs.errors import says_no_such_job
    from rayjobs.oncluster.headapi import LOST, HeadJobs

    jobs = HeadJobs(Dashboard(Target(dashboard_url, "the head", TOKEN), timeout=5.0, direct=True))
    assert jobs.details("j1")["status"] == "RUNNING"
    assert jobs.details("x1") == {"status": LOST}  # Ray's 404 for the job
    # a dashboard that does not answer, or answers 503, says nothing of the job: even with "404"
    # in its port or in the job's id (a time stamp such as 201404), which once read as lost
    assert jobs.details("busy-20261204-201404-ab12") is None
    down = HeadJobs(Dashboard(Target("http://127.0.0.1:1", "the head", TOKEN), timeout=2.0, direct=True))
    assert down.details("j-201404") is None
    assert says_no_such_job(RuntimeError("Request failed with status code 404: Job x does not exist."))
    assert not says_no_such_job(DashboardDown("the dashboard at http://127.0.0.1:40404 did not answer (connection refused)"))
    assert not says_no_such_job(DashboardDown("the dashboard answered HTTP 503 for job fake-20261204-201404-ab12"))

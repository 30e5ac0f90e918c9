"""The dashboard client's job poll, through requests and through urllib3's pool (``direct``, the
head's queue), against a small local HTTP server standing in for the dashboard (no Ray): both
give the same answers and the same errors."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Iterator

import pytest

from rayjobs.client.dashboard import Dashboard, DashboardDown
from rayjobs.contract.target import Target
from rayjobs.errors import ClusterUnreachable, JobNotFound

TOKEN = "s3cret"


@pytest.fixture
def dashboard_url() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Ray's aiohttp dashboard

        def do_GET(self) -> None:  # noqa: N802
            job = self.path.rsplit("/", 1)[-1]
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                code, body = 403, b"refused"
            elif job == "bad":
                code, body = 200, b"not json"
            elif job.startswith("j"):
                code, body = 200, json.dumps({"submission_id": job, "status": "RUNNING"}).encode()
            else:
                code, body = 404, b"no such job"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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

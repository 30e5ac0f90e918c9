"""The head's metrics gateway (rayjobs.oncluster.metricsgateway), fast: its routes over a stand-in
dashboard and node exporter (local HTTP servers standing in for Ray's), through the real uvicorn
server on a loopback port. The node script starting it on a real head: tests/test_bootstrap.py."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from rayjobs.oncluster import metricsgateway

NODE_TEXT = "# TYPE ray_node_gpus_utilization gauge\nray_node_gpus_utilization{ip=\"10.0.0.1\",GpuIndex=\"0\"} 87.0\n"


def _stand_in(routes: dict[str, tuple[str, str]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body, ctype = routes.get(self.path, ("", ""))
            self.send_response(200 if ctype else 404)
            self.send_header("Content-Type", ctype or "text/plain")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gateway() -> Iterator[str]:
    node = _stand_in({"/metrics": (NODE_TEXT, "text/plain")})
    dead = _free_port()  # a node whose exporter does not answer
    sd = [{"targets": [f"127.0.0.1:{node.server_address[1]}", f"127.0.0.1:{dead}"], "labels": {}}]
    dash = _stand_in({"/api/prometheus/sd": (json.dumps(sd), "application/json")})
    port, ready = _free_port(), threading.Event()
    threading.Thread(target=metricsgateway.serve, args=(port, f"http://127.0.0.1:{dash.server_address[1]}", ready),
                     daemon=True).start()
    assert ready.wait(10)  # listening: a request now waits in the backlog until uvicorn's loop takes it
    yield f"http://127.0.0.1:{port}"
    node.shutdown()
    dash.shutdown()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def test_the_gateway_merges_every_nodes_metrics_and_says_which_did_not_answer(gateway: str) -> None:
    code, ctype, text = _get(gateway + "/metrics")
    assert code == 200 and ctype.startswith("text/plain; version=0.0.4"), (code, ctype)
    assert 'ray_node_gpus_utilization{GpuIndex="0",ip="10.0.0.1"} 87.0' in text, text
    assert text.count("# TYPE ray_node_gpus_utilization") == 1
    ups = [ln for ln in text.splitlines() if ln.startswith("rayjobs_metrics_target_up{")]
    assert sorted(float(ln.rsplit(" ", 1)[1]) for ln in ups) == [0.0, 1.0], ups  # the dead node says 0
    code, _, body = _get(gateway + "/targets")
    assert code == 200 and len(json.loads(body)) == 2
    assert _get(gateway + "/-/healthy")[::2] == (200, "ok\n")


def test_the_gateway_describes_itself_and_refuses_other_paths(gateway: str) -> None:
    code, _, body = _get(gateway + "/openapi.json")
    assert code == 200 and {"/metrics", "/targets", "/-/healthy"} <= set(json.loads(body)["paths"])
    assert _get(gateway + "/nope")[0] == 404


def test_a_taken_port_is_an_oserror_the_caller_words() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        with pytest.raises(OSError):
            metricsgateway.serve(s.getsockname()[1], "http://127.0.0.1:9")

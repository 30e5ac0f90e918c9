"""The head's metrics gateway: every node's Prometheus metrics in one scrape, on the head's loopback.

Ray exports each node's metrics (GPU utilisation and memory, CPU, RAM, network, Ray's own) on that
node's address, and its dashboard lists those endpoints (``/api/prometheus/sd``). A laptop reaches
the cluster only through an SSH tunnel to the head's loopback, so this small server, started by
the node script on the head (``bootstrap/ray_node.py``), listens on ``127.0.0.1:$RAYJOBS_METRICS_PORT``
(8264) only and answers (FastAPI on uvicorn, described at ``GET /openapi.json``):

* ``GET /metrics``: every node's exposition merged into one (:func:`rayjobs.oncluster.promscrape.merge`;
  Ray's samples carry the node's ``ip``), plus ``rayjobs_metrics_target_up{target=...}`` per node;
  a Prometheus with ``honor_labels: true`` takes it as it is, and Ray's Grafana dashboards work on it;
* ``GET /targets``: the endpoints it scrapes (JSON); ``GET /-/healthy``: ``ok``.

It holds no state beyond a 1 s cache of the last scrape (several readers at once cost one scrape)
and reads the endpoint list from the dashboard at most every 5 s, with the cluster's token. It
outlives a restart of the head's Ray (it only asks the dashboard again).

    python -m rayjobs.oncluster.metricsgateway [--port 8264] [--dashboard http://127.0.0.1:8265]
        [--daemon --pidfile F --log F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from rayjobs.oncluster import promscrape

#: Seconds a scrape (and the endpoint list) is reused.
SCRAPE_CACHE_S = 1.0
TARGETS_CACHE_S = 5.0


class Gateway:
    """The endpoint list and the merged scrape, each cached briefly and computed once at a time."""

    def __init__(self, dashboard: str, timeout: float = 3.0) -> None:
        self.dashboard = dashboard.rstrip("/")
        self.timeout = timeout
        self._lock = threading.Lock()
        self._targets: tuple[float, list[str]] = (0.0, [])
        self._scrape: tuple[float, str] = (0.0, "")

    def _headers(self) -> dict[str, str]:
        path = os.environ.get("RAY_AUTH_TOKEN_PATH")
        token = os.environ.get("RAY_AUTH_TOKEN") or (Path(path).read_text().strip() if path and Path(path).exists() else "")
        return {"Authorization": f"Bearer {token}"} if token else {}

    def targets(self) -> list[str]:
        """Every node's metrics endpoint, from the dashboard (the last list if it does not answer)."""
        at, last = self._targets
        if time.monotonic() - at < TARGETS_CACHE_S and last:
            return last
        try:
            doc = json.loads(promscrape.fetch(self.dashboard + promscrape.SD_PATH, self.timeout, self._headers()))
            last = promscrape.targets(doc)
        except (OSError, ValueError) as e:
            print(f"[rayjobs-metrics] the dashboard's endpoint list is not readable now ({e}); "
                  f"using the last one ({len(last)})", file=sys.stderr, flush=True)
        self._targets = (time.monotonic(), last)
        return last

    def metrics(self) -> str:
        """The merged exposition (at most :data:`SCRAPE_CACHE_S` old)."""
        with self._lock:
            at, text = self._scrape
            if time.monotonic() - at >= SCRAPE_CACHE_S or not text:
                text = promscrape.merge(promscrape.scrape(self.targets(), self.timeout))
                self._scrape = (time.monotonic(), text)
            return text


def create_app(gw: Gateway) -> Any:
    """The gateway's routes (FastAPI; it describes itself at ``GET /openapi.json``). The handlers are
    plain functions: FastAPI runs them in its thread pool, so a slow scrape blocks no other reader."""
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    from rayjobs.shared import __version__

    app = FastAPI(title="rayjobs metrics gateway", version=__version__, docs_url=None, redoc_url=None,
                  description="Every node's Prometheus metrics in one scrape, on the head's loopback.")

    @app.get("/metrics", response_class=PlainTextResponse, response_model=None, summary="Every node's metrics, merged")
    def metrics() -> Any:
        return PlainTextResponse(gw.metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/targets", summary="The metrics endpoints it scrapes")
    def targets() -> list[str]:
        return gw.targets()

    @app.get("/-/healthy", response_class=PlainTextResponse, summary="ok while it serves")
    async def healthy() -> str:  # (in the loop: a pool busy with scrapes must not make it look down)
        return "ok\n"

    return app


def serve(port: int, dashboard: str, ready: Optional[threading.Event] = None) -> None:
    """Bind 127.0.0.1:``port`` and serve (uvicorn) until the process ends (``ready`` is set once bound).

    Raises:
        OSError: the port is taken.
    """
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:  # here, not in uvicorn: a taken port is an OSError the caller words
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    if ready is not None:
        ready.set()
    config = uvicorn.Config(create_app(Gateway(dashboard)), log_level="warning", access_log=False, lifespan="off",
                            ws="none")
    uvicorn.Server(config).run(sockets=[sock])


def _daemonize(pidfile: Path, log: Path) -> None:
    """Double fork, own session, stdio to ``log``: the caller (the node script, under SkyPilot's
    `run`) may exit at once, and SkyPilot ends what it last saw below a `run` script."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    pidfile.write_text(str(os.getpid()))


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m rayjobs.oncluster.metricsgateway")
    ap.add_argument("--port", type=int, default=int(os.environ.get("RAYJOBS_METRICS_PORT", 8264)))
    ap.add_argument("--dashboard", default=os.environ.get("RAYJOBS_DASHBOARD", "http://127.0.0.1:8265"))
    ap.add_argument("--daemon", action="store_true")
    ap.add_argument("--pidfile", type=Path, default=None)
    ap.add_argument("--log", type=Path, default=Path(os.devnull))
    a = ap.parse_args(argv)
    if a.daemon:
        _daemonize(a.pidfile or Path(os.devnull), a.log)
    print(f"[rayjobs-metrics] serving every node's metrics on 127.0.0.1:{a.port} (from {a.dashboard})",
          file=sys.stderr, flush=True)
    try:
        serve(a.port, a.dashboard)
    except OSError as e:
        print(f"[rayjobs-metrics] error: cannot listen on 127.0.0.1:{a.port}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

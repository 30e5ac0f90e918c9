"""The door's host on the head: one Ray actor (``rayjobs/queue``: detached, ``num_cpus=0``, on the
head, restarted by Ray after a crash) that runs the queue's loop
(:class:`~rayjobs.oncluster.queueservice.QueueService`) and serves the door
(:mod:`rayjobs.door.app`, uvicorn) in one event loop, so a request and a tick never race: a
request changes the queue between two ticks and wakes the loop. Nothing on that loop waits for Ray's
GCS: the cluster is read in a thread of its own (:class:`~rayjobs.oncluster.clusterwatch.ClusterWatch`),
which wakes the loop when a reading says something new; the Jobs API calls and the door's file I/O
run in thread pools.

The door listens on the head's 127.0.0.1, port ``$RAYJOBS_API_PORT`` (8263), plain HTTP (the owner's
``rayjobs connect`` tunnels it); with ``$RAYJOBS_DOOR_ADDRESS`` (``<node ip>[:port]``, port 8443 by
default; the node script sets it for ``cluster.door: network``) it ALSO serves the same app on that
address over TLS, for teammates, with the self-signed certificate made at its first start and kept
under ``<store>/door/tls``. Once it listens it writes where (:data:`rayjobs.contract.wire.API_FILE`,
in this Ray session's log dir: port, and the TLS door's URL and fingerprint).
``python3 -m rayjobs.door.host start`` starts it (the node script and the embedded head do, after
their head is up; a rayjobs command that finds no queue starts it with that entrypoint as a small
Ray job) and returns once the door answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from rayjobs.contract import wire
from rayjobs.shared import ROLE_KEY, __version__

NAMESPACE = "rayjobs"
ACTOR_NAME = "queue"
BIND_RETRY_S = 0.5  #: the port may still be held by the queue of a Ray session that is going away


def _node() -> Any:
    import ray

    return ray._private.worker._global_node  # this Ray session's name and log dir: Ray keeps them only here


def session_name() -> str:
    node = _node()
    return str(getattr(node, "session_name", "") or "") if node is not None else ""


def logs_dir() -> Optional[str]:
    node = _node()
    try:
        return node.get_logs_dir_path() if node is not None else None
    except Exception:  # noqa: BLE001
        return None


def door_address(text: str) -> tuple[str, int]:
    """``$RAYJOBS_DOOR_ADDRESS`` (``10.0.0.5``, ``10.0.0.5:8443``, ``[fd00::5]:8443``) as (host, port).

    Raises:
        ValueError: one line -- not ``<ip or name>[:port]``.
    """
    raw = text.strip()
    host, _, port = raw.rpartition(":") if raw.count(":") == 1 or raw.startswith("[") else (raw, "", "")
    host = (host or raw).strip("[]")
    if not host or (port and not port.isdigit()) or not (0 < int(port or wire.DOOR_TLS_PORT) < 65536):
        raise ValueError(f"{wire.DOOR_ADDRESS_ENV}={text!r}: expected <node ip>[:port]")
    return host, int(port or wire.DOOR_TLS_PORT)


class QueueActor:
    """The queue and its door: ``ray.remote(QueueActor)`` named ``rayjobs/queue``, detached, on the head."""

    def __init__(self) -> None:
        from rayjobs.oncluster import reaper, warmengines
        from rayjobs.oncluster.clusterstate import ClusterReader
        from rayjobs.oncluster.clusterwatch import ClusterWatch
        from rayjobs.oncluster.headapi import head_dash, head_jobs
        from rayjobs.oncluster.lease import Lease
        from rayjobs.oncluster.queueservice import QueueService
        from rayjobs.oncluster.store import QueueStore

        store = QueueStore()
        # the store is this queue's alone: LeaseHeld (one line) if another live queue holds it, and
        # this actor is not created (the starter says why)
        self.lease = Lease(store.root, session_name())
        self.lease.acquire()
        self.dash = head_dash()
        watch = ClusterWatch(ClusterReader())
        self.svc = QueueService(store, head_jobs(self.dash), watch, reap=reaper.reap_job,
                                reap_enabled=reaper.enabled(), session=session_name(), ray_logs=logs_dir() or "",
                                warm=warmengines.Registry())
        watch.note = self.svc.note
        self.svc.recover()
        self.io = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rayjobs-io")
        self.port: Optional[int] = None
        self.door: dict[str, Any] = {}  #: the TLS door: url, fingerprint (none: loopback only)
        self._wake: Optional[asyncio.Future] = None
        self._listening: Optional[asyncio.Event] = None
        self._tasks: list[asyncio.Task] = []
        # Ray runs an async actor's __init__ inside its event loop: start now, so a restarted actor
        # (a crash, Ray's max_restarts) admits and answers again without waiting for a caller.
        try:
            self._start()
        except RuntimeError:  # no running loop (a direct call): ping() starts it
            pass

    def _start(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()

        def wake() -> None:  # from another thread (the cluster's reader, a reap's return)
            try:
                loop.call_soon_threadsafe(self._kick)
            except RuntimeError:  # the loop has closed
                pass

        self.svc.wake = wake
        self.svc.watch.start(wake)
        self._listening = asyncio.Event()
        self._tasks = [loop.create_task(self._run()), loop.create_task(self._serve()), loop.create_task(self._hold())]

    async def _hold(self) -> None:
        """The lease's heartbeat (in the I/O pool); a store another queue took meanwhile ends this
        process at once: two queues must not admit from one store (Ray restarts this actor, whose
        start is then refused while the other holds it)."""
        from rayjobs.oncluster.lease import RENEW_S

        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                held = await loop.run_in_executor(self.io, self.lease.renew)
            except OSError as e:  # the storage root did not answer: try again at the next beat
                self.svc.note("lease not renewed", f"{type(e).__name__}: {e}"[:300])
                continue
            if not held:
                print(f"[rayjobs] another queue took this queue's store {self.svc.store.root} ({self.lease.read()}); "
                      f"this queue stops", flush=True)
                os._exit(3)

    def _kick(self) -> None:
        """Wake the loop now (on the loop's thread: the API's handlers and ping call it)."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _run(self) -> None:
        # a future and a timer a turn: asyncio.wait_for on an Event (a task a turn) cost 0.1 % of a core
        loop = asyncio.get_running_loop()
        delay = 0.0
        while True:
            self._wake = loop.create_future()
            timer = loop.call_later(delay, self._kick)
            await self._wake
            timer.cancel()
            try:
                delay = self.svc.tick()
            except Exception as e:  # never let the loop die
                self.svc.note("error", f"{type(e).__name__}: {e}"[:300])
                delay = 0.1

    async def _serve(self) -> None:
        import uvicorn

        from rayjobs.door.app import create_app
        from rayjobs.oncluster.headapi import api_token

        tls = self._tls()
        app = create_app(self.svc, api_token(), self._kick, self.io, dash=self.dash, url=self.door.get("url"),
                         fingerprint=self.door.get("fingerprint"))
        sock = await self._bind("127.0.0.1", int(os.environ.get(wire.PORT_ENV) or wire.DEFAULT_PORT))
        servers = [uvicorn.Server(_config(app)).serve(sockets=[sock])]
        if tls is not None:
            tls_sock = await self._bind(tls[0], tls[1], tries=int(60 / BIND_RETRY_S))
            if tls_sock is not None:
                servers.append(uvicorn.Server(_config(app, tls[2])).serve(sockets=[tls_sock]))
            else:
                self.door = {}
        self.port = sock.getsockname()[1]
        write_api_file(self.port, self.door)
        self._listening.set()
        await asyncio.gather(*servers)

    def _tls(self) -> Optional[tuple[str, int, Any]]:
        """The TLS door asked for by ``$RAYJOBS_DOOR_ADDRESS``: (host, port, its certificate), made
        now if this is its first start; None when not asked for (or the setting is wrong: said)."""
        from rayjobs.door import tls

        want = os.environ.get(wire.DOOR_ADDRESS_ENV, "").strip()
        if not want:
            return None
        try:
            host, port = door_address(want)
            cert = tls.ensure(self.svc.store.root / "door", host)
        except (ValueError, OSError) as e:
            self.svc.note("door not on the network", str(e)[:300])
            return None
        shown = f"[{host}]" if ":" in host else host
        self.door = {"url": f"https://{shown}:{port}", "fingerprint": cert.fingerprint}
        return host, port, cert

    async def _bind(self, host: str, port: int, tries: Optional[int] = None) -> Any:
        """The door's socket on ``host:port``, listening; a port still held (by the queue of a Ray
        session that is going away) is tried again until it frees (at most ``tries`` times: None
        when it never does)."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        for _ in range(tries or 10**9):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
                sock.listen(2048)
                sock.setblocking(False)
                return sock
            except OSError as e:
                sock.close()
                self.svc.note("api port busy", f"{host}:{port}: {e.strerror}")
                await asyncio.sleep(BIND_RETRY_S)
        return None

    # ---------------------------------------------------------------- for the starter and tests
    async def ping(self, wait_s: float = 30.0) -> dict[str, Any]:
        """Start the loop (if not yet); once the API listens (at most ``wait_s``), where and how many jobs."""
        self._start()
        self._kick()
        try:
            await asyncio.wait_for(self._listening.wait(), wait_s)
        except asyncio.TimeoutError:
            pass
        return {"port": self.port, "waiting": len(self.svc.state.waiting), "admitted": len(self.svc.state.running),
                **self.door}

    async def snapshot(self) -> dict[str, Any]:
        """The queue's summary and its recent events (tests, benchmarks)."""
        from rayjobs.oncluster import jobviews

        self._start()
        doc = jobviews.summary(self.svc)
        doc["events"] = list(self.svc.events)
        return doc


def _config(app: Any, cert: Any = None) -> Any:
    """uvicorn's settings for one of the door's sockets (``cert``: serve it over TLS)."""
    import uvicorn

    tls = {"ssl_certfile": str(cert.cert), "ssl_keyfile": str(cert.key)} if cert is not None else {}
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30, **tls)


def write_api_file(port: int, door: Optional[dict[str, Any]] = None) -> None:
    """Say where the door listens, in this Ray session's log dir (the laptop reads it through the
    dashboard's log API; a new session has a new dir, so a stale file of an old one is never read):
    its loopback port, and the TLS door's ``url`` and ``fingerprint`` when it serves one."""
    from rayjobs.contract.files import write_json

    d = logs_dir()
    if d:
        write_json(os.path.join(d, wire.API_FILE), {"port": port, "pid": os.getpid(), "session": session_name(),
                                                    "version": __version__, "at": round(time.time(), 3), **(door or {})})


# --------------------------------------------------------------------------- starting it
def ensure_running(timeout: float = 60.0) -> dict[str, Any]:
    """Connect to this cluster and make sure the queue runs (created once, by name); returns once
    its door listens: ``{"port", "waiting", "admitted"}`` (and ``url``, ``fingerprint``: the TLS door).

    The caller's own job config (its working_dir) is kept out: the detached actor must not inherit
    one job's runtime_env.
    """
    import ray
    from ray.job_config import JobConfig

    from rayjobs.oncluster.lease import LeaseHeld, refusal
    from rayjobs.oncluster.store import store_root

    if not ray.is_initialized():
        saved = os.environ.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
        try:
            ray.init(address="auto", namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False,
                     configure_logging=False, job_config=JobConfig(metadata={ROLE_KEY: "queue starter"}))
        finally:
            if saved is not None:
                os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = saved
    why = refusal(store_root(), session_name())  # (this session's own queue holding it is fine)
    if why:
        raise LeaseHeld(why)
    actor = ray.remote(QueueActor).options(
        name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_restarts=-1, max_concurrency=1000, resources={"node:__internal_head__": 0.001}).remote()
    return dict(ray.get(actor.ping.remote(timeout), timeout=timeout))


def main(argv: Optional[list[str]] = None) -> int:
    """``python3 -m rayjobs.door.host start``: start the queue and its door; print where it listens."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv != ["start"]:
        print("usage: python3 -m rayjobs.door.host start", file=sys.stderr)
        return 2
    try:
        got = ensure_running()
    except Exception as e:  # noqa: BLE001 (one line: the store is another live queue's, or its name is bad)
        line = _refusal_line(e)
        if line is None:
            raise
        print(line, file=sys.stderr)  # one line: the starter's caller shows it as it is
        return 2
    if not got.get("port"):
        print("[rayjobs] the queue started but its API does not listen (see the queue actor's log on the head)",
              file=sys.stderr)
        return 1
    print(json.dumps(got), flush=True)
    return 0


def _refusal_line(e: BaseException) -> Optional[str]:
    """The one line of a refusal to start: the starter's own, or the actor's (Ray wraps it in its
    own error, traceback included); None for any other error."""
    import re

    from rayjobs.oncluster.lease import LeaseHeld

    if isinstance(e, (LeaseHeld, ValueError)):
        return str(e)
    m = re.search(r"(?:LeaseHeld|ValueError): (.*)", str(e))
    return m.group(1).strip() if m else None


if __name__ == "__main__":
    sys.exit(main())

"""The embedded default cluster: a local Ray head on 127.0.0.1, started on first use.

With no address configured, rayjobs starts (or reuses) this head and says so on stderr. It binds
only to 127.0.0.1: ``--node-ip-address=127.0.0.1`` plus ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
(without it Ray 2.60 switches to the machine's interface address). Its state lives under
``$RAYJOBS_HOME/local``; it is stopped by PID with ``rayjobs local stop``, never with the `ray` CLI's stop.

**Which processes are the head's.** Several of them do not name the temp dir on their command
line: Ray's client server (``python -m ray.util.client.server``), the dashboard agent and the
runtime-env agent (they rename themselves ``ray::DashboardAgent``/``ray::RuntimeEnvAgent``), the
dashboard's module processes (``ray-dashboard-JobHead-0`` ...), workers (``ray::IDLE``), and a
job's driver, which Ray starts in a session of its own. So ``ray start`` runs in a new session
whose id is recorded, and the head's processes are: those of that session, those whose command
line names the temp dir (a dashboard restarted by hand), and every descendant of those.

**Ready** means a job can be submitted: the Jobs API answers and the head node's dashboard agent
(through which the job head starts every job) listens on the port we gave it. The ports that Ray
would otherwise take from fixed defaults (agent 52365, client server 10001) are chosen free here,
so a lingering or foreign Ray cannot make the agent fail to bind.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from rayjobs import settings
from rayjobs.client import headprocs
from rayjobs.client.dashboard import Dashboard
from rayjobs.contract.wire import DEFAULT_PORT as DEFAULT_API_PORT, PORT_ENV
from rayjobs.shared import HEAD_ENV, QUEUE_NAME_ENV
from rayjobs.errors import ClusterUnreachable, RayjobsError
from rayjobs.settingsources import REMEMBERED

#: Environment variable: ``1`` -- never start the embedded head implicitly (a script or CI that must
#: talk to a configured cluster, or a test tier that starts no Ray): a command without a cluster fails.
NO_LOCAL_ENV = "RAYJOBS_NO_LOCAL_HEAD"
#: Environment variable: how long ``start`` waits for a new head to accept jobs (default 60 s).
START_TIMEOUT_ENV = "RAYJOBS_LOCAL_START_TIMEOUT_S"
#: How long ``ray start`` itself may run (it returns once the GCS and the raylet are up).
RAY_START_TIMEOUT_S = 120.0


def state_dir() -> Path:
    return settings.home() / "local"


def record_file() -> Path:
    return state_dir() / "head.json"


def token_file() -> Path:
    return state_dir() / "auth_token"


def cluster_id_file() -> Path:
    return state_dir() / "cluster_id"


def queue_name(storage: Path) -> str:
    """The embedded head's queue store name: the id made once and kept in ``$RAYJOBS_HOME/local``
    (it outlives `local stop` and `local start`, so the backlog comes back; another
    ``$RAYJOBS_HOME`` on the same storage root has its own). ``$RAYJOBS_QUEUE_NAME`` wins; a home
    whose storage root already holds the store of an older rayjobs (``queue/default``) keeps it."""
    from rayjobs.shared import QUEUE_NAME_ENV, made_once_id

    if os.environ.get(QUEUE_NAME_ENV, "").strip():
        return os.environ[QUEUE_NAME_ENV].strip()
    f = cluster_id_file()
    if not f.exists() and any((storage / "queue" / "default" / "jobs").glob("*.json")):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("default\n")
    return made_once_id(str(f))


def _netns(pid: Any = "self") -> Optional[int]:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def elsewhere(rec: dict[str, Any]) -> Optional[int]:
    """A live process of the head ``rec`` that runs in another network namespace than this one
    (its 127.0.0.1 is not ours: the head answers there, not here), or None."""
    here = _netns()
    for pid in headprocs.head_pids(rec):
        there = _netns(pid)
        if here is not None and there is not None and there != here:
            return pid
    return None


def tmp_dir() -> Path:
    """The head's processes' ``TMPDIR``, removed when the head stops: Ray's dashboard leaves its
    multiprocessing dir (``pymp-*``) behind on every stop (it ``os._exit``s on SIGTERM)."""
    return state_dir() / "tmp"


def _alive(url: str, timeout: float = 1.0) -> bool:
    """True if a dashboard answers at ``url`` (a 401 from token auth still means alive)."""
    return Dashboard(settings.Target(url, "embedded"), timeout=timeout).alive()


def free_port(preferred: int) -> Optional[int]:
    """``preferred`` if it is free on 127.0.0.1, else any free port; None if none is."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
            except OSError:
                continue
    return None


def _free_port(preferred: int) -> int:
    port = free_port(preferred)
    if port is None:
        raise ClusterUnreachable("no free local port for the embedded Ray head")
    return port


def _pick_ports(preferred: Sequence[int]) -> list[int]:
    """Distinct free 127.0.0.1 ports: ``preferred[i]`` where free (0 = any).

    All sockets stay bound until every port is chosen, so no two components get the same port.
    """
    socks: list[socket.socket] = []
    try:
        for want in preferred:
            s = socket.socket()
            socks.append(s)
            for port in dict.fromkeys((want, 0)):
                try:
                    s.bind(("127.0.0.1", port))
                    break
                except OSError:
                    continue
            else:
                raise ClusterUnreachable("no free local port for the embedded Ray head")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def running() -> Optional[dict[str, Any]]:
    """The live embedded head's record, or None. The head answering at its address must be the
    record's own (its Ray session): another head at the same address -- another network namespace's
    127.0.0.1 -- is not this record's, and its jobs are not this head's."""
    try:
        rec = json.loads(record_file().read_text())
    except (OSError, ValueError):
        return None
    if not _alive(rec["dashboard"]):
        return None
    return rec if not rec.get("session") or _session(rec) == rec["session"] else None


def _session(rec: dict[str, Any]) -> Optional[str]:
    """The Ray session of the head answering at the record's address (None: it did not say)."""
    try:
        return str(Dashboard(target(rec), timeout=2.0).version().get("session_name") or "") or None
    except RayjobsError:
        return None


def target(rec: dict[str, Any]) -> settings.Target:
    """The client target for a head record (its token is read from the 0600 token file)."""
    token = None
    try:
        token = Path(rec["token_path"]).read_text().strip() if rec.get("token_path") else None
    except OSError:
        pass
    return settings.Target(rec["dashboard"], "embedded", token, api=rec.get("api"))


def ensure(num_gpus: Optional[int] = None, quiet: bool = False) -> settings.Target:
    """The embedded head as a client target, starting it if needed (bounded wait)."""
    rec = running()
    if rec:
        if not quiet:
            print(f"rayjobs: using the embedded local Ray cluster at {rec['dashboard']}", file=sys.stderr)
        return target(rec)
    if os.environ.get(NO_LOCAL_ENV, "").strip() not in ("", "0"):
        raise ClusterUnreachable(f"no cluster is configured and {NO_LOCAL_ENV}=1 forbids starting the embedded local "
                                 f"head: set RAY_ADDRESS (or run `rayjobs connect`), or unset {NO_LOCAL_ENV}")
    state_dir().mkdir(parents=True, exist_ok=True)
    # Two submits at once must start one head, not two heads sharing one temp dir.
    with open(state_dir() / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rec = running() or start(num_gpus=num_gpus, quiet=quiet)
    return target(rec)


# --------------------------------------------------------------------------- start
def _head_env() -> dict[str, str]:
    """``ray start``'s environment: HEAD_ENV, token auth, this interpreter first on PATH."""
    env = dict(os.environ, **HEAD_ENV)
    # Token auth even on loopback: the Jobs API runs arbitrary code for whoever reaches it, and
    # other local users can reach 127.0.0.1. The token file is 0600 and never leaves this machine.
    tok = token_file()
    if not tok.exists():
        fd = os.open(tok, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secrets.token_hex(32).encode())
        os.close(fd)
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tok)})
    env.pop("RAY_AUTH_TOKEN", None)
    # Entrypoints run with the PATH of `ray start`: make this interpreter's python3 the first one.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("RAY_ADDRESS", None)
    env["TMPDIR"] = str(tmp_dir())
    # The queue on this head keeps its backlog under the storage root: the settings' one (a settings
    # file's too, not only RAYJOBS_STORAGE), so jobs and queue share one root. Not the remembered
    # cluster's: that is a remote cluster's path.
    s = settings.current()
    if s.storage and s.source("storage") != REMEMBERED:
        env[settings.STORAGE_ENV] = s.storage
    # ... in a store of this head's own there (the storage root may be another head's too)
    env[QUEUE_NAME_ENV] = queue_name(Path(env.get(settings.STORAGE_ENV) or settings.home() / "storage"))
    return env


def _head_cmd(ray_bin: str, ports: dict[str, int], temp: Path, num_gpus: Optional[int],
              num_cpus: Optional[int]) -> list[str]:
    """The ``ray start --head`` command line.

    Ports: the GCS and dashboard prefer Ray's defaults; the agent's HTTP port (default 52365) and
    the client server's (default 10001) are fixed defaults a lingering or foreign Ray may hold, so
    they get free ports. The others (agent gRPC, runtime-env agent, metrics export, node and
    object manager) default to 0: each daemon binds a kernel-chosen free port itself, which cannot
    clash -- pre-choosing them would only open a race between our probe and Ray's bind.
    """
    cmd = [
        ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={ports['gcs']}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={ports['dashboard']}",
        f"--dashboard-agent-listen-port={ports['dashboard_agent']}",
        f"--ray-client-server-port={ports['client_server']}", f"--temp-dir={temp}",
        "--disable-usage-stats", "--include-dashboard=true",
    ]
    from rayjobs.shared import stack_versions, version_labels

    labels = version_labels(stack_versions())  # what this head runs, for `rayjobs cluster`
    if labels:
        cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    return cmd


def start(num_gpus: Optional[int] = None, quiet: bool = False, timeout: Optional[float] = None,
          num_cpus: Optional[int] = None) -> dict[str, Any]:
    """Start a head bound to 127.0.0.1, record it, and return once it accepts jobs.

    ``timeout`` (default ``$RAYJOBS_LOCAL_START_TIMEOUT_S`` or 60 s) bounds the wait for readiness
    after ``ray start``; a head not ready by then is stopped by PID and :class:`ClusterUnreachable`
    says what is wrong and which log to read.
    """
    timeout = float(os.environ.get(START_TIMEOUT_ENV) or 60) if timeout is None else timeout
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    if record_file().exists():
        _not_elsewhere()
        stop()  # one head per RAYJOBS_HOME: an earlier one's leftovers would hold its temp dir
    temp = d / "ray"
    # Ray's note of the last head started in this temp dir. `ray start` refuses to start when it
    # names the port we pick and *any* gcs_server on the machine uses that port (it greps ps, so a
    # Ray in another network namespace counts): stale once the earlier head is stopped.
    (temp / "ray_current_cluster").unlink(missing_ok=True)
    shutil.rmtree(tmp_dir(), ignore_errors=True)  # a crashed head's
    tmp_dir().mkdir()
    names = ("gcs", "dashboard", "dashboard_agent", "client_server", "api")
    ports = dict(zip(names, _pick_ports([6379, 8265, 0, 0, DEFAULT_API_PORT])))
    env = _head_env()
    env[PORT_ENV] = str(ports["api"])  # the queue's API (on this head's loopback)
    cmd = _head_cmd(shutil.which("ray", path=env["PATH"]) or "ray", ports, temp, num_gpus, num_cpus)
    url = f"http://127.0.0.1:{ports['dashboard']}"
    env["RAYJOBS_DASHBOARD"] = url  # the queue (on this head) submits the jobs it admits here
    if not quiet:
        print(f"rayjobs: no cluster configured; starting the embedded local Ray cluster ({url}) ...", file=sys.stderr)
    # A session of its own: every daemon `ray start` launches shares its session id, how stop
    # finds the processes that do not name the temp dir.
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    rec = {"dashboard": url, "gcs": f"127.0.0.1:{ports['gcs']}", "temp_dir": str(temp),
           "api": f"http://127.0.0.1:{ports['api']}",
           "token_path": str(token_file()), "ports": ports, "sid": proc.pid,
           "sid_start": headprocs.start_time(proc.pid), "boot_id": headprocs.boot_id(), "pids": [proc.pid]}
    _write_record(rec)  # before waiting: `rayjobs local stop` must find a half-started head too
    try:
        _wait_ray_start(proc, temp)
        wait_ready(rec, timeout)
        start_queue(rec, env, timeout)
    except BaseException as e:
        left = _abort(proc, rec)
        if isinstance(e, ClusterUnreachable):
            raise ClusterUnreachable(f"{e}; {left}") from e
        raise
    rec["pids"] = headprocs.head_pids(rec)
    rec.update(session=Path(rec.get("session_dir") or "").name or None, queue=env[QUEUE_NAME_ENV], netns=_netns())
    _write_record(rec)
    return rec


def _not_elsewhere() -> None:
    """Refuse to replace this ``$RAYJOBS_HOME``'s head while it runs in another network namespace
    (one line): its jobs and its queue's store are that head's."""
    try:
        rec = json.loads(record_file().read_text())
    except (OSError, ValueError):
        return
    pid = elsewhere(rec)
    if pid is not None:
        raise ClusterUnreachable(f"the embedded head of this RAYJOBS_HOME (session {rec.get('session') or '?'}, pid "
                                 f"{pid}) runs in another network namespace: stop it there (`rayjobs local stop`) "
                                 f"or give this one a RAYJOBS_HOME of its own")


def start_queue(rec: dict[str, Any], env: dict[str, str], timeout: float) -> None:
    """Start the head's queue and return once its API answers (the head accepts jobs only then)."""
    run_env = dict(env, RAY_ADDRESS=rec["gcs"])
    try:
        r = subprocess.run([sys.executable, "-m", "rayjobs.door.host", "start"], env=run_env,
                           capture_output=True, text=True, timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        raise ClusterUnreachable(f"the embedded head's queue did not start within {timeout + 30:.0f} s "
                                 f"(logs: {rec['temp_dir']}/session_latest/logs)") from None
    if r.returncode != 0:
        last = ([ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()] or [f"exit {r.returncode}"])[-1]
        raise ClusterUnreachable(f"the embedded head's queue did not start: {last.strip()[:300]}")


def _write_record(rec: dict[str, Any]) -> None:
    record_file().write_text(json.dumps(rec, indent=2))


def _wait_ray_start(proc: subprocess.Popen, temp: Path) -> None:
    """Wait for ``ray start`` to return (bounded); its last stderr line if it failed."""
    try:
        out, err = proc.communicate(timeout=RAY_START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ClusterUnreachable(f"`ray start` of the embedded head did not return within "
                                 f"{RAY_START_TIMEOUT_S:.0f} s (logs: {temp}/session_latest/logs)") from None
    if proc.returncode != 0:
        last = [ln.strip() for ln in (err or out or "").splitlines() if ln.strip()][-1:]
        why = last[0] if last else f"`ray start` exited {proc.returncode}"
        raise ClusterUnreachable(f"could not start the embedded Ray head: {why}")


def _abort(proc: subprocess.Popen, rec: dict[str, Any]) -> str:
    """Stop what a failed start started (by PID); a phrase saying so, for the error message."""
    if proc.poll() is None:
        proc.kill()  # `ray start` itself; the daemons it launched are in its session
    survivors = headprocs.stop_head(rec, 8.0)  # short grace: a head that never got ready runs no job
    proc.wait()
    if survivors:
        return f"PIDs {', '.join(map(str, survivors))} of it survived SIGKILL: run `rayjobs local stop`"
    record_file().unlink(missing_ok=True)
    return "everything it had started was stopped"


# --------------------------------------------------------------------------- readiness
def _agent_port(session_dir: Path) -> Optional[int]:
    """The HTTP port the head's dashboard agent reports (-1: it could not bind); None: not yet.

    The agent writes this file right after its HTTP server is up (or failed), in the same step as
    it registers its address in the GCS, where the job head looks for an agent to run a job.
    """
    for f in session_dir.glob("dashboard_agent_listen_port_*"):
        try:
            return int(f.read_text().strip())
        except (OSError, ValueError):
            return None
    return None


def _answers(base: str, path: str) -> bool:
    """Does ``base`` answer ``path`` with a 200 (the agent's own HTTP server, on loopback)?"""
    try:
        return Dashboard(settings.Target(base, "embedded"), timeout=2.0).get(path).status_code == 200
    except RayjobsError:
        return False


def not_ready(rec: dict[str, Any]) -> tuple[Optional[str], bool]:
    """(why the head cannot accept a job yet, whether waiting can help); (None, False) if it can."""
    url, temp = rec["dashboard"], Path(rec["temp_dir"])
    try:  # /api/version is served by the job head module itself
        version = Dashboard(target(rec), timeout=2.0).version()
    except RayjobsError:
        return f"its Jobs API at {url} does not answer (read {temp}/session_latest/logs/dashboard.log)", True
    session = temp / str(version.get("session_name") or "session_latest")
    log = session / "logs" / "dashboard_agent.log"
    want = rec.get("ports", {}).get("dashboard_agent")
    port = _agent_port(session)
    if port is None:
        return f"its dashboard agent has not registered (read {log})", True
    if port < 0 or (want and port != want):
        return (f"its dashboard agent could not listen on 127.0.0.1:{want or '?'}, so no job can start "
                f"(another process took the port? read {log})"), False
    if not _answers(f"http://127.0.0.1:{port}", "/api/healthz"):
        return f"its dashboard agent on 127.0.0.1:{port} does not answer /api/healthz (read {log})", True
    rec["session_dir"] = str(session)
    return None, False


def wait_ready(rec: dict[str, Any], timeout: float) -> None:
    """Return once the head of ``rec`` can accept a job; ClusterUnreachable after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        why, retry = not_ready(rec)
        if why is None:
            return
        if not retry or time.monotonic() >= deadline:
            waited = f" after {timeout:.0f} s" if retry else ""
            raise ClusterUnreachable(f"the embedded Ray head at {rec['dashboard']} cannot accept jobs{waited}: {why}")
        time.sleep(0.2)


def stop(timeout: float = 20.0) -> bool:
    """Stop the embedded head by PID and return once every process of it is gone (bounded).

    False if there was no head record. Raises :class:`RayjobsError` naming the PIDs that survived
    SIGKILL (the record is kept, so a later stop retries).
    """
    try:
        rec = json.loads(record_file().read_text())
    except (OSError, ValueError):
        return False
    survivors = headprocs.stop_head(rec, timeout)
    if survivors:
        raise RayjobsError(f"PIDs {', '.join(map(str, survivors))} of the embedded Ray head are still alive "
                           f"{timeout:.0f} s after SIGTERM and SIGKILL; check them with `ps -o pid,stat,args -p "
                           f"{','.join(map(str, survivors))}`, then run `rayjobs local stop` again")
    record_file().unlink(missing_ok=True)
    shutil.rmtree(tmp_dir(), ignore_errors=True)
    return True

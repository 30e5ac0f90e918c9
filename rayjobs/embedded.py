"""The embedded default cluster: a local Ray head on 127.0.0.1, started on first use.

With no address configured, rayjobs starts (or reuses) this head and says so on stderr. It binds
only to 127.0.0.1: ``--node-ip-address=127.0.0.1`` plus ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
(without it Ray 2.60 switches to the machine's interface address). Its state lives under
``$RAYJOBS_HOME/local``; it is stopped by PID with ``rayjobs local stop``, never with the `ray` CLI's stop.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from rayjobs import settings
from rayjobs.errors import ClusterUnreachable

#: Head settings the queue and stop rely on (also set by the SkyPilot bootstrap).
HEAD_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # Queued jobs wait inside their own driver, but keep Ray from failing a PENDING job early.
    "RAY_JOB_START_TIMEOUT_SECONDS": str(7 * 24 * 3600),
    # Ray kills a stopped job's driver 3 s after SIGTERM: too short for an RL checkpoint.
    "RAY_JOB_STOP_WAIT_TIME_S": "60",
    # Not set: RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper=true. On Ray 2.60 it
    # makes every job report SUCCEEDED with driver exit code 0 (measured: `sys.exit(1)` ->
    # SUCCEEDED), because the supervisor's child is reaped before it can read the exit status.
    "RAY_USAGE_STATS_ENABLED": "0",
}


def state_dir() -> Path:
    return settings.home() / "local"


def record_file() -> Path:
    return state_dir() / "head.json"


def _alive(url: str, timeout: float = 1.0) -> bool:
    """True if a dashboard answers at ``url`` (a 401 from token auth still means alive)."""
    try:
        with urllib.request.urlopen(url + "/api/version", timeout=timeout) as r:
            return r.status == 200
    except urllib.error.HTTPError as e:
        return e.code in (401, 403)
    except Exception:
        return False


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


def running() -> Optional[dict[str, Any]]:
    """The live embedded head's record, or None."""
    try:
        rec = json.loads(record_file().read_text())
    except (OSError, ValueError):
        return None
    return rec if _alive(rec["dashboard"]) else None


def token_file() -> Path:
    return state_dir() / "auth_token"


def target(rec: dict[str, Any]) -> settings.Target:
    """The client target for a head record (its token is read from the 0600 token file)."""
    token = None
    try:
        token = Path(rec["token_path"]).read_text().strip() if rec.get("token_path") else None
    except OSError:
        pass
    return settings.Target(rec["dashboard"], "embedded", token)


def ensure(num_gpus: Optional[int] = None, quiet: bool = False) -> settings.Target:
    """The embedded head as a client target, starting it if needed (bounded wait)."""
    rec = running()
    if rec:
        if not quiet:
            print(f"rayjobs: using the embedded local Ray cluster at {rec['dashboard']}", file=sys.stderr)
        return target(rec)
    return target(start(num_gpus=num_gpus, quiet=quiet))


def start(num_gpus: Optional[int] = None, quiet: bool = False, timeout: float = 120.0,
          num_cpus: Optional[int] = None) -> dict[str, Any]:
    """Start a head bound to 127.0.0.1 and record it (ports, temp dir, PIDs)."""
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    temp = d / "ray"
    gcs = _free_port(6379)
    dash = _free_port(8265)
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
    ray_bin = shutil.which("ray", path=env["PATH"]) or "ray"
    cmd = [
        ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--temp-dir={temp}",
        "--disable-usage-stats", "--include-dashboard=true",
    ]
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if not quiet:
        print(f"rayjobs: no cluster configured; starting the embedded local Ray cluster (127.0.0.1:{dash}) ...", file=sys.stderr)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise ClusterUnreachable(f"could not start the embedded Ray head: {out.stderr.strip().splitlines()[-1:] }")
    url = f"http://127.0.0.1:{dash}"
    deadline = time.monotonic() + timeout
    while not _alive(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not _alive(url):
        raise ClusterUnreachable(f"the embedded Ray head started but its dashboard at {url} did not answer within {timeout:.0f} s")
    rec = {"dashboard": url, "gcs": f"127.0.0.1:{gcs}", "temp_dir": str(temp), "token_path": str(tok),
           "pids": _session_pids(temp)}
    record_file().write_text(json.dumps(rec, indent=2))
    return rec


def pids_naming(*marks: str) -> list[int]:
    """PIDs of the processes whose command line contains any of ``marks`` (this process excluded)."""
    wanted = [m.encode() for m in marks]
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if any(m in cmdline for m in wanted):
            pids.append(int(p.name))
    return sorted(pids)


def _session_pids(temp: Path) -> list[int]:
    """PIDs of the head's processes (those whose command line names its temp dir)."""
    return pids_naming(str(temp))


def terminate(live: Callable[[], Iterable[int]], timeout: float = 20.0, poll: float = 0.1) -> None:
    """SIGTERM the PIDs ``live()`` lists, wait up to half of ``timeout``; then the same with SIGKILL.

    By PID only: never the ``ray`` CLI's stop, which would also stop Rays we did not start.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in live():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout / 2
        while time.monotonic() < deadline and list(live()):
            time.sleep(poll)


def stop(timeout: float = 20.0) -> bool:
    """Stop the embedded head by PID (never the `ray` CLI's stop, which would also stop other Rays)."""
    try:
        rec = json.loads(record_file().read_text())
    except (OSError, ValueError):
        return False
    pids = set(rec.get("pids", [])) | set(_session_pids(Path(rec["temp_dir"])))
    terminate(lambda: [p for p in pids if Path(f"/proc/{p}").exists()], timeout)
    record_file().unlink(missing_ok=True)
    return True

"""The warm verl helper process: ``import verl`` once, then validate configs for every submit.

``import verl`` pulls in torch, tensordict, transformers and datasets (6-11 s on a 2-core laptop),
far over the one-second budget of a submit. The first submit that needs verl's validation starts
this helper (``python -m rayjobs.preflight.helper serve SOCKET``, detached), which imports verl once
and answers requests on a private unix socket in ``/tmp/rayjobs-<uid>/`` (a 0700 dir, shared by
every ``$RAYJOBS_HOME`` of one user); later submits get an answer in ~0.1 s per distinct config.
The helper exits by itself after ``$RAYJOBS_PREFLIGHT_IDLE_S`` (900 s) without requests, when its
socket is removed or replaced, or when its code or verl changes (the socket name is keyed by the
interpreter, the verl version and the code of this module and :mod:`rayjobs.preflight.verlcheck`).
The validation itself is :class:`rayjobs.preflight.verlcheck.Validator`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from rayjobs.preflight import verlcheck
from rayjobs.preflight.verlcheck import MODE_ENV, Validator, missing_modules, verl_version

IDLE_ENV = "RAYJOBS_PREFLIGHT_IDLE_S"


def state_dir(create: bool = True) -> Path:
    """A private per-user dir shared by every ``$RAYJOBS_HOME`` (one helper per install, not per home);
    ``create=False`` (a look, as ``rayjobs local status``): made nowhere."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"rayjobs-{os.getuid()}"
    try:
        if create:
            base.mkdir(mode=0o700, exist_ok=True)
        st = base.stat()
        if st.st_uid == os.getuid() and not st.st_mode & 0o077:
            return base
    except OSError:
        pass
    from rayjobs import settings

    return settings.home() / "preflight"


def _exe_key() -> str:
    return hashlib.sha1(sys.executable.encode()).hexdigest()[:6]


def socket_path() -> Path:
    """Keyed by interpreter + verl version + the helper's code, so a changed install gets a fresh helper."""
    parts = [verl_version()]
    for me in (Path(__file__), Path(verlcheck.__file__)):
        st = me.stat()
        parts.append(f"{me}|{st.st_mtime_ns}|{st.st_size}")
    key = hashlib.sha1("|".join(parts).encode()).hexdigest()[:8]
    return state_dir() / f"verl-{_exe_key()}-{key}.sock"


def serve(path: Path) -> None:
    """The helper's main loop: import verl, then answer one request per connection."""
    os.umask(0o077)
    path.parent.mkdir(parents=True, exist_ok=True)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run the cleanup below (workers, socket)
    validator = Validator(state_dir(), workers=min(4, os.cpu_count() or 1))
    try:
        _serve_loop(path, validator)
    finally:
        validator.close()


def _serve_loop(path: Path, validator: Validator) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    srv.bind(str(path))
    srv.listen(16)
    srv.settimeout(5.0)
    ino = path.stat().st_ino
    (path.with_suffix(".pid")).write_text(str(os.getpid()))
    idle = float(os.environ.get(IDLE_ENV, "900"))
    last = time.monotonic()
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            try:
                gone = path.stat().st_ino != ino
            except OSError:
                gone = True
            if gone or time.monotonic() - last > idle:
                break
            continue
        last = time.monotonic()
        with conn:
            try:
                conn.settimeout(60)
                req = json.loads(_recv_line(conn))
                if req.get("op") == "validate":
                    out = {"results": validator.many(req["configs"]), "verl": verl_version()}
                else:
                    out = {"ok": True, "pid": os.getpid(), "verl": verl_version()}
            except Exception as e:  # never die on a bad request
                out = {"error": f"{type(e).__name__}: {e}"[:500]}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(out, default=str).encode() + b"\n")
    with contextlib.suppress(OSError):
        if path.stat().st_ino == ino:
            path.unlink()
    with contextlib.suppress(OSError):
        path.with_suffix(".pid").unlink()


def _recv_line(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        b = conn.recv(1 << 20)
        if not b:
            break
        chunks.append(b)
        if b.endswith(b"\n"):
            break
    return b"".join(chunks)


def _request(path: Path, req: dict, timeout: float) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        s.sendall(json.dumps(req, default=str).encode() + b"\n")
        return json.loads(_recv_line(s))
    finally:
        s.close()


def _start_helper(path: Path, start_timeout: float) -> Optional[str]:
    """Start the helper (one at a time, under a lock) and wait until it answers. None = up."""
    d = path.parent
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError):
            _request(path, {"op": "ping"}, 2.0)
            return None  # someone else started it while we waited for the lock
        for old in d.glob(f"verl-{_exe_key()}-*.sock"):  # this venv's older helpers see their socket go and exit
            if old != path:
                with contextlib.suppress(OSError):
                    old.unlink()
        log = path.with_suffix(".log")
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   VERL_USE_EXTERNAL_PLUGINS="none", PYTHONUNBUFFERED="1")
        with open(log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "rayjobs.preflight.helper", "serve", str(path)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, close_fds=True)
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
                return f"the verl helper exited ({proc.returncode}): {tail[0][:200] if tail else 'no output'}"
            with contextlib.suppress(OSError, ValueError):
                _request(path, {"op": "ping"}, 2.0)
                return None
            time.sleep(0.1)
        return f"the verl helper did not start within {start_timeout:.0f} s (see {log})"


def validate(configs: list[dict], timeout: float = 180.0) -> tuple[Optional[list[list[dict]]], str]:
    """Validate configs with verl. Returns (problems per config, "") or (None, why not)."""
    mode = os.environ.get(MODE_ENV, "auto")
    if mode == "off":
        return None, f"{MODE_ENV}=off"
    missing = missing_modules()
    if missing:
        return None, f"{', '.join(missing)} not installed here"
    if mode == "inprocess":
        v = Validator(state_dir())
        return v.many(configs), ""
    path = socket_path()
    out: dict = {}
    for attempt in range(3):  # a helper may be gone (idle exit, killed) between ping and request
        try:
            out = _request(path, {"op": "validate", "configs": configs}, timeout)
            break
        except (OSError, ValueError) as e:
            if attempt == 2:
                return None, f"the verl helper did not answer: {e}"
            why = _start_helper(path, start_timeout=timeout)
            if why:
                return None, why
    if "error" in out:
        return None, f"the verl helper failed: {out['error']}"
    return out["results"], ""


def stop_helper() -> bool:
    """Stop this install's helper by its PID file (tests, ``rayjobs`` maintenance)."""
    pid_file = socket_path().with_suffix(".pid")
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return False
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(OSError):
        socket_path().unlink()
    with contextlib.suppress(OSError):
        pid_file.unlink()
    return True


# --------------------------------------------------------------------------- status (rayjobs local status)
def _helper_pids() -> list[int]:
    """PIDs of the live warm preflight helpers of this user.

    Read from their PID files and /proc, not by pinging the socket: any request resets the
    helper's idle timer, and a status command must not keep it alive.
    """
    pids = []
    for pid_file in sorted(state_dir(create=False).glob("verl-*.pid")):
        try:
            pid = int(pid_file.read_text())
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue  # gone (a PID file left by a killed helper)
        # The PID may have been reused: it is the helper only if it serves this very socket.
        if state != "Z" and b"rayjobs.preflight.helper" in argv and str(pid_file.with_suffix(".sock")).encode() in argv:
            pids.append(pid)
    return pids


def _kib(pid: int, key: str, name: str) -> int:
    """``key`` (in kB) from /proc/PID/NAME; 0 if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _memory_mb(pid: int) -> int:
    """Memory of the helper and its forked validation workers (PSS: shared pages counted once)."""
    family, kids = [pid], {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                kids.setdefault(int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(p.name))
            except (OSError, ValueError, IndexError):
                continue
    for member in family:
        family.extend(kids.get(member, []))
    kib = sum(_kib(m, "Pss", "smaps_rollup") or _kib(m, "VmRSS", "status") for m in family)
    return round(kib / 1024)


def _idle_s(pid: int) -> str:
    """The idle timeout the helper runs with (its own environment, else verlhelper's default)."""
    try:
        env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv)
    except OSError:
        env = {}
    value: Optional[bytes] = env.get(IDLE_ENV.encode())
    return value.decode(errors="replace") if value else "900"


def status_line() -> str:
    """One line saying whether the warm preflight helper runs (PID, memory, idle timeout)."""
    try:
        pids = _helper_pids()
    except OSError:
        pids = []
    if not pids:
        return "rayjobs: the warm preflight helper is not running"
    each = "; ".join(f"pid {p}, ~{_memory_mb(p)} MB, exits after {_idle_s(p)} s idle" for p in pids)
    return f"rayjobs: the warm preflight helper ({each}) is running"


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m rayjobs.preflight.helper serve SOCKET``: the helper process (started by :func:`validate`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"] and len(argv) == 2:
        serve(Path(argv[1]))
        return 0
    print("usage: python -m rayjobs.preflight.helper serve SOCKET  (the warm helper; started by rayjobs)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""Commands for the embedded local cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import click

from rayjobs.cli.group import main
from rayjobs.errors import ClusterUnreachable, run_cli


@main.group("local")
def local() -> None:
    """The embedded local Ray head (127.0.0.1), used when no cluster is configured."""


def _start() -> str:
    """Start (or reuse) the head; its address once it can accept a job."""
    from rayjobs.client import embedded

    address = embedded.ensure().address
    rec = embedded.running()
    if rec:
        # A head started earlier (or by an older rayjobs) is reused as is: it must accept jobs too,
        # or `local start` would exit 0 in front of a head that refuses every submit.
        try:
            embedded.wait_ready(rec, timeout=10.0)
        except ClusterUnreachable as e:
            raise ClusterUnreachable(f"{e}; run `rayjobs local stop`, then `rayjobs local start`") from e
    return str(address)


@local.command("start")
def local_start() -> None:
    """Start (or reuse) the embedded head; prints its dashboard URL once it accepts jobs."""
    click.echo(run_cli(_start))


@local.command("status")
def local_status() -> None:
    """Print the embedded head's record as JSON (exit 1 if it is not running); the warm preflight
    helper's state goes to stderr."""
    from rayjobs.client import embedded

    rec = embedded.running()
    click.echo(helper_status(), err=True)
    if not rec:
        click.echo("rayjobs: the embedded local cluster is not running", err=True)
        raise SystemExit(1)
    click.echo(json.dumps(rec, indent=2))


@local.command("stop")
def local_stop() -> None:
    """Stop the embedded head by PID (never the `ray` CLI's stop, which ends every Ray on the machine);
    returns once every process of it is gone."""
    from rayjobs.client import embedded

    ok = run_cli(embedded.stop)
    click.echo("rayjobs: embedded local cluster stopped" if ok else "rayjobs: nothing to stop", err=True)


# --------------------------------------------------------------------------- the preflight helper
def _helper_pids() -> list[int]:
    """PIDs of the live warm preflight helpers (:mod:`rayjobs.preflight.helper`) of this user.

    Read from their PID files and /proc, not by pinging the socket: any request resets the
    helper's idle timer, and a status command must not keep it alive.
    """
    from rayjobs.preflight import helper

    pids = []
    for pid_file in sorted(helper.state_dir().glob("verl-*.pid")):
        try:
            pid = int(pid_file.read_text())
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue  # gone (a PID file left by a killed helper)
        # The PID may have been reused: it is the helper only if it serves this very socket.
        if state != "Z" and b"rayjobs.preflight.verlcheck" in argv and str(pid_file.with_suffix(".sock")).encode() in argv:
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
    from rayjobs.preflight.helper import IDLE_ENV

    try:
        env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv)
    except OSError:
        env = {}
    value: Optional[bytes] = env.get(IDLE_ENV.encode())
    return value.decode(errors="replace") if value else "900"


def helper_status() -> str:
    """One line saying whether the warm preflight helper runs (PID, memory, idle timeout)."""
    try:
        pids = _helper_pids()
    except OSError:
        pids = []
    if not pids:
        return "rayjobs: the warm preflight helper is not running"
    each = "; ".join(f"pid {p}, ~{_memory_mb(p)} MB, exits after {_idle_s(p)} s idle" for p in pids)
    return f"rayjobs: the warm preflight helper ({each}) is running"


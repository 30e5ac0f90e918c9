"""Which queue holds a store: a lease on the store, so a second live queue on it is refused in one line.

Two queues on one store would admit each other's jobs and finish each other's records (seen: two
heads given one storage root mixed their jobs; 3 of 5 of one did not succeed). Each cluster has a
store of its own (:func:`rayjobs.oncluster.store.queue_name`); the lease catches the rest: two
live clusters under one name (two ``rayjobs up`` of one name on a team bucket, two embedded heads
of one ``$RAYJOBS_HOME``). ``<store>/lease.json`` names its holder (a token of this queue's own,
its Ray session, host, machine, pid) and a heartbeat the holder writes every :data:`RENEW_S`.

A queue takes the store when no lease is there, when the lease is its own, when its heartbeat is
older than :data:`STALE_S`, or when its holder ran on this machine (same boot, same PID namespace)
and is gone -- a head restarted or a queue actor restarted by Ray takes over at once. A holder on
this machine that still runs (a queue of a Ray session going away) is waited for, at most
:data:`LINGER_S`. Otherwise the queue is refused: :class:`LeaseHeld`, one line. A queue that finds
its lease taken at a heartbeat stops (:meth:`Lease.renew` says so).

The timing: a heartbeat is one small file written every 10 s (on a bucket mount ~8,600 writes a
day); stale after 120 s, twelve missed beats: longer than a bucket mount takes to show one
cluster's write to another (its write-back delay, seconds, plus its cache's change polling, a
minute by default), so a live holder is never taken for a dead one; a head replaced on another
machine waits at most those 2 minutes for its queue, next to the minutes a new machine takes.
Taking the store is a write and a read back (the last writer wins; a loser sees another owner);
on a bucket two takers within one propagation delay may both believe they won until the next
heartbeat, where the loser finds the other's lease and stops.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

from rayjobs.contract.files import read_json, write_json

RENEW_S = 10.0  #: the holder's heartbeat
STALE_S = 120.0  #: a lease without a heartbeat this long is taken over
LINGER_S = 15.0  #: a holder on this machine that still runs is waited for this long (its Ray session going away)
FILE = "lease.json"
_READ_BACK_S = 0.05  #: after taking the store: read it back this much later (a concurrent taker's write shows)


class LeaseHeld(RuntimeError):
    """Another live queue holds the store (one line: whose, and what to do)."""


def machine() -> str:
    """This machine as a lease says it: boot id + PID namespace (a pid means the same process only there)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return f"{boot}:{ns}"


def _start(pid: int) -> Optional[str]:
    """A process's start time (``/proc/PID/stat``), None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def holder_alive(doc: dict[str, Any]) -> bool:
    """Does the lease's holder still run here (same pid, same start time)? Asked only on its machine."""
    pid = int(doc.get("pid") or 0)
    return pid > 0 and _start(pid) == str(doc.get("pid_start") or "")


def verdict(doc: Optional[dict[str, Any]], me: dict[str, Any], now: float,
            alive: Callable[[dict[str, Any]], bool] = holder_alive) -> str:
    """What the lease ``doc`` means to the queue ``me`` (pure): ``free`` (none), ``mine``, ``stale``
    (no heartbeat for its ``stale_after_s``), ``ended`` (its holder ran on this machine and is gone)
    or ``held``."""
    if not doc or not doc.get("owner"):
        return "free"
    if doc["owner"] == me["owner"]:
        return "mine"
    if now - float(doc.get("heartbeat") or 0) > float(doc.get("stale_after_s") or STALE_S):
        return "stale"
    if doc.get("machine") == me["machine"] and not alive(doc):
        return "ended"
    return "held"


def describe(doc: dict[str, Any], now: float) -> str:
    """``the queue of Ray session S on host H (pid N; its heartbeat 3 s ago)``."""
    ago = max(0.0, now - float(doc.get("heartbeat") or now))
    return (f"the queue of Ray session {doc.get('session') or '?'} on {doc.get('host') or '?'} "
            f"(pid {doc.get('pid') or '?'}; its heartbeat {ago:.0f} s ago)")


def refused(root: Path, doc: dict[str, Any], now: float) -> str:
    return (f"the queue store {root} is held by {describe(doc, now)}: two live clusters share this storage root "
            "under one queue name; give this head a name of its own (RAYJOBS_QUEUE_NAME in its environment) "
            f"or stop the other (a lease without a heartbeat for {STALE_S:.0f} s is taken over)")


class Lease:
    """The lease of the queue in this process on the store at ``root`` (its Ray ``session``)."""

    def __init__(self, root: Path, session: str) -> None:
        self.root, self.path = Path(root), Path(root) / FILE
        self.me = {"owner": uuid.uuid4().hex, "session": session, "host": socket.gethostname(),
                   "machine": machine(), "pid": os.getpid(), "pid_start": _start(os.getpid()) or "",
                   "stale_after_s": STALE_S}

    def read(self) -> Optional[dict[str, Any]]:
        doc = read_json(self.path)
        return doc if isinstance(doc, dict) else None

    def _write(self) -> None:
        write_json(self.path, dict(self.me, heartbeat=round(time.time(), 3)))

    def acquire(self, linger_s: float = LINGER_S) -> str:
        """Take the store (how: ``free``, ``mine``, ``stale``, ``ended``); a live holder on this
        machine is waited for at most ``linger_s``.

        Raises:
            LeaseHeld: another live queue holds it (one line).
        """
        deadline = time.monotonic() + linger_s
        for _ in range(1000):  # bounded: a lease it writes but cannot read back, say
            doc = self.read()
            how = verdict(doc, self.me, time.time())
            if how == "held":
                if doc.get("machine") != self.me["machine"] or time.monotonic() >= deadline:  # type: ignore[union-attr]
                    raise LeaseHeld(refused(self.root, doc, time.time()))  # type: ignore[arg-type]
                time.sleep(0.5)
                continue
            self._write()
            time.sleep(_READ_BACK_S)
            back = self.read()
            if back and back.get("owner") == self.me["owner"]:
                return how
        raise LeaseHeld(f"the queue could not take its store {self.root}: its lease file {self.path} does not read "
                        f"back as written (check the storage root)")

    def renew(self) -> bool:
        """The heartbeat: False if another queue has taken the store meanwhile (this one must stop)."""
        doc = self.read()
        if doc and doc.get("owner") != self.me["owner"]:
            return False
        self._write()
        return True


def refusal(root: Path, session: str, linger_s: float = LINGER_S) -> Optional[str]:
    """For the queue's starter: why a queue of Ray session ``session`` could not take the store at
    ``root`` (None: it can, or this session's queue holds it); a live holder on this machine is
    waited for at most ``linger_s``, as :meth:`Lease.acquire` does."""
    me, deadline = {"owner": "", "machine": machine()}, time.monotonic() + linger_s
    while True:
        doc = read_json(Path(root) / FILE)
        if not isinstance(doc, dict) or doc.get("session") == session or verdict(doc, me, time.time()) != "held":
            return None
        if doc.get("machine") != me["machine"] or time.monotonic() >= deadline:
            return refused(Path(root), doc, time.time())
        time.sleep(0.5)

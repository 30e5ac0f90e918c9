"""Clean GPUs between jobs: end what a finished job (or attempt) left running on the cluster's nodes.

An orphaned vLLM engine or Ray worker child of an ended attempt can keep holding a GPU's memory
(ray-project/ray #54364, #23638; NeMo-RL measured ~115 GiB held by one orphan): Ray's own job
cleanup ends the driver's process group and the job's workers, not a child that started its own
session. Every process of a rayjobs job carries ``RAYJOBS_JOB=<job id>``
(:data:`rayjobs.shared.JOB_MARK_ENV`: the runner sets it for the trainer and, for verl, in the
runtime_env of verl's Ray actors, so whatever they spawn inherits it). So on each node:

* :func:`reap_node` finds the processes whose ``/proc/PID/environ`` has exactly that mark (its own
  process and ancestors left out), asks ``nvidia-smi`` (where it is on PATH) how much GPU memory
  each holds, SIGTERMs them, waits a bounded grace, SIGKILLs what is left, then waits (bounded)
  until ``nvidia-smi`` lists none of the job's GPU holders -- nor memory of pids no process here
  has any more (:mod:`rayjobs.oncluster.gpumemory`: Ray often ends a stopped trainer's workers
  before the reap looks, and their memory outlives them) -- and says what it did. GPU holders that
  are no rayjobs job's and not Ray's own are reported, never killed. One reap of a job at a time
  per machine (a lock file): a process is signalled by one reaper, which alone can say how it ended.
* :func:`reap_job` runs that on every alive node as a Ray task (``num_cpus=0``, pinned by a hard
  node affinity), bounded by a timeout, and returns one line per killed process (plus warnings).
  The queue actor calls it (in its pool) before an ended job's GPUs can go to another job; the
  runner can call it between attempts.

No Ray import at module level: the parsing and the per-node part are plain ``/proc`` work.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Optional

from rayjobs.oncluster import gpumemory, reaplock
from rayjobs.oncluster.gpumemory import GONE, gpu_apps, parse_compute_apps  # noqa: F401 (the reaper's names too)
from rayjobs.shared import JOB_MARK_ENV

SWITCH_ENV = "RAYJOBS_REAP"  #: head-side: "0"/"off" leaves an ended job's processes alone
GRACE_S = 3.0  #: SIGTERM -> SIGKILL: an engine gets this long to free its GPU memory itself
KILL_WAIT_S = 2.0  #: after SIGKILL, how long to wait for the kernel to end it
TIMEOUT_S = 30.0  #: reap_job's bound for all nodes together (a busy node's worker start included)
POLL_S = 0.02
GPU_WAIT_ENV = "RAYJOBS_REAP_GPU_WAIT_S"  #: head-side: how long a reap waits for the job's GPU memory to be freed
GPU_WAIT_S = 10.0
_PF_EXITING = 0x4  #: task flag (``/proc/PID/stat`` field 9): the process is in its exit, tearing down
_RAY_BINARIES = ("raylet", "gcs_server", "plasma_store")


def enabled() -> bool:
    """Is reaping on (``RAYJOBS_REAP``, default on)?"""
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def gpu_wait_s() -> float:
    """How long a reap waits on each node for the job's GPU memory to be freed (``RAYJOBS_REAP_GPU_WAIT_S``,
    default 10 s; not a number: the default)."""
    try:
        return max(0.0, float(os.environ.get(GPU_WAIT_ENV) or GPU_WAIT_S))
    except ValueError:
        return GPU_WAIT_S


@dataclass
class Reaped:
    """One process :func:`reap_node` ended (``how``: SIGTERM or SIGKILL; "survived SIGKILL" if the
    kernel did not end it in time), one of the job's whose GPU memory was still listed when the
    reap stopped waiting (``held_s`` set), or, with ``how`` empty, a stray GPU holder it only reports."""

    pid: int
    name: str
    gpu_mib: Optional[int]
    how: str
    node: str = ""
    host: str = ""  #: boot id + PID namespace: several raylets on one machine see the same processes
    held_s: Optional[float] = None  #: still holding GPU memory this long after the reap began

    def kind(self) -> str:
        """``ended``, ``held`` (still holding GPU memory when the reap stopped waiting) or ``stray``."""
        return "held" if self.held_s is not None else ("ended" if self.how else "stray")

    def line(self) -> str:
        """``pid 123 (python3, 5120 MiB GPU) SIGKILL on 10.0.0.2``."""
        gpu = f", {self.gpu_mib} MiB GPU" if self.gpu_mib is not None else ""
        where = f" on {self.node}" if self.node else ""
        if self.held_s is not None:
            mem = f"{self.gpu_mib} MiB GPU" if self.gpu_mib is not None else "GPU memory"
            return f"pid {self.pid} ({self.name}){where} still holds {mem} {self.held_s:g} s after the reap began; admitted anyway"
        if not self.how:
            return (f"warning: pid {self.pid} ({self.name}{gpu}){where} holds a GPU and is no rayjobs job's "
                    f"nor Ray's; left running")
        return f"pid {self.pid} ({self.name}{gpu}) {self.how}{where}"


# --------------------------------------------------------------------------- parsing (pure)
def environ_mark(raw: bytes) -> Optional[str]:
    """The job id of a ``/proc/PID/environ`` (NUL-separated ``NAME=value``), None if unmarked.

    Args:
        raw: the file's bytes.

    Returns:
        The value of ``RAYJOBS_JOB`` (exactly that variable: ``RAYJOBS_JOBX=`` is not it).
    """
    key = JOB_MARK_ENV.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key):].decode("utf-8", "replace")
    return None


def is_ray_own(argv: list[str]) -> bool:
    """Is this command line one of Ray's own processes (raylet, GCS, a ``ray::`` worker, its agents)?"""
    if not argv:
        return False
    if argv[0].startswith("ray::") or os.path.basename(argv[0]) in _RAY_BINARIES:
        return True
    return any("/site-packages/ray/" in a for a in argv[:3])


# --------------------------------------------------------------------------- /proc and nvidia-smi
def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours to read
        return None


def _stat(pid: int) -> Optional[tuple[str, int, str, int]]:
    """(state, parent pid, start time, flags) of a process, None if it is gone."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    rest = raw.rsplit(b")", 1)[-1].split()  # the command name may hold spaces and parentheses
    return rest[0].decode(), int(rest[1]), rest[19].decode(), int(rest[6])


def _exiting(st: tuple[str, int, str, int]) -> bool:
    """A zombie, dead, or tearing down (its memory maps, with its environ, may be gone already)."""
    return st[0] in ("Z", "X", "x") or bool(st[3] & _PF_EXITING)


def _name(pid: int) -> str:
    raw = _read(f"/proc/{pid}/comm")
    return raw.decode("utf-8", "replace").strip() if raw else "?"


def _protected() -> set[int]:
    """This process and its ancestors: never ours to end (the task's worker, raylet, init)."""
    out, pid = set(), os.getpid()
    for _ in range(256):  # bounded: a chain of parents ends at 0
        if pid <= 0 or pid in out:
            break
        out.add(pid)
        st = _stat(pid)
        pid = st[1] if st else 0
    return out


RUNNER_MODULE = b"rayjobs.oncluster.runner"


def _under_a_runner(pid: int) -> bool:
    """Is ``pid`` a live rayjobs runner's descendant (its trainer, or what the trainer still runs)?"""
    for _ in range(256):  # bounded: a chain of parents ends at 0
        st = _stat(pid)
        if st is None or st[1] <= 1:
            return False
        pid = st[1]
        if RUNNER_MODULE in (_read(f"/proc/{pid}/cmdline") or b""):
            return True
    return False


def scan(job_id: str, gpus: dict[int, Optional[int]], spare_live: bool = False) -> tuple[dict[int, str], list[int]]:
    """(the processes marked ``job_id``: pid -> start time, the unmarked GPU holders not Ray's).

    ``spare_live``: leave out what a live runner still runs (the reap at a trainer's Ray exit,
    before its job ended: a trainer may go on without Ray, e.g. uploading its checkpoints).
    """
    skip = _protected()
    mine: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        pid = int(entry)
        raw = _read(f"/proc/{pid}/environ")
        st = _stat(pid)
        if raw is not None and st is not None and st[0] != "Z" and environ_mark(raw) == job_id:
            if not (spare_live and _under_a_runner(pid)):
                mine[pid] = st[2]
    strays = []
    for pid in gpus:
        st = _stat(pid)
        if pid in mine or pid in skip or st is None or _exiting(st):  # one in its exit is no stray: see job_holders
            continue
        raw = _read(f"/proc/{pid}/environ")
        argv = [a.decode("utf-8", "replace") for a in (_read(f"/proc/{pid}/cmdline") or b"").split(b"\0") if a]
        if (raw is None or environ_mark(raw) is None) and not is_ray_own(argv):
            strays.append(pid)
    return mine, strays


def job_holders(job_id: str, gpus: dict[int, Optional[int]], mine: dict[int, str]) -> dict[int, str]:
    """The GPU holders a reap of ``job_id`` waits for (pid -> start time): its marked processes
    (``mine`` and those a live runner still runs), those in their exit whose mark can no longer be
    read, and pids no process here has any more (:data:`~rayjobs.oncluster.gpumemory.GONE`): a
    process's memory outlives it while the driver tears its context down, and Ray often ends a
    trainer's workers itself before a reap looks (a stopped, halved, preempted or failed trainer).
    Whose such a one was cannot be told, but its memory is about to be freed and the next job on
    that GPU needs it; a pid remembered as another PID namespace's is not waited for.
    """
    out, skip, foreign = {}, _protected(), None
    for pid in gpus:
        st = _stat(pid)
        if pid in skip:
            continue
        if st is None:
            foreign = gpumemory.foreign() if foreign is None else foreign
            if pid not in foreign:
                out[pid] = GONE
            continue
        raw = _read(f"/proc/{pid}/environ")
        if pid in mine or (raw and environ_mark(raw) == job_id) or (not raw and _exiting(st)):
            out[pid] = st[2]
    return out


def _start_of(pid: int) -> Optional[str]:
    st = _stat(pid)
    return st[2] if st is not None else None


def _alive(pid: int, start: str) -> bool:
    """Still the same process (not a reused pid), and not a zombie (a zombie holds no memory)."""
    st = _stat(pid)
    return st is not None and st[0] != "Z" and st[2] == start


def _signal_all(pids: Iterable[int], procs: dict[int, str], sig: int) -> list[int]:
    sent = []
    for pid in pids:
        if not _alive(pid, procs[pid]):
            continue
        try:
            os.kill(pid, sig)
            sent.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def _wait_gone(pids: Iterable[int], procs: dict[int, str], seconds: float) -> list[int]:
    """Poll (bounded) until every pid has ended; those still alive."""
    left = list(pids)
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        left = [p for p in left if _alive(p, procs[p])]
    return left


def end_processes(procs: dict[int, str], grace_s: float = GRACE_S) -> dict[int, str]:
    """SIGTERM every process, SIGKILL those left after ``grace_s``: pid -> how it ended.

    Args:
        procs: pid -> start time (from ``/proc/PID/stat``), so a reused pid is never signalled.
        grace_s: seconds between SIGTERM and SIGKILL.

    Returns:
        ``SIGTERM``, ``SIGKILL`` or ``survived SIGKILL``, for the processes this call signalled.
    """
    termed = _signal_all(procs, procs, signal.SIGTERM)
    left = _wait_gone(termed, procs, grace_s)
    how = {p: "SIGTERM" for p in termed if p not in left}
    killed = _signal_all(left, procs, signal.SIGKILL)
    survivors = set(_wait_gone(killed, procs, KILL_WAIT_S))
    how.update({p: "survived SIGKILL" if p in survivors else "SIGKILL" for p in killed})
    return how


def _host_key() -> str:
    boot = (_read("/proc/sys/kernel/random/boot_id") or b"").decode().strip()
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return f"{boot}:{ns}"


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 (called outside Ray: a test, a shell)
        return socket.gethostname()


def _reap_here(job_id: str, grace_s: float, spare_live: bool, wait: float, start: float) -> list[Reaped]:
    gpus = gpu_apps()
    procs, strays = scan(job_id, gpus, spare_live)
    holders = job_holders(job_id, gpus, procs)
    names = {p: _name(p) for p in [*procs, *strays, *holders]}  # before they end: a dead pid has no name
    how = end_processes(procs, grace_s) if procs else {}
    held = gpumemory.wait_freed(holders, wait - (time.monotonic() - start), _start_of) if holders else {}
    if any(holders[p] == GONE for p in held):  # no process here, listed all along: another namespace's
        gpumemory.remember_foreign([p for p in held if holders[p] == GONE], gpu_apps())
    names.update({p: "no process here" for p in held if holders[p] == GONE})
    node, host = _node_ip(), _host_key()
    out = [Reaped(p, names[p], gpus.get(p), h, node, host) for p, h in sorted(how.items())]
    out += [Reaped(p, names[p], mib, "", node, host, wait) for p, mib in sorted(held.items())]
    return out + [Reaped(p, names[p], gpus.get(p), "", node, host) for p in strays]


def reap_node(job_id: str, grace_s: float = GRACE_S, spare_live: bool = False,
              gpu_wait: Optional[float] = None) -> list[dict[str, Any]]:
    """On this node: end the processes marked ``job_id``, wait until their GPU memory is freed;
    report them and the stray GPU holders. One reap of a job at a time per machine: a process is
    signalled by one reaper, the one that can tell how it ended; a reap that waited for another
    reports what that one did.

    Args:
        job_id: the ended job's submission id (the ``RAYJOBS_JOB`` value).
        grace_s: SIGTERM -> SIGKILL.
        spare_live: leave a live runner's descendants alone (see :func:`scan`).
        gpu_wait: the longest the reap waits, from its start, until ``nvidia-smi`` lists none of the
            job's GPU holders (:func:`job_holders`); None: :func:`gpu_wait_s`.

    Returns:
        One :class:`Reaped` (as a dict, for Ray) per process signalled, per GPU holder of the job
        still listed when the wait ended, then per stray GPU holder.
    """
    if not job_id:
        raise ValueError("reap_node needs the ended job's id")
    wait, start = gpu_wait_s() if gpu_wait is None else gpu_wait, time.monotonic()
    with reaplock.ReapLock(job_id, grace_s + KILL_WAIT_S + wait + 5) as lock:  # past the longest a reap takes
        lock.report = lock.earlier + [asdict(r) for r in _reap_here(job_id, grace_s, spare_live, wait, start)]
    return lock.report


# --------------------------------------------------------------------------- every node
_REMOTE: list = []  #: the Ray remote function of reap_node, made once per process


def _remote() -> Any:
    import ray

    if not _REMOTE:
        _REMOTE.append(ray.remote(num_cpus=0, max_retries=0)(reap_node))
    return _REMOTE[0]


def _connect() -> bool:
    """Connect to this cluster if this process is not (a runner); True if it connected now.

    The job config a runner inherits is kept out: this driver is not the job's (the queue counts a
    job's drivers to see whether its trainer still runs), and needs no working_dir.
    """
    import ray

    if ray.is_initialized():
        return False
    saved = os.environ.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    try:
        from ray.job_config import JobConfig

        ray.init(address="auto", logging_level="ERROR", log_to_driver=False, configure_logging=False,
                 job_config=JobConfig(metadata={"rayjobs_role": "reaper"}))
    finally:
        if saved is not None:
            os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = saved
    return True


def merge(per_node: Iterable[list[dict[str, Any]]]) -> list[Reaped]:
    """One entry per process: raylets sharing a machine (tests, benchmarks) all see its processes
    (each says what the reap that held the machine's lock did; SIGKILL wins where one had no lock)."""
    seen: dict[tuple[str, int, str], Reaped] = {}
    for results in per_node:
        for d in results:
            r = Reaped(**d)
            key = (r.host, r.pid, r.kind())
            if key not in seen or (r.how == "SIGKILL" and seen[key].how == "SIGTERM"):
                seen[key] = r
    killed = {(r.host, r.pid) for r in seen.values() if r.kind() != "stray"}
    return [r for r in seen.values() if r.kind() != "stray" or (r.host, r.pid) not in killed]


def reap_job(job_id: str, *, timeout: float = TIMEOUT_S, grace_s: float = GRACE_S,
             spare_live: bool = False) -> list[str]:
    """End what job ``job_id`` left on every alive node; one report line per process killed.

    Call it once the job (or one attempt of it) has ended: from the queue actor, or from a driver
    such as the runner (it connects to the cluster if needed, and disconnects again).

    Args:
        job_id: the ended job's submission id.
        timeout: seconds for every node together; a node that has not answered by then is named
            in a line (``node N: no answer within T s``) and its task cancelled.
        grace_s: SIGTERM -> SIGKILL on each node.
        spare_live: leave what a live runner of the job still runs (its trainer after its Ray exit).

    Returns:
        ``pid 123 (python3, 5120 MiB GPU) SIGKILL on 10.0.0.2`` per process ended, ``pid 123 (python3)
        on 10.0.0.2 still holds 1448 MiB GPU 10 s after the reap began; admitted anyway`` per GPU holder of
        the job that ``nvidia-smi`` still listed when the wait (:func:`gpu_wait_s` on the caller's side,
        within ``timeout``) ended, a ``warning: ...`` per GPU holder that is no rayjobs job's nor Ray's
        (left running), and a ``node ...:`` line per node that did not answer. Empty: nothing was left.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not job_id:
        raise ValueError("reap_job needs the ended job's id")
    connected = _connect()
    try:
        fn, here = _remote(), ray.get_runtime_context().get_node_id()
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        wait = min(gpu_wait_s(), max(0.0, timeout - grace_s - KILL_WAIT_S - 5))  # every node answers in time
        refs = {fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)).remote(
                    job_id, grace_s, spare_live, wait): nid for nid in nodes if nid != here}
        # This node's part runs here, while the tasks run elsewhere: a task needs a worker process,
        # and the queue actor's job (its driver long gone) gets a fresh one each time (~1.6 s here).
        t0 = time.monotonic()
        results, notes = ([reap_node(job_id, grace_s, spare_live, wait)] if here in nodes else []), []
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=max(0.1, timeout - (time.monotonic() - t0)))
        for ref in ready:
            try:
                results.append(ray.get(ref))
            except Exception as e:  # noqa: BLE001 (the node died meanwhile)
                notes.append(f"node {refs[ref][:12]}: reaping failed: {type(e).__name__}: {str(e)[:200]}")
        for ref in late:
            notes.append(f"node {refs[ref][:12]}: no answer within {timeout:g} s; its processes were not checked")
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
        merged = merge(results)
        return [r.line() for kind in ("ended", "held", "stray") for r in merged if r.kind() == kind] + notes
    finally:
        if connected:
            ray.shutdown()

"""The laptop's channel to the cluster-side queue: its requests, carried by small Ray jobs (the Jobs
API is the laptop's only way in) -- queue a submission's jobs (a rerun's with an earlier job's code
snapshot), cancel waiting jobs, revive the queue -- and what it shows, read from its two files in
the head's log dir.

Each request is one Ray job of a rayjobs entrypoint (:mod:`rayjobs.oncluster.enqueue`,
:mod:`rayjobs.oncluster.control`), tagged ``rayjobs_role`` so views leave it out and the queue
deletes it from Ray's table once it ended. A request returns when its job SUCCEEDED, so what it
asked for is on the cluster's disk by then; a failed one is one line naming the cause.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from rayjobs.errors import ClusterUnreachable, SubmitError
from rayjobs.shared import ENQUEUE_KEY, HISTORY_FILE, ROLE_KEY, STATUS_FILE, TERMINAL, pack_jobs

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard

#: How long a request may take: its job starts, runs (a first submit also starts the queue), ends.
REQUEST_TIMEOUT_S = 180.0
#: After queuing, how long to wait for the queue to show the jobs (QUEUED, or already in Ray).
TAKEN_IN_TIMEOUT_S = 30.0
#: The most one enqueue request carries (packed): Ray passes a job's whole config to its entrypoint
#: in one environment variable, which Linux caps at 128 KiB; the rest is headroom for the runtime_env.
MAX_PACKED = 96 * 1024


def _request(d: "Dashboard", role: str, entrypoint: str, runtime_env: Optional[Mapping[str, Any]] = None,
             metadata: Optional[Mapping[str, str]] = None, timeout: float = REQUEST_TIMEOUT_S) -> str:
    """Run one small request job to its end; its id. SubmitError (one line) if it did not succeed."""
    sid = f"rayjobs-{role}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    kwargs: dict[str, Any] = {"entrypoint": entrypoint, "submission_id": sid, "entrypoint_num_cpus": 0,
                              "metadata": {ROLE_KEY: role, **dict(metadata or {})}}
    if runtime_env:
        kwargs["runtime_env"] = dict(runtime_env)
    d.submit(kwargs)
    deadline = time.monotonic() + timeout
    status = "PENDING"
    while time.monotonic() < deadline:
        status = str(d.sdk.get_job_status(sid)).split(".")[-1]
        if status in TERMINAL:
            break
        time.sleep(0.05)
    if status == "SUCCEEDED":
        return sid
    try:  # our own entrypoint: its last line is the exception it died of
        why = next((ln.strip() for ln in reversed(d.logs(sid).splitlines()) if ln.strip()), "")
    except SubmitError:
        why = ""
    if not why:  # no exception in its log (it never ran): Ray's own word on it
        try:
            why = " ".join(str(d.info(sid).message or status).split())[:300]
        except Exception:  # noqa: BLE001
            why = status
    if status not in TERMINAL:
        raise ClusterUnreachable(f"the cluster's queue did not answer within {timeout:.0f} s (request {sid} is "
                                 f"{status}); check `rayjobs cluster` and try again")
    raise SubmitError(f"the cluster's queue refused the request ({role}): {why}; its log: rayjobs logs {sid}")


def enqueue(d: "Dashboard", specs: Sequence[Mapping[str, Any]], runtime_env: Optional[Mapping[str, Any]],
            *, code_of: Optional[str] = None) -> list[str]:
    """Queue jobs (``submit_job`` requests) with the code of ``runtime_env['working_dir']``; their ids.

    ``code_of``: with the durable code snapshot the queue keeps of that job instead (a rerun:
    nothing is uploaded; ``runtime_env`` is ignored). A snapshot that is gone is refused on the
    cluster before anything is queued (SubmitError, its one-line reason).
    Returns once the jobs are on the cluster's disk and the queue shows them (bounded).
    """
    jobs = []
    for s in specs:
        env = {k: v for k, v in dict(s.get("runtime_env") or {}).items() if k != "working_dir"}
        jobs.append(dict(s, runtime_env=env))
    entrypoint = "python3 -m rayjobs.oncluster.enqueue"
    if code_of:
        entrypoint, env = f"{entrypoint} --code-of {shlex.quote(code_of)}", None
    else:
        env = {"working_dir": runtime_env["working_dir"], "excludes": list(runtime_env.get("excludes") or [])}
    packed = _packed_chunks(jobs)
    if len(packed) == 1:
        _request(d, "enqueue", entrypoint, env, {ENQUEUE_KEY: packed[0]})
    else:  # a big sweep: several requests at once (the queue orders by submit time and sweep point)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(4, len(packed))) as pool:
            list(pool.map(lambda p: _request(d, "enqueue", entrypoint, env, {ENQUEUE_KEY: p}), packed))
    ids = [str(s["submission_id"]) for s in specs]
    wait_taken_in(d, ids, TAKEN_IN_TIMEOUT_S)
    return ids


def _packed_chunks(jobs: list[dict[str, Any]]) -> list[str]:
    """The jobs packed into as few metadata values under :data:`MAX_PACKED` as halving finds."""
    packed = pack_jobs(jobs)
    if len(packed) <= MAX_PACKED or len(jobs) == 1:
        return [packed]
    half = len(jobs) // 2
    return _packed_chunks(jobs[:half]) + _packed_chunks(jobs[half:])


def cancel(d: "Dashboard", ids: Sequence[str]) -> None:
    """Ask the queue to drop waiting jobs (they never start), or to stop admitted ones once Ray has them."""
    _request(d, "control", "python3 -m rayjobs.oncluster.control cancel " + " ".join(ids))


def stop_at_checkpoint(d: "Dashboard", ids: Sequence[str], timeout: float) -> None:
    """Ask each running job's runner to stop it once its next checkpoint is saved (at most ``timeout`` s)."""
    _request(d, "control", f"python3 -m rayjobs.oncluster.control stop-at-checkpoint {float(timeout):g} " + " ".join(ids))


def resume(d: "Dashboard", old: str, new: str) -> None:
    """Queue the ended job ``old`` again as ``new`` (same run, its durable code snapshot); returns
    once the queue shows ``new``."""
    _request(d, "control", f"python3 -m rayjobs.oncluster.control resume {old} {new}")
    wait_taken_in(d, [new], TAKEN_IN_TIMEOUT_S)


def revive(d: "Dashboard") -> None:
    """Start the cluster's queue if it is not running (it reloads the backlog from its store)."""
    _request(d, "control", "python3 -m rayjobs.oncluster.control revive")


# --------------------------------------------------------------------------- what the queue shows
#: The head's node id per dashboard address (asked once; forgotten when a file is not there).
_HEAD_IDS: dict[str, str] = {}


def _head_file(d: "Dashboard", name: str, lines: int) -> Optional[bytes]:
    head = _HEAD_IDS.get(d.address)
    if not head:
        head = next((r["node_id"] for r in d.nodes() if r.get("is_head_node")), "")
        if not head:
            return None
        _HEAD_IDS[d.address] = head
    body = d.node_file(head, name, lines)
    if body is None:
        _HEAD_IDS.pop(d.address, None)  # the head may have been replaced
    return body


def read_status(d: "Dashboard") -> Optional[dict[str, Any]]:
    """The queue's status document (waiting and admitted jobs); None if there is none: the queue
    has not run in this Ray session (a fresh cluster, or the head's Ray restarted)."""
    try:
        body = _head_file(d, STATUS_FILE, 2)
        text = body.decode(errors="replace").strip().splitlines() if body else []
        return json.loads(text[-1]) if text else None
    except Exception:  # noqa: BLE001  (a view must not fail on the queue's file)
        return None


def read_history(d: "Dashboard") -> dict[str, dict[str, Any]]:
    """Every finished job the queue remembers, by id (the newest line of an id wins)."""
    try:
        body = _head_file(d, HISTORY_FILE, -1)
    except Exception:  # noqa: BLE001
        return {}
    out: dict[str, dict[str, Any]] = {}
    for line in (body or b"").decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        out[str(row.get("id"))] = row
    return out


def wait_taken_in(d: "Dashboard", ids: Sequence[str], timeout: float) -> None:
    """Wait (bounded) until the queue shows every id: waiting, admitted, or finished.

    An admitted job counts before the queue has handed it to Ray: its record is durable and every
    view knows it (``PENDING``); waiting for Ray's own submit of each point made a 50-point sweep's
    submit take 21.6 s (10.98 s without that wait)."""
    deadline = time.monotonic() + timeout
    left = set(ids)
    history_at = time.monotonic()
    while left and time.monotonic() < deadline:
        doc = read_status(d) or {}
        seen = {e["id"] for e in doc.get("queue", [])} | {e["id"] for e in doc.get("admitted", [])}
        left -= seen
        if left and time.monotonic() - history_at > 1.0:  # ended already? (the history may be long)
            history_at = time.monotonic()
            left -= set(read_history(d))
        if left:
            time.sleep(0.05)
    if left:
        raise ClusterUnreachable(f"the jobs were queued on the cluster, but its queue has not shown "
                                 f"{len(left)} of them within {timeout:.0f} s ({sorted(left)[0]}, ...); "
                                 f"check `rayjobs list` in a moment")


def ensure_queue(d: "Dashboard") -> Optional[dict[str, Any]]:
    """The status document, reviving the queue first if it has not run in this Ray session."""
    doc = read_status(d)
    if doc is None:
        revive(d)
        deadline = time.monotonic() + 30
        while doc is None and time.monotonic() < deadline:
            time.sleep(0.1)
            doc = read_status(d)
    return doc

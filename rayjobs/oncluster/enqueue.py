"""``python3 -m rayjobs.oncluster.enqueue``: put a submission's jobs into the durable queue.

The laptop reaches the cluster only through the Jobs API, so a submit is one small Ray job of this
entrypoint (one per ``python -m rayjobs.submit``, a whole sweep included). Ray unpacks the user's
working_dir for it, as for any job; this keeps a durable copy of that code in the queue's store
(once per content hash), writes one record per job (its exact submit request, its place in line)
and leaves the queue a marker. The laptop returns when this job has SUCCEEDED: the backlog is on
disk before the submit returns. Then the queue (:mod:`rayjobs.oncluster.queueactor`) submits each
job to Ray under the id the user already has, when it fits.

It imports no Ray unless the queue is not running (its heartbeat is stale): then it starts it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from rayjobs.oncluster.store import WAITING, QueueStore
from rayjobs.shared import CODE_OF_KEY, ENQUEUE_KEY, stamp, unpack_jobs

#: The queue's heartbeat is fresh for this long (it rewrites it every second).
SERVICE_FRESH_S = 10.0


def job_config() -> dict[str, Any]:
    """This Ray job's config as Ray hands it to the entrypoint (runtime_env, metadata)."""
    try:
        return dict(json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")))
    except ValueError:
        return {}


def code_key(runtime_env: dict[str, Any]) -> str:
    """The content hash Ray gave the working_dir package (``gcs://_ray_pkg_<hash>.zip`` -> ``<hash>``)."""
    uri = str(runtime_env.get("working_dir") or "")
    name = uri.rsplit("/", 1)[-1]
    for prefix, suffix in (("_ray_pkg_", ".zip"),):
        if name.startswith(prefix) and name.endswith(suffix):
            return name[len(prefix):-len(suffix)]
    return ""


def record(spec: dict[str, Any], code: str, now: float) -> dict[str, Any]:
    """A waiting job's record, from one ``submit_job`` request (its ``working_dir`` is ``code``)."""
    meta = dict(spec.get("metadata") or {})
    return {"id": spec["submission_id"], "state": WAITING, "spec": spec, "code": code, "queued_at": now,
            "priority": _int(meta.get("priority")), "submitted_at": meta.get("submitted_at", ""),
            "max_retries": _int(meta.get("max_retries")), "attempts": 0, "lost": 0, "history": []}


def _int(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def main(argv: Optional[list[str]] = None) -> int:
    """``enqueue``: queue the jobs with the code Ray unpacked for this job; ``enqueue --code-of ID``:
    with the durable snapshot of job ID's code instead (a rerun: no upload, the old code), or of
    the job a spec's own metadata names (``code_of``: each evaluation with its point's code)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and (argv[0] != "--code-of" or len(argv) != 2):
        print("usage: python3 -m rayjobs.oncluster.enqueue [--code-of JOB_ID]", file=sys.stderr)
        return 2
    cfg = job_config()
    try:
        specs = unpack_jobs((cfg.get("metadata") or {}).get(ENQUEUE_KEY, ""))
    except (ValueError, TypeError):
        specs = []
    if not specs:
        print("[rayjobs] enqueue: this job carries no jobs to queue", file=sys.stderr)
        return 2
    store = QueueStore()
    try:
        specs = resolve_after(store, specs)
        keys = snapshot_keys(store, specs, argv[1]) if argv else {}
    except LookupError as e:  # the laptop shows this last line as the reason: nothing is queued
        print(e, file=sys.stderr, flush=True)
        return 2
    if argv:
        queued = _put_new(store, specs, lambda spec: keys[code_source(spec, argv[1])], announce=False)
        gone = sorted({src for src, key in keys.items() if not store.code_dir(key).is_dir()})
        if gone:
            # The queue's pruning may have read the records just before these were written and taken a
            # snapshot meanwhile: take them back before the queue is told of them (nothing queued).
            for sid in queued:
                store.remove(sid)
            print(f"the code snapshot of {gone[0]} was removed while queuing (its retention ended): "
                  f"submit it again from its source", file=sys.stderr, flush=True)
            return 2
        for sid in queued:
            store.announce(sid)
        code = ", ".join(str(store.code_dir(k)) for k in dict.fromkeys(keys.values()))
    else:
        key = code_key(dict(cfg.get("runtime_env") or {})) or f"nohash-{int(time.time() * 1000)}"
        code = str(store.keep_code(key, Path.cwd()))
        queued = _put_new(store, specs, lambda spec: key, announce=True)
    print(f"[rayjobs] queued {len(queued)} job(s) at {stamp(time.time())} (code {code})", flush=True)
    if not service_alive(store):
        start_service()
    return 0


def code_source(spec: dict[str, Any], default: str) -> str:
    """The job whose code snapshot ``spec`` runs: its metadata's ``code_of``, else ``default``."""
    return str((spec.get("metadata") or {}).get(CODE_OF_KEY) or default)


def snapshot_keys(store: QueueStore, specs: list[dict[str, Any]], default: str) -> dict[str, str]:
    """{source job: its snapshot's code key} for every spec (:func:`code_source`), all looked up
    before anything is written.

    Raises:
        LookupError: one line -- a source job the queue does not know, or whose snapshot is gone.
    """
    keys: dict[str, str] = {}
    for spec in specs:
        src = code_source(spec, default)
        if src not in keys:
            keys[src] = store.code_of(src)
    return keys


def resolve_after(store: QueueStore, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each job's ``after`` (the ids typed with ``rayjobs.after``) as the job ids the queue knows: an
    id (or the unique start of one), or a sweep id standing for all its points.

    Raises:
        LookupError: one line naming an id that is no job or sweep of this queue (nothing is queued).
    """
    wanted = {t for spec in specs for t in json.loads((spec.get("metadata") or {}).get("after") or "[]")}
    if not wanted:
        return specs
    records = store.all()
    sweeps: dict[str, list[str]] = {}
    for rid, rec in records.items():
        sw = ((rec.get("spec") or {}).get("metadata") or {}).get("sweep")
        if sw:
            sweeps.setdefault(sw, []).append(rid)
    out = []
    for spec in specs:
        meta = dict(spec.get("metadata") or {})
        if meta.get("after"):
            ids: list[str] = []
            for token in json.loads(meta["after"]):
                ids += _resolve_one(token, records, sweeps)
            meta["after"] = json.dumps(sorted(dict.fromkeys(ids)))
        out.append(dict(spec, metadata=meta))
    return out


def _resolve_one(token: str, records: dict[str, Any], sweeps: dict[str, list[str]]) -> list[str]:
    if token in records:
        return [token]
    if token in sweeps:
        return sorted(sweeps[token])
    hits = [i for i in records if i.startswith(token)]
    if len(hits) == 1:
        return hits
    import difflib

    close = difflib.get_close_matches(token, list(records) + list(sweeps), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    what = f"matches {len(hits)} jobs" if hits else "is no job or sweep of this cluster's queue"
    raise LookupError(f"rayjobs.after={token}: {what}{hint}; `rayjobs list` shows the ids")


def _put_new(store: QueueStore, specs: list[dict[str, Any]], key_of: Callable[[dict[str, Any]], str], *,
             announce: bool) -> list[str]:
    """Write a waiting record of each job not in the store yet (a retried request queues it once);
    their ids. ``key_of``: a spec's code key. ``announce``: tell the queue of each at once, else the caller does
    (:meth:`QueueStore.announce`) once it knows the code is still there."""
    now = time.time()
    queued = []
    for spec in specs:
        if store.exists(spec["submission_id"]):
            continue
        store.put(record(spec, key_of(spec), now), new=announce)
        queued.append(spec["submission_id"])
    return queued


def service_alive(store: QueueStore) -> bool:
    """Is the queue running (its heartbeat file fresh)?"""
    try:
        beat = json.loads((store.root / "service.json").read_text())
        return time.time() - float(beat.get("at", 0)) < SERVICE_FRESH_S
    except (OSError, ValueError):
        return False


def start_service() -> None:
    """Start the queue actor on this cluster (it is named: one per cluster, created once)."""
    from rayjobs.oncluster import queueactor

    queueactor.ensure_running()
    print("[rayjobs] started the queue", flush=True)


if __name__ == "__main__":
    sys.exit(main())

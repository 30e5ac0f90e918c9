"""``python3 -m rayjobs.oncluster.control (cancel ID... | stop-at-checkpoint T ID... | revive)``: the laptop's requests to the queue.

Like :mod:`rayjobs.oncluster.enqueue`, a tiny Ray job (the Jobs API is the laptop's only way in).
``cancel`` leaves a request in the store for each job to stop (the queue drops a waiting one within a
tick: it never starts; it stops a running one through Ray: it ends, even if it was being preempted);
``stop-at-checkpoint`` leaves one in each running job's run dir, which its runner acts on
(:mod:`rayjobs.oncluster.checkpointwatch`), and tells the queue that the job ends there; ``resume`` queues an ended job's
record again under a new id (same run, same code snapshot); ``revive`` starts the queue if it is not running (after the head's Ray was
restarted by hand, say) -- the queue then reloads the backlog from the store.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

from rayjobs.oncluster.checkpointwatch import ask_stop
from rayjobs.oncluster.enqueue import service_alive, start_service
from rayjobs.oncluster.store import QueueStore


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    store = QueueStore()
    if argv[:1] == ["cancel"] and len(argv) > 1:
        for job_id in argv[1:]:
            store.request("cancel", job_id)
        print(f"[rayjobs] asked the queue to cancel {len(argv) - 1} job(s)", flush=True)
        if not service_alive(store):
            start_service()
        return 0
    if argv[:1] == ["stop-at-checkpoint"] and len(argv) > 2:
        return stop_at_checkpoint(store, float(argv[1]), argv[2:])
    if argv[:1] == ["resume"] and len(argv) == 3:
        return resume(store, argv[1], argv[2])
    if argv == ["revive"]:  # asked because the laptop saw no queue in this Ray session: no shortcut
        start_service()
        return 0
    print("usage: python3 -m rayjobs.oncluster.control (cancel ID... | stop-at-checkpoint TIMEOUT_S ID... | "
          "resume OLD NEW | revive)",
          file=sys.stderr)
    return 2


def resume(store: QueueStore, old: str, new: str) -> int:
    """Queue ``old``'s exact submit request and code snapshot again as job ``new``: the same run name
    and checkpoint dir, so verl resumes from its last checkpoint (``resume_mode=auto``) and the
    runner counts the next attempt. Idempotent (a retried request queues ``new`` once)."""
    import datetime

    from rayjobs.oncluster.enqueue import record
    from rayjobs.oncluster.store import DONE

    rec = store.get(old)
    if rec is None:
        raise SystemExit(f"the queue has no record of {old} (it was not submitted through rayjobs on this cluster)")
    if rec.get("state") != DONE:
        raise SystemExit(f"{old} has not ended ({rec.get('state')}): stop it first")
    if not store.code_dir(str(rec.get("code"))).is_dir():
        raise SystemExit(f"the code snapshot of {old} is gone (kept RAYJOBS_CODE_RETENTION_S after a job ends): submit it again")
    if not store.exists(new):
        now = time.time()
        meta = dict(rec["spec"].get("metadata") or {}, resumed_from=old,
                    submitted_at=datetime.datetime.fromtimestamp(now).astimezone().isoformat(timespec="milliseconds"))
        spec = dict(rec["spec"], submission_id=new, metadata=meta)
        store.put(record(spec, str(rec["code"]), now), new=True)
    print(f"[rayjobs] queued {new}: {old} resumed from its last checkpoint", flush=True)
    if not service_alive(store):
        start_service()
    return 0


def stop_at_checkpoint(store: QueueStore, timeout_s: float, ids: list[str]) -> int:
    """Leave each job's runner the request (in its run dir, from the job's record in the store)."""
    missing = []
    for job_id in ids:
        rec = store.get(job_id) or {}
        run_dir = ((rec.get("spec") or {}).get("metadata") or {}).get("run_dir")
        if run_dir:
            ask_stop(Path(run_dir), job_id, timeout_s)
            store.request("stopping", job_id)  # it ends at that checkpoint, even if a preemption was stopping it too
        else:
            missing.append(job_id)
    if missing:
        raise SystemExit(f"the queue has no record with a run dir of {', '.join(missing)}: stop it without --at-checkpoint")
    print(f"[rayjobs] asked {len(ids)} job(s) to stop at their next checkpoint (at most {timeout_s:g} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python3 -m rayjobs.oncluster.control (cancel ID... | revive)``: the laptop's requests to the queue.

Like :mod:`rayjobs.oncluster.enqueue`, a tiny Ray job (the Jobs API is the laptop's only way in).
``cancel`` leaves a request in the store for each waiting job to stop (the queue drops it within a
tick; it never starts); ``revive`` starts the queue if it is not running (after the head's Ray was
restarted by hand, say) -- the queue then reloads the backlog from the store.
"""

from __future__ import annotations

import sys
from typing import Optional

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
    if argv == ["revive"]:  # asked because the laptop saw no queue in this Ray session: no shortcut
        start_service()
        return 0
    print("usage: python3 -m rayjobs.oncluster.control (cancel ID... | revive)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""The job list's encoded answers, kept while the queue has not changed: a hundred teammates
listing an unchanged queue cost one encoding of every job's view, not a hundred (issue 47 item 7:
encoding the list was the door's first own cost under load).

A list's views are built from the queue service's memory only: the records (counted by
:class:`~rayjobs.oncluster.queueservice.Records`), the line and the admitted jobs
(``state.version``), the last decision (a new object each pass), and what each admitted or ending
job's entry says of Ray (its record, ``in_ray``, Ray's status, start, node, message, ``ended``...),
which :func:`queue_key` reads as it is. A queue whose records are a plain dict (no ``version``) is
never cached.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional

#: Distinct queries kept per state of the queue (filters, pages): the oldest goes first.
KEEP_QUERIES = 16


def _entry(job_id: str, r: Any) -> tuple:
    ray = r.ray or {}
    return (job_id, r.rec, r.in_ray, r.preempting_for, r.ended, r.stop_asked,
            ray.get("status"), ray.get("start_time"), ray.get("driver_node_id"), ray.get("message"))


def queue_key(svc: Any) -> Optional[tuple]:
    """What every job's view is built from, as a key that changes whenever one view may; None
    when the queue cannot say (its records count no changes)."""
    version = getattr(svc.records, "version", None)
    if version is None:
        return None
    st = svc.state
    moving = tuple(_entry(i, r) for part in (st.running, st.ending) for i, r in part.items())
    # the objects themselves, not their id(): the kept key holds them, so a new one is never taken
    # for an old one whose memory it reuses (equal ones compare by identity first: cheap)
    return (st.version, version, len(svc.records), svc.decision, moving, tuple(svc.store.unreadable))


class ListCache:
    """Encoded list answers for one state of the queue, by query."""

    def __init__(self) -> None:
        self.key: Optional[tuple] = None
        self.bodies: dict[Hashable, bytes] = {}
        self.encoded = 0  #: bodies encoded (tests count them)

    def body(self, svc: Any, query: Hashable, build: Callable[[], Any], encode: Callable[[Any], bytes]) -> bytes:
        """The list's body for ``query``: kept from an earlier request while the queue is unchanged,
        else ``encode(build())`` (and kept)."""
        key = queue_key(svc)
        if key is None or key != self.key:
            self.key, self.bodies = key, {}
        got = self.bodies.get(query)
        if got is None:
            got = encode(build())
            self.encoded += 1
            if key is not None:
                if len(self.bodies) >= KEEP_QUERIES:
                    self.bodies.pop(next(iter(self.bodies)))
                self.bodies[query] = got
        return got

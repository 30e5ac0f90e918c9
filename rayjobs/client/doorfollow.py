"""A job's log followed through the door (``GET /v1/jobs/{id}/log/stream?offset=``): what ``rayjobs
tail`` and ``logs -f`` read on a laptop that reaches the cluster by its door only.

The same shape as :class:`rayjobs.client.logstream.LogFollower` (bytes, each once and in order, and
``None`` heartbeats; ``status``, ``job``, ``seen``, ``tail``, ``quiet_s``, ``close``). One thread reads
the stream; a stream the server ends (the job is over and its log read, or its 10-minute bound) is
resumed at the byte offset got so far, unless the job is over. Bounded: at most
:data:`MAX_STREAMS` streams, and a door that does not answer for ``outage_s`` seconds ends it in one
line (:class:`~rayjobs.errors.ClusterUnreachable`).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator, Optional

from rayjobs.errors import ClusterUnreachable, RayjobsError
from rayjobs.shared import TERMINAL

#: The most streams one follow opens (each lasts up to 10 minutes, or ends with the job).
MAX_STREAMS = 10_000
_END = object()


class DoorFollower:
    """Follow ``job_id``'s log through ``door`` (a :class:`~rayjobs.client.door.Door`) until the job is
    over and its log read; ``start``: the bytes already delivered (a resumed run appends)."""

    def __init__(self, door: Any, job_id: str, *, interval: float = 0.05, status_every: float = 0.5,
                 outage_s: float = 300.0, tick: float = 0.1, say: Optional[Callable[[str], None]] = None,
                 start: int = 0) -> None:
        self.door, self.job_id, self.tick = door, job_id, tick
        self.status_every, self.outage_s = status_every, outage_s
        self.job: dict[str, Any] = {}
        self.seen = start
        self.tail = bytearray()
        self.reconnects = 0
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=256)
        self._stop = threading.Event()
        self._last_data_at = time.monotonic()
        self._polled_at = 0.0
        self._thread: Optional[threading.Thread] = None

    @property
    def status(self) -> str:
        return str(self.job.get("status", "?"))

    def quiet_s(self) -> float:
        return time.monotonic() - self._last_data_at

    def close(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        """The job's view now (the queue's), at most every ``status_every`` s."""
        if time.monotonic() - self._polled_at >= self.status_every:
            self._polled_at = time.monotonic()
            self.job = self.door.job(self.job_id) or self.job

    def __iter__(self) -> Iterator[Optional[bytes]]:
        self._last_data_at = time.monotonic()
        self._poll()
        self._thread = threading.Thread(target=self._read, daemon=True, name="rayjobs-door-log")
        self._thread.start()
        try:
            while True:
                try:
                    item = self._q.get(timeout=self.tick)
                except queue.Empty:
                    item = None
                if item is _END:
                    self._polled_at = 0.0
                    self._poll()
                    return
                if isinstance(item, BaseException):
                    raise item
                if item:
                    self._last_data_at = time.monotonic()
                    self.tail += item[-65536:]
                    del self.tail[:-65536]
                    yield item
                    continue
                self._poll()
                yield None
        finally:
            self.close()

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _read(self) -> None:
        """Streams from the offset got so far until the job is over and a stream ended (bounded)."""
        down_since: Optional[float] = None
        try:
            for _ in range(MAX_STREAMS):
                try:
                    # over before this stream opened: the server reads its log to the end, so this is the last
                    # stream (asked after a stream, bytes written just before the end could be left unread)
                    over = str((self.door.job(self.job_id) or {}).get("status")) in TERMINAL
                    for chunk in self.door.follow(self.job_id, self.seen):
                        if self._stop.is_set():
                            return
                        self.seen += len(chunk)
                        self._put(chunk)
                    down_since = None
                    if over:
                        break
                except ClusterUnreachable as e:
                    if "does not answer" not in str(e) and "broke off" not in str(e):
                        raise  # a refusal (401/403): not an outage
                    down_since = down_since or time.monotonic()
                    if time.monotonic() - down_since > self.outage_s:
                        raise ClusterUnreachable(f"the door did not answer for {self.outage_s:.0f} s while "
                                                 f"following {self.job_id}: {e}") from None
                self.reconnects += 1
                if self._stop.wait(0.2):  # a stream that ended at once is not asked again in a loop
                    return
        except RayjobsError as e:
            self._put(e)
            return
        self._put(_END)

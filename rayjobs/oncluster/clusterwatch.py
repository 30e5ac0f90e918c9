"""The queue's reading of the cluster, off the event loop: a thread of its own keeps the newest
:class:`~rayjobs.oncluster.clusterstate.Observed` for the running set the tick hands it.

The door and the queue's tick share one event loop (:mod:`rayjobs.door.host`); a reading of Ray's
GCS there (what is free per node, the placement groups, each running job's drivers) blocked every
request behind it, and under load the tick waited behind the requests (issue 47 item 7). Now the
tick *asks* (:meth:`ClusterWatch.ask`: a copy of what the reader needs of each running job) and
uses the newest reading (:meth:`ClusterWatch.newest`); the thread reads at once when the running set
changed, else every :data:`READ_EVERY_S` (:data:`FAST_EVERY_S` just after a job ended, and for
:data:`MOVED_S` after the cluster moved: GPUs freed a moment before the trainer's drivers are marked
dead) while the tick keeps asking, and wakes the loop when a reading says something new.

Why a reading may be older than the tick that uses it, and still safe: a reading is one consistent
look (free GPUs and what each job placed, taken together); the queue drops a running job's
reservation only on a reading that saw its placement groups (and so counts them used) or when the
job ends (an older reading still counts what it held). A reading can thus under-state what is free,
never over-state it. Each reading names the running entries it was read for, and the tick applies a
job's part only to that same entry (a job ended and admitted again is not marked placed by a
reading of its last run), newest reading first and never an older one after it.

:class:`Inline` reads on the caller's thread: the fast tier's fake clusters (no Ray, no thread).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from rayjobs.oncluster.clusterstate import Observed

READ_EVERY_S = 0.05  #: while jobs wait, a reading this often (and at once when the running set moved)
FAST_EVERY_S = 0.02  #: the same, just after a job ended (the tick says so) or the cluster moved
MOVED_S = 1.0  #: after a reading that differed from the one before, this long at the fast cadence
LINGER_S = 1.0  #: the thread reads on this long after the tick last asked, then sleeps until asked


@dataclass(frozen=True)
class JobLook:
    """What the reader needs of one running job, copied on the loop's thread (the reader never
    touches the queue's own entries): the entry itself only names which one it was."""

    of: Any
    req: Any
    unplaced: tuple
    in_ray: bool
    ending: bool


@dataclass(frozen=True)
class Reading:
    """One reading: ``n`` counts readings (1, 2, ...), ``asked`` the ask it was read after,
    ``of`` the running entries it was read for (job id -> entry), ``at`` when it began (epoch s)."""

    n: int
    asked: int
    seen: Observed
    of: Mapping[str, Any] = field(default_factory=dict)
    at: float = 0.0

    def read_for(self, job_id: str, entry: Any) -> bool:
        """Whether this reading's part of ``job_id`` was read for that very entry."""
        return self.of.get(job_id) is entry


class Inline:
    """A reading on the caller's thread at every ask (the fast tier's fake clusters)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self._newest: Optional[Reading] = None

    def start(self, wake: Callable[[], None]) -> None:
        """Nothing to start."""

    def ask(self, running: Mapping[str, Any], fast: bool = False) -> None:
        """Read now, for these running jobs."""
        n = (self._newest.n if self._newest else 0) + 1
        at = time.time()
        self._newest = Reading(n, n, self.reader.observe(running), dict(running), at)

    def newest(self) -> Optional[Reading]:
        return self._newest


class ClusterWatch:
    """The reader in a thread of its own (``rayjobs-cluster``); :meth:`start` it on the loop, with
    how to wake the loop from the thread."""

    def __init__(self, reader: Any, every_s: float = READ_EVERY_S, fast_s: float = FAST_EVERY_S,
                 linger_s: float = LINGER_S, note: Callable[[str, str], None] = lambda what, why: None) -> None:
        self.reader, self.every_s, self.fast_s, self.linger_s, self.note = reader, every_s, fast_s, linger_s, note
        self._cv = threading.Condition()
        self._asks, self._key, self._looks = 0, None, {}
        self._asked_at, self._fast = float("-inf"), False
        self._moved_until = float("-inf")  #: (monotonic) read at the fast cadence until then
        self._newest: Optional[Reading] = None
        self._wake: Callable[[], None] = lambda: None
        self._thread: Optional[threading.Thread] = None
        self.reads = 0  #: readings taken (tests, benchmarks)

    def start(self, wake: Callable[[], None]) -> None:
        """Start the thread (once); ``wake`` is called from it when a reading says something new."""
        self._wake = wake
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="rayjobs-cluster", daemon=True)
            self._thread.start()

    def ask(self, running: Mapping[str, Any], fast: bool = False) -> None:
        """The tick wants readings for these running jobs (read at once if they moved)."""
        looks = {i: JobLook(r, r.req, tuple(r.unplaced), bool(r.in_ray), bool(r.ending)) for i, r in running.items()}
        key = tuple((i, id(k.of), k.unplaced, k.in_ray, k.ending) for i, k in looks.items())
        with self._cv:
            if key != self._key:
                self._key, self._looks, self._asks = key, looks, self._asks + 1
            self._asked_at, self._fast = time.monotonic(), fast
            self._cv.notify()
        if self._thread is not None and not self._thread.is_alive():  # never left without readings
            self.note("cluster reader restarted", "")
            self.start(self._wake)

    def newest(self) -> Optional[Reading]:
        return self._newest

    def _next(self, done: int, read_at: float) -> tuple[int, dict[str, JobLook]]:
        """Wait until a reading is due: a new ask, or the cadence while the tick keeps asking."""
        with self._cv:
            while True:
                now = time.monotonic()
                if self._asks > done:
                    break
                if now - self._asked_at > self.linger_s:
                    self._cv.wait()
                    continue
                fast = self._fast or now < self._moved_until
                due = read_at + (self.fast_s if fast else self.every_s) - now
                if due <= 0:
                    break
                self._cv.wait(due)
            return self._asks, dict(self._looks)

    def _run(self) -> None:
        done, read_at = 0, float("-inf")
        while True:
            asked, looks = self._next(done, read_at)
            read_at, at = time.monotonic(), time.time()
            try:
                seen = self.reader.observe(looks)
            except Exception as e:  # noqa: BLE001 (the GCS did not answer: the next reading tries again)
                self.note("cluster not read", f"{type(e).__name__}: {e}"[:300])
                done = asked
                continue
            self.reads += 1
            last = self._newest
            self._newest = Reading((last.n if last else 0) + 1, asked, seen, {i: k.of for i, k in looks.items()}, at)
            moved = last is None or seen != last.seen
            if moved:
                self._moved_until = time.monotonic() + MOVED_S
            if moved or asked != done:
                try:
                    self._wake()
                except Exception:  # noqa: BLE001 (the loop is closing)
                    pass
            done = asked

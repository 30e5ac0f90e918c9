"""Fetch and follow a job's driver log over the dashboard's HTTP log API, exactly once per byte.

Why not Ray's own tail: ``JobSubmissionClient.tail_job_logs`` (the websocket behind
``ray job logs -f``) polls the file once a second and delivers lines 1.4-1.6 s late, and it ends
(or raises) when the dashboard restarts. Ray 2.60's state API has a follow mode of its own:
``GET /api/v0/logs/stream?submission_id=ID&node_id=N&lines=-1&interval=S`` streams the file from
byte 0 and then re-reads it every ``S`` seconds (``log_agent.StreamLog`` with ``keep_alive``),
so with ``interval=0.05`` a line arrives in tens of milliseconds, in order, over one HTTP
connection, with constant memory on both sides.

That API has no byte-offset parameter for job logs (the agent's gRPC has ``start_offset``, the
HTTP handler does not pass it), so a broken stream is resumed exactly by re-streaming the file
from byte 0 and discarding the bytes already delivered (:class:`LogFollower`). The end of a
finished job's log is checked against ``/api/v0/logs/file?lines=K`` (the file's last K lines).

Every request carries the same bearer token as the Jobs SDK and has a connect timeout; every
loop is bounded in time (``outage_s``) or by the job reaching a terminal state.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from rayjobs.client.dashboard import LOG_STREAM, Dashboard, DashboardDown, short_reason
from rayjobs.errors import ClusterUnreachable, RayjobsError
from rayjobs.shared import TERMINAL


@dataclass
class _FollowState:
    """What :meth:`LogFollower._run` keeps between turns of its loop."""

    last_data: float
    was_down: Optional[float] = None  #: when the outage in progress began
    outage_seen: bool = False
    terminal_at: Optional[float] = None  #: when the job was first seen ended
    failures: int = 0  #: broken streams in a row
    failing_since: float = 0.0
    retry_at: float = 0.0
    checks: int = 0  #: end-of-log checks made


class _Broken:
    def __init__(self, why: str) -> None:
        self.why = why


class _Reader(threading.Thread):
    """One follow connection; pushes chunks into a bounded queue (backpressure = flat memory)."""

    def __init__(self, dash: Dashboard, params: dict[str, Any], skip: int, qsize: int = 256) -> None:
        super().__init__(daemon=True, name="rayjobs-log-reader")
        self.dash, self.params, self.skip = dash, params, skip
        self.q: queue.Queue = queue.Queue(maxsize=qsize)
        self.stopped = threading.Event()
        self.resp: Any = None
        self.delivered = 0

    def run(self) -> None:
        try:
            # No read timeout: a quiet job sends nothing for hours; a dead dashboard closes the socket.
            r = self.resp = self.dash.get(LOG_STREAM, self.params, stream=True, read_timeout=None)
            if self.stopped.is_set():
                r.close()
                return
            if r.status_code != 200:
                self._put(_Broken(f"HTTP {r.status_code}: {' '.join(r.text.split())[:160]}"))
                return
            skip = self.skip
            for chunk in r.iter_content(chunk_size=None):
                if self.stopped.is_set():
                    return
                if skip:
                    if len(chunk) <= skip:
                        skip -= len(chunk)
                        continue
                    chunk, skip = chunk[skip:], 0
                if chunk:
                    self.delivered += len(chunk)
                    self._put(chunk)
            self._put(_Broken("the log stream ended"))
        except Exception as e:  # connection reset, dashboard gone, auth...
            if not self.stopped.is_set():
                self._put(_Broken(short_reason(e)))

    def _put(self, item: Any) -> None:
        while not self.stopped.is_set():
            try:
                self.q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Stop: shut the socket down (closing the response from here would block on its read lock)."""
        self.stopped.set()
        _shutdown(self.resp)


def _shutdown(resp: Any) -> None:
    import socket

    if resp is None:
        return
    for get in (lambda r: r.raw._connection.sock, lambda r: r.raw._fp.fp.raw._sock):
        try:
            sock = get(resp)
        except AttributeError:
            continue
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return


def _say(msg: str) -> None:
    print(f"rayjobs: {msg}", file=sys.stderr, flush=True)


class _Poller(threading.Thread):
    """Polls the job's details every ``every`` s, off the data path (a slow poll never delays lines)."""

    def __init__(self, dash: Dashboard, job_id: str, every: float) -> None:
        super().__init__(daemon=True, name="rayjobs-status-poller")
        self.dash, self.job_id, self.every = dash, job_id, every
        self.job: Optional[dict[str, Any]] = None
        self.error: Optional[RayjobsError] = None  #: a permanent error (auth, job gone)
        self.down: Optional[DashboardDown] = None
        self.down_since: Optional[float] = None
        self.polls = 0
        self.stopped = threading.Event()
        self.kick = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.job = self.dash.job(self.job_id)
                self.down = self.down_since = None
            except DashboardDown as e:
                self.down = e
                if self.down_since is None:
                    self.down_since = time.monotonic()
            except RayjobsError as e:
                self.error = e
            except Exception as e:  # never let the poller die silently
                self.down = DashboardDown(short_reason(e))
                if self.down_since is None:
                    self.down_since = time.monotonic()
            self.polls += 1
            self.kick.wait(self.every)
            self.kick.clear()

    def close(self) -> None:
        self.stopped.set()
        self.kick.set()


class LogFollower:
    """Iterate over a job's log bytes until it is terminal and its log is fully read.

    Yields ``bytes`` (each byte of the file exactly once, in order) and ``None`` heartbeats
    (about every ``tick`` s) so a caller can refresh a view. ``status``/``job`` hold the latest
    job details (polled every ``status_every`` s in a thread). A broken stream (dashboard
    restart, network blip) is reopened and resumed at the exact byte; if the dashboard stays
    unreachable for ``outage_s`` seconds, :class:`ClusterUnreachable` is raised.
    """

    def __init__(self, dash: Dashboard, job_id: str, interval: float = 0.05, status_every: float = 0.5,
                 outage_s: float = 300.0, tick: float = 0.1, say: Callable[[str], None] = _say,
                 job: Optional[dict[str, Any]] = None, start: int = 0) -> None:
        """``start``: the bytes of the log already delivered (a run resumed under the same id appends
        to the same file: a tail goes on where it was)."""
        self.dash, self.job_id, self.interval = dash, job_id, interval
        self.status_every, self.outage_s, self.tick, self.say = status_every, outage_s, tick, say
        self.job: dict[str, Any] = job or {}
        self.seen = start  #: bytes delivered so far (= the file offset we are at)
        self.tail = bytearray()  #: the last 64 KiB delivered (to check the end of the file)
        self.reconnects = 0
        self.reader: Optional[_Reader] = None
        self.poller: Optional[_Poller] = None
        self._last_data_at = time.monotonic()

    @property
    def status(self) -> str:
        return str(self.job.get("status", "?"))

    def close(self) -> None:
        if self.reader:
            self.reader.close()
            self.reader = None
        if self.poller:
            self.poller.close()

    def quiet_s(self) -> float:
        """Seconds since the last byte arrived (or since iterating began, if none has)."""
        return time.monotonic() - self._last_data_at

    def _deliver(self, chunk: bytes) -> bytes:
        self._last_data_at = time.monotonic()
        self.seen += len(chunk)
        self.tail += chunk[-65536:]
        if len(self.tail) > 65536:
            del self.tail[:-65536]
        return chunk

    def __iter__(self) -> Iterator[Optional[bytes]]:
        self._last_data_at = time.monotonic()
        self.poller = _Poller(self.dash, self.job_id, self.status_every)
        self.poller.start()
        try:
            yield from self._run()
        finally:
            self.close()

    def _run(self) -> Iterator[Optional[bytes]]:
        poller = self.poller
        assert poller is not None
        st = _FollowState(last_data=time.monotonic())
        deadline = time.monotonic() + 60.0
        while not self.job and poller.polls == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the first answer (or failure) of the poller
        while True:
            now = time.monotonic()
            down = self._watch(poller, st, now)
            if self.status in TERMINAL and st.terminal_at is None:
                st.terminal_at = now
            node = self.job.get("driver_node_id")
            if not self._keep_reader(st, down, now, node):
                return  # it ended before its driver started: there is no log
            if self.reader is not None:
                try:
                    item = self.reader.q.get(timeout=self.tick)
                except queue.Empty:
                    item = None
                if isinstance(item, bytes):
                    st.last_data = time.monotonic()
                    st.failures = 0
                    yield self._deliver(item)
                    continue
                if isinstance(item, _Broken):
                    self._broken(item, st, down)
            else:
                time.sleep(self.tick)
            yield None
            settle = max(0.3, 4 * self.interval)
            if st.terminal_at is not None and down is None and time.monotonic() - max(st.last_data, st.terminal_at) >= settle:
                if not node:
                    return
                done = yield from self._finish(node, st.checks)
                if done:
                    return
                st.checks += 1
                st.last_data = time.monotonic()

    def _watch(self, poller: "_Poller", st: "_FollowState", now: float) -> Optional[float]:
        """Take the poller's news: the job's details, an outage begun or over (said once each).

        Returns when the dashboard went down (None: it answers). Raises a permanent error (auth,
        job gone) or :class:`ClusterUnreachable` after ``outage_s`` without it.
        """
        if poller.error is not None:
            raise poller.error
        if poller.job is not None:
            self.job = poller.job
        down = poller.down_since
        if down is not None and st.was_down is None:
            st.outage_seen = True
            self.say(f"{poller.down}; retrying for up to {self.outage_s:.0f} s")
        elif down is None and st.was_down is not None:
            self.say(f"the dashboard answers again after {now - st.was_down:.1f} s; resuming the log at byte {self.seen}")
        st.was_down = down
        if down is not None and now - down > self.outage_s:
            raise ClusterUnreachable(
                f"lost the dashboard at {self.dash.address} for {self.outage_s:.0f} s while following "
                f"{self.job_id} (it may still run): re-attach with `rayjobs tail {self.job_id}`")
        return down

    def _keep_reader(self, st: "_FollowState", down: Optional[float], now: float, node: Optional[str]) -> bool:
        """(Re)open the stream when it is due; False when there will never be a log to read."""
        if st.outage_seen and down is None and self.reader is not None and now - st.last_data > 3.0:
            # The dashboard came back but this connection stayed silent: it may be a dead socket.
            self.reader.close()
            self.reader = None
            st.outage_seen = False
        elif down is None and self.reader is None:
            st.outage_seen = False
        if self.reader is None and down is None and now >= st.retry_at:
            if node:
                params = self.dash.log_params(self.job_id, node, -1, self.interval)
                self.reader = _Reader(self.dash, params, skip=self.seen)
                self.reader.start()
            elif st.terminal_at is not None:
                return False
        return True

    def _broken(self, item: "_Broken", st: "_FollowState", down: Optional[float]) -> None:
        """The stream broke: back off and reconnect; give up after ``outage_s`` of failures."""
        assert self.reader is not None and self.poller is not None
        self.reader.close()
        self.reader = None
        st.failures += 1
        self.reconnects += 1
        now = time.monotonic()
        st.failing_since = st.failing_since if st.failures > 1 else now
        if now - st.failing_since > self.outage_s and down is None:
            raise ClusterUnreachable(
                f"the log of {self.job_id} has not been readable for {self.outage_s:.0f} s ({item.why}); "
                f"the job may still run: `rayjobs status {self.job_id}`")
        st.retry_at = now + min(2.0, 0.05 * 2 ** st.failures)
        if (st.failures == 1 and self.seen) or st.failures == 4 or st.failures % 30 == 0:
            self.say(f"log stream of {self.job_id} interrupted ({item.why}); reconnecting")
        self.poller.kick.set()

    def _finish(self, node: str, checks: int) -> Iterator[Optional[bytes]]:
        """The job is over and the stream is quiet: make sure we have the whole file (generator -> bool)."""
        k = 200
        try:
            if checks >= 3:  # the live stream did not catch up: read the rest directly, exactly
                self.close()
                skip = self.seen
                for chunk in self.dash.iter_log(self.job_id, node, -1):
                    if skip:
                        if len(chunk) <= skip:
                            skip -= len(chunk)
                            continue
                        chunk, skip = chunk[skip:], 0
                    yield self._deliver(chunk)
                return True
            w = self.dash.log_tail(self.job_id, node, k)
        except DashboardDown as e:
            if checks >= 5:
                self.say(f"could not confirm the end of {self.job_id}'s log ({e})")
                return True
            return False
        lines = w.count(b"\n") + (1 if w and not w.endswith(b"\n") else 0)
        if lines < k:  # the whole file
            if len(w) > self.seen:
                yield self._deliver(w[self.seen:])
            return True
        m = min(len(w), len(self.tail))
        return m > 0 and w[-m:] == bytes(self.tail[-m:])

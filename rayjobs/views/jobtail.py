"""Follow a job until it ends: ``rayjobs tail`` and ``rayjobs.follow=true``.

Exit codes (design §3): 0 SUCCEEDED, 1 FAILED, 3 STOPPED; 130 when Ctrl-C detaches (the job goes
on); 2 for errors (unknown id, unreachable cluster). The log comes from
:class:`rayjobs.client.logstream.LogFollower` (every byte once, resumes after a dashboard restart); on a
terminal a rich live panel sits below it (:mod:`rayjobs.views.panel`), otherwise stdout gets plain
lines without ANSI codes and stderr a last status line. With ``--json`` stdout gets the log's JSON
step records instead (:mod:`rayjobs.views.steplog`), a ``job_ended`` record last, never a panel.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Optional

from rayjobs.contract.status import Status
from rayjobs.contract.wire import JobView
from rayjobs.shared import STANDBY_KEY, TERMINAL

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard

EXIT_CODES = {Status.SUCCEEDED.value: 0, Status.FAILED.value: 1, Status.STOPPED.value: 3}
#: A live job whose log stream sent nothing this long after attaching has an empty log so far.
EMPTY_LOG_S = 2.0
DETACHED = 130


def _say(msg: str) -> None:
    print(f"rayjobs: {msg}", file=sys.stderr, flush=True)


class _Backlog:
    """What the log held before we attached: only its last ``lines`` lines are printed.

    ``lines`` None: print everything as it comes. For a job that had ended when we attached, the
    whole log is backlog and its last lines are printed at the end. For a live job, the backlog
    ends when the stream pauses after its first bytes (or sends none for :data:`EMPTY_LOG_S`: an
    empty log); a heartbeat before the first byte is not "caught up" (that printed the whole log).
    """

    def __init__(self, lines: Optional[int], in_view: bool = False) -> None:
        from collections import deque

        self.lines: Optional[deque] = deque(maxlen=max(0, lines)) if lines is not None else None
        self.held = 0
        self.ended: Optional[bool] = None
        #: the view keeps the backlog itself (JSON records: the last N steps, not lines) until released
        self.in_view = in_view

    def take(self, text: str) -> bool:
        """Keep ``text`` (whole lines) if still catching up; False: the caller prints it."""
        if self.lines is None:
            return False
        parts = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
        self.held += len(parts)
        self.lines.extend(parts)
        return True

    def caught_up(self, follower: Any) -> bool:
        return ((self.lines is not None or self.in_view) and not self.ended
                and (follower.seen > 0 or follower.quiet_s() >= EMPTY_LOG_S))

    def release(self, view: Any, job_id: str) -> None:
        """Print the kept lines (saying how many were left out) and stop keeping."""
        if self.in_view:
            self.in_view = False
            view.release(job_id)
            return
        if self.lines is None:
            return
        if self.held > len(self.lines):
            _say(f"{self.held - len(self.lines)} earlier lines not shown (all of them: rayjobs logs {job_id})")
        view.write("".join(x + "\n" for x in self.lines))
        self.lines = None


def tail(d: "Dashboard", job_id: str, live: Optional[bool] = None, interval: float = 0.05,
         lines: Optional[int] = -1, as_json: bool = False) -> int:
    """Stream ``job_id``'s log with a view until the job is terminal; its exit code.

    ``lines``: how much of the log written before we attached to print: None = all of it, N = the
    last N lines (the rest is still read, so the view knows the total steps, W&B run and attempt),
    -1 = all when not on a terminal, the last 1000 on one. ``as_json``: instead of the log, its
    JSON step records on stdout (:mod:`rayjobs.views.steplog`), ``job_ended`` last; ``lines`` N
    then counts steps (the records from the N-th last step on), -1 = all of them.
    """
    from rayjobs.errors import JobNotFound
    from rayjobs.views import logparse

    if as_json:
        live = False  # stdout is the records' alone: no panel
    elif live is None:
        live = sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
    try:
        ended = wait_until_in_ray(d, job_id)
    except KeyboardInterrupt:
        _say(f"detached from {job_id} (QUEUED); it keeps its place. Re-attach: rayjobs tail {job_id}  "
             f"Stop it: rayjobs stop {job_id}")
        return DETACHED
    if ended is not None:  # finished, and Ray no longer lists it: its recorded log, then its status
        return _replay(d, job_id, ended, lines, as_json)
    outage = float(os.environ.get("RAYJOBS_TAIL_OUTAGE_S", "300"))
    follower = _follower(d, job_id, interval=interval, outage_s=outage, say=_say)
    progress = logparse.Progress()
    job_of = _JobOf()
    view, backlog = _view(job_id, live, as_json, lines, lambda: job_of(follower))
    try:
        with view:
            for _ in range(MAX_PREEMPTIONS):
                lost = False
                try:
                    _stream(follower, progress, view, backlog, job_id, job_of)
                except JobNotFound:
                    if not back_in_line(d, job_id):
                        raise
                    lost = True
                start = _next_run(d, job_id, follower.status, follower.seen, lost)
                if start is None:
                    break
                follower = _follower(d, job_id, interval=interval, outage_s=outage, say=_say, start=start)
                backlog = _Backlog(None)
    except KeyboardInterrupt:
        follower.close()
        _say(f"detached from {job_id} ({follower.status}); it keeps running. Re-attach: rayjobs tail {job_id}  "
             f"Stop it: rayjobs stop {job_id}")
        return DETACHED
    return _ended(d, job_id, follower, progress, view if as_json else None, live, job_of)


def _follower(d: Any, job_id: str, **kw: Any) -> Any:
    """The log's follower: Ray's dashboard's stream, or the door's (a cluster reached by its door only)."""
    make = getattr(d, "follower", None)
    if make is not None:
        return make(job_id, **kw)
    from rayjobs.client.logstream import LogFollower

    return LogFollower(d, job_id, **kw)


class _JobOf:
    """The followed job as a view: a follower's last reading of it (Ray's details, or the door's
    dict of the job), converted once per reading (the panel asks at every chunk); None before its first."""

    def __init__(self) -> None:
        self.raw: Any = None
        self.view: Optional[JobView] = None

    def __call__(self, follower: Any) -> Optional[JobView]:
        raw = follower.job
        if not raw:
            return None
        if raw is not self.raw:
            self.raw, self.view = raw, JobView.from_ray(raw, foreign=False)
        return self.view


def _view(job_id: str, live: bool, as_json: bool, lines: Optional[int], job_of: Any) -> tuple[Any, _Backlog]:
    """The view (live panel, plain lines or JSON records) and the backlog it starts with."""
    if as_json:
        from rayjobs.views.steplog import JsonView, StepRecords

        hold = None if lines in (None, -1) else lines
        return JsonView(StepRecords(job_id, job_of=job_of), hold=hold, say=_say), _Backlog(None, in_view=hold is not None)
    from rayjobs.views.panel import LiveView, PlainView

    return (LiveView(job_id) if live else PlainView()), _Backlog((1000 if live else None) if lines == -1 else lines)


def _ended(d: "Dashboard", job_id: str, follower: Any, progress: Any, json_view: Any, live: bool,
           job_of: _JobOf) -> int:
    """The job is over: say how it ended (stderr; JSON: ``job_ended``); its exit code."""
    from rayjobs.views import logparse
    from rayjobs.views.panel import status_line

    status = follower.status
    if not live:
        _say(status_line(job_id, status, progress))
    cause = logparse.failure_summary(job_of(follower), bytes(follower.tail)) if status == Status.FAILED else None
    if cause:
        _say(f"{job_id} FAILED: {cause}")
    if json_view is not None and status in TERMINAL:
        from rayjobs.views.steplog import ended_at

        json_view.emit(json_view.records.end(status, cause, ended_at(job_of(follower))))
    return EXIT_CODES.get(status, 4)


def _stream(follower: Any, progress: Any, view: Any, backlog: _Backlog, job_id: str,
            job_of: Optional[_JobOf] = None) -> None:
    """Feed the log to the view (and the progress parser) until the job is over."""
    job_of = job_of or _JobOf()
    from rayjobs.views import logparse

    splitter = logparse.LineSplitter()
    for chunk in follower:
        changed = False
        if backlog.ended is None:
            backlog.ended = follower.status in TERMINAL
        if chunk:
            text = splitter.feed_text(chunk)
            if text:
                text = logparse.clean_block(text)
                changed = logparse.feed_block(progress, text)
                if not backlog.take(text):
                    view.write(text)
        elif backlog.caught_up(follower):
            backlog.release(view, job_id)
        view.update(job_of(follower), progress, changed)
    rest = "".join(logparse.clean(x) + "\n" for x in splitter.flush())
    if rest:
        logparse.feed_block(progress, rest)
        if not backlog.take(rest):
            view.write(rest)
    backlog.release(view, job_id)
    view.update(job_of(follower), progress, True)


#: How long a job may be neither in Ray nor in the queue's files before tail gives up (the queue
#: submits a job to Ray a moment after it leaves the waiting list).
GONE_S = 10.0
#: A tail follows a job through at most this many preemptions (each: stop, wait, resume).
MAX_PREEMPTIONS = 1000


def preempted_by(d: "Dashboard", job_id: str, status: str) -> Optional[str]:
    """The job that preempted ``job_id``, if its STOPPED is a preemption (it goes back in line)."""
    from rayjobs.views import queuestatus

    if status != Status.STOPPED:
        return None
    v = queuestatus.queue_job(d, job_id)
    if queuestatus.is_waiting(v):
        return queuestatus.preempted_by(v) or "a job of higher priority"
    return v.preempting_for if v is not None else None


def _next_run(d: "Dashboard", job_id: str, status: str, seen: int, lost: bool) -> Optional[int]:
    """After a run's stream ended: the bytes of the job's log to skip when its next run starts
    (after a preemption or a restart of the head's Ray), or None when the job is over."""
    if lost:  # a new Ray job table; the queue put the job back in line: a new driver log, from byte 0
        _say(f"{job_id}: the head's Ray restarted and lost this run; the queue holds the job again: "
             "it resumes from its last checkpoint as a new attempt")
        return None if wait_until_in_ray(d, job_id) is not None else 0
    by = preempted_by(d, job_id, status)
    if not by:
        return None
    # Stopped at a checkpoint for a job of higher priority: it waits at its place and resumes from
    # there as a new attempt, under the same id and log (appended).
    _say(f"{job_id} PREEMPTED by {by}: stopped at its checkpoint; it waits in the queue and resumes from there")
    return None if wait_until_in_ray(d, job_id, after_preemption=True) is not None else seen


def back_in_line(d: "Dashboard", job_id: str, every: float = 0.5) -> bool:
    """Does the queue hold ``job_id`` (waiting, admitted or preempted)? Asked when Ray stopped knowing
    a job we followed. After a restart of the head's Ray the queue comes back in a new session (this
    tail starts it if nobody has): while it does not answer it is found afresh, for as long as a
    queue may take to start; once it answers, it may still be reloading its backlog, so a job it
    lacks is asked again for up to :data:`GONE_S` seconds."""
    from rayjobs.client.queueapi import START_TIMEOUT_S, QueueDown
    from rayjobs.views import queuestatus

    d.forget_queue()  # Ray lost the job: its head may run a new session, whose queue is another
    down_until = time.monotonic() + START_TIMEOUT_S + GONE_S
    gone_at: Optional[float] = None
    for _ in range(100_000):  # bounded by the two deadlines
        try:
            v = queuestatus.queue_job(d, job_id)
        except QueueDown:
            d.forget_queue()
            if time.monotonic() >= down_until:
                return False
        else:
            if v is not None and v.state in ("waiting", "admitted"):
                return True
            gone_at = gone_at or time.monotonic() + GONE_S
            if time.monotonic() >= gone_at:
                return False
        time.sleep(every)
    return False


def wait_until_in_ray(d: "Dashboard", job_id: str, every: float = 0.5, after_preemption: bool = False) -> Optional[str]:
    """Wait while the queue holds the job (saying its place when it changes); None once Ray runs it,
    or the final status of a job the queue finished that Ray no longer lists.

    ``after_preemption``: Ray's entry is the stopped run's until the queue resubmits the job (the
    queue's view says so: QUEUED, then admitted and in Ray).

    Raises:
        NoSuchJob: neither Ray nor the queue has known the job for :data:`GONE_S` seconds.
    """
    from rayjobs.errors import JobNotFound, NoSuchJob
    from rayjobs.views import queuestatus

    shown, missing_since = None, None
    while True:
        v = queuestatus.queue_job(d, job_id)
        if v is None:
            try:
                d.job(job_id)
                return None  # a Ray job the queue does not know
            except JobNotFound:
                missing_since = missing_since or time.monotonic()
                if time.monotonic() - missing_since > GONE_S:
                    raise NoSuchJob(f"no job {job_id!r} on the cluster or in its queue; `rayjobs list` shows the ids") from None
        elif v.status == Status.QUEUED:
            if v.queue_position != shown:
                shown = v.queue_position
                where = f"at position {shown}" if shown else "going back in line"
                _say(f"{job_id} QUEUED {where}: {v.message or 'waiting for GPUs'}")
        elif v.state == "admitted" and v.in_ray:
            return None
        elif v.state == "done":
            try:
                d.job(job_id)
                return None  # Ray still has it: its log is followed to its end
            except JobNotFound:
                return str(v.status or Status.FAILED)
        time.sleep(every)


def _replay(d: "Dashboard", job_id: str, status: str, lines: Optional[int], as_json: bool = False) -> int:
    """A finished job Ray no longer lists: its recorded log (the last ``lines``; JSON: its step
    records, from the ``lines``-th last step on, ``job_ended`` last), its exit code."""
    from rayjobs.views import joblog

    n = None if lines in (None, -1) else lines
    if as_json:
        from rayjobs.views import steplog

        for rec in steplog.log_records(d, job_id, tail=n):
            sys.stdout.write(steplog.dumps(rec) + "\n")
    else:
        for text in joblog.iter_log(d, job_id, tail=n, say=_say):
            sys.stdout.write(text)
    sys.stdout.flush()
    _say(f"{job_id} · {status} (from the queue's history)")
    return EXIT_CODES.get(status, 4)

"""Follow a job until it ends: ``rayjobs tail`` and ``rayjobs.follow=true``.

Exit codes (design §3): 0 SUCCEEDED, 1 FAILED, 3 STOPPED; 130 when Ctrl-C detaches (the job goes
on); 2 for errors (unknown id, unreachable cluster). The log comes from
:class:`rayjobs.logstream.LogFollower` (every byte once, resumes after a dashboard restart); on a
terminal a rich live panel sits below it (:mod:`rayjobs.progress`), otherwise stdout gets plain
lines without ANSI codes and stderr a last status line.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from rayjobs import settings

EXIT_CODES = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 3}
DETACHED = 130


def connect(address: Optional[str] = None) -> tuple[settings.Target, Any]:
    """(target, Jobs SDK client) for ``address`` (the embedded head is started if it is the one)."""
    from rayjobs import jobs

    target = settings.resolve_target(address)
    if target.embedded:
        from rayjobs import embedded

        target = embedded.ensure(quiet=True)
    return target, jobs.client(target)


def follow(job_id: str, address: Optional[str] = None, live: Optional[bool] = None, interval: float = 0.05,
           **_ignored: Any) -> int:
    """Follow ``job_id`` (a unique prefix is enough) until it ends; return its exit code."""
    from rayjobs import jobs

    target, c = connect(address)
    full = jobs.resolve_id(c, job_id)
    return tail(target, full, live=live, interval=interval)


def _say(msg: str) -> None:
    print(f"rayjobs: {msg}", file=sys.stderr, flush=True)


def tail(target: settings.Target, job_id: str, live: Optional[bool] = None, interval: float = 0.05,
         lines: Optional[int] = -1) -> int:
    """Stream ``job_id``'s log with a view until the job is terminal; its exit code.

    ``lines``: how much of the log written before we attached to print: None = all of it, N = the
    last N lines (the rest is still read, so the view knows the total steps, W&B run and attempt),
    -1 = all when not on a terminal, the last 1000 on one.
    """
    from collections import deque

    from rayjobs import metrics
    from rayjobs.logstream import Dashboard, LogFollower
    from rayjobs.progress import LiveView, PlainView, status_line

    if live is None:
        live = sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
    dash = Dashboard(target)
    outage = float(os.environ.get("RAYJOBS_TAIL_OUTAGE_S", "300"))
    follower = LogFollower(dash, job_id, interval=interval, outage_s=outage, say=_say)
    progress = metrics.Progress()
    splitter = metrics.LineSplitter()
    view: Any = LiveView(job_id) if live else PlainView()
    if lines == -1:
        lines = 1000 if live else None
    backlog: Optional[deque] = deque(maxlen=max(0, lines)) if lines is not None else None
    held = 0
    try:
        with view:
            for chunk in follower:
                changed = False
                if chunk:
                    text = splitter.feed_text(chunk)
                    if text:
                        text = metrics.clean_block(text)
                        changed = metrics.feed_block(progress, text)
                        if backlog is None:
                            view.write(text)
                        else:  # still catching up with what was written before we attached
                            parts = text.split("\n")[:-1]
                            held += len(parts)
                            backlog.extend(parts)
                elif backlog is not None:  # caught up: the last N lines, then everything live
                    if held > len(backlog):
                        _say(f"{held - len(backlog)} earlier lines not shown (all of them: rayjobs logs {job_id})")
                    view.write("".join(x + "\n" for x in backlog))
                    backlog = None
                view.update(follower.job, progress, changed)
            if backlog is not None:
                view.write("".join(x + "\n" for x in backlog))
            rest = "".join(metrics.clean(x) + "\n" for x in splitter.flush())
            if rest:
                metrics.feed_block(progress, rest)
                view.write(rest)
            view.update(follower.job, progress, True)
    except KeyboardInterrupt:
        follower.close()
        status = follower.status
        _say(f"detached from {job_id} ({status}); it keeps running. Re-attach: rayjobs tail {job_id}  "
             f"Stop it: rayjobs stop {job_id}")
        return DETACHED
    status = follower.status
    if not live:
        _say(status_line(job_id, status, progress))
    if status == "FAILED" and follower.job.get("message"):
        _say(f"{job_id} FAILED: {' '.join(str(follower.job['message']).split())[:300]}")
    return EXIT_CODES.get(status, 4)

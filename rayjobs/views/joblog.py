"""A job's driver log as text: from Ray while it lists the job, else from where the queue recorded it,
else -- the head's Ray restarted since the job ended, and Ray serves only its new session's logs --
from what was kept of it (:func:`kept_log`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard
    from rayjobs.contract.wire import JobView

Say = Optional[Callable[[str], None]]


def iter_log(d: "Dashboard", job_id: str, *, tail: Optional[int] = None, clean: bool = True,
             say: Say = None) -> Iterator[str]:
    """The log as it is now (``tail``: only the last N lines), in chunks; ``clean``: no ANSI codes.

    A job pruned from Ray's table is read from where the queue recorded its log; an ended job whose
    log Ray no longer serves (its head's Ray restarted), from what was kept of it (:func:`kept_log`;
    ``say`` is told which in one line); a waiting job has none yet (nothing is yielded).
    """
    from rayjobs.client.dashboard import DashboardDown
    from rayjobs.errors import JobNotFound
    from rayjobs.views import logparse, queuestatus

    try:
        info: Optional["JobView"] = queuestatus.ray_view(d, job_id, foreign=False)
    except JobNotFound:
        info = None
    if info is None or not info.metadata:  # gone, or the entry Ray writes back for a job pruned too soon
        view = queuestatus.queue_job(d, job_id)
        got = False
        for text in recorded_log(d, job_id, tail, clean, view):
            got = got or bool(text)
            yield text
        done = view is not None and view.state == "done"
        if got or (info is None and not done):
            return
        if done:
            yield from kept_chunks(view, tail, clean, say)
            return
    node = info.driver_node_id
    if not node:
        return
    split = logparse.LineSplitter()
    try:
        for chunk in d.iter_log(job_id, node, tail if tail is not None else -1):
            yield logparse.clean_block(split.feed_text(chunk)) if clean else chunk.decode("utf-8", "replace")
        yield "".join((logparse.clean(x) if clean else x) + "\n" for x in split.flush())
    except DashboardDown:  # the Jobs API reads the same file another way
        text = d.logs(job_id)
        if tail is not None:
            text = "\n".join(text.splitlines()[-tail:]) + "\n" if tail > 0 else ""
        yield logparse.clean_block(text) if clean else text


def recorded_log(d: "Dashboard", job_id: str, tail: Optional[int], clean: bool,
                 view: Optional["JobView"] = None) -> Iterator[str]:
    """The driver log of a job the queue finished and Ray no longer lists (by its file name),
    streamed in chunks of whole lines (a 100k-line log is never held in memory). Nothing when the
    node that wrote it is not the dashboard's any more (the head's Ray restarted)."""
    from rayjobs.client.dashboard import LOG_FILE, DashboardDown
    from rayjobs.views import logparse
    from rayjobs.views import queuestatus

    view = view if view is not None else queuestatus.queue_job(d, job_id)
    node = view.driver_node_id if view is not None else None
    if not node:
        return
    params = {"node_id": node, "filename": f"job-driver-{job_id}.log", "lines": tail if tail is not None else -1}
    split = logparse.LineSplitter()
    with d.get(LOG_FILE, params, stream=True, read_timeout=30.0) as r:
        if r.status_code != 200:
            return
        try:
            for chunk in r.iter_content(chunk_size=1 << 16):
                yield logparse.clean_block(split.feed_text(chunk)) if clean else chunk.decode("utf-8", "replace")
        except Exception as e:  # noqa: BLE001  (requests' own errors: the dashboard went away mid-read)
            raise DashboardDown(f"reading the log of {job_id} broke off ({e})") from e
    if clean:
        yield "".join(logparse.clean(x) + "\n" for x in split.flush())


# --------------------------------------------------------------------------- what was kept
@dataclass(frozen=True)
class Kept:
    """What is left of an ended job's log where Ray no longer serves it."""

    job_id: str
    source: str  #: ``whole`` (its log file, readable here), ``storage`` (the end its runner kept), ``record`` (the local record's)
    path: str  #: the file it is read from
    whole: Optional[str] = None  #: where the whole log stays (``PATH on HOST``), when known
    text: str = ""  #: the kept end (``storage``, ``record``), its first line (where the whole log is) left out
    stored: Optional[str] = None  #: where the runner keeps the end on the cluster's storage root

    def note(self) -> str:
        """One line: where the log shown comes from, and where the whole log stays."""
        why = f"Ray no longer serves {self.job_id}'s log (the head's Ray restarted since it ran)"
        if self.source == "whole":
            return f"{why}: its whole log is read from {self.path}"
        n = len(self.text.splitlines())
        what = "its runner kept on the storage root" if self.source == "storage" else "kept in the local record"
        where = f"; the whole log stays at {self.whole}" if self.whole else \
            (f"; the cluster's storage root keeps its end at {self.stored}" if self.stored else "")
        return f"{why}: the last {n} lines {what} ({self.path}){where}"


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def kept_log(job: "JobView", *, whole: bool = True) -> Optional[Kept]:
    """What is left of an ended job's log once Ray no longer serves it: its whole log file where it
    is readable here (``whole``; the embedded head's earlier session), else the end its runner kept
    on the storage root (:func:`rayjobs.contract.paths.kept_log`, readable here), else the end the
    local record kept (:mod:`rayjobs.ledger`); None when nothing is."""
    from rayjobs.contract import paths
    from rayjobs import ledger
    jid, run_dir = job.submission_id, job.meta.run_dir
    stored_at = paths.kept_log(run_dir, jid) if run_dir else None
    stored = _read(stored_at) if stored_at is not None else None
    named = paths.whole_log_of(stored) if stored else None
    where = f"{named[0]} on {named[1]}" if named else None
    if whole and named and os.path.isfile(named[0]) and os.access(named[0], os.R_OK):
        return Kept(jid, "whole", named[0], where)
    if stored is not None:
        body = stored.split("\n", 1)[1] if named and "\n" in stored else stored
        return Kept(jid, "storage", str(stored_at), where, body)
    rec = ledger.kept_log_tail(jid)
    if rec is not None:
        return Kept(jid, "record", str(ledger.run_dir(jid) / ledger.LOG_TAIL), None, rec.decode("utf-8", "replace"),
                    str(stored_at) if stored_at else None)
    return None


def nothing_kept(job: "JobView") -> str:
    """One line for an ended job none of whose log is readable here: where its end may still be."""
    from rayjobs.contract import paths
    jid, run_dir = job.submission_id, job.meta.run_dir
    line = f"Ray no longer serves {jid}'s log (the head's Ray restarted since it ran) and no copy of it is readable here"
    if run_dir and not os.path.isdir(run_dir):  # the cluster's storage root, not mounted here
        line += f"; its runner keeps the end on the cluster's storage root: {paths.kept_log(run_dir, jid)}"
    return line


def kept_chunks(job: "JobView", tail: Optional[int], clean: bool, say: Say = None) -> Iterator[str]:
    """:func:`kept_log`'s text (the last ``tail`` lines), in chunks; ``say`` is told where it is from."""
    from rayjobs.views import logparse

    kept = kept_log(job)
    if kept is None:
        if say:
            say(nothing_kept(job))
        return
    if say:
        say(kept.note())
    if kept.source == "whole":
        yield from _file_chunks(Path(kept.path), tail, clean)
        return
    text = kept.text
    if tail is not None:
        text = "".join(x + "\n" for x in text.splitlines()[-tail:]) if tail > 0 else ""
    yield logparse.clean_block(text) if clean else text


def _file_chunks(path: Path, tail: Optional[int], clean: bool) -> Iterator[str]:
    """A log file here, streamed in chunks of whole lines (``tail``: its last N lines, read from its end)."""
    from rayjobs.views import logparse

    try:
        f = path.open("rb")
    except OSError:
        return
    with f:
        if tail is not None:
            text = _last_lines(f, tail).decode("utf-8", "replace")
            yield logparse.clean_block(text) if clean else text
            return
        split = logparse.LineSplitter()
        for chunk in iter(lambda: f.read(1 << 16), b""):
            yield logparse.clean_block(split.feed_text(chunk)) if clean else chunk.decode("utf-8", "replace")
        if clean:
            yield "".join(logparse.clean(x) + "\n" for x in split.flush())


def _last_lines(f: Any, n: int, block: int = 1 << 16) -> bytes:
    """The last ``n`` lines of an open file, read backwards a block at a time."""
    if n <= 0:
        return b""
    end = pos = f.seek(0, os.SEEK_END)
    buf = b""
    while pos > 0 and buf.count(b"\n") <= n:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        buf = f.read(step) + buf
    lines = buf.splitlines(keepends=True)
    out = b"".join(lines[-n:])
    return out if out.endswith(b"\n") or not end else out + b"\n"

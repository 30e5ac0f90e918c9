"""A job's driver log as text: from Ray while it lists the job, else from where the queue recorded it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard


def iter_log(d: "Dashboard", job_id: str, *, tail: Optional[int] = None, clean: bool = True) -> Iterator[str]:
    """The log as it is now (``tail``: only the last N lines), in chunks; ``clean``: no ANSI codes.

    A job pruned from Ray's table is read from where the queue recorded its log; a waiting job has
    none yet (nothing is yielded).
    """
    from rayjobs.client.dashboard import DashboardDown
    from rayjobs.errors import JobNotFound
    from rayjobs.views import jobfields, logparse

    try:
        info = d.job(job_id)
    except JobNotFound:
        info = None
    if info is None or not jobfields.meta(info):  # gone, or the entry Ray writes back for a job pruned too soon
        recorded = list(recorded_log(d, job_id, tail, clean))
        if recorded or info is None:
            yield from recorded
            return
    node = jobfields.field(info, "driver_node_id")
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


def recorded_log(d: "Dashboard", job_id: str, tail: Optional[int], clean: bool) -> Iterator[str]:
    """The driver log of a job the queue finished and Ray no longer lists (by its file name),
    streamed in chunks of whole lines (a 100k-line log is never held in memory)."""
    from rayjobs.client.dashboard import LOG_FILE, DashboardDown
    from rayjobs.views import logparse
    from rayjobs.views import queuestatus

    node = (queuestatus.queue_job(d, job_id) or {}).get("driver_node_id")
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

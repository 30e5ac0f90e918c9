"""Rows of the jobs only the local record knows: ``$RAYJOBS_HOME/ledger.jsonl`` and the final copies
kept under ``runs/<id>/`` (:mod:`rayjobs.ledger`), for jobs the cluster forgot and for every
job while the cluster cannot be reached. Reads; writes nothing.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from rayjobs.contract.row import JobRow
from rayjobs.contract.status import TERMINAL, Status
from rayjobs.contract.wire import JobView
from rayjobs.errors import JobNotFound, did_you_mean
from rayjobs.views.jobrows import base_row


class RecordJob(JobView):
    """A job only the local record knows, as the views read jobs (``plot``, ``compare``): its id,
    status (its row's) and metadata (the record's); nothing read from a cluster."""

    @property
    def from_record(self) -> bool:
        return True


def record_job(entry: dict[str, Any], status: str) -> JobView:
    """The view of a recorded job (its ledger ``entry``) with ``status``, for :func:`base_row`."""
    m = {str(k): str(v) for k, v in (entry.get("metadata") or {}).items()}
    return JobView(submission_id=str(entry.get("id") or ""), status=status, state="", metadata=m)


def _cluster_of(entry: dict[str, Any]) -> str:
    return str(entry.get("cluster") or entry.get("address"))


def record_row(entry: dict[str, Any], cluster: str) -> JobRow:
    """A row for a job the cluster does not know, from its local record (``rayjobs.ledger``).

    ``cluster``: the current cluster's :attr:`rayjobs.settings.Target.key`.
    """
    row = base_row(record_job(entry, Status.UNKNOWN.value))
    same = _cluster_of(entry) == cluster
    where = "the embedded local cluster" if _cluster_of(entry) == "embedded" else entry.get("address")
    row.update({"attempt": None, "source": "record",
                "message": (f"not on the cluster any more (its head restarted since it was submitted to {where})"
                            if same else f"submitted to another cluster: {where}") + "; this row is the local record"})
    return row


def missing_records(known_ids: Iterable[str], cluster: str, sweep: Optional[str] = None) -> list[JobRow]:
    """Rows of recorded jobs the cluster does not list: those submitted to ``cluster`` (a
    :attr:`rayjobs.settings.Target.key`), or those of ``sweep``, wherever they ran."""
    from rayjobs import ledger

    known = set(known_ids)
    newest: dict[str, dict[str, Any]] = {}
    for e in ledger.entries_not_in(known):
        jid = str(e.get("id") or "")
        if not jid or jid in known:
            continue
        if (e.get("sweep") == sweep) if sweep else _cluster_of(e) == cluster:
            newest[jid] = e
    return [kept_row(e) or record_row(e, cluster) for e in _oldest_first(newest)]


def _oldest_first(newest: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(newest.values(), key=lambda e: (str(e.get("submitted_at")), str(e.get("id"))))


# --------------------------------------------------------------------------- the cluster is gone
def kept_row(entry: dict[str, Any]) -> Optional[JobRow]:
    """The row of a job whose final copy was kept (``source`` "local", ``final`` true), or None."""
    from rayjobs import ledger

    doc = ledger.kept(str(entry.get("id")))
    if doc is None:
        return None
    row: JobRow = dict(doc["row"], source="local", final=True, kept_at=doc.get("kept_at"),  # type: ignore[assignment]
                       queue_position=None, metrics_kept=doc.get("metrics_from"))
    return row


def local_row(entry: dict[str, Any], seen: dict[str, dict[str, Any]], where: str) -> JobRow:
    """A job's row from the local record alone (its cluster unreachable): the final copy kept,
    else what a command last saw of it, else QUEUED (what its submit left it as); ``final`` says
    whether that status is the job's last (a job not seen ended may have run on, or not)."""
    row = kept_row(entry)
    if row is not None:
        return row
    row = base_row(record_job(entry, Status.QUEUED.value))
    last = seen.get(str(entry.get("id"))) or {}
    row.update({k: last[k] for k in last if k in row and last[k] is not None})
    row.update(source="local", final=row["status"] in TERMINAL, seen_at=last.get("seen_at"),
               attempt=row.get("attempt") or (0 if row["status"] == Status.QUEUED else 1))
    when = f"last seen {row['status']} at {last['seen_at']}" if last else f"submitted to {where}, never seen since"
    row["message"] = when + ("" if row["final"] else f"; {where} is gone or unreachable, so where it stands now is unknown")
    return row


def local_rows(cluster: str, where: str, sweep: Optional[str] = None) -> list[JobRow]:
    """Rows of every recorded job of ``cluster`` (or of ``sweep``, wherever it ran) from the local
    record alone: what ``rayjobs list`` shows while that cluster cannot be reached."""
    from rayjobs import ledger

    newest: dict[str, dict[str, Any]] = {}
    for e in ledger.entries():
        jid = str(e.get("id") or "")
        if jid and ((e.get("sweep") == sweep) if sweep else _cluster_of(e) == cluster):
            newest[jid] = e
    if sweep and not newest:
        sweeps = sorted({str(e.get("sweep")) for e in ledger.entries() if e.get("sweep")})
        raise JobNotFound(f"no sweep {sweep!r} in the local record{did_you_mean(sweep, sweeps)}")
    seen = ledger.seen(cluster)
    return [local_row(e, seen, where) for e in _oldest_first(newest)]


def as_local_jobs(rows: Iterable[JobRow]) -> list[JobView]:
    """The jobs of local rows as views (:class:`RecordJob`, for ``plot``), their metadata from the record."""
    from rayjobs import ledger

    rows = list(rows)
    want = {str(r["id"]) for r in rows}
    entries = {str(e.get("id")): e for e in ledger.entries() if str(e.get("id")) in want}  # one read of the ledger
    return [RecordJob(submission_id=str(r["id"]), status=r["status"], state="",
                      metadata={str(k): str(v) for k, v in (entries.get(str(r["id"]), {}).get("metadata") or {}).items()})
            for r in rows]


def unreachable_rows(address: Optional[str], sweep: Optional[str], why: Exception, say: Any = None) -> list[JobRow]:
    """``list``/``plot`` while the cluster at ``address`` cannot be reached (or is the embedded head,
    stopped): its jobs from the local record (:func:`local_rows`); ``say`` is told so in one line, with why."""
    from rayjobs import settings

    target = settings.resolve_target(address)
    where = target.address or "the embedded local cluster"
    rows = local_rows(target.key, where, sweep)
    if say:
        what = (f"showing the local record ({len(rows)} job(s); STATUS* = the final state kept here, "
                f"(cluster gone) = last seen, may have changed since)")
        say(head_down_line(why, what) or f"cluster {where} unreachable: {what}. {why}")
    return rows


def head_down_line(why: Exception, what: str) -> Optional[str]:
    """A read's one line while the embedded local head is stopped (``why`` is
    :class:`rayjobs.client.connection.LocalHeadDown`): ``what`` it shows instead, that the head is
    down and how to start it; None for any other cause (the caller says that its own way)."""
    from rayjobs.client.connection import START_HINT, LocalHeadDown

    return f"the embedded local head is not running: {what}; {START_HINT}" if isinstance(why, LocalHeadDown) else None

"""The door's audit: every request that changed something and every refused one, one JSON line each.

``<door dir>/audit.jsonl``, appended by the door only (one process per cluster): open for append,
write one whole line, flush and fsync -- a line is on disk before the next request's. A head
killed mid-write leaves at most one line cut short: the next append starts on a fresh line, and a
reader skips any line that is not a whole entry, so a torn record costs only itself. It lives on
the storage root beside the queue's store, so it survives a restart (or a replacement) of the head.
Never a token or a secret: the entries carry names, addresses, routes, ids and one-line results.

Rotation: not needed now (a line is ~250 bytes: a million requests that change something are
~250 MB); a reader streams the file.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

from rayjobs.contract.wire import AuditEntry

FIELDS = tuple(AuditEntry.__dataclass_fields__)
#: The most entries one read returns (the newest).
MAX_LIMIT = 10_000


def _entry(doc: Any) -> Optional[dict[str, Any]]:
    """A whole entry with every field of :class:`AuditEntry`, or None (a torn or foreign line)."""
    if not isinstance(doc, dict) or any(k not in doc for k in FIELDS):
        return None
    try:
        return {**{k: doc[k] for k in FIELDS}, "at": float(doc["at"]), "status": int(doc["status"]),
                "target": [str(t) for t in doc["target"] or []]}
    except (TypeError, ValueError):
        return None


class AuditLog:
    """The audit file at ``path``; :meth:`append` is thread-safe (the I/O pool writes it)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fresh_line = self._ends_torn()

    def _ends_torn(self) -> bool:
        """Does the file end mid-line (a writer killed mid-write)? Then the next entry starts anew."""
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() == 0:
                    return False
                f.seek(-1, os.SEEK_END)
                return f.read(1) != b"\n"
        except OSError:
            return False

    def append(self, entry: dict[str, Any]) -> None:
        """Append one entry durably (flushed and fsync'ed when this returns)."""
        line = json.dumps({k: entry.get(k) for k in FIELDS}, sort_keys=True, default=str) + "\n"
        with self._lock:
            data = (("\n" if self._fresh_line else "") + line).encode()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._fresh_line = False

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every whole entry, oldest first (torn or foreign lines skipped)."""
        try:
            f = open(self.path, "rb")
        except OSError:
            return
        with f:
            for raw in f:
                try:
                    got = _entry(json.loads(raw))
                except ValueError:
                    continue
                if got is not None:
                    yield got

    def read(self, *, user: Optional[str] = None, since: Optional[float] = None,
             limit: int = 1000) -> tuple[list[dict[str, Any]], int]:
        """The newest ``limit`` entries of ``user`` (None: everyone's) at or after ``since``, oldest
        first, and how many matched in all."""
        limit = max(1, min(int(limit), MAX_LIMIT))
        kept: list[dict[str, Any]] = []
        total = 0
        for e in self.entries():
            if (user is not None and e["user"] != user) or (since is not None and e["at"] < since):
                continue
            total += 1
            kept.append(e)
            if len(kept) > 2 * limit:  # a bounded window over a long file
                kept = kept[-limit:]
        return kept[-limit:], total

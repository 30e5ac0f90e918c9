"""What the queue shows the laptop: two files in the head's Ray log dir, read with the dashboard's log API.

* :data:`rayjobs.shared.STATUS_FILE` -- one JSON line, rewritten on change: the waiting jobs (in
  order, each with its metadata: a waiting job has no Ray job to list), the admitted ones, the
  cluster's totals.
* :data:`rayjobs.shared.HISTORY_FILE` -- one JSON line per finished job (status, attempts, final
  metrics, where its log is), appended as jobs end and rewritten whole from the store when the
  queue starts; so ``rayjobs list`` shows every job after Ray's job table was pruned.

The log dir is the one directory the dashboard serves files from, so the laptop needs only HTTP.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Iterable, Optional

from rayjobs.shared import HISTORY_FILE, STATUS_FILE

PROTOCOL = 2
REWRITE_S = 5.0  #: an unchanged document is rewritten this often (its updated_at shows the queue lives)
MIN_GAP_S = 0.25  #: a changed document is rewritten at most this often (it lists every waiting job)


class StatusFile:
    """The head-side files; every method swallows I/O errors (the queue must not fail on its log dir)."""

    def __init__(self, logs_dir: Optional[str] = None) -> None:
        d = logs_dir or _logs_dir()
        self.path = os.path.join(d, STATUS_FILE) if d else None
        self.history = os.path.join(d, HISTORY_FILE) if d else None
        self._written = ""
        self._at = 0.0

    def write(self, doc: dict[str, Any], force: bool = False) -> None:
        """Replace the status file atomically, unless nothing but ``updated_at`` changed lately."""
        if not self.path:
            return
        body = json.dumps({k: v for k, v in doc.items() if k != "updated_at"}, sort_keys=True, default=str)
        since = time.monotonic() - self._at
        if not force and (since < MIN_GAP_S or (body == self._written and since < REWRITE_S)):
            return
        if self._replace(self.path, json.dumps(doc, default=str) + "\n"):
            self._written, self._at = body, time.monotonic()

    def rewrite_history(self, rows: Iterable[dict[str, Any]]) -> None:
        """The whole history file, from the store (when the queue starts)."""
        if self.history:
            self._replace(self.history, "".join(json.dumps(r, default=str) + "\n" for r in rows))

    def append_history(self, row: dict[str, Any]) -> None:
        """One finished job, appended (one write call of one line)."""
        if not self.history:
            return
        try:
            fd = os.open(self.history, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(row, default=str) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass

    @staticmethod
    def _replace(path: str, text: str) -> bool:
        tmp = path + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
            return True
        except OSError:
            return False


def _logs_dir() -> Optional[str]:
    """This Ray node's log dir (None outside a Ray worker)."""
    try:
        import ray

        node = ray._private.worker._global_node
        return node.get_logs_dir_path() if node is not None else None
    except Exception:
        return None

"""The queue's status file: written by the queue actor on the head, read from the laptop.

The actor (:mod:`rayjobs.oncluster.queueactor`) keeps a small JSON document (queue positions, admitted jobs)
in the head's Ray log dir, because the dashboard's log API can serve that dir: ``rayjobs list``
then needs nothing but HTTP (:func:`rayjobs.views.queuestatus.read_status`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional

from rayjobs.shared import STATUS_FILE

PROTOCOL = 1
REWRITE_S = 5.0  #: an unchanged document is rewritten this often (its updated_at shows the actor lives)


class StatusFile:
    """The head-side file; every method swallows I/O errors (the queue must not fail on its log dir)."""

    def __init__(self) -> None:
        self.path = _logs_dir_path()
        self._written = ""
        self._at = 0.0

    def had_jobs(self) -> bool:
        """Does the file left by an earlier actor list jobs (so this actor is a re-creation)?"""
        try:
            with open(self.path or "") as f:
                doc = json.loads(f.read())
            return bool(doc.get("admitted") or doc.get("queue"))
        except (OSError, ValueError):
            return False

    def write(self, doc: dict[str, Any]) -> None:
        """Replace the file atomically, unless only ``updated_at`` changed within REWRITE_S."""
        if not self.path:
            return
        body = json.dumps({k: v for k, v in doc.items() if k != "updated_at"}, sort_keys=True, default=str)
        if body == self._written and time.monotonic() - self._at < REWRITE_S:
            return
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(doc, default=str) + "\n")
            os.replace(tmp, self.path)
            self._written, self._at = body, time.monotonic()
        except OSError:
            pass


def _logs_dir_path() -> Optional[str]:
    """The file's path in this Ray node's log dir (None outside a Ray worker)."""
    try:
        import ray

        node = ray._private.worker._global_node
        return os.path.join(node.get_logs_dir_path(), STATUS_FILE) if node is not None else None
    except Exception:
        return None

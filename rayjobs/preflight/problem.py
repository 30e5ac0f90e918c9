"""One failed check as one line (``key=value: rule; fix: ...``), and the notes preflight prints once.

Every layer of preflight reports :class:`Problem` values; :func:`rayjobs.preflight.checks.report`
prints them and stops the submit with exit 2.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

VERL_FIX = "change the key(s) verl names (or skip every check with rayjobs.preflight=false)"


UNSET = object()


_NOTES: set[str] = set()


@dataclass(frozen=True)
class Problem:
    """One failed rule: ``key=value: rule; fix: fix``."""

    key: str
    value: Any
    rule: str
    fix: str

    def line(self) -> str:
        shown = "" if self.value is UNSET or self.value is None and self.key.startswith("(") else f"={_show(self.value)}"
        return f"{self.key}{shown}: {self.rule}; fix: {self.fix}"


def _show(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    return json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v)


def note(msg: str) -> None:
    """Print a preflight note once per process."""
    if msg not in _NOTES:
        _NOTES.add(msg)
        print(f"rayjobs: preflight: {msg}", file=sys.stderr)


"""``rayjobs usage`` as plain columns (data: stdout): GPU-hours per part, the wait, ETTR."""

from __future__ import annotations

from typing import Any, Iterable

COLUMNS = ("allocated", "productive", "redone", "startup", "idle")


def _h(seconds: Any) -> str:
    return f"{float(seconds or 0) / 3600:.2f}"


def _row(name: str, s: dict[str, Any]) -> list[str]:
    ettr = s.get("ettr")
    return [name, str(s.get("jobs", 0)), *(_h(s.get(c)) for c in COLUMNS), _h(s.get("waited")),
            f"{ettr:.2f}" if ettr is not None else "-", str(s.get("redone_steps", 0))]


def lines(doc: dict[str, Any], *, jobs: int = 20) -> Iterable[str]:
    """The table: in all, per user, per sweep, then the ``jobs`` largest jobs by allocation."""
    head = ["WHAT", "JOBS", "GPU-H", "PRODUCTIVE", "REDONE", "START-UP", "IDLE", "WAITED-H", "ETTR", "REDONE-STEPS"]
    rows = [_row("all", doc["total"])]
    rows += [_row(f"user {k}", v) for k, v in doc.get("users", {}).items()]
    rows += [_row(f"sweep {k}", v) for k, v in doc.get("sweeps", {}).items()]
    big = sorted(doc.get("jobs", {}).items(), key=lambda kv: -float(kv[1].get("allocated") or 0))[:jobs]
    rows += [_row(k, v) for k, v in big]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        yield "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

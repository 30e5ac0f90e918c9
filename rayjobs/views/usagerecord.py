"""``rayjobs usage`` from the laptop's copy of the per-job rows, when the cluster does not answer:
the same sums (per user, per sweep, in all) over the rows the laptop last got, filtered as the head
filters. Reads only."""

from __future__ import annotations

from typing import Any, Optional

PARTS = ("productive", "redone", "startup", "idle")
COUNTS = ("waited", "jobs", "redone_steps")


def _sum(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: sum(float(r.get(k) or 0) for r in rows) for k in (*PARTS, "waited")}
    out["jobs"] = sum(int(r.get("jobs") or 1) for r in rows)
    out["redone_steps"] = sum(int(r.get("redone_steps") or 0) for r in rows)
    out["allocated"] = sum(out[k] for k in PARTS)
    out["ettr"] = out["productive"] / out["allocated"] if out["allocated"] else None
    return out


def from_record(rows: dict[str, dict[str, Any]], *, user: Optional[str] = None, sweep: Optional[str] = None,
                since: Optional[float] = None) -> dict[str, Any]:
    """A :class:`rayjobs.contract.wire.UsageReply` (dict, ``source`` "record", ``at`` the oldest
    row's time) over the remembered ``rows`` of those jobs."""
    picked = {i: r for i, r in rows.items()
              if not (user and r.get("user") != user)
              and not (sweep and r.get("sweep") != sweep and not i.startswith(sweep))
              and not (since is not None and float(r.get("last_at") or 0) < since)}
    by: dict[str, dict[str, list[dict[str, Any]]]] = {"users": {}, "sweeps": {}}
    for r in picked.values():
        by["users"].setdefault(str(r.get("user") or "unknown"), []).append(r)
        if r.get("sweep"):
            by["sweeps"].setdefault(str(r["sweep"]), []).append(r)
    return {"total": _sum(list(picked.values())),
            "users": {k: _sum(v) for k, v in sorted(by["users"].items())},
            "sweeps": {k: _sum(v) for k, v in sorted(by["sweeps"].items())},
            "jobs": picked, "at": min((float(r.get("seen_at") or 0) for r in picked.values()), default=0.0),
            "source": "record"}

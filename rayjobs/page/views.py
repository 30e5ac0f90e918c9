"""What each page shows, built from recorded data: pure functions of JobViews, metrics steps, the
usage split and the cluster's nodes -- no I/O, no Ray (the fast tests render them from records).

The door's page routes (:mod:`rayjobs.door.routes.page`) read the same data as the API's routes
(:mod:`rayjobs.oncluster.jobviews`, ``run_steps``, :mod:`rayjobs.oncluster.usage`, the cluster's
nodes) and hand it here; the templates only lay these dicts out.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Iterable, Optional, Sequence

from rayjobs.contract.halving import Halving
from rayjobs.contract.meta import JobMeta
from rayjobs.contract.ranking import last_best, mark_best, metric_mode, swept

PAGE_SIZE = 50
ACTIVE = ("RUNNING", "PENDING", "QUEUED")
#: The curves a job page shows first, those it logged of them (else its first few metrics).
PREFERRED = ("critic/score/mean", "actor/kl_loss", "actor/pg_loss", "timing_s/step", "response_length/mean")
SHOWN_METRICS = 4


def num(v: Any) -> str:
    """A number as the CLI's tables show it ('-' for none)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return fmt_num(float(v)) if isinstance(v, (int, float)) else str(v)


def fmt_num(v: float) -> str:
    """The CLI tables' number format (``rayjobs.views.panel.fmt_num``; the head imports no laptop package)."""
    a = abs(v)
    if a and (a < 1e-3 or a >= 1e5):
        return f"{v:.3g}"
    return f"{v:.1f}" if a >= 100 else f"{v:.4g}"


def gpus_text(meta: dict[str, str]) -> str:
    """GPUs x nodes of a job's groups: ``4 x 2``; ``2+1`` for uneven groups; '-' for none."""
    groups = list(JobMeta.from_ray(meta).gpu_groups)
    if not groups:
        return "-"
    if len(set(groups)) == 1:
        return f"{groups[0]} \u00d7 {len(groups)}"
    return "+".join(str(g) for g in groups)


def ago(t: Optional[float], now: float) -> str:
    """How long ago ``t`` was, in the largest unit (``3m``, ``2h``)."""
    if not t:
        return "-"
    s = max(0, int(now - float(t)))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


# --------------------------------------------------------------------------- the queue
def queue_row(v: dict[str, Any], now: float) -> dict[str, Any]:
    """One line of the queue page."""
    m = v.get("metadata") or {}
    waiting = v["status"] == "QUEUED"
    return {"id": v["submission_id"], "user": m.get("user") or "-", "sweep": m.get("sweep") or "",
            "experiment": m.get("experiment") or "", "status": v["status"], "priority": m.get("priority") or "0",
            "gpus": gpus_text(m), "position": v.get("queue_position") if waiting else None,
            "why": (v.get("message") or "") if waiting else "", "held": v.get("held") or "",
            "since": ago(v.get("queued_at") if waiting else (v.get("admitted_at") or v.get("queued_at")), now),
            "step": v.get("checkpoint_step")}


def _queue_order(v: dict[str, Any]) -> tuple:
    # running first (oldest first), then the line in its order
    if v["status"] == "QUEUED":
        return (1, v.get("queue_position") or 0, "")
    return (0, v.get("admitted_at") or 0, v["submission_id"])


def queue_context(views: Sequence[dict[str, Any]], *, user: str = "", sweep: str = "", status: str = "",
                  page: int = 1, size: int = PAGE_SIZE, now: Optional[float] = None) -> dict[str, Any]:
    """The queue page from every job's view: running and waiting jobs (``status``: one status, or
    ``all``), filtered, one page of ``size`` (the page number clipped to those there are)."""
    now = time.time() if now is None else now
    want = () if status == "all" else ((status.upper(),) if status else ACTIVE)
    picked = [v for v in views if (not want or v["status"] in want)
              and (not user or (v.get("metadata") or {}).get("user") == user)
              and (not sweep or (v.get("metadata") or {}).get("sweep") == sweep)]
    picked.sort(key=_queue_order)
    page, pages, start = page_of(len(picked), page, size)
    metas = [v.get("metadata") or {} for v in views]
    return _queue_page([queue_row(v, now) for v in picked[start:start + size]], len(picked), page, pages, size,
                       (sum(v["status"] in ("RUNNING", "PENDING") for v in views),
                        sum(v["status"] == "QUEUED" for v in views)), metas, {"user": user, "sweep": sweep, "status": status})


def line_context(running: Sequence[dict[str, Any]], line: Sequence[Any], view_of: Callable[[Any], dict[str, Any]],
                 metas: Iterable[dict[str, str]], counts: tuple[int, int], *, user: str = "", sweep: str = "",
                 page: int = 1, size: int = PAGE_SIZE, now: Optional[float] = None) -> dict[str, Any]:
    """The queue page's default (running and waiting, filtered by user and sweep already) without
    every job's view: ``running`` the running jobs' views, ``line`` the waiting ones in line order,
    of which only those on the page shown are made views (``view_of``): a refresh with 10,000
    waiting builds 50. ``metas``: every job's metadata (the filters' choices); ``counts``: (running, waiting)."""
    now = time.time() if now is None else now
    first = sorted(running, key=_queue_order)
    page, pages, start = page_of(len(first) + len(line), page, size)
    lo, hi = max(0, start - len(first)), max(0, start + size - len(first))
    shown = first[start:start + size] + [view_of(x) for x in line[lo:hi]]
    return _queue_page([queue_row(v, now) for v in shown], len(first) + len(line), page, pages, size, counts, metas,
                       {"user": user, "sweep": sweep, "status": ""})


def page_of(total: int, page: int, size: int) -> tuple[int, int, int]:
    """(the page shown, clipped to 1..pages; how many pages; its first row's index)."""
    pages = max(1, math.ceil(total / size))
    page = min(max(1, page), pages)
    return page, pages, (page - 1) * size


def _queue_page(rows: list[dict[str, Any]], total: int, page: int, pages: int, size: int, counts: tuple[int, int],
                metas: Iterable[dict[str, str]], filters: dict[str, str]) -> dict[str, Any]:
    users, sweeps = set(), set()
    for m in metas:
        users.add(m.get("user") or "")
        sweeps.add(m.get("sweep") or "")
    return {"rows": rows, "total": total, "page": page, "pages": pages, "size": size, "running": counts[0],
            "waiting": counts[1], "filters": filters, "users": sorted(users - {""}), "sweeps": sorted(sweeps - {""}),
            "statuses": ["", "RUNNING", "PENDING", "QUEUED", "SUCCEEDED", "FAILED", "STOPPED", "all"]}


# --------------------------------------------------------------------------- one job
def actions(view: dict[str, Any], allowed: bool) -> list[str]:
    """The actions its viewer may take on this job now (``allowed``: the door's permissions let it
    control this job; the route checks again): ``stop``, ``checkpoint`` (stop at its next
    checkpoint), ``resume``. (A rerun is a new run whose config the laptop composes: the page names
    ``rayjobs rerun ID`` where the viewer may rerun, :func:`job_context`'s ``rerun``.)"""
    if view.get("foreign") or not allowed:
        return []
    if view.get("state") == "done":
        return ["resume"]
    if view["status"] == "RUNNING":
        return ["stop", "checkpoint"]
    return ["stop"]


def job_context(view: dict[str, Any], allowed: bool, now: Optional[float] = None) -> dict[str, Any]:
    """The job page's facts and the actions its viewer may take (``allowed``: see :func:`actions`)."""
    now = time.time() if now is None else now
    m = view.get("metadata") or {}
    row = queue_row(view, now)
    facts = [("status", view["status"]), ("user", row["user"]), ("sweep", row["sweep"] or "-"),
             ("experiment", row["experiment"] or "-"), ("priority", row["priority"]), ("GPUs \u00d7 nodes", row["gpus"]),
             ("attempts", ", ".join(str(a) for a in view.get("attempts") or []) or "-"),
             ("checkpoint step", num(view.get("checkpoint_step"))), ("queued", ago(view.get("queued_at"), now) + " ago"),
             ("preemptions", str(view.get("preemptions") or 0)), ("queued by", m.get("queued_by") or "-")]
    if view["status"] == "QUEUED":
        facts.insert(1, ("position", str(view.get("queue_position") or "-")))
    return {"id": view["submission_id"], "status": view["status"], "facts": facts, "message": view.get("message") or "",
            "cause": view.get("cause") or "", "halved": (view.get("halved") or {}).get("text") or "",
            "actions": actions(view, allowed), "live": view.get("state") != "done", "sweep": m.get("sweep") or "",
            # a rerun's config is composed where the job was submitted (its ledger): the page names the command
            "rerun": bool(allowed and view.get("state") == "done" and not view.get("foreign"))}


def curves(steps: Sequence[dict[str, Any]], wanted: Sequence[str] = ()) -> dict[str, Any]:
    """uPlot's data of a job's metrics steps (``{step, data}``): the x axis and one series per
    metric shown -- ``wanted``, else the preferred ones it logged, else its first few."""
    names = sorted({k for s in steps for k, v in (s.get("data") or {}).items() if isinstance(v, (int, float))})
    shown = [n for n in wanted if n in names] or [n for n in PREFERRED if n in names] or names[:SHOWN_METRICS]
    xs = [int(s["step"]) for s in steps]
    series = {n: [_finite((s.get("data") or {}).get(n)) for s in steps] for n in shown}
    return {"x": xs, "series": series, "metrics": names, "shown": shown}


def _finite(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None


# --------------------------------------------------------------------------- a sweep
def rank_metric(views: Sequence[dict[str, Any]], logged: Iterable[str]) -> str:
    """The metric a sweep is ranked by: its halving's metric, else the val-core reward, else the score."""
    for v in views:
        text = (v.get("metadata") or {}).get("halving")
        h = Halving.from_json(text) if text else None
        if h is not None:
            return h.metric
    logged = list(logged)
    vals = [n for n in logged if n.startswith("val-core/")]
    return vals[0] if vals else "critic/score/mean"


def sweep_context(views: Sequence[dict[str, Any]], steps: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The sweep page: one row per point (its swept values, status, steps, last/best of the ranking
    metric, the best marked), all points' curves of that metric on one chart, its halving rungs."""
    logged = {k for ss in steps.values() for s in ss for k in (s.get("data") or {})}
    rank = rank_metric(views, logged)
    keys, values = swept([v.get("metadata") or {} for v in views])
    rows = []
    for v, vals in zip(views, values):
        jid = v["submission_id"]
        series = [[s["step"], s["data"][rank]] for s in steps.get(jid, []) if _finite((s.get("data") or {}).get(rank)) is not None]
        rows.append({"id": jid, "point": [vals.get(k) or "-" for k in keys], "status": v["status"],
                     "step": max((s["step"] for s in steps.get(jid, [])), default=None),
                     "metrics": {rank: last_best(series, metric_mode(rank))}, "best": False,
                     "rungs": v.get("rungs") or {}, "halved": v.get("halved")})
    mark_best(rows, rank)
    for r in rows:
        s = r["metrics"][rank]
        r.update(last=num(s["last"]) if s else "-", best_value=f"{num(s['best'])}@{s['best_step']}" if s else "-")
    rungs = sorted({int(k) for r in rows for k in r["rungs"]})
    chart = {"x": sorted({s["step"] for ss in steps.values() for s in ss}), "series": {}}
    for v in views:
        by_step = {s["step"]: _finite((s.get("data") or {}).get(rank)) for s in steps.get(v["submission_id"], [])}
        chart["series"][v["submission_id"]] = [by_step.get(x) for x in chart["x"]]
    return {"swept": keys, "rows": rows, "rank": rank, "rungs": rungs, "chart": chart,
            "halved": [r for r in rows if r["halved"]]}


# --------------------------------------------------------------------------- the team
def usage_rows(usage: dict[str, Any]) -> list[dict[str, Any]]:
    """Per user (then all): GPU-hours productive, redone, start-up, idle, allocated; hours waited; ETTR."""
    def row(name: str, u: dict[str, Any]) -> dict[str, Any]:
        hours = {k: num(round(float(u.get(k) or 0) / 3600, 2)) for k in ("productive", "redone", "startup", "idle",
                                                                         "allocated")}
        ettr = u.get("ettr")
        return {"user": name, **hours, "waited": num(round(float(u.get("waited") or 0) / 3600, 2)),
                "jobs": u.get("jobs") or 0, "ettr": f"{100 * ettr:.0f}%" if ettr is not None else "-"}

    return [row(n, u) for n, u in (usage.get("users") or {}).items()] + [row("all", usage.get("total") or {})]


def gpu_grid(nodes: Sequence[dict[str, Any]], held: dict[str, dict[str, list[float]]],
             owners: dict[str, str]) -> list[dict[str, Any]]:
    """Nodes x GPUs: per node its GPUs, each held by a job (its user and id) or free. ``nodes``:
    ``{id, ip, gpus, free_gpus}``; ``held``: per running job, [GPUs, CPUs] it holds per node id;
    ``owners``: job id -> user. GPUs Ray counts used but no queued job holds show as ``other``."""
    out = []
    for n in nodes:
        cells: list[dict[str, str]] = []
        for job_id, per_node in sorted(held.items()):
            g = int(round((per_node.get(n["id"]) or [0, 0])[0]))
            cells += [{"user": owners.get(job_id, "?"), "job": job_id}] * g
        total = int(round(float(n.get("gpus") or 0)))
        used = total - int(round(float(n.get("free_gpus") or 0)))
        cells += [{"user": "other", "job": ""}] * max(0, used - len(cells))
        cells = cells[:total] + [{"user": "", "job": ""}] * max(0, total - len(cells))
        out.append({"id": n["id"], "ip": n.get("ip") or "", "gpus": total, "free": sum(not c["user"] for c in cells),
                    "cells": cells})
    return out

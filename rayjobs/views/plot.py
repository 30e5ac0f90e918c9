"""``rayjobs plot``: one PNG with a curve per job over steps, legend = each job's sweep overrides.

Data per job: verl's metrics JSONL (``<run_dir>/metrics.<attempt>.jsonl``, attempts merged so a
resumed attempt replaces the steps it redid) when that dir is readable here, else the step lines
of the job's log, streamed (constant memory; an ended job's are then kept), else -- the cluster
gone, the log with it -- the copy the job left in the local record (``rayjobs.ledger``). :func:`collect` returns the data (tests check it;
``--json`` prints it); :func:`render` draws it with matplotlib (optional extra ``rayjobs[plot]``).
"""

from __future__ import annotations

import math
from typing import Callable, Any, Optional, Sequence

from rayjobs.views import metricfiles
from rayjobs.errors import ConfigError, RayjobsError, did_you_mean
from rayjobs.shared import TERMINAL
from rayjobs.contract.wire import JobView
from rayjobs.views.jobrows import label_of

DEFAULT_METRIC = "critic/score/mean"


def history(dash: Any, job: JobView) -> tuple[dict[int, dict[str, float]], str]:
    """(history, source) for one job: the JSONL if readable here, else its log, else (no cluster,
    no log any more) the copy an ended job left in the local record (``local``); through a team's
    door, the files as the head reads them (``GET /v1/jobs/{id}/metrics``; a laptop rarely mounts them)."""
    door = getattr(dash, "door", None)
    if door is not None:
        got = door.metrics(job.submission_id)
        if got.source != "none":
            return {s.step: s.data for s in got.steps}, "jsonl"
    files = metricfiles.jsonl_files(job.meta.run_dir or None)
    if files:
        merged = metricfiles.merge_attempts(metricfiles.read_jsonl(f) for f in files)
        # The runner creates each attempt's file before verl starts; a trainer stopped before
        # verl's file logger flushed leaves it empty while its log has the steps.
        if merged:
            return merged, "jsonl"
    kept = kept_history(job)
    if dash is None or not job.driver_node_id:
        return (kept, "local") if kept is not None else ({}, "log")
    try:
        h = metricfiles.history_from_log(dash, job)
    except RayjobsError:
        if kept is None:
            raise
        return kept, "local"
    return (h, "log") if h or kept is None else (kept, "local")


def kept_history(job: JobView) -> Optional[dict[int, dict[str, float]]]:
    """The metrics kept in the local record for an ended job (None if none were kept)."""
    from rayjobs import ledger

    jid = job.submission_id
    if not (job.status in TERMINAL or job.from_record):
        return None
    doc = ledger.kept(jid)
    if doc is None or not doc.get("metrics_from"):
        return None
    return metricfiles.merge_attempts(metricfiles.read_jsonl(f) for f in metricfiles.jsonl_files(str(ledger.run_dir(jid))))


def labels(jobs: Sequence[JobView]) -> list[str]:
    """Legend names: sweep overrides (``kl_coef=0.01``), else the user's overrides, else the id; unique."""
    raw = [label_of(list(j.meta.sweep_overrides), list(j.meta.overrides)) or j.submission_id for j in jobs]
    out = []
    for j, label in zip(jobs, raw):
        out.append(label if raw.count(label) == 1 else f"{label} ({j.submission_id})")
    return out


def collect(dash: Any, jobs: Sequence[JobView], metric_names: Optional[Sequence[str]] = None,
            val: bool = True, read: Optional[Callable[[Sequence[Any], list], None]] = None) -> dict[str, Any]:
    """The plot's data: ``{"metrics": [...], "jobs": [{"id", "label", "source", "series": {m: [[step, v], ...]}}]}``.

    Without ``metric_names``: critic/score/mean; with ``val``, plus every ``val-core/*`` key seen.
    ``read(jobs, histories)`` is told what was read (the library keeps the ended jobs' curves).
    """
    hists = [history(dash, j) for j in jobs]
    if read is not None and dash is not None:
        read(jobs, hists)
    names = list(metric_names or [DEFAULT_METRIC])
    check_metrics(metric_names or [], [h for h, _ in hists])
    if val:
        seen = sorted({k for h, _ in hists for d in h.values() for k in d if k.startswith("val-core/")})
        names += [k for k in seen if k not in names]
    out_jobs = []
    for j, label, (h, src) in zip(jobs, labels(jobs), hists):
        series = {m: [[s, d[m]] for s, d in h.items() if m in d and math.isfinite(d[m])] for m in names}
        out_jobs.append({"id": j.submission_id, "label": label, "source": src, "series": series,
                         "steps": len(h), "status": j.status})
    logged = sorted({k for h, _ in hists for d in h.values() for k in d})
    return {"metrics": names, "jobs": out_jobs, "logged": logged}


def check_metrics(wanted: Sequence[str], hists: Sequence[dict[int, dict[str, float]]]) -> None:
    """A metric no job logged, where the jobs did log steps, is a typo: exit 2 with the closest names."""
    seen = {k for h in hists for d in h.values() for k in d}
    if not seen:
        return  # nothing logged yet: any name may still come
    for m in wanted:
        if m not in seen:
            shown = sorted(seen)
            more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
            raise ConfigError(f"no job logged the metric {m!r}{did_you_mean(m, seen)}; they logged: "
                              f"{', '.join(shown[:8])}{more}")


def render(data: dict[str, Any], out: str, title: Optional[str] = None) -> str:
    """Draw ``data`` (from :func:`collect`) into the PNG ``out``: one panel per metric."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ConfigError("plotting needs matplotlib: pip install 'rayjobs[plot]' (or pip install matplotlib)") from e
    names = [m for m in data["metrics"] if any(j["series"].get(m) for j in data["jobs"])]
    if not names:
        wanted = ", ".join(data["metrics"])
        if not any(j.get("steps") for j in data["jobs"]):  # queued or starting: no metric to pick yet
            raise RayjobsError(f"none of the jobs has logged a step yet ({', '.join(sorted({str(j.get('status')) for j in data['jobs']}))}): "
                               f"plot again once they train (`rayjobs tail ID` follows one)")
        logged = list(data.get("logged") or [])
        more = f" and {len(logged) - 8} more" if len(logged) > 8 else ""
        raise RayjobsError(f"none of the jobs logged {wanted} yet; pick another with --metric: they logged "
                           f"{', '.join(logged[:8])}{more}")
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 3.6 * len(names)), squeeze=False, sharex=True)
    for ax, m in zip(axes[:, 0], names):
        for j in data["jobs"]:
            pts = j["series"].get(m) or []
            if not pts:  # still in the legend, so a sweep's queued or starting points are not lost
                note = _unlogged(j, m)
                ax.plot([], [], "x", color="0.6", label=f"{j['label']} ({note})")
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            style = "o-" if len(pts) <= 20 or m.startswith("val-") else "-"
            ax.plot(xs, ys, style, label=j["label"], markersize=4, linewidth=1.5)
        ax.set_ylabel(m, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _unlogged(job: dict[str, Any], metric: str) -> str:
    """Why a job has no points for ``metric``: it logged no steps (yet), or steps without it."""
    ended = job.get("status") in TERMINAL  # then not "yet"
    if job.get("steps"):
        return f"{job['steps']} steps, no {metric}" + (f", {job['status']}" if ended else "")
    return f"nothing logged, {job['status']}" if ended else "nothing logged yet"

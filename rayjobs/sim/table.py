"""Policies side by side: the reports of :mod:`rayjobs.sim.metrics` as a table (Markdown or plain
columns), the issue's targets checked against the best baseline, and the CDF plot of waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from rayjobs.sim.trace import KINDS

#: The baselines the targets compare the queue with.
BASELINES = ("fifo", "priority_hol", "easy_backfill", "kueue")

_COLS = (("utilisation", "util"), ("utilisation_held", "held"), ("goodput", "goodput"), ("mean_wait_s", "mean wait"),
         *((f"p95:{k}", f"p95 {k}") for k in KINDS), ("mean_jct_s", "mean JCT"), ("jain", "Jain"),
         ("rho_mean", "ρ mean"), ("rho_worst", "ρ worst user"), ("redone_gpu_h", "redone GPU-h"),
         ("preemptions", "stops"), ("cpu_s", "sim s"))


def _cell(r: Mapping[str, Any], key: str) -> str:
    if key.startswith("p95:"):
        v = (r.get("p95_wait_s") or {}).get(key[4:])
    elif key.startswith("rho_"):
        v = (r.get("ftf_rho") or {}).get("mean" if key == "rho_mean" else "worst_user")
    elif key == "preemptions":
        v = (r.get("jobs") or {}).get("preemptions")
    elif key == "cpu_s":
        v = (r.get("sim") or {}).get("cpu_s")
    else:
        v = r.get(key)
    if v is None:
        return "-"
    if key.endswith("_s") or key.startswith("p95:"):
        return f"{v / 3600:.2f} h" if key != "cpu_s" else f"{v:.1f}"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def markdown(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """A Markdown table, a row per policy (waits and JCT in hours)."""
    head = "| policy | " + " | ".join(c for _, c in _COLS) + " |"
    rule = "|---|" + "---:|" * len(_COLS)
    rows = [f"| {name} | " + " | ".join(_cell(r, k) for k, _ in _COLS) + " |" for name, r in reports.items()]
    return "\n".join([head, rule, *rows])


def columns(reports: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The same table as plain aligned columns (a terminal)."""
    grid = [["policy", *(c for _, c in _COLS)]] + [[n, *(_cell(r, k) for k, _ in _COLS)] for n, r in reports.items()]
    widths = [max(len(row[i]) for row in grid) for i in range(len(grid[0]))]
    return ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            for row in grid]


def targets(reports: Mapping[str, Mapping[str, Any]], queue: str = "rayjobs") -> list[tuple[str, bool, str]]:
    """The issue's targets for ``queue`` against the best baseline: (target, met, the numbers)."""
    me, base = reports[queue], {n: reports[n] for n in BASELINES if n in reports}
    out: list[tuple[str, bool, str]] = []

    def best(key: str, pick: Any) -> tuple[str, float]:
        name = pick(base, key=lambda n: base[n][key])
        return name, base[name][key]

    n, v = best("mean_wait_s", min)
    out.append(("mean wait ≤ 0.7x the best baseline's", me["mean_wait_s"] <= 0.7 * v,
                f"{me['mean_wait_s'] / 3600:.2f} h vs {n} {v / 3600:.2f} h ({me['mean_wait_s'] / v:.2f}x)"))
    for key, label in (("utilisation", "utilisation"), ("goodput", "goodput"), ("jain", "Jain's index")):
        n, v = best(key, max)
        out.append((f"{label} ≥ the best baseline's", me[key] >= v, f"{me[key]:.3f} vs {n} {v:.3f}"))
    for k in KINDS:
        mine = (me["p95_wait_s"] or {}).get(k)
        got = {n: (r["p95_wait_s"] or {}).get(k) for n, r in base.items()}
        got = {n: x for n, x in got.items() if x is not None}
        if mine is None or not got:
            continue
        n = min(got, key=got.get)
        ok = mine <= 1.1 * got[n] or mine < 60.0
        out.append((f"p95 wait of {k} jobs ≤ 1.1x the best baseline's", ok,
                    f"{mine / 3600:.2f} h vs {n} {got[n] / 3600:.2f} h"))
    return out


def cdf_plot(waits: Mapping[str, Sequence[float]], path: str | Path, title: str = "") -> Optional[Path]:
    """The CDF of job waits per policy (log scale), as a PNG; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, w in waits.items():
        xs = sorted(max(1.0, x) for x in w)
        if xs:
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("wait (s, log; under 1 s drawn at 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

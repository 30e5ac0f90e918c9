"""Benchmark: a team's week on 16 nodes x 8 GPUs, replayed under the queue's rules and the policies a
team would use instead -- plain Ray's PENDING (fifo), SkyPilot's cluster queue (priority_hol), Slurm's
EASY backfill, Kueue's classic rules -- on the same trace, in one run, no Ray (rayjobs/sim).

    .venv/bin/python scripts/bench_team.py [--seed N] [--week standard|sweeps|multinode | --trace FILE]
                                           [--json] [--plot PNG] [--save-trace FILE] [--no-halving]
    .venv/bin/python scripts/bench_team.py --section      # every week, the "team" section of docs/benchmarks.md

``--json`` prints one JSON object, a key per policy, each with ``utilisation``, ``goodput``,
``mean_wait_s``, ``p95_wait_s`` (a key per job class), ``mean_jct_s``, ``jain``, ``redone_gpu_h`` (and
more: rayjobs/sim/metrics.py says what each is).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rayjobs.sim import policies, table, trace as tracefile, week  # noqa: E402
from rayjobs.sim.metrics import waits_of  # noqa: E402

#: The other seeds the section also runs the standard week with (the targets on weeks not tuned for).
OTHER_SEEDS = (1, 2, 3)


def load(a: argparse.Namespace) -> tracefile.Trace:
    if a.trace:
        return tracefile.read(a.trace)
    return week.generate(a.week, a.seed)


def run(tr: tracefile.Trace, names: list[str]) -> tuple[dict, dict]:
    """Every policy on the trace: (reports, waits per policy)."""
    reports, waits = {}, {}
    for name in names:
        rep, sim = policies.run(tr, name)
        reports[name], waits[name] = rep, waits_of(sim.lives.values())
    return reports, waits


def describe(tr: tracefile.Trace) -> str:
    kinds: dict[str, int] = {}
    for j in tr.jobs:
        kinds[j.cls] = kinds.get(j.cls, 0) + 1
    load_ = tr.offered_gpu_h() / (tr.gpus * 7 * 24)
    users = len({j.user for j in tr.jobs})
    return (f"{len(tr.jobs)} jobs of {users} users ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}); "
            f"{tr.offered_gpu_h():,.0f} GPU-hours asked for, left alone ({load_:.0%} of {tr.gpus} GPUs for a week)")


def one(a: argparse.Namespace) -> None:
    tr = load(a)
    names = list(policies.NAMES) + (list(policies.EXTRA) if a.no_halving else [])
    if a.save_trace:
        tracefile.write(tr, a.save_trace)
    reports, waits = run(tr, names)
    if a.plot:
        table.cdf_plot(waits, a.plot, f"{tr.name} (seed {tr.seed}): waits per policy")
    if a.json:
        print(json.dumps(reports, indent=2))
        return
    print(f"{tr.name}, seed {tr.seed}: {describe(tr)}")
    print("\n".join(table.columns(reports)))
    for what, ok, numbers in table.targets(reports):
        print(f"  {'met   ' if ok else 'MISSED'} {what}: {numbers}")


def section() -> None:
    """Every week at the fixed seed, the standard week at other seeds: docs/benchmarks.md's "team"."""
    sys.path.insert(0, str(REPO / "scripts"))
    import benchlib

    t0 = time.time()
    parts, summary = [], []
    for name in week.WEEKS:
        tr = week.generate(name, week.SEED)
        names = list(policies.NAMES) + list(policies.EXTRA)
        reports, waits = run(tr, names)
        if name == "standard":
            table.cdf_plot({n: w for n, w in waits.items() if n in policies.NAMES}, REPO / "docs/img/team-waits.png",
                           f"standard week (seed {week.SEED}): job waits per policy")
        met = table.targets(reports)
        parts.append(f"### The {name} week (seed {week.SEED}): {describe(tr)}\n\n{table.markdown(reports)}\n\n"
                     + "\n".join(f"- {'met' if ok else '**missed**'}: {what} ({numbers})" for what, ok, numbers in met))
    for seed in OTHER_SEEDS:
        reports, _ = run(week.generate("standard", seed), list(policies.NAMES))
        met = table.targets(reports)
        summary.append(f"| standard, seed {seed} | " + " | ".join(("met" if ok else "missed") + f" ({n})"
                                                                      for _, ok, n in met) + " |")
    head = "| trace | " + " | ".join(w for w, _, _ in table.targets(reports)) + " |"
    md = (f"## A team's week (issue 49) — `scripts/bench_team.py --section`\n\n"
          f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"{time.time() - t0:.0f} s for everything below.\n\n" + "\n\n".join(parts)
          + "\n\n### The standard week at other seeds (the targets, rayjobs against the best baseline)\n\n"
          + head + "\n|---|" + "---|" * (head.count("|") - 2) + "\n" + "\n".join(summary) + "\n")
    benchlib.write_section("team", md)
    print(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=week.SEED)
    ap.add_argument("--week", choices=week.WEEKS, default="standard")
    ap.add_argument("--trace", help="a trace file (JSON Lines; rayjobs/sim/trace.py says the format)")
    ap.add_argument("--json", action="store_true", help="one JSON object, a key per policy")
    ap.add_argument("--plot", help="write the CDF of waits per policy to this PNG")
    ap.add_argument("--save-trace", help="write the trace run to this file")
    ap.add_argument("--no-halving", action="store_true", help="also the queue's rules without halving")
    ap.add_argument("--section", action="store_true", help="every week; writes docs/benchmarks.md's team section")
    a = ap.parse_args()
    try:
        section() if a.section else one(a)
    except (tracefile.TraceError, ValueError) as e:
        print(f"bench_team: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()

"""Benchmark: preflight wall time per experiment and for a 20-point sweep (composition excluded).

Composes the PPO preset (one point) and a 20-point ``algorithm.kl_ctrl.kl_coef`` sweep once, builds
their JobSpecs, then times :func:`rayjobs.preflight.check_all` alone (the cost a submit adds),
in these states: verl helper cold (first submit after install/idle: imports verl), warm (the usual
case), warm + every config already seen (a resubmit), and without verl on the client (rayjobs' own
rules only). Also the whole ``python -m rayjobs.submit ... rayjobs.dry_run=true`` process with and
without preflight. Touches no cluster (the data files live in a private storage root, like the
embedded cluster's). Writes the "preflight" section of docs/benchmarks.md.

    .venv/bin/python scripts/bench_preflight.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import benchlib  # noqa: E402

PY = sys.executable


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    root = benchlib.isolated_home("rjp")
    work = root / "project"
    work.mkdir()
    os.chdir(work)
    storage = root / "storage"
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = storage / "data" / "gsm8k"
    d.mkdir(parents=True)
    for split in ("train", "test"):
        pq.write_table(pa.table({"data_source": ["openai/gsm8k"] * 8, "prompt": ["q"] * 8}), d / f"{split}.parquet")

    from rayjobs.submit import compose
    from rayjobs.preflight import checks
    from rayjobs.preflight import verlcheck
    from rayjobs.preflight import rules
    from rayjobs.submit import pipeline
    from rayjobs.preflight import helper

    base = ["+exp=ppo_gsm8k_qwen05b", f"rayjobs.storage={storage}", "trainer.logger=[console]"]
    t = time.perf_counter()
    one = [compose.compose(base)]
    compose_one = time.perf_counter() - t
    t = time.perf_counter()
    sweep = [compose.compose(base + [f"algorithm.kl_ctrl.kl_coef={0.001 * (i + 1):.3f}"]) for i in range(20)]
    compose_sweep = time.perf_counter() - t
    pipeline.run_preflight = lambda prepared: None  # build specs only; check_all is timed below
    p_one, p_sweep = pipeline.prepare(one), pipeline.prepare(sweep, sweep=True)

    def check(prepared) -> float:
        t0 = time.perf_counter()
        checks.check_all(prepared)
        return time.perf_counter() - t0

    have_verl = not verlcheck.missing_modules()
    rows = []
    load0 = os.getloadavg()[0]

    def fresh(key: str, r: int, n: int, scale: float):
        pts = [compose.compose(base + [f"{key}={scale * (1 + r * 100 + i):.8g}"]) for i in range(n)]
        return pipeline.prepare(pts, sweep=n > 1)

    def series(name: str, make) -> None:
        xs, shapes = [], 0
        for r in range(a.rounds):
            prepared = make(r)
            xs.append(check(prepared))
            shapes = checks.last_timing.get("verl_configs", 0)
        rows.append((f"{name}", xs, shapes))

    if have_verl:
        helper.stop_helper()
        time.sleep(1)
        rows.append(("single, verl helper cold (first submit: starts it, imports verl)", [check(p_one)],
                     checks.last_timing.get("verl_configs", 0)))
        # never-seen configs each round, so no cache helps
        series("single, warm helper (the usual submit)", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r + 50, 1, 1e-4))
        series("20-point kl_coef sweep, warm helper", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r, 20, 1e-5))
        series("20-point actor lr sweep, warm helper (20 shapes for verl: worst case)",
               lambda r: fresh("actor_rollout_ref.actor.optim.lr", r, 20, 1e-9))
        series("20-point sweep seen before (resubmit, same process)", lambda r: p_sweep)
    os.environ[verlcheck.MODE_ENV] = "off"
    series("single, without verl on the client (rayjobs' rules only)", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r + 70, 1, 1e-4))
    series("20-point kl_coef sweep, without verl on the client", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r + 90, 20, 1e-5))
    os.environ.pop(verlcheck.MODE_ENV)

    cli = [PY, "-m", "rayjobs.submit", *base, "rayjobs.dry_run=true"]
    e2e = benchlib.interleaved({"on": lambda: benchlib.timed(cli), "off": lambda: benchlib.timed(cli + ["rayjobs.preflight=false"])},
                               rounds=a.rounds)
    helper.stop_helper()

    med = benchlib.median
    lines = [
        "## Preflight",
        "",
        f"`scripts/bench_preflight.py --rounds {a.rounds}` on {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"verl {rules.verl_facts()['version']}, verl importable here: {'yes' if have_verl else 'no'}, "
        f"1-min load average {load0:.1f} at start / {os.getloadavg()[0]:.1f} at end (the machine is shared: "
        "loads above 2 inflate every number). "
        "Time of `checks.check_all` alone (composition excluded: it is shared with dry-run and measured "
        f"separately: one point {compose_one:.2f} s, 20 points {compose_sweep:.2f} s). Targets: <= 1.5 s per "
        "experiment, <= 4 s for a 20-point sweep.",
        "",
        "| case | median s | min s | max s | n | configs verl validated |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, xs, shapes in rows:
        lines.append(f"| {name} | {med(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} | {len(xs)} | {shapes} |")
    lines += ["", "Whole `python -m rayjobs.submit +exp=ppo_gsm8k_qwen05b rayjobs.dry_run=true` process (warm helper):", "",
              "| preflight | median s | min s | max s |", "|---|---:|---:|---:|"]
    for k, xs in e2e.items():
        lines.append(f"| {k} | {med(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |")
    md = "\n".join(lines)
    print(md)
    benchlib.write_section("preflight", md)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

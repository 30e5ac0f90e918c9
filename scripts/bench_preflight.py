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
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc, session, timing  # noqa: E402

PY = sys.executable
Row = tuple[str, list[float], int]  #: (case, seconds of each round, configs verl validated)


def data(storage: Path) -> None:
    """The files the preset reads (preflight checks they exist)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = storage / "data" / "gsm8k"
    d.mkdir(parents=True)
    for split in ("train", "test"):
        pq.write_table(pa.table({"data_source": ["openai/gsm8k"] * 8, "prompt": ["q"] * 8}), d / f"{split}.parquet")


def check_rows(base: list[str], rounds: int) -> tuple[list[Row], dict[str, float], bool]:
    """``checks.check_all`` alone in each state: the rows, the composition's own seconds, verl here?"""
    from rayjobs.preflight import checks, helper, verlcheck
    from rayjobs.submit import pipeline
    from rayjobs.config import compose

    t = time.perf_counter()
    one = [compose.compose(base)]
    compose_s = {"one": time.perf_counter() - t}
    t = time.perf_counter()
    sweep = [compose.compose(base + [f"algorithm.kl_ctrl.kl_coef={0.001 * (i + 1):.3f}"]) for i in range(20)]
    compose_s["sweep"] = time.perf_counter() - t
    pipeline.run_preflight = lambda prepared: None  # build specs only; check_all is timed below
    p_one, p_sweep = pipeline.prepare(one), pipeline.prepare(sweep, sweep=True)

    def check(prepared: Any) -> float:
        t0 = time.perf_counter()
        checks.check_all(prepared)
        return time.perf_counter() - t0

    def fresh(key: str, r: int, n: int, scale: float) -> Any:  # never-seen configs each round: no cache helps
        pts = [compose.compose(base + [f"{key}={scale * (1 + r * 100 + i):.8g}"]) for i in range(n)]
        return pipeline.prepare(pts, sweep=n > 1)

    rows: list[Row] = []

    def series(name: str, make: Callable[[int], Any]) -> None:
        xs = [check(make(r)) for r in range(rounds)]
        rows.append((name, xs, checks.last_timing.get("verl_configs", 0)))

    have_verl = not verlcheck.missing_modules()
    if have_verl:
        helper.stop_helper()
        time.sleep(1)
        rows.append(("single, verl helper cold (first submit: starts it, imports verl)", [check(p_one)],
                     checks.last_timing.get("verl_configs", 0)))
        series("single, warm helper (the usual submit)", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r + 50, 1, 1e-4))
        series("20-point kl_coef sweep, warm helper", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r, 20, 1e-5))
        series("20-point actor lr sweep, warm helper (20 shapes for verl: worst case)",
               lambda r: fresh("actor_rollout_ref.actor.optim.lr", r, 20, 1e-9))
        series("20-point sweep seen before (resubmit, same process)", lambda r: p_sweep)
    os.environ[verlcheck.MODE_ENV] = "off"
    series("single, without verl on the client (rayjobs' rules only)", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r + 70, 1, 1e-4))
    series("20-point kl_coef sweep, without verl on the client", lambda r: fresh("algorithm.kl_ctrl.kl_coef", r + 90, 20, 1e-5))
    os.environ.pop(verlcheck.MODE_ENV)
    return rows, compose_s, have_verl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = doc.parse(ap, {"rounds": 1})
    with session.run("rjp", project=False, network=False) as r:
        from rayjobs.preflight import helper, rules

        base = ["+exp=ppo_gsm8k_qwen05b", f"rayjobs.storage={r.root / 'storage'}", "trainer.logger=[console]"]
        data(r.root / "storage")
        load0 = os.getloadavg()[0]
        rows, compose_s, have_verl = check_rows(base, a.rounds)
        cli = [PY, "-m", "rayjobs.submit", *base, "rayjobs.dry_run=true"]
        e2e = timing.interleaved({"on": lambda: timing.timed(cli),
                                  "off": lambda: timing.timed(cli + ["rayjobs.preflight=false"])}, rounds=a.rounds)
        helper.stop_helper()
    doc.publish(a, "preflight", f"""## Preflight

`scripts/bench_preflight.py --rounds {a.rounds}` on {os.cpu_count()} cores, Python {platform.python_version()}, \
verl {rules.verl_facts()['version']}, verl importable here: {'yes' if have_verl else 'no'}, \
1-min load average {load0:.1f} at start / {os.getloadavg()[0]:.1f} at end (the machine is shared: \
loads above 2 inflate every number). Time of `checks.check_all` alone (composition excluded: it is shared with \
dry-run and measured separately: one point {compose_s['one']:.2f} s, 20 points {compose_s['sweep']:.2f} s). \
Targets: <= 1.5 s per experiment, <= 4 s for a 20-point sweep.

{doc.table(["case", "median s", "min s", "max s", "n", "configs verl validated"],
           [(name, *doc.stats(xs, 3, every=False), len(xs), shapes) for name, xs, shapes in rows])}

Whole `python -m rayjobs.submit +exp=ppo_gsm8k_qwen05b rayjobs.dry_run=true` process (warm helper):

{doc.table(["preflight", "median s", "min s", "max s"], [(k, *doc.stats(xs, every=False)) for k, xs in e2e.items()])}""")


if __name__ == "__main__":
    main()

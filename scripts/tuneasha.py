"""Ray Tune's ``ASHAScheduler`` over bench_halving's curves, in one driver on the same cluster.

The comparison the halving issue asks for: the same 27 (offset, peak) points in the same order as
the Hydra sweep, the same step time and steps, one GPU a trial, Tune's asynchronous successive
halving (``grace_period`` g, ``reduction_factor`` rf: rungs g, g*rf, ... below ``max_t``; at a rung a
trial stops when its value is below the (1 - 1/rf) percentile of the values recorded there before it).
Each trial is a function that sleeps a step, then reports fake_verl.py's score for that step: no
verl stand-in, no queue, no checkpoint, so a Tune trial pays only Tune's own start and stop.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

Point = tuple[float, int]


def rungs_of(grace: int, rf: int, max_t: int) -> list[int]:
    """Tune's ASHA milestones below ``max_t`` for ``grace`` and ``rf`` (ascending)."""
    out, r = [], grace
    while r < max_t:
        out.append(r)
        r *= rf
    return out


def run_tune(gcs: str, points: Sequence[Point], *, steps: int, step_s: float, grace: int, rf: int,
             metric: str, storage: Path) -> dict[str, Any]:
    """Run the grid under Tune's ASHA on the Ray cluster at ``gcs``; per trial: its point, the steps it
    reported, its first and last report times (epoch s) and whether ASHA stopped it early; the fit's wall time."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    def trial(config: dict[str, Any]) -> None:  # nested: cloudpickle ships it by value to the workers
        offset, peak = config["point"]
        n = config["steps"]
        t0 = time.time()
        for step in range(1, n + 1):
            time.sleep(config["step_s"])
            value = 0.1 + 0.8 * min(step, peak) / n - 0.05 * max(0, step - peak) + offset  # fake_verl.py's formula
            tune.report({config["metric"]: value, "t0": t0, "t": time.time()})

    ray.init(address=gcs, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    try:
        sched = ASHAScheduler(time_attr="training_iteration", metric=metric, mode="max", max_t=steps,
                              grace_period=grace, reduction_factor=rf)
        space = {"point": tune.grid_search([list(p) for p in points]), "steps": steps, "step_s": step_s,
                 "metric": metric}
        tuner = tune.Tuner(tune.with_resources(trial, {"cpu": 1, "gpu": 1}), param_space=space,
                           tune_config=tune.TuneConfig(scheduler=sched),
                           run_config=tune.RunConfig(name=f"asha-{grace}-{rf}", storage_path=str(storage), verbose=0))
        t = time.monotonic()
        grid = tuner.fit()
        took = time.monotonic() - t
        trials = []
        for res in grid:
            m = res.metrics or {}
            offset, peak = res.config["point"]
            it = int(m.get("training_iteration") or 0)
            trials.append({"point": [float(offset), int(peak)], "steps": it, "t0": m.get("t0"), "t1": m.get("t"),
                           "value": m.get(metric),
                           "error": str(res.error)[:300] if res.error else None, "stopped_early": it < steps})
        return {"grace": grace, "rf": rf, "rungs": rungs_of(grace, rf, steps), "took_s": took, "trials": trials}
    finally:
        ray.shutdown()


def summarize(raw: dict[str, Any], steps: int, step_s: float, final: Callable[[Point], float]) -> dict[str, Any]:
    """One Tune run's figures: GPU-s (each trial's function entry -> its last report, 1 GPU: a lower
    bound of what it held, Tune's own trial start and stop left out), steps trained, the best point's fate."""
    trials = raw["trials"]
    by = {(float(t["point"][0]), int(t["point"][1])): t for t in trials}
    best = max(by, key=final)
    gpu_s = sum((t["t1"] - t["t0"]) for t in trials if t["t0"] and t["t1"])
    return {"rungs": raw["rungs"], "grace": raw["grace"], "rf": raw["rf"], "took_s": raw["took_s"], "gpu_s": gpu_s,
            "steps": sum(t["steps"] for t in trials), "stopped": sum(1 for t in trials if t["stopped_early"]),
            "finished": sum(1 for t in trials if not t["stopped_early"]), "errors": sum(1 for t in trials if t["error"]),
            "best_kept": by[best]["steps"] == steps, "by": by,
            "mismatch": sum(1 for p, t in by.items() if t["steps"] == steps and abs(float(t["value"] or -9) - final(p)) > 1e-9)}

"""Benchmark: a 50-point sweep from one command vs 50 x ``ray job submit --no-wait`` (issue 4).

Both submit the same 50 jobs (the entrypoints and metadata of the sweep's own dry-run) with the
same working_dir to the same warm local Ray head, inside a private network namespace. The head
runs with ``RAYJOBS_QUEUE=0`` and the jobs are 1-step runs of the verl stand-in, so what is left
of them after submission is cheap; between rounds the benchmark waits until every job ended.
Also times where a sweep's per-point milliseconds go (in-process), and the launcher's shared
composition against composing each point from a plain container (the previous path).

Then the big sweep (issue 30): ``--big`` points (default 1,000) from one command to a head whose
queue is on (they wait there as records; none is a Ray job until it fits), wall time until the
last id is on stdout, and ``rayjobs list`` over them.

    sudo .venv/bin/python scripts/bench_sweep.py [--points 50] [--rounds 3] [--big 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import pickle
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc, session, timing  # noqa: E402
from bench.timing import median  # noqa: E402

from clusterops import wait_until  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent
OURS = "python -m rayjobs.submit -m (one command)"
FLOOR_LABEL = "floor: Ray's job SDK alone, one process, 16 threads"
#: The floor: one Python process that only imports Ray's job SDK and sends the same requests in 16
#: threads (no composition, no checks, no ledger): Ray's share.
FLOOR = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from rayjobs.client import embedded
from rayjobs.client.dashboard import Dashboard
reqs = [{k: v for k, v in r.items() if k != "submission_id"} for r in json.load(open(sys.argv[1]))]
c = Dashboard(embedded.ensure(quiet=True)).sdk
first = c.submit_job(**reqs[0])  # uploads the working_dir; the others name its package
uri = c.get_job_info(first).runtime_env["working_dir"]
def one(r):
    return c.submit_job(**dict(r, runtime_env=dict(r["runtime_env"], working_dir=uri)))
with ThreadPoolExecutor(16) as pool:
    list(pool.map(one, reqs[1:]))
"""


def wait_idle(client: Any, timeout: float = 900) -> None:
    """Until every job Ray has ended (bounded)."""
    wait_until(lambda: all(str(j.status) in ("SUCCEEDED", "FAILED", "STOPPED") for j in client.list_jobs()),
               timeout, "every job to end", every=1.0)


# --------------------------------------------------------------------------- where a point's time goes
def phase_ms(sweep_args: list[str], n: int) -> dict[str, float]:
    """Milliseconds per point of each phase, from the second of two in-process dry-runs of the sweep."""
    from rayjobs.submit import app, pipeline
    from rayjobs.config import compose

    compose.make_hydra()  # Hydra's plugin scan (re)loads the launcher module: patch the loaded one
    launcher = sys.modules["hydra_plugins.rayjobs_launcher.rayjobs_launcher"]
    spent: dict[str, float] = {}

    def wrap(owner: Any, name: str, label: str) -> None:
        f = getattr(owner, name)

        def g(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t
        setattr(owner, name, g)

    wrap(launcher.RayjobsLauncher, "compose_points", "composition (launcher, shared)")
    wrap(pipeline, "build_spec", "JobSpec (spec.build_spec)")
    wrap(pipeline, "run_preflight", "preflight (preflight.check_all)")
    wrap(pipeline, "dry_run_report", "dry-run report (JSON)")
    for _ in range(2):  # the first warms the verl helper and the caches
        spent.clear()
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            app._main(["-m", *sweep_args, "rayjobs.dry_run=true"])
    spent["whole dry-run sweep, in-process"] = time.perf_counter() - t
    return {k: v * 1000 / n for k, v in spent.items()}


def copy_ms() -> dict[str, float]:
    """Milliseconds of a point's copies, now against before: of the base config, its plain copy, its YAML."""
    from omegaconf import OmegaConf

    from rayjobs.config import compose
    from rayjobs.config import configcache as rplain
    from rayjobs.submit import pipeline as rsubmit

    def per(fn: Callable[[], Any], k: int = 10) -> float:
        t = time.perf_counter()
        for _ in range(k):
            fn()
        return (time.perf_counter() - t) * 1000 / k

    c = compose.compose(["+exp=fake_ppo"])
    blob, plain = pickle.dumps(c.cfg), OmegaConf.to_container(c.cfg, resolve=False)
    point = pickle.loads(blob)
    OmegaConf.set_readonly(point, False)
    OmegaConf.update(point, "trainer.total_epochs", 7, merge=False)
    return {
        "copy of the base config: unpickle (now)": per(lambda: pickle.loads(blob)),
        "copy of the base config: OmegaConf.create(deepcopy) (before)":
            per(lambda: OmegaConf.create(copy.deepcopy(plain), flags={"struct": True})),
        "a point's plain copy: derived from the base's (now)":
            per(lambda: rplain.derive_raw(plain, point, ["trainer.total_epochs"]), 50),
        "a point's plain copy: OmegaConf.to_container (before; was made 3x per point)":
            per(lambda: OmegaConf.to_container(point, resolve=False)),
        "ledger YAML of a point: libyaml dump of its plain copy (now)": per(lambda: rsubmit._yaml(c.cfg)),
        "ledger YAML of a point: OmegaConf.to_yaml (before)": per(lambda: OmegaConf.to_yaml(c.cfg, resolve=False))}


# --------------------------------------------------------------------------- side by side
def versus(r: session.Run, sweep: list[str], n: int, rounds: int) -> tuple[dict[str, list[float]], int]:
    """The one command, ``n`` x ``ray job submit`` (once) and the floor, interleaved on one warm embedded
    head with its queue off; every job ended before the next measurement. (walls, jobs Ray got)."""
    from rayjobs.client import embedded
    from rayjobs.client.dashboard import Dashboard

    env, work = dict(os.environ), str(r.work)
    ours = [PY, "-m", "rayjobs.submit", "-m", *sweep]
    rec = embedded.start(quiet=True)
    try:
        client = Dashboard(embedded.target(rec)).sdk
        dry = subprocess.run(ours + ["rayjobs.dry_run=true"], cwd=work, env=env, capture_output=True, text=True, check=True)
        reqs = [p["submit_job"] for p in json.loads(dry.stdout)]
        ray_env = dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=rec["token_path"])
        raw = [[str(BIN / "ray"), "job", "submit", "--no-wait", "--address", rec["dashboard"], "--working-dir", ".",
                "--runtime-env-json", json.dumps({"excludes": q["runtime_env"]["excludes"]}),
                "--metadata-json", json.dumps(q["metadata"]), "--"] + shlex.split(q["entrypoint"]) for q in reqs]
        (r.root / "reqs.json").write_text(json.dumps(reqs))
        run = {OURS: lambda: timing.timed(ours, env=env, cwd=work),
               f"{n} x ray job submit --no-wait": lambda: sum(timing.timed(c, env=ray_env, cwd=work) for c in raw),
               FLOOR_LABEL: lambda: timing.timed([PY, "-c", FLOOR, str(r.root / "reqs.json")], env=env, cwd=work)}
        timing.timed(ours[:3] + ["+exp=fake_ppo", "+fake.steps=1"], env=env, cwd=work)  # warm: upload, caches
        wait_idle(client)
        res: dict[str, list[float]] = {k: [] for k in run}
        for which in [OURS, f"{n} x ray job submit --no-wait"] + [FLOOR_LABEL, OURS] * (rounds - 1) + [FLOOR_LABEL]:
            res[which].append(run[which]())
            wait_idle(client)
        return res, len(client.list_jobs())
    finally:
        embedded.stop()


def big_sweep(r: session.Run, n: int, rounds: int) -> dict[str, Any]:
    """``n`` points from one command to a head with its queue on: wall, CPU, ids on stdout; then ``rayjobs list``."""
    from rayjobs.client import embedded

    os.environ.pop("RAYJOBS_QUEUE", None)
    env, work = dict(os.environ), str(r.work)
    embedded.start(num_gpus=1, num_cpus=8, quiet=True)  # one point at a time fits: the rest wait as records
    out: dict[str, Any] = {"walls": [], "cpus": [], "ids": [], "list": [], "load": []}
    try:
        for k in range(rounds):
            out["load"].append(os.getloadavg()[0])
            wall, cpu, ids = timing.command_cpu([PY, "-m", "rayjobs.submit", "-m", "+exp=fake_ppo", "+fake.steps=1",
                                                 "+fake.step_s=0", f"trainer.total_epochs=range({k * n + 1},{(k + 1) * n + 1})",
                                                 "rayjobs.priority=-1"], env=env, cwd=work, timeout=600)
            out["walls"].append(wall)
            out["cpus"].append(cpu)
            out["ids"].append(len(ids.split()))
            out["list"].append(timing.timed([str(BIN / "rayjobs"), "list", "--json"], env=env, cwd=work))
    finally:
        embedded.stop()
    return out


# --------------------------------------------------------------------------- the sections
def big_md(n: int, big: dict[str, Any]) -> str:
    """The big sweep's section (``--only-big``)."""
    bw = median(big["walls"])
    rows = [(i + 1, f"{ld:.1f}", f"{w:.2f}", f"{c:.2f}", k, f"{x:.2f}") for i, (ld, w, c, k, x) in
            enumerate(zip(big["load"], big["walls"], big["cpus"], big["ids"], big["list"]))]
    return f"""## A 1,000-point sweep from one command (issue 30) — `scripts/bench_sweep.py --only-big`

`python -m rayjobs.submit -m +exp=fake_ppo trainer.total_epochs=range(..)` ({n} points, a new range per
run), to an embedded head in a private network namespace whose queue is on (1 GPU: one point runs, the
rest wait as records). {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end.

{doc.table(["run", "load average before", "wall s", "CPU s", "ids on stdout", "`rayjobs list --json` s"], rows)}

- **Median {bw:.2f} s** wall (target ≤ 10 s: {doc.met(bw, 10)}), median
  {median(big["cpus"]):.2f} s of CPU for the whole command ({median(big["cpus"]) * 1000 / n:.1f} ms a point): a point
  that differs from the sweep's base in plain leaves only is derived from it (`config/derive.py`: its
  value checked on a scratch copy of the base, its JobSpec the base's values but for those leaves, no
  config tree of its own); one request carries all {n} to the queue. On a loaded machine the wall
  time follows the load, not the CPU.
- An earlier run of the same code, under a load average of 8-14: 6.59 s and 29.90 s wall at 1.9 and
  2.3 s CPU (the same CPU, the wall the load's). Before the derived points (quiet machine, load 3.3):
  33.61 and 39.47 s wall at 29.9 and 30.7 s CPU (median 36.5 s).
"""


def sweep_md(n: int, res: dict[str, list[float]], submitted: int, prof: dict[str, float]) -> str:
    """The section of the 50-point sweep, side by side."""
    m = {k: median(v) for k, v in res.items()}
    ours_s, raw_s, floor_s = m[OURS], m[f"{n} x ray job submit --no-wait"], m[FLOOR_LABEL]
    if ours_s >= floor_s:
        versus_floor = f"rayjobs adds {ours_s - floor_s:.2f} s for Hydra, composing and checking {n} points, and the ledger."
    else:
        versus_floor = (f"rayjobs takes {floor_s - ours_s:.2f} s less ({ours_s / floor_s:.2f}x): one request carries all {n} "
                        f"points to the queue's API, where the floor makes {n} Jobs API calls (and imports Ray's SDK).")
    rows = [(f"`{k}`", *doc.stats(v, every=False), len(v)) for k, v in res.items()]
    return f"""## Sweep submission (issue 4) — `scripts/bench_sweep.py`

{n} points (`trainer.total_epochs=range(1,{n + 1})` of the `fake_ppo` preset) from one
`python -m rayjobs.submit -m` against {n} sequential `ray job submit --no-wait` of the same
entrypoints, metadata and working_dir, to one warm local Ray head in a private network namespace
({platform.machine()}, {os.cpu_count()} cores shared with other work, Python {platform.python_version()}).
Cold processes; every job ended before the next measurement ({submitted} jobs submitted in all).

{doc.table(["command", "median s", "min s", "max s", "runs"], rows)}

- **{raw_s / ours_s:.1f}x faster** than {n} x `ray job submit` (target ≥ 20x); **{ours_s:.2f} s** in total (target < 2 s).
- The floor row sends the same {n} requests from one process with nothing of rayjobs but the
  client: {floor_s:.2f} s is Ray's share on this machine (SDK import, client, the dashboard's
  work per job); {versus_floor}
- Where a point's time goes (the second of two in-process dry-runs of the same sweep, ms per point):

{doc.table(["phase", "ms per point"], [(k, f"{v:.1f}") for k, v in prof.items()])}

The first point is the config Hydra composed for the sweep with the first values set; every other
point is an unpickled copy of it with the swept keys set, and its plain copy (hash, preflight,
ledger) is the base's with those leaves set; points that change a config group are composed in full.
"""


def big_tail(n: int, big: dict[str, Any], ours_s: float, floor_s: float) -> str:
    """The big sweep's lines under the 50-point section (a whole run)."""
    bw = median(big["walls"])
    return f"""
**{n} points from one command** (`python -m rayjobs.submit -m +exp=fake_ppo trainer.total_epochs=range(..)`,
the head's queue on, {len(big["walls"])} runs): wall {', '.join(f'{w:.2f}' for w in big["walls"])} s (median {bw:.2f} s,
target ≤ 10 s: {doc.met(bw, 10)}), CPU {', '.join(f'{c:.1f}' for c in big["cpus"])} s, ids on stdout
{', '.join(map(str, big["ids"]))}; `rayjobs list --json` over them: {', '.join(f'{x:.2f}' for x in big["list"])} s.
The 50-point one-command sweep against the floor: {ours_s / floor_s:.2f}× (target ≤ 1.2×).
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=1000, help="points of the big sweep (0: skip it)")
    ap.add_argument("--points", type=int, default=50)
    ap.add_argument("--only-big", action="store_true", help="only the big sweep (its own section: sweep-big)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the one-command sweep (the raw loop runs once)")
    a = doc.parse(ap, {"points": 4, "rounds": 1, "big": 20})
    n = a.points
    sweep = ["+exp=fake_ppo", "+fake.steps=1", "+fake.step_s=0", f"trainer.total_epochs=range(1,{n + 1})"]
    with session.run("rjs") as r:
        os.environ["RAYJOBS_QUEUE"] = "0"
        if a.only_big:
            big = big_sweep(r, a.big, 2)
            return doc.publish(a, "sweep-big", big_md(a.big, big))
        prof = {**phase_ms(sweep, n), **copy_ms()}  # in-process, no cluster: where a point's milliseconds go
        res, submitted = versus(r, sweep, n, a.rounds)
        big = big_sweep(r, a.big, 2) if a.big else None
    md = sweep_md(n, res, submitted, prof)
    if big:
        md += big_tail(a.big, big, median(res[OURS]), median(res[FLOOR_LABEL]))
    doc.publish(a, "sweep", md)


if __name__ == "__main__":
    main()

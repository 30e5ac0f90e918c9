"""Benchmark: cold ``python -m rayjobs.submit`` vs cold ``ray job submit --no-wait``, side by side.

Both submit the same entrypoint (rayjobs' own, from a dry-run) with the same working_dir to the same
warm local Ray head, inside a private network namespace; runs alternate so drift hits both alike.
Each is timed as a whole process: wall, and CPU (user + system of it and its children). rayjobs'
submit goes to the queue's HTTP API on the head (the job is durable there when it returns); Ray's
CLI goes to the Jobs API, which starts a JobSupervisor actor per job before it answers.
Also ``rayjobs --help`` and the dry-run. Writes the "submit" section of docs/benchmarks.md.

    sudo .venv/bin/python scripts/bench_submit.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench import doc, session, timing  # noqa: E402
from bench.timing import median  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent
EXP = ["+exp=ppo_gsm8k_qwen05b", "trainer.logger=[console]"]  #: no W&B key on this head
OURS, RAY = "python -m rayjobs.submit", "ray job submit --no-wait"


def data(storage: Path) -> None:
    """The data the preset reads (preflight checks it exists), as +exp=prepare_data would write it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in ("train", "test"):
        p = storage / "data" / "gsm8k" / f"{split}.parquet"
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
                                               "reward_model": {"style": "rule", "ground_truth": "2"}}]), p)


def measure(r: session.Run, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) of each command, ``rounds`` interleaved rounds on one embedded head."""
    from rayjobs.client import embedded

    rec = embedded.start(num_gpus=2, num_cpus=16, quiet=True)  # logical: the PPO preset needs 2 x (1 GPU + 3 CPUs)
    try:
        data(r.root / "rj" / "storage")
        env, work = dict(os.environ), str(r.work)
        dry = subprocess.run([PY, "-m", "rayjobs.submit", *EXP, "rayjobs.dry_run=true"],
                             cwd=work, env=env, capture_output=True, text=True, check=True)
        req = json.loads(dry.stdout)["submit_job"]
        ray_env = dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=rec["token_path"])
        raw = [str(BIN / "ray"), "job", "submit", "--no-wait", "--address", rec["dashboard"], "--working-dir", ".",
               "--runtime-env-json", json.dumps({"excludes": req["runtime_env"]["excludes"]}),
               "--metadata-json", json.dumps(req["metadata"]), "--"] + shlex.split(req["entrypoint"])
        ours = [PY, "-m", "rayjobs.submit", *EXP]
        timing.timed(raw, env=ray_env, cwd=work)  # warm both: imports cached by the OS, the package uploaded once
        timing.timed(ours, env=env, cwd=work)
        return timing.interleaved({
            RAY: lambda: timing.timed_cpu(raw, env=ray_env, cwd=work),
            OURS: lambda: timing.timed_cpu(ours, env=env, cwd=work),
            f"{OURS} (dry-run)": lambda: timing.timed_cpu(ours + ["rayjobs.dry_run=true"], env=env, cwd=work),
            "rayjobs --help": lambda: timing.timed_cpu([str(BIN / "rayjobs"), "--help"], env=env),
        }, rounds)
    finally:
        embedded.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    a = doc.parse(ap, {"rounds": 1})
    with session.run("rjb", project=False) as r:
        (r.work / "train_notes.txt").write_text("a small project dir, as a user's cwd\n")
        both = measure(r, a.rounds)
    wall = {k: [w for w, _ in v] for k, v in both.items()}
    cpu = {k: [c for _, c in v] for k, v in both.items()}
    m = {k: median(v) for k, v in wall.items()}
    ratio = median([o / r for o, r in zip(wall[OURS], wall[RAY])])  # the paired ratios: drift cancels
    cratio = median([o / r for o, r in zip(cpu[OURS], cpu[RAY])])
    rows = [(f"`{k}`", *doc.stats(v, 3, every=False), f"{median(cpu[k]):.3f}") for k, v in wall.items()]
    doc.publish(a, "submit", f"""## Submit latency (issues 2, 30) — `scripts/bench_submit.py`

Cold processes, {a.rounds} interleaved rounds, one warm local Ray head (127.0.0.1, in a private network
namespace), same entrypoint, working_dir and metadata for both submitters. {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.

{doc.table(["command", "median wall s", "min s", "max s", "median CPU s"], rows, "lllll")}

- **rayjobs / `ray job submit` (median of the paired ratios): wall {ratio:.2f}×, CPU {cratio:.2f}×** (target ≤ 0.5×
  in both: {doc.met(max(ratio, cratio), 0.5)}). rayjobs composes verl's full config with
  Hydra, runs preflight, puts the job in the queue over its HTTP API (the code archive only when the
  head lacks it) and records it; Ray's CLI imports more of Ray and waits for the job's supervisor actor.
- `rayjobs --help`: {m['rayjobs --help']:.3f} s median (target < 0.3 s: {"met" if m['rayjobs --help'] < 0.3 else "missed"}).
- dry-run (compose + checks + JobSpec, no cluster): {m[f'{OURS} (dry-run)']:.3f} s median.
""")


if __name__ == "__main__":
    main()

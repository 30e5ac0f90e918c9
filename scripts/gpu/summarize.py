"""Summarise verl console output: per step timing_s/step and the reward, for docs/gpu-e2e.md.

    python3 scripts/gpu/summarize.py LABEL=LOG [LABEL=LOG ...]      # table + means
    python3 scripts/gpu/summarize.py --stamp                         # stdin -> stdout, each line prefixed with
                                                                     # seconds since start (for wall-clock marks)
    python3 scripts/gpu/summarize.py --epoch                         # the same, prefixed with epoch seconds
                                                                     # (scripts/gpu/phases.py reads those)
Standalone (stdlib only): verl's console logger prints ``step:N - key:value - ...`` (values may be
``np.float64(x)``), Ray prefixes actor output with ``(TaskRunnerV1 pid=...)``.
"""

from __future__ import annotations

import re
import statistics
import sys
import time

STEP = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")
NUM = re.compile(r"^(?:np\.\w+\()?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)\)?$")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
KEYS = ("timing_s/step", "timing_s/gen", "timing_s/update_actor", "critic/score/mean", "actor/pg_loss",
        "response_length/mean", "perf/throughput")


def parse(path: str) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = ANSI.sub("", line.rstrip("\n")).split("\r")[-1]
            m = STEP.search(line)
            if not m:
                continue
            vals = {}
            for part in m.group(2).split(" - "):
                k, _, v = part.partition(":")
                n = NUM.match(v.strip())
                if k and n:
                    vals[k.strip()] = float(n.group(1))
            if vals:
                steps[int(m.group(1))] = vals
    return steps


def table(label: str, steps: dict[int, dict[str, float]]) -> str:
    out = [f"== {label}: {len(steps)} steps"]
    out.append("step " + " ".join(f"{k:>22}" for k in KEYS))
    for s in sorted(steps):
        out.append(f"{s:>4} " + " ".join(f"{steps[s].get(k, float('nan')):>22.4g}" for k in KEYS))
    t = [steps[s]["timing_s/step"] for s in sorted(steps) if s > 1 and "timing_s/step" in steps[s]]
    if t:
        sd = statistics.stdev(t) if len(t) > 1 else 0.0
        out.append(f"timing_s/step over steps 2..{max(steps)}: mean {statistics.mean(t):.3f} s, "
                   f"median {statistics.median(t):.3f} s, stdev {sd:.3f} s (n={len(t)}); "
                   f"step 1: {steps.get(1, {}).get('timing_s/step', float('nan')):.3f} s")
    return "\n".join(out)


def stamp(epoch: bool = False) -> int:
    t0 = 0.0 if epoch else time.time()
    for line in sys.stdin:
        sys.stdout.write(f"[{time.time() - t0:.3f}] {line}" if epoch else f"[{time.time() - t0:7.1f}] {line}")
        sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["--stamp"], ["--epoch"]):
        return stamp(argv[0] == "--epoch")
    for arg in argv:
        label, _, path = arg.partition("=")
        try:
            print(table(label, parse(path)))
        except OSError as e:
            print(f"== {label}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

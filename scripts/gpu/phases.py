"""Where a job's start-up goes (issue 33): seconds per phase from a followed job log, side by side.

    python3 scripts/gpu/summarize.py --epoch < LOG > STAMPED      # each line prefixed with [epoch]
    python3 scripts/gpu/phases.py first=STAMPED next=STAMPED      # the table, the ratio, step 1

Each mark is the first line matching it; its time is when the follower received the line (the
``[epoch]`` prefix), except the runner's own marks, which carry the runner's clock (``admitted ...
at T_adm, running from T_run``, ``trainer started (pid N) at T``). The follower lags the job by
the log stream's polling; the phases between two received lines do not depend on it.
Standalone (stdlib only).
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone
from typing import Optional

LINE = re.compile(r"^\[(\d+\.\d+)\] ?(.*)$")
UTC = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

#: (label of the phase ending at this mark, regex); the first one is the start (admission).
MARKS = [
    ("runner started (Ray job start)", None),                           # from the admitted line
    ("runner -> trainer process", r"\[rayjobs\] trainer started \(pid \d+\) at " + UTC),
    ("verl main: imports, config (-> 'ray init kwargs')", r"ray init kwargs:"),
    ("ray.init + TaskRunner actor up", r"\(TaskRunnerV1 pid="),
    ("TaskRunner: TQ, dataset, worker groups spawned", r"create worker group"),
    ("workers' imports + FSDP init (weights loaded)", r"actor and ref model engine initialized"),
    ("reward loop workers", r"reward loop manager initialized"),
    ("vLLM server(s) up (rollout engine ready)", r"checkpoint engine manager initialized"),
    ("replicas asleep, checkpoint check", r"all initialize finished, ready to fit"),
    ("agent loop workers + step 1 (gen, update)", r"(?:^|\s)step:1 - "),
]
EXTRA = [  # printed as they are: vLLM's and verl's own durations
    r"init engine \(profile, create kv cache, warmup model\) took [\d.]+ seconds",
    r"Model loading took [\d.]+ GiB (?:memory )?and [\d.]+ seconds",
    r"Loading weights took [\d.]+ seconds",
    r"torch\.compile takes [\d.]+ s",
]


def utc(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def marks(path: str) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
    """{label: epoch} of each mark found, {pattern: text} of the extras, step 1's values."""
    found: dict[str, float] = {}
    extra: dict[str, str] = {}
    step1: dict[str, float] = {}
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(ANSI.sub("", raw.rstrip("\n")))
            if not m:
                continue
            t, line = float(m.group(1)), m.group(2)
            a = re.search(r"\[rayjobs\] admitted after [\d.?]+ s at " + UTC + r", running from " + UTC, line)
            if a and "admission" not in found:
                found["admission"], found[MARKS[0][0]] = utc(a.group(1)), utc(a.group(2))
                found["admitted line received"] = t
            for label, rx in MARKS[1:]:
                if label in found or not re.search(rx, line):
                    continue
                u = re.search(UTC, line) if "[rayjobs]" in rx else None
                found[label] = utc(u.group(1)) if u else t
                if label.startswith("agent loop"):
                    for part in line.split(" - "):
                        k, _, v = part.partition(":")
                        n = re.match(r"^(?:np\.\w+\()?\s*([-+]?[\d.]+(?:[eE][-+]?\d+)?)", v.strip())
                        if n and k.strip() in ("critic/score/mean", "timing_s/step", "timing_s/gen",
                                               "timing_s/update_actor", "timing_s/old_log_prob", "timing_s/ref"):
                            step1[k.strip()] = float(n.group(1))
            for rx in EXTRA:
                e = re.search(rx, line)
                if e and rx not in extra:
                    extra[rx] = e.group(0)
            x = re.search(r"\[rayjobs\] attempt finished with exit code (\d+) after [\d.]+ s at " + UTC, line)
            if x and "trainer exit" not in found:
                found["trainer exit"] = utc(x.group(2))
    return found, extra, step1


def phases(found: dict[str, float]) -> list[tuple[str, Optional[float]]]:
    out, prev = [], found.get("admission")
    for label, _ in MARKS:
        t = found.get(label)
        out.append((label, None if t is None or prev is None else t - prev))
        if t is not None:
            prev = t
    return out


def main(argv: list[str]) -> int:
    runs = [(a.partition("=")[0], marks(a.partition("=")[2])) for a in argv]
    names = [n for n, _ in runs]
    print("| phase (ends at its mark) | " + " | ".join(f"{n} (s)" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    tables = [phases(f) for _, (f, _, _) in runs]
    for i, (label, _) in enumerate(MARKS):
        cells = [("—" if t[i][1] is None else f"{t[i][1]:.1f}") for t in tables]
        print(f"| {label} | " + " | ".join(cells) + " |")
    totals = []
    for _, (f, _, _) in runs:
        s1 = f.get(MARKS[-1][0])
        totals.append(None if s1 is None or "admission" not in f else s1 - f["admission"])
    print("| **admission -> step 1 logged** | " + " | ".join("—" if t is None else f"**{t:.1f}**" for t in totals) + " |")
    ex = [f.get("trainer exit", 0) - f.get(MARKS[-1][0], 0) if f.get("trainer exit") and f.get(MARKS[-1][0]) else None
          for _, (f, _, _) in runs]
    print("| step 1 logged -> trainer exit | " + " | ".join("—" if t is None else f"{t:.1f}" for t in ex) + " |")
    for key in ("timing_s/step", "timing_s/gen", "timing_s/update_actor", "critic/score/mean"):
        print(f"| step 1 {key} | " + " | ".join(f"{s.get(key, float('nan')):.4g}" for _, (_, _, s) in runs) + " |")
    lag = [f["admitted line received"] - f[MARKS[0][0]] if "admitted line received" in f and MARKS[0][0] in f else None
           for _, (f, _, _) in runs]
    print("follow lag (admitted line received - runner's stamp): "
          + ", ".join(f"{n} {'—' if v is None else f'{v:.2f} s'}" for n, v in zip(names, lag)))
    if len(totals) >= 2 and totals[0] and totals[1] is not None:
        print(f"ratio {names[1]} / {names[0]} (admission -> step 1): {totals[1] / totals[0]:.3f}")
    for n, (_, extra, _) in runs:
        for text in extra.values():
            print(f"{n}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Where a job's start-up goes (issue 33): seconds per phase from a followed job log, side by side.

    python3 scripts/gpu/summarize.py --epoch < LOG > STAMPED      # each line prefixed with [epoch]
    python3 scripts/gpu/phases.py first=STAMPED next=STAMPED      # the table, the ratio, step 1

Each mark is the first line matching it; its time is when the follower received the line (the
``[epoch]`` prefix), except the runner's own marks, which carry the runner's clock (``admitted ...
at T_adm, running from T_run``, ``trainer started (pid N) at T``). The follower lags the job by
the log stream's polling; the phases between two received lines do not depend on it.
With ``rayjobs.env.RAYJOBS_STAMPS=1`` (issue 50, :mod:`rayjobs.oncluster.warmstamps`) the log also
holds each Ray process's own stamps (``[rayjobs-stamp] <epoch> <event>``) and vLLM's INFO lines:
a second table gives, per role, when its process started and what its Ray worker init, its big
imports and its CUDA init took; a third vLLM's own durations (weights, profiling, KV cache, graph
capture, compile, sleep); then every ``timing_s/*`` of step 1, and what a kept engine (and kept
workers) would leave of the job (issue 50's estimate, from the phases they remove).
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
#: vLLM's own durations (its INFO lines; vLLM 0.24's wording): (label, regex with the seconds as group 1).
EXTRA = [
    ("weights loaded (s)", r"Loading weights took ([\d.]+) seconds"),
    ("model loading (s; GiB)", r"Model loading took ([\d.]+ GiB) (?:memory )?and ([\d.]+) seconds"),
    ("dynamo transform (s)", r"Dynamo bytecode transform time: ([\d.]+) s"),
    ("torch.compile in total (s)", r"torch\.compile took ([\d.]+) s in total"),
    ("profiling/warm-up run (s)", r"Initial profiling/warmup run took ([\d.]+) s"),
    ("KV cache memory (GiB)", r"Available KV cache memory: ([\d.]+) GiB"),
    ("graph capture (s; GiB)", r"Graph capturing finished in ([\d.]+) secs?, took ([\d.]+) GiB"),
    ("init engine: profile, KV cache, warm-up (s)",
     r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
    ("first sleep (s)", r"It took ([\d.]+) seconds to fall asleep"),
    ("GPU memory held asleep (GiB)", r"Sleep mode freed [\d.]+ GiB memory, ([\d.]+) GiB memory is still in use"),
    ("first wake-up (s)", r"It took ([\d.]+) seconds to wake up"),
]
#: Inside the rollout engine's phase (:data:`MARKS`' "vLLM server(s) up"): where its seconds go, from the
#: first line of each step (vLLM 0.24 INFO lines; the server is verl's ``vLLMHttpServer`` actor, which
#: spawns vLLM's EngineCore process, which spawns the GPU worker process).
VLLM_MARKS = [
    ("server actor: process, imports, verl's config (-> 'serve' args)", r"\(vLLMHttpServer pid=\d+\) \['serve',"),
    ("vLLM config: the model inspected (-> 'Resolved architecture')", r"Resolved architecture:"),
    ("EngineCore process: spawn, imports (-> its first line)", r"\(EngineCore pid=\d+\) .*Initializing a V1 LLM engine"),
    ("GPU worker process: spawn, imports, CUDA, dist init", r"\(Worker(?:_\w+)? pid=\d+\) .*parallel_state"),
    ("weights loaded (dummy: random init)", r"Model loading took"),
    ("memory profiling (a dummy forward)", r"Available KV cache memory"),
    ("KV cache, warm-up, graphs (-> 'init engine took')", r"init engine \(profile"),
    ("API server up, first sleep", r"seconds to fall asleep"),
]
#: A Ray process's prefix on a forwarded line: ``(Name pid=N)``, ``(pid=N)``, ``(Name pid=N, ip=...)``.
PROC = re.compile(r"\((?:(\w+) )?pid=(\d+)(?:, ip=[^)]*)?\)")
STAMP = re.compile(r"\[rayjobs-stamp\] (\d+\.\d+) (.+?)\s*$")
#: The process table's columns: (label, first event, last event); one event: seconds after admission.
PROC_COLS = [
    ("process started (s after admission)", None, "process started"),
    ("-> Ray worker up (s)", "process started", "ray worker up"),
    ("import torch (s)", "import torch begin", "import torch end"),
    ("import verl (s)", "import verl begin", "import verl end"),
    ("import vllm (s)", "import vllm begin", "import vllm end"),
    ("CUDA init (s)", "cuda init begin", "cuda init end"),
]
#: Phases of :data:`MARKS` a kept (asleep) rollout engine removes, and those kept worker groups remove too.
KEPT_ENGINE = ("vLLM server(s) up (rollout engine ready)",)
KEPT_WORKERS = KEPT_ENGINE + ("TaskRunner: TQ, dataset, worker groups spawned", "workers' imports + FSDP init (weights loaded)")


def utc(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def step_values(line: str) -> dict[str, float]:
    """``timing_s/*`` and ``critic/score/mean`` of a verl ``step:N - k:v - ...`` console line."""
    out = {}
    for part in line.split(" - "):
        k, _, v = part.partition(":")
        k = k.strip()
        n = re.match(r"^(?:np\.\w+\()?\s*([-+]?[\d.]+(?:[eE][-+]?\d+)?)", v.strip())
        if n and (k.startswith("timing_s/") or k == "critic/score/mean"):
            out[k] = float(n.group(1))
    return out


class Log:
    """What one followed, ``--epoch``-stamped job log says: the marks' times, vLLM's durations,
    step 1's values, and each Ray process's stamps (by role)."""

    def __init__(self) -> None:
        self.found: dict[str, float] = {}
        self.extra: dict[str, str] = {}
        self.step1: dict[str, float] = {}
        self.stamps: dict[int, dict[str, float]] = {}  #: pid -> event -> epoch (the process's own clock)
        self.names: dict[int, str] = {}  #: pid -> the actor class its lines name
        self.vllm: dict[str, float] = {}  #: :data:`VLLM_MARKS` label -> when its first line came

    def line(self, t: float, line: str) -> None:
        a = re.search(r"\[rayjobs\] admitted after [\d.?]+ s at " + UTC + r", running from " + UTC, line)
        if a and "admission" not in self.found:
            self.found["admission"], self.found[MARKS[0][0]] = utc(a.group(1)), utc(a.group(2))
            self.found["admitted line received"] = t
        for label, rx in MARKS[1:]:
            if label in self.found or not re.search(rx, line):
                continue
            u = re.search(UTC, line) if rx.startswith(r"\[rayjobs\]") else None   # the runner's own clock
            self.found[label] = utc(u.group(1)) if u else t
            if label.startswith("agent loop"):
                self.step1 = step_values(line)
        for label, rx in VLLM_MARKS:
            if label not in self.vllm and re.search(rx, line):
                self.vllm[label] = t
        for label, rx in EXTRA:
            e = re.search(rx, line)
            if e and label not in self.extra:
                self.extra[label] = "; ".join(e.groups())
        x = re.search(r"\[rayjobs\] attempt finished with exit code (\d+) after [\d.]+ s at " + UTC, line)
        if x and "trainer exit" not in self.found:
            self.found["trainer exit"] = utc(x.group(2))
        p = PROC.search(line)
        if p:
            pid = int(p.group(2))
            if p.group(1):
                self.names.setdefault(pid, p.group(1))
            st = STAMP.search(line)
            if st:
                self.stamps.setdefault(pid, {}).setdefault(st.group(2), float(st.group(1)))

    def roles(self) -> dict[str, dict[str, float]]:
        """Per role (the actor class; ``#2`` etc. for more processes of one class, ``pid N`` for a
        process that never named itself): its events; roles in the order their processes started."""
        out: dict[str, dict[str, float]] = {}
        order = sorted(self.stamps, key=lambda pid: min(self.stamps[pid].values()))
        for pid in order:
            name = self.names.get(pid, f"pid {pid}")
            k, n = name, 1
            while k in out:
                n += 1
                k = f"{name} #{n}"
            out[k] = self.stamps[pid]
        return out


def read(path: str) -> Log:
    log = Log()
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(ANSI.sub("", raw.rstrip("\n")))
            if m:
                log.line(float(m.group(1)), m.group(2))
    return log


def marks(path: str) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
    """{label: epoch} of each mark found, {label: value} of vLLM's durations, step 1's values."""
    log = read(path)
    return log.found, log.extra, log.step1


def phases(found: dict[str, float]) -> list[tuple[str, Optional[float]]]:
    out, prev = [], found.get("admission")
    for label, _ in MARKS:
        t = found.get(label)
        out.append((label, None if t is None or prev is None else t - prev))
        if t is not None:
            prev = t
    return out


def total(found: dict[str, float]) -> Optional[float]:
    """Admission -> step 1 logged (s), or None."""
    s1 = found.get(MARKS[-1][0])
    return None if s1 is None or "admission" not in found else s1 - found["admission"]


def kept(found: dict[str, float], removed: tuple[str, ...]) -> Optional[float]:
    """Admission -> step 1 without the phases in ``removed`` (what a kept engine/workers would leave)."""
    t = total(found)
    if t is None:
        return None
    return t - sum(d for label, d in phases(found) if label in removed and d is not None)


def process_rows(log: Log) -> list[tuple[str, list[Optional[float]]]]:
    """Per role, the :data:`PROC_COLS` (s); the first relative to the job's admission."""
    rows = []
    for role, ev in log.roles().items():
        cells: list[Optional[float]] = []
        for _, a, b in PROC_COLS:
            t0 = log.found.get("admission") if a is None else ev.get(a)
            t1 = ev.get(b)
            cells.append(None if t0 is None or t1 is None else t1 - t0)
        rows.append((role, cells))
    return rows


def _cell(v: Optional[float], bold: bool = False) -> str:
    if v is None:
        return "—"
    return f"**{v:.1f}**" if bold else f"{v:.1f}"


def print_processes(runs: list[tuple[str, Log]]) -> None:
    for name, log in runs:
        rows = process_rows(log)
        if not rows:
            continue
        print(f"\nprocesses of {name} (their own stamps, rayjobs.env.RAYJOBS_STAMPS=1):\n")
        print("| role | " + " | ".join(c for c, _, _ in PROC_COLS) + " |")
        print("|---|" + "---|" * len(PROC_COLS))
        for role, cells in rows:
            print(f"| {role} | " + " | ".join(_cell(c) for c in cells) + " |")


def engine_rows(log: Log) -> list[tuple[str, Optional[float]]]:
    """:data:`VLLM_MARKS`, each the seconds since the mark before it (the first: since the reward
    loop manager, where the engine's phase starts)."""
    prev, out = log.found.get("reward loop workers"), []
    for label, _ in VLLM_MARKS:
        t = log.vllm.get(label)
        out.append((label, None if t is None or prev is None else t - prev))
        prev = t if t is not None else prev
    return out


def print_engine(runs: list[tuple[str, Log]]) -> None:
    if any(log.vllm for _, log in runs):
        print("\n| inside the rollout engine's phase | " + " | ".join(f"{n} (s)" for n, _ in runs) + " |")
        print("|---|" + "---|" * len(runs))
        rows = [engine_rows(log) for _, log in runs]
        for i, (label, _) in enumerate(VLLM_MARKS):
            print(f"| {label} | " + " | ".join(_cell(r[i][1]) for r in rows) + " |")
    if not any(log.extra for _, log in runs):
        return
    print("\n| vLLM's own lines | " + " | ".join(n for n, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for label, _ in EXTRA:
        if any(label in log.extra for _, log in runs):
            print(f"| {label} | " + " | ".join(log.extra.get(label, "—") for _, log in runs) + " |")


def main(argv: list[str]) -> int:
    runs = [(a.partition("=")[0], read(a.partition("=")[2])) for a in argv]
    names = [n for n, _ in runs]
    print("| phase (ends at its mark) | " + " | ".join(f"{n} (s)" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    tables = [phases(log.found) for _, log in runs]
    for i, (label, _) in enumerate(MARKS):
        print(f"| {label} | " + " | ".join(_cell(t[i][1]) for t in tables) + " |")
    totals = [total(log.found) for _, log in runs]
    print("| **admission -> step 1 logged** | " + " | ".join(_cell(t, True) for t in totals) + " |")
    ex = [log.found["trainer exit"] - log.found[MARKS[-1][0]]
          if "trainer exit" in log.found and MARKS[-1][0] in log.found else None for _, log in runs]
    print("| step 1 logged -> trainer exit | " + " | ".join(_cell(t) for t in ex) + " |")
    keys = sorted({k for _, log in runs for k in log.step1}, key=lambda k: (k != "timing_s/step", k))
    for key in keys:
        print(f"| step 1 {key} | " + " | ".join(
            f"{log.step1[key]:.4g}" if key in log.step1 else "—" for _, log in runs) + " |")
    for what, removed in (("a kept engine", KEPT_ENGINE), ("a kept engine + kept workers", KEPT_WORKERS)):
        print(f"| without what {what} removes (estimate) | "
              + " | ".join(_cell(kept(log.found, removed)) for _, log in runs) + " |")
    lag = [log.found["admitted line received"] - log.found[MARKS[0][0]]
           if "admitted line received" in log.found and MARKS[0][0] in log.found else None for _, log in runs]
    print("follow lag (admitted line received - runner's stamp): "
          + ", ".join(f"{n} {'—' if v is None else f'{v:.2f} s'}" for n, v in zip(names, lag)))
    if len(totals) >= 2 and totals[0] and totals[1] is not None:
        print(f"ratio {names[1]} / {names[0]} (admission -> step 1): {totals[1] / totals[0]:.3f}")
        for what, removed in (("kept engine", KEPT_ENGINE), ("kept engine + workers", KEPT_WORKERS)):
            k = kept(runs[1][1].found, removed)
            if k is not None:
                print(f"estimate: {names[1]} with a {what} / {names[0]}: {k / totals[0]:.3f}")
    print_engine(runs)
    print_processes(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""When each job of a queued sweep held the GPU, three ways, side by side (issue 33 items 3-4,
docs/gpu-e2e.md §11): the runner's own stamps (its log), the queue's record (``rayjobs status
--json``, ``rayjobs usage --json``) and the GPU watch (``scripts/gpu/gpuwatch.py``: nvidia-smi's
compute processes every 0.5 s, each mapped to its job by ``RAYJOBS_JOB``).

    python3 scripts/gpu/jobtimes.py --watch GPUWATCH.txt [--usage USAGE.json] [--submit SUBMIT.txt] \\
        --dir W ID...

reads ``W/ID.log`` (``rayjobs logs ID``) and ``W/status-ID.json`` (``rayjobs status ID --json``) of
each job; ``SUBMIT.txt`` holds ``start EPOCH`` and ``end EPOCH`` of the submit command. Prints, as
Markdown tables: per job its stamps and halving outcome; per job change (in admission order) the
GPU's idle time (the first job's trainer exit -> the next job's first process on the GPU, and the
watch alone: GPU empty -> next process) with the median; ``rayjobs usage`` per job beside the
watch's record; and the checks (every process the watch saw inside its own job's allocation; no two
jobs on the GPU at once). Standalone (stdlib only); every number comes from a file, ``—`` if absent.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

UTC = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def utc(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def hms(t: Optional[float]) -> str:
    return "—" if t is None else datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def sec(x: Optional[float], nd: int = 1) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def epoch(v: Any) -> Optional[float]:
    """A record's time: epoch seconds (float), ms (Ray's), or a UTC string."""
    if v is None or v == "":
        return None
    if isinstance(v, (int, float)):
        return float(v) / (1000.0 if v > 1e11 else 1.0)
    m = re.search(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?", str(v))
    if m:
        s = m.group(0).replace("T", " ")
        fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in s else "%Y-%m-%d %H:%M:%S"
        return datetime.strptime(s, fmt).replace(tzinfo=timezone.utc).timestamp()
    try:
        return float(v)
    except ValueError:
        return None


def from_log(path: Path) -> dict[str, Any]:
    """The runner's stamps (first admission, trainer start, exits) and verl's steps from a job log."""
    out: dict[str, Any] = {"admitted": [], "exits": [], "steps": {}, "halving": [], "pids": []}
    if not path.exists():
        return out
    for raw in path.read_text(errors="replace").splitlines():
        line = ANSI.sub("", raw)
        a = re.search(r"\[rayjobs\] admitted after ([\d.?]+) s at " + UTC + r", running from " + UTC, line)
        if a:
            out["admitted"].append((float(a.group(1)) if a.group(1) != "?" else None, utc(a.group(2)), utc(a.group(3))))
        t = re.search(r"\[rayjobs\] trainer started \(pid (\d+)\) at " + UTC, line)
        if t:
            out["pids"].append((int(t.group(1)), utc(t.group(2))))
        x = re.search(r"\[rayjobs\] attempt finished with exit code (-?\d+) after ([\d.]+) s at " + UTC, line)
        if x:
            out["exits"].append((int(x.group(1)), float(x.group(2)), utc(x.group(3))))
        if re.search(r"\[rayjobs\].*(halv|stop at checkpoint|stopping at checkpoint|checkpoint saved)", line):
            out["halving"].append(line.split("[rayjobs]", 1)[1].strip()[:200])
        s = re.search(r"(?:^|\s)step:(\d+) - (.*)$", line)
        if s:
            vals = {}
            for part in s.group(2).split(" - "):
                k, _, v = part.partition(":")
                n = re.match(r"^(?:np\.\w+\()?\s*([-+]?[\d.]+(?:[eE][-+]?\d+)?)", v.strip())
                if n:
                    vals[k.strip()] = float(n.group(1))
            out["steps"].setdefault(int(s.group(1)), vals)
    return out


def from_watch(path: Path) -> tuple[list[tuple[float, list[tuple[str, int, int]]]], dict[str, dict[str, Any]]]:
    """The watch's lines, and per job: first and last line showing one of its processes, the line
    that showed them gone (``released``), its peak MiB and pids. A ``?`` process (its environment
    unreadable: exiting) belongs to the job its pid was seen with before (in the lines returned too)."""
    lines: list[tuple[float, list[tuple[str, int, int]]]] = []
    owner: dict[int, str] = {}
    for raw in path.read_text(errors="replace").splitlines() if path.exists() else []:
        parts = raw.split()
        if len(parts) < 3:
            continue
        t = float(parts[0])
        procs = []
        for p in parts[3:]:
            job, _, rest = p.rpartition(":")
            job, _, pid = job.rpartition(":")
            if not pid.isdigit():
                continue
            if job not in ("?", "-", ""):
                owner[int(pid)] = job
            elif job == "?":
                job = owner.get(int(pid), job)
            procs.append((job, int(pid), int(rest or 0)))
        lines.append((t, procs))
    jobs: dict[str, dict[str, Any]] = {}
    for i, (t, procs) in enumerate(lines):
        here = set()
        for j, pid, mib in procs:
            here.add(j)
            d = jobs.setdefault(j, {"first": t, "last": t, "pids": set(), "peak": 0, "released": None})
            d["last"] = t
            d["pids"].add(pid)
        for j in here:
            jobs[j]["peak"] = max(jobs[j]["peak"], sum(m for jj, _, m in procs if jj == j))
        for j, d in jobs.items():
            if j not in here and d["released"] is None and d["last"] < t:
                d["released"] = t
        for j in here:  # back on the GPU after a gap: not released
            jobs[j]["released"] = None
    return lines, jobs


def main(argv: list[str]) -> int:
    opts: dict[str, str] = {}
    ids: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--watch", "--usage", "--submit", "--dir"):
            opts[a[2:]] = next(it)
        else:
            ids.append(a)
    w = Path(opts.get("dir", "."))
    lines, watch = from_watch(Path(opts["watch"])) if "watch" in opts else ([], {})
    usage: dict[str, Any] = {}
    if opts.get("usage") and Path(opts["usage"]).exists():
        try:
            usage = json.loads(Path(opts["usage"]).read_text()).get("jobs", {})
        except ValueError:
            usage = {}
    submit: dict[str, float] = {}
    if opts.get("submit") and Path(opts["submit"]).exists():
        for line in Path(opts["submit"]).read_text().splitlines():
            k, _, v = line.partition(" ")
            try:
                submit[k] = float(v)
            except ValueError:
                pass

    jobs = []
    for i in ids:
        log = from_log(w / f"{i}.log")
        try:
            st = json.loads((w / f"status-{i}.json").read_text())
        except (OSError, ValueError):
            st = {}
        adm = log["admitted"][0] if log["admitted"] else (None, None, None)
        ex = log["exits"][-1] if log["exits"] else (None, None, None)
        jobs.append({"id": i, "log": log, "st": st, "waited": adm[0], "admitted": adm[1] or epoch(st.get("admitted_at")),
                     "running": adm[2], "trainer": log["pids"][0][1] if log["pids"] else None,
                     "exit": ex[2], "code": ex[0], "attempt_s": ex[1], "queued": epoch(st.get("queued_at") or st.get("submitted_at")),
                     "finished": epoch(st.get("finished_at")), "gpu": watch.get(i)})
    jobs.sort(key=lambda j: (j["admitted"] is None, j["admitted"] or 0))

    print("**The submission and the queue** (epoch stamps of one host's clock; the submit command's own "
          "start and end)")
    if submit:
        print(f"submit command: start {hms(submit.get('start'))}, end {hms(submit.get('end'))}, "
              f"wall {sec(submit.get('end', 0) - submit.get('start', 0) if 'end' in submit else None)} s")
    print()
    print("| job | queued (record) | submit start → queued (s) | admitted | runner's `admitted after` (s) | queued → admitted (record, s) | runner started | trainer started |")
    print("|---|---|---|---|---|---|---|---|")
    for j in jobs:
        q = j["queued"]
        print(f"| {j['id']} | {hms(q)} | {sec(q - submit['start'] if q and 'start' in submit else None, 2)} | "
              f"{hms(j['admitted'])} | {sec(j['waited'], 2)} | "
              f"{sec(j['admitted'] - q if j['admitted'] and q else None, 2)} | {hms(j['running'])} | {hms(j['trainer'])} |")
    print()
    print("**Halving outcome per point** (`rayjobs status --json`; steps from the job's log)")
    print()
    print("| job | status | halved | value at the rung(s) | checkpoint step | last step logged | exit code |")
    print("|---|---|---|---|---|---|---|")
    for j in jobs:
        st, log = j["st"], j["log"]
        halved = st.get("halved") or {}
        rungs = st.get("rungs") or {}
        print(f"| {j['id']} | {st.get('status', '—')} | {halved.get('text', '—') if halved else 'no'} | "
              f"{', '.join(f'step {k}: {v:.4g}' if isinstance(v, (int, float)) else f'step {k}: {v}' for k, v in rungs.items()) or '—'} | "
              f"{st.get('checkpoint_step', '—')} | {max(log['steps']) if log['steps'] else '—'} | {j['code'] if j['code'] is not None else '—'} |")
    print()
    for j in jobs:
        for h in j["log"]["halving"]:
            print(f"    {j['id']}: {h}")
    print()

    print("**GPU idle at each job change** (trainer exit: the runner's `attempt finished ... at`; first "
          "process / GPU empty: the watch's line times)")
    print()
    print("| change | trainer exit | GPU empty (watch) | next admitted | next's first GPU process (watch) | exit → admitted (s) | **exit → first GPU process (s)** | GPU empty → first GPU process (s) | admitted → first GPU process (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    gaps, wgaps = [], []
    for a, b in zip(jobs, jobs[1:]):
        ga, gb = a["gpu"] or {}, b["gpu"] or {}
        first_b = gb.get("first")
        rel_a = ga.get("released")
        g = first_b - a["exit"] if first_b and a["exit"] else None
        wg = first_b - rel_a if first_b and rel_a else None
        if g is not None:
            gaps.append(g)
        if wg is not None:
            wgaps.append(wg)
        print(f"| {a['id'][-2:]} → {b['id'][-2:]} | {hms(a['exit'])} | {hms(rel_a)} | {hms(b['admitted'])} | {hms(first_b)} | "
              f"{sec(b['admitted'] - a['exit'] if b['admitted'] and a['exit'] else None, 2)} | **{sec(g)}** | {sec(wg)} | "
              f"{sec(first_b - b['admitted'] if first_b and b['admitted'] else None)} |")
    if gaps:
        print(f"\nmedian GPU idle, trainer exit -> next job's first GPU process: {statistics.median(gaps):.1f} s "
              f"over {len(gaps)} job changes ({', '.join(f'{x:.1f}' for x in gaps)})")
    if wgaps:
        print(f"median GPU idle by the watch alone (GPU empty -> next process): {statistics.median(wgaps):.1f} s "
              f"({', '.join(f'{x:.1f}' for x in wgaps)})")
    print()

    print("**`rayjobs usage --json` per job beside the GPU watch** (GPU-seconds; 1 GPU a job)")
    print()
    print("| job | allocated | start-up | productive | redone | held idle | waited | ETTR | admitted → trainer exit (runner, s) | on the GPU, first process → GPU empty (watch, s) | admitted → first process (watch, s) | peak MiB | processes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for j in jobs:
        u = usage.get(j["id"], {})
        g = j["gpu"] or {}
        end = j["finished"] or j["exit"]
        span = end - j["admitted"] if end and j["admitted"] else None
        held = g["released"] - g["first"] if g.get("released") and g.get("first") else None
        ettr = u.get("ettr")
        print(f"| {j['id']} | {sec(u.get('allocated'))} | {sec(u.get('startup'))} | {sec(u.get('productive'))} | "
              f"{sec(u.get('redone'))} | {sec(u.get('idle'))} | {sec(u.get('waited'))} | "
              f"{'—' if ettr is None else f'{ettr:.3f}'} | {sec(span)} | {sec(held)} | "
              f"{sec(g['first'] - j['admitted'] if g.get('first') and j['admitted'] else None)} | {g.get('peak', '—')} | "
              f"{len(g.get('pids', ()))} |")
    tot = [usage[j["id"]] for j in jobs if j["id"] in usage]
    if tot:
        print(f"| all | {sec(sum(u.get('allocated', 0) for u in tot))} | {sec(sum(u.get('startup', 0) for u in tot))} | "
              f"{sec(sum(u.get('productive', 0) for u in tot))} | {sec(sum(u.get('redone', 0) for u in tot))} | "
              f"{sec(sum(u.get('idle', 0) for u in tot))} | {sec(sum(u.get('waited', 0) for u in tot))} | | | | | | |")
    print()

    print("**Checks against the watch**")
    known = {j["id"]: j for j in jobs}
    for name, g in sorted(watch.items()):
        if name not in known:
            print(f"- the watch saw processes of {name!r} (not one of these jobs): pids {sorted(g['pids'])}, "
                  f"{hms(g['first'])} - {hms(g['last'])}")
    for j in jobs:
        g = j["gpu"]
        if not g:
            print(f"- {j['id']}: no process of it on the GPU in the watch")
            continue
        lo, hi = j["admitted"], j["finished"] or j["exit"]
        inside = lo is not None and g["first"] >= lo and (hi is None or (g["released"] or g["last"]) <= hi + 1.0)
        late = (g["released"] or 0) - hi if hi is not None and (g["released"] or 0) > hi else None
        note = "" if late is None else f" (GPU empty {late:.2f} s after its record ended: the watch samples every ~0.5 s)"
        print(f"- {j['id']}: on the GPU {hms(g['first'])} - {hms(g['released'] or g['last'])}, allocated "
              f"{hms(lo)} - {hms(hi)}: {'inside its allocation' if inside else 'NOT inside its allocation'}{note}")
    overlap = [(t, sorted({j for j, _, _ in procs})) for t, procs in lines
               if len({j for j, _, _ in procs if j not in ('?', '-')}) > 1]
    print(f"- lines with processes of two jobs at once: {len(overlap)}" +
          (f" (first: {hms(overlap[0][0])} {overlap[0][1]})" if overlap else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

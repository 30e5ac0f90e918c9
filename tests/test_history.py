"""History that outlives the cluster (issue 16): an ended job's final copy in the local record, and
``list``/``status``/``plot`` from it once the cluster is gone; a 100k-line log read once, in order,
in bounded memory."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeGpuCluster, cli_on, rayjobs_cli, rayjobs_submit, submit_on, view, wait_done, wait_terminal, wait_until

HOME = Path(os.environ.get("RAYJOBS_HOME", "/nonexistent"))


def submit(c: FakeGpuCluster, *args: str) -> str:
    """A job of the verl stand-in whose run dir is under the cluster's storage root (gone with it)."""
    r = submit_on(c, "+exp=fake_ppo", *args, cwd=Path.cwd(), env={"RAYJOBS_STORAGE": str(c.storage)}, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def cli_json(c: FakeGpuCluster, *args: str) -> Any:
    """``rayjobs ARGS --json`` against ``c`` (also once it is gone), parsed."""
    r = cli_on(c, *args, "--json")
    assert r.returncode == 0, (args, r.stdout[-500:], r.stderr[-1500:])
    return json.loads(r.stdout)


def kept(job_id: str) -> dict[str, Any]:
    return json.loads((HOME / "runs" / job_id / "final.json").read_text())


def jsonl_steps(job_id: str) -> list[int]:
    files = sorted((HOME / "runs" / job_id).glob("metrics.*.jsonl"))
    return [json.loads(ln)["step"] for f in files for ln in f.read_text().splitlines() if ln.strip()]


def test_list_status_and_plot_work_from_the_local_record_once_the_cluster_is_gone(fresh_clusters, workdir, tmp_path):
    c = fresh_clusters.get(((2, 6),), fresh=True)  # a head of this test's own: it is stopped below
    ok = submit(c, "+fake.steps=4")
    bad = submit(c, "+fake.steps=4", "+fake.fail_at=2")
    assert wait_done(c, ok, timeout=180) == "SUCCEEDED"
    assert wait_done(c, bad, timeout=180) == "FAILED"
    running = submit(c, "+fake.steps=2000", "+fake.step_s=0.5")
    # The failed job's run dir is not readable here (as on a remote cluster): its curve is in its log only.
    bad_run = Path(view(c, bad)["metadata"]["run_dir"])
    bad_run.rename(bad_run.with_name(bad_run.name + ".hidden"))
    assert not (HOME / "runs" / ok / "final.json").exists()  # nothing kept before a view saw it ended

    # A plain list keeps each ended job once: row, log tail, the metrics it can read.
    rows = wait_until(lambda: (lambda rs: rs if rs[running]["status"] == "RUNNING" and rs[running]["step"] else None)(
        {r["id"]: r for r in cli_json(c, "list")}), 120, "the long job to run")
    assert (rows[ok]["status"], rows[bad]["status"]) == ("SUCCEEDED", "FAILED")
    a, b = kept(ok), kept(bad)
    assert a["row"]["status"] == "SUCCEEDED" and a["row"]["step"] == 4 and a["metrics_from"] == "jsonl"
    assert jsonl_steps(ok) == [1, 2, 3, 4]
    tail = (HOME / "runs" / ok / "log.tail").read_bytes()
    assert b"step:4 - " in tail and tail.count(b"\n") <= 200
    assert b["row"]["status"] == "FAILED" and "fake crash at step 2" in b["row"]["error"]
    assert b["metrics_from"] is None and b"RuntimeError: fake crash at step 2" in (HOME / "runs" / bad / "log.tail").read_bytes()
    assert not (HOME / "runs" / running / "final.json").exists()  # still running: not final
    first = (HOME / "runs" / ok / "final.json").read_bytes()

    # --keep completes the copies (the failed job's curve from its log); a kept copy is never rewritten.
    r = cli_on(c, "list", "--keep")
    assert r.returncode == 0 and "keeps the final state of 2 ended job(s)" in r.stderr, r.stderr
    assert kept(bad)["metrics_from"] == "log" and jsonl_steps(bad) == [1, 2]
    assert (HOME / "runs" / ok / "final.json").read_bytes() == first

    # usage keeps the per-job rows it got: once the cluster is gone it sums those, marked
    online = json.loads(cli_on(c, "usage", "--json").stdout)
    assert {ok, bad, running} <= set(online["jobs"]) and online["source"] == "cluster", online

    # The cluster goes (its head stopped by PID), and its storage with it (the queue's store too).
    c.stop()
    shutil.rmtree(c.storage)
    check_the_local_record(c, ok, bad, running, tmp_path)
    r = cli_on(c, "usage", "--json")
    assert r.returncode == 0 and "the usage below is the local record's, as of" in r.stderr, r.stderr
    gone = json.loads(r.stdout)
    assert gone["source"] == "record" and set(gone["jobs"]) >= {ok, bad, running}, gone
    for i in (ok, bad):  # ended jobs: the same split as the cluster said
        assert gone["jobs"][i]["allocated"] == pytest.approx(online["jobs"][i]["allocated"]), (gone["jobs"][i], online["jobs"][i])
    assert gone["total"]["allocated"] == pytest.approx(sum(j["allocated"] for j in gone["jobs"].values()))
    r = cli_on(c, "usage", "--user", "nobody-here", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["total"]["jobs"] == 0


def check_the_local_record(c: FakeGpuCluster, ok: str, bad: str, running: str, tmp_path: Path) -> None:
    """``list``, ``list --json``, ``status`` and ``plot`` of a cluster that is gone: from the local record, marked."""
    r = cli_on(c, "list")
    assert r.returncode == 0, r.stderr
    assert f"cluster {c.address} unreachable: showing the local record (3 job(s)" in r.stderr
    table = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:]}
    assert "SUCCEEDED*" in table[ok] and "4/4" in table[ok] and "FAILED*" in table[bad]
    assert "RUNNING (cluster gone)" in table[running]
    local = {x["id"]: x for x in cli_json(c, "list")}
    assert [local[i]["source"] for i in (ok, bad, running)] == ["local"] * 3
    assert (local[ok]["status"], local[ok]["final"], local[ok]["step"], local[ok]["attempt"]) == ("SUCCEEDED", True, 4, 1)
    assert local[ok]["score"] == pytest.approx(0.9) and local[ok]["end_time"]
    assert local[bad]["status"] == "FAILED" and "fake crash at step 2" in local[bad]["error"]
    assert (local[running]["status"], local[running]["final"]) == ("RUNNING", False)
    assert local[running]["step"] >= 1 and "unknown" in local[running]["message"]
    assert [x["id"] for x in cli_json(c, "list", "--status", "failed")] == [bad]

    st = cli_on(c, "status", bad)
    assert st.returncode == 0 and "cluster unreachable" in st.stderr, st.stderr
    assert "status: FAILED*" in st.stdout and "error: RuntimeError: fake crash at step 2" in st.stdout
    assert "source: the local record (kept" in st.stdout
    row = cli_json(c, "status", running[:-1])  # a prefix works as on the cluster
    assert (row["id"], row["source"], row["final"]) == (running, "local", False)

    logs = cli_on(c, "logs", bad)  # the kept end of its log
    assert logs.returncode == 0 and "cluster unreachable" in logs.stderr, logs.stderr
    assert "fake crash at step 2" in logs.stdout and "[rayjobs] job failed: RuntimeError: fake crash at step 2" in logs.stdout

    png = tmp_path / "gone.png"
    plot = cli_json(c, "plot", ok, bad, "-o", str(png))
    assert png.stat().st_size > 0
    got = {j["id"]: j for j in plot["jobs"]}
    assert [got[ok]["source"], got[bad]["source"]] == ["local", "local"]
    assert [p[0] for p in got[ok]["series"]["critic/score/mean"]] == [1, 2, 3, 4]
    assert [p[0] for p in got[bad]["series"]["critic/score/mean"]] == [1, 2]

    # Keeping needs the cluster: one line, exit 2, nothing written.
    r = cli_on(c, "list", "--keep")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


# --------------------------------------------------------------------------- a 100k-line log
LINES = 100_000
MANY_LINES = r"""
import os, sys
N = __N__
prefix = f"\x1b[36m(TaskRunner pid={os.getpid()})\x1b[0m "
pad = " - ".join(f"actor/metric_{k}:np.float64({k / 7:.6f})" for k in range(9))
sys.stdout.write(f"{prefix}Total training steps: {N}\n")
buf = []
for i in range(1, N + 1):
    if i % 1000 == 0:
        buf.append(f"\rTraining Progress: {i * 100 // N}%|####| {i}/{N}\n")
    buf.append(f"{prefix}step:{i} - critic/score/mean:np.float64({i / N:.6f}) - {pad}\n")
    if len(buf) >= 2000:
        sys.stdout.write("".join(buf))
        buf = []
sys.stdout.write("".join(buf))
sys.stdout.flush()
""".replace("__N__", str(LINES))


def session_json(*args: str) -> Any:
    """``rayjobs ARGS --json`` against the session's embedded head, parsed."""
    r = rayjobs_cli(*args, "--json", timeout=180)
    assert r.returncode == 0, (args, r.stdout[-500:], r.stderr[-1500:])
    return json.loads(r.stdout)


def run_measured(args: list[str], out: Path) -> tuple[int, float, str]:
    """(exit code, peak RSS in MB, stderr) of ``rayjobs ARGS``, stdout written to ``out`` (never held here)."""
    with out.open("wb") as f:
        p = subprocess.Popen([sys.executable, "-m", "rayjobs.cli", *args], stdout=f, stderr=subprocess.PIPE)
        err = p.stderr.read().decode() if p.stderr else ""
        _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss / 1024, err


def steps_in_file(path: Path) -> tuple[list[int], int]:
    """(the step numbers of the step lines, in order; how many lines in all), reading line by line."""
    steps, n = [], 0
    pat = re.compile(r"\bstep:(\d+) - ")
    with path.open("rb") as f:
        for raw in f:
            n += 1
            m = pat.search(raw.decode("utf-8", "replace"))
            if m:
                steps.append(int(m.group(1)))
    return steps, n


def test_a_100k_line_log_is_read_once_in_order_in_bounded_memory(cluster, client, workdir, tmp_path):
    (workdir / "workloads" / "many_lines.py").write_text(MANY_LINES)
    r = rayjobs_submit("+exp=fake_ppo", "rayjobs.entrypoint=python3 workloads/many_lines.py", cwd=workdir)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert wait_terminal(client, job, timeout=300) == "SUCCEEDED", client.get_job_logs(job)[-2000:]

    rc, base_mb, err = run_measured(["logs", job, "--tail", "10"], tmp_path / "ten.txt")
    assert rc == 0, err
    ten, n = steps_in_file(tmp_path / "ten.txt")
    assert n == 10 and ten == list(range(LINES - len(ten) + 1, LINES + 1)) and len(ten) >= 5  # the runner's last lines follow
    full = tmp_path / "logs.txt"
    rc, logs_mb, err = run_measured(["logs", job], full)
    assert rc == 0, err
    size_mb = full.stat().st_size / (1 << 20)
    steps, n = steps_in_file(full)
    assert steps == list(range(1, LINES + 1))  # every line once, in order
    assert n >= LINES + LINES // 1000
    rc, tail_mb, err = run_measured(["tail", job, "--plain"], tmp_path / "tail.txt")
    assert rc == 0, err
    assert steps_in_file(tmp_path / "tail.txt")[0] == steps
    assert f"step {LINES}/{LINES}" in err.strip().splitlines()[-1]
    # The budget: the client's peak memory grows by far less than the log (~40 MB) it prints.
    budget = 20.0
    print(f"100k-line log: {size_mb:.1f} MB printed; peak RSS logs {logs_mb:.1f} MB, tail {tail_mb:.1f} MB, "
          f"logs --tail 10 {base_mb:.1f} MB")
    assert size_mb > 1.8 * budget, size_mb  # holding the log would cost more than the budget
    assert logs_mb - base_mb < budget, (logs_mb, base_mb, size_mb)
    assert tail_mb - base_mb < budget, (tail_mb, base_mb, size_mb)

    t0 = time.perf_counter()
    st = session_json("status", job)
    t1 = time.perf_counter()
    assert (st["status"], st["step"], st["total_steps"]) == ("SUCCEEDED", LINES, LINES)
    listed = session_json("list")
    print(f"on the 100k-line job: status {t1 - t0:.2f} s, list {time.perf_counter() - t1:.2f} s (a measurement, not a bound)")
    row = next(x for x in listed if x["id"] == job)
    assert (row["status"], row["step"]) == ("SUCCEEDED", LINES)  # list reads the log's end only
    # its final copy keeps the last 200 lines only
    tail = (HOME / "runs" / job / "log.tail").read_bytes()
    assert tail.count(b"\n") == 200 and f"step:{LINES} - ".encode() in tail

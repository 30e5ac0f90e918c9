"""``rayjobs compare --sweep S`` (issue 18): a real sweep of the verl stand-in on a fake-GPU cluster of
the test's own (``fresh``: the test stops it), compared while it runs and once it is gone (from the local record); agreement with
``rayjobs plot --sweep S --json``; the rules of the rows (blanks, NaN, ties, resumed points) on
their own."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import rayjobs_cli, submit_ids, view, wait_done, wait_terminal

SCORE = "critic/score/mean"
VAL = "val-core/openai/gsm8k/reward/mean@1"
OFFSETS = ("0.0", "0.3", "0.1")


def cli(*args: str, code: int = 0) -> Any:
    r = rayjobs_cli(*args, timeout=180)
    assert r.returncode == code, (args, r.stdout[-800:], r.stderr[-1500:])
    return r


def logged(run_dir: str) -> dict[int, dict[str, float]]:
    """What the workload itself wrote (verl's file-logger JSONL of its one attempt), read here directly."""
    lines = (Path(run_dir) / "metrics.1.jsonl").read_text().splitlines()
    return {json.loads(ln)["step"]: json.loads(ln)["data"] for ln in lines if ln.strip()}


def expected(hist: dict[int, dict[str, float]], metric: str, lowest: bool = False) -> tuple[float, float, int]:
    """(last, best, step of the best) of one metric, computed from the raw records."""
    pts = [(s, d[metric]) for s, d in sorted(hist.items()) if metric in d]
    best = (min if lowest else max)(v for _, v in pts)
    return pts[-1][1], best, next(s for s, v in pts if v == best)


def test_compare_a_sweep_then_from_the_local_record_once_the_cluster_is_gone(fresh_clusters, cluster, workdir, tmp_path):
    c, storage = fresh_clusters.get(((2, 6),), fresh=True), tmp_path / "storage-on-the-cluster"
    ids = submit_ids(c, "-m", "+exp=fake_ppo", "+fake.steps=4", "+fake.score_peak=2", "trainer.save_freq=2",
                     f"+fake.score_offset={','.join(OFFSETS)}", cwd=workdir, env={"RAYJOBS_STORAGE": str(storage)})
    assert len(ids) == 3
    for i in ids:
        assert wait_done(c, i, timeout=240) == "SUCCEEDED"
    meta = {i: view(c, i)["metadata"] for i in ids}
    sweep = meta[ids[0]]["sweep"]
    raw = {i: logged(meta[i]["run_dir"]) for i in ids}

    # An evaluation of point 1's checkpoint: a job whose metadata says eval_of=<point id> (what the
    # eval_checkpoint preset's jobs carry), here sent straight through Ray's Jobs API.
    ev = c.client().submit_job(entrypoint="python3 workloads/fake_verl.py +fake.steps=1 +fake.score_offset=0.05",
                               runtime_env={"working_dir": str(workdir), "excludes": ["conf"]},
                               metadata={"eval_of": ids[1]})
    assert wait_terminal(c.client(), ev, timeout=120) == "SUCCEEDED"

    rows = json.loads(cli("compare", "--sweep", sweep, "--json", "--address", c.address).stdout)
    check_rows(rows, ids, raw, meta, source="cluster")
    assert rows[1]["eval"] == {"id": ev, "status": "SUCCEEDED", "metric": VAL, "value": pytest.approx(0.95), "step": 1}
    assert rows[0]["eval"] is None and rows[2]["eval"] is None

    table = cli("compare", "--sweep", sweep[:-1], "--address", c.address)  # a unique start of the id works too
    print(table.stdout + table.stderr)
    lines = table.stdout.splitlines()
    head = lines[0].split()
    assert head[:3] == ["ID", "fake.score_offset", "STATUS"] and "EVAL" in head and "val:reward/mean@1:best" in head
    assert [ln.split()[0] for ln in lines[1:]] == [ids[0], "*", ids[2]] and lines[2].split()[1] == ids[1]
    assert "0.95" in lines[2] and f"{meta[ids[1]]['checkpoint_dir']}/global_step_4" in lines[2]
    assert "0.8@2" in lines[2] and "4/4" in lines[2]  # the score's best (0.5 + 0.3) at step 2, the steps done
    assert f"* = the best point: the highest {VAL}" in table.stderr

    check_plot_agrees(rows, sweep, tmp_path / "up.png", c.address)
    check_other_metrics(sweep, ids, raw, c.address)
    typo = cli("compare", "--sweep", sweep[:-1] + ("x" if sweep[-1] != "x" else "y"), "--address", c.address, code=2)
    assert typo.stdout == "" and len(typo.stderr.strip().splitlines()) == 1
    assert "no sweep" in typo.stderr and sweep in typo.stderr  # the closest id named

    # The cluster goes (its head stopped by PID), and its storage with it: the local record answers.
    c.stop()
    shutil.rmtree(storage)
    gone = cli("compare", "--sweep", sweep, "--json", "--address", c.address)
    assert "unreachable: showing the local record (3 job(s)" in gone.stderr
    local = json.loads(gone.stdout)
    check_rows(local, ids, raw, meta, source="local")
    assert [r["metrics"] for r in local] == [r["metrics"] for r in rows]
    table = cli("compare", "--sweep", sweep, "--address", c.address)
    assert all("SUCCEEDED*" in ln for ln in table.stdout.splitlines()[1:])
    check_plot_agrees(local, sweep, tmp_path / "gone.png", c.address)
    cli("compare", "--sweep", "no-such-sweep", "--address", c.address, code=2)

    # Another cluster that is up but never ran the sweep (the embedded one): its points from the local record too.
    elsewhere = json.loads(cli("compare", "--sweep", sweep, "--json").stdout)
    assert [(r["id"], r["source"], r["status_text"]) for r in elsewhere] == [(i, "local", "SUCCEEDED*") for i in ids]
    assert [r["metrics"] for r in elsewhere] == [r["metrics"] for r in rows]
    assert [r["best"] for r in elsewhere] == [False, True, False]


def check_rows(rows: list[dict[str, Any]], ids: list[str], raw: dict[str, Any], meta: dict[str, Any], source: str) -> None:
    """One row per point, its swept value only, status/steps/checkpoint, last and best of the score
    and the val-core reward as the workload logged them, the best point (highest val-core) marked."""
    assert [r["id"] for r in rows] == ids
    assert [r["point"] for r in rows] == [{"fake.score_offset": o} for o in OFFSETS]  # not fake.steps, save_freq ...
    assert {(r["status"], r["step"], r["total_steps"], r["checkpoint_step"], r["source"]) for r in rows} == \
        {("SUCCEEDED", 4, 4, 4, source)}
    for r in rows:
        assert r["checkpoint"] == f"{meta[r['id']]['checkpoint_dir']}/global_step_4"
        assert r["ranked_by"] == VAL and list(r["metrics"]) == [SCORE, VAL]
        for m in (SCORE, VAL):
            last, best, at = expected(raw[r["id"]], m)
            got = r["metrics"][m]
            assert (got["last"], got["best"], got["best_step"], got["last_step"], got["mode"]) == (last, best, at, 4, "max")
        assert r["metrics"][SCORE]["best_step"] == 2  # the curve peaks before its end: best is not last
    best_val = max(expected(raw[i], VAL)[1] for i in ids)
    assert [r["best"] for r in rows] == [expected(raw[i], VAL)[1] == best_val for i in ids] == [False, True, False]


def check_plot_agrees(rows: list[dict[str, Any]], sweep: str, png: Path, address: str) -> None:
    """compare's last and best are those of the curves ``rayjobs plot --sweep S --json`` draws."""
    data = json.loads(cli("plot", "--sweep", sweep, "--json", "-o", str(png), "--address", address).stdout)
    curves = {j["id"]: j for j in data["jobs"]}
    assert set(curves) == {r["id"] for r in rows}
    for r in rows:
        for m, s in r["metrics"].items():
            pts = curves[r["id"]]["series"][m]
            assert (s["last"], s["best"]) == (pts[-1][1], max(v for _, v in pts)), (r["id"], m)
        assert r["curves_from"] == curves[r["id"]]["source"]


def check_other_metrics(sweep: str, ids: list[str], raw: dict[str, Any], address: str) -> None:
    """A loss is best lowest (a tie here: every point is marked); --mode min turns a score around."""
    loss = json.loads(cli("compare", "--sweep", sweep, "--metric", "actor/pg_loss", "--json", "--address", address).stdout)
    assert [list(r["metrics"]) for r in loss] == [["actor/pg_loss"]] * 3
    assert {(r["metrics"]["actor/pg_loss"]["mode"], r["metrics"]["actor/pg_loss"]["best"], r["best"]) for r in loss} == \
        {("min", expected(raw[ids[0]], "actor/pg_loss", lowest=True)[1], True)}
    low = json.loads(cli("compare", "--sweep", sweep, "--metric", SCORE, "--mode", "min", "--json", "--address", address).stdout)
    assert [r["metrics"][SCORE]["best"] for r in low] == [expected(raw[i], SCORE, lowest=True)[1] for i in ids]
    assert [r["best"] for r in low] == [True, False, False] and low[0]["metrics"][SCORE]["best_step"] == 1
    bad = cli("compare", "--sweep", sweep, "--metric", "critic/score/meen", "--address", address, code=2)
    assert "critic/score/mean" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- the rules of the rows, on their own
def test_rows_blanks_nan_ties_and_resumed_points():
    from rayjobs.views import compare

    from jobfactory import job_view

    def job(jid: str, offset: str, **more: str) -> Any:
        return job_view(jid, metadata=dict(
            sweep="s", checkpoint_dir=f"/ck/{jid}", sweep_overrides=json.dumps([f"a.lr={offset}", "+b.n=2"]), **more))

    jobs = [job("s-0", "1"), job("s-1", "2"), job("s-2", "3"), job("s-3", "4"), job("s-2-r1", "3", resumed_from="s-2")]
    rows = {j.submission_id: {"id": j.submission_id, "status": st, "step": step, "total_steps": 10,
                                 "checkpoint_step": ck, "queue_position": qp}
            for j, st, step, ck, qp in zip(jobs, ["RUNNING", "RUNNING", "STOPPED", "QUEUED", "RUNNING"],
                                           [3, 5, 2, None, 4], [2, None, 1, None, 3], [None, None, None, 1, None])}
    nan = float("nan")
    data = {"metrics": [SCORE, VAL], "jobs": [
        {"id": "s-0", "source": "jsonl", "series": {SCORE: [[1, 0.2], [3, 0.6]], VAL: [[2, 0.5]]}},
        {"id": "s-1", "source": "log", "series": {SCORE: [[1, 0.6], [3, nan], [5, 0.4]], VAL: [[2, 0.5], [4, 0.1]]}},
        {"id": "s-2", "source": "log", "series": {SCORE: [[1, 0.9], [2, 0.1]], VAL: [[1, 0.4], [2, 0.45]]}},
        {"id": "s-3", "source": "log", "series": {SCORE: [], VAL: []}},
        {"id": "s-2-r1", "source": "log", "series": {SCORE: [[2, 0.3], [3, 0.35], [4, 0.2]], VAL: []}}]}
    out = compare.build(jobs, rows, data)
    assert [r["id"] for r in out] == ["s-0", "s-1", "s-2-r1", "s-3"] and out[2]["jobs"] == ["s-2", "s-2-r1"]
    assert [r["point"] for r in out] == [{"a.lr": v} for v in "1234"]  # b.n is the same everywhere: not swept
    # the resumed point: its first job's curve up to where the resume took over, then the resume's
    assert out[2]["metrics"][SCORE] == {"last": 0.2, "last_step": 4, "best": 0.9, "best_step": 1, "mode": "max"}
    assert out[2]["metrics"][VAL]["best"] == 0.4 and out[2]["checkpoint"] == "/ck/s-2-r1/global_step_3"
    assert out[3]["metrics"] == {SCORE: None, VAL: None}  # nothing yet: blank, never best
    assert out[1]["metrics"][SCORE] == {"last": 0.4, "last_step": 5, "best": 0.6, "best_step": 1, "mode": "max"}  # NaN skipped
    assert compare.summary([[1, nan]], "max") is None
    assert [r["best"] for r in out] == [True, True, False, False]  # a tie on the val-core reward's best: both marked
    assert out[1]["metrics"][VAL] == {"last": 0.1, "last_step": 4, "best": 0.5, "best_step": 2, "mode": "max"}
    assert out[0]["checkpoint"] == "/ck/s-0/global_step_2" and out[1]["checkpoint"] is None
    text = compare.table(out).splitlines()
    assert text[0].split() == ["ID", "a.lr", "STATUS", "STEP", "score/mean", "score/mean:best", "val:reward/mean@1",
                               "val:reward/mean@1:best", "CHECKPOINT"]
    assert text[1].startswith("*") and text[2].startswith("*") and text[3].startswith(" ")
    assert text[3].split() == ["s-2-r1", "3", "RUNNING", "4/10", "0.2", "0.9@1", "0.4", "0.4@1", "/ck/s-2-r1/global_step_3"]
    assert text[4].split() == ["s-3", "4", "QUEUED", "#1", "-", "-", "-", "-", "-", "-"]
    assert compare.metric_mode("actor/pg_loss") == "min" and compare.metric_mode("actor/pg_loss", "max") == "max"
    assert compare.val_metrics(["val-core/x/acc/mean@4", "val-core/x/acc/maj@4/mean", SCORE]) == ["val-core/x/acc/mean@4"]
    assert compare.pick_metrics([SCORE], ())[1] == SCORE  # no validation logged: the score ranks
    assert compare.summary([[1, math.inf], [2, 0.3]], "min") == {"last": 0.3, "last_step": 2, "best": 0.3,
                                                                "best_step": 2, "mode": "min"}
    with pytest.raises(Exception, match="one of auto, max, min"):
        compare.metric_mode(SCORE, "biggest")

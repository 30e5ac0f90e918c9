"""`rayjobs replay`: a team's history as a trace (rayjobs.sim.history, pure), then on a real cluster:
jobs run through the queue, and `rayjobs replay --since 1h` runs that history again under every policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rayjobs.contract.meta import JobMeta  # noqa: E402
from rayjobs.sim import history, trace as tracefile  # noqa: E402


def view(job_id: str, groups: list[int], queued: float, **kw) -> dict:
    meta = JobMeta(user=kw.pop("user", "u"), gpu_groups=tuple(groups), after=tuple(kw.pop("after", ())),
                   priority=kw.pop("priority", 0))
    out = {"submission_id": job_id, "state": kw.pop("state", "done"), "status": kw.pop("status", "SUCCEEDED"),
           "metadata": meta.to_ray(), "queued_at": queued, "final": {"step": kw.pop("steps", 10)}, "spans": [[0, 1]]}
    out.update(kw)
    return out


def test_history_becomes_a_trace_of_what_ran_and_leaves_out_what_did_not() -> None:
    views = [view("a", [2], 1000.0, checkpoint_step=10), view("b", [1], 1010.0, after=["a", "gone"], user="v"),
             view("w", [1], 1020.0, state="waiting"), view("cpu", [], 1030.0),
             view("f", [1], 1040.0, status="FAILED", steps=4, finished_at=1100.0)]
    usage = {"a": {"productive": 2 * 100.0, "startup": 2 * 20.0, "allocated": 2 * 125.0, "waited": 0.0},
             "b": {"productive": 0.0, "startup": 10.0, "allocated": 60.0, "waited": 30.0},
             "f": {"productive": 40.0, "startup": 5.0, "allocated": 50.0, "waited": 5.0}}
    tr, about = history.trace_from(views, usage, nodes=2, gpus_per_node=4)
    assert about == {"jobs": 3, "left_out": {"waiting": 1, "no_gpus": 1, "no_usage": 0}}
    a, b, f = tr.jobs
    assert (a.id, a.arrival_s, a.groups, a.steps, a.step_s, a.startup_s, a.ckpt_every) == ("a", 0.0, (2,), 10, 10.0, 20.0, 1)
    assert (b.user, b.after, b.steps, b.step_s) == ("v", ("a",), 10, 5.0)  # no step kept: its GPU time less start-up
    assert f.fail_at == (4,) and f.steps == 5 and tr.start == 1000.0 and tr.gpus == 8
    rec = history.recorded(views, usage, tr)
    assert rec["mean_wait_s"] == 11.7 and rec["mean_jct_s"] == 60.0


def test_replay_on_a_real_clusters_history(fresh_clusters, workdir, tmp_path) -> None:
    """Four jobs through the queue on 2 GPUs (one of 2 GPUs waits for the others), then `rayjobs
    replay --since 1h`: the same jobs, replayed under every policy; the "what if" options work."""
    from conftest import cli_on, send_on, wait_done

    c = fresh_clusters.get(((2, 6),), fresh=True)
    base = ("+fake.hold_gpus=true", "trainer.save_freq=2", "+fake.step_s=0.5", "+fake.steps=6")
    ids = [send_on(c, *base, "trainer.n_gpus_per_node=1") for _ in range(2)]
    ids.append(send_on(c, *base, "trainer.n_gpus_per_node=2"))
    ids.append(send_on(c, *base, "trainer.n_gpus_per_node=1", "rayjobs.priority=5"))
    for j in ids:
        assert wait_done(c, j, timeout=240) == "SUCCEEDED"

    r = cli_on(c, "replay", "--since", "1h", "--json", "--save-trace", str(tmp_path / "t.jsonl"),
               "--plot", str(tmp_path / "w.png"), timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    tr = tracefile.read(tmp_path / "t.jsonl")
    assert sorted(j.id for j in tr.jobs) == sorted(ids) and doc["cluster"] == {"nodes": 1, "gpus_per_node": 2}
    assert [j.groups for j in sorted(tr.jobs, key=lambda j: j.arrival_s)] == [(1,), (1,), (2,), (1,)]
    assert all(j.steps == 6 and 0.3 <= j.step_s <= 3.0 for j in tr.jobs), tr.jobs
    assert list(doc["policies"]) == ["rayjobs", "fifo", "priority_hol", "easy_backfill", "kueue"]
    for name, rep in doc["policies"].items():
        assert rep["jobs"]["succeeded"] == 4 and rep["jobs"]["left"] == 0, (name, rep["jobs"])
        assert 0 < rep["goodput"] <= 1 and rep["mean_jct_s"] > 0
    # the 2-GPU job waited for the 1-GPU ones, recorded and replayed
    assert doc["recorded"]["mean_wait_s"] > 0 and doc["policies"]["rayjobs"]["mean_wait_s"] > 0
    assert (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"

    what_if = cli_on(c, "replay", "--since", "1h", "--policy", "rayjobs", "--quota", "1", timeout=240)
    assert what_if.returncode == 0, what_if.stderr[-3000:]
    lines = what_if.stdout.splitlines()
    assert lines[0].startswith("4 jobs replayed on 1 x 2 GPUs")
    assert [ln.split()[0] for ln in lines[2:]] == ["rayjobs", "recorded"]
    bad = cli_on(c, "replay", "--quota", "alice=lots")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --quota") and "Traceback" not in bad.stderr

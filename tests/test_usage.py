"""Where the GPU-hours went (rayjobs.oncluster.usage): the split, pure, on hand-made attempts; then on
a real cluster with a retry, a preemption and a stop, through `rayjobs usage`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from schedfakes import record  # noqa: E402

from rayjobs.api.usage import since_ts  # noqa: E402
from rayjobs.contract.status import State  # noqa: E402
from rayjobs.errors import ConfigError  # noqa: E402
from rayjobs.oncluster.usage import Attempt, kept_and_redone, split_job, usage, waited_s  # noqa: E402


def _attempt(n: int, steps: range, last_at: float, step_s: float = 1.0) -> Attempt:
    return Attempt(n, tuple((s, step_s) for s in steps), last_at)


def test_a_resumed_attempt_replaces_the_steps_after_its_checkpoint() -> None:
    a1 = _attempt(1, range(1, 8), 100.0)  # steps 1..7, checkpoint at 4
    a2 = _attempt(2, range(5, 11), 200.0)  # resumed from 4: 5..7 again, then 8..10
    kept, redone, n = kept_and_redone([a1, a2])
    assert (kept, redone, n) == (10.0, 3.0, 3)


def test_the_parts_add_up_to_the_allocation() -> None:
    # 2 GPUs; span 1: admitted at 0, first step at 10 (7 steps of 1 s end at 17), stopped at 20
    # span 2: admitted at 50, first step at 60, 6 steps end at 66, ended at 66
    attempts = [_attempt(1, range(1, 8), 17.0), _attempt(2, range(5, 11), 66.0)]
    s = split_job([(0.0, 20.0), (50.0, 66.0)], 2, attempts, waited=30.0)
    assert s.allocated == pytest.approx(2 * 36.0)
    assert (s.productive, s.redone, s.startup, s.idle) == pytest.approx((20.0, 6.0, 40.0, 6.0))
    assert s.redone_steps == 3 and s.to_json()["ettr"] == pytest.approx(20 / 72)


def test_a_span_without_a_step_is_all_start_up_and_the_wait_counts_every_gap() -> None:
    s = split_job([(0.0, 30.0)], 1, [], waited=0.0)
    assert (s.startup, s.productive, s.idle) == (30.0, 0.0, 0.0)
    rec = record("j", [1], at=100.0, state=State.DONE).with_(spans=((110.0, 150.0), (170.0, 200.0)))
    assert waited_s(rec, rec.spans, now=1e9) == 30.0


def test_a_span_ends_when_its_gpus_went_back_not_when_its_ray_job_settled() -> None:
    rec = record("j", [1], at=0.0).with_(admitted_at=100.0)
    assert rec.span_closed(200.0) == ((100.0, 200.0),)  # not freed: closed at the settling
    assert rec.with_(freed_at=150.0).span_closed(200.0) == ((100.0, 150.0),)
    assert rec.with_(freed_at=90.0).span_closed(200.0) == ((100.0, 200.0),)  # an earlier admission's: ignored
    assert rec.with_(freed_at=250.0).span_closed(200.0) == ((100.0, 200.0),)


def test_the_first_reap_to_return_says_when_the_gpus_were_freed() -> None:
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from rayjobs.oncluster.reaping import Reaping

    early_go, end_go = threading.Event(), threading.Event()

    def reap(job_id: str, spare_live: bool = False) -> list[str]:
        (early_go if spare_live else end_go).wait(10)
        return ["ended pid 7 (vllm)"] if spare_live else []

    with ThreadPoolExecutor(4) as pool:
        r = Reaping(reap, pool, details=lambda j: {"status": "SUCCEEDED"})
        r.trainer_left("a")  # its trainer left: the early reap, at once
        assert r.gate()  # its leftovers are being ended: no GPU admission
        before = time.time()
        early_go.set()
        r.early["a"].result(10)
        after_early = time.time()
        assert r.gate() == ""  # the GPUs go on from here
        time.sleep(0.05)
        assert r.job_ended("a", "SUCCEEDED", used_gpus=True)
        end_go.set()
        r.final["a"][2].result(10)
        (done,) = r.collect()
        # the early reap's time, not the end's (50 ms later)
        assert before <= done.freed_at <= after_early and done.lines == ["ended pid 7 (vllm)"]

        # the end's reap returns first, the early one later: the end's time, and nothing of the late
        # one is left over for the job's next admission (a preempted job comes back under its id)
        early_go.clear()
        r.trainer_left("b")
        assert r.job_ended("b", "STOPPED", used_gpus=True)
        r.final["b"][2].result(10)
        (b,) = r.collect()
        early_go.set()
        time.sleep(0.05)
        assert b.freed_at is not None and b.freed_at < time.time() - 0.04 and b.lines == []
        again = time.time()
        r.trainer_left("b")  # its next admission's trainer
        r.early["b"].result(10)
        assert r.job_ended("b", "SUCCEEDED", used_gpus=True)
        r.final["b"][2].result(10)
        (b2,) = r.collect()
        assert b2.freed_at >= again  # this admission's reap, not the late one of the last


def test_usage_sums_per_user_and_sweep_and_filters() -> None:
    recs = [record(f"s-{i}", [1], at=0.0, user="ann" if i else "bob", sweep="s", state=State.DONE)
            .with_(spans=((10.0, 20.0),)) for i in range(3)]
    u = usage(recs, now=100.0, facts=lambda run_dir, attempts: [])
    assert u.total.allocated == 30.0 and u.users["ann"].jobs == 2 and u.sweeps["s"].allocated == 30.0
    assert usage(recs, now=100.0, user="bob", facts=lambda *a: []).total.jobs == 1
    assert usage(recs, now=100.0, since=50.0, facts=lambda *a: []).total.jobs == 0


def test_the_laptops_copy_of_the_rows_sums_and_filters_as_the_head_does(tmp_path, monkeypatch) -> None:
    """The head's answer, kept per job on the laptop, summed again once the cluster is gone: the
    same totals, per user and per sweep, and the same filters."""
    from rayjobs.oncluster.usage import to_json
    from rayjobs import ledger
    from rayjobs.views import usagerecord

    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path))
    recs = [record("a-1", [1], at=0.0, user="ann", sweep="sw", state=State.DONE).with_(spans=((0.0, 100.0),)),
            record("b-1", [2], at=40.0, user="bob", state=State.DONE).with_(spans=((50.0, 80.0),))]
    head = to_json(usage(recs, 200.0, facts=lambda run_dir, attempts: []))
    ledger.remember_usage("k", head["jobs"], 200.0)
    ledger.remember_usage("k", {}, 300.0)  # an empty answer keeps what was there
    rows = ledger.usage_rows("k")
    mine = usagerecord.from_record(rows)
    assert mine["source"] == "record" and mine["at"] == 200.0
    for part in ("allocated", "startup", "waited", "jobs"):
        assert mine["total"][part] == pytest.approx(head["total"][part]), part
        assert mine["users"]["ann"][part] == pytest.approx(head["users"]["ann"][part]), part
    assert set(mine["sweeps"]) == {"sw"} and mine["sweeps"]["sw"]["jobs"] == 1
    assert set(usagerecord.from_record(rows, user="bob")["jobs"]) == {"b-1"}
    assert set(usagerecord.from_record(rows, sweep="sw")["jobs"]) == {"a-1"}
    assert set(usagerecord.from_record(rows, since=90.0)["jobs"]) == {"a-1"}  # b-1 last active at 80


def test_since_takes_a_duration_and_refuses_anything_else() -> None:
    assert since_ts("7d", now=1_000_000.0) == 1_000_000.0 - 7 * 86400
    with pytest.raises(ConfigError, match="give a duration such as 7d"):
        since_ts("last week")


def test_usage_on_a_real_cluster_matches_what_happened(fresh_clusters, workdir) -> None:
    """A retried job (crash at step 3, resumed from its checkpoint), a preempted one and a stopped
    one: the redone steps are the queue's redo counts and the retry's, the parts add up."""
    from conftest import cli_on, send_on, view, wait_done, wait_until

    c = fresh_clusters.get(((1, 6),), fresh=True)
    base = ("+fake.hold_gpus=true", "trainer.n_gpus_per_node=1", "trainer.save_freq=2", "+fake.step_s=0.3")
    retried = send_on(c, *base, "+fake.steps=6", "+fake.fail_at=3", "rayjobs.max_retries=1")
    assert wait_done(c, retried, timeout=180) == "SUCCEEDED"
    victim = send_on(c, *base, "+fake.steps=60", "rayjobs.preemptible=true")  # (18 s: preempted before its end)
    wait_until(lambda: (view(c, victim).get("rungs") is not None) and view(c, victim)["status"] == "RUNNING"
               and (Path(view(c, victim)["metadata"]["run_dir"]) / "metrics.1.jsonl").exists(), 120, "the victim to train")
    wait_until(lambda: Path(view(c, victim)["metadata"]["checkpoint_dir"], "latest_checkpointed_iteration.txt").exists(),
               120, "the victim's first checkpoint")
    urgent = send_on(c, *base, "+fake.steps=2", "rayjobs.priority=10")
    assert wait_done(c, urgent, timeout=240) == "SUCCEEDED"
    assert wait_done(c, victim, timeout=240) == "SUCCEEDED"
    stopped = send_on(c, *base, "+fake.steps=200")
    # its first metrics line too: stopped before it (seen at load 12) it has no step to end a span at
    wait_until(lambda: view(c, stopped)["status"] == "RUNNING"
               and any(Path(view(c, stopped)["metadata"]["run_dir"]).glob("metrics.*.jsonl")), 120, "the last job to train")
    r = cli_on(c, "stop", stopped)
    assert r.returncode == 0, r.stderr
    assert wait_done(c, stopped, timeout=120) == "STOPPED"

    r = cli_on(c, "usage", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jobs = doc["jobs"]
    for jid in (retried, victim, urgent, stopped):
        s = jobs[jid]
        parts = s["productive"] + s["redone"] + s["startup"] + s["idle"]
        assert s["allocated"] > 0 and abs(parts - s["allocated"]) <= 0.01 * s["allocated"], s
    assert jobs[victim]["redone_steps"] == view(c, victim)["preempted"]["redo"]
    assert jobs[retried]["redone_steps"] == 1  # crashed after step 3, resumed from step 2's checkpoint
    assert jobs[urgent]["redone_steps"] == 0 and jobs[urgent]["productive"] > 0
    assert jobs[stopped]["idle"] + jobs[stopped]["startup"] > 0
    total = doc["total"]
    assert total["allocated"] == pytest.approx(sum(jobs[j]["allocated"] for j in jobs), rel=1e-6)
    spans = []
    for jid in (retried, victim, urgent, stopped):  # each span ends once its trainer left, by the settling
        v = view(c, jid)
        last_step = max(f.stat().st_mtime for f in Path(v["metadata"]["run_dir"]).glob("metrics.*.jsonl"))
        assert last_step <= v["spans"][-1][1] <= float(v["finished_at"]), (v["spans"], last_step, v["finished_at"])
        spans += [(a, b, jid) for a, b in v["spans"]]
    # one GPU: the time handed out never counts it twice (a span ended at the settling of its Ray job
    # overlapped the next job's, admitted once the GPU's leftovers were reaped); 0.5 s: a tick's clock
    spans.sort()
    for (_, end, j1), (start, _, j2) in zip(spans, spans[1:]):
        assert start >= end - 0.5, (j1, end, j2, start)
    table = cli_on(c, "usage")
    assert table.returncode == 0 and table.stdout.splitlines()[1].startswith("all"), table.stdout

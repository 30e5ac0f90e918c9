"""The team simulator's parts, pure (rayjobs.sim): the trace file, one attempt's timeline, the
engine's charges, the metrics, the week generator, the benchmark's JSON. No Ray."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rayjobs.sim import metrics, policies, trace as tracefile, week
from rayjobs.sim.attempt import Attempt
from rayjobs.sim.baselines import RayPending
from rayjobs.sim.engine import Sim
from rayjobs.sim.ledger import FAILED, SUCCEEDED, Ledger, fair_shares
from rayjobs.sim.trace import TraceError, TraceJob

REPO = Path(__file__).resolve().parent.parent


def job(job_id: str, groups=(1,), *, at: float = 0.0, **kw) -> TraceJob:
    kw.setdefault("step_s", 10.0)
    kw.setdefault("steps", 10)
    kw.setdefault("startup_s", 5.0)
    return TraceJob(id=job_id, user=kw.pop("user", "u"), arrival_s=at, groups=tuple(groups), **kw)


# --------------------------------------------------------------------------- the trace file
def test_a_trace_round_trips_through_its_file_and_keeps_only_keys_off_their_defaults(tmp_path) -> None:
    tr = tracefile.make([job("a", (8, 8), at=5, ckpt_every=2, ckpt_s=3, fail_at=(4,), retries=1),
                         job("b", at=1, after=("a",), kind="eval")], name="t", seed=7, nodes=2)
    tracefile.write(tr, tmp_path / "t.jsonl")
    back = tracefile.read(tmp_path / "t.jsonl")
    assert [j.id for j in back.jobs] == ["b", "a"] and back.jobs == tr.jobs and back.nodes == 2 and back.seed == 7
    line = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[2])
    assert line == {"id": "a", "user": "u", "arrival_s": 5.0, "groups": [8, 8], "step_s": 10.0, "steps": 10,
                    "startup_s": 5.0, "ckpt_every": 2, "ckpt_s": 3.0, "fail_at": [4], "retries": 1}


@pytest.mark.parametrize("text,says", [
    ('{"id": "a", "user": "u", "arrival_s": 0, "groups": [1]}', "t:1: a job needs 'step_s'"),
    ('{"id": "a", "user": "u", "arrival_s": 0, "groups": [1], "step_s": 1, "gpus": 2}', "t:1: unknown key 'gpus'"),
    ('{"id": "a", "user": "u", "arrival_s": 0, "groups": [0], "step_s": 1}', "t:1: a: groups must be GPUs per group"),
    ('{"id": "a", "user": "u", "arrival_s": 0, "groups": [1], "step_s": "x"}', "t:1: step_s='x' is not a float"),
    ('{"id": "a", "user": "u", "arrival_s": 0, "groups": [1], "step_s": 1, "after": ["zz"]}', "after names 'zz'"),
    ('{"id": "a", "user": "u"', "t:1: not JSON"),
])
def test_a_bad_trace_is_one_line_naming_where_and_what(text: str, says: str) -> None:
    with pytest.raises(TraceError) as e:
        tracefile.loads(text, "t")
    assert says in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- one attempt
def test_an_attempt_trains_in_cycles_of_steps_and_a_save() -> None:
    j = job("a", steps=10, step_s=10, ckpt_every=4, ckpt_s=5, startup_s=20)
    a = Attempt(j, start=100.0, from_step=0, startup_s=20.0)
    assert a.step_done(4) == 160 and a.saved(4) == 165 and a.step_done(5) == 175 and a.end() == 100 + 20 + 100 + 10
    assert a.at(150) == (3, 0, 100.0)  # 3 steps done, nothing saved yet
    assert a.at(170) == (4, 4, 165.0)  # step 5 under way, step 4 saved at 165
    assert a.next_saved(170) == (8, 165 + 40 + 5) and a.first_saved_from(5) == (8, 210.0)
    assert a.next_saved(215) is None  # no save after step 8 before the end (10)
    r = Attempt(j, start=0.0, from_step=4, startup_s=0.0)  # resumed from step 4's checkpoint
    assert r.step_done(5) == 10 and r.saved(8) == 45 and r.end() == 65


# --------------------------------------------------------------------------- the engine's charges
def test_the_engine_charges_start_up_a_crash_redone_since_the_last_save_and_the_hand_over() -> None:
    tr = tracefile.make([job("a", steps=10, step_s=10, ckpt_every=4, ckpt_s=0, startup_s=5, fail_at=(6,), retries=1),
                         job("b", at=1)], nodes=1, gpus_per_node=1)
    sim = Sim(tr, RayPending(), handover_s=1.0).run()
    a, b = sim.lives["a"], sim.lives["b"]
    # a: start-up 5, 6 steps (crash at step 6: steps 5-6 redone), start-up 5 again, steps 5-10 from step 4's save
    assert a.status == SUCCEEDED and a.end == 5 + 60 + 5 + 60 and a.attempts == 2
    assert a.productive_gpu_s == 100 and a.redone_gpu_s == 20 and a.startup_gpu_s == 10
    assert a.alloc_gpu_s == a.end + 1.0  # held from 0 to its end, and the hand-over
    # b waited for a's GPU: from 1 until a's hand-over was done
    assert b.first_start == a.end + 1.0 and b.waited == a.end + 1.0 - 1 and b.jct == b.end - 1


def test_a_crash_with_no_retry_left_fails_the_job_and_a_dependent_never_starts() -> None:
    tr = tracefile.make([job("a", fail_at=(3,)), job("e", at=0, after=("a",))], nodes=1, gpus_per_node=1)
    sim = Sim(tr, RayPending()).run()
    assert sim.lives["a"].status == FAILED and sim.lives["e"].status == "NEVER" and sim.lives["e"].first_start is None


# --------------------------------------------------------------------------- the metrics
def test_max_min_fair_shares_and_jains_index() -> None:
    assert fair_shares(12, {"a": 2, "b": 20, "c": 20}) == {"a": 2, "b": 5, "c": 5}
    assert metrics.jain([1, 1, 1]) == 1 and metrics.jain([1, 0, 0]) == pytest.approx(1 / 3)
    assert metrics.quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95) == 10 and metrics.quantile([], 0.5) is None


def test_the_ledger_counts_fair_shares_only_while_the_users_ask_for_more_than_the_cluster() -> None:
    led = Ledger(capacity=8)
    led.advance(10, 8, {"a": 8}, {"b": 4})  # a holds all 8, b waits for 4: fair is 4 and 4
    led.advance(20, 4, {"a": 4}, {})  # no contention: not counted
    assert led.contended_s == 10 and led.held_u == {"a": 80, "b": 0} and led.fair_u == {"a": 40, "b": 40}
    assert led.waiting_s == 10 and led.alloc_gpu_s == 8 * 10 + 4 * 10


def test_a_run_reports_every_key_the_benchmark_promises() -> None:
    rep, _ = policies.run(tracefile.make([job("a"), job("b", (2,), at=3)], nodes=1, gpus_per_node=2), "fifo")
    for k in ("utilisation", "goodput", "mean_wait_s", "p95_wait_s", "mean_jct_s", "jain", "redone_gpu_h"):
        assert k in rep
    assert set(rep["p95_wait_s"]) == {"eval", "single"} and rep["jobs"]["succeeded"] == 2


# --------------------------------------------------------------------------- the week
def test_the_generated_week_is_the_same_for_a_seed_and_has_every_class() -> None:
    a, b = week.generate("standard", 5), week.generate("standard", 5)
    assert tracefile.dumps(a) == tracefile.dumps(b) and tracefile.dumps(a) != tracefile.dumps(week.generate("standard", 6))
    assert {j.cls for j in a.jobs} == {"eval", "single", "multinode", "sweep"} and len({j.user for j in a.jobs}) == 10
    arrivals = [j.arrival_s % 86400 / 3600 for j in a.jobs if j.arrival_s < 5 * 86400]
    assert sum(9 <= h < 20 for h in arrivals) > 0.6 * len(arrivals)  # a working day
    with pytest.raises(ValueError, match="one of standard, sweeps, multinode"):
        week.generate("holiday")


def test_the_benchmark_prints_one_json_object_a_key_per_policy(tmp_path) -> None:
    tr = tracefile.make([job("a", (2,)), job("b", (1,), at=1, user="v"), job("c", (2,), at=2, priority=5)],
                        nodes=1, gpus_per_node=2)
    tracefile.write(tr, tmp_path / "t.jsonl")
    out = subprocess.run([sys.executable, str(REPO / "scripts/bench_team.py"), "--trace", str(tmp_path / "t.jsonl"),
                          "--json"], capture_output=True, text=True, timeout=120)
    doc = json.loads(out.stdout)
    assert list(doc) == ["rayjobs", "fifo", "priority_hol", "easy_backfill", "kueue"]
    assert all(math.isfinite(doc[p]["mean_wait_s"]) and "eval" in doc[p]["p95_wait_s"] for p in doc)
    bad = subprocess.run([sys.executable, str(REPO / "scripts/bench_team.py"), "--trace", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("bench_team: cannot read the trace") and "Traceback" not in bad.stderr

"""The simulator's policies on small traces, pure: the queue's real rules (rayjobs.sim.queue) and the
baselines' semantics -- Ray's PENDING, SkyPilot's head-of-line blocking, Slurm's EASY backfill and
time limits, Kueue's reclaim and eviction. No Ray."""

from __future__ import annotations

from rayjobs.contract.halving import Halving
from rayjobs.oncluster import scheduler
from rayjobs.sim import policies, trace as tracefile
from rayjobs.sim.engine import Sim
from rayjobs.sim.ledger import HALVED, NEVER, SUCCEEDED
from rayjobs.sim.trace import TraceJob


def job(job_id: str, groups=(1,), *, at: float = 0.0, **kw) -> TraceJob:
    kw.setdefault("step_s", 10.0)
    kw.setdefault("steps", 10)
    kw.setdefault("startup_s", 5.0)
    return TraceJob(id=job_id, user=kw.pop("user", "u"), arrival_s=at, groups=tuple(groups), **kw)


def run(name: str, jobs: list[TraceJob], nodes: int = 1, gpus: int = 2, **qp) -> Sim:
    tr = tracefile.make(jobs, nodes=nodes, gpus_per_node=gpus)
    return policies.run(tr, name, scheduler.Policy(**qp) if qp else None)[1]


def started(sim: Sim, job_id: str) -> float:
    return sim.lives[job_id].first_start


# --------------------------------------------------------------------------- the baselines
def test_plain_ray_holds_a_gangs_first_group_while_its_second_waits() -> None:
    sim = run("fifo", [job("busy", (2,), steps=100), job("gang", (2, 2), at=1), job("small", (1,), at=2)], nodes=2)
    # the gang's first group took node 2 at once and held it, idle, until busy's node freed
    assert started(sim, "gang") == sim.lives["busy"].end + 1.0 and started(sim, "small") > started(sim, "gang")
    assert sim.ledger.busy_while_waiting_gpu_s < sim.ledger.alloc_while_waiting_gpu_s


def test_skypilots_queue_blocks_behind_a_job_that_does_not_fit_and_easy_backfill_does_not() -> None:
    jobs = [job("busy", (1,), steps=100), job("big", (2,), at=1), job("small", (1,), at=2, steps=2)]
    hol, easy = run("priority_hol", jobs), run("easy_backfill", jobs)
    assert started(hol, "small") > started(hol, "big")  # head-of-line blocking
    assert started(easy, "small") == 2.0  # its time limit (2x its run) ends before busy's: backfilled
    assert started(easy, "big") == easy.lives["busy"].end + 1.0  # and big's reservation held


def test_slurm_kills_a_job_at_its_time_limit_and_its_user_resubmits_it_with_twice_the_limit() -> None:
    sim = run("easy_backfill", [job("short-ask", steps=100, ckpt_every=10, time_limit_s=500)])
    life = sim.lives["short-ask"]
    assert life.status == SUCCEEDED and life.preemptions == 1 and life.attempts == 2
    assert life.redone_gpu_s == 9 * 10  # killed at 500 s: step 49 done, its last save at step 40


def test_kueue_reclaims_gpus_lent_to_a_borrowing_queue_evicting_the_newest_at_once() -> None:
    sim = run("kueue", [job("a1", steps=100, ckpt_every=10, user="a"), job("a2", at=1, steps=100, ckpt_every=10, user="a"),
                        job("b1", at=105, user="b")])
    # a and b each have 1 GPU of nominal quota; a borrowed b's; b's job evicts a2 (admitted last) at once
    assert started(sim, "b1") == 106.0 and sim.lives["a2"].preemptions == 1 and sim.lives["a1"].preemptions == 0
    assert sim.lives["a2"].redone_gpu_s > 0  # it lost the steps since its last save


# --------------------------------------------------------------------------- the queue's real rules in the simulator
def test_the_queue_in_the_simulator_runs_the_real_rules_fair_share_first() -> None:
    sim = run("rayjobs", [job("a-busy", steps=100, user="a"), job("a-long", steps=200, user="a"),
                          job("a-more", at=1, user="a"), job("b-one", at=2, user="b")], size_weight=0)
    # one GPU frees at a-busy's end: bob (holding none) goes before alice's next job (she holds one)
    assert started(sim, "b-one") == sim.lives["a-busy"].end + 1.0 < started(sim, "a-more")
    assert sim.policy.decisions > 0


def test_the_queue_preempts_a_preemptible_job_for_a_higher_priority_one_at_its_checkpoint() -> None:
    sim = run("rayjobs", [job("sweep", (2,), steps=100, ckpt_every=10, preemptible=True),
                          job("urgent", (2,), at=33, priority=10)])
    victim = sim.lives["sweep"]
    assert victim.preemptions == 1 and victim.redone_gpu_s == 0  # stopped right after its save at step 10 (t=105)
    assert started(sim, "urgent") == 105 + 1.0 and victim.status == SUCCEEDED


def test_the_queue_halves_a_sweep_and_fails_an_evaluation_after_a_halved_point() -> None:
    h = Halving("score", (4,), "max", 1 / 3, False).to_json()
    points = [job(f"s-{i}", steps=12, ckpt_every=4, sweep="s", halving=h, quality=2.0 - i) for i in range(3)]
    sim = run("rayjobs", points + [job("ev", at=0, after=("s-1",))], gpus=1)
    # one at a time: s-0 (the best) reaches the rung first and goes on; the others rank below it there
    assert sim.lives["s-0"].status == SUCCEEDED and sim.lives["s-1"].status == sim.lives["s-2"].status == HALVED
    assert sim.lives["s-1"].productive_gpu_s == 4 * 10 and sim.lives["ev"].status == NEVER
    plain = run("rayjobs_no_halving", points, gpus=1)
    assert all(lf.status == SUCCEEDED for lf in plain.lives.values())


def test_a_simulated_week_costs_the_queue_a_bounded_number_of_passes() -> None:
    from rayjobs.sim import week

    tr = week.generate("multinode", week.SEED)
    rep, sim = policies.run(tr, "rayjobs")
    assert rep["jobs"]["left"] == 0 and sim.policy.decisions <= 4 * len(tr.jobs)

"""The queue's rules on hand-built states and clusters: no Ray, no I/O (rayjobs.oncluster.scheduler)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from schedfakes import NOW, cluster, node, queued, running, state  # noqa: E402

from rayjobs.oncluster.scheduler import (  # noqa: E402
    Admit, CallOff, Fail, Offer, Policy, Preempt, StopOverdue, decide,
)


def admitted(d: Any) -> list[str]:
    return [a.id for a in d.of(Admit)]


# --------------------------------------------------------------------------- order and fit
def test_higher_priority_goes_first_when_only_one_fits() -> None:
    st = state(queued("low", [2], priority=0, at=1), queued("high", [2], priority=5, at=2))
    d = decide(st, cluster(node("n0", 2)), Policy(), NOW)
    assert admitted(d) == ["high"]
    assert d.notes["low"].startswith("waiting: needs 1 group of 2 GPU")


def test_submission_order_within_a_priority_then_sweep_point() -> None:
    st = state(queued("b", [1], at=2), queued("a", [1], at=1), queued("s-1", [1], at=3, sweep="s"),
               queued("s-0", [1], at=3, sweep="s"))
    d = decide(st, cluster(node("n0", 3)), Policy(), NOW)
    assert admitted(d) == ["a", "b", "s-0"]


def test_each_group_fits_on_one_node_or_the_job_waits() -> None:
    st = state(queued("big", [2], at=1))
    d = decide(st, cluster(node("n0", 2, free=1), node("n1", 2, free=1)), Policy(), NOW)
    assert admitted(d) == []
    assert "free now: 1 GPU + 3 CPU, 1 GPU + 3 CPU" in d.notes["big"]


def test_groups_promised_to_starting_jobs_are_not_handed_out_again() -> None:
    # an admitted trainer that has not created its placement group yet still owns its 2 GPUs
    st = state(queued("next", [2], at=2), running("starting", [2], unplaced=[2]))
    d = decide(st, cluster(node("n0", 4, free=2)), Policy(), NOW)
    assert admitted(d) == []
    assert "2 GPUs promised to starting jobs" in d.notes["next"]


def test_backfill_past_a_blocked_job_while_it_waited_less_than_backfill_s() -> None:
    st = state(queued("big", [4], at=NOW - 10), queued("small", [1], at=NOW - 5))
    d = decide(st, cluster(node("n0", 4, free=2)), Policy(backfill_s=300), NOW)
    assert admitted(d) == ["small"]
    assert d.reserving_for is None


def test_starvation_guard_holds_everything_behind_a_job_blocked_too_long() -> None:
    st = state(queued("big", [4], at=NOW - 400), queued("small", [1], at=NOW - 5))
    d = decide(st, cluster(node("n0", 4, free=2)), Policy(backfill_s=300), NOW)
    assert admitted(d) == []
    assert d.reserving_for == "big"
    assert d.blocked == "held behind big (waiting > 300 s; no backfill onto the GPUs kept for it on n0)"


def test_higher_priority_still_goes_first_past_the_starvation_guard() -> None:
    st = state(queued("big", [4], at=NOW - 400), queued("urgent", [1], at=NOW - 5, priority=9))
    d = decide(st, cluster(node("n0", 4, free=2)), Policy(backfill_s=300), NOW)
    assert admitted(d) == ["urgent"]
    assert d.reserving_for == "big"


def test_a_job_that_can_never_fit_neither_blocks_nor_reserves() -> None:
    st = state(queued("huge", [8], at=NOW - 1000), queued("small", [1], at=NOW - 5))
    d = decide(st, cluster(node("n0", 4, free=1)), Policy(backfill_s=300), NOW)
    assert admitted(d) == ["small"]
    assert d.notes["huge"].startswith("can never fit the cluster as it is now: needs 1 group of 8 GPU")
    assert d.reserving_for is None


def test_a_job_without_gpus_starts_at_once_on_a_full_cluster() -> None:
    st = state(queued("gpu", [1], at=1), queued("cpu", [], at=2))
    d = decide(st, cluster(node("n0", 1, free=0)), Policy(), NOW)
    assert admitted(d) == ["cpu"]


# --------------------------------------------------------------------------- after
def test_after_holds_a_job_until_its_dependency_succeeded() -> None:
    st = state(queued("dep", [1], at=1), queued("eval", [1], at=2, after=["dep"]))
    d = decide(st, cluster(node("n0", 2)), Policy(), NOW)
    assert admitted(d) == ["dep"]
    assert d.holds["eval"] == "after" and d.notes["eval"] == "after dep: starts once they SUCCEEDED"
    st.finish("dep", "SUCCEEDED")
    st.take("dep")
    assert admitted(decide(st, cluster(node("n0", 2)), Policy(), NOW)) == ["eval"]


@pytest.mark.parametrize("how", ["FAILED", "STOPPED", "gone"])
def test_after_fails_a_job_never_started_when_a_dependency_did_not_succeed(how: str) -> None:
    st = state(queued("eval", [1], at=2, after=["dep"]))
    if how != "gone":
        st.finish("dep", how)
    d = decide(st, cluster(node("n0", 2)), Policy(), NOW)
    [fail] = d.of(Fail)
    assert fail.id == "eval" and fail.cause == f"dependency failed: dep {how}"
    assert "it never started" in fail.message and admitted(d) == []


# --------------------------------------------------------------------------- quota
def test_quota_passes_over_a_user_at_their_cap_while_another_user_waits() -> None:
    st = state(running("a1", [2], user="alice"), queued("a2", [1], at=1, user="alice"),
               queued("b1", [1], at=2, user="bob"))
    d = decide(st, cluster(node("n0", 4, free=2)), Policy(quota={"*": 2}), NOW)
    assert admitted(d) == ["b1"]
    assert d.holds["a2"] == "quota" and "alice holds 2 of 2 GPUs" in d.notes["a2"]


def test_quota_does_not_apply_to_a_user_alone_on_the_cluster() -> None:
    st = state(running("a1", [2], user="alice"), queued("a2", [1], at=1, user="alice"))
    assert admitted(decide(st, cluster(node("n0", 4, free=2)), Policy(quota={"*": 2}), NOW)) == ["a2"]


# --------------------------------------------------------------------------- preemption
def holdings(**jobs: int) -> Any:
    """Each running job holds N GPUs (and 3N CPUs) on n0."""
    return {i: {"n0": [float(g), 3.0 * g]} for i, g in jobs.items()}


def test_a_job_of_higher_priority_preempts_a_preemptible_one_at_its_checkpoint() -> None:
    st = state(running("sweep-0", [2], preemptible=True), queued("urgent", [2], at=1, priority=10))
    d = decide(st, cluster(node("n0", 2, free=0), holdings=holdings(**{"sweep-0": 2})), Policy(), NOW)
    assert [(a.id, a.by) for a in d.of(Preempt)] == [("sweep-0", "urgent")]
    assert d.notes["urgent"].startswith("preempting sweep-0: starts once they stopped")
    assert d.reserving_for == "urgent" and "preempting for it" in d.blocked


def test_victims_by_priority_order_are_the_lowest_priority_then_the_youngest() -> None:
    st = state(running("old", [1], preemptible=True, priority=1, admitted=NOW - 100),
               running("young", [1], preemptible=True, priority=1, admitted=NOW - 10),
               running("lowest", [1], preemptible=True, priority=0, admitted=NOW - 50),
               queued("urgent", [2], at=1, priority=10))
    d = decide(st, cluster(node("n0", 3, free=0), holdings=holdings(old=1, young=1, lowest=1)),
               Policy(victim_order="priority"), NOW)
    assert [a.id for a in d.of(Preempt)] == ["lowest", "young"]


def test_victims_are_the_set_that_loses_the_least_work() -> None:
    """GPUs x seconds since the last checkpoint: a 2-GPU job that just saved loses less than a 1-GPU
    one 10 minutes past its checkpoint, though it is older and of higher priority."""
    st = state(running("saved", [2], preemptible=True, priority=1, admitted=NOW - 3000),
               running("stale", [1], preemptible=True, priority=0, admitted=NOW - 900),
               running("stale2", [1], preemptible=True, priority=0, admitted=NOW - 700),
               queued("urgent", [2], at=1, priority=10))
    st.running["saved"].checkpoint_at = NOW - 20  # 2 GPU x 20 s = 40 against 1 x 900 + 1 x 700
    st.running["stale"].checkpoint_at = NOW - 900
    view = cluster(node("n0", 4, free=0), holdings=holdings(saved=2, stale=1, stale2=1))
    d = decide(st, view, Policy(), NOW)
    assert [a.id for a in d.of(Preempt)] == ["saved"]
    assert "least work lost: 2 GPU x 20.0 s since its last checkpoint" in d.of(Preempt)[0].why
    st.running["saved"].checkpoint_at = NOW - 2000  # now 4,000 GPU-s: the two 1-GPU jobs lose less (1,600)
    assert sorted(a.id for a in decide(st, view, Policy(), NOW).of(Preempt)) == ["stale", "stale2"]


def test_never_preempts_a_job_that_is_not_preemptible_or_not_of_lower_priority() -> None:
    st = state(running("fixed", [1], preemptible=False), running("peer", [1], preemptible=True, priority=10),
               queued("urgent", [1], at=1, priority=10))
    d = decide(st, cluster(node("n0", 2, free=0), holdings=holdings(fixed=1, peer=1)), Policy(), NOW)
    assert d.of(Preempt) == []
    assert d.notes["urgent"].startswith("waiting:")


def test_a_preemption_under_way_is_waited_for_not_repeated() -> None:
    st = state(running("victim", [2], preemptible=True, preempting_for="urgent", asked=NOW - 5),
               running("other", [2], preemptible=True), queued("urgent", [2], at=1, priority=10))
    d = decide(st, cluster(node("n0", 4, free=0), holdings=holdings(victim=2, other=2)), Policy(), NOW)
    assert d.of(Preempt) == [] and d.of(CallOff) == []
    assert d.notes["urgent"].startswith("preempting victim:")


def test_a_preemption_is_called_off_when_its_job_no_longer_waits() -> None:
    st = state(running("victim", [2], preemptible=True, preempting_for="gone-away", asked=NOW - 5),
               running("forced", [1], preemptible=True, preempting_for="gone-away", forced=True),
               running("user-stops", [1], preemptible=True, preempting_for="gone-away", stop_asked=True))
    d = decide(st, cluster(node("n0", 4, free=0)), Policy(), NOW)
    assert d.of(CallOff) == [CallOff("victim", "gone-away")]


def test_a_preempted_job_whose_runner_missed_its_deadline_is_stopped() -> None:
    st = state(running("late", [1], preemptible=True, preempting_for="urgent", asked=NOW - 1000, wait_s=900),
               running("on-time", [1], preemptible=True, preempting_for="urgent", asked=NOW - 100, wait_s=900),
               queued("urgent", [2], at=1, priority=10))
    d = decide(st, cluster(node("n0", 2, free=0)), Policy(), NOW)
    assert d.of(StopOverdue) == [StopOverdue("late")]


# --------------------------------------------------------------------------- gates and switches
def test_no_gpu_job_is_admitted_while_an_ended_job_is_reaped() -> None:
    st = state(queued("gpu", [1], at=1), queued("cpu", [], at=2))
    st.gpu_gate = "reaping after done-1"
    d = decide(st, cluster(node("n0", 2)), Policy(), NOW)
    assert admitted(d) == ["cpu"] and d.gate == "reaping after done-1" and d.of(Offer) == []


@pytest.mark.parametrize("policy,nodes,why", [
    (Policy(enabled=False), [node("n0", 1, free=0)], "the queue is switched off"),
    (Policy(), [node("n0", 0)], "the cluster has no GPUs: the GPU demand is not enforced"),
])
def test_every_ready_job_starts_when_the_queue_cannot_enforce_gpus(policy: Policy, nodes: list, why: str) -> None:
    st = state(queued("a", [4], at=1), queued("b", [4], at=2), queued("c", [1], at=3, after=["x"]))
    st.finish("x", "SUCCEEDED")
    d = decide(st, cluster(*nodes), policy, NOW)
    assert [(a.id, a.note) for a in d.of(Admit)] == [("a", why), ("b", why), ("c", why)]


def test_a_preempted_job_waits_while_its_old_ray_entry_is_deleted() -> None:
    st = state(queued("back", [1], at=1), queued("next", [1], at=2))
    st.requeueing.add("back")
    d = decide(st, cluster(node("n0", 1)), Policy(), NOW)
    assert admitted(d) == ["next"] and d.holds["back"] == "requeueing"


# --------------------------------------------------------------------------- pre-start
def test_the_next_job_in_line_is_pre_started() -> None:
    st = state(running("busy", [2]), queued("second", [2], at=2), queued("first", [2], at=1))
    d = decide(st, cluster(node("n0", 2, free=0)), Policy(), NOW)
    assert d.of(Offer) == [Offer("first")]


@pytest.mark.parametrize("why", ["one already", "calm", "a trainer starting", "switched off"])
def test_no_pre_start_while(why: str) -> None:
    unplaced = [2] if why == "a trainer starting" else []
    st = state(running("busy", [2], unplaced=unplaced), queued("first", [2], at=1), queued("second", [2], at=2))
    st.standby = "first" if why == "one already" else None
    st.calm_until = NOW + 1 if why == "calm" else 0.0
    d = decide(st, cluster(node("n0", 2, free=0)), Policy(standby=why != "switched off"), NOW)
    assert d.of(Offer) == []


# --------------------------------------------------------------------------- interplay and scale
def test_quota_preemption_and_backfill_together() -> None:
    # alice is at her cap; bob's urgent 2-GPU job preempts carol's preemptible sweep point; nothing
    # behind bob's job starts meanwhile, though carol's 1-GPU job would fit the 1 GPU left
    st = state(running("a-run", [2], user="alice"), running("c-sweep", [1], user="carol", preemptible=True),
               queued("a-more", [1], at=1, user="alice", priority=10), queued("b-urgent", [2], at=2, user="bob", priority=10),
               queued("c-small", [1], at=3, user="carol"))
    d = decide(st, cluster(node("n0", 4, free=1), holdings=holdings(**{"c-sweep": 1})),
               Policy(quota={"alice": 2}, fair_share=False), NOW)
    assert d.holds["a-more"] == "quota"
    assert [(a.id, a.by) for a in d.of(Preempt)] == [("c-sweep", "b-urgent")]
    assert admitted(d) == [] and d.reserving_for == "b-urgent"


def test_ten_thousand_waiting_jobs_cost_a_pass_only_what_can_change() -> None:
    # 16 nodes x 8 GPUs, all busy; 10,000 jobs of three shapes wait: the pass looks at the first of
    # each shape, not at every job, and once GPUs free it admits exactly what fits
    nodes = [node(f"n{i}", 8, free=0) for i in range(16)]
    jobs = [queued(f"j{i:05d}", [[1], [2], [8]][i % 3], at=NOW - 5 + i * 1e-4) for i in range(10_000)]
    st = state(*jobs)
    d = decide(st, cluster(*nodes), Policy(), NOW)
    assert admitted(d) == [] and d.examined == 3
    nodes[3] = node("n3", 8, free=8)
    d = decide(st, cluster(*nodes), Policy(), NOW)
    # in line order: 1 + 2 + 8 > 8, so j00000 (1) and j00001 (2) fit, j00002 (8) waits; then 1, 2 ...
    got = admitted(d)
    assert got[:2] == ["j00000", "j00001"] and sum([1, 2, 8][int(i[1:]) % 3] for i in got) == 8
    assert d.examined < 20


# --------------------------------------------------------------------------- the pass's edges
def test_a_pass_runs_only_while_jobs_wait_or_a_rule_watches_a_running_job() -> None:
    from rayjobs.oncluster.scheduler import WATCHES, needs_pass

    st = state(running("plain", [1]))
    assert not needs_pass(st) and decide(st, cluster(node("n0", 2)), Policy(), NOW).actions == []
    st = state(running("victim", [1], preemptible=True, preempting_for="gone-away"))
    assert needs_pass(st) and decide(st, cluster(node("n0", 2)), Policy(), NOW).of(CallOff) == [CallOff("victim", "gone-away")]
    assert needs_pass(state(queued("w", [1])))
    assert len(WATCHES) == 2  # preemptions under way, halved sweeps' points


def test_what_a_running_job_holds_is_plain_data_read_before_the_pass() -> None:
    """The victims' rule reads what each running job holds from the view it is handed (no call out)."""
    from rayjobs.oncluster.clusterstate import holdings_of

    held = {"0a0b0c0d": {"n0": [2.0, 6.0]}, "11111111": {"n1": [1.0, 3.0]}}
    assert holdings_of({"020000000a0b0c0d": False, "0300000011111111": True}, held) == {"n0": [2.0, 6.0], "n1": [1.0, 3.0]}
    assert holdings_of(None, held) == {}
    st = state(running("sweep-0", [2], preemptible=True), queued("urgent", [2], at=1, priority=10))
    d = decide(st, cluster(node("n0", 2, free=0), holdings={"sweep-0": {"n0": [2.0, 6.0]}}), Policy(), NOW)
    assert [a.id for a in d.of(Preempt)] == ["sweep-0"]
    assert decide(st, cluster(node("n0", 2, free=0)), Policy(), NOW).of(Preempt) == []  # holding nothing: frees nothing


# --------------------------------------------------------------------------- fair share (issue 49)
def test_fair_share_the_user_holding_the_least_goes_first() -> None:
    # alice holds 2 GPUs and queued first; bob holds none: his job goes first (off: the line's order)
    st = state(running("a-run", [2], user="alice"), queued("a-next", [1], at=1, user="alice"),
               queued("b-next", [1], at=2, user="bob"))
    assert admitted(decide(st, cluster(node("n0", 3, free=1)), Policy(), NOW)) == ["b-next"]
    assert admitted(decide(st, cluster(node("n0", 3, free=1)), Policy(fair_share=False), NOW)) == ["a-next"]


def test_fair_share_remembers_recent_use_and_forgets_it_with_its_half_life() -> None:
    st = state(queued("a-next", [1], at=1, user="alice"), queued("b-next", [1], at=2, user="bob"))
    st.charge("alice", 8, NOW - 3600, NOW - 60)  # alice used 8 GPUs for most of the last hour
    assert admitted(decide(st, cluster(node("n0", 1)), Policy(), NOW)) == ["b-next"]
    # a day later, with a half-life of 1 h, that use is forgotten: the line's order again
    st.half_life_s = 3600.0
    assert admitted(decide(st, cluster(node("n0", 1)), Policy(), NOW + 86400)) == ["a-next"]
    assert st.used("alice", NOW - 60) == pytest.approx(8 * 3540, rel=0.1)  # GPU-s, a little decayed (half-life 4 h)


def test_fair_share_among_users_alike_the_smaller_expected_job_goes_first() -> None:
    from rayjobs.oncluster.queuestate import Running
    from schedfakes import record

    st = state(queued("big", [2], at=1, user="alice"), queued("small", [2], at=2, user="bob", sweep="s"))
    done = record("s-0", [2], user="bob", sweep="s")
    st.released(Running(done, st.waiting["small"].req, NOW - 600), NOW, "SUCCEEDED")  # bob's sweep: 10 min a point
    bob_used = st.used("bob", NOW)
    st.usage["alice"] = (bob_used, NOW)  # both users alike
    assert st.expected_s(st.waiting["small"]) == 600 and st.expected_s(st.waiting["big"]) is None
    assert admitted(decide(st, cluster(node("n0", 2)), Policy(), NOW)) == ["small"]
    assert admitted(decide(st, cluster(node("n0", 2)), Policy(size_weight=0), NOW)) == ["big"]


# --------------------------------------------------------------------------- kept GPUs (issue 49)
def test_a_job_blocked_too_long_has_gpus_kept_on_the_node_closest_to_fitting_it_and_others_start_elsewhere() -> None:
    st = state(queued("big", [4], at=NOW - 400), queued("small", [1], at=NOW - 5))
    d = decide(st, cluster(node("n0", 4, free=3), node("n1", 4, free=1)), Policy(backfill_s=300), NOW)
    # n0 (3 of 4 free) is kept for big; small starts on n1 (was: nothing behind big started anywhere)
    assert admitted(d) == ["small"] and d.reserving_for == "big"
    assert "GPUs kept for it on n0" in d.notes["big"]


def test_kept_gpus_go_to_the_node_whose_jobs_are_expected_to_end_first() -> None:
    from rayjobs.oncluster.policy import ends_by_node, keep_nodes
    from rayjobs.oncluster.queuestate import Running

    st = state(running("short", [2], admitted=NOW - 60), running("long", [1], admitted=NOW - 60, sweep="L"))
    st.took["u/x/2"] = [120.0]  # runs like "short" take 2 min; "long"'s kind is not known
    holds = {"short": {"n0": [2.0, 6.0]}, "long": {"n1": [1.0, 3.0]}}
    ends = ends_by_node(st.running.values(), holds, st.expected_s, NOW)
    assert ends == {"n0": [(NOW + 60, 2.0)], "n1": [(float("inf"), 1.0)]}
    nodes = [node("n0", 4, free=2), node("n1", 4, free=3)]
    assert keep_nodes([4], nodes, {}, ends, NOW) == {"n0": 4.0}  # n1 has more free, but n0 frees first
    assert keep_nodes([4], nodes, {}) == {"n1": 4.0}  # nothing known: the most free
    assert isinstance(st.running["short"], Running)


def test_a_job_expected_to_end_before_the_kept_gpus_are_needed_may_use_them() -> None:
    st = state(running("holder", [2], admitted=NOW - 60), queued("big", [4], at=NOW - 400),
               queued("quick", [1], at=NOW - 5, sweep="q"), queued("slow", [1], at=NOW - 4, sweep="z"))
    st.took.update({"u/x/2": [3600.0], "sweep:q": [600.0], "sweep:z": [7200.0]})  # holder ends in ~59 min
    view = cluster(node("n0", 4, free=2), holdings={"holder": {"n0": [2.0, 6.0]}})
    d = decide(st, view, Policy(backfill_s=300, fair_share=False), NOW)
    assert admitted(d) == ["quick"] and "backfilled onto GPUs kept for big" in d.of(Admit)[0].note
    assert d.notes["slow"].startswith("held behind big")  # 2 h: past the moment big's GPUs are needed


# --------------------------------------------------------------------------- preemption keeps, fair share reclaims
def test_a_preempting_job_keeps_the_gpus_it_waits_for_and_the_rest_of_the_cluster_stays_open() -> None:
    st = state(running("victim", [2], preemptible=True), queued("urgent", [2], at=1, priority=10),
               queued("other", [1], at=2))
    view = cluster(node("n0", 2, free=0), node("n1", 2, free=1), holdings={"victim": {"n0": [2.0, 6.0]}})
    d = decide(st, view, Policy(), NOW)
    assert [a.id for a in d.of(Preempt)] == ["victim"] and admitted(d) == ["other"]  # (was: other held too)
    assert "GPUs kept for it on n0" in d.notes["urgent"]


def reclaim_state(expected_s: float, waited_s: float = 400.0) -> Any:
    st = state(running("a-sweep", [2], user="alice", preemptible=True, admitted=NOW - 1000),
               running("a-more", [2], user="alice", admitted=NOW - 1000),
               queued("b-eval", [1], at=NOW - waited_s, user="bob", sweep="ev"))
    st.took["sweep:ev"] = [expected_s]
    return st


def test_fair_share_reclaims_gpus_for_a_short_job_of_a_user_below_their_share() -> None:
    view = cluster(node("n0", 4, free=0), holdings={"a-sweep": {"n0": [2.0, 6.0]}, "a-more": {"n0": [2.0, 6.0]}})
    d = decide(reclaim_state(600), view, Policy(), NOW)
    assert [(a.id, a.by) for a in d.of(Preempt)] == [("a-sweep", "b-eval")] and d.of(Preempt)[0].why.startswith("fair share")
    assert decide(reclaim_state(7200), view, Policy(), NOW).of(Preempt) == []  # not a short job
    assert decide(reclaim_state(600, waited_s=60), view, Policy(), NOW).of(Preempt) == []  # not waiting long enough
    assert decide(reclaim_state(600), view, Policy(fair_share=False), NOW).of(Preempt) == []


def test_the_head_reads_the_fair_share_settings_and_says_which_are_malformed(monkeypatch, capsys) -> None:
    from rayjobs.oncluster.queueservice import policy_from_env

    monkeypatch.setenv("RAYJOBS_FAIR_SHARE", "off")
    monkeypatch.setenv("RAYJOBS_FAIR_HALF_LIFE_S", "7200")
    monkeypatch.setenv("RAYJOBS_FAIR_SIZE_WEIGHT", "lots")
    p = policy_from_env()
    assert not p.fair_share and p.fair_half_life_s == 7200 and p.size_weight == Policy().size_weight
    assert "RAYJOBS_FAIR_SIZE_WEIGHT='lots' is not a number" in capsys.readouterr().err


def test_halved_points_histories_are_read_off_the_loop_and_only_where_a_file_changed(tmp_path) -> None:
    """The queue's loop only applies a read the pool finished; a run whose metrics files did not
    change is not read again (was: every point's files re-read on the loop every second)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from rayjobs.contract.halving import Halving
    from rayjobs.oncluster.histories import Histories

    h = Halving("score", (2,), "max", 0.5, False).to_json()
    st = state(running("p-0", [1], sweep="p", halving=h, storage=str(tmp_path)),
               running("p-1", [1], sweep="p", halving=h, storage=str(tmp_path)))
    files = {}
    for jid in ("p-0", "p-1"):
        run_dir = Path(st.running[jid].rec.meta.run_dir)
        run_dir.mkdir(parents=True)
        files[jid] = run_dir / "metrics.1.jsonl"
        files[jid].write_text('{"step": 1, "data": {"score": 0.5}}\n')
    readers: set[str] = set()
    with ThreadPoolExecutor(1) as pool:
        hs = Histories(pool, every_s=0.0)
        real = hs._read
        hs._read = lambda todo: (readers.add(threading.current_thread().name), real(todo))[1]
        hs.observe(st, NOW)
        assert st.running["p-0"].history == {}  # started, not applied: the loop never waits for it
        hs._reading.result()
        v = st.version
        hs.observe(st, NOW + 1)  # applied; the next read starts
        assert st.running["p-0"].history == {1: {"score": 0.5}} and st.version == v + 2
        hs._reading.result()
        assert hs.files_read == 2  # the second read found both files as they were: none read again
        files["p-1"].write_text(files["p-1"].read_text() + '{"step": 2, "data": {"score": 0.7}}\n')
        hs.observe(st, NOW + 2)
        hs._reading.result()
        hs.observe(st, NOW + 3)
        assert hs.files_read == 3 and max(st.running["p-1"].history) == 2 and threading.current_thread().name not in readers

"""Per-node fit (rayjobs.contract.capacity), the queue's ordering and its views as rows, without a cluster."""

from rayjobs.contract import capacity
from rayjobs.oncluster import request
from rayjobs.contract.capacity import FITS, NEVER, WAIT, Node


def nodes(*shape):
    """nodes((total_gpu, total_cpu, free_gpu, free_cpu), ...)"""
    return [Node(f"n{i}", *s) for i, s in enumerate(shape)]


def test_group_must_fit_on_one_node():
    # 1 free GPU on each of 2 nodes: a 2-GPU group waits (verl's PG would block forever)
    v = capacity.fit([2], nodes((2, 6, 1, 3), (2, 6, 1, 3)))
    assert v.state == WAIT and "free now: 1 GPU + 3 CPU, 1 GPU + 3 CPU" in v.reason
    assert capacity.fit([1, 1], nodes((2, 6, 1, 3), (2, 6, 1, 3))).state == FITS
    assert capacity.fit([2], nodes((2, 6, 0, 0), (2, 6, 2, 6))).placement == ("n1",)


def test_cpus_count_three_per_gpu():
    # 2 GPUs but only 5 CPUs on the node: a 2-GPU group can never fit there
    v = capacity.fit([2], nodes((2, 5, 2, 5)))
    assert v.state == NEVER and "no node has 2 GPU + 6 CPU" in v.reason
    # CPUs taken by another job: wait
    assert capacity.fit([1], nodes((2, 6, 2, 2))).state == WAIT


def test_groups_may_share_a_node_and_need_exact_packing():
    assert capacity.fit([2, 2], nodes((4, 12, 4, 12))).state == FITS
    # best-fit-decreasing matters: [3, 2, 2, 1] into nodes of 4 free GPUs each
    v = capacity.fit([2, 3, 1, 2], nodes((4, 12, 4, 12), (4, 12, 4, 12)))
    assert v.fits and len(v.placement) == 4


def test_reserved_groups_are_subtracted():
    free = nodes((2, 6, 2, 6), (2, 6, 2, 6))
    assert capacity.fit([2], free, reserved=[2]).state == FITS
    v = capacity.fit([2], free, reserved=[2, 2])
    assert v.state == WAIT and "promised to starting jobs" in v.reason
    # a reserved 1 and a new 2 on nodes with (2, 1) free: 1 must go to the 1-node
    assert capacity.fit([2], nodes((2, 6, 2, 6), (2, 6, 1, 3)), reserved=[1]).state == FITS


def test_never_messages_say_needs_and_has():
    two = nodes((2, 6, 2, 6), (2, 6, 2, 6))
    why = capacity.never_reason([2, 2, 2], two)
    assert why.startswith("needs 3 groups of 2 GPU + 6 CPU, each on one node, but 6 GPUs in all, the cluster has 4")
    assert "2 x (2 GPU + 6 CPU)" in why
    assert capacity.never_reason([4], two).startswith("needs 1 group of 4 GPU + 12 CPU on one node, but no node has 4 GPU + 12 CPU")
    assert capacity.never_reason([2, 2], two) is None
    assert capacity.never_reason([], two) is None


def test_nodes_from_state_rows():
    rows = [{"node_id": "a", "state": "ALIVE", "resources_total": {"GPU": 8.0, "CPU": 96.0}},
            {"node_id": "b", "state": "DEAD", "resources_total": {"GPU": 8.0, "CPU": 96.0}},
            {"node_id": "c", "state": "ALIVE", "resources_total": {"CPU": 4.0}}]
    ns = capacity.nodes_from_state(rows)
    assert [(n.id, n.gpus, n.cpus) for n in ns] == [("a", 8.0, 96.0), ("c", 0.0, 4.0)]


def test_order_priority_then_submission_then_sweep_point():
    from rayjobs.contract.record import JobRecord
    from rayjobs.contract.status import State

    meta = lambda prio, at, sweep="": {"gpu_groups": "[1]", "priority": str(prio), "submitted_at": at, "sweep": sweep}
    rec = lambda sid, m, queued: JobRecord(id=sid, state=State.WAITING, spec={"metadata": m}, queued_at=queued)
    reqs = [
        request.request_from_record(rec("a", meta(0, "2026-01-01T10:00:00+00:00"), 2.0)),
        request.request_from_record(rec("s-1", meta(0, "2026-01-01T10:00:00+00:00", "s"), 1.0)),
        request.request_from_record(rec("s-0", meta(0, "2026-01-01T10:00:00+00:00", "s"), 3.0)),
        request.request_from_record(rec("late-high", meta(10, "2026-01-01T10:05:00+00:00"), 9.0)),
        request.request_from_record(rec("early", meta(0, "2026-01-01T09:59:59+00:00"), 0.0)),
    ]
    assert [r.id for r in sorted(reqs, key=lambda r: r.key())] == ["late-high", "early", "a", "s-0", "s-1"]
    assert reqs[0].since == 2.0 and reqs[0].groups == (1,)  # the guard's clock: when it was queued (durable)


def test_queue_view_rows_for_waiting_and_finished_jobs():
    """What `rayjobs list` shows of the queue's views (its API's JobView dicts) of jobs Ray does not
    list: waiting ones (QUEUED, their place) and finished ones the queue pruned from Ray (their
    final metrics)."""
    from dataclasses import fields

    from rayjobs.contract import wire
    from rayjobs.contract.record import JobRecord
    from rayjobs.contract.status import State, Status
    from rayjobs.oncluster import jobviews
    from rayjobs.views import jobrows, queuestatus

    meta = {"rayjobs": "0.1.0", "experiment": "fake_ppo", "sweep": "", "gpu_groups": "[2]", "priority": "3",
            "submitted_at": "2026-12-01T10:00:00+00:00", "overrides": "[]"}
    waiting = wire.JobView(submission_id="w1", status="QUEUED", state="waiting", metadata=meta,
                           message="waiting: needs ...", queue_position=1, queued_at=1796000000.0)
    done = jobviews.done_view(JobRecord(
        id="h1", state=State.DONE, spec={"metadata": meta}, queued_at=1796000000.0, status=Status.of("SUCCEEDED"),
        admitted_at=1796000000.25, finished_at=1796000101.5,
        start_time=1796000000000, end_time=1796000100000, pruned=True,
        final={"step": 7, "data": {"critic/score/mean": 0.5}, "attempts": 2}))
    assert set(done) == {f.name for f in fields(wire.JobView)}  # the wire's fields exactly
    done = wire.from_json(wire.JobView, done)  # as the laptop's client reads the answer
    assert queuestatus.is_waiting(waiting) and not queuestatus.is_waiting(done) and not queuestatus.is_waiting(None)
    rows = {r["id"]: r for r, _ in jobrows.rows([waiting, done], None)}
    assert (rows["w1"]["status"], rows["w1"]["queue_position"], rows["w1"]["attempt"], rows["w1"]["gpus"]) == ("QUEUED", 1, 0, 2)
    assert rows["w1"]["priority"] == 3 and rows["w1"]["message"] == "waiting: needs ..."
    assert (rows["h1"]["status"], rows["h1"]["step"], rows["h1"]["score"], rows["h1"]["attempt"]) == ("SUCCEEDED", 7, 0.5, 2)
    assert rows["h1"]["queue_position"] is None
    # the queue's own times, to the millisecond (status --json times admissions with them)
    from datetime import datetime
    got = [datetime.fromisoformat(rows["h1"][k]).timestamp() for k in ("queued_at", "admitted_at", "finished_at")]
    assert got == [1796000000.0, 1796000000.25, 1796000101.5]
    assert rows["w1"]["admitted_at"] is None and rows["w1"]["queued_at"]


def test_a_failed_job_shows_its_cause_while_its_leftovers_are_reaped():
    """Between Ray's FAILED and the queue's record (its GPUs are cleaned first), status already
    says why, from the runner's last line that Ray's job message quotes."""
    from rayjobs.contract.record import JobRecord
    from rayjobs.contract.status import State
    from rayjobs.oncluster import jobviews
    from rayjobs.oncluster.queuestate import Running
    from rayjobs.oncluster.request import Request

    rec = JobRecord(id="f1", state=State.ADMITTED, spec={"metadata": {}}, queued_at=1796000000.0)
    msg = "Job entrypoint command failed with exit code 1, last available logs:\n" \
          "[rayjobs] job failed: error in your reward function: KeyError: 'label' (not retried: an error in the run itself)\n"
    r = Running(rec=rec, req=Request(id="f1", groups=(1,)), admitted_at=1796000001.0, in_ray=True,
                ray={"status": "FAILED", "message": msg}, ended="FAILED")
    v = jobviews.running_view(r)
    assert (v["status"], v["cause"]) == ("FAILED", "error in your reward function: KeyError: 'label'")
    r.ended, r.ray = "SUCCEEDED", {"status": "SUCCEEDED", "message": msg}
    assert jobviews.running_view(r)["cause"] is None

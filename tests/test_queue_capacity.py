"""Per-node fit (rayjobs.oncluster.capacity) and the queue's ordering, without a cluster."""

import json
import time
from types import SimpleNamespace

import pytest

from rayjobs.oncluster import capacity
from rayjobs.views import queuestatus
from rayjobs.oncluster import request
from rayjobs.oncluster.capacity import FITS, NEVER, WAIT, Node


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
    meta = lambda prio, at, sweep="": {"gpu_groups": "[1]", "priority": str(prio), "submitted_at": at, "sweep": sweep}
    reqs = [
        request.request_from_metadata("a", meta(0, "2026-01-01T10:00:00+00:00"), created_ms=2),
        request.request_from_metadata("s-1", meta(0, "2026-01-01T10:00:00+00:00", "s"), created_ms=1),
        request.request_from_metadata("s-0", meta(0, "2026-01-01T10:00:00+00:00", "s"), created_ms=3),
        request.request_from_metadata("late-high", meta(10, "2026-01-01T10:05:00+00:00"), created_ms=9),
        request.request_from_metadata("early", meta(0, "2026-01-01T09:59:59+00:00"), created_ms=0),
    ]
    assert [r.id for r in sorted(reqs, key=lambda r: r.key())] == ["late-high", "early", "a", "s-0", "s-1"]


def test_overlay_reports_only_live_queued_jobs(monkeypatch):
    doc = {"queue": [{"id": "j2", "position": 1}, {"id": "j3", "position": 2}, {"id": "gone", "position": 3}]}
    monkeypatch.setattr(queuestatus, "read_status", lambda client: doc)
    jobs = [{"submission_id": "j2", "status": "RUNNING"}, {"submission_id": "j3", "status": "RUNNING"},
            {"submission_id": "gone", "status": "STOPPED"}, {"submission_id": "j1", "status": "RUNNING"}]
    assert queuestatus.overlay(None, jobs) == {"j2": {"status": "QUEUED", "queue_position": 1},
                                         "j3": {"status": "QUEUED", "queue_position": 2}}
    assert set(queuestatus.overlay(None)) == {"j2", "j3", "gone"}
    monkeypatch.setattr(queuestatus, "read_status", lambda client: None)
    assert queuestatus.overlay(None, jobs) == {}


def test_overlay_says_pending_for_a_young_gpu_job_before_the_queue_has_written_anything(monkeypatch):
    # A fresh cluster: the first runner is still creating the queue actor (seen on the 2-GPU H200).
    monkeypatch.setattr(queuestatus, "read_status", lambda client: None)
    now = time.time() * 1000
    gpu = {"gpu_groups": "[1, 1]"}
    jobs = [{"submission_id": "young", "status": "RUNNING", "metadata": gpu, "start_time": now - 3000},
            {"submission_id": "old", "status": "RUNNING", "metadata": gpu,
             "start_time": now - (queuestatus.STARTING_S + 5) * 1000},   # queue switched off: RUNNING
            {"submission_id": "cpu", "status": "RUNNING", "metadata": {"gpu_groups": "[]"}, "start_time": now},
            {"submission_id": "ended", "status": "FAILED", "metadata": gpu, "start_time": now}]
    assert queuestatus.overlay(None, jobs) == {"young": {"status": "PENDING", "queue_position": None}}
    assert queuestatus.overlay(None) == {}


def test_overlay_says_pending_for_a_gpu_job_the_queue_has_not_seen_yet(monkeypatch):
    # Ray reports RUNNING once the entrypoint starts, before the runner has asked the queue.
    doc = {"queue": [], "admitted": [{"id": "old"}], "seen": ["old", "done"]}
    monkeypatch.setattr(queuestatus, "read_status", lambda client: doc)
    gpu = {"gpu_groups": "[1]"}
    jobs = [{"submission_id": "new", "status": "RUNNING", "metadata": gpu},
            {"submission_id": "old", "status": "RUNNING", "metadata": gpu},
            {"submission_id": "done", "status": "RUNNING", "metadata": gpu},      # released, exiting
            {"submission_id": "cpu", "status": "RUNNING", "metadata": {"gpu_groups": "[]"}},
            {"submission_id": "raw", "status": "RUNNING", "metadata": {}},
            {"submission_id": "ended", "status": "SUCCEEDED", "metadata": gpu}]
    assert queuestatus.overlay(None, jobs) == {"new": {"status": "PENDING", "queue_position": None}}
    doc["admitted"].append({"id": "new"})
    assert queuestatus.overlay(None, jobs) == {}
    del doc["seen"]  # a queue from before this field: no guessing
    doc["admitted"].pop()
    assert queuestatus.overlay(None, jobs) == {}

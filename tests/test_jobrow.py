"""One shape of a job for the views (wire.JobView), one row (contract.row.JobRow): every builder of a
row builds JobRow's keys, and a job the queue does not know is converted once, at the boundary."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from jobfactory import job_view  # noqa: E402

from rayjobs.contract import row as rowdef  # noqa: E402
from rayjobs.contract.wire import JobView  # noqa: E402

META = {"rayjobs": "0.1.0", "experiment": "fake_ppo", "gpu_groups": "[2, 2]", "priority": "3", "sweep": "s",
        "sweep_overrides": json.dumps(["a.lr=1e-6"]), "overrides": "[]", "submitted_at": "2026-12-01T10:00:00+00:00"}
EVERY_ROW = list(rowdef._EveryRow.__annotations__)


def _check(row: dict[str, Any], ordered: bool = True) -> None:
    """Every required key (in JobRow's order: a kept copy's come back as the ledger stored them);
    any other key only one JobRow declares optional."""
    assert rowdef.REQUIRED <= set(row), rowdef.REQUIRED - set(row)
    if ordered:
        assert [k for k in row if k in rowdef.REQUIRED] == EVERY_ROW
    assert set(row) - rowdef.REQUIRED <= rowdef.OPTIONAL, set(row) - rowdef.REQUIRED - rowdef.OPTIONAL
    json.dumps(row)  # JSON-able as `list --json` prints it


def test_jobrow_declares_every_key_once_with_its_type() -> None:
    assert {"id", "status", "experiment", "wandb_url"} <= rowdef.REQUIRED and not rowdef.REQUIRED & rowdef.OPTIONAL
    assert "failures" in rowdef.OPTIONAL and "source" in rowdef.OPTIONAL
    assert rowdef.ROW_KEYS[:3] == ("id", "status", "experiment") and set(rowdef.ROW_KEYS) == rowdef.REQUIRED


def test_a_queue_jobs_a_foreign_jobs_and_the_local_records_rows_have_jobrows_keys(tmp_path, monkeypatch) -> None:
    from rayjobs import ledger
    from rayjobs.views import jobrows, localrows

    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home"))
    queued = job_view("s-1", "QUEUED", "waiting", metadata=META, queue_position=2, queued_at=1796000000.0,
                      preempted={"by": "x", "redo": 3}, held="quota")
    done = job_view("s-2", "FAILED", "done", metadata=META, from_queue=True, pruned=True, attempts=[1, 2],
                    final={"step": 5, "data": {"critic/score/mean": 0.5}})
    foreign = JobView.from_ray({"submission_id": "raysubmit_x", "status": "JobStatus.SUCCEEDED", "metadata": {},
                                "start_time": 1796000000000, "end_time": 1796000100000, "driver_node_id": "n1"})
    for r, _ in jobrows.rows([queued, done, foreign], None):
        _check(r)
    rows = {r["id"]: r for r, _ in jobrows.rows([queued, done, foreign], None)}
    assert (rows["s-1"]["queue_position"], rows["s-1"]["gpus"], rows["s-1"]["preempted_by"]) == (2, 4, "x")
    assert (rows["s-2"]["step"], rows["s-2"]["attempt"]) == (5, 2)
    assert rows["raysubmit_x"]["status"] == "SUCCEEDED" and rows["raysubmit_x"]["experiment"] == ""
    entry = {"id": "s-3", "cluster": "c", "address": "a", "sweep": "s", "metadata": META}
    _check(localrows.record_row(entry, "c"))
    _check(localrows.local_row(entry, {"s-3": {"status": "RUNNING", "seen_at": "t"}}, "a"))
    ledger.keep_final("s-2", dict(rows["s-2"]), log_tail=None, metrics=None, metrics_from=None)
    _check(localrows.kept_row({"id": "s-2"}), ordered=False)


def test_a_ray_job_the_queue_does_not_know_becomes_one_foreign_view() -> None:
    """Ray's REST dict and the SDK's JobDetails (read by attribute) give the same view; a view stays itself."""
    from rayjobs.views import queuestatus

    details = {"submission_id": "raysubmit_x", "status": "RUNNING", "metadata": {"a": 1}, "message": "m",
               "start_time": 5, "end_time": None, "driver_node_id": "n1", "job_id": "02000000"}
    a = JobView.from_ray(details)
    b = JobView.from_ray(SimpleNamespace(**dict(details, status=SimpleNamespace(value="RUNNING"))))
    assert a == b and a.foreign and a.in_ray and a.state == "" and a.metadata == {"a": "1"}
    assert JobView.from_ray(a) is a and not a.from_record

    class _D:
        queue = SimpleNamespace(views=lambda: [job_view("q1", metadata=META)])

        @staticmethod
        def list_jobs() -> list[dict[str, Any]]:
            return [details, {"submission_id": "q1", "status": "RUNNING", "metadata": META}]

    got = queuestatus.all_jobs(_D())
    assert [(v.submission_id, v.foreign) for v in got] == [("q1", False), ("raysubmit_x", True)]
    assert got[0].meta.gpus == 4 and got[0].meta is got[0].meta  # parsed once per job


def test_list_all_keeps_no_final_copy_of_a_plain_ray_driver_which_has_no_id(tmp_path, monkeypatch) -> None:
    """A plain ``ray.init`` driver (``list --all``) has no submission id: its ended row is shown, and
    nothing is written for it in the local record (it was kept under ``runs/`` itself: ``runs/final.json``)."""
    from rayjobs.api import keeping
    from rayjobs.views import jobrows

    home = tmp_path / "home"
    monkeypatch.setenv("RAYJOBS_HOME", str(home))
    driver = JobView.from_ray({"submission_id": None, "job_id": "02000000", "status": "SUCCEEDED", "metadata": {},
                               "start_time": 1796000000000, "end_time": 1796000100000, "type": "DRIVER"})
    pairs = jobrows.rows([driver], None)
    assert pairs[0][0]["id"] is None and pairs[0][0]["status"] == "SUCCEEDED"
    assert keeping.keep_rows(pairs, None) == 0
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())

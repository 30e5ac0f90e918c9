"""What is kept of an ended job's log once Ray no longer serves it (the head's Ray restarted): the
runner's copy of its end on the storage root, and the laptop's reading of it (pure: no Ray).
The real restarts are in test_head_down.py (the embedded head) and test_head_restart.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rayjobs.contract import paths
from rayjobs.oncluster import attemptlog
from rayjobs.views import joblog, jobrows


def _log(tmp_path: Path, n: int = 5000) -> Path:
    log = tmp_path / "session_x" / "logs" / "job-driver-j1.log"
    log.parent.mkdir(parents=True)
    head = ["Total training steps: 9000", "wandb: View run at \x1b[34mhttps://wandb.ai/me/p/runs/abc\x1b[0m"]
    body = [f"(TaskRunner pid=1) step:{i} - critic/score/mean:0.5" for i in range(1, n)]
    tail = ["[rayjobs] attempt 1 failed: config error: KeyError: 'x' (not retried)", "KeyError: 'x'"]
    log.write_text("\n".join(head + body + tail) + "\n")
    return log


def test_the_runner_keeps_the_logs_end_with_where_the_whole_log_stays(tmp_path):
    log, run_dir = _log(tmp_path), tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    kept = attemptlog.keep_tail(log, str(run_dir), "j1")
    assert kept == paths.kept_log(str(run_dir), "j1") == run_dir / "log.j1.tail"
    text = kept.read_text()
    lines = text.splitlines()
    assert paths.whole_log_of(text) == (str(log), lines[0].rsplit(" on ", 1)[1])
    # the start's facts the end lacks, ANSI codes out, then the last KEPT_LINES lines of the log
    assert lines[1:3] == ["Total training steps: 9000", "wandb: View run at https://wandb.ai/me/p/runs/abc"]
    assert len(lines) == 3 + attemptlog.KEPT_LINES and lines[-1] == "KeyError: 'x'"
    assert len(text) <= attemptlog.KEPT_BYTES + 4096
    assert attemptlog.keep_tail(None, str(run_dir), "j1") is None  # stdout not a file: nothing
    assert attemptlog.keep_tail(tmp_path / "gone.log", str(run_dir), "j2") is None


def _job(run_dir: Path, status: str = "FAILED") -> Any:
    from jobfactory import job_view

    return job_view("j1", status, "done", from_queue=True, driver_node_id="old",
                    metadata={"run_dir": str(run_dir), "rayjobs": "1"}, final={"step": 3, "data": {}, "attempts": 1},
                    attempts=[1])


def test_what_is_shown_of_an_ended_jobs_log_in_order_whole_storage_record(tmp_path, monkeypatch):
    from rayjobs import ledger

    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home"))
    log, run_dir = _log(tmp_path, n=50), tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    job = _job(run_dir)
    assert joblog.kept_log(job) is None  # nothing kept anywhere: said, never "yet"
    assert joblog.nothing_kept(job).endswith("and no copy of it is readable here")
    remote = _job(tmp_path / "not" / "mounted" / "here")
    assert joblog.nothing_kept(remote).endswith(f"its runner keeps the end on the cluster's storage root: "
                                                f"{tmp_path}/not/mounted/here/log.j1.tail")
    ledger.keep_final("j1", {"id": "j1", "status": "FAILED"}, log_tail=b"the laptop's copy\n", metrics=None,
                      metrics_from=None)
    rec = joblog.kept_log(job)
    assert (rec.source, rec.text) == ("record", "the laptop's copy\n")
    assert rec.note().endswith(f"the cluster's storage root keeps its end at {run_dir}/log.j1.tail")
    attemptlog.keep_tail(log, str(run_dir), "j1")
    whole = joblog.kept_log(job)  # the whole log's file is readable here (the embedded head's earlier session)
    assert (whole.source, whole.path) == ("whole", str(log)) and "its whole log is read from" in whole.note()
    assert "".join(joblog.kept_chunks(job, 2, True)) == "[rayjobs] attempt 1 failed: config error: KeyError: 'x' (not retried)\nKeyError: 'x'\n"
    assert "".join(joblog.kept_chunks(job, None, True)) == log.read_text().replace("\x1b[34m", "").replace("\x1b[0m", "")
    stored = joblog.kept_log(job, whole=False)
    assert stored.source == "storage" and not stored.text.startswith("[rayjobs] kept")
    assert f"the whole log stays at {log} on " in stored.note() and "yet" not in stored.note()
    log.unlink()  # the head's machine went: only the storage root is left
    assert joblog.kept_log(job).source == "storage"


class _NoLog:
    """A dashboard that cannot serve the job's log any more (its node was the earlier session's)."""

    def log_tail(self, *a: Any, **k: Any) -> bytes:
        raise RuntimeError("no such node")


def test_status_keeps_a_failed_jobs_failures_and_error_when_ray_no_longer_serves_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home"))
    log, run_dir = _log(tmp_path, n=50), tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    job = _job(run_dir)
    row = jobrows.add_progress(jobrows.base_row(job), job, _NoLog(), head_scan=True)  # type: ignore[arg-type]
    assert row["error"] is None and "failures" not in row  # nothing kept: what the queue kept only
    attemptlog.keep_tail(log, str(run_dir), "j1")
    tails: dict[str, bytes] = {}
    row = jobrows.add_progress(jobrows.base_row(job), job, _NoLog(), head_scan=True, tails=tails)  # type: ignore[arg-type]
    assert row["error"] == "KeyError: 'x'" and row["failures"] == ["attempt 1: config error: KeyError: 'x'"]
    assert row["total_steps"] == 9000 and row["wandb_url"] == "https://wandb.ai/me/p/runs/abc"
    assert row["step"] == 3 and tails["j1"].endswith(b"KeyError: 'x'\n")  # the copy the laptop keeps

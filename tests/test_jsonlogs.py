"""JSON step logs (issue 17): ``rayjobs tail --json`` / ``rayjobs logs --json``.

Unit tests of the line -> object mapping over verl's console lines as Ray forwards them (ANSI
``(TaskRunner pid=..)`` prefixes, tqdm ``\\r`` redraws, ``np.float64(x)``), the lines made by
verl 0.9.1's own console logger; then real jobs of the verl stand-in on the embedded head: every
stdout line parsed with ``json.loads``, the steps all there once per attempt, in order, with the
values the workload logged (its verl file-logger JSONL), and tail's exit codes.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import math
import numbers
import os
import pprint
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import rayjobs_cli, rayjobs_submit, wait_terminal, wait_until
from test_tail import Tail

from rayjobs.views import jobtail, logparse, steplog


def verl_console_line(data: dict[str, Any], step: int) -> str:
    """The line verl 0.9.1's console logger prints (its ``concat_dict_to_str``, taken from the
    installed verl's source: importing that module would import torch)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed (pip install --no-deps verl==0.9.1)")
    src = Path(spec.submodule_search_locations[0], "utils", "logger", "aggregate_logger.py").read_text()
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "concat_dict_to_str")
    ns: dict[str, Any] = {"numbers": numbers, "pprint": pprint}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "aggregate_logger.py", "exec"), ns)
    return ns["concat_dict_to_str"](data, step=step)


PREFIX = "\x1b[36m(TaskRunner pid=2841, ip=10.0.0.2)\x1b[0m "
DATA = {"actor/pg_loss": np.float64(-0.0123), "critic/score/mean": np.float64(0.53), "actor/kl_loss": np.float64(1.5e-05),
        "perf/throughput": np.float64(1834.25), "timing_s/step": np.float64(12.5), "training/global_step": 3,
        "training/epoch": np.int64(0), "perf/max_memory_allocated_gb": np.float32(41.5),
        "critic/vpred_mean": np.float64("nan"), "actor/is_ok": True, "note": "text",
        "val-core/openai/gsm8k/reward/mean@1": np.float64(0.41)}


def feed_bytes(records: steplog.StepRecords, raw: bytes, size: int = 7) -> list[dict[str, Any]]:
    """Raw log bytes in odd chunks, as the log stream delivers them: split, cleaned, turned into records."""
    split, out = logparse.LineSplitter(), []
    for i in range(0, len(raw), size):
        out += records.feed(logparse.clean_block(split.feed_text(raw[i:i + size])))
    out += records.feed("".join(logparse.clean(x) + "\n" for x in split.flush()))
    return out


def strict(line: str) -> dict[str, Any]:
    """json.loads that refuses NaN/Infinity (Elasticsearch and Loki would)."""
    def no(c: str) -> None:
        raise ValueError(f"non-standard JSON constant {c}")
    return json.loads(line, parse_constant=no)


def test_a_verl_step_line_becomes_one_flat_object_with_verls_own_keys():
    line = verl_console_line(DATA, 3)
    assert "np.float64(-0.0123)" in line and "np.float32(41.5)" in line  # what numpy 2 prints
    raw = (PREFIX + "Total training steps: 10\n"
           + "\x1b[36m(TaskRunner pid=2841, ip=10.0.0.2)\x1b[0m \rTraining Progress:  20%|##        | 2/10\r"
           + "Training Progress:  30%|###       | 3/10 [00:37<01:27, 12.5s/it]\n"
           + PREFIX + line + "\n").encode()
    rec_of = steplog.StepRecords("job-1", job_of=lambda: {"metadata": {"run": "run-a"}}, clock=lambda: 1777636803.5123)
    recs = feed_bytes(rec_of, raw)
    assert len(recs) == 1  # Total training steps and the tqdm bar are not objects
    rec = strict(steplog.dumps(recs[0]))
    assert rec == {
        "ts": "2026-05-01T12:00:03.512Z", "ts_source": "read", "event": "step", "job": "job-1", "run": "run-a",
        "attempt": None, "step": 3, "total_steps": 10,
        "actor/pg_loss": -0.0123, "critic/score/mean": 0.53, "actor/kl_loss": 1.5e-05, "perf/throughput": 1834.25,
        "timing_s/step": 12.5, "training/global_step": 3.0, "training/epoch": 0.0, "perf/max_memory_allocated_gb": 41.5,
        "critic/vpred_mean": None, "actor/is_ok": 1.0, "val-core/openai/gsm8k/reward/mean@1": 0.41}
    assert "\n" not in steplog.dumps(recs[0]) and "NaN" not in steplog.dumps(recs[0])
    assert list(rec)[:8] == ["ts", "ts_source", "event", "job", "run", "attempt", "step", "total_steps"]


def test_a_step_line_after_a_tqdm_redraw_on_the_same_line_keeps_its_values():
    line = verl_console_line({"critic/score/mean": np.float64(0.25), "timing_s/step": np.float64(2.0)}, 4)
    raw = f"{PREFIX}\rTraining Progress:  40%|####      | 4/10\r{line}\n".encode()
    recs = feed_bytes(steplog.StepRecords("j"), raw, size=3)
    assert [(r["step"], r["critic/score/mean"], r["timing_s/step"]) for r in recs] == [(4, 0.25, 2.0)]


def test_a_verl_key_spelt_like_an_envelope_field_is_kept_under_verl():
    recs = steplog.StepRecords("j").feed("step:2 - step:7 - event:1 - critic/score/mean:0.5\n")
    assert recs[0]["step"] == 2 and recs[0]["event"] == "step"
    assert recs[0]["verl/step"] == 7.0 and recs[0]["verl/event"] == 1.0 and recs[0]["critic/score/mean"] == 0.5


RETRIED_LOG = """\
[rayjobs] admitted after 0.4 s at 2026-05-01 12:00:00.250 UTC, running from 2026-05-01 12:00:01.000 UTC: 1 GPU group(s)
[rayjobs] attempt 1 of run r1 (try 1/2 of this job; metrics: /s/runs/p/r1/metrics.1.jsonl)
(TaskRunner pid=11) Training from scratch
(TaskRunner pid=11) Total training steps: 4
(TaskRunner pid=11) step:1 - critic/score/mean:np.float64(0.1)
(TaskRunner pid=11) step:2 - critic/score/mean:np.float64(0.2)
[rayjobs] checkpoint saved: step 2
(TaskRunner pid=11) step:3 - critic/score/mean:np.float64(0.3)
Traceback (most recent call last):
RuntimeError: fake crash at step 3
[rayjobs] attempt finished with exit code 1 after 3.1 s at 2026-05-01 12:00:04.100 UTC
[rayjobs] attempt 1 failed: RuntimeError: fake crash at step 3
[rayjobs] retrying (1/1); verl resumes from the checkpoint dir (resume_mode=auto)
[rayjobs] attempt 2 of run r1 (try 2/2 of this job; metrics: /s/runs/p/r1/metrics.2.jsonl)
[rayjobs] last checkpoint: step 2
(TaskRunner pid=12) Resuming from /s/checkpoints/p/r1/global_step_2
(TaskRunner pid=12) Total training steps: 4
(TaskRunner pid=12) step:3 - critic/score/mean:np.float64(0.31)
(TaskRunner pid=12) step:4 - critic/score/mean:np.float64(0.4)
[rayjobs] attempt finished with exit code 0 after 2.0 s at 2026-05-01 12:00:07.000 UTC
"""


def test_attempts_and_the_runners_events_with_a_step_redone_after_a_retry():
    recs = steplog.StepRecords("j", clock=lambda: 0.0).feed(RETRIED_LOG)
    got = [(r["event"], r["attempt"], r.get("step"), r.get("critic/score/mean")) for r in recs]
    assert got == [("admitted", None, None, None), ("attempt_started", 1, None, None),
                   ("step", 1, 1, 0.1), ("step", 1, 2, 0.2), ("checkpoint_saved", 1, 2, None), ("step", 1, 3, 0.3),
                   ("attempt_failed", 1, None, None), ("attempt_started", 2, None, None),
                   ("last_checkpoint", 2, 2, None), ("step", 2, 3, 0.31), ("step", 2, 4, 0.4)]
    assert recs[0]["ts"] == "2026-05-01T12:00:00.250Z" and recs[0]["ts_source"] == "log"  # the runner's stamp
    assert recs[2]["ts"] == "1970-01-01T00:00:00.000Z" and recs[2]["ts_source"] == "read"
    assert recs[6]["cause"] == "RuntimeError: fake crash at step 3"
    assert all(r["total_steps"] == 4 for r in recs if r["event"] == "step")


def test_tail_n_keeps_the_records_from_the_nth_last_step_on():
    recs = list(steplog.over([RETRIED_LOG], steplog.StepRecords("j"), tail=2))
    assert [(r["event"], r.get("step")) for r in recs] == [("step", 3), ("step", 4)]
    recs = list(steplog.over([RETRIED_LOG], steplog.StepRecords("j"), tail=3))
    assert [(r["event"], r.get("step"), r["attempt"]) for r in recs] == [
        ("step", 3, 1), ("attempt_failed", None, 1), ("attempt_started", None, 2), ("last_checkpoint", 2, 2),
        ("step", 3, 2), ("step", 4, 2)]
    assert len(list(steplog.over([RETRIED_LOG], steplog.StepRecords("j"), tail=100))) == 11
    assert list(steplog.over([RETRIED_LOG], steplog.StepRecords("j"), tail=0)) == []


def test_the_end_record_and_a_kept_log_tail_that_starts_mid_attempt():
    r = steplog.StepRecords("j")
    r.feed(RETRIED_LOG)
    end = r.end("SUCCEEDED", None, ended_at=1777636807.0)
    assert (end["event"], end["status"], end["cause"], end["step"], end["total_steps"], end["attempt"]) == (
        "job_ended", "SUCCEEDED", None, 4, 4, 2)
    assert end["ts"] == "2026-05-01T12:00:07.000Z" and end["ts_source"] == "ray"
    # the local record keeps only the log's last lines: no attempt line, the failure line names it
    kept = "\n".join(RETRIED_LOG.splitlines()[7:12]) + "\n[rayjobs] job failed: RuntimeError: fake crash at step 3 (no retry left)\n"
    row = {"id": "j", "run": "r1", "status": "FAILED", "final": True, "total_steps": 4, "cause": "RuntimeError: fake crash at step 3",
           "end_time": "2026-05-01T14:00:07+02:00"}
    recs = list(steplog.kept_records(row, kept))
    assert [(x["event"], x["attempt"], x.get("step")) for x in recs] == [
        ("step", None, 3), ("attempt_failed", 1, None), ("job_ended", 1, 3)]
    assert recs[0]["total_steps"] == 4 and recs[0]["run"] == "r1"
    assert recs[-1]["status"] == "FAILED" and recs[-1]["cause"] == "RuntimeError: fake crash at step 3"
    assert recs[-1]["ts"] == "2026-05-01T12:00:07.000Z"


class _Follower:
    """A narrow stand-in for LogFollower (a stream's bytes and a status), as in test_tail."""

    def __init__(self, items: list, status: str) -> None:
        self.items, self.job, self.seen = items, {"status": status}, 0

    @property
    def status(self) -> str:
        return self.job["status"]

    def quiet_s(self) -> float:
        return 0.0

    def __iter__(self):
        for it in self.items:
            if it:
                self.seen += len(it)
            yield it


def test_json_view_holds_the_backlog_as_steps_then_prints_live(capsys):
    backlog = RETRIED_LOG.encode()
    out = io.StringIO()
    view = steplog.JsonView(steplog.StepRecords("j"), hold=1, out=out, say=lambda m: print(m, file=sys.stderr))
    live = b"(TaskRunner pid=12) step:5 - critic/score/mean:np.float64(0.5)\n"
    jobtail._stream(_Follower([None, backlog, None, live], "RUNNING"), logparse.Progress(), view,
                    jobtail._Backlog(None, in_view=True), "j")
    recs = [strict(x) for x in out.getvalue().splitlines()]
    assert [(r["event"], r.get("step")) for r in recs] == [("step", 4), ("step", 5)]
    assert "4 earlier steps not shown" in capsys.readouterr().err  # 1-3 of attempt 1, 3 of attempt 2

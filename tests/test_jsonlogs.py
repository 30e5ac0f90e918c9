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
from jobfactory import job_view
from test_tail import Tail, _Follower

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
    job = job_view("job-1", metadata={"run": "run-a"})
    rec_of = steplog.StepRecords("job-1", job_of=lambda: job, clock=lambda: 1777636803.5123)
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


# --------------------------------------------------------------------------- real jobs on the embedded head
def submit(*args: str) -> str:
    r = rayjobs_submit("+exp=fake_ppo", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def records(stdout: str) -> list[dict[str, Any]]:
    """Every stdout line is one strict JSON object (nothing else is printed there)."""
    out = [strict(line) for line in stdout.splitlines()]
    assert out, "no records"
    for r in out:
        assert r["ts"].endswith("Z") and datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).utcoffset().total_seconds() == 0
        assert r["ts_source"] in ("read", "log", "ray") and r["event"]
    return out


def logged(client: Any, job: str) -> dict[int, list[dict[str, Any]]]:
    """What the workload logged, per attempt: verl's file-logger JSONL (metrics.<attempt>.jsonl)."""
    run_dir = Path(client.get_job_info(job).metadata["run_dir"])
    return {int(f.name.split(".")[1]): [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
            for f in sorted(run_dir.glob("metrics.*.jsonl"))}


def check_steps(recs: list[dict[str, Any]], job: str, want: dict[int, list[dict[str, Any]]], total: int) -> None:
    """The step records are exactly the logged steps, attempt by attempt, in order, each once, with
    the logged values and nothing else than the envelope beside them."""
    steps = [r for r in recs if r["event"] == "step"]
    assert [(r["attempt"], r["step"]) for r in steps] == [(a, m["step"]) for a in sorted(want) for m in want[a]]
    flat = [m for a in sorted(want) for m in want[a]]
    for r, m in zip(steps, flat):
        assert set(r) == set(steplog.ENVELOPE - {"status", "cause"}) | set(m["data"]), set(r) ^ set(m["data"])
        assert {k: r[k] for k in m["data"]} == m["data"]  # exactly what verl's file logger wrote
        assert (r["job"], r["total_steps"], r["run"]) == (job, total, job)


def no_ts(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "ts"} for r in recs]


def test_tail_and_logs_json_give_every_step_once_with_the_logged_values(cluster, client, workdir):
    from rayjobs.client.dashboard import Dashboard

    job = submit("+fake.steps=8", "+fake.step_s=0.4", "trainer.save_freq=2")
    t = Tail(job, "--json")
    assert t.wait() == 0, t.stderr
    assert "\x1b" not in t.stdout and f"{job} · SUCCEEDED" in t.stderr  # no panel; chatter on stderr
    recs = records(t.stdout)
    want = logged(client, job)
    assert list(want) == [1]
    check_steps(recs, job, want, total=8)
    assert recs[-1]["event"] == "job_ended" and recs[-1]["ts_source"] == "ray"
    assert (recs[-1]["status"], recs[-1]["cause"], recs[-1]["step"], recs[-1]["attempt"]) == ("SUCCEEDED", None, 8, 1)
    events = [r["event"] for r in recs if r["event"] not in ("step", "checkpoint_saved")]
    assert events == ["admitted", "attempt_started", "job_ended"]
    assert next(r for r in recs if r["event"] == "admitted")["ts_source"] == "log"  # the runner's own stamp
    saved = [r["step"] for r in recs if r["event"] == "checkpoint_saved"]
    assert 2 in saved and set(saved) <= {2, 4, 6, 8} and saved == sorted(saved)

    logs = rayjobs_cli("logs", job, "--json")
    assert logs.returncode == 0, logs.stderr
    full = records(logs.stdout)
    assert no_ts(full) == no_ts(recs)  # the same records as tail printed; only read times differ
    at7 = next(i for i, r in enumerate(full) if r["event"] == "step" and r["step"] == 7)
    for cmd in (("logs", job, "--json", "--tail", "2"), ("tail", job, "--json", "-n", "2")):
        r = rayjobs_cli(*cmd)
        assert r.returncode == 0, r.stderr
        assert no_ts(records(r.stdout)) == no_ts(full[at7:]), cmd  # from the 2nd last step on, job_ended last
    assert "6 earlier steps not shown" in r.stderr

    # Pruned from Ray's table (as the queue does after RAYJOBS_RETENTION_S): the log the queue recorded.
    d = Dashboard(cluster)
    wait_until(lambda: (d.queue.job(job) or {}).get("state") == "done", 60, "the queue to finish the job")
    client.delete_job(job)
    pruned = rayjobs_cli("tail", job, "--json")
    assert pruned.returncode == 0 and "from the queue's history" in pruned.stderr, pruned.stderr
    assert no_ts(records(pruned.stdout)) == no_ts(full)

    # The cluster gone: the end of the log the local record kept when the tail saw the job end.
    gone = rayjobs_cli("tail", job, "--json", "--address", "http://127.0.0.1:9")
    assert gone.returncode == 0 and "cluster unreachable" in gone.stderr, gone.stderr
    kept = records(gone.stdout)
    assert no_ts(kept[:-1]) == no_ts(full[:-1])  # the whole (short) log was kept
    assert kept[-1]["event"] == "job_ended" and kept[-1]["status"] == "SUCCEEDED"


def test_json_of_a_retried_job_tells_attempts_apart_and_a_failed_job_ends_with_its_cause(cluster, client, workdir):
    retried = submit("rayjobs.max_retries=1", "trainer.save_freq=2", "+fake.steps=5", "+fake.step_s=0.2", "+fake.fail_at=3")
    failed = submit("+fake.steps=4", "+fake.step_s=0.1", "+fake.fail_at=2")
    t = Tail(retried, "--json")
    assert t.wait(180) == 0, t.stderr
    recs = records(t.stdout)
    want = logged(client, retried)
    assert [[m["step"] for m in want[a]] for a in sorted(want)] == [[1, 2, 3], [3, 4, 5]]
    check_steps(recs, retried, want, total=5)  # step 3 twice: once per attempt
    ev = [(r["event"], r["attempt"]) for r in recs if r["event"] not in ("step", "checkpoint_saved")]
    assert ev == [("admitted", None), ("attempt_started", 1), ("attempt_failed", 1), ("attempt_started", 2),
                  ("last_checkpoint", 2), ("job_ended", 2)]
    failure = next(r for r in recs if r["event"] == "attempt_failed")
    assert failure["cause"] == "RuntimeError: fake crash at step 3"
    assert next(r for r in recs if r["event"] == "last_checkpoint")["step"] == 2
    assert recs.index(failure) < [i for i, r in enumerate(recs) if r["event"] == "step"][3]  # before attempt 2's steps
    assert (recs[-1]["event"], recs[-1]["status"], recs[-1]["step"]) == ("job_ended", "SUCCEEDED", 5)

    t = Tail(failed, "--json")
    assert t.wait(180) == 1, t.stderr
    recs = records(t.stdout)
    check_steps(recs, failed, logged(client, failed), total=4)
    end = recs[-1]
    assert (end["event"], end["status"], end["attempt"], end["step"]) == ("job_ended", "FAILED", 1, 2)
    assert end["cause"] == "RuntimeError: fake crash at step 2"
    assert f"{failed} FAILED: RuntimeError: fake crash at step 2" in t.stderr


def test_tail_json_detaches_with_130_and_a_stop_ends_it_with_3(cluster, client, workdir):
    job = submit("+fake.steps=400", "+fake.step_s=0.1")
    t = Tail(job, "--json")
    t.wait_for(r'"step":3,')
    t.p.send_signal(signal.SIGINT)
    assert t.wait(30) == 130
    steps = [r["step"] for r in records(t.stdout) if r["event"] == "step"]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
    assert "job_ended" not in t.stdout and f"rayjobs tail {job}" in t.stderr

    t = Tail(job, "--json", "-n", "1")  # of what was logged before: only the last step, then live
    t.wait_for(r'"event":"step".*\n.*"event":"step".*\n.*"event":"step"')
    stop = rayjobs_cli("stop", job)
    assert stop.returncode == 0, stop.stderr
    assert t.wait(60) == 3, t.stderr
    recs = records(t.stdout)
    steps = [r["step"] for r in recs if r["event"] == "step"]
    assert steps[0] >= 3 and steps == list(range(steps[0], steps[0] + len(steps))), steps
    assert "earlier steps not shown" in t.stderr
    assert (recs[-1]["event"], recs[-1]["status"], recs[-1]["cause"]) == ("job_ended", "STOPPED", None)

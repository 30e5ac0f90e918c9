"""The evaluation preset (issue 18): ``+exp=eval_checkpoint rayjobs.after=<sweep>`` on a real Ray cluster
with fake GPUs. A sweep of the verl stand-in (``+exp=fake_ppo``) is held at its start (``+fake.gate``)
while its evaluation is submitted, so the evaluations really wait (QUEUED (after X)); then each
evaluation validates its point's LAST checkpoint (the runner's ``global_step_latest is step N`` line),
with its point's config and code snapshot (the working dir is edited meanwhile), writes nothing into
the point's checkpoint dir, and ``rayjobs compare --sweep S --json`` shows each point's score. A
failed point fails its evaluation, never started. Bad input: one line, exit 2, nothing queued."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeGpuCluster, cli_on, job_list, log_of, submit_on, view, wait_done, wait_until
from test_rerun import EDITED, edit_the_code

from rayjobs.views import jobrows

VAL = "val-core/openai/gsm8k/reward/mean@1"
OFFSETS = (0.0, 0.3)
STEPS = 5


@pytest.fixture
def cluster(one_node: FakeGpuCluster) -> FakeGpuCluster:
    """The session's shared 1-node cluster (2 fake GPUs, 6 CPUs)."""
    return one_node


def submit(c: FakeGpuCluster, *args: str, cwd: Any = None) -> Any:
    """``python -m rayjobs.submit ARGS`` against ``c``, the runs and checkpoints on its storage root."""
    return submit_on(c, *args, cwd=cwd, env={"RAYJOBS_STORAGE": str(c.storage)}, timeout=300)


def ids_of(r: Any) -> list[str]:
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def log(c: FakeGpuCluster, sid: str) -> str:
    try:
        return log_of(c, sid)
    except Exception:  # noqa: BLE001  (no log: the queue never started it)
        return ""


def row(c: FakeGpuCluster, sid: str) -> dict[str, Any]:
    """What ``rayjobs status --json`` says of the job (the queue's word, no progress)."""
    from rayjobs.api import Job

    return Job(sid, dashboard=c.dashboard()).row(progress=False)


def records(c: FakeGpuCluster) -> Path:
    """The queue's job records (its durable store on the cluster's storage root)."""
    return c.queue_store / "jobs"


def queue_ids(c: FakeGpuCluster) -> set[str]:
    return {v["submission_id"] for v in c.queue().jobs()}


def val_logged(run_dir: str) -> dict[int, float]:
    """{step: val-core reward} as the evaluation itself wrote it (verl's file logger, attempt 1)."""
    lines = (Path(run_dir) / "metrics.1.jsonl").read_text().splitlines()
    return {json.loads(ln)["step"]: json.loads(ln)["data"][VAL] for ln in lines if ln.strip()}


def files(d: str) -> dict[str, int]:
    """Every file under ``d``: its modification time (ns)."""
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in Path(d).rglob("*")}


def test_each_point_gets_its_last_checkpoint_evaluated_after_it_succeeded(cluster, workdir):
    gate = workdir / "gate"
    heldout = "/data/heldout/test.parquet"  # an override every evaluation gets (the stand-in does not read it)
    points = ids_of(submit(cluster, "-m", "+exp=fake_ppo", f"+fake.steps={STEPS}", "trainer.save_freq=2",
                           f"+fake.score_offset={','.join(map(str, OFFSETS))}", f"+fake.gate={gate}"))
    assert len(points) == 2
    sweep = points[0].rsplit("-", 1)[0]
    edit_the_code(workdir)  # what runs now from this dir fails: the evaluations must run the points' snapshot

    dry = submit(cluster, "+exp=eval_checkpoint", f"rayjobs.after={sweep}", "rayjobs.dry_run=true")
    assert dry.returncode == 0, dry.stderr[-3000:]
    docs = json.loads(dry.stdout)
    assert [d["eval_of"] for d in docs] == points and "nothing queued" in dry.stderr, dry.stderr
    would = {d["submit_job"]["submission_id"] for d in docs}
    assert not would & set(job_list(cluster.client())) and not would & queue_ids(cluster)  # nothing queued

    sent = submit(cluster, "+exp=eval_checkpoint", f"rayjobs.after={sweep}", f"data.val_files={heldout}")
    print(sent.stdout + sent.stderr)
    evals = ids_of(sent)
    assert len(evals) == 2 and all(e.startswith(f"{p}-eval-") for e, p in zip(evals, points)), evals
    for e, p in zip(evals, points):  # the points are held at their start: the evaluations wait for them
        held = wait_until(lambda: (lambda r: r if r.get("held") == "after" else None)(row(cluster, e)), 60,
                          f"{e} to wait for {p}")
        assert held["status"] == "QUEUED" and held["after"] == [p], held
        assert jobrows.status_text(held).endswith(f"(after {p})"), jobrows.status_text(held)
    queue = records(cluster)
    recs = {i: json.loads((queue / f"{i}.json").read_text()) for i in points + evals}
    assert {recs[e]["code"] for e in evals} == {recs[p]["code"] for p in points}  # the points' own snapshot

    gate.write_text("go")
    for p in points:
        assert wait_done(cluster, p, timeout=240) == "SUCCEEDED", log(cluster, p)[-2000:]
    for e in evals:
        assert wait_done(cluster, e, timeout=240) == "SUCCEEDED", log(cluster, e)[-3000:]
    pmeta = {p: view(cluster, p)["metadata"] for p in points}
    for e, p, off in zip(evals, points, OFFSETS):
        m, text = view(cluster, e)["metadata"], log(cluster, e)
        ckpt = pmeta[p]["checkpoint_dir"]
        last = int((Path(ckpt) / "latest_checkpointed_iteration.txt").read_text())
        assert last == STEPS  # saves at 2, 4 and the last step
        assert f"[rayjobs] global_step_latest is step {last}: trainer.resume_from_path={ckpt}/global_step_{last}" in text
        assert EDITED not in text, text[-2000:]
        assert (m["eval_of"], m["code_of"], json.loads(m["after"])) == (p, p, [p])
        assert m["run"].startswith(f"{pmeta[p]['run']}-eval-") and m["checkpoint_dir"] != ckpt
        ep = cluster.client().get_job_info(e).entrypoint  # what Ray ran
        for key in ("trainer.val_only=true", "trainer.val_before_train=true", "trainer.resume_mode=resume_path",
                    f"trainer.resume_from_path={ckpt}/global_step_latest", f"data.val_files={heldout}",
                    f"+fake.score_offset={off}"):
            assert key in ep, (key, ep)
        assert val_logged(m["run_dir"]) == {last: pytest.approx(0.1 + 0.8 * last / STEPS + off)}
        # nothing of the evaluation in the point's checkpoint dir: every file is older than the point's end
        end_ns = view(cluster, p)["end_time"] * 1_000_000
        assert all(t <= end_ns for t in files(ckpt).values()), files(ckpt)
        assert not Path(m["checkpoint_dir"]).exists() or not list(Path(m["checkpoint_dir"]).iterdir())

    rows = json.loads(cli_on(cluster, "compare", "--sweep", sweep, "--json").stdout)
    assert [r["id"] for r in rows] == points
    for r, e, off in zip(rows, evals, OFFSETS):
        assert r["eval"] == {"id": e, "status": "SUCCEEDED", "metric": VAL,
                             "value": pytest.approx(0.1 + 0.8 + off), "step": STEPS}, r["eval"]
    table = cli_on(cluster, "compare", "--sweep", sweep)
    print(table.stdout + table.stderr)
    assert "EVAL" in table.stdout.splitlines()[0] and "1.2" in table.stdout, table.stdout


def test_a_failed_point_fails_its_evaluation_which_never_starts(cluster, workdir):
    points = ids_of(submit(cluster, "-m", "+exp=fake_ppo", "+fake.steps=3", "+fake.step_s=0.5",
                           "trainer.save_freq=1", "+fake.fail_at=0,2"))
    sweep = points[0].rsplit("-", 1)[0]
    ok_eval, bad_eval = ids_of(submit(cluster, "+exp=eval_checkpoint", f"rayjobs.after={sweep}"))
    assert wait_done(cluster, points[1], timeout=240) == "FAILED"
    got = wait_until(lambda: (lambda r: r if r["status"] == "FAILED" else None)(row(cluster, bad_eval)), 90,
                     "the evaluation of the failed point to fail")
    assert got["cause"] == f"dependency failed: {points[1]} FAILED", got
    assert bad_eval not in {j.submission_id for j in cluster.client().list_jobs()}  # never reached Ray
    assert view(cluster, bad_eval)["status"] == "FAILED" and not view(cluster, bad_eval)["in_ray"]
    assert wait_done(cluster, ok_eval, timeout=240) == "SUCCEEDED", log(cluster, ok_eval)[-3000:]
    assert "global_step_latest is step 3" in log(cluster, ok_eval)


def test_bad_input_is_one_line_exit_2_and_queues_nothing(cluster, workdir, tmp_path):
    trained = ids_of(submit(cluster, "+exp=fake_ppo", "+fake.steps=1", "trainer.save_freq=1"))[0]
    nosave = ids_of(submit(cluster, "+exp=fake_ppo", "+fake.steps=1", "trainer.save_freq=-1"))[0]
    norecord = ids_of(submit(cluster, "+exp=fake_ppo", "+fake.steps=1", "trainer.save_freq=1"))[0]
    evaluation = ids_of(submit(cluster, "+exp=eval_checkpoint", f"rayjobs.after={trained}"))[0]
    for sid in (trained, nosave, norecord, evaluation):
        assert wait_done(cluster, sid, timeout=240) == "SUCCEEDED", log(cluster, sid)[-2000:]
    # no local record of its config, and its preset (./conf/exp/fake_ppo.yaml) is not visible from elsewhere
    shutil.rmtree(Path(rayjobs_home()) / "runs" / norecord)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    queue = records(cluster)
    before_ray, before_queue, before_files = set(job_list(cluster.client())), queue_ids(cluster), {p.name for p in queue.iterdir()}
    cases = [
        ((), None, "name them with rayjobs.after="),
        (("rayjobs.after=no-such-sweep-xyz",), None, "rayjobs.after=no-such-sweep-xyz: no job or sweep matches"),
        ((f"rayjobs.after={nosave}",), None, f"{nosave} saves no checkpoints (trainer.save_freq=-1"),
        ((f"rayjobs.after={evaluation}",), None, f"{evaluation} is itself an evaluation (of {trained})"),
        ((f"rayjobs.after={norecord}",), elsewhere, f"{norecord} has no local record of its config"),
        ((f"rayjobs.after={trained}", "trainer.val_only=false"), None, "an evaluation sets trainer.val_only=true"),
        ((f"rayjobs.after={trained}", "trainer.default_local_dir=/tmp/x"), None, "its own run and checkpoint dir"),
        ((f"rayjobs.after=[{trained},{nosave}]",), None, f"{nosave} saves no checkpoints"),  # all or nothing
    ]
    for args, cwd, says in cases:
        r = submit(cluster, "+exp=eval_checkpoint", *args, cwd=cwd)
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 2 and len(errors) == 1 and says in errors[0], (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert not r.stdout, (args, r.stdout)
    # the Python API's dry run: the same plan, nothing queued
    import rayjobs

    planned = rayjobs.evaluate_checkpoints(trained, address=cluster.address, dry_run=True)
    assert [j.job_id.rsplit("-", 1)[0] for j in planned] == [f"{trained}-eval"]
    assert set(job_list(cluster.client())) == before_ray
    assert queue_ids(cluster) == before_queue
    assert {p.name for p in queue.iterdir()} == before_files


def rayjobs_home() -> str:
    import os

    return os.environ["RAYJOBS_HOME"]


def test_an_evaluation_that_resumed_its_own_run_is_still_a_success():
    """runner.judge: exit 0 of a validation-only run is a success even where a resume without a step
    would be "no progress" (verl returns right after validating the loaded checkpoint)."""
    from rayjobs.oncluster import attemptlog
    from rayjobs.oncluster.runner import flag, judge

    out = attemptlog.AttemptLog(total_steps=10, last_step=4, tail="")
    assert judge(0, out, 4, ["trainer.resume_mode=resume_path", "trainer.val_only=true"]) is None
    assert judge(0, out, 4, ["++trainer.val_only='True'"]) is None
    assert judge(0, out, 4, ["trainer.val_only=true", "trainer.val_only=false"]).kind == "no progress"
    assert not flag(["trainer.val_only_x=true"], "trainer.val_only")


def test_which_jobs_rayjobs_after_names():
    """A sweep id (or the unique start of one) is its points in point order; a run `rayjobs resume`
    continued is its newest job; an id names itself; each job once; nothing named is one line."""
    from rayjobs.errors import NoSuchJob
    from rayjobs.submit.evaluate import named_points

    from jobfactory import job_view

    def job(sid: str, **meta: str) -> Any:
        return job_view(sid, metadata={"submitted_at": "2026-12-01T10:00:00", **meta})

    jobs = [job("S-10", sweep="S"), job("S-2", sweep="S"), job("S-2-r1", sweep="S", resumed_from="S-2"),
            job("solo-1"), job("S-2-eval-ab12", eval_of="S-2")]
    assert [i for i, _ in named_points(jobs, ["S"])] == ["S-2-r1", "S-10"]
    assert [i for i, _ in named_points(jobs, ["solo-1", "S-2", "S"])] == ["solo-1", "S-2-r1", "S-10"]
    assert [i for i, _ in named_points(jobs, ["sol"])] == ["solo-1"]
    with pytest.raises(NoSuchJob, match="rayjobs.after=nope: no job or sweep matches 'nope'"):
        named_points(jobs, ["nope"])

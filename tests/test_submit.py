"""`python -m rayjobs.submit` against a real Ray head (the embedded default), as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, job_list, rayjobs_submit, wait_terminal

from rayjobs import settings
from rayjobs import ledger

ID = re.compile(r"^fake_ppo-\d{8}-\d{6}-[0-9a-f]{4}$")


def submitted(target) -> set[str]:
    """Every job id the cluster holds: the queue's (a waiting one is in no Ray table yet) and Ray's."""
    from rayjobs.client.dashboard import Dashboard

    d = Dashboard(target)
    return set(job_list(d.sdk)) | {v["submission_id"] for v in d.queue.jobs()}


def test_submit_prints_only_the_id_and_records_it(cluster, client, workdir):
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"],
                   cwd=workdir, check=True)
    r = rayjobs_submit("+exp=fake_ppo", "algorithm.kl_ctrl.kl_coef=0.05", cwd=workdir,
                       env={"WANDB_API_KEY": "sekrit-value-123", "HF_TOKEN": "hf_sekrit"})
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    assert ID.match(job_id), r.stdout
    assert "using the embedded local Ray cluster" in r.stderr and f"rayjobs tail {job_id}" in r.stderr
    assert wait_terminal(client, job_id) == "SUCCEEDED", client.get_job_logs(job_id)

    info = client.get_job_info(job_id)
    meta = info.metadata
    assert meta["experiment"] == "fake_ppo" and json.loads(meta["overrides"])[-1] == "algorithm.kl_ctrl.kl_coef=0.05"
    assert len(meta["git_sha"]) == 40 and meta["rayjobs"] and meta["config_hash"]
    # Secrets in the submitter's environment never reach what list_jobs returns.
    listed = json.dumps([j.__dict__ for j in client.list_jobs()], default=str)
    assert "sekrit" not in listed
    from rayjobs.client.dashboard import Dashboard

    queued = json.dumps(Dashboard(cluster).queue.jobs())  # nor what the queue's API lists
    assert job_id in queued and "sekrit" not in queued
    # The trainer got absolute, per-run paths under the storage root, and the file logger.
    storage = settings.storage_root()
    ckpt = Path(meta["checkpoint_dir"])
    assert ckpt.is_absolute() and str(ckpt).startswith(str(storage)) and meta["run"] in str(ckpt)
    assert f"trainer.default_local_dir={ckpt}" in info.entrypoint
    metrics = Path(meta["run_dir"]) / "metrics.1.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    # The local ledger has it, with the resolved config.
    rec = ledger.find(job_id)
    assert rec and rec["address"] == cluster.address and rec["experiment"] == "fake_ppo"
    assert "kl_coef: 0.05" in Path(rec["config"]).read_text()


def test_resubmitting_a_named_run_resumes_as_attempt_2(cluster, client, workdir):
    args = ("+exp=fake_ppo", "trainer.experiment_name=resume_me", "trainer.save_freq=1", "+fake.steps=4")
    first = rayjobs_submit(*args, "+fake.fail_at=2", cwd=workdir)
    assert wait_terminal(client, first.stdout.strip()) == "FAILED", client.get_job_logs(first.stdout.strip())
    second = rayjobs_submit(*args, cwd=workdir)
    jid = second.stdout.strip()
    assert wait_terminal(client, jid) == "SUCCEEDED"
    log = client.get_job_logs(jid)
    assert "Resuming from" in log and "global_step_2" in log and "attempt 2 of run resume_me" in log
    run_dir = Path(client.get_job_info(jid).metadata["run_dir"])
    assert sorted(p.name for p in run_dir.glob("metrics.*.jsonl")) == ["metrics.1.jsonl", "metrics.2.jsonl"]


def test_max_retries_resumes_in_the_same_job(cluster, client, workdir):
    r = rayjobs_submit("+exp=fake_ppo", "rayjobs.max_retries=1", "trainer.save_freq=1", "+fake.steps=3",
                       "+fake.fail_at=2", cwd=workdir)
    jid = r.stdout.strip()
    assert wait_terminal(client, jid) == "SUCCEEDED"
    log = client.get_job_logs(jid)
    assert "fake crash at step 2" in log and "retrying (1/1)" in log and "Resuming from" in log


@pytest.mark.parametrize("args, expect", [
    (["+exp=fake_pp"], r"^error: unknown experiment 'fake_pp' \(did you mean: fake_ppo"),
    (["+exp=fake_ppo", "trainer.total_epoch=3"], r"^error: unknown config key 'trainer.total_epoch' \(did you mean: trainer.total_epochs"),
    (["+exp=fake_ppo", "data.train_batch_size=lots"], r"^error: data.train_batch_size='lots' has the wrong type"),
    (["+exp=fake_ppo", "rayjobs.address=http://127.0.0.1:9"], r"^error: cannot reach a Ray dashboard at http://127.0.0.1:9 \(from rayjobs.address\): check the address"),
    (["+exp=fake_ppo", "trainer.default_local_dir=./ckpt"], r"^error: trainer.default_local_dir='./ckpt' is a relative path"),
    (["+exp=fake_ppo", "+rayjobs.env.MY_API_TOKEN=x"], r"^error: rayjobs.env.MY_API_TOKEN looks like a secret"),
    # rayjobs' own keys are typed (rayjobs.config.schema): wrong types and ranges, preflight on or off
    (["+exp=fake_ppo", "rayjobs.priority=high"], r"^error: rayjobs.priority='high': must be an integer"),
    (["+exp=fake_ppo", "rayjobs.priority=high", "rayjobs.preflight=false"], r"^error: rayjobs.priority='high': must be an integer"),
    (["+exp=fake_ppo", "rayjobs.max_retries=lots"], r"^error: rayjobs.max_retries='lots': must be an integer"),
    (["+exp=fake_ppo", "rayjobs.max_retries=-1", "rayjobs.preflight=false"], r"^error: rayjobs.max_retries=-1: must be 0 or more"),
    (["+exp=fake_ppo", "rayjobs.entrypoint="], r"^error: rayjobs.entrypoint is empty"),
    (["+exp=fake_ppo", "rayjobs.kind=docker"], r"^error: rayjobs.kind='docker': must be one of verl, command"),
    (["+exp=fake_ppo", "rayjobs.prioirty=1"], r"^error: unknown config key 'rayjobs.prioirty' \(did you mean: rayjobs.priority"),
    (["+exp=fake_ppo", "+rayjobs.bogus=1"], r"^error: unknown config key 'rayjobs.bogus'.*rayjobs has no such key"),
    (["+exp=fake_ppo", "rayjobs.env.MODE=x"], r"^error: rayjobs.env.MODE: a job's environment takes new names with a \+"),
])
def test_bad_input_exit_2_one_line_nothing_submitted(cluster, client, workdir, args, expect):
    before = submitted(cluster)
    r = rayjobs_submit(*args, cwd=workdir)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = [x for x in r.stderr.splitlines() if not x.startswith("rayjobs: ")]
    assert len(lines) == 1 and re.search(expect, lines[0]), r.stderr
    assert "Traceback" not in r.stderr
    assert submitted(cluster) == before


def test_working_dir_too_large_is_refused_before_upload(cluster, client, workdir):
    with open(workdir / "weights.bin", "wb") as f:  # sparse: no disk used
        f.truncate(600 * 2**20)
    before = submitted(cluster)
    r = rayjobs_submit("+exp=fake_ppo", cwd=workdir)
    # The error is the last line; notes may come first (verl's validation without the preflight
    # extra says it did not run: the README's own set-up has no such extra).
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and re.match(r"error: working_dir .* is 600 MiB after excludes, over Ray's 512 MiB limit", last), r.stderr
    assert r.stderr.count("error:") == 1 and "Traceback" not in r.stderr
    assert submitted(cluster) == before
    (workdir / ".gitignore").write_text("*.bin\n")  # Ray honours .gitignore; so do we
    ok = rayjobs_submit("+exp=fake_ppo", "rayjobs.dry_run=true", cwd=workdir)
    assert ok.returncode == 0, ok.stderr


def test_traceback_only_with_debug(cluster, workdir):
    r = rayjobs_submit("+exp=nope", cwd=workdir, env={"RAYJOBS_DEBUG": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_dry_run_touches_no_cluster(workdir, tmp_path):
    home = tmp_path / "fresh-home"
    r = rayjobs_submit("+exp=fake_ppo", "rayjobs.dry_run=true", cwd=workdir, env={"RAYJOBS_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["submit_job"]["submission_id"].startswith("fake_ppo-")
    assert doc["config"]["trainer"]["nnodes"] == 1 and doc["config"]["rayjobs"]["dry_run"] is True
    assert not (home / "local").exists()  # no embedded head was started
    assert not (home / "ledger.jsonl").exists()  # nothing recorded: nothing was submitted
    # Even an unreachable address is fine: dry-run never connects.
    r2 = rayjobs_submit("+exp=fake_ppo", "rayjobs.dry_run=true", "rayjobs.address=127.0.0.1:9", cwd=workdir)
    assert r2.returncode == 0


def readme_main_job() -> list[list[str]]:
    """The `python -m rayjobs.submit ...` steps of the README's first command, as argument lists."""
    import shlex

    block = (REPO / "README.md").read_text().split("```bash", 1)[1].split("```", 1)[0]
    steps = [part.strip(" \\\n") for part in block.split("&&")]
    return [shlex.split(st)[3:] for st in steps if st.startswith("python -m rayjobs.submit ")]


def test_readme_main_job_prepares_data_then_dry_runs_ppo(cluster, client, workdir):
    """The README's first command exactly as written, on a machine with no internet: the test
    process sits in a network namespace with only lo, so the hub is out of reach."""
    prepare, dry_run = readme_main_job()
    assert prepare[0] == "+exp=prepare_data" and "rayjobs.dry_run=true" in dry_run
    r = rayjobs_submit(*prepare, cwd=REPO)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "the Hugging Face hub is not reachable" in r.stdout and "SAMPLE of 64 rows, not the full dataset" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr
    storage = settings.storage_root()
    import pyarrow.parquet as pq

    train = pq.read_table(storage / "data" / "gsm8k" / "train.parquet").to_pylist()
    assert len(train) == 64 and train[0]["data_source"] == "openai/gsm8k" and train[0]["prompt"][0]["role"] == "user"
    assert json.loads((storage / "data" / "gsm8k" / "prepared.json").read_text())["sample"] is True
    dry = rayjobs_submit(*dry_run, cwd=REPO)
    assert dry.returncode == 0, dry.stderr
    assert f"data.train_files={storage}/data/gsm8k/train.parquet" in json.loads(dry.stdout)["submit_job"]["entrypoint"]

"""What a new user trips on first (issue 28): each bad input is one line that names it and a fix.

Fast tier: no Ray (the dry-runs and refusals happen before anything reaches a cluster).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from conftest import rayjobs_cli, rayjobs_submit

from rayjobs.oncluster.failurecause import classify


def _one_error(r, *needles: str) -> str:
    assert r.returncode == 2, f"rc={r.returncode}\n{r.stderr}"
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize("args, needles", [
    (["+exp=prepare_data", ""], ["an empty override", "KEY=VALUE"]),
    (["-m", "+exp=prepare_data", ""], ["an empty override"]),
    (["+exp=prepare_data", "=3"], ["'=3' has no key", "+KEY=VALUE"]),
    (["+exp=prepare_data", "rayjobs.prepare.dataset=gsm9k"], ["gsm8k, math, gsm8k_tool", "did you mean: gsm8k"]),
    (["+exp=prepare_data", "rayjobs.prepare.dataset="], ["rayjobs.prepare.dataset=''", "must be one of"]),
    (["+exp=prepare_data", "rayjobs.prepare.source="], ["rayjobs.prepare.source is empty", "auto, hub, sample"]),
    (["+exp=prepare_data", "rayjobs.prepare.source=/nonexistent/dir", "rayjobs.dry_run=true"],
     ["/nonexistent/dir", "no such file or directory on this machine"]),
])
def test_bad_input_is_one_line_naming_it(args, needles, tmp_path):
    _one_error(rayjobs_submit(*args, cwd=tmp_path), *needles)


def test_a_missing_wandb_key_says_how_to_try_without_it(tmp_path):
    r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "rayjobs.dry_run=true", cwd=tmp_path)
    wandb = [line for line in r.stderr.splitlines() if "WANDB_API_KEY" in line]
    assert r.returncode == 2 and wandb and "+rayjobs.env.WANDB_MODE=offline" in wandb[0], r.stderr


def test_a_new_top_level_key_is_warned_about_once(tmp_path):
    r = rayjobs_submit("-m", "+exp=ppo_gsm8k_qwen05b", "+nosuchgroup=x", "+trainer.my_flag=1",
                       "trainer.total_epochs=1,2", "rayjobs.dry_run=true", cwd=tmp_path)
    warned = [line for line in r.stderr.splitlines() if "verl ignores it" in line]
    assert len(warned) == 1 and "+nosuchgroup=x" in warned[0], r.stderr  # not for trainer.my_flag, once for 2 points


def test_help_lists_every_rayjobs_key(tmp_path):
    from rayjobs.config.schema import own_keys

    r = rayjobs_submit("--help", cwd=tmp_path)
    assert r.returncode == 0
    listed = " ".join(r.stdout.split())
    missing = [k for k in own_keys() if k.removeprefix("rayjobs.") not in listed]
    assert not missing, missing


def test_a_commands_own_error_line_is_its_failure_cause():
    tail = ("usage: prepare_data.py [-h] --dataset {gsm8k,math,gsm8k_tool}\n"
            "prepare_data.py: error: argument --dataset: invalid choice: 'gsm9k'\n")
    cause = classify(2, tail)
    assert cause.line() == "error: argument --dataset: invalid choice: 'gsm9k'" and not cause.retry
    hub = "rayjobs: loading gsm8k\nerror: gsm8k: the Hugging Face hub is not reachable (offline?)\n"
    assert classify(1, hub).line().startswith("error: gsm8k: the Hugging Face hub is not reachable")
    assert classify(1, "Traceback ...\nValueError: bad\n").line() == "ValueError: bad"  # an exception still wins


def test_local_status_creates_no_folder(tmp_path):
    run_dir = tmp_path / "xdg"
    run_dir.mkdir()
    r = rayjobs_cli("local", "status", env={"XDG_RUNTIME_DIR": str(run_dir)})
    assert r.returncode in (0, 1, 3), r.stderr
    assert not list(run_dir.iterdir()), list(run_dir.iterdir())
    assert not (Path(os.environ["RAYJOBS_HOME"]) / "preflight").exists()


def _dry_env(tmp_path, *overrides: str) -> dict:
    import json

    r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "+rayjobs.env.WANDB_MODE=offline", "rayjobs.dry_run=true",
                       "rayjobs.preflight=false", *overrides, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["submit_job"]["runtime_env"].get("env_vars", {})


def test_a_wandb_job_keeps_one_wandb_run_across_attempts(tmp_path):
    """The W&B run id comes from the run name (what a retry, a preemption's resume and `resume` keep)."""
    a = _dry_env(tmp_path, "trainer.experiment_name=my_run")
    b = _dry_env(tmp_path, "trainer.experiment_name=my_run")
    c = _dry_env(tmp_path, "trainer.experiment_name=other_run")
    assert a["WANDB_RUN_ID"] == b["WANDB_RUN_ID"] != c["WANDB_RUN_ID"] and a["WANDB_RESUME"] == "allow"
    assert a["WANDB_RUN_ID"].startswith("my_run-") and len(a["WANDB_RUN_ID"]) <= 64
    assert "WANDB_RUN_ID" not in _dry_env(tmp_path, "trainer.logger=[console]")
    assert _dry_env(tmp_path, "+rayjobs.env.WANDB_RUN_ID=mine")["WANDB_RUN_ID"] == "mine"


def test_a_rayjobs_key_typo_is_not_told_to_add_it_with_a_plus(tmp_path):
    err = _one_error(rayjobs_submit("+exp=prepare_data", "rayjobs.dry_rn=true", cwd=tmp_path), "rayjobs.dry_run")
    assert "+rayjobs.dry_rn" not in err and "--help" in err


def test_local_status_of_a_stopped_head_says_how_to_start_it(tmp_path):
    r = rayjobs_cli("local", "status", env={"RAYJOBS_HOME": str(tmp_path / "home")})
    assert r.returncode == 1 and "`rayjobs local start` starts it" in r.stderr


@pytest.mark.cluster
def test_a_local_head_in_words_its_stop_names_running_jobs_and_nothing_is_left(tmp_path, workdir):
    """An embedded head of its own (its own RAYJOBS_HOME; the commands' TMPDIR a dir of the test's):
    `local start` says what it does, `local status` says in words what runs (the record with --json),
    `local stop` names the job it ends; then neither the head nor the commands left a file in TMPDIR
    (Ray's dashboard leaves its pymp-* dir on every stop: the head's own TMPDIR is removed), and the
    head's own temp dir is gone."""
    import shutil
    import tempfile

    short = tempfile.mkdtemp(prefix="rjl", dir="/tmp")  # Ray's socket paths are limited to 107 bytes
    tmp = Path(tempfile.mkdtemp(prefix="rjx", dir="/tmp"))
    home = {"RAYJOBS_HOME": short, "TMPDIR": str(tmp)}
    try:
        r = rayjobs_cli("local", "start", env=home, timeout=180)
        assert r.returncode == 0 and r.stdout.startswith("http://127.0.0.1:"), r.stderr
        assert "starting the embedded local Ray head" in r.stderr and "no cluster configured" not in r.stderr
        again = rayjobs_cli("local", "start", env=home)
        assert again.stdout == r.stdout and "already running" in again.stderr, again.stderr
        r = rayjobs_submit("+exp=fake_ppo", "+fake.steps=400", "+fake.step_s=0.5", cwd=workdir, env=home)
        assert r.returncode == 0, r.stderr
        sid = r.stdout.strip()
        from conftest import wait_until

        wait_until(lambda: sid in rayjobs_cli("list", "--status", "RUNNING", env=home).stdout, 120, f"{sid} to run")
        words = rayjobs_cli("local", "status", env=home)
        lines = words.stdout.splitlines()
        assert words.returncode == 0 and len(lines) <= 5, words.stdout
        assert lines[0].startswith(f"the embedded local Ray head is running at {again.stdout.strip()}"), lines
        assert "jobs: 1 running, 0 waiting" in lines[1] and "preflight helper" in lines[2], lines
        rec = json.loads(rayjobs_cli("local", "status", "--json", env=home).stdout)
        assert rec["pids"] and rec["dashboard"] == again.stdout.strip()
        stop = rayjobs_cli("local", "stop", env=home, timeout=120)
        assert stop.returncode == 0, stop.stderr
        warned = [line for line in stop.stderr.splitlines() if "warning: stopping the embedded head ends" in line]
        assert warned and sid in warned[0] and "resumes from its last checkpoint" in warned[0], stop.stderr
        assert sorted(os.listdir(tmp)) == [] and not (Path(short) / "local" / "tmp").exists()
    finally:
        rayjobs_cli("local", "stop", env=home, timeout=120)
        shutil.rmtree(short, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def test_local_status_in_words():
    from rayjobs.cli.local import duration, status_words

    rec = {"dashboard": "http://127.0.0.1:8265", "api": "http://127.0.0.1:8263", "temp_dir": "/h/local/ray",
           "session_dir": "/h/local/ray/session_x", "pids": list(range(21))}
    lines = status_words(rec, {"admitted": 2, "waiting": 5}, "the warm preflight helper is not running", 7380)
    assert lines == [
        "the embedded local Ray head is running at http://127.0.0.1:8265 (Ray dashboard and Jobs API), up 2 h 3 min",
        "jobs: 2 running, 5 waiting (`rayjobs list`); the queue's API: http://127.0.0.1:8263",
        "the warm preflight helper is not running",
        "logs: /h/local/ray/session_x/logs; the whole record (ports, PIDs): rayjobs local status --json"]
    lines = status_words(rec, None, "the warm preflight helper is not running", None)
    assert lines[0].endswith("(Ray dashboard and Jobs API)") and lines[1].startswith("jobs: unknown: the queue at")
    assert [duration(s) for s in (5, 125, 3 * 86400 + 7200)] == ["5 s", "2 min", "3 d 2 h"]


def test_a_data_jobs_dataset_shows_in_the_overrides_column():
    import json

    from rayjobs.views.jobrows import overrides_label

    meta = {"overrides": json.dumps(["+exp=prepare_data", "rayjobs.prepare.dataset=math", "rayjobs.follow=true"])}
    assert overrides_label(meta) == "dataset=math"  # was empty ('-'): every rayjobs.* key was left out
    assert overrides_label({"overrides": json.dumps(["trainer.total_epochs=2", "rayjobs.priority=3"])}) == "total_epochs=2"


def test_a_metadata_list_is_read_whole_or_not_at_all():
    import json

    from jobfactory import job_view

    from rayjobs.contract.meta import JobMeta
    from rayjobs.views.jobrows import base_row, overrides_label

    def json_list(text):
        return list(JobMeta.from_ray({"overrides": text}).overrides)

    assert json_list(' ["a=1", "b=2"] ') == ["a=1", "b=2"] and json_list("[1, 2]") == ["1", "2"]
    for bad in ("", None, "[]", "not json", '["a"] trailing', '{"a": 1}', '"a"', "[1,"):
        assert json_list(bad) == [], bad
    m = {"overrides": json.dumps(["+exp=x", "trainer.total_epochs=2"]), "sweep_overrides": json.dumps(["a.lr=1e-6"])}
    row = base_row(job_view("x-1", metadata=m))
    assert row["label"] == overrides_label(m) == "lr=1e-6" and row["overrides"] == ["+exp=x", "trainer.total_epochs=2"]
    row["overrides"].append("changed")  # a row's lists are its own
    assert base_row(job_view("x-1", metadata=m))["overrides"] == ["+exp=x", "trainer.total_epochs=2"]


def test_the_ledger_skips_the_jobs_the_cluster_lists_by_their_id_alone(tmp_path, monkeypatch):
    from rayjobs import ledger

    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path))
    ledger.record({"id": "b", "entrypoint": 'python x.py --note \'"id": "a"\'', "cluster": "c1", "sweep": ""})
    ledger.record({"id": "a", "entrypoint": "python x.py", "cluster": "c1", "sweep": "", "experiment": "e"})
    ledger.record({"id": "c", "entrypoint": "python x.py", "cluster": "c2", "sweep": "s", "metadata": {"id": "b"}})
    ledger.record({"id": "b", "entrypoint": "again", "cluster": "c1", "sweep": ""})
    with ledger.path().open("a") as f:
        f.write("not json\n")
    for known in (set(), {"a"}, {"b"}, {"a", "b", "c"}, {"x"}):
        assert list(ledger.entries_not_in(known)) == [e for e in ledger.entries() if e["id"] not in known], known
    assert [e["entrypoint"] for e in ledger.entries_not_in({"a", "c"})] == ['python x.py --note \'"id": "a"\'', "again"]


def test_plot_hints_name_what_the_jobs_logged(tmp_path):
    """A metric typo lists what was logged (plot --json does not); jobs with no step yet are told to wait."""
    import json as _json

    from rayjobs.errors import ConfigError, RayjobsError
    from rayjobs.views import plot

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.1.jsonl").write_text(_json.dumps({"step": 1, "data": {"actor/pg_loss": 0.1}}) + "\n")
    from jobfactory import job_view

    job = job_view("j1", "SUCCEEDED", "done", metadata={"run_dir": str(run)}, from_queue=True)
    with pytest.raises(ConfigError, match=r"no job logged the metric 'critic/scor'.*they logged: actor/pg_loss"):
        plot.collect(None, [job], ["critic/scor"])
    data = plot.collect(None, [job])
    with pytest.raises(RayjobsError, match=r"pick another with --metric: they logged actor/pg_loss"):
        plot.render(data, str(tmp_path / "x.png"))
    empty = job_view("j2", "QUEUED", "waiting", metadata={"run_dir": str(tmp_path / "none")})
    with pytest.raises(RayjobsError, match=r"none of the jobs has logged a step yet \(QUEUED\): plot again once they train"):
        plot.render(plot.collect(None, [empty]), str(tmp_path / "y.png"))


def test_cli_json_rows_are_one_compact_object_a_line():
    from rayjobs.cli.common import json_rows

    rows = [{"id": "a", "score": 0.5, "at": time}, {"id": "b", "metrics": {"x": [1, 2]}}]
    text = json_rows(rows)
    assert json.loads(text) == [{"id": "a", "score": 0.5, "at": str(time)}, rows[1]]
    assert text.splitlines()[1:-1] == [json.dumps(json.loads(text)[0]) + ",", json.dumps(rows[1])]
    assert json_rows([]) == "[]"


# --------------------------------------------------------------------------- issue 45: one-line usage errors
def _commands(group=None, path=()):
    """Every ``rayjobs`` command (subgroups' too): (its words, the click command)."""
    import click

    from rayjobs.cli import main

    group = group or main
    for name, cmd in group.commands.items():
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


def test_every_commands_usage_errors_are_one_line():
    """An unknown option, a missing argument, an unknown command: one line, what and where the help is, exit 2."""
    from click.testing import CliRunner

    from rayjobs.cli import main

    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2; later ones keep stderr apart anyway
    except TypeError:
        runner = CliRunner()
    checked = 0
    for words, cmd in _commands():
        path = " ".join(("rayjobs", *words))
        if cmd.context_settings.get("ignore_unknown_options"):
            assert words == ("up",)  # `rayjobs up --infra=k8s`: its KEY=VALUE parser says a bad one in one line
            continue
        r = runner.invoke(main, [*words, "--no-such-option"], prog_name="rayjobs")
        # click's own suggestion stays in the line (`rayjobs ui` has --no-open: "did you mean --no-open?")
        line = rf"error: {re.escape(path)}: no such option --no-such-option( \(did you mean --[a-z-]+\?\))?; see {re.escape(path)} --help"
        assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and re.fullmatch(line, r.stderr.strip()), (path, r.stderr)
        required = [p.human_readable_name for p in cmd.params if p.required and p.param_type_name == "argument"]
        if required:
            r = runner.invoke(main, list(words), prog_name="rayjobs")
            assert r.exit_code == 2 and r.stderr.splitlines() == [
                f"error: {path}: missing {required[0]}; see {path} --help"], (path, r.stderr)
            checked += 1
    assert checked >= 5  # status, logs, tail, resume, rerun ...
    r = runner.invoke(main, ["stop", "--sweep"], prog_name="rayjobs")
    assert r.stderr.splitlines() == ["error: rayjobs stop: option '--sweep' requires an argument; see rayjobs stop --help"]
    r = runner.invoke(main, ["lst"], prog_name="rayjobs")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and "no such command 'lst'" in r.stderr


def test_a_missing_job_id_is_one_line_and_help_stays():
    r = rayjobs_cli("status")
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "error: python -m rayjobs.cli status: missing JOB_ID; see python -m rayjobs.cli status --help"], r.stderr
    r = rayjobs_cli("status", "--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: python -m rayjobs.cli status [OPTIONS] JOB_ID")


def test_config_says_the_default_image_is_a_base_the_pinned_stack_goes_over(tmp_path):
    """bootstrap/cluster.yaml's image is verl 0.5 / torch 2.7: its line says, in the same line, that the
    nodes' setup installs the pinned stack over it (the pins of pyproject's cluster extra)."""
    from test_image import _pyproject, _requirement_pins

    pins = _requirement_pins(_pyproject()["project"]["optional-dependencies"]["cluster"])
    r = rayjobs_cli("config", cwd=tmp_path, env={"RAYJOBS_HOME": str(tmp_path / "home")})
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("cluster.image")]
    assert "base-verl0.5" in line and "(bootstrap/cluster.yaml; a base image: the nodes' setup installs the pinned " \
        f"verl {pins['verl']} + vLLM {pins['vllm']} (torch {pins['torch']}) over it" in line, line
    doc = json.loads(rayjobs_cli("config", "--json", cwd=tmp_path, env={"RAYJOBS_HOME": str(tmp_path / "home")}).stdout)
    assert doc["cluster.image"]["note"].startswith("a base image") and doc["cluster.image"]["value"] in line
    r = rayjobs_cli("config", cwd=tmp_path, env={"RAYJOBS_HOME": str(tmp_path / "home"),
                                                 "RAYJOBS_CLUSTER_IMAGE": "ghcr.io/team/rayjobs-cluster:0123abcd4567"})
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("cluster.image")]
    assert line.endswith("(env RAYJOBS_CLUSTER_IMAGE)"), line  # an image of one's own: no note

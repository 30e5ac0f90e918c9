"""The README's daily-use submit lines run as written on the README's own set-up (issue 45).

"As written", as this test reads it:

* the set-up is the README's: the embedded head's storage under a fresh ``$RAYJOBS_HOME``, no W&B
  key, no internet, no GPUs; then what "Daily use" says to do first, line by line: its ``export``s,
  and its ``prepare_data`` submits, whose job's own command (the dry run's entrypoint, after the
  runner's ``--``) runs here, in the job's working_dir, as the head would run it (the fast tier
  starts no Ray);
* each ``python -m rayjobs.submit`` line of the daily-use block (a ``\\`` continues a line, ``#``
  starts a comment) runs with its words unchanged, plus ``rayjobs.dry_run=true``: the laptop has no
  GPUs, and a dry run checks what a submit checks (the config, the data on the storage, the secrets
  the loggers need, the code it would ship); ``<...>`` (a job of yours) becomes a job id, ``...``
  (more overrides) is left out;
* ``+exp=eval_checkpoint rayjobs.after=S`` is the one line not run here: its dry run reads the
  trained points of sweep S from the cluster (``tests/test_eval.py`` runs that form on one);
* the "From Python" lines that need no cluster (``plan_experiment``) run as written too.

A halving line is also checked for what makes it judge anything: its metric is the one its
preset's data logs (``val-core/<data_source>/...``), and its rungs fall on validation and checkpoint
steps.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

#: Lines of the daily-use block not run here, and why (the test fails if one is missing from the README).
NOT_RUN = {"+exp=eval_checkpoint": "its dry run reads sweep S's trained points from the cluster (tests/test_eval.py)"}


def _section(name: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {name}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def _blocks(section: str, lang: str) -> list[list[str]]:
    """The section's ``lang`` code blocks, each as its commands (``\\`` continuations joined, ``&&`` split)."""
    out = []
    for body in re.findall(rf"```{lang}\n(.*?)```", section, re.S):
        out.append([c.strip() for line in body.replace("\\\n", " ").splitlines() for c in line.split(" && ")])
    return out


def _words(line: str) -> list[str]:
    """A shell line's words, its comment left out; ``<...>`` a job id, ``...`` dropped."""
    line = re.sub(r"<[^>]*>", "grpo_7b-20260101-000000-abcd", line)
    return [w for w in shlex.split(line, comments=True) if w != "..."]


def _submits(lines: list[str]) -> list[list[str]]:
    prefix = ["python", "-m", "rayjobs.submit"]
    return [w[3:] for w in map(_words, lines) if w[:3] == prefix]


@pytest.fixture(scope="module")
def setup_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The README's set-up ("The two commands": its data job; the dry run is a test of its own),
    then what "Daily use" says to do first (its exports, its data)."""
    tmp_path = tmp_path_factory.mktemp("readme")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RAYJOBS_WANDB_"))}
    env.update(RAYJOBS_HOME=str(tmp_path / "home"), RAYJOBS_NO_LOCAL_HEAD="1", HF_HUB_OFFLINE="1")
    (two,) = _blocks(_section("The two commands"), "bash")[:1]
    setup = [line for line in two if "+exp=prepare_data" in line] + _blocks(_section("Daily use"), "bash")[0]
    for line in setup:
        words = _words(line)
        if words[:1] == ["export"]:
            key, _, value = words[1].partition("=")
            env[key] = value
    for args in _submits(setup):
        assert "+exp=prepare_data" in args, args  # the set-up prepares data, nothing else
        job = _dry_run([a for a in args if a != "rayjobs.follow=true"], env, tmp_path)[0]["submit_job"]
        command = job["entrypoint"].split(" -- ", 1)[1]  # the runner runs this in the job's working_dir
        r = subprocess.run(command, shell=True, cwd=job["runtime_env"]["working_dir"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
    return env


def _dry_run(args: list[str], env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    r = subprocess.run([sys.executable, "-m", "rayjobs.submit", *args, "rayjobs.dry_run=true"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"python -m rayjobs.submit {' '.join(args)}\n{r.stderr}"
    doc = json.loads(r.stdout)
    return doc if isinstance(doc, list) else [doc]


def test_every_daily_use_submit_runs_as_written(setup_env: dict[str, str], tmp_path: Path) -> None:
    blocks = _blocks(_section("Daily use"), "bash")
    assert len(blocks) == 2, "Daily use: a set-up block, then the daily-use block"
    lines = _submits(blocks[1])
    skipped = {k for k in NOT_RUN if any(k in args for args in lines)}
    assert skipped == set(NOT_RUN), f"a line NOT_RUN names is gone from the README: {set(NOT_RUN) - skipped}"
    run = [args for args in lines if not any(k in args for k in NOT_RUN)]
    assert len(run) == len(lines) - len(NOT_RUN) >= 7, lines
    with ThreadPoolExecutor(max_workers=3) as pool:  # independent processes: side by side
        done = list(pool.map(lambda args: _dry_run(args, setup_env, tmp_path), run))
    for args, points in zip(run, done):
        if any(a.startswith("rayjobs.halving.metric=") for a in args):
            _check_halving(points)


def _check_halving(points: list[dict[str, Any]]) -> None:
    """A halving sweep judges its points: the metric is its data's, the rungs are validated and saved."""
    spec = importlib.util.spec_from_file_location("prepare_data_for_test", REPO / "scripts" / "prepare_data.py")
    prep = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = prep  # its dataclasses look their module up there
    spec.loader.exec_module(prep)
    cfg = points[0]["config"]
    halving = cfg["rayjobs"]["halving"]
    dataset = Path(cfg["data"]["val_files"]).parent.name
    source = prep.DATASETS[dataset]["data_source"]
    assert halving["metric"].startswith(f"val-core/{source}/"), (halving["metric"], source)
    for freq in ("test_freq", "save_freq"):
        every = cfg["trainer"][freq]
        assert every > 0 and all(r % every == 0 for r in halving["rungs"]), (freq, every, halving["rungs"])


def test_the_main_job_runs_as_written(setup_env: dict[str, str], tmp_path: Path) -> None:
    """The second of "The two commands" (a dry run itself) on the data of the first."""
    (two,) = _blocks(_section("The two commands"), "bash")[:1]
    (main,) = [args for args in _submits(two) if "+exp=prepare_data" not in args]
    assert "rayjobs.dry_run=true" in main
    assert _dry_run(main, setup_env, tmp_path)[0]["experiment"] == "ppo_gsm8k_qwen05b"


def test_the_python_api_plan_runs_as_written(setup_env: dict[str, str], tmp_path: Path) -> None:
    (block,) = _blocks(_section("From Python"), "python")
    plans = [line.split("#", 1)[0].strip() for line in block if "plan_experiment(" in line]
    assert plans
    code = "import rayjobs\n" + "\n".join(plans) + "\nprint(len(specs))\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=setup_env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr


def test_the_settings_wandb_mode_is_each_jobs_wandb_mode(setup_env: dict[str, str], tmp_path: Path) -> None:
    """``wandb.mode`` (what Daily use exports) is WANDB_MODE in the job's environment; the command line wins."""
    env = dict(setup_env, RAYJOBS_WANDB_MODE="offline")
    job = _dry_run(["+exp=ppo_gsm8k_qwen05b"], env, tmp_path)[0]["submit_job"]
    assert job["runtime_env"]["env_vars"]["WANDB_MODE"] == "offline"
    job = _dry_run(["+exp=ppo_gsm8k_qwen05b", "+rayjobs.env.WANDB_MODE=disabled"], env, tmp_path)[0]["submit_job"]
    assert job["runtime_env"]["env_vars"]["WANDB_MODE"] == "disabled"
    r = subprocess.run([sys.executable, "-m", "rayjobs.cli", "config"], env=dict(env, RAYJOBS_WANDB_MODE="ofline"),
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: RAYJOBS_WANDB_MODE='ofline' = 'ofline' is not a W&B mode: one of online, offline, disabled, shared, "
        "dryrun (did you mean: offline, online?)"], r.stderr

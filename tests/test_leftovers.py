"""A test run and a head leave nothing they made behind (issue 45, item 7).

The head's side (a start, a submit, a stop, with the commands' TMPDIR a dir of the test's) is
``test_polish.py::test_a_local_head_in_words_its_stop_names_running_jobs_and_nothing_is_left``.
Fast tier: no Ray.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import REPO, rayjobs_submit


def test_a_submit_refused_after_its_code_was_packed_leaves_no_archive(tmp_path: Path) -> None:
    """The submit packs its code while preflight runs; preflight refuses it (no data), so the
    archive is never sent: the process's exit drops it (was: one rayjobs-code-*.zip a refusal)."""
    tmp = Path(tempfile.mkdtemp(prefix="rjx", dir="/tmp"))
    try:
        r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "+rayjobs.env.WANDB_MODE=offline", cwd=tmp_path,
                           env={"TMPDIR": str(tmp), "RAYJOBS_HOME": str(tmp_path / "home")})
        assert r.returncode == 2 and "no such file on the cluster's storage" in r.stderr, r.stderr
        assert os.listdir(tmp) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_quiet_parallel_test_run_prints_no_status_line(tmp_path: Path) -> None:
    """``python -m pytest -q`` (the README's test command: three xdist workers) shows the dots and the
    summary, not xdist's "bringing up nodes..." (it wrote it twice)."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                        "tests/test_polish.py::test_cli_json_rows_are_one_compact_object_a_line"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bringing up nodes" not in r.stdout + r.stderr and "1 passed" in r.stdout, r.stdout

"""Start-up stamps (issue 50 item 1): the runner turns them on for verl's Ray processes only when the
job asks (``RAYJOBS_STAMPS=1``); a real child process prints them for its start, its big imports
and torch's lazy CUDA init (a stand-in ``torch`` package here: no GPU, no torch on this machine).
The same hook inside real Ray workers: tests/test_warm_engines.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rayjobs.contract.meta import JobMeta
from rayjobs.oncluster import runner, warmstamps

REPO = Path(__file__).resolve().parents[1]
VERL = ["python3", "-m", "verl.trainer.main_ppo"]
HOOK = "++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=rayjobs.oncluster.warmstamps.setup"
INFO = "++ray_kwargs.ray_init.runtime_env.env_vars.VLLM_LOGGING_LEVEL=INFO"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAYJOBS_STAMPS", "VLLM_LOGGING_LEVEL")}
    env.update(RAYJOBS_NODE_CACHE="off", **extra)
    return env


def test_off_unless_the_job_asks() -> None:
    env, cmd = runner.attempt_env(VERL, JobMeta(kind="verl"), _env(), None, 0, 0)
    assert not [a for a in cmd if "setup_hook" in a or "VLLM_LOGGING_LEVEL" in a]
    assert env.get("RAY_DEDUP_LOGS_ALLOW_REGEX") == os.environ.get("RAY_DEDUP_LOGS_ALLOW_REGEX")
    _, cmd = runner.attempt_env(VERL, JobMeta(kind="verl"), _env(RAYJOBS_STAMPS="0"), None, 0, 0)
    assert not [a for a in cmd if "setup_hook" in a]


def test_on_for_verls_actors(capsys) -> None:
    env, cmd = runner.attempt_env(VERL, JobMeta(kind="verl"), _env(RAYJOBS_STAMPS="1"), None, 0, 0)
    assert cmd[-2:] == [HOOK, INFO]
    # Ray's driver would fold the stamps of several processes into one "[repeated Nx]" line
    assert env["RAY_DEDUP_LOGS_ALLOW_REGEX"] == r"\[rayjobs-stamp\]"
    env, _ = runner.attempt_env(VERL, JobMeta(kind="verl"), _env(RAYJOBS_STAMPS="1", RAY_DEDUP_LOGS_ALLOW_REGEX="mine"),
                                None, 0, 0)
    assert env["RAY_DEDUP_LOGS_ALLOW_REGEX"] == r"mine|\[rayjobs-stamp\]"
    assert "[rayjobs] start-up stamps: worker_process_setup_hook, VLLM_LOGGING_LEVEL" in capsys.readouterr().out
    # not a verl job: its command is its own
    _, cmd = runner.attempt_env(["python3", "train.py"], JobMeta(kind="command"), _env(RAYJOBS_STAMPS="1"), None, 0, 0)
    assert cmd == ["python3", "train.py"]


def test_a_jobs_own_log_level_and_hook_are_kept() -> None:
    assert warmstamps.actor_overrides(_env(RAYJOBS_STAMPS="1", VLLM_LOGGING_LEVEL="DEBUG"), VERL) == [HOOK]
    argv = VERL + [HOOK.replace("warmstamps.setup", "mine.hook").lstrip("+")]
    assert warmstamps.actor_overrides(_env(RAYJOBS_STAMPS="true"), argv) == [INFO]


def test_verls_hydra_reads_the_hook_as_one_string() -> None:
    parser = pytest.importorskip("hydra.core.override_parser.overrides_parser").OverridesParser.create()
    got = {o.key_or_group: o.value() for o in parser.parse_overrides([HOOK, INFO])}
    assert got == {"ray_kwargs.ray_init.runtime_env.worker_process_setup_hook": warmstamps.HOOK,
                   "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_LOGGING_LEVEL": "INFO"}


FAKE_TORCH = {
    "torch/__init__.py": "import time\ntime.sleep(0.2)\nfrom torch import cuda\n",
    "torch/cuda/__init__.py": (
        "import time\n_done = False\n"
        "def is_initialized():\n    return _done\n"
        "_busy = False\n"
        "def _lazy_init():\n    global _done, _busy\n    if _done or _busy:\n        return\n"
        "    _busy = True\n    time.sleep(0.3)\n    device_count()\n    _done, _busy = True, False\n"
        "def device_count():\n    _lazy_init()\n    return 1\n"
        "from torch.cuda import memory\n"),
    "torch/cuda/memory.py": "from torch.cuda import _lazy_init\ndef mem_get_info():\n    _lazy_init()\n    return (1, 2)\n",
}


def test_a_real_process_stamps_its_start_imports_and_cuda_init(tmp_path: Path) -> None:
    for rel, text in FAKE_TORCH.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    probe = ("from rayjobs.oncluster import warmstamps; warmstamps.setup(); import torch; "
             "import torch.cuda.memory as m; print(m.mem_get_info()); torch.cuda._lazy_init(); "
             "print(torch.__loader__.__class__.__name__, torch.__spec__.loader.__class__.__name__)")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    stamps = [ln.split(" ", 2) for ln in lines if ln.startswith(warmstamps.PREFIX)]
    events = [e for _, _, e in stamps]
    assert events == ["process started", "ray worker up", "import torch begin", "import torch end",
                      "cuda init begin", "cuda init end"], lines   # once: not the nested call, nor the later one
    t = {e: float(s) for _, s, e in stamps}
    assert t0 - 5 < t["process started"] <= t["ray worker up"] <= time.time()
    assert t["import torch end"] - t["import torch begin"] >= 0.19   # the stand-in sleeps 0.2 s in its import (stamps are in ms)
    assert t["cuda init end"] - t["cuda init begin"] >= 0.29   # through the submodule's own binding
    assert "(1, 2)" in lines and "SourceFileLoader SourceFileLoader" in lines   # the real loader is left in place


def test_nothing_fails_where_there_is_no_proc(monkeypatch) -> None:
    monkeypatch.setattr("builtins.open", lambda *a, **k: (_ for _ in ()).throw(OSError("no /proc")))
    assert warmstamps.process_start_time() is None

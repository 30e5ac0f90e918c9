"""Node-local caches across jobs (issue 33), without Ray or a GPU.

The runner points vLLM's, torch inductor's, Triton's, the CUDA driver's and torch's extension
caches at subdirs of ``$RAYJOBS_NODE_CACHE`` in the trainer's environment and, for a verl job, in
the runtime_env verl gives its actors (which do not inherit the driver's environment). A value
the job already has (from the node's environment or passed to verl's actors on the command line)
is kept. The node script creates the directory and hands its path to the Ray processes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from rayjobs.oncluster import runner

REPO = Path(__file__).resolve().parents[1]
RENV = "++ray_kwargs.ray_init.runtime_env.env_vars"
CACHES = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "TORCH_EXTENSIONS_DIR")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in CACHES + ("PYTHONPYCACHEPREFIX", runner.NODE_CACHE_ENV, "RAYJOBS_NODE_CACHE_PYC")}
    env.update(extra)
    return env


def test_the_trainer_gets_every_cache_under_the_node_cache(tmp_path: Path, monkeypatch, capsys) -> None:
    """What the trainer process itself sees (run_attempts, as in tests/test_runner.py), and the dirs exist."""
    root = tmp_path / "cache"
    monkeypatch.chdir(tmp_path)
    probe = ("import json, os; json.dump({k: os.environ.get(k) for k in %r}, open('seen.json', 'w'))"
             % ((CACHES + ("PYTHONPYCACHEPREFIX",)),))
    code = runner.run_attempts([sys.executable, "-c", probe], {}, _clean_env(RAYJOBS_NODE_CACHE=str(root)),
                               str(tmp_path))
    assert code == 0, capsys.readouterr()
    seen = json.loads((tmp_path / "seen.json").read_text())
    expected = {var: str(root / sub) for var, sub in runner.NODE_CACHES.items()}
    assert seen == {**expected, "PYTHONPYCACHEPREFIX": None}   # byte code only when asked for
    assert all(Path(p).is_dir() for p in expected.values())
    out = capsys.readouterr().out
    assert f"[rayjobs] node cache {root}: VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR" in out
    assert "[rayjobs] trainer started (pid " in out


def test_verl_actors_get_them_through_the_runtime_env(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], {"kind": "verl"},
                                  _clean_env(RAYJOBS_NODE_CACHE=str(root)), None, 0, 0)
    for var, sub in runner.NODE_CACHES.items():
        assert env[var] == str(root / sub)
        assert cmd.count(f"{RENV}.{var}='{root / sub}'") == 1
    # a job that is not verl's gets them in its environment only
    env2, cmd2 = runner.attempt_env(["python3", "train.py"], {}, _clean_env(RAYJOBS_NODE_CACHE=str(root)), None, 0, 0)
    assert env2["TRITON_CACHE_DIR"] == str(root / "triton") and cmd2 == ["python3", "train.py"]


def test_a_users_own_values_are_kept(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    mine = str(tmp_path / "my-triton")
    argv = ["python3", "-m", "verl.trainer.main_ppo", f"{RENV}.VLLM_CACHE_ROOT=/scratch/vllm"]
    env, cmd = runner.attempt_env(argv, {"kind": "verl"},
                                  _clean_env(RAYJOBS_NODE_CACHE=str(root), TRITON_CACHE_DIR=mine), None, 0, 0)
    assert env["TRITON_CACHE_DIR"] == mine
    assert not any(a.startswith(f"{RENV}.TRITON_CACHE_DIR=") for a in cmd)
    assert [a for a in cmd if ".VLLM_CACHE_ROOT=" in a] == [f"{RENV}.VLLM_CACHE_ROOT=/scratch/vllm"]
    assert "VLLM_CACHE_ROOT" not in env   # the job passes its own to the actors; the runner adds nothing
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(root / "torchinductor")
    assert not (root / "triton").exists() and not (root / "vllm").exists()


def test_off_default_and_byte_code(tmp_path: Path, monkeypatch) -> None:
    for off in ("off", "0", ""):
        env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], {"kind": "verl"},
                                      _clean_env(RAYJOBS_NODE_CACHE=off), None, 0, 0)
        assert not any(v in env for v in CACHES) and not any(".env_vars." in a for a in cmd)
    monkeypatch.setattr(runner, "NODE_CACHE_DEFAULT", str(tmp_path / "default"))
    env, _ = runner.attempt_env(["x"], {}, _clean_env(), None, 0, 0)
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "default" / "vllm")
    assert runner.NODE_CACHE_ENV not in env   # the default is not written back into the job's env
    env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], {"kind": "verl"},
                                  _clean_env(RAYJOBS_NODE_CACHE_PYC="1"), None, 0, 0)
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "default" / "pyc")
    assert f"{RENV}.PYTHONPYCACHEPREFIX='{tmp_path / 'default' / 'pyc'}'" in cmd


def test_an_unwritable_node_cache_leaves_the_defaults(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], {"kind": "verl"},
                                  _clean_env(RAYJOBS_NODE_CACHE=str(blocker / "cache")), None, 0, 0)
    assert not any(v in env for v in CACHES) and not any(".env_vars." in a for a in cmd)


def _node_script():
    spec = importlib.util.spec_from_file_location("ray_node_for_test", REPO / "bootstrap" / "ray_node.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_node_script_creates_the_cache_dir(tmp_path: Path, monkeypatch) -> None:
    node = _node_script()
    assert runner.NODE_CACHE_DEFAULT == f"/tmp/rayjobs-cache-{os.getuid()}"   # the node script's default too (below)
    root = tmp_path / "node" / "cache"
    monkeypatch.setenv("RAYJOBS_NODE_CACHE", str(root))
    node.node_cache()
    assert root.is_dir() and os.environ["RAYJOBS_NODE_CACHE"] == str(root)
    monkeypatch.setenv("RAYJOBS_NODE_CACHE", "off")
    node.node_cache()
    assert os.environ["RAYJOBS_NODE_CACHE"] == "off"
    monkeypatch.delenv("RAYJOBS_NODE_CACHE")
    monkeypatch.setattr(node.os, "getuid", lambda: 4242)
    made = Path("/tmp/rayjobs-cache-4242")
    existed = made.exists()
    try:
        node.node_cache()
        assert made.is_dir() and os.environ["RAYJOBS_NODE_CACHE"] == str(made)
    finally:
        if not existed:
            made.rmdir()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

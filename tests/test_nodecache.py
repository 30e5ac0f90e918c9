"""Node-local caches across jobs (issue 33), without Ray or a GPU.

The runner points vLLM's, torch inductor's, Triton's, the CUDA driver's and torch's extension
caches at subdirs of ``$RAYJOBS_NODE_CACHE`` in the trainer's environment and, for a verl job, in
the runtime_env verl gives its actors (which do not inherit the driver's environment). A value
the job already has (from the node's environment or passed to verl's actors on the command line)
is kept. Python's byte code goes there too when the job's environment forbids writing it
(``PYTHONDONTWRITEBYTECODE``). The node script creates the directory and hands its path to the
Ray processes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from rayjobs.contract.meta import JobMeta
from rayjobs.oncluster import nodecache, runner

REPO = Path(__file__).resolve().parents[1]
RENV = "++ray_kwargs.ray_init.runtime_env.env_vars"
CACHES = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "TORCH_EXTENSIONS_DIR")
PYC, NO_PYC = "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE"
VERL = ["python3", "-m", "verl.trainer.main_ppo"]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in CACHES + (PYC, NO_PYC, nodecache.NODE_CACHE_ENV, "RAYJOBS_NODE_CACHE_PYC")}
    env.update(extra)
    return env


def test_the_trainer_gets_every_cache_under_the_node_cache(tmp_path: Path, monkeypatch, capsys) -> None:
    """What the trainer process itself sees (run_attempts, as in tests/test_runner.py), and the dirs exist."""
    root = tmp_path / "cache"
    monkeypatch.chdir(tmp_path)
    probe = ("import json, os; json.dump({k: os.environ.get(k) for k in %r}, open('seen.json', 'w'))"
             % ((CACHES + ("PYTHONPYCACHEPREFIX",)),))
    code = runner.run_attempts([sys.executable, "-c", probe], JobMeta(kind="command"), _clean_env(RAYJOBS_NODE_CACHE=str(root)),
                               str(tmp_path))
    assert code == 0, capsys.readouterr()
    seen = json.loads((tmp_path / "seen.json").read_text())
    expected = {var: str(root / sub) for var, sub in nodecache.NODE_CACHES.items()}
    assert seen == {**expected, "PYTHONPYCACHEPREFIX": None}   # byte code may be written: left where it is
    assert all(Path(p).is_dir() for p in expected.values())
    out = capsys.readouterr().out
    assert f"[rayjobs] node cache {root}: VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR" in out
    assert "[rayjobs] trainer started (pid " in out


def test_verl_actors_get_them_through_the_runtime_env(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], JobMeta(kind="verl"),
                                  _clean_env(RAYJOBS_NODE_CACHE=str(root)), None, 0, 0)
    for var, sub in nodecache.NODE_CACHES.items():
        assert env[var] == str(root / sub)
        assert cmd.count(f"{RENV}.{var}='{root / sub}'") == 1
    # a job that is not verl's gets them in its environment only
    env2, cmd2 = runner.attempt_env(["python3", "train.py"], JobMeta(kind="command"), _clean_env(RAYJOBS_NODE_CACHE=str(root)), None, 0, 0)
    assert env2["TRITON_CACHE_DIR"] == str(root / "triton") and cmd2 == ["python3", "train.py"]


def test_a_users_own_values_are_kept(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    mine = str(tmp_path / "my-triton")
    argv = ["python3", "-m", "verl.trainer.main_ppo", f"{RENV}.VLLM_CACHE_ROOT=/scratch/vllm"]
    env, cmd = runner.attempt_env(argv, JobMeta(kind="verl"),
                                  _clean_env(RAYJOBS_NODE_CACHE=str(root), TRITON_CACHE_DIR=mine), None, 0, 0)
    assert env["TRITON_CACHE_DIR"] == mine
    assert not any(a.startswith(f"{RENV}.TRITON_CACHE_DIR=") for a in cmd)
    assert [a for a in cmd if ".VLLM_CACHE_ROOT=" in a] == [f"{RENV}.VLLM_CACHE_ROOT=/scratch/vllm"]
    assert "VLLM_CACHE_ROOT" not in env   # the job passes its own to the actors; the runner adds nothing
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(root / "torchinductor")
    assert not (root / "triton").exists() and not (root / "vllm").exists()


def test_off_default_and_byte_code(tmp_path: Path, monkeypatch) -> None:
    for off in ("off", "0", ""):
        env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], JobMeta(kind="verl"),
                                      _clean_env(RAYJOBS_NODE_CACHE=off), None, 0, 0)
        assert not any(v in env for v in CACHES) and not any(".env_vars." in a for a in cmd)
    monkeypatch.setattr(nodecache, "NODE_CACHE_DEFAULT", str(tmp_path / "default"))
    env, _ = runner.attempt_env(["x"], JobMeta(kind="command"), _clean_env(), None, 0, 0)
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "default" / "vllm")
    assert nodecache.NODE_CACHE_ENV not in env   # the default is not written back into the job's env
    env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], JobMeta(kind="verl"),
                                  _clean_env(RAYJOBS_NODE_CACHE_PYC="1"), None, 0, 0)
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "default" / "pyc")
    assert f"{RENV}.PYTHONPYCACHEPREFIX='{tmp_path / 'default' / 'pyc'}'" in cmd


@pytest.mark.parametrize("base, argv_extra, want_env, want_cmd", [
    # the job may not write byte code: it goes into the node cache, and writing it is allowed
    ({NO_PYC: "1"}, [], {PYC: "<root>/pyc", NO_PYC: ""}, {PYC: "'<root>/pyc'", NO_PYC: "''"}),
    ({NO_PYC: "x", "RAYJOBS_NODE_CACHE_PYC": "1"}, [], {PYC: "<root>/pyc", NO_PYC: ""},
     {PYC: "'<root>/pyc'", NO_PYC: "''"}),
    ({}, [], {PYC: None, NO_PYC: None}, {}),                                  # it may: nothing
    ({NO_PYC: ""}, [], {PYC: None, NO_PYC: ""}, {}),                          # empty is unset (Python's rule)
    ({"RAYJOBS_NODE_CACHE_PYC": "1"}, [], {PYC: "<root>/pyc", NO_PYC: None}, {PYC: "'<root>/pyc'"}),  # forced
    ({NO_PYC: "1", "RAYJOBS_NODE_CACHE_PYC": "0"}, [], {PYC: None, NO_PYC: "1"}, {}),   # turned off
    ({NO_PYC: "1", PYC: "/mine"}, [], {PYC: "/mine", NO_PYC: "1"}, {}),        # the job's own prefix
    ({NO_PYC: "1"}, [f"{RENV}.{PYC}=/scratch/pyc"], {PYC: None, NO_PYC: "1"}, {PYC: "/scratch/pyc"}),
    ({NO_PYC: "1"}, [f"{RENV}.{NO_PYC}=1"], {PYC: None, NO_PYC: "1"}, {NO_PYC: "1"}),
    ({NO_PYC: "1", "RAYJOBS_NODE_CACHE": "off"}, [], {PYC: None, NO_PYC: "1"}, {}),
])
def test_byte_code_goes_into_the_node_cache_where_the_job_may_not_write_it(
        tmp_path: Path, base: dict, argv_extra: list, want_env: dict, want_cmd: dict) -> None:
    root = tmp_path / "cache"
    base = {"RAYJOBS_NODE_CACHE": str(root), **base}
    env, cmd = runner.attempt_env(VERL + argv_extra, JobMeta(kind="verl"), _clean_env(**base), None, 0, 0)
    for var, value in want_env.items():
        assert env.get(var) == (value.replace("<root>", str(root)) if value is not None else None), var
    passed = {a.partition("=")[0].rpartition(".")[2]: a.partition("=")[2] for a in cmd if ".env_vars." in a}
    assert {v: passed.get(v) for v in (PYC, NO_PYC)} == \
        {v: want_cmd[v].replace("<root>", str(root)) if v in want_cmd else None for v in (PYC, NO_PYC)}
    assert (root / "pyc").is_dir() == (env.get(PYC) == str(root / "pyc"))
    if base.get("RAYJOBS_NODE_CACHE") != "off":
        assert env["TRITON_CACHE_DIR"] == str(root / "triton")   # the other caches whatever byte code does


def test_verls_hydra_reads_the_overrides_as_the_runner_means_them(tmp_path: Path) -> None:
    """The empty value must reach verl's ``ray.init`` as ``""`` (unset for Python), not as null or ``"''"``."""
    parser = pytest.importorskip("hydra.core.override_parser.overrides_parser").OverridesParser.create()
    root = tmp_path / "cache"
    _, cmd = runner.attempt_env(VERL, JobMeta(kind="verl"), _clean_env(RAYJOBS_NODE_CACHE=str(root), **{NO_PYC: "1"}),
                                None, 0, 0)
    got = {o.key_or_group: o.value() for o in parser.parse_overrides([a for a in cmd if ".env_vars." in a])}
    key = RENV.lstrip("+") + "."
    assert got[key + NO_PYC] == "" and got[key + PYC] == str(root / "pyc")
    assert got[key + "TRITON_CACHE_DIR"] == str(root / "triton")


def _import_in_a_child(tmp_path: Path, base: dict[str, str]) -> dict:
    """A real trainer process (run_attempts) that imports a module made for it; what it saw."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "fresh_mod.py").write_text("VALUE = 42\n")
    probe = ("import json, sys; sys.path.insert(0, %r); import fresh_mod; "
             "json.dump({'prefix': sys.pycache_prefix, 'dont_write': sys.flags.dont_write_bytecode, "
             "'value': fresh_mod.VALUE}, open('seen.json', 'w'))" % str(src))
    code = runner.run_attempts([sys.executable, "-c", probe], JobMeta(kind="command"), _clean_env(**base), str(tmp_path))
    assert code == 0
    return json.loads((tmp_path / "seen.json").read_text())


def test_a_real_child_writes_byte_code_under_the_prefix(tmp_path: Path, monkeypatch) -> None:
    """``PYTHONDONTWRITEBYTECODE=1`` in the node's environment (as on the lent GPU machine): the
    trainer writes its byte code into the node cache, nowhere beside the source; turned off, none."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "cache"
    seen = _import_in_a_child(tmp_path, {"RAYJOBS_NODE_CACHE": str(root), NO_PYC: "1"})
    assert seen == {"prefix": str(root / "pyc"), "dont_write": 0, "value": 42}
    written = sorted((root / "pyc").rglob("fresh_mod.*.pyc"))
    assert [p.parent for p in written] == [root / "pyc" / str(tmp_path / "src").lstrip("/")]
    assert not (tmp_path / "src" / "__pycache__").exists()
    # the control: the same child with byte code in the node cache turned off writes none anywhere
    off = tmp_path / "off"
    off.mkdir()
    monkeypatch.chdir(off)
    seen = _import_in_a_child(off, {"RAYJOBS_NODE_CACHE": str(off / "cache"), NO_PYC: "1",
                                    "RAYJOBS_NODE_CACHE_PYC": "0"})
    assert seen == {"prefix": None, "dont_write": 1, "value": 42}
    assert not list(off.rglob("*.pyc"))


def test_an_unwritable_node_cache_leaves_the_defaults(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env, cmd = runner.attempt_env(["python3", "-m", "verl.trainer.main_ppo"], JobMeta(kind="verl"),
                                  _clean_env(RAYJOBS_NODE_CACHE=str(blocker / "cache")), None, 0, 0)
    assert not any(v in env for v in CACHES) and not any(".env_vars." in a for a in cmd)


def _node_script():
    spec = importlib.util.spec_from_file_location("ray_node_for_test", REPO / "bootstrap" / "ray_node.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_node_script_creates_the_cache_dir(tmp_path: Path, monkeypatch) -> None:
    node = _node_script()
    assert nodecache.NODE_CACHE_DEFAULT == f"/tmp/rayjobs-cache-{os.getuid()}"   # the node script's default too (below)
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

"""Composition and JobSpecs of the presets, against the real verl 0.9.1 config tree (no cluster)."""

from __future__ import annotations

import json
import os
import re
import shlex
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rayjobs.config import compose
from rayjobs.errors import ConfigError
from rayjobs.submit.spec import wandb_run, Context, build_spec, format_value

GOLDEN = Path(__file__).parent / "golden"

# The seeds' own overrides (verl examples/skypilot/verl-ppo.yaml and verl-grpo.yaml), verbatim
# where the key is kept; $HOME data paths and SkyPilot's topology variables are mapped (see the
# comments in conf/exp/*.yaml) and checked separately below.
SEED_PPO = """
data.train_batch_size=256 data.max_prompt_length=512 data.max_response_length=256
actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct actor_rollout_ref.actor.optim.lr=1e-06
actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 actor_rollout_ref.rollout.tensor_model_parallel_size=1
actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_memory_utilization=0.4
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 critic.optim.lr=1e-05
critic.model.path=Qwen/Qwen2.5-0.5B-Instruct critic.ppo_micro_batch_size_per_gpu=4
algorithm.kl_ctrl.kl_coef=0.001 trainer.val_before_train=false trainer.default_hdfs_dir=null
trainer.n_gpus_per_node=1 trainer.nnodes=2 trainer.save_freq=20 trainer.test_freq=20 trainer.total_epochs=2
trainer.project_name=verl_examples
""".split()
SEED_GRPO = """
algorithm.adv_estimator=grpo data.train_batch_size=32 data.max_prompt_length=256 data.max_response_length=256
data.filter_overlong_prompts=true data.truncation=error actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct
actor_rollout_ref.actor.optim.lr=1e-06 actor_rollout_ref.model.use_remove_padding=true
actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
actor_rollout_ref.actor.ppo_epochs=1 actor_rollout_ref.actor.use_kl_loss=false actor_rollout_ref.actor.entropy_coeff=0
actor_rollout_ref.model.enable_gradient_checkpointing=true actor_rollout_ref.actor.fsdp_config.param_offload=true
actor_rollout_ref.actor.fsdp_config.optimizer_offload=true actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16
actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.gpu_memory_utilization=0.4 actor_rollout_ref.rollout.n=1
actor_rollout_ref.rollout.enable_chunked_prefill=true actor_rollout_ref.rollout.max_num_batched_tokens=2048
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 actor_rollout_ref.ref.fsdp_config.param_offload=true
algorithm.use_kl_in_reward=false trainer.critic_warmup=0 trainer.project_name=verl_math_grpo_demo
trainer.save_freq=-1 trainer.test_freq=-1 trainer.total_epochs=1
""".split()

# verl's multi-turn GRPO example (examples/sglang_multiturn/config/gsm8k_multiturn_grpo.yaml plus the
# overrides of run_qwen2.5-3b_gsm8k_multiturn.sh, last at verl 3467d90ae^): every key the preset keeps,
# verbatim. Mapped or dropped (see conf/exp/gsm8k_multiturn_tools.yaml): rollout.name=sglang -> vllm,
# multi_stage_wake_up, over_sample_rate, global_profiler.*, the data paths, the tool config path,
# project_name; added: rollout.agent.default_agent_loop=tool_agent.
MULTITURN_EXAMPLE = """
data.max_prompt_length=1024 data.max_response_length=1024 data.train_batch_size=256 data.return_raw_chat=true
actor_rollout_ref.hybrid_engine=true actor_rollout_ref.rollout.multi_turn.enable=true
actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5 algorithm.adv_estimator=grpo
data.filter_overlong_prompts=true data.truncation=error actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct
actor_rollout_ref.actor.optim.lr=1e-06 actor_rollout_ref.model.use_remove_padding=true
actor_rollout_ref.actor.ppo_mini_batch_size=256 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32
actor_rollout_ref.model.enable_gradient_checkpointing=true actor_rollout_ref.actor.use_kl_loss=true
actor_rollout_ref.actor.kl_loss_coef=0.001 actor_rollout_ref.actor.kl_loss_type=low_var_kl
actor_rollout_ref.actor.entropy_coeff=0 actor_rollout_ref.actor.fsdp_config.param_offload=false
actor_rollout_ref.actor.fsdp_config.optimizer_offload=false actor_rollout_ref.rollout.tensor_model_parallel_size=1
actor_rollout_ref.rollout.gpu_memory_utilization=0.85 actor_rollout_ref.rollout.n=16
actor_rollout_ref.rollout.mode=async actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32 actor_rollout_ref.ref.fsdp_config.param_offload=true
algorithm.use_kl_in_reward=false trainer.critic_warmup=0 trainer.n_gpus_per_node=8 trainer.nnodes=1
trainer.save_freq=-1 trainer.test_freq=20 trainer.val_before_train=true trainer.total_epochs=15
""".split()

CTX = Context(now=datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc), suffix="beef",
              working_dir="/work/project", git_sha="0" * 40, git_dirty=False)


@pytest.fixture
def fixed_env(monkeypatch, tmp_path):
    monkeypatch.setenv("RAYJOBS_STORAGE", "/shared/rayjobs")
    monkeypatch.setenv("RAYJOBS_CLUSTER_NNODES", "2")
    monkeypatch.setenv("RAYJOBS_CLUSTER_GPUS_PER_NODE", "8")
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # the submitter recorded in the metadata
        monkeypatch.setenv(var, "alice")
    monkeypatch.chdir(tmp_path)  # no user presets


def args_of(spec) -> list[str]:
    words = shlex.split(spec.entrypoint)
    return words[words.index("verl.trainer.main_ppo") + 1:]


def test_presets_carry_the_seeds_parameters(fixed_env):
    for exp, seed in (("ppo_gsm8k_qwen05b", SEED_PPO), ("grpo_7b", SEED_GRPO)):
        args = args_of(build_spec(compose.compose([f"+exp={exp}"]), CTX))
        missing = [s for s in seed if s not in args]
        assert not missing, f"{exp} lacks the seed's {missing}"
    ppo = args_of(build_spec(compose.compose(["+exp=ppo_gsm8k_qwen05b"]), CTX))
    assert "data.train_files=/shared/rayjobs/data/gsm8k/train.parquet" in ppo
    assert "trainer.logger=[console,wandb,file]" in ppo  # the seed's loggers + rayjobs' file logger
    grpo = args_of(build_spec(compose.compose(["+exp=grpo_7b"]), CTX))
    assert "trainer.nnodes=2" in grpo and "trainer.n_gpus_per_node=8" in grpo  # from the cluster
    assert "data.val_files=/shared/rayjobs/data/math/test.parquet" in grpo


def test_multiturn_preset_carries_verls_example_and_ships_its_tool(fixed_env, tmp_path):
    """gsm8k_multiturn_tools: the example's keys, vllm, the tool agent, and a tool config that the job's
    working_dir (rayjobs' scripts/, from any current directory) carries, as verl resolves it there."""
    c = compose.compose(["+exp=gsm8k_multiturn_tools"])
    args = args_of(build_spec(c, CTX))
    missing = [s for s in MULTITURN_EXAMPLE if s not in args]
    assert not missing, f"gsm8k_multiturn_tools lacks the example's {missing}"
    for want in ("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
                 "actor_rollout_ref.rollout.multi_turn.format=hermes",
                 "actor_rollout_ref.rollout.multi_turn.tool_config_path=multiturn/gsm8k_tool_config.yaml",
                 "data.train_files=/shared/rayjobs/data/gsm8k_tool/train.parquet",
                 "data.val_files=/shared/rayjobs/data/gsm8k_tool/test.parquet"):
        assert want in args, want
    wd = Path(str(c.cfg.rayjobs.working_dir))
    assert wd == Path(compose.__file__).resolve().parents[2] / "scripts" and Path.cwd() == tmp_path
    assert (wd / "multiturn" / "gsm8k_tool_config.yaml").is_file() and (wd / "multiturn" / "gsm8k_tool.py").is_file()
    assert (wd / "prepare_data.py").is_file()  # the same folder +exp=prepare_data ships


@pytest.mark.parametrize("exp", ["ppo_gsm8k_qwen05b", "grpo_7b", "gsm8k_multiturn_tools"])
def test_golden_jobspec(fixed_env, exp):
    spec = build_spec(compose.compose([f"+exp={exp}", "trainer.total_epochs=3"]), CTX)
    got = spec.to_json()
    path = GOLDEN / f"{exp}.json"
    if os.environ.get("RAYJOBS_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert got == json.loads(path.read_text())


def test_preset_keys_exist_in_pinned_verl(fixed_env):
    schema = compose.verl_schema()
    for exp in ("ppo_gsm8k_qwen05b", "grpo_7b", "gsm8k_multiturn_tools"):
        unknown = [k for k in compose.preset_keys(exp) if k not in schema]
        assert not unknown, f"{exp}: keys not in verl {compose.verl_version()}: {unknown}"


def test_user_overrides_win_and_each_key_once(fixed_env):
    spec = build_spec(compose.compose(["+exp=grpo_7b", "data.train_batch_size=64", "trainer.nnodes=1"]), CTX)
    args = args_of(spec)
    keys = [a.split("=", 1)[0] for a in args]
    assert len(keys) == len(set(keys))
    assert "data.train_batch_size=64" in args and "trainer.nnodes=1" in args
    assert json.loads(spec.metadata["gpu_groups"]) == [8]


def test_forced_keys_absolute_and_unique(fixed_env):
    a = build_spec(compose.compose(["+exp=ppo_gsm8k_qwen05b"]), CTX)
    b = build_spec(compose.compose(["+exp=ppo_gsm8k_qwen05b"]), Context(**{**CTX.__dict__, "suffix": "cafe"}))
    assert a.submission_id == "ppo_gsm8k_qwen05b-20261130-120000-beef"
    ea = dict(x.split("=", 1) for x in args_of(a))
    eb = dict(x.split("=", 1) for x in args_of(b))
    assert ea["trainer.experiment_name"] != eb["trainer.experiment_name"]
    assert ea["trainer.default_local_dir"] == "/shared/rayjobs/checkpoints/verl_examples/" + a.submission_id
    assert a.metadata["checkpoint_dir"] == ea["trainer.default_local_dir"]


def test_user_experiment_name_is_kept_for_resume(fixed_env):
    spec = build_spec(compose.compose(["+exp=ppo_gsm8k_qwen05b", "trainer.experiment_name=my_run"]), CTX)
    ea = dict(x.split("=", 1) for x in args_of(spec))
    assert ea["trainer.experiment_name"] == "my_run"
    assert ea["trainer.default_local_dir"] == "/shared/rayjobs/checkpoints/verl_examples/my_run"


def test_metadata(fixed_env):
    spec = build_spec(compose.compose(["+exp=ppo_gsm8k_qwen05b", "algorithm.kl_ctrl.kl_coef=0.01"]), CTX)
    m = spec.metadata
    assert m["experiment"] == "ppo_gsm8k_qwen05b"
    assert json.loads(m["overrides"]) == ["+exp=ppo_gsm8k_qwen05b", "algorithm.kl_ctrl.kl_coef=0.01"]
    assert m["git_sha"] == "0" * 40 and m["git_dirty"] == "0"
    assert re.fullmatch(r"[0-9a-f]{12}", m["config_hash"]) and m["rayjobs"]
    assert all(isinstance(v, str) for v in m.values())  # Ray requires str -> str
    assert "algorithm.kl_ctrl.kl_coef=0.01" in args_of(spec)


@pytest.mark.parametrize("value", ["a b", "it's", "true", "1e-5", "x=y", "[1,2]", "", "${x}", "null"])
def test_format_value_round_trips_through_hydra(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"k={format_value(value)}").value()
    assert parsed == value


@pytest.mark.parametrize("overrides, message", [
    (["+exp=grpo_7bb"], r"unknown experiment 'grpo_7bb' \(did you mean: grpo_7b"),
    (["+exp=ppo_gsm8k_qwen05b", "algorithm.kl_ctrl.kl_coeff=0.1"], r"unknown config key 'algorithm.kl_ctrl.kl_coeff' \(did you mean: algorithm.kl_ctrl.kl_coef"),
    (["+exp=ppo_gsm8k_qwen05b", "trainer.nnodes=two"], r"trainer.nnodes='two' has the wrong type: verl expects an integer"),
    (["+exp=ppo_gsm8k_qwen05b", "trainer.default_local_dir=ckpt/x"], r"trainer.default_local_dir='ckpt/x' is a relative path"),
    (["+exp=ppo_gsm8k_qwen05b", "rayjobs.storage=rel/dir"], r"rayjobs.storage='rel/dir' is a relative path"),
    (["data.train_batch_size=8"], r"no experiment selected: add \+exp=NAME"),
])
def test_bad_input_is_one_clear_line(fixed_env, overrides, message):
    with pytest.raises(ConfigError) as e:
        build_spec(compose.compose(overrides), CTX)
    assert re.search(message, str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def test_secrets_never_in_the_job(fixed_env):
    with pytest.raises(ConfigError, match="looks like a secret"):
        build_spec(compose.compose(["+exp=ppo_gsm8k_qwen05b", "+rayjobs.env.WANDB_API_KEY=abc"]), CTX)
    ok = build_spec(compose.compose(["+exp=ppo_gsm8k_qwen05b", "+rayjobs.env.WANDB_MODE=offline"]), CTX)
    assert ok.runtime_env["env_vars"] == {"WANDB_MODE": "offline", **wandb_run(ok.metadata["run"])}  # no secret


def test_user_presets_win(fixed_env, tmp_path):
    (tmp_path / "conf" / "exp").mkdir(parents=True)
    (tmp_path / "conf" / "exp" / "grpo_7b.yaml").write_text("# @package _global_\ntrainer:\n  total_epochs: 7\n")
    c = compose.compose(["+exp=grpo_7b"])
    assert c.cfg.trainer.total_epochs == 7 and c.preset == {"trainer.total_epochs": 7}


def test_preset_keys_verl_lacks_are_added_with_plus_plus(fixed_env, tmp_path):
    (tmp_path / "conf" / "exp").mkdir(parents=True)
    (tmp_path / "conf" / "exp" / "sdpa.yaml").write_text(
        "# @package _global_\ndefaults:\n  - grpo_7b\nactor_rollout_ref:\n  model:\n    override_config:\n"
        "      attn_implementation: sdpa\n")
    args = args_of(build_spec(compose.compose(["+exp=sdpa"]), CTX))
    assert "++actor_rollout_ref.model.override_config.attn_implementation=sdpa" in args
    assert "actor_rollout_ref.rollout.name=vllm" in args  # keys verl has stay plain
    # and verl's own Hydra accepts the line (its struct mode would refuse a bare new key)
    from hydra import compose as hcompose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(compose.verl_config_dir()), version_base=None):
        cfg = hcompose(config_name="ppo_trainer", overrides=[a for a in args if a.startswith(("++", "actor_rollout_ref.rollout"))])
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"


def test_c_yaml_loader_composes_exactly_like_omegaconfs_own(fixed_env, tmp_path):
    from omegaconf import OmegaConf
    from omegaconf import _utils

    presets = ["ppo_gsm8k_qwen05b", "grpo_7b", "gpu_tiny_grpo", "prepare_data", "gsm8k_multiturn_tools"]
    compose.make_hydra()  # installs the C loader
    assert getattr(_utils.get_yaml_loader, "_rayjobs", False)
    fast = {e: OmegaConf.to_container(compose.compose([f"+exp={e}"]).cfg, resolve=False) for e in presets}
    c_loader, _utils.get_yaml_loader = _utils.get_yaml_loader, _utils.get_yaml_loader.python_loader
    compose.C_YAML = False
    try:
        slow = {e: OmegaConf.to_container(compose.compose([f"+exp={e}"]).cfg, resolve=False) for e in presets}
        assert not getattr(_utils.get_yaml_loader, "_rayjobs", False)  # really the pure-Python one
    finally:
        compose.C_YAML = True
        _utils.get_yaml_loader = c_loader
    assert json.dumps(fast, sort_keys=True, default=repr) == json.dumps(slow, sort_keys=True, default=repr)
    # OmegaConf's rules kept: floats like 1e-3, no timestamps, duplicate keys refused
    p = tmp_path / "x.yaml"
    p.write_text("a: 1e-3\nb: 2001-12-14\nc: .5\n")
    assert OmegaConf.to_container(OmegaConf.load(p)) == {"a": 0.001, "b": "2001-12-14", "c": 0.5}
    p.write_text("a: 1\na: 2\n")
    with pytest.raises(Exception, match="duplicate key a"):
        OmegaConf.load(p)


@pytest.mark.parametrize("updates", [
    {"trainer.total_epochs": 7},                                              # a plain leaf
    {"actor_rollout_ref.actor.optim.lr": 3e-6, "data.train_batch_size": 64},  # two leaves
    {"trainer.logger": ["console", "file"]},                                  # a list
    {"trainer.project_name": "${trainer.experiment_name}"},                   # an interpolation string
    {"trainer.n_gpus_per_node": 4},                                           # a leaf interpolations read
])
def test_sweep_points_derived_from_the_base_equal_full_work(fixed_env, updates):
    import pickle

    from omegaconf import OmegaConf

    from rayjobs.config import configcache

    base = compose.compose(["+exp=ppo_gsm8k_qwen05b"])
    cfg = pickle.loads(pickle.dumps(base.cfg))
    OmegaConf.set_readonly(cfg, False)
    for k, v in updates.items():
        OmegaConf.update(cfg, k, v, merge=False)
    OmegaConf.set_readonly(cfg, True)
    base_raw = configcache.raw(base.cfg)
    derived = configcache.derive_raw(base_raw, cfg, list(updates))
    assert derived == OmegaConf.to_container(cfg, resolve=False)
    assert base_raw == OmegaConf.to_container(base.cfg, resolve=False)  # the shared base is untouched
    configcache.remember_raw(cfg, derived)
    fast = configcache.resolve_points([base.cfg, cfg])
    assert fast[1] == OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    assert fast[0] == OmegaConf.to_container(base.cfg, resolve=True, throw_on_missing=False)


def test_c_yaml_is_skipped_where_omegaconf_has_no_loader_hook(monkeypatch) -> None:
    """OmegaConf 2.4 (the GPU machine's bundle) has no ``_utils.get_yaml_loader``: no crash, no patch."""
    from omegaconf import _utils

    monkeypatch.delattr(_utils, "get_yaml_loader")
    assert compose.use_c_yaml() is False
    assert not hasattr(_utils, "get_yaml_loader")

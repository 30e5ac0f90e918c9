"""Preflight: a catalogue of bad configs, each refused in one line with exit 2 and nothing submitted.

Every case runs ``python -m rayjobs.submit`` as a user would, against the session's real embedded
head, with real verl 0.9.1 validation (its warm helper process) where verl is installed. The data
lives in a private storage root (``rayjobs.storage=...``) made here: tiny parquet files with the
columns verl reads, and a tiny local HF model (config.json + tokenizer, no weights).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import job_ids, job_list, rayjobs_submit

from rayjobs.config import compose
from rayjobs.preflight import clusterfiles, secretnames
from rayjobs.preflight import checks
from rayjobs.preflight import verlcheck
from rayjobs.preflight import rules

HAVE_VERL = not verlcheck.missing_modules()
LINE = re.compile(r"^error: \S+.*: .+; fix: .+$")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A storage root with GSM8K/MATH-shaped parquet files, odd data files and local model dirs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("pfstore")
    for name, source in (("gsm8k", "openai/gsm8k"), ("math", "DigitalLearningGmbH/MATH-lighteval"), ("odd", "my_private_set")):
        d = root / "data" / name
        d.mkdir(parents=True)
        for split in ("train", "test"):
            pq.write_table(pa.table({"data_source": [source] * 4, "prompt": [[{"role": "user", "content": "1+1?"}]] * 4,
                                     "reward_model": [{"style": "rule", "ground_truth": "2"}] * 4}), d / f"{split}.parquet")
    pq.write_table(pa.table({"prompt": ["x"]}), root / "data" / "no_source.parquet")
    (root / "data" / "gsm8k_tool").mkdir()  # as prepare_data's gsm8k_tool writes it (+exp=gsm8k_multiturn_tools)
    for split in ("train", "test"):
        pq.write_table(pa.Table.from_pylist(tool_rows(4)), root / "data" / "gsm8k_tool" / f"{split}.parquet")
    (root / "models" / "empty").mkdir(parents=True)
    if HAVE_VERL:
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from rayjobs.preflight.verlcheck import stub_model;"
                        "print(stub_model(Path(sys.argv[1])))", str(root / "models")], check=True, capture_output=True, timeout=120)
        two = root / "models" / "two-arch"
        two.mkdir()
        cfg = json.loads((root / "models" / "stub-model" / "config.json").read_text())
        cfg["architectures"] = ["Qwen2ForCausalLM", "Qwen2ForTokenClassification"]
        (two / "config.json").write_text(json.dumps(cfg))
        for f in (root / "models" / "stub-model").iterdir():
            if f.name != "config.json":
                (two / f.name).write_bytes(f.read_bytes())
    return root


def tool_rows(n: int, tool: str = "calc_gsm8k_reward", **extra) -> list[dict]:
    """Rows in prepare_data's gsm8k_tool format (the fields the checks read)."""
    return [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
             "reward_model": {"style": "rule", "ground_truth": "2"}, **extra,
             "extra_info": {"index": i, "need_tools_kwargs": True,
                            "tools_kwargs": {tool: {"create_kwargs": {"ground_truth": "2"}}}}} for i in range(n)]


def base(store: Path, exp: str = "ppo_gsm8k_qwen05b") -> list[str]:
    return [f"+exp={exp}", f"rayjobs.storage={store}", "trainer.logger=[console]"]


def refused(client, workdir, *args: str, env: dict | None = None) -> list[str]:
    """Submit for real; assert exit 2, one-line errors, nothing submitted. Returns the error lines."""
    before = job_ids()
    r = rayjobs_submit(*args, cwd=workdir, env=env)
    assert r.returncode == 2, f"rc={r.returncode}\n{r.stderr}\n{r.stdout}"
    assert r.stdout.strip() == "", r.stdout
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert errors and all(LINE.match(ln) for ln in errors), r.stderr
    assert job_ids() == before, "something was submitted"
    return errors


# (id, overrides on top of base(), a regex one error line must match)
CATALOGUE = [
    ("rollout_hf", ["actor_rollout_ref.rollout.name=hf"],
     r"actor_rollout_ref\.rollout\.name='hf': is not a rollout backend of verl 0\.9\.1 \(the hf rollout was removed in verl 0\.6\).*fix: use one of sglang, trtllm, vllm"),
    ("rollout_typo", ["actor_rollout_ref.rollout.name=vlm"], r"rollout\.name='vlm': .*did you mean vllm\?"),
    ("rollout_sync", ["actor_rollout_ref.rollout.mode=sync"], r"rollout\.mode='sync': sync rollout was removed.*mode=async"),
    ("estimator_typo", ["algorithm.adv_estimator=grp0"], r"algorithm\.adv_estimator='grp0': is not an advantage estimator .*did you mean grpo\?"),
    ("gae_without_critic", ["critic.model.path=null"], r"critic\.model\.path=None: GAE needs a critic, and the critic has no model"),
    ("gae_placeholder_critic", ["critic.model.path='~/models/deepseek-llm-7b-chat'"], r"verl's placeholder default"),
    ("batch_not_divisible", ["trainer.nnodes=1", "trainer.n_gpus_per_node=8", "data.train_batch_size=30", "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
     r"data\.train_batch_size=30: train_batch_size x rollout\.n = 30 x 1 = 30 is not divisible by the GPU count .* = 8; fix: use a multiple of 8 \(e\.g\. data\.train_batch_size=24 or 32\)"),
    ("grpo_n_makes_it_divisible_but_mini_not", ["+exp=grpo_7b", "trainer.nnodes=1", "trainer.n_gpus_per_node=8", "data.train_batch_size=64",
                                                 "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.ppo_mini_batch_size=12"],
     r"actor_rollout_ref\.actor\.ppo_mini_batch_size=12: ppo_mini_batch_size x rollout\.n = 12 x 1 = 12 is not divisible by the data-parallel size 8"),
    ("mini_larger_than_batch", ["data.train_batch_size=32"], r"actor_rollout_ref\.actor\.ppo_mini_batch_size=64: is larger than data\.train_batch_size=32"),
    ("micro_both_set", ["actor_rollout_ref.actor.ppo_micro_batch_size=8"],
     r"actor_rollout_ref\.actor\.ppo_micro_batch_size=8: is set together with ppo_micro_batch_size_per_gpu=4"),
    ("rollout_logprob_micro_unset", ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null"],
     r"actor_rollout_ref\.rollout\.log_prob_micro_batch_size_per_gpu=None: neither log_prob_micro_batch_size nor"),
    ("ref_micro_unset_with_kl_loss", ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null"],
     r"actor_rollout_ref\.ref\.log_prob_micro_batch_size_per_gpu=None: neither"),
    ("tp_does_not_tile", ["actor_rollout_ref.rollout.tensor_model_parallel_size=3"],
     r"tensor_model_parallel_size=3: rollout replicas of 3 GPUs do not tile the job's 2 GPUs"),
    ("zero_nodes", ["trainer.nnodes=0"], r"trainer\.nnodes=0: must be an integer >= 1"),
    ("ray_init_num_cpus", ["ray_kwargs.ray_init.num_cpus=8"], r"ray_kwargs\.ray_init\.num_cpus=8: a Ray job connects to the running cluster"),
    ("logger_typo", ["trainer.logger=[console,wandbb]"], r"trainer\.logger=\[\"console\", \"wandbb\"\]: 'wandbb' is not a logger backend.*did you mean wandb\?"),
    ("data_home_path", ["data.train_files='~/data/gsm8k/train.parquet'"], r"data\.train_files='~/data/gsm8k/train\.parquet': data files must be absolute"),
    ("data_missing", ["data.val_files=/nonexistent/test.parquet"], r"data\.val_files='/nonexistent/test\.parquet': no such file on the cluster's storage"),
    ("model_relative", ["actor_rollout_ref.model.path=./models/qwen"], r"actor_rollout_ref\.model\.path='\./models/qwen': a model must be a hub id"),
    ("model_dir_missing", ["actor_rollout_ref.model.path=/nonexistent/qwen"], r"model\.path='/nonexistent/qwen': no such model directory"),
    ("model_dir_not_hf", ["actor_rollout_ref.model.path=${rayjobs.storage}/models/empty"], r"the directory has no config\.json"),
    ("unknown_data_source", ["data.train_files=${rayjobs.storage}/data/odd/train.parquet"],
     r"data\.train_files='.*/odd/train\.parquet': rows have data_source='my_private_set', for which verl 0\.9\.1's default_compute_score has no reward function"),
    ("no_data_source_column", ["data.val_files=${rayjobs.storage}/data/no_source.parquet"], r"data\.reward_fn_key='data_source': .* has no 'data_source' column"),
    ("custom_reward_missing", ["reward.custom_reward_function.path=rewards/mine.py"],
     r"reward\.custom_reward_function\.path='rewards/mine\.py': no such file in the job's working_dir"),
    ("custom_reward_wrong_name", ["reward.custom_reward_function.path=workloads/fake_verl.py", "reward.custom_reward_function.name=my_score"],
     r"reward\.custom_reward_function\.name='my_score': workloads/fake_verl\.py defines no function 'my_score'"),
]
VERL_ONLY = [  # rayjobs' own rules pass these; verl 0.9.1's own validation refuses them
    ("verl_loss_agg_mode", ["actor_rollout_ref.actor.loss_agg_mode=bogus"], r"verl 0\.9\.1 validate_config rejected it: .*Invalid loss_agg_mode: bogus"),
    ("verl_greedy_val_sampling", ["actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.temperature=0"],
     r"validate_config rejected it: AssertionError: validation gen temperature should be greater than 0"),
    ("verl_rollout_ep", ["actor_rollout_ref.rollout.expert_parallel_size=2"],
     r"actor_rollout_ref\.rollout: verl 0\.9\.1 RolloutConfig .*expert_parallel_size must be equal to"),
    ("verl_critic_two_architectures", ["critic.model.path=${rayjobs.storage}/models/two-arch"], r"critic\.model: verl 0\.9\.1 validate_config rejected it: .*"),
]


@pytest.mark.parametrize("case,overrides,pattern", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_bad_config_is_refused_in_one_line(cluster, client, workdir, store, case, overrides, pattern):
    args = base(store, "grpo_7b") + overrides[1:] if overrides[0] == "+exp=grpo_7b" else base(store) + overrides
    errors = refused(client, workdir, *args)
    assert any(re.search(pattern, ln) for ln in errors), "\n".join(errors)


@pytest.mark.skipif(not HAVE_VERL, reason="verl's validation needs torch, tensordict, transformers, datasets")
@pytest.mark.parametrize("case,overrides,pattern", VERL_ONLY, ids=[c[0] for c in VERL_ONLY])
def test_verl_own_validation_refuses(cluster, client, workdir, store, case, overrides, pattern):
    errors = refused(client, workdir, *base(store), *overrides)
    assert any(re.search(pattern, ln) for ln in errors), "\n".join(errors)


def test_wandb_needs_its_key_on_the_cluster(cluster, client, workdir, store):
    # The session's head was started without WANDB_API_KEY: submitting with wandb is refused.
    errors = refused(client, workdir, "+exp=fake_ppo", f"rayjobs.storage={store}", "rayjobs.entrypoint=python3 -m verl.trainer.main_ppo",
                     "data.train_files=${rayjobs.storage}/data/gsm8k/train.parquet", "data.val_files=${rayjobs.storage}/data/gsm8k/test.parquet",
                     "trainer.logger=[console,wandb]")
    assert any("trainer.logger=[\"console\", \"wandb\"]: wandb needs WANDB_API_KEY in the cluster's environment" in ln for ln in errors), errors


def test_dry_run_checks_what_submit_checks(workdir, store, tmp_path):
    # A dry-run of a wandb config once said "checked"; the real submit was then refused.
    args = ["+exp=fake_ppo", f"rayjobs.storage={store}", "rayjobs.entrypoint=python3 -m verl.trainer.main_ppo",
            "data.train_files=${rayjobs.storage}/data/gsm8k/train.parquet",
            "data.val_files=${rayjobs.storage}/data/gsm8k/test.parquet", "trainer.logger=[console,wandb]",
            "rayjobs.dry_run=true"]
    r = rayjobs_submit(*args, cwd=workdir)
    assert r.returncode == 2 and "wandb needs WANDB_API_KEY in the cluster's environment" in r.stderr, r.stderr
    ok = rayjobs_submit(*args, "+rayjobs.env.WANDB_MODE=offline", cwd=workdir)
    assert ok.returncode == 0, ok.stderr
    assert "not checked without the cluster: its Ray/verl versions and the per-node GPU fit" in ok.stderr
    # the missing-data hint names the dataset to prepare
    empty = tmp_path / "empty-store"
    r = rayjobs_submit("+exp=grpo_7b", f"rayjobs.storage={empty}", "trainer.logger=[console]", "rayjobs.dry_run=true",
                       cwd=workdir)
    assert r.returncode == 2 and "rayjobs.prepare.dataset=math" in r.stderr, r.stderr


def test_sweep_with_one_bad_point_submits_nothing(cluster, client, workdir, store):
    errors = refused(client, workdir, "-m", *base(store), "trainer.n_gpus_per_node=4", "trainer.nnodes=1",
                     "actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.train_batch_size=64,30")
    assert any(re.search(r"^error: sweep point 1 \(data\.train_batch_size=30\): data\.train_batch_size=30: .* not divisible", ln) for ln in errors), errors


def test_both_presets_pass(workdir, store, monkeypatch):
    """The shipped presets, unchanged, pass every client-side check (their data present, W&B key on the cluster)."""
    from rayjobs.submit import pipeline

    monkeypatch.setattr(checks, "cluster_env_names", lambda embedded: {"WANDB_API_KEY"})
    for exp in ("ppo_gsm8k_qwen05b", "grpo_7b", "gsm8k_multiturn_tools"):
        prepared = pipeline.prepare([compose.compose([f"+exp={exp}", f"rayjobs.storage={store}"])])
        assert checks.last_timing["points"] == 1
        if HAVE_VERL:
            assert checks.last_timing["verl_s"] > 0  # verl's own validation ran on it
        cfg = prepared[0].composed.cfg
        assert not rules.config_problems(cfg) and not secretnames.secret_problems(cfg, {"WANDB_API_KEY"})


def test_local_critic_model_dir_passes(workdir, store):
    """PPO validation loads the critic's HF config: a tiny local model dir (no weights) is enough."""
    if not HAVE_VERL:
        pytest.skip("verl not importable here")
    r = rayjobs_submit(*base(store), "critic.model.path=${rayjobs.storage}/models/stub-model", "rayjobs.dry_run=true", cwd=workdir)
    assert r.returncode == 0, r.stderr


def test_preflight_false_skips_with_a_warning(cluster, client, workdir):
    r = rayjobs_submit("+exp=fake_ppo", "actor_rollout_ref.rollout.name=hf", "rayjobs.preflight=false", cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "warning: rayjobs.preflight=false, the config was not checked" in r.stderr
    from rayjobs.client.dashboard import Dashboard

    assert Dashboard(cluster).queue.job(r.stdout.strip()) is not None  # queued (Ray has it once admitted)


def test_without_verl_a_weaker_check_says_so_once(workdir, store):
    env = {verlcheck.MODE_ENV: "off"}
    from rayjobs import settings

    (settings.home() / "notes" / "verl-validation").unlink(missing_ok=True)  # said at most once a day
    ok = rayjobs_submit(*base(store), "actor_rollout_ref.actor.loss_agg_mode=bogus", "rayjobs.dry_run=true", cwd=workdir, env=env)
    assert ok.returncode == 0, ok.stderr  # only verl itself knows loss_agg_mode
    note = [line for line in ok.stderr.splitlines() if "verl's own validation skipped" in line]
    assert len(note) == 1 and verlcheck.INSTALL_HINT in note[0] and len(note[0]) < 200, ok.stderr
    bad = rayjobs_submit(*base(store), "data.train_batch_size=33", "rayjobs.dry_run=true", cwd=workdir, env=env)
    assert bad.returncode == 2 and "is not divisible by the GPU count" in bad.stderr  # rayjobs' own rules still apply
    assert "verl's own validation" not in bad.stderr  # once a day, not on every submit


def test_remote_cluster_record_secrets_and_paths(workdir, store, tmp_path):
    """A remote cluster: its files are not visible here (noted, not failed)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.json").write_text(json.dumps({"name": "c1", "address": "http://127.0.0.1:9", "secrets": [], "verl": "0.9.1"}))
    env = {"RAYJOBS_HOME": str(home), verlcheck.MODE_ENV: "off"}
    r = rayjobs_submit(*base(store), "data.val_files=/only/on/cluster.parquet", "rayjobs.dry_run=true", cwd=workdir, env=env)
    assert r.returncode == 0, r.stderr
    assert "remote cluster: data files and model dirs on its storage are not visible from here" in r.stderr


# --------------------------------------------------------------------------- live-cluster checks (stub dashboard)
class StubDashboard:
    """A narrow stand-in for rayjobs.client.dashboard.Dashboard: the calls livecluster makes.

    ``use``: per node (gpu used, gpu total, cpu used, cpu total), as /api/cluster_status says;
    ``alive``: per node (gpus, cpus), as the state API's node list says (default: the same nodes).
    """

    def __init__(self, ray_version: str, use: list[tuple[float, float, float, float]],
                 alive: list[tuple[float, float]] | None = None, source: str = "embedded"):
        self.ray_version, self.use = ray_version, use
        self.alive = alive if alive is not None else [(gt, ct) for _, gt, _, ct in use]
        self.address = "http://h:8265"
        self.target = SimpleNamespace(embedded=False, source=source)
        self.asked: list[str] = []

    def version(self):
        return {"ray_version": self.ray_version}

    def resource_use(self):
        self.asked.append("use")
        return {f"n{i}": {"GPU": [gu, gt], "CPU": [cu, ct]} for i, (gu, gt, cu, ct) in enumerate(self.use)}

    def nodes(self):
        self.asked.append("nodes")
        return [{"node_id": f"n{i}", "state": "ALIVE", "resources_total": {"GPU": g, "CPU": c}}
                for i, (g, c) in enumerate(self.alive)]


def _prepared(*overrides: str):
    from rayjobs.submit import pipeline

    c = compose.compose(["+exp=fake_ppo", "rayjobs.preflight=true", *overrides])
    return [pipeline.Prepared(c, pipeline.build_spec(c, pipeline.Context(now=pipeline.datetime.now().astimezone(), suffix="beef",
                                                                     working_dir=os.getcwd())))]


def test_cluster_fit_waits_are_notes_and_never_fitting_is_refused(workdir, capsys):
    two_nodes = [(0, 2, 0, 8), (2, 2, 6, 8)]  # one node busy
    refuse = "rayjobs.wait_for_capacity=false"  # the tests' preset waits (the embedded test head has no GPUs)
    d = StubDashboard("2.60.0", two_nodes)
    checks.check_cluster(d, _prepared("trainer.n_gpus_per_node=2", refuse))
    assert d.asked == ["use"]  # the cluster's state is read once per submit
    # 2 x 2 fits the cluster, but not while one node is busy: a queue wait, not an error.
    checks.check_cluster(StubDashboard("2.60.0", two_nodes), _prepared("trainer.n_gpus_per_node=2", "trainer.nnodes=2", refuse))
    assert "do not fit the free capacity now and wait in the queue" in capsys.readouterr().err
    # 4 GPUs on one node: no node has them; 3 nodes of 2: the cluster has 2. Refused in one line, nothing submitted.
    for shape in (("trainer.n_gpus_per_node=4",), ("trainer.n_gpus_per_node=2", "trainer.nnodes=3")):
        with pytest.raises(checks.ConfigError) as e:
            checks.check_cluster(StubDashboard("2.60.0", two_nodes), _prepared(*shape, refuse))
        assert "\n" not in str(e.value) and "can never run on the cluster at http://h:8265" in str(e.value)
        assert str(e.value).endswith("or set rayjobs.wait_for_capacity=true if the cluster will grow to fit it")
    # The resource view lags a node that just joined: the state API's node list has it, so no refusal.
    d = StubDashboard("2.60.0", two_nodes, alive=[(2, 8), (2, 8), (4, 16)])
    checks.check_cluster(d, _prepared("trainer.n_gpus_per_node=4", refuse))
    assert d.asked == ["use", "nodes"]
    # A cluster that will grow (rayjobs.wait_for_capacity=true): queued, with a note.
    capsys.readouterr()
    checks.check_cluster(StubDashboard("2.60.0", two_nodes), _prepared("trainer.n_gpus_per_node=4"))
    assert "1 of 1 job(s) do not fit the cluster as it is now and are queued for the capacity it will have" \
        in capsys.readouterr().err


def test_a_gpu_job_on_a_cluster_without_gpus_is_refused_unless_it_waits_for_capacity(workdir, capsys):
    no_gpus = [(0, 0, 0, 2)]
    with pytest.raises(checks.ConfigError) as e:
        checks.check_cluster(StubDashboard("2.60.0", no_gpus), _prepared("trainer.n_gpus_per_node=4",
                                                                        "rayjobs.wait_for_capacity=false"))
    assert "\n" not in str(e.value) and "it needs 1 group of 4 GPU + 12 CPU on one node, but the cluster has no GPUs; " \
        "run it on a cluster with GPUs" in str(e.value), str(e.value)
    checks.check_cluster(StubDashboard("2.60.0", no_gpus), _prepared("trainer.n_gpus_per_node=4",
                                                                    "rayjobs.wait_for_capacity=true"))
    err = capsys.readouterr().err
    assert "but the cluster has no GPUs" in err and "need GPU nodes to join" in err, err
    checks.check_cluster(StubDashboard("2.60.0", no_gpus), _prepared("trainer.n_gpus_per_node=0",
                                                                    "rayjobs.wait_for_capacity=false"))  # no GPUs asked


def test_cluster_ray_version_mismatch(workdir):
    with pytest.raises(checks.ConfigError, match=r"^ray='1\.13\.0': the cluster runs Ray 1\.13\.0, this client Ray .*; fix: pip install"):
        checks.check_cluster(StubDashboard("1.13.0", [(0, 2, 0, 8)]), _prepared())


def test_cluster_verl_version_mismatch(workdir, monkeypatch):
    from rayjobs import settings

    monkeypatch.setattr(settings, "remembered_cluster", lambda: {"verl": "0.8.0", "secrets": ["WANDB_API_KEY"]})
    with pytest.raises(checks.ConfigError, match=r"verl='0\.8\.0': the cluster runs verl 0\.8\.0 but the config was composed .* against verl 0\.9\.1"):
        checks.check_cluster(StubDashboard("2.60.0", [(0, 2, 0, 8)], source="cluster c1"), _prepared())


# --------------------------------------------------------------------------- multi-turn tools (pure: no cluster)
TOOL_YAML = """tools:
  - class_name: {cls}
    config: {{type: {ctype}}}
    tool_schema:
      type: function
      function:
        name: {name}
        description: {desc}
        parameters:
          type: object
          properties: {{answer: {{type: string, description: the answer}}}}
          required: [answer]
"""
TOOL_PY = ("from verl.tools.base_tool import BaseTool\n\n\nclass CalcTool(BaseTool):\n"
           "    async def execute(self, instance_id, parameters, **kwargs):\n        return None, 0.0, {}\n")


def tool_project(root: Path, cls: str = "mytools.calc.CalcTool", ctype: str = "native", name: str = "calc",
                 desc: str = "checks an answer", yaml_text: str | None = None, py: str = TOOL_PY,
                 files: dict[str, str] | None = None) -> Path:
    """A user's working_dir with a tool config (tools.yaml) and a tool module (mytools/calc.py, a namespace package)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    (root / "mytools").mkdir(exist_ok=True)
    (root / "mytools" / "calc.py").write_text(py)
    (root / "tools.yaml").write_text(yaml_text if yaml_text is not None else
                                     TOOL_YAML.format(cls=cls, ctype=ctype, name=name, desc=desc))
    return root


def tool_check(wd: Path, *overrides: str, files_visible: bool = True) -> list[str]:
    """tools.tool_problems on the gsm8k_multiturn_tools preset shipping ``wd`` with its tools.yaml."""
    from rayjobs.preflight import tools

    c = compose.compose(["+exp=gsm8k_multiturn_tools", f"rayjobs.working_dir={wd}",
                         "actor_rollout_ref.rollout.multi_turn.tool_config_path=tools.yaml", *overrides])
    return [p.line() for p in tools.tool_problems(c.cfg, str(wd), files_visible=files_visible)]


KEY_TC = "actor_rollout_ref.rollout.multi_turn.tool_config_path='tools.yaml'"
TOOL_CASES = [  # (id, tool_project kwargs, extra overrides, the one line expected)
    ("removed_verl_tool", {"cls": "verl.tools.gsm8k_tool.Gsm8kTool"}, [],
     rf"^{re.escape(KEY_TC)}: tools\[0\]: class_name='verl\.tools\.gsm8k_tool\.Gsm8kTool': verl 0\.9\.1 has no verl\.tools\.gsm8k_tool: "
     r"verl removed its tool implementations before 0\.8 \(verl#6302.*'NoneType' object has no attribute 'loader'\); fix: ship your own "
     r"BaseTool subclass in the job's working_dir .*class_name multiturn\.gsm8k_tool\.Gsm8kTool"),
    ("unknown_verl_class", {"cls": "verl.tools.base_tool.NoSuchTool"}, [], r"tools\[0\]: class_name='verl\.tools\.base_tool\.NoSuchTool': .*base_tool\.py defines no NoSuchTool \(it has: BaseTool\)"),
    ("module_not_in_working_dir", {"cls": "othertools.calc.CalcTool"}, [],
     r"tools\[0\]: class_name='othertools\.calc\.CalcTool': no module 'othertools\.calc' in the job's working_dir .*; fix: put othertools/calc\.py in the working_dir"),
    ("class_not_in_module", {"cls": "mytools.calc.Calc"}, [], r"mytools/calc\.py defines no Calc \(it has: CalcTool\); fix: fix class_name"),
    ("class_without_base", {"py": "class CalcTool:\n    pass\n"}, [], r"CalcTool in .* has no base class; verl instantiates BaseTool subclasses"),
    ("module_not_python", {"py": "class CalcTool(BaseTool:\n"}, [], r"mytools/calc\.py cannot be parsed as Python \(SyntaxError\)"),
    ("class_name_not_dotted", {"cls": "CalcTool"}, [], r"tools\[0\]: class_name='CalcTool' is not a dotted module path"),
    ("mcp_type", {"ctype": "mcp"}, [], r"tools\[0\]: config\.type='mcp': verl 0\.9\.1 knows only type native"),
    ("schema_without_description", {"desc": "''"}, [], r"tools\[0\]: tool_schema\.function\.description is missing"),
    ("unparsable_yaml", {"yaml_text": "tools:\n  - class_name: mytools.calc.CalcTool\n    config: {type: native\n"}, [],
     rf"^{re.escape(KEY_TC)}: cannot be parsed as YAML \(.+\); fix: fix the tool config"),
    ("no_tools_list", {"yaml_text": "tool:\n  - class_name: mytools.calc.CalcTool\n"}, [], r"has no non-empty `tools:` list"),
    ("no_schema_and_no_builder", {"yaml_text": "tools:\n  - class_name: mytools.calc.CalcTool\n    config: {type: native}\n"}, [],
     r"tools\[0\]: has no tool_schema and its class builds none"),
    ("missing_tool_config", {}, ["actor_rollout_ref.rollout.multi_turn.tool_config_path=conf/tools.yaml"],
     r"^actor_rollout_ref\.rollout\.multi_turn\.tool_config_path='conf/tools\.yaml': no such file in the job's working_dir \(.*/conf/tools\.yaml\)"),
    ("tool_config_outside", {}, ["actor_rollout_ref.rollout.multi_turn.tool_config_path=../tools.yaml"], r"tool_config_path='\.\./tools\.yaml': leaves the job's working_dir"),
    ("single_turn_agent", {}, ["actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"],
     r"^actor_rollout_ref\.rollout\.agent\.default_agent_loop='single_turn_agent': tools are configured \(multi_turn\.tool_config_path\) but the "
     r"default agent loop 'single_turn_agent' never calls a tool: .*verl#4441.*; fix: set actor_rollout_ref\.rollout\.agent\.default_agent_loop=tool_agent"),
    ("unknown_agent", {}, ["actor_rollout_ref.rollout.agent.default_agent_loop=tool_agnet"], r"'tool_agnet' is not an agent loop of verl 0\.9\.1 \(single_turn_agent, tool_agent\)"),
    ("mode_not_async", {}, ["actor_rollout_ref.rollout.mode=server"], r"^actor_rollout_ref\.rollout\.mode='server': tools run in verl's agent loop, which is async rollout only.*; fix: set actor_rollout_ref\.rollout\.mode=async"),
    ("unknown_parser", {}, ["actor_rollout_ref.rollout.multi_turn.format=llama3_json"], r"multi_turn\.format='llama3_json': is not a tool-call parser of verl 0\.9\.1.*hermes"),
    ("function_tool_missing", {}, ["actor_rollout_ref.rollout.multi_turn.function_tool_path=fns.py"], r"function_tool_path='fns\.py': no such file in the job's working_dir"),
    ("function_tool_undecorated", {"files": {"fns.py": "def add(a: int, b: int) -> int:\n    return a + b\n"}},
     ["actor_rollout_ref.rollout.multi_turn.function_tool_path=fns.py"], r"function_tool_path='fns\.py': defines no @function_tool function"),
]


@pytest.mark.parametrize("case,kwargs,overrides,pattern", TOOL_CASES, ids=[c[0] for c in TOOL_CASES])
def test_tool_config_problem_is_one_line(tmp_path, monkeypatch, case, kwargs, overrides, pattern):
    monkeypatch.chdir(tmp_path)
    lines = tool_check(tool_project(tmp_path / "proj", **kwargs), *overrides)
    assert len(lines) == 1 and re.search(pattern, lines[0]), "\n".join(lines)
    assert "\n" not in lines[0] and "; fix: " in lines[0]


def test_tool_configs_that_work_pass(tmp_path, monkeypatch, store):
    """The shipped preset as is (its working_dir: rayjobs' scripts/), a user's own tool in a namespace package,
    a verl class that exists, rows that pick the tool agent themselves, a custom agent loop config."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rayjobs.preflight import tools

    monkeypatch.chdir(tmp_path)
    shipped = compose.compose(["+exp=gsm8k_multiturn_tools", f"rayjobs.storage={store}"])
    assert tools.tool_problems(shipped.cfg, str(shipped.cfg.rayjobs.working_dir)) == []
    wd = tool_project(tmp_path / "proj")
    assert tool_check(wd) == []
    assert tool_check(tool_project(tmp_path / "v", cls="verl.tools.base_tool.BaseTool")) == []
    fns = "from verl.tools.function_tool import function_tool\n\n\n@function_tool\ndef add(a: int, b: int) -> int:\n    return a + b\n"
    assert tool_check(tool_project(tmp_path / "f", files={"fns.py": fns}), "actor_rollout_ref.rollout.multi_turn.function_tool_path=fns.py") == []
    picked = tmp_path / "picked.parquet"
    pq.write_table(pa.Table.from_pylist(tool_rows(3, tool="calc", agent_name="tool_agent")), picked)
    assert tool_check(wd, "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent",
                      f"data.train_files={picked}", f"data.val_files={picked}") == []
    (wd / "agents.yaml").write_text("- name: my_agent\n  _target_: mytools.agent.MyLoop\n")
    assert tool_check(wd, "actor_rollout_ref.rollout.agent.default_agent_loop=my_agent",
                      "actor_rollout_ref.rollout.agent.agent_loop_config_path=agents.yaml") == []
    assert tools.tool_problems(compose.compose(["+exp=grpo_7b"]).cfg, str(wd)) == []  # no tools, nothing to say


def test_tool_data_keyed_by_another_tool_is_refused(tmp_path, monkeypatch, capsys):
    """verl hands a tool only tools_kwargs[<its name>]: data for another name means no ground truth, silently."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    wd = tool_project(tmp_path / "proj")
    other, bare = tmp_path / "other.parquet", tmp_path / "bare.parquet"
    pq.write_table(pa.Table.from_pylist(tool_rows(2, tool="calc_gsm8k_reward")), other)
    pq.write_table(pa.table({"data_source": ["openai/gsm8k"], "prompt": [[{"role": "user", "content": "1+1?"}]]}), bare)
    lines = tool_check(wd, f"data.train_files={other}", f"data.val_files={bare}")
    assert len(lines) == 1 and re.search(rf"^data\.train_files='{re.escape(str(other))}': its rows' extra_info\.tools_kwargs are for "
                                         r"calc_gsm8k_reward, but the tool config declares calc: .*; fix: ", lines[0]), lines
    assert f"{bare}: rows carry no extra_info.tools_kwargs" in capsys.readouterr().err  # a note, not an error


def test_tool_paths_on_a_remote_cluster_or_a_rerun(tmp_path, monkeypatch, capsys):
    """An absolute tool config on a remote cluster is a note; a rerun's snapshot (://) is not read from here."""
    monkeypatch.chdir(tmp_path)
    wd = tool_project(tmp_path / "proj", cls="verl.tools.gsm8k_tool.Gsm8kTool")
    assert tool_check(wd, "actor_rollout_ref.rollout.multi_turn.tool_config_path=/only/on/nodes.yaml", files_visible=False) == []
    assert "is absolute: it must exist at that path on every node" in capsys.readouterr().err
    from rayjobs.preflight import tools

    c = compose.compose(["+exp=gsm8k_multiturn_tools"])
    assert tools.tool_problems(c.cfg, "gcs://_ray_pkg_abc.zip") == []


def test_dry_run_refuses_a_missing_tool_config_and_an_unknown_tool_class(workdir, store):
    """python -m rayjobs.submit ... rayjobs.dry_run=true, as a user runs it (no Ray cluster is started)."""
    args = ["+exp=gsm8k_multiturn_tools", f"rayjobs.storage={store}", "trainer.logger=[console]", "rayjobs.dry_run=true"]
    r = rayjobs_submit(*args, "actor_rollout_ref.rollout.multi_turn.tool_config_path=multiturn/nope.yaml", cwd=workdir)
    assert r.returncode == 2 and r.stdout.strip() == "", r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and LINE.match(errors[0]) and "tool_config_path='multiturn/nope.yaml': no such file in the job's working_dir" in errors[0]
    tool_project(workdir / "proj", cls="verl.tools.gsm8k_tool.Gsm8kTool")
    r = rayjobs_submit(*args, f"rayjobs.working_dir={workdir / 'proj'}",
                       "actor_rollout_ref.rollout.multi_turn.tool_config_path=tools.yaml", cwd=workdir)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert r.returncode == 2 and len(errors) == 1 and LINE.match(errors[0]), r.stderr
    assert "verl 0.9.1 has no verl.tools.gsm8k_tool: verl removed its tool implementations" in errors[0]

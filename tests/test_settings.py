"""Settings kept out of code (issue 17): one precedence across the command line, RAYJOBS_* variables,
./rayjobs.yaml, $RAYJOBS_HOME/settings.yaml, the remembered cluster and the defaults; `rayjobs config`;
bad files refused in one line; the settings applied to a submit (W&B project/entity, storage) and
to `rayjobs up`'s parameters and secrets."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from rayjobs.submit import spec

from conftest import REPO, queue_status, rayjobs_cli, rayjobs_submit, wait_until
from rayjobs import settings
from rayjobs.errors import ConfigError
from rayjobs.provision import clusterdir, skypilot
from rayjobs.settingsources import KEYS, env_var, project_file, resolve


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A project (a git checkout with a subdirectory, the current directory) and a private RAYJOBS_HOME."""
    home, proj = tmp_path / "rjhome", tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "sub").mkdir()
    home.mkdir()
    monkeypatch.setenv("RAYJOBS_HOME", str(home))
    monkeypatch.chdir(proj)
    return {"home": home, "proj": proj, "tmp": tmp_path}


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def gsm8k_storage(root: Path) -> Path:
    """A storage root holding GSM8K-shaped parquet files where the PPO preset reads them (preflight checks them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = root / "data" / "gsm8k"
    d.mkdir(parents=True)
    for split in ("train", "test"):
        pq.write_table(pa.table({"data_source": ["openai/gsm8k"] * 4, "prompt": [[{"role": "user", "content": "1+1?"}]] * 4,
                                 "reward_model": [{"style": "rule", "ground_truth": "2"}] * 4}), d / f"{split}.parquet")
    return root


def env_for(world: dict[str, Path], **extra: str) -> dict[str, str]:
    return {"RAYJOBS_HOME": str(world["home"]), **extra}


# --------------------------------------------------------------------------- the precedence
def test_each_layer_wins_over_the_ones_below_per_key(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    home, proj = world["home"], world["proj"]
    s = settings.current()
    assert all(s.source(k) == "default" for k in KEYS) and s.files == ()
    write(proj / "rayjobs.yaml", "# nothing yet\nwandb:\ncluster:\n  name:\n")  # empty keys leave the layers below
    s = settings.current()
    assert all(s.source(k) == "default" for k in KEYS) and s.files == ("./rayjobs.yaml",)
    assert (s.cluster.name, s.secrets, s.cluster.idle_minutes) == ("rayjobs", ("WANDB_API_KEY", "HF_TOKEN"), 30)
    assert settings.storage_root() == home / "storage"

    # the remembered cluster: its name and storage root
    (home / "cluster.json").write_text(json.dumps({"name": "remembered-c", "storage": "/mnt/remembered",
                                                   "address": "http://127.0.0.1:9"}))
    s = settings.current()
    assert (s.cluster.name, s.source("cluster.name"), s.storage, s.source("storage")) == \
        ("remembered-c", "remembered cluster", "/mnt/remembered", "remembered cluster")
    assert clusterdir.cluster_name() == "remembered-c" and settings.storage_root() == Path("/mnt/remembered")

    # the user's file beats the remembered cluster
    write(home / "settings.yaml", "storage: /mnt/user\ncluster:\n  name: user-c\n  infra: aws\n"
                                  "secrets: [WANDB_API_KEY]\nwandb:\n  project: user-proj\n  entity: user-team\n")
    user = "settings.yaml"
    s = settings.current()
    assert s.storage == "/mnt/user" and s.source("storage").endswith(user) and s.cluster.name == "user-c"
    assert s.secrets == ("WANDB_API_KEY",) and s.wandb.entity == "user-team"

    # the project's file (found from a subdirectory, up to the git root) beats the user's, key by key
    write(proj / "rayjobs.yaml", "wandb:\n  project: proj-proj\ncluster.infra: gcp\n")
    monkeypatch.chdir(proj / "sub")
    s = settings.current()
    assert (s.wandb.project, s.source("wandb.project")) == ("proj-proj", "../rayjobs.yaml")
    assert (s.cluster.infra, s.source("cluster.infra")) == ("gcp", "../rayjobs.yaml")
    assert s.wandb.entity == "user-team" and s.source("wandb.entity").endswith(user)  # per key: the rest stays
    assert s.storage == "/mnt/user" and s.files[0] == "../rayjobs.yaml" and s.files[1].endswith(user)

    # variables beat both files
    monkeypatch.setenv("RAYJOBS_STORAGE", "/mnt/env")
    monkeypatch.setenv("RAYJOBS_WANDB_PROJECT", "env-proj")
    monkeypatch.setenv("RAYJOBS_SECRETS", "WANDB_API_KEY, MY_DB_URL")
    monkeypatch.setenv("RAYJOBS_CLUSTER_NUM_NODES", "4")
    s = settings.current()
    assert (s.storage, s.source("storage")) == ("/mnt/env", "env RAYJOBS_STORAGE")
    assert (s.wandb.project, s.source("wandb.project")) == ("env-proj", "env RAYJOBS_WANDB_PROJECT")
    assert s.secrets == ("WANDB_API_KEY", "MY_DB_URL") and s.cluster.num_nodes == 4
    assert s.cluster.infra == "gcp"  # untouched by the variables

    # the command line beats everything
    assert settings.storage_root("/mnt/cli") == Path("/mnt/cli") and settings.storage_root() == Path("/mnt/env")
    assert clusterdir.cluster_name("cli-c") == "cli-c" and clusterdir.cluster_name() == "user-c"
    params, taken = skypilot.up_params({"infra": "azure"}, s)
    assert params["infra"] == "azure" and "infra" not in taken and params["num_nodes"] == "4"


def test_project_file_stops_at_the_git_root_and_outside_git_is_only_the_cwd(tmp_path: Path) -> None:
    top = tmp_path / "above"
    repo = top / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "a" / "b").mkdir(parents=True)
    write(top / "rayjobs.yaml", "storage: /not/the/project\n")
    assert project_file(repo / "a" / "b") is None  # the file above the checkout is not the project's
    write(repo / "rayjobs.yaml", "storage: /proj\n")
    assert project_file(repo / "a" / "b") == repo / "rayjobs.yaml"
    write(repo / "a" / "rayjobs.yaml", "storage: /nearer\n")
    assert project_file(repo / "a" / "b") == repo / "a" / "rayjobs.yaml"  # the nearest wins
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    write(plain.parent / "rayjobs.yaml", "storage: /parent\n")
    assert project_file(plain) is None and project_file(plain.parent) == plain.parent / "rayjobs.yaml"


def test_every_key_has_its_variable_and_an_empty_variable_is_unset(tmp_path: Path) -> None:
    assert env_var("storage") == "RAYJOBS_STORAGE" and env_var("cluster.name") == "RAYJOBS_CLUSTER_NAME"
    assert env_var("wandb.entity") == "RAYJOBS_WANDB_ENTITY" and env_var("secrets") == "RAYJOBS_SECRETS"
    env = {env_var(k): v for k, v in {"cluster.name": "n", "cluster.infra": "aws", "cluster.accelerators": "A100:8",
                                      "cluster.num_nodes": "3", "cluster.image": "ghcr.io/x/y:abc",
                                      "cluster.idle_minutes": "0", "cluster.bucket": "b", "cluster.volume": "v",
                                      "wandb.entity": "e", "storage": ""}.items()}
    s = resolve(tmp_path, env, tmp_path / "home")
    assert (s.cluster.num_nodes, s.cluster.idle_minutes, s.cluster.image) == (3, 0, "ghcr.io/x/y:abc")
    assert s.source("storage") == "default" and s.source("cluster.volume") == "env RAYJOBS_CLUSTER_VOLUME"


# --------------------------------------------------------------------------- rayjobs config
def test_rayjobs_config_prints_each_value_and_its_source(world: dict[str, Path]) -> None:
    write(world["home"] / "settings.yaml", "storage: /mnt/user\nwandb:\n  entity: user-team\n")
    write(world["proj"] / "rayjobs.yaml", "wandb:\n  project: proj-proj\ncluster:\n  accelerators: H200:8\n")
    env = env_for(world, RAYJOBS_CLUSTER_NAME="env-c")
    r = rayjobs_cli("config", cwd=world["proj"] / "sub", env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(re.match(r"^(\S+)\s+= (.*)$", ln).groups() for ln in r.stdout.splitlines())  # type: ignore[union-attr]
    assert set(lines) == set(KEYS) | {"address"}
    user = str(world["home"] / "settings.yaml")
    assert lines["storage"] == f"/mnt/user  ({user})"
    assert lines["wandb.project"] == "proj-proj  (../rayjobs.yaml)"
    assert lines["wandb.entity"] == f"user-team  ({user})"
    assert lines["cluster.accelerators"] == "H200:8  (../rayjobs.yaml)"
    assert lines["cluster.name"] == "env-c  (env RAYJOBS_CLUSTER_NAME)"
    assert lines["cluster.idle_minutes"] == "30  (default)"
    assert lines["secrets"] == "WANDB_API_KEY, HF_TOKEN  (default)"
    assert lines["cluster.infra"] == "k8s  (bootstrap/cluster.yaml)"  # what the task file gives an empty key
    assert lines["address"].endswith("(default)") and "embedded" in lines["address"]
    assert f"settings files: ../rayjobs.yaml, {user}" in r.stderr

    j = rayjobs_cli("config", "--json", cwd=world["proj"] / "sub", env=env)
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)  # stdout is the data alone
    assert doc["wandb.project"] == {"value": "proj-proj", "source": "../rayjobs.yaml"}
    assert doc["secrets"] == {"value": ["WANDB_API_KEY", "HF_TOKEN"], "source": "default"}
    assert doc["cluster.num_nodes"] == {"value": 2, "source": "bootstrap/cluster.yaml"}
    assert doc["address"] == {"value": None, "source": "default"}


def test_config_notes_a_storage_root_the_connected_cluster_does_not_have(world: dict[str, Path]) -> None:
    (world["home"] / "cluster.json").write_text(json.dumps({"name": "c1", "storage": "/mnt/rayjobs",
                                                            "address": "http://127.0.0.1:9"}))
    write(world["proj"] / "rayjobs.yaml", "storage: /mnt/elsewhere\n")
    r = rayjobs_cli("config", cwd=world["proj"], env=env_for(world))
    assert r.returncode == 0, r.stderr
    assert "storage /mnt/elsewhere (./rayjobs.yaml) is not the connected cluster c1's storage root /mnt/rayjobs" in r.stderr
    assert re.search(r"^address += http://127\.0\.0\.1:9  \(remembered cluster\)$", r.stdout, re.M), r.stdout


# --------------------------------------------------------------------------- bad files: one line, exit 2
BAD = [
    ("unknown_key", "wandb:\n  projct: x\n", r"\./rayjobs\.yaml: unknown key 'wandb\.projct' \(did you mean: wandb\.project"),
    ("unknown_top", "clustr:\n  name: x\n", r"\./rayjobs\.yaml: unknown key 'clustr\.name' \(did you mean: cluster\.name"),
    ("wrong_type_int", "cluster:\n  num_nodes: two\n", r"\./rayjobs\.yaml: cluster\.num_nodes must be a whole number, not 'two'"),
    ("wrong_type_str", "wandb:\n  project: [a, b]\n", r"\./rayjobs\.yaml: wandb\.project must be a string"),
    ("wrong_type_bool", "cluster:\n  num_nodes: true\n", r"\./rayjobs\.yaml: cluster\.num_nodes must be a whole number"),
    ("group_scalar", "cluster: k8s\n", r"\./rayjobs\.yaml: cluster must be a mapping of cluster\.name"),
    ("not_a_mapping", "- storage\n", r"\./rayjobs\.yaml: must be a mapping of settings"),
    ("yaml_syntax", "storage: /x\nwandb:\n  project: [unclosed\n", r"\./rayjobs\.yaml line \d+: not valid YAML"),
    ("relative_storage", "storage: data/rayjobs\n", r"\./rayjobs\.yaml: storage = 'data/rayjobs' is a relative path"),
    ("zero_nodes", "cluster:\n  num_nodes: 0\n", r"\./rayjobs\.yaml: cluster\.num_nodes must be at least 1"),
    ("secret_value_top", "WANDB_API_KEY: sk-live-1234\n",
     r"\./rayjobs\.yaml: WANDB_API_KEY holds what looks like a secret's value; secrets never go in a settings file"),
    ("secret_value_nested", "wandb:\n  api_key: sk-live-1234\n", r"\./rayjobs\.yaml: wandb\.api_key holds what looks like a secret's value"),
    ("secret_values_map", "secrets:\n  HF_TOKEN: sk-live-1234\n", r"\./rayjobs\.yaml: secrets\.HF_TOKEN holds what looks like a secret's value"),
    ("secret_in_names", "secrets: [WANDB_API_KEY=sk-live-1234]\n", r"\./rayjobs\.yaml: secrets\[0\] is not an environment variable name"),
    ("secrets_string", "secrets: WANDB_API_KEY\n", r"\./rayjobs\.yaml: secrets must be a list of environment variable names"),
    ("ray_token_name", "secrets: [RAY_AUTH_TOKEN]\n", r"\./rayjobs\.yaml: secrets\[0\] = RAY_AUTH_TOKEN: Ray's own variables are not forwarded"),
]


@pytest.mark.parametrize("text, expect", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_project_file_is_one_line_exit_2(world: dict[str, Path], text: str, expect: str) -> None:
    write(world["proj"] / "rayjobs.yaml", text)
    r = rayjobs_cli("config", cwd=world["proj"], env=env_for(world))
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"^error: " + expect, lines[0]), r.stderr
    assert "sk-live-1234" not in r.stderr  # a secret's value is never echoed


def test_every_command_that_reads_settings_refuses_a_bad_file(world: dict[str, Path]) -> None:
    user = write(world["home"] / "settings.yaml", "wandb:\n  entitty: me\n")
    expect = f"error: {user}: unknown key 'wandb.entitty' (did you mean: wandb.entity"
    for run in (lambda: rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "rayjobs.dry_run=true", cwd=world["proj"], env=env_for(world)),
                lambda: rayjobs_submit("-m", "+exp=ppo_gsm8k_qwen05b", "trainer.total_epochs=1,2", "rayjobs.dry_run=true",
                                       cwd=world["proj"], env=env_for(world)),
                lambda: rayjobs_cli("up", "num_nodes=1", cwd=world["proj"], env=env_for(world)),
                lambda: rayjobs_cli("down", "-y", cwd=world["proj"], env=env_for(world))):
        r = run()
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(expect), r.stderr
    user.unlink()
    r = rayjobs_cli("config", cwd=world["proj"], env=env_for(world, RAYJOBS_CLUSTER_IDLE_MINUTES="soon"))
    assert r.returncode == 2 and r.stderr.strip() == "error: RAYJOBS_CLUSTER_IDLE_MINUTES='soon' must be a whole number"


# --------------------------------------------------------------------------- applied to a submit
def dry_run(cwd: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "+rayjobs.env.WANDB_MODE=offline", "rayjobs.dry_run=true", *args,
                       cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_dry_run_takes_wandb_project_entity_and_storage_from_the_project_file(world: dict[str, Path]) -> None:
    storage = gsm8k_storage(world["tmp"] / "shared")
    write(world["proj"] / "rayjobs.yaml", f"storage: {storage}\nwandb:\n  project: team-rl\n  entity: rl-team\n")
    doc = dry_run(world["proj"], env_for(world))
    cfg, job = doc["config"], doc["submit_job"]
    run = job["submission_id"]
    assert cfg["trainer"]["project_name"] == "team-rl"  # the settings' project over the preset's verl_examples
    assert cfg["rayjobs"]["storage"] == str(storage)
    assert cfg["rayjobs"]["env"] == {"WANDB_MODE": "offline", "WANDB_ENTITY": "rl-team"}
    assert job["runtime_env"]["env_vars"] == {"WANDB_MODE": "offline", "WANDB_ENTITY": "rl-team",
                                              **spec.wandb_run(job["metadata"]["run"])}
    assert job["metadata"]["checkpoint_dir"] == f"{storage}/checkpoints/team-rl/{run}"
    assert job["metadata"]["run_dir"] == f"{storage}/runs/team-rl/{run}"
    words = job["entrypoint"].split()
    assert "trainer.project_name=team-rl" in words and f"trainer.default_local_dir={storage}/checkpoints/team-rl/{run}" in words
    assert f"data.train_files={storage}/data/gsm8k/train.parquet" in words  # the preset's ${rayjobs.storage} paths

    # the command line wins over the settings (and a variable over the file)
    doc = dry_run(world["proj"], env_for(world, RAYJOBS_WANDB_ENTITY="env-team"), "trainer.project_name=mine",
                  f"rayjobs.storage={gsm8k_storage(world['tmp'] / 'cli')}")
    job = doc["submit_job"]
    assert doc["config"]["trainer"]["project_name"] == "mine" and "trainer.project_name=mine" in job["entrypoint"].split()
    assert job["metadata"]["checkpoint_dir"] == f"{world['tmp'] / 'cli'}/checkpoints/mine/{job['submission_id']}"
    assert job["runtime_env"]["env_vars"]["WANDB_ENTITY"] == "env-team"
    doc = dry_run(world["proj"], env_for(world), "+rayjobs.env.WANDB_ENTITY=cli-team")
    assert doc["submit_job"]["runtime_env"]["env_vars"]["WANDB_ENTITY"] == "cli-team"

    # without settings: the preset's own project, no entity (as before)
    (world["proj"] / "rayjobs.yaml").unlink()
    doc = dry_run(world["proj"], env_for(world), f"rayjobs.storage={storage}")
    assert doc["config"]["trainer"]["project_name"] == "verl_examples"
    assert "WANDB_ENTITY" not in doc["submit_job"]["runtime_env"]["env_vars"]


def test_every_sweep_point_gets_the_settings(world: dict[str, Path]) -> None:
    storage = gsm8k_storage(world["tmp"] / "shared")
    write(world["proj"] / "rayjobs.yaml", f"storage: {storage}\nwandb:\n  project: team-rl\n  entity: rl-team\n")
    r = rayjobs_submit("-m", "+exp=ppo_gsm8k_qwen05b", "+rayjobs.env.WANDB_MODE=offline", "rayjobs.dry_run=true",
                       "trainer.total_epochs=1,2", "algorithm.kl_ctrl.kl_coef=0.001,0.01", cwd=world["proj"], env=env_for(world))
    assert r.returncode == 0, r.stderr
    points = json.loads(r.stdout)
    assert len(points) == 4
    for p in points:
        job = p["submit_job"]
        assert p["config"]["trainer"]["project_name"] == "team-rl" and job["runtime_env"]["env_vars"]["WANDB_ENTITY"] == "rl-team"
        assert job["metadata"]["checkpoint_dir"].startswith(f"{storage}/checkpoints/team-rl/")


def test_a_real_job_runs_with_the_settings_project_entity_and_storage(cluster: Any, client: Any, workdir: Path) -> None:
    """Submitted for real to the embedded head: the job's environment has WANDB_ENTITY and its
    checkpoints land under <storage from rayjobs.yaml>/checkpoints/<wandb.project>/<run>."""
    storage = workdir / "team-storage"
    write(workdir / "rayjobs.yaml", f"storage: {storage}\nwandb:\n  project: team-rl\n  entity: rl-team\n")
    r = rayjobs_submit("+exp=fake_ppo", "trainer.save_freq=1", "+fake.steps=2", cwd=workdir)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    wait_until(lambda: queue_status(cluster, job_id) in ("SUCCEEDED", "FAILED", "STOPPED"), 180, f"{job_id} to end")
    assert queue_status(cluster, job_id) == "SUCCEEDED", client.get_job_logs(job_id)
    info = client.get_job_info(job_id)
    assert info.runtime_env["env_vars"]["WANDB_ENTITY"] == "rl-team"
    tracker = storage / "checkpoints" / "team-rl" / job_id / "latest_checkpointed_iteration.txt"
    assert tracker.read_text().strip() == "2"
    assert "WANDB_ENTITY" not in (info.metadata or {}).get("overrides", "")  # from the settings, not typed


def test_preflight_says_how_the_settings_forward_a_missing_secret(world: dict[str, Path]) -> None:
    (world["home"] / "cluster.json").write_text(json.dumps({"name": "c1", "address": "http://127.0.0.1:9",
                                                            "secrets": ["HF_TOKEN"]}))
    write(world["proj"] / "rayjobs.yaml", "secrets: [HF_TOKEN]\n")
    r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "rayjobs.dry_run=true", f"rayjobs.storage={world['tmp']}",
                       cwd=world["proj"], env=env_for(world, RAYJOBS_PREFLIGHT_VERL="off"))
    assert r.returncode == 2, r.stderr
    assert "wandb needs WANDB_API_KEY in the cluster's environment" in r.stderr
    assert "add WANDB_API_KEY to 'secrets:' in rayjobs.yaml or ~/.rayjobs/settings.yaml (now ./rayjobs.yaml: HF_TOKEN)" in r.stderr


# --------------------------------------------------------------------------- applied to rayjobs up
def test_up_parameters_come_from_the_settings_under_the_command_line(world: dict[str, Path]) -> None:
    write(world["proj"] / "rayjobs.yaml", "storage: /mnt/team\ncluster:\n  infra: aws\n  accelerators: H100:8\n"
                                          "  num_nodes: 4\n  image: ghcr.io/team/rayjobs-cluster:abc123\n"
                                          "  idle_minutes: 10\n  volume: team-pvc\n")
    s = settings.current()
    params, taken = skypilot.up_params({}, s)
    assert params == {"infra": "aws", "accelerators": "H100:8", "num_nodes": "4", "idle_minutes": "10",
                      "image": "ghcr.io/team/rayjobs-cluster:abc123", "volume": "team-pvc", "storage": "/mnt/team"}
    assert set(taken.values()) == {"./rayjobs.yaml"}
    cfg = skypilot.task_config({k: v for k, v in params.items() if k != "idle_minutes"})
    assert cfg["resources"]["infra"] == "aws" and cfg["resources"]["accelerators"] == "H100:8" and cfg["num_nodes"] == 4
    assert cfg["resources"]["image_id"] == "docker:ghcr.io/team/rayjobs-cluster:abc123"
    assert cfg["envs"]["RAYJOBS_STORAGE"] == "/mnt/team" and cfg["volumes"] == {"/mnt/team": "team-pvc"}
    assert "file_mounts" not in cfg
    # the command line wins; a bucket there takes both bucket and volume from the command line
    params, taken = skypilot.up_params({"num_nodes": "2", "bucket": "b2"}, s)
    assert params["num_nodes"] == "2" and params["bucket"] == "b2" and "volume" not in params
    assert "num_nodes" not in taken and params["infra"] == "aws"
    # nothing set: only the idle default; the task file's own values stay (storage: not this machine's)
    params, taken = skypilot.up_params({}, resolve(world["tmp"], {}, world["home"], {"storage": "/mnt/remembered"}))
    assert params == {"idle_minutes": "30"} and taken == {"idle_minutes": "default"}


def test_up_with_settings_builds_skypilots_task(world: dict[str, Path]) -> None:
    sky = pytest.importorskip("sky", reason="skypilot is not installed (pip install 'rayjobs[sky]')")
    write(world["proj"] / "rayjobs.yaml", "cluster:\n  infra: aws\n  accelerators: H100:8\n  num_nodes: 3\n"
                                          "  image: verlai/verl:pinned\n  bucket: team-bucket\n")
    params, _ = skypilot.up_params({"num_nodes": "5"}, settings.current())
    params.pop("idle_minutes")
    task = skypilot.build_task(params)
    res = next(iter(task.resources))
    assert isinstance(task, sky.Task) and str(res.cloud) == "AWS" and res.accelerators == {"H100": 8}
    assert task.num_nodes == 5 and next(iter(res.image_id.values())) == "docker:verlai/verl:pinned"
    assert task.storage_mounts["/mnt/rayjobs"].name == "team-bucket"


class _Sky:
    """Records the launch; the bootstrap log says ready (the SkyPilot calls cannot run here)."""

    def __init__(self) -> None:
        self.calls: list = []

    def launch(self, task: Any, cluster_name: str) -> str:
        self.calls.append(("launch", task, cluster_name))
        return "launch"

    def exec(self, task: Any, cluster_name: str) -> str:
        self.calls.append(("exec", task, cluster_name))
        return "exec"

    def stream_and_get(self, request: str) -> Any:
        return (1, object())

    def tail_logs(self, name: str, job_id: int, follow: bool, output_stream: Any) -> int:
        output_stream.write("[rayjobs-node] cluster ready\n")
        return 0


def test_up_forwards_the_settings_secrets_by_name(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sky", reason="skypilot is not installed (pip install 'rayjobs[sky]')")
    from rayjobs.provision import tunnel

    monkeypatch.setattr(tunnel, "connect", lambda name, out=None: {"name": name})
    monkeypatch.setattr(tunnel, "remote_state", lambda name: (_ for _ in ()).throw(clusterdir.ClusterError("none")))
    write(world["proj"] / "rayjobs.yaml", "cluster:\n  name: team-c\n  idle_minutes: 12\nsecrets: [WANDB_API_KEY, MY_DB_URL, OTHER_TOKEN]\n")
    monkeypatch.setenv("WANDB_API_KEY", "wb-value")
    monkeypatch.setenv("MY_DB_URL", "db-value")
    monkeypatch.setenv("HF_TOKEN", "hf-value")  # not in the settings' list: stays home
    monkeypatch.delenv("OTHER_TOKEN", raising=False)
    fake, out = _Sky(), io.StringIO()
    name = clusterdir.cluster_name()
    skypilot.up(name, {}, out=out, sdk=fake)
    task, cluster = fake.calls[0][1], fake.calls[0][2]
    assert cluster == "team-c" and fake.calls[1][1].envs["RAYJOBS_IDLE_MINUTES"] == "12"
    token = (clusterdir.cluster_dir("team-c") / "auth_token").read_text()
    assert {k: (v.get_secret_value() if hasattr(v, "get_secret_value") else v) for k, v in task.secrets.items()} == \
        {"RAY_AUTH_TOKEN": token, "WANDB_API_KEY": "wb-value", "MY_DB_URL": "db-value"}
    assert task.envs["RAYJOBS_SECRETS"] == "WANDB_API_KEY,MY_DB_URL,OTHER_TOKEN"
    assert "value" not in json.dumps(task.envs)
    said = out.getvalue()
    assert "from the settings: idle_minutes=12 (./rayjobs.yaml)" in said
    assert "secrets for the cluster (names from ./rayjobs.yaml): WANDB_API_KEY, MY_DB_URL; not set in this shell, " \
           "not forwarded: OTHER_TOKEN" in said
    assert "wb-value" not in said and "db-value" not in said


def test_node_script_records_the_forwarded_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """bootstrap/ray_node.py (standalone) lists what `rayjobs up` forwarded, by RAYJOBS_SECRETS."""
    spec = importlib.util.spec_from_file_location("ray_node_under_test", REPO / "bootstrap" / "ray_node.py")
    node = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(node)  # type: ignore[union-attr]
    for var in list(os.environ):
        if re.search(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", var, re.I):
            monkeypatch.delenv(var)
    monkeypatch.setenv("WANDB_API_KEY", "x")
    monkeypatch.setenv("MY_DB_URL", "y")
    monkeypatch.delenv("RAYJOBS_SECRETS", raising=False)
    assert node._forwarded() == ["WANDB_API_KEY", "HF_TOKEN"] and node._secret_names() == ["WANDB_API_KEY"]
    monkeypatch.setenv("RAYJOBS_SECRETS", "MY_DB_URL,HF_TOKEN")
    assert node._secret_names() == ["MY_DB_URL", "WANDB_API_KEY"]  # a forwarded name without KEY/TOKEN counts too


def test_embedded_head_keeps_its_queue_under_the_settings_storage(world: dict[str, Path]) -> None:
    from rayjobs.client import embedded

    embedded.state_dir().mkdir(parents=True, exist_ok=True)
    (world["home"] / "cluster.json").write_text(json.dumps({"name": "c1", "storage": "/mnt/remote"}))
    assert "RAYJOBS_STORAGE" not in embedded._head_env()  # a remote cluster's root is not this machine's
    write(world["proj"] / "rayjobs.yaml", f"storage: {world['tmp'] / 'st'}\n")
    assert embedded._head_env()["RAYJOBS_STORAGE"] == str(world["tmp"] / "st")


def test_settings_import_stays_light() -> None:
    import subprocess
    import sys

    code = ("import sys, rayjobs.settings, rayjobs.provision.clusterdir; "
            "print(sorted(m for m in ('ray', 'hydra', 'omegaconf', 'yaml', 'sky') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_check_value_never_echoes_a_listed_value() -> None:
    with pytest.raises(ConfigError) as e:
        resolve(Path("/"), {"RAYJOBS_SECRETS": "WANDB_API_KEY,hunter2=pw"}, Path("/nonexistent"))
    assert "hunter2" not in str(e.value) and "RAYJOBS_SECRETS" in str(e.value)

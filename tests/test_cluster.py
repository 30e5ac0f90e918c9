"""`rayjobs up/connect/cluster/down` without a cloud: SkyPilot's own schema check and real API
(offline: its local API server answers `down`; `up` fails at the catalog download, in one line),
the task parameters, and the up/down flow against a stand-in SDK."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import rayjobs_cli, wait_until

REPO = Path(__file__).resolve().parent.parent
sky = pytest.importorskip("sky", reason="skypilot is not installed (pip install 'rayjobs[sky]')")

import rayjobs.provision.skypilot as rcl  # noqa: E402
from rayjobs import settings  # noqa: E402
from rayjobs.errors import ConfigError  # noqa: E402


# --------------------------------------------------------------------------- the SkyPilot task
def test_task_yaml_passes_skypilots_schema_with_seed_defaults() -> None:
    task = sky.Task.from_yaml(str(REPO / "bootstrap" / "cluster.yaml"))
    res = next(iter(task.resources))
    assert task.num_nodes == 2 and res.accelerators == {"H100": 1}
    assert str(res.cloud) == "Kubernetes" and res.memory == "128+" and res.disk_size == 256
    assert res.image_id and "verlai/verl" in next(iter(res.image_id.values()))
    assert not res.ports  # no public ports: the Jobs API is reached through SSH
    assert res.autostop_config.wait_for.value == "jobs" and res.autostop_config.idle_minutes == 1
    assert set(task.secrets) == {"RAY_AUTH_TOKEN", "WANDB_API_KEY", "HF_TOKEN"}
    assert "/mnt/rayjobs" in task.storage_mounts and task.envs["RAYJOBS_STORAGE"] == "/mnt/rayjobs"
    assert "bootstrap/ray_node.py" in task.run and "ray " + "stop" not in task.run + task.setup
    assert task.envs["VERL_VERSION"] == "0.9.1" and task.envs["VLLM_VERSION"] == "0.24.0"
    assert "pip install -q ." in task.setup  # rayjobs itself, from the workdir
    sentinel = sky.Task.from_yaml(str(REPO / "bootstrap" / "sentinel.yaml"))
    assert "sentinel.py" in sentinel.run and sentinel.num_nodes == 1


def test_up_parameters_override_the_yaml() -> None:
    task = rcl.build_task(rcl.parse_params(
        ["infra=aws", "accelerators=H100:8", "num_nodes=4", "disk_size=512", "image=verlai/verl:custom",
         "use_spot=true", "bucket=my-bucket", "storage=/mnt/shared", "join_timeout=60"]))
    res = next(iter(task.resources))
    assert str(res.cloud) == "AWS" and res.accelerators == {"H100": 8} and task.num_nodes == 4
    assert res.disk_size == 512 and res.use_spot and next(iter(res.image_id.values())) == "docker:verlai/verl:custom"
    assert task.envs["RAYJOBS_STORAGE"] == "/mnt/shared" and task.envs["RAYJOBS_JOIN_TIMEOUT"] == "60"
    assert task.storage_mounts["/mnt/shared"].name == "my-bucket"
    assert res.autostop_config.down is False  # clouds can stop; k8s cannot
    assert next(iter(rcl.build_task({}).resources)).autostop_config.down is True
    cfg = rcl.task_config({"volume": "rayjobs-pvc"})
    assert cfg["volumes"] == {"/mnt/rayjobs": "rayjobs-pvc"} and "file_mounts" not in cfg
    # The nodes learn this checkout's commit (their labels show it; an image of it installs nothing);
    # an image pinned by a registry port, a commit tag or a digest is taken as it is.
    from rayjobs.shared import source_commit

    assert rcl.task_config({})["envs"]["RAYJOBS_COMMIT"] == source_commit()
    for image in ("localhost:5000/rayjobs-cluster:0123456789ab", "reg.example/x@sha256:" + "0" * 64):
        assert rcl.task_config({"image": image})["resources"]["image_id"] == f"docker:{image}"


@pytest.mark.parametrize("args, message", [
    (["num_node=3"], "unknown parameter 'num_node' (did you mean: num_nodes"),
    (["num_nodes=two"], "num_nodes='two': expected a whole number"),
    (["infra"], "expected key=value"),
    (["storage=rel/path"], "must be an absolute path"),
    (["accelerators=H100:x"], "SkyPilot rejected the cluster task"),
    (["image=reg.example/rayjobs-cluster:latest"], "is not pinned (the tag latest moves)"),
    (["image=reg.example/rayjobs-cluster"], "is not pinned (no tag)"),
])
def test_bad_up_parameters_are_one_line_errors(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        rcl.build_task(rcl.parse_params(args))
    assert message in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- up / down flow
class FakeSky:
    """Records what rayjobs asks SkyPilot for; the bootstrap log and exit code are scripted."""

    def __init__(self, log: str = "", rc: int = 0) -> None:
        self.log, self.rc, self.calls = log, rc, []

    def launch(self, task: Any, cluster_name: str) -> str:
        self.calls.append(("launch", task, cluster_name))
        return "launch"

    def exec(self, task: Any, cluster_name: str) -> str:
        self.calls.append(("exec", task, cluster_name))
        return "exec"

    def down(self, name: str) -> str:
        self.calls.append(("down", name))
        return "down"

    def stream_and_get(self, request: str) -> Any:
        return None if request == "down" else (7, object())

    def tail_logs(self, name: str, job_id: int, follow: bool, output_stream: Any) -> int:
        self.calls.append(("logs", name, job_id))
        output_stream.write(self.log)
        return self.rc


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private RAYJOBS_HOME: nothing here may leave a remembered cluster for other tests."""
    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "rj"))
    return tmp_path / "rj"


@pytest.fixture
def no_connect(home: Path, monkeypatch: pytest.MonkeyPatch) -> list:
    seen: list = []
    from rayjobs.provision import tunnel

    monkeypatch.setattr(tunnel, "connect", lambda name, out=None: seen.append(name) or {"name": name})
    monkeypatch.setattr(tunnel, "remote_state", lambda name: (_ for _ in ()).throw(rcl.ClusterError("none")))
    return seen


def test_up_launches_with_token_and_secrets_then_sentinel_then_connects(
        no_connect: list, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wb-secret")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    fake, out = FakeSky(log="[rayjobs-node] cluster ready\nRAYJOBS_READY {}\n"), io.StringIO()
    rcl.up("rjunit", {"num_nodes": "3", "idle_minutes": "7"}, out=out, sdk=fake)
    kinds = [c[0] for c in fake.calls]
    assert kinds == ["launch", "logs", "exec"] and no_connect == ["rjunit"]
    task = fake.calls[0][1]
    token = rcl.cluster_dir("rjunit") / "auth_token"
    assert token.stat().st_mode & 0o777 == 0o600
    assert _plain(task.secrets) == {"RAY_AUTH_TOKEN": token.read_text(), "WANDB_API_KEY": "wb-secret"}
    assert task.num_nodes == 3 and task.workdir == str(REPO)
    assert "wb-secret" not in json.dumps(task.envs)  # a secret, not an env (SkyPilot redacts secrets)
    assert task.envs["RAYJOBS_SECRETS"] == "WANDB_API_KEY,HF_TOKEN"  # the names, for the node script's log
    assert "secrets for the cluster (names from default): WANDB_API_KEY; not set in this shell, not forwarded: HF_TOKEN" \
        in out.getvalue()
    assert fake.calls[2][1].envs["RAYJOBS_IDLE_MINUTES"] == "7" and "sentinel.py" in fake.calls[2][1].run
    assert "cluster ready" in out.getvalue()
    # Again: the same token (a new one would lock the running Ray out).
    first = token.read_text()
    rcl.up("rjunit", {}, out=io.StringIO(), sdk=fake)
    assert _plain(fake.calls[3][1].secrets)["RAY_AUTH_TOKEN"] == first


def _plain(secrets: dict) -> dict:
    return {k: getattr(v, "get_secret_value", lambda: v)() for k, v in secrets.items()}


def test_up_reports_the_heads_error_line(no_connect: list) -> None:
    log = "[rayjobs-node] waiting: 2/3 nodes\nerror: cluster not ready after 900 s: rank(s) 2 (10.0.0.3) did not join\n"
    with pytest.raises(rcl.ClusterError) as e:
        rcl.up("rjunit2", {}, out=io.StringIO(), sdk=FakeSky(log=log, rc=100))
    assert "rank(s) 2 (10.0.0.3) did not join" in str(e.value) and "sky logs rjunit2 7" in str(e.value)
    assert no_connect == []


def test_down_closes_the_tunnel_and_forgets(home: Path) -> None:
    settings.cluster_file().parent.mkdir(parents=True, exist_ok=True)
    settings.cluster_file().write_text(json.dumps({"name": "rjdown", "address": "http://127.0.0.1:1"}))
    rcl.local_token("rjdown", create=True)
    fake = FakeSky()
    rcl.down("rjdown", out=io.StringIO(), sdk=fake)
    assert fake.calls == [("down", "rjdown")]
    assert not settings.cluster_file().exists() and rcl.local_token("rjdown") is None


REFUSED = ("ConnectionError(HTTPConnection(host='127.0.0.1', port=46580): Failed to establish a new "
           "connection: [Errno 111] Connection refused)")


def test_a_call_the_local_api_server_refused_is_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyPilot's client starts its local API server on the first call; on a busy machine the call can
    be refused before it listens (seen under load): made again, at most API_SERVER_TRIES times."""
    monkeypatch.setattr(rcl, "API_SERVER_WAIT_S", 0.0)
    calls: list[int] = []

    def refused_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(REFUSED)
        return "done"

    assert rcl._sky_call("down", "rjx", refused_twice) == "done" and len(calls) == 3
    calls.clear()
    with pytest.raises(rcl.ClusterError, match="SkyPilot down of 'rjx' failed: .*Connection refused"):
        rcl._sky_call("down", "rjx", lambda: calls.append(1) or (_ for _ in ()).throw(RuntimeError(REFUSED)))
    assert len(calls) == rcl.API_SERVER_TRIES
    calls.clear()
    with pytest.raises(rcl.ClusterError, match="failed: quota exceeded"):  # any other error: once
        rcl._sky_call("up", "rjx", lambda: calls.append(1) or (_ for _ in ()).throw(RuntimeError("quota exceeded")))
    assert len(calls) == 1


# --------------------------------------------------------------------------- real SkyPilot, offline
def test_real_skypilot_api_offline_gives_one_line_errors() -> None:
    """SkyPilot's own client starts its local API server (inside the test namespace, HOME pinned);
    `down` of an unknown cluster and `up` without network each end in one line, exit 2."""
    try:
        r = rayjobs_cli("down", "rjnosuch", "-y", timeout=240)
        assert r.returncode == 2, r.stderr
        assert "error: no SkyPilot cluster named 'rjnosuch'" in r.stderr and "Traceback" not in r.stderr
        r = rayjobs_cli("up", "num_nodes=2", "-c", "rjoffline", timeout=240)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("error: SkyPilot launch of 'rjoffline' failed")
        assert not settings.cluster_file().exists()
    finally:
        subprocess.run([sys.executable, "-c", "import sky; sky.api_stop()"], capture_output=True, timeout=120)
        assert not _our_sky_servers(), "SkyPilot's API server outlived api_stop()"


def _our_sky_servers() -> list[int]:
    """SkyPilot API servers started under this test session's HOME (ours to stop)."""
    mine = f"HOME={os.environ['HOME']}".encode()
    out = []
    for p in Path("/proc").iterdir():
        try:
            if b"sky.server.server" in (p / "cmdline").read_bytes() and mine in (p / "environ").read_bytes().split(b"\0"):
                out.append(int(p.name))
        except OSError:
            continue
    return out


# --------------------------------------------------------------------------- the view
def test_cluster_view_on_the_embedded_head(cluster: Any) -> None:
    r = rayjobs_cli("cluster", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert len(v["nodes"]) == 1 and v["nodes"][0]["head"] and v["name"] == "embedded"
    assert v["gpus_free"] == v["gpus"] - v["gpus_used"]
    # What the node runs (its Ray labels) and what it uses (Ray's own metrics, scraped directly:
    # the embedded head's endpoints are on 127.0.0.1), and no warning: it runs this very client.
    # (Ray's reporter agent publishes a node's first metrics some seconds after the head starts.)
    v = wait_until(lambda: (lambda w: w if w["nodes"][0].get("use") else None)(
        json.loads(rayjobs_cli("cluster", "--json").stdout)), 60, "the head's metrics", every=1.0)
    node = v["nodes"][0]
    assert node["versions"]["rayjobs"] == v["client_versions"]["rayjobs"] and node["versions"]["ray"]
    assert node["use"]["mem_total"] > 0 and node["use"]["cpu_percent"] is not None and node["use"]["gpus"] == []
    assert "scraped directly" in v["metrics"] and v["warnings"] == []
    human = rayjobs_cli("cluster").stdout
    assert "1 node(s)" in human and "jobs:" in human and "versions: rayjobs" in human and "GiB" in human


_GPU_LINES = """\
# HELP ray_node_gpus_utilization Total GPUs usage on a ray node
# TYPE ray_node_gpus_utilization gauge
ray_node_gpus_utilization{{GpuDeviceName="NVIDIA H200",GpuIndex="0",IsHeadNode="false",RayNodeType="worker",SessionName="s",ip="{ip}"}} 87.0
ray_node_gpus_utilization{{GpuDeviceName="NVIDIA H200",GpuIndex="1",IsHeadNode="false",RayNodeType="worker",SessionName="s",ip="{ip}"}} 13.0
# HELP ray_node_gram_used Total GPU RAM usage on a ray node
# TYPE ray_node_gram_used gauge
ray_node_gram_used{{GpuDeviceName="NVIDIA H200",GpuIndex="0",IsHeadNode="false",RayNodeType="worker",SessionName="s",ip="{ip}"}} 61440.0
ray_node_gram_used{{GpuDeviceName="NVIDIA H200",GpuIndex="1",IsHeadNode="false",RayNodeType="worker",SessionName="s",ip="{ip}"}} 1024.0
# HELP ray_node_gram_available Total GPU RAM available on a ray node
# TYPE ray_node_gram_available gauge
ray_node_gram_available{{GpuDeviceName="NVIDIA H200",GpuIndex="0",IsHeadNode="false",RayNodeType="worker",SessionName="s",ip="{ip}"}} 81920.0
ray_node_gram_available{{GpuDeviceName="NVIDIA H200",GpuIndex="1",IsHeadNode="false",RayNodeType="worker",SessionName="s",ip="{ip}"}} 142336.0
"""


def test_gpu_use_per_node_from_the_heads_real_metrics_plus_a_gpu_node(cluster: Any) -> None:
    """The embedded head's real exposition, merged with a GPU node's (Ray's names, labels and MiB
    units, as its reporter agent writes them for two H200s), parses into per-node use."""
    from rayjobs.oncluster import promscrape
    from rayjobs.oncluster.promscrape import per_node
    from rayjobs.oncluster.raydash import RayDash
    from rayjobs.views.nodeuse import gpu_summary

    texts = promscrape.scrape(RayDash(str(cluster.address), cluster.token).metrics_endpoints())
    assert texts and all(isinstance(t, str) for t in texts.values()), texts
    texts["10.0.0.9:8090"] = _GPU_LINES.format(ip="10.0.0.9")
    texts["10.0.0.8:8090"] = OSError("connection refused")  # a node that did not answer
    merged = promscrape.merge(texts)
    assert merged.count("# TYPE ray_node_cpu_utilization gauge") == 1
    assert 'rayjobs_metrics_target_up{target="10.0.0.8:8090"} 0.0' in merged
    use = per_node(promscrape.families(merged))
    assert use["127.0.0.1"]["gpus"] == [] and use["127.0.0.1"]["mem_total"] > 0
    gpus = use["10.0.0.9"]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1] and gpus[0]["name"] == "NVIDIA H200"
    assert gpus[0]["util_percent"] == 87.0 and gpus[0]["mem_used_mib"] == 61440.0 and gpus[0]["mem_total_mib"] == 143360.0
    assert gpu_summary(use["10.0.0.9"]) == "2 GPUs 50% · 61.0/280.0 GiB"
    assert gpu_summary(use["127.0.0.1"]) == "-"


def test_version_warnings_name_the_mismatch() -> None:
    from rayjobs.views.clusterview import version_warnings

    mine = {"rayjobs": "0.1.0", "commit": "a" * 40, "verl": "0.9.1", "torch": "2.13.0"}
    same = {"rayjobs": "0.1.0", "commit": "a" * 12, "verl": "0.9.1", "torch": "2.11.0+cu130"}
    rows = [{"ip": "10.0.0.1", "versions": same}, {"ip": "10.0.0.2", "versions": dict(same)}]
    assert version_warnings(mine, rows) == []  # torch may differ from a laptop's; the nodes agree
    rows[1]["versions"].update(verl="0.8.0", torch="2.9.1")
    rows[0]["versions"]["commit"] = "b" * 12
    w = version_warnings(mine, rows)
    assert any("verl 0.9.1, the cluster 0.8.0, 0.9.1" in x for x in w), w
    assert any(f"rayjobs commit {'a' * 12}, the cluster {'a' * 12}, {'b' * 12}" in x for x in w), w
    assert any(x.startswith("the nodes run different torch: 10.0.0.1 2.11.0+cu130, 10.0.0.2 2.9.1") for x in w), w


def test_cli_help_is_fast_and_lists_the_cluster_commands() -> None:
    import resource

    def cpu() -> float:
        u = resource.getrusage(resource.RUSAGE_CHILDREN)
        return u.ru_utime + u.ru_stime

    t = cpu()
    r = subprocess.run([sys.executable, "-m", "rayjobs.cli", "--help"], capture_output=True, text=True, timeout=60)
    # CPU, not wall time (which a loaded machine stretches): ~0.3 s; 2 s means a heavy import crept in
    assert cpu() - t < 2.0
    for cmd in ("up", "connect", "cluster", "down"):
        assert f"  {cmd} " in r.stdout
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", "import rayjobs.cli"],
                       capture_output=True, text=True, timeout=60)
    assert "| sky" not in r.stderr.replace("|  ", "| ").replace("|  ", "| ")  # SkyPilot only inside commands


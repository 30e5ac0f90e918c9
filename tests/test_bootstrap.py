"""The real node script on a real 3-node Ray cluster (namespaces, fake GPUs), plus the tunnel.

One cluster per module (forming it is the slow part): rank 2 starts before the head, the head and
rank 1 after; SkyPilot's variables are set the way SkyPilot sets them. Then: node and GPU counts,
re-runs change nothing, the dashboard is loopback-only, the Jobs API wants the token, secrets reach
jobs but not their runtime_env, the sentinel follows Ray jobs, ``rayjobs connect`` tunnels through
a real sshd, a crashed + rebooted worker rejoins, a missing rank fails the head's wait by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import netns  # noqa: E402
from nodes import Net, host_pid  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCRIPT = str(REPO / "bootstrap" / "ray_node.py")
SENTINEL = str(REPO / "bootstrap" / "sentinel.py")
PY = sys.executable
GPUS = 2
SECRET = "wandb-" + secrets.token_hex(8)
RANK1_TEMP = "/tmp/rn1"  # inside rank 1's private /tmp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not netns.can_use() or not shutil.which("nsenter"), reason="needs root, ip and nsenter"),
]


_SKY_RUN = """
import sys
from sky.skylet import log_lib
sys.exit(log_lib.run_with_log(sys.argv[1], sys.argv[2], shell=True, stream_logs=True, with_ray=True))
"""


def _wait_for(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} after {timeout} s:\n{path.read_text() if path.exists() else ''}")


class Cluster:
    def __init__(self, net: Net, token: str, storage: Path) -> None:
        self.net, self.token, self.storage = net, token, storage
        self.head = net.nodes[0]

    def env(self, node: Any, **extra: str) -> dict[str, str]:
        # Rank 1 keeps Ray's files in its own temp dir (the knob for several nodes on one host).
        own = {"RAYJOBS_RAY_TEMP_DIR": RANK1_TEMP} if node.rank == 1 else {}
        return {**self.net.skypilot_env(node, GPUS), "RAY_AUTH_TOKEN": self.token, "WANDB_API_KEY": SECRET,
                "RAYJOBS_STORAGE": str(self.storage), "RAYJOBS_JOIN_TIMEOUT": "240", **own, **extra}

    def start(self, node: Any, log: Path, **extra: str) -> subprocess.Popen:
        """The node script the way SkyPilot runs a task's `run`: through its own `run_with_log`,
        whose kill daemon SIGTERMs what it last saw below the script once the script exits."""
        run = f"set -eu; exec {PY} {SCRIPT}"
        return node.popen([PY, "-c", _SKY_RUN, run, str(log.with_suffix(".sky"))], env=self.env(node, **extra),
                          stdout=open(log, "w"), stderr=subprocess.STDOUT)

    def run(self, node: Any, timeout: float = 240, **extra: str) -> subprocess.CompletedProcess:
        return node.run([PY, SCRIPT], env=self.env(node, **extra), timeout=timeout)

    def node_dir(self, node: Any) -> Path:
        return node.home / ".rayjobs" / "node"

    def py(self, node: Any, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Python on ``node`` (its network and processes), with the cluster's token."""
        return node.run([PY, "-c", code], env={"RAY_AUTH_TOKEN": self.token, "SECRET": SECRET}, timeout=timeout)

    def daemons(self, node: Any) -> set[int]:
        """PIDs of the node's long-lived Ray daemons (not job workers, which come and go)."""
        out = set()
        for pid in node.pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if any(k in cmd for k in (b"gcs_server", b"raylet/raylet", b"dashboard.py", b"log_monitor", b"monitor.py")):
                out.add(pid)
        return out


@pytest.fixture(scope="module")
def formed() -> Any:
    net = Net(3)
    net.create()
    storage = net.root / "shared"
    storage.mkdir()
    c = Cluster(net, secrets.token_hex(16), storage)
    logs = {n.rank: net.root / f"first-{n.rank}.log" for n in net.nodes}
    try:
        t0 = time.monotonic()
        early = c.start(net.nodes[2], logs[2])  # a worker that starts before the head
        _wait_for(logs[2], "waiting for the head", 120)
        procs = {2: early, 0: c.start(net.nodes[0], logs[0]), 1: c.start(net.nodes[1], logs[1])}
        rcs = {r: p.wait(timeout=300) for r, p in procs.items()}
        c.formed_s = time.monotonic() - t0
        c.first = {r: (rcs[r], logs[r].read_text()) for r in procs}
        c.first_daemons = {n.rank: c.daemons(n) for n in net.nodes}
        time.sleep(3)  # SkyPilot's kill daemons act within ~1 s of the scripts' exit
        yield c
    finally:
        net.destroy()


def _ready(output: str) -> dict[str, Any]:
    line = [ln for ln in output.splitlines() if ln.startswith("RAYJOBS_READY ")]
    assert line, output[-3000:]
    return json.loads(line[-1].split(" ", 1)[1])


def test_cluster_forms_with_all_nodes_and_gpus(formed: Cluster) -> None:
    for rank, (rc, out) in formed.first.items():
        assert rc == 0, f"rank {rank}:\n{out[-3000:]}"
    rec = _ready(formed.first[0][1])
    assert rec["nodes"] == 3 and rec["gpus"] == 3 * GPUS and rec["gpus_per_node"] == GPUS
    assert rec["node_ips"] == formed.net.ips and rec["gcs"] == f"{formed.head.ip}:6379"
    from importlib.metadata import version

    assert rec["ray_version"] == version("ray") and rec["verl_version"] == version("verl")
    assert rec["storage"] == str(formed.storage)
    assert rec["secrets"] == ["WANDB_API_KEY"]  # names only; Ray's own RAY_AUTH_TOKEN is not a job's
    assert rec["metrics"] == "127.0.0.1:8264" and rec["ray_temp_dir"] == "/tmp/ray"
    on_disk = json.loads((formed.node_dir(formed.head) / "ready.json").read_text())
    assert on_disk == rec
    # Ray outlived SkyPilot's kill daemon (it started no Ray process below the script).
    assert {n.rank: formed.daemons(n) for n in formed.net.nodes} == formed.first_daemons
    assert all(any(b"raylet/raylet" in Path(f"/proc/{p}/cmdline").read_bytes() for p in formed.first_daemons[n.rank])
               for n in formed.net.nodes)
    # So did the head's metrics gateway (it double-forked), serving every node's Ray metrics merged.
    r = formed.py(formed.head, "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8264/metrics', "
                               "timeout=30).read().decode())")
    assert r.returncode == 0, r.stderr
    for ip in formed.net.ips:  # each node's own samples, and each node's endpoint read
        assert f'ip="{ip}"' in r.stdout and f'rayjobs_metrics_target_up{{target="{ip}:8090"}} 1.0' in r.stdout
    assert r.stdout.count("# TYPE ray_node_cpu_utilization gauge") == 1  # one valid exposition
    # Every node labelled itself with what it runs (`rayjobs cluster` shows it per node).
    r = formed.py(formed.head, "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
                               "print(json.dumps([n['Labels'] for n in ray.nodes()]))")
    labels = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(labels) == 3 and all(lb.get("rayjobs.io/verl") == version("verl")
                                    and lb.get("rayjobs.io/ray") == version("ray") for lb in labels), labels
    # The early worker waited for the head, then joined (no fixed sleep: it polled the GCS).
    early = formed.first[2][1]
    assert early.index("waiting for the head") < early.index("joined")
    assert (formed.node_dir(formed.head) / "auth_token").stat().st_mode & 0o777 == 0o600
    # RAYJOBS_RAY_TEMP_DIR: rank 1's Ray session lives there, the others' in Ray's default.
    sessions = {n.rank: json.loads((formed.node_dir(n) / "node.json").read_text())["session_dir"]
                for n in formed.net.nodes}
    assert sessions[1].startswith(RANK1_TEMP + "/session_"), sessions
    assert sessions[0].startswith("/tmp/ray/session_") and sessions[2].startswith("/tmp/ray/session_"), sessions


def test_rerun_changes_nothing(formed: Cluster) -> None:
    before = {n.rank: formed.daemons(n) for n in formed.net.nodes}
    ready = formed.node_dir(formed.head) / "ready.json"
    mtime = ready.stat().st_mtime_ns
    procs = {n.rank: n.popen([PY, SCRIPT], env=formed.env(n)) for n in formed.net.nodes}
    outs = {r: p.communicate(timeout=120)[0] for r, p in procs.items()}
    for r, p in procs.items():
        assert p.returncode == 0, outs[r]
    assert "already running: not starting it again" in outs[0] and "cluster ready (unchanged)" in outs[0]
    assert "nothing to do" in outs[1] and "nothing to do" in outs[2]
    assert "metrics of every node" not in outs[0]  # the gateway answered: not started again
    assert {n.rank: formed.daemons(n) for n in formed.net.nodes} == before
    assert ready.stat().st_mtime_ns == mtime
    assert _ready(outs[0])["ready_at"] == json.loads(ready.read_text())["ready_at"]


_PROBE = """
import socket, sys
for host in sys.argv[1:]:
    addr, port = (host.rsplit(":", 1)[0], int(host.rsplit(":", 1)[1])) if ":" in host else (host, 8265)
    try:
        socket.create_connection((addr, port), timeout=2).close(); print(host, "open")
    except OSError as e:
        print(host, "closed", e.__class__.__name__)
"""


def test_dashboard_listens_on_loopback_only(formed: Cluster) -> None:
    head, worker = formed.head, formed.net.nodes[1]
    r = head.run([PY, "-c", _PROBE, "127.0.0.1", head.ip])
    assert "127.0.0.1 open" in r.stdout and f"{head.ip} closed" in r.stdout, r.stdout + r.stderr
    r = worker.run([PY, "-c", _PROBE, head.ip])
    assert f"{head.ip} closed" in r.stdout, r.stdout + r.stderr
    # The metrics gateway too: every node's metrics, on the head's loopback only.
    r = head.run([PY, "-c", _PROBE, "127.0.0.1:8264", f"{head.ip}:8264"])
    assert "127.0.0.1:8264 open" in r.stdout and f"{head.ip}:8264 closed" in r.stdout, r.stdout + r.stderr


_JOBS = r"""
import json, os, time, urllib.request, urllib.error
tok = os.environ["RAY_AUTH_TOKEN"]
def call(path, body=None, token=None):
    req = urllib.request.Request("http://127.0.0.1:8265" + path, method="POST" if body else "GET",
                                 data=json.dumps(body).encode() if body else None)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
entry = ("python3 -c \"import hashlib, os; e = os.environ; "
         "print('CHECK', hashlib.sha256(e.get('WANDB_API_KEY', '').encode()).hexdigest()[:16], "
         "e.get('RAY_JOB_STOP_WAIT_TIME_S'), e.get('RAYJOBS_STORAGE'), 'RAY_AUTH_TOKEN' in e)\"")
print("NOTOKEN", call("/api/jobs/", {"entrypoint": "id"})[0])
print("WRONG", call("/api/jobs/", {"entrypoint": "id"}, token="x" * 32)[0])
code, body = call("/api/jobs/", {"entrypoint": entry}, token=tok)
sid = json.loads(body)["submission_id"]
for _ in range(600):
    info = json.loads(call("/api/jobs/" + sid, token=tok)[1])
    if info["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
        break
    time.sleep(0.2)
print("STATUS", info["status"])
print("LOGS", json.loads(call("/api/jobs/" + sid + "/logs", token=tok)[1])["logs"].strip())
print("LISTED", os.environ["SECRET"] in call("/api/jobs/", token=tok)[1])
"""


def test_jobs_api_refuses_without_token_and_secrets_stay_out_of_runtime_env(formed: Cluster) -> None:
    r = formed.py(formed.head, _JOBS, timeout=180)
    out = r.stdout
    assert "NOTOKEN 401" in out and "WRONG 403" in out, out + r.stderr[-2000:]
    assert "STATUS SUCCEEDED" in out, out + r.stderr[-2000:]
    # The secret and the queue's head settings reach the job's environment ...
    digest = hashlib.sha256(SECRET.encode()).hexdigest()[:16]
    assert f"CHECK {digest} 60 {formed.storage} False" in out, out
    # ... but the secret is in nothing the Jobs API returns (runtime_env, metadata, entrypoint).
    assert "LISTED False" in out, out


def test_sentinel_lives_while_ray_jobs_run(formed: Cluster) -> None:
    submit = r"""
import json, os, urllib.request
req = urllib.request.Request("http://127.0.0.1:8265/api/jobs/", method="POST",
    data=json.dumps({"entrypoint": "sleep 6"}).encode(),
    headers={"Authorization": "Bearer " + os.environ["RAY_AUTH_TOKEN"], "Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(req, timeout=30).read())["submission_id"])
"""
    sid = formed.py(formed.head, submit).stdout.strip()
    assert sid, "no submission id"
    env = {"HOME": str(formed.head.home), "RAYJOBS_IDLE_MINUTES": "0.05", "RAYJOBS_SENTINEL_POLL_S": "0.3"}
    t0 = time.monotonic()
    sentinel = formed.head.popen([PY, SENTINEL], env=env)
    # prints the (system-wide) monotonic time it last saw the job RUNNING: the job ended after it
    status = r"""
import json, os, sys, time, urllib.request
req = urllib.request.Request("http://127.0.0.1:8265/api/jobs/%s",
    headers={"Authorization": "Bearer " + os.environ["RAY_AUTH_TOKEN"]})
seen = time.monotonic()
while json.loads(urllib.request.urlopen(req, timeout=30).read())["status"] in ("PENDING", "RUNNING"):
    seen = time.monotonic()
    time.sleep(0.2)
print(seen)
""" % sid
    last_running = float(formed.py(formed.head, status, timeout=120).stdout.strip())
    out = sentinel.communicate(timeout=60)[0]
    assert sentinel.returncode == 0, out
    # idle 3 s (0.05 min) after the job's end, seen within a 0.3-s poll of it
    assert time.monotonic() - last_running >= 2.0, out
    assert last_running - t0 >= 3.0, "the job (sleep 6) ended before the sentinel was up"
    assert "busy" in out or "keeping the cluster up" in out
    # A second sentinel on the same node leaves at once (one per node).
    lock_holder = formed.head.popen([PY, SENTINEL], env={**env, "RAYJOBS_IDLE_MINUTES": "1"})
    time.sleep(0.5)
    second = formed.head.run([PY, SENTINEL], env=env, timeout=60)
    assert second.returncode == 0 and "already running" in second.stderr
    os.kill(host_pid(lock_holder), signal.SIGTERM)
    lock_holder.wait(timeout=30)


_SSHD = """\
ListenAddress {ip}
Port 22
HostKey {d}/host_key
AuthorizedKeysFile {d}/authorized_keys
PidFile {d}/sshd.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding yes
"""


def test_connect_tunnels_through_ssh_and_is_reused(formed: Cluster) -> None:
    if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        pytest.skip("openssh-server is not installed (.ci/apt-packages.txt)")
    net, head = formed.net, formed.head
    d = net.root / "ssh"
    d.mkdir()
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    (d / "sshd_config").write_text(_SSHD.format(ip=head.ip, d=d))
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation dir
    sshd = head.popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")])
    sshd_pid = host_pid(sshd)
    laptop = net.add_host("lap", f"{net.subnet}.100")
    (d / "config").write_text(
        f"Host rjtest\n  HostName {head.ip}\n  User root\n  IdentityFile {d}/user_key\n"
        f"  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYJOBS_"))}
    env.update(HOME=str(laptop.dir), RAYJOBS_HOME=str(laptop.dir / "rj"), RAYJOBS_SSH_CONFIG=str(d / "config"),
               RAYJOBS_REMOTE_NODE_DIR=str(formed.node_dir(head)))
    cli = [PY, "-m", "rayjobs.cli"]
    try:
        # The laptop cannot reach the dashboard directly ...
        assert f"{head.ip} closed" in laptop.run([PY, "-c", _PROBE, head.ip]).stdout
        # ... `rayjobs connect` reaches it through SSH and remembers the cluster.
        r = laptop.run(cli + ["connect", "rjtest"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        url = r.stdout.strip()
        # ... and says how to see every node's metrics, with Prometheus/Grafana on the head's loopback.
        assert "every node's Ray metrics" in r.stderr and "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml" \
            in r.stderr and "--web.listen-address=127.0.0.1:9090" in r.stderr, r.stderr
        assert url.startswith("http://127.0.0.1:"), r.stdout
        rec = json.loads((laptop.dir / "rj" / "cluster.json").read_text())
        assert rec["name"] == "rjtest" and rec["address"] == url and rec["nodes"] == 3
        assert rec["gpus_per_node"] == GPUS and rec["storage"] == str(formed.storage)
        assert rec["secrets"] == ["WANDB_API_KEY"]  # kept for preflight's secret check (names only)
        tok = Path(rec["token_path"])
        assert tok.read_text().strip() == formed.token and tok.stat().st_mode & 0o777 == 0o600
        pid = rec["tunnel"]["pid"]
        # Later commands need no address: `rayjobs cluster` goes through the tunnel, with the token.
        r = laptop.run(cli + ["cluster", "--json"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        view = json.loads(r.stdout)
        assert len(view["nodes"]) == 3 and view["gpus"] == 3 * GPUS and view["gpus_free"] == 3 * GPUS
        assert [n["head"] for n in view["nodes"]] == [True, False, False]
        # Per-node use from Ray's own metrics, read by the head (GET /v1/cluster through the tunnelled
        # queue API: the laptop reaches no node's metrics port itself; the gateway stays tunnelled for
        # Prometheus). Fake GPUs have no NVML: no GPU samples, said as "-".
        assert rec["metrics"].startswith("http://127.0.0.1:")
        assert re.fullmatch(r"(\d+) of \1 endpoint\(s\) scraped directly", view["metrics"]), view["metrics"]
        for n in view["nodes"]:
            assert n["use"]["mem_total"] > 0 and n["use"]["cpu_percent"] is not None and n["use"]["gpus"] == []
            assert n["versions"]["verl"] == view["client_versions"]["verl"]
        assert view["warnings"] == [], view["warnings"]
        human = laptop.run(cli + ["cluster"], env=env, timeout=120).stdout
        assert "3 node(s)" in human and "GPUs 0 used / 6 free / 6 total" in human, human
        assert "versions: rayjobs" in human and "(every node)" in human and "endpoint(s) scraped directly" in human, human
        # Without the token the tunnel gets a 401, like anyone else.
        noauth = laptop.run([PY, "-c", f"import urllib.request as u\ntry: u.urlopen('{url}/api/jobs/')\n"
                             "except Exception as e: print(getattr(e, 'code', e))"])
        assert noauth.stdout.strip() == "401"
        # A second connect reuses the live tunnel.
        r = laptop.run(cli + ["connect"], env=env, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == url and "reusing" in r.stderr
        assert json.loads((laptop.dir / "rj" / "cluster.json").read_text())["tunnel"]["pid"] == pid
        r = laptop.run(cli + ["connect", "--close"], env=env, timeout=60)
        assert r.returncode == 0 and "tunnel closed" in r.stderr
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists() or b"ssh" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert not (laptop.dir / "rj" / "cluster.json").exists()
    finally:
        os.kill(sshd_pid, signal.SIGTERM)
        sshd.wait(timeout=30)


def test_missing_rank_fails_the_head_naming_it(formed: Cluster) -> None:
    ghost = f"{formed.net.subnet}.13"  # rank 3: no such machine
    env = {"SKYPILOT_NODE_IPS": "\n".join(formed.net.ips + [ghost]), "SKYPILOT_NUM_NODES": "4",
           "RAYJOBS_JOIN_TIMEOUT": "3"}
    t0 = time.monotonic()
    r = formed.run(formed.head, timeout=120, **env)
    assert r.returncode == 1, r.stderr
    assert f"rank(s) 3 ({ghost}) did not join" in r.stderr, r.stderr
    assert "3 of 4 nodes present" in r.stderr
    assert time.monotonic() - t0 < 60


def test_crashed_worker_rejoins_after_reboot(formed: Cluster) -> None:
    node = formed.net.nodes[2]
    old_id = json.loads((formed.node_dir(node) / "node.json").read_text())["node_id"]
    node.crash()  # every process of the machine dies (SIGKILL)
    node.boot()  # same address and disk, nothing running
    r = formed.run(node, timeout=240)
    assert r.returncode == 0 and "joined" in r.stderr, r.stderr
    new_id = json.loads((formed.node_dir(node) / "node.json").read_text())["node_id"]
    assert new_id and new_id != old_id
    r = formed.run(formed.head, timeout=240)
    assert r.returncode == 0, r.stderr
    rec = _ready(r.stdout)
    assert rec["nodes"] == 3 and rec["gpus"] == 3 * GPUS


def test_node_script_refuses_without_skypilot_variables(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYPILOT_")}
    r = subprocess.run([PY, SCRIPT], env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "SKYPILOT_NODE_RANK is not set" in r.stderr
    env.update(SKYPILOT_NODE_RANK="2", SKYPILOT_NODE_IPS="10.0.0.1\n10.0.0.2", SKYPILOT_NUM_NODES="3")
    r = subprocess.run([PY, SCRIPT], env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "lists 2 address(es) for 3 node(s)" in r.stderr

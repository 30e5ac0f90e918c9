#!/usr/bin/env python3
"""Form rayjobs' Ray cluster on one SkyPilot node (run on every node by ``cluster.yaml``'s ``run``).

Rank-aware, idempotent, no fixed sleeps:

* rank 0 starts the Ray head on ``RAYJOBS_RAY_PORT`` (6379) with the dashboard / Jobs API on
  127.0.0.1:``RAYJOBS_DASHBOARD_PORT`` (8265), a dashboard-agent port that is not SkyPilot's 52365,
  ``--num-gpus=$SKYPILOT_NUM_GPUS_PER_NODE``, token auth and the head settings the rayjobs queue and
  stop rely on (``rayjobs.shared.HEAD_ENV``). It then polls the GCS until every rank's node and
  every GPU is present and the Jobs API answers, and writes the readiness record
  (``$RAYJOBS_NODE_DIR/ready.json``: nodes, GPUs, Ray/verl/rayjobs versions). After
  ``RAYJOBS_JOIN_TIMEOUT`` seconds it fails, naming the ranks that are missing.
* other ranks poll the head's GCS (bounded) and join as soon as it answers (not waiting, as Ray
  would, for the head's raylet to register).
* fast where Ray is slow: the head's dashboard starts alongside its raylet (Ray's own order makes
  every worker wait for the dashboard's start-up), and loads only the modules rayjobs uses
  (``RAYJOBS_DASHBOARD_MODULES``: JobHead,NodeHead,StateHead,ReportHead,EventHead,MetricsHead; ``all`` for
  Ray's whole UI): UsageStatsHead's cloud-metadata probes block the Jobs API for ~8 s where no
  metadata endpoint answers (k8s pods, no uplink). Ray's processes are started by a double-forked
  helper, never below this script: SkyPilot SIGTERMs what it last saw below a `run` script when
  the script exits.
* every node labels itself with its versions (``rayjobs.io/verl=0.9.1``, ``rayjobs.io/commit=...``:
  `rayjobs cluster` shows them) and exports Ray's Prometheus metrics on a fixed port; the head
  serves them all, merged, on its loopback (``rayjobs.oncluster.metricsgateway``), which
  ``rayjobs connect`` tunnels, and loads Ray's MetricsHead, which writes Ray's Prometheus and
  Grafana configs and dashboards into the head's session dir.
* a node whose Ray is already part of the cluster changes nothing; a node whose Ray is gone
  (reboot, crash) starts it again and rejoins. It never runs Ray's stop command: SkyPilot's own Ray
  (6380/8266/8076, agent 52365) runs on the same machine. Stale processes of *our* previous
  session (recorded in ``node.json``) are ended by PID, only when the head no longer knows the node.
* secrets (``WANDB_API_KEY``, ``HF_TOKEN``, ...) present in this script's environment (SkyPilot
  ``secrets``) reach the Ray processes' environment, hence the jobs', never a job's runtime_env.
  The auth token arrives as ``RAY_AUTH_TOKEN`` (a SkyPilot secret set by ``rayjobs up``) and is kept
  in a 0600 file; Ray gets only its path.

Inputs: SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS (newline-separated), SKYPILOT_NUM_NODES,
SKYPILOT_NUM_GPUS_PER_NODE; knobs RAYJOBS_NODE_DIR (~/.rayjobs/node), RAYJOBS_JOIN_TIMEOUT (900),
RAYJOBS_RAY_PORT, RAYJOBS_DASHBOARD_PORT, RAYJOBS_AGENT_PORT (52366), RAYJOBS_CLIENT_PORT (none),
RAYJOBS_STORAGE (the shared root, recorded and passed to jobs), RAYJOBS_QUEUE_NAME (the queue's store
there; default: the SkyPilot cluster's name from SKYPILOT_CLUSTER_INFO), RAYJOBS_SECRETS (the secret names
`rayjobs up` forwarded, comma-separated), RAYJOBS_RAY_TEMP_DIR (several nodes on one host only),
RAYJOBS_METRICS_EXPORT_PORT (8090: each node's Ray metrics; 0 = Ray picks),
RAYJOBS_METRICS_PORT (8264: the head's loopback metrics gateway; 0 = none), RAYJOBS_DOOR (loopback;
network: the head's door also over TLS on its address, port RAYJOBS_DOOR_PORT 8443), RAYJOBS_COMMIT (the
rayjobs commit, shown per node), RAYJOBS_NUM_CPUS (the CPUs Ray offers; default: all). Exit 0 = this node is in the cluster
(and, on rank 0, the cluster is complete); 1 = it is not (one line on stderr says why).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[rayjobs-node {time.monotonic() - T0:6.2f}s] {msg}", file=sys.stderr, flush=True)


class Failed(SystemExit):
    """A one-line failure (``error: ...`` on stderr, exit 1)."""

    def __init__(self, msg: str) -> None:
        super().__init__(1)
        self.msg = msg


def fail(msg: str) -> "None":
    print(f"error: {msg}", file=sys.stderr, flush=True)
    raise Failed(msg)


# --------------------------------------------------------------------------- configuration
class Config:
    def __init__(self, env: dict[str, str]) -> None:
        try:
            self.rank = int(env["SKYPILOT_NODE_RANK"])
        except (KeyError, ValueError):
            fail("SKYPILOT_NODE_RANK is not set: run this from a SkyPilot task's `run` (or set it)")
        self.ips = [line.strip() for line in env.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip()]
        self.num_nodes = int(env.get("SKYPILOT_NUM_NODES") or len(self.ips) or 1)
        if len(self.ips) < self.num_nodes or self.rank >= self.num_nodes:
            fail(f"SKYPILOT_NODE_IPS lists {len(self.ips)} address(es) for {self.num_nodes} node(s) (rank {self.rank})")
        self.gpus = int(float(env.get("SKYPILOT_NUM_GPUS_PER_NODE") or 0))
        # CPUs Ray offers on this node (default: all it sees); verl takes 3 per GPU bundle.
        self.cpus = int(env["RAYJOBS_NUM_CPUS"]) if env.get("RAYJOBS_NUM_CPUS") else None
        self.ip = self.ips[self.rank]
        self.head_ip = self.ips[0]
        self.port = int(env.get("RAYJOBS_RAY_PORT", 6379))
        self.dashboard_port = int(env.get("RAYJOBS_DASHBOARD_PORT", 8265))
        self.agent_port = int(env.get("RAYJOBS_AGENT_PORT", 52366))  # SkyPilot's Ray uses 52365
        # Ray Client (ray://) server on the head: off unless asked for (rayjobs uses the Jobs API;
        # SkyPilot's Ray has 10001). The `ray start` CLI always starts one: on 10011 then.
        self.client_port = int(env["RAYJOBS_CLIENT_PORT"]) if env.get("RAYJOBS_CLIENT_PORT") else None
        self.timeout = float(env.get("RAYJOBS_JOIN_TIMEOUT", 900))
        self.dir = Path(env.get("RAYJOBS_NODE_DIR") or Path.home() / ".rayjobs" / "node").expanduser()
        self.storage = env.get("RAYJOBS_STORAGE", "")
        # Ray's temp dir on this node (default: Ray's, /tmp/ray). Only for several nodes on ONE
        # host (a test or a lent 2-GPU machine): nodes sharing a temp dir share runtime_resources/,
        # and one node's runtime-env agent then unpacks a working_dir again under another's jobs.
        self.temp_dir = env.get("RAYJOBS_RAY_TEMP_DIR") or None
        if self.temp_dir and not os.path.isabs(self.temp_dir):
            fail(f"RAYJOBS_RAY_TEMP_DIR={self.temp_dir!r} must be an absolute path")
        # Every node's Prometheus metrics (Ray's own, GPU use included) on a fixed port, so a
        # firewall rule or a scrape config can name it; 0 lets Ray pick (several nodes on one host).
        self.metrics_export_port = int(env.get("RAYJOBS_METRICS_EXPORT_PORT", 8090))
        # The head's metrics gateway (rayjobs.oncluster.metricsgateway): every node's metrics in
        # one scrape, on the head's loopback only; `rayjobs connect` tunnels it. 0: none.
        self.metrics_port = int(env.get("RAYJOBS_METRICS_PORT", 8264))
        # The door (the queue API): on the head's loopback only, or ALSO over TLS on this node's
        # address for teammates (`rayjobs up door=network`); Ray's own ports stay as they are.
        self.door = (env.get("RAYJOBS_DOOR") or "loopback").strip().lower()
        if self.door not in ("loopback", "network"):
            fail(f"RAYJOBS_DOOR={self.door!r}: loopback or network")
        self.door_port = int(env.get("RAYJOBS_DOOR_PORT", 8443))
        mods = env.get("RAYJOBS_DASHBOARD_MODULES", "JobHead,NodeHead,StateHead,ReportHead,EventHead,MetricsHead")
        self.dashboard_modules = None if mods.strip().lower() in ("", "all") else mods
        self.gcs = f"{self.head_ip}:{self.port}"

    @property
    def head(self) -> bool:
        return self.rank == 0


# --------------------------------------------------------------------------- environment of Ray
def head_env() -> dict[str, str]:
    """rayjobs' head settings (long job start timeout, 60 s stop grace, no usage stats)."""
    try:
        from rayjobs.shared import HEAD_ENV
    except ImportError:
        fail("rayjobs is not importable here: the task's setup installs it (pip install rayjobs)")
    env = dict(HEAD_ENV)
    # That switch keeps the *embedded* head on 127.0.0.1; it also refuses other nodes.
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    return env


def token_file(cfg: Config) -> Path:
    """The cluster's auth token as a 0600 file; Ray gets only its path.

    From the RAY_AUTH_TOKEN secret, except while this node's Ray runs with the file it has (a new
    token would lock the running cluster out; the running one is kept, with a warning).
    """
    path = cfg.dir / "auth_token"
    given = os.environ.pop("RAY_AUTH_TOKEN", "").strip()
    current = path.read_text().strip() if path.exists() else ""
    if given and given != current:
        if current and stale_pids(cfg):
            log("warning: RAY_AUTH_TOKEN differs from the token this node's running Ray uses; keeping the running one")
        else:
            _write_secret(path, given)
    elif not given and not current:
        if cfg.num_nodes > 1:
            fail("no RAY_AUTH_TOKEN secret and no token file: launch with `rayjobs up` (it passes one), "
                 "or `sky launch --secret RAY_AUTH_TOKEN=<same value on all nodes>`")
        _write_secret(path, secrets.token_hex(32))
    return path


def _write_secret(path: Path, value: str) -> None:
    from rayjobs.contract.files import write_atomic

    write_atomic(path, value.encode(), mode=0o600)  # fsync'd: a node lost mid-write keeps the old token


def queue_name(cfg: Config, env: dict[str, str]) -> str:
    """The name of this cluster's queue store on the storage root (``<storage>/queue/<name>``): the
    cluster's, never its address's, so two clusters on one bucket keep their queues apart and a
    cluster keeps its backlog across `rayjobs down` and `up` of the same name. RAYJOBS_QUEUE_NAME as
    given, else the SkyPilot cluster's name, else an id made once and kept in the node dir."""
    from rayjobs.shared import QUEUE_NAME_ENV, made_once_id, queue_name_ok, skypilot_cluster_name

    given = env.get(QUEUE_NAME_ENV, "").strip()
    if given and not queue_name_ok(given):
        fail(f"{QUEUE_NAME_ENV}={given!r} cannot name the queue's store: use letters, digits and _ . - (at most 64)")
    return given or skypilot_cluster_name(env) or made_once_id(str(cfg.dir / "cluster_id"))


def prepare_env(cfg: Config) -> None:
    """This process' environment becomes the Ray processes' (and so every job's)."""
    cfg.dir.mkdir(parents=True, exist_ok=True)
    tok = token_file(cfg)
    os.environ.update(head_env())
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(tok))
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        os.environ.pop(var, None)
    if cfg.storage:
        os.environ["RAYJOBS_STORAGE"] = cfg.storage
    if cfg.head:  # the queue (on the head) submits the jobs it admits to this dashboard, keeps its store by name
        os.environ["RAYJOBS_DASHBOARD"] = f"http://127.0.0.1:{cfg.dashboard_port}"
        os.environ["RAYJOBS_QUEUE_NAME"] = queue_name(cfg, dict(os.environ))
        log(f"the queue's store: {cfg.storage or '<storage>'}/queue/{os.environ['RAYJOBS_QUEUE_NAME']}")
    os.environ.pop("RAYJOBS_DOOR_ADDRESS", None)
    if cfg.head and cfg.door == "network":  # the queue's door, TLS on this address (rayjobs.door.host)
        os.environ["RAYJOBS_DOOR_ADDRESS"] = f"{cfg.ip}:{cfg.door_port}"
    node_cache()
    # Entrypoints run with the PATH of `ray start`: this interpreter's python3 comes first.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    log(f"secrets for the Ray processes: {', '.join(v for v in _forwarded() if os.environ.get(v)) or 'none'}")


def node_cache() -> None:
    """Create this node's cache dir for the jobs (``$RAYJOBS_NODE_CACHE``, default as in
    ``rayjobs.oncluster.nodecache.NODE_CACHE_DEFAULT``) and pass its path to the Ray processes;
    each job's runner points vLLM's, torch's and Triton's caches into it (issue 33)."""
    root = os.environ.get("RAYJOBS_NODE_CACHE", f"/tmp/rayjobs-cache-{os.getuid()}").strip()
    if root.lower() in ("", "0", "off", "false", "none"):
        return
    try:
        Path(root).expanduser().mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log(f"warning: cannot create the node cache {root} ({e.strerror}): jobs keep their default caches")
        return
    os.environ["RAYJOBS_NODE_CACHE"] = root


# --------------------------------------------------------------------------- probes
def tcp_open(ip: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


_GCS: dict[str, Any] = {}


def gcs(address: str) -> Any:
    from ray._raylet import GcsClient

    if address not in _GCS:
        _GCS[address] = GcsClient(address=address)
    return _GCS[address]


def alive_nodes(address: str, timeout: float = 2.0) -> Optional[list[dict[str, Any]]]:
    """ALIVE nodes of the cluster at ``address`` (ip, gpus, head), or None if its GCS does not answer."""
    if not tcp_open(*_split(address)):
        return None
    try:
        from ray.core.generated.gcs_pb2 import GcsNodeInfo

        infos = gcs(address).get_all_node_info(timeout=timeout, state_filter=GcsNodeInfo.GcsNodeState.ALIVE)
    except Exception:
        _GCS.pop(address, None)
        return None
    return [{"ip": i.node_manager_address, "gpus": float(i.resources_total.get("GPU", 0)),
             "head": bool(i.is_head_node), "id": i.node_id.hex()} for i in infos.values()]


def _split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def jobs_api_up(cfg: Config) -> bool:
    """The Jobs API would take a job now: it answers on the head's loopback (401 without a token
    still means up) and the head's job agent is known to it (else a submission waits for it)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{cfg.dashboard_port}/api/version", timeout=1) as r:
            if r.status != 200:
                return False
    except urllib.error.HTTPError as e:
        if e.code not in (401, 403):
            return False
    except Exception:
        return False
    try:
        client = gcs(cfg.gcs)
        head_id = client.internal_kv_get(b"head_node_id", namespace=b"job", timeout=2)
        agent = b"DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX:" + head_id if head_id else b""
        return bool(head_id) and bool(client.internal_kv_get(agent, namespace=b"dashboard", timeout=2))
    except Exception:
        _GCS.pop(cfg.gcs, None)
        return False


def session_known(cfg: Config) -> bool:
    try:
        return bool(gcs(cfg.gcs).internal_kv_get(b"session_name", namespace=b"session", timeout=2))
    except Exception:
        _GCS.pop(cfg.gcs, None)
        return False


def recorded(cfg: Config) -> dict[str, Any]:
    """What this node's last `ray start` recorded (session dir, node id, head)."""
    try:
        return json.loads((cfg.dir / "node.json").read_text())
    except (OSError, ValueError):
        return {}


def healthy(cfg: Config, nodes: Optional[list[dict[str, Any]]]) -> bool:
    """This node's Ray is part of the cluster: the head lists our node id as ALIVE *and* our
    raylet runs here (after a crash or reboot the head may list the dead node for a while)."""
    rec = recorded(cfg)
    if not nodes or rec.get("gcs") != cfg.gcs or not any(n["id"] == rec.get("node_id") for n in nodes):
        return False
    return any(b"raylet" in cmd for cmd in _session_cmdlines(rec.get("session_dir", "")).values())


# --------------------------------------------------------------------------- starting Ray
def _session_cmdlines(session: str) -> dict[int, bytes]:
    """Command lines of this node's processes that belong to Ray session dir ``session``."""
    out: dict[int, bytes] = {}
    if not session:
        return out
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if session.encode() in cmd:
                out[int(p.name)] = cmd
    return out


def stale_pids(cfg: Config) -> list[int]:
    """PIDs of our previous Ray session on this node (matched by its session dir), if any live."""
    return sorted(_session_cmdlines(recorded(cfg).get("session_dir", "")))


def end_stale(cfg: Config) -> None:
    pids = stale_pids(cfg)
    if pids:
        log(f"ending {len(pids)} process(es) of this node's previous Ray session (the head no longer knows it)")
        end_pids(pids)


def end_failed_start(cfg: Config) -> None:
    """End what a start that failed left of its new session (its GCS still answers with that
    session's name, so the next run's start was refused: "Session name ... does not match")."""
    session = os.path.realpath(os.path.join(ray_temp_dir(cfg), "session_latest"))
    if session == recorded(cfg).get("session_dir") or not os.path.isdir(session):
        return  # no new session was made (or it is the one this node runs)
    pids = sorted(_session_cmdlines(session))
    if pids:
        log(f"ending {len(pids)} process(es) the failed start left ({os.path.basename(session)})")
        end_pids(pids)


def end_pids(pids: list[int]) -> None:
    """SIGTERM, then SIGKILL, each waited for (bounded: 10 s each)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_running(p) for p in pids):
            time.sleep(0.1)


def _running(pid: int) -> bool:
    """Is ``pid`` a process that still runs (a zombie, ended but not yet reaped, does not)?"""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Starter:
    """Starts this node's Ray in a detached process, prepared early and told when to go.

    SkyPilot runs `run` under a kill daemon that, when the script exits, SIGTERMs every process
    it last saw below it. Ray's daemons must never be below this script, so a double-forked
    starter (reparented away at once) starts them. It is spawned at the beginning, imports Ray
    while we probe the cluster (off the critical path), then waits for `go` or `cancel`.
    """

    def __init__(self, cfg: Config) -> None:
        import subprocess

        self.cfg = cfg
        self.base = cfg.dir / f"start.{os.getpid()}"
        for ext in (".go", ".cancel", ".json", ".pid"):
            self.base.with_suffix(ext).unlink(missing_ok=True)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--start", str(self.base), str(os.getpid())],
                       check=True, stdin=subprocess.DEVNULL, timeout=60)  # returns once it has forked

    def cancel(self) -> None:
        self.base.with_suffix(".cancel").touch()

    def go(self) -> str:
        """Start Ray now; returns the new node id (remembered with the session dir in node.json)."""
        cfg = self.cfg
        self.base.with_suffix(".go").touch()
        result, pid_file = self.base.with_suffix(".json"), self.base.with_suffix(".pid")
        deadline = time.monotonic() + max(cfg.timeout, 120)
        while not result.exists():
            pid = pid_file.read_text().strip() if pid_file.exists() else ""
            gone = pid and not Path(f"/proc/{pid}").exists() and not result.exists()
            if gone or time.monotonic() > deadline:
                fail(f"starting Ray on rank {cfg.rank} ({cfg.ip}) did not finish (starter gone or timed out)")
            time.sleep(0.02)
        out = json.loads(result.read_text())
        for ext in (".go", ".json", ".pid"):
            self.base.with_suffix(ext).unlink(missing_ok=True)
        if out.get("error"):
            end_failed_start(cfg)  # so running the script again starts clean
            raise Failed(out["error"])  # the starter already printed it
        node_id = out.get("node_id", "")
        session = os.path.realpath(os.path.join(ray_temp_dir(cfg), "session_latest"))
        old_id = recorded(cfg).get("node_id")
        deadline = time.monotonic() + 60
        while not node_id and time.monotonic() < deadline:  # the CLI does not say: ask the head
            ids = [n["id"] for n in alive_nodes(cfg.gcs) or [] if n["ip"] == cfg.ip and n["id"] != old_id]
            node_id = ids[0] if len(ids) == 1 else ""
            time.sleep(0 if node_id else 0.2)
        rec = {"session_dir": session, "gcs": cfg.gcs, "ip": cfg.ip, "node_id": node_id}
        (cfg.dir / "node.json").write_text(json.dumps(rec))
        return node_id


def ray_temp_dir(cfg: Config) -> str:
    """This node's Ray temp dir: RAYJOBS_RAY_TEMP_DIR, else Ray's default (honours RAY_TMPDIR/TMPDIR)."""
    if cfg.temp_dir:
        return cfg.temp_dir
    from ray._common.utils import get_default_ray_temp_dir

    return get_default_ray_temp_dir()


def detached_start(base: Path, parent: int) -> None:
    """``--start BASE PARENT``: double-fork; in the grandchild import Ray, wait for BASE.go (or
    BASE.cancel, or PARENT gone), start Ray, write BASE.json, exit."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    base.with_suffix(".pid").write_text(str(os.getpid()))
    out: dict[str, Any] = {}
    try:
        cfg = Config(dict(os.environ))
        cli = os.environ.get("RAYJOBS_RAY_START") == "cli"
        if cli:
            import ray.scripts.scripts  # noqa: F401
        else:
            import ray._private.node  # noqa: F401
        deadline = time.monotonic() + cfg.timeout + 120
        while not base.with_suffix(".go").exists():
            if base.with_suffix(".cancel").exists() or not Path(f"/proc/{parent}").exists() \
                    or time.monotonic() > deadline:
                base.with_suffix(".cancel").unlink(missing_ok=True)
                base.with_suffix(".pid").unlink(missing_ok=True)
                os._exit(0)
            time.sleep(0.02)
        out["node_id"] = _start_cli(cfg) if cli else _start_fast(cfg)
    except Failed as e:
        out["error"] = e.msg
    except BaseException as e:  # noqa: BLE001  (the parent must hear about anything)
        out["error"] = f"starting Ray failed: {e.__class__.__name__}: {' '.join(str(e).split())[:300]}"
        print(f"error: {out['error']}", file=sys.stderr, flush=True)
    from rayjobs.contract.files import write_atomic

    write_atomic(base.with_suffix(".json"), json.dumps(out).encode())
    for t in DASHBOARD:  # the node script already waits for the Jobs API; we only stay around
        t.join(timeout=600)
    sys.stderr.flush()
    os._exit(0)


def _start_fast(cfg: Config) -> str:
    """What ``ray start`` does, without importing its CLI module.

    ``ray.scripts.scripts`` costs ~1.3 CPU-s to import (autoscaler, dashboard helpers); the node
    itself needs ``RayParams`` + ``Node`` only (~0.3 s). The arguments mirror ``ray start``'s
    defaults (Ray 2.52-2.60). If this Ray lays them out differently, we fall back to the CLI before
    anything was started. ``RAYJOBS_RAY_START=cli`` forces the CLI.
    """
    try:
        import ray._private.node as ray_node
        from ray._private.authentication.authentication_token_setup import (
            ensure_token_if_auth_enabled, maybe_enable_token_auth_if_token_available)
        from ray._private.utils import write_ray_address

        params = _ray_params(cfg)
    except (ImportError, TypeError, AttributeError) as e:
        log(f"this Ray's internals differ ({e.__class__.__name__}: {e}); using the `ray start` CLI")
        return _start_cli(cfg)
    if cfg.head:
        params.gcs_server_port = cfg.port
        maybe_enable_token_auth_if_token_available()
    else:
        params.gcs_address = cfg.gcs
    try:
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)
        if not cfg.head:
            _patch_head_lookup(ray_node, ray_temp_dir(cfg))
            node = ray_node.Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
            write_ray_address(cfg.gcs, node.get_temp_dir_path())
            return node.node_id
        node = _start_head_node(ray_node, params, cfg)
        write_ray_address(node.address, node.get_temp_dir_path())
        return node.node_id
    except Exception as e:
        fail(f"starting Ray failed on rank {cfg.rank} ({cfg.ip}): {' '.join(str(e).split())[:400]}")
    return ""


def _ray_params(cfg: Config) -> Any:
    """``RayParams`` as ``ray start`` would make them for this node (Ray 2.52-2.60)."""
    from ray._private.parameter import RayParams
    from ray._private.resource_isolation_config import ResourceIsolationConfig

    return RayParams(
        node_ip_address=cfg.ip, node_name=cfg.ip, num_gpus=cfg.gpus, num_cpus=cfg.cpus, resources={}, labels=node_labels(),
        metrics_export_port=cfg.metrics_export_port or None,
        min_worker_port=20002, max_worker_port=29999,  # SkyPilot's Ray: 11002-19999
        node_manager_port=0, ray_client_server_port=cfg.client_port if cfg.head else None,
        temp_dir=cfg.temp_dir,
        redis_username="", redis_password="", huge_pages=False, enable_object_reconstruction=False,
        include_dashboard=True if cfg.head else None, dashboard_host="127.0.0.1",
        dashboard_port=cfg.dashboard_port, dashboard_agent_listen_port=cfg.agent_port,
        no_monitor=False, ray_debugger_external=False,
        resource_isolation_config=ResourceIsolationConfig(
            enable_resource_isolation=False, cgroup_path=None, system_reserved_cpu=None,
            system_reserved_memory=None),
    )


def node_labels() -> dict[str, str]:
    """This node's versions as Ray node labels (``rayjobs.io/verl=0.9.1``, ...): `rayjobs cluster`
    shows what each node runs and warns where the client differs."""
    try:
        from rayjobs.shared import stack_versions, version_labels
    except ImportError:
        return {}
    return version_labels(stack_versions())


def _start_head_node(ray_node: Any, params: Any, cfg: Config) -> Any:
    """The head's ``Node``, its dashboard started in a thread beside the raylet.

    Ray starts the head's dashboard and waits for it *before* the head's raylet, and every worker
    waits for the head's raylet: the dashboard's start-up (seconds of imports) would sit on the
    whole cluster's critical path. It starts in a thread instead, alongside the raylet (a raylet
    started before the dashboard's URL is known is what a worker node has anyway); the starter
    leaves once the dashboard is up, after telling the node script.
    """
    import threading

    api = ray_node.Node.start_api_server
    _patch_dashboard_modules(cfg.dashboard_modules)

    def in_background(self: Any, **kw: Any) -> None:
        def run() -> None:
            try:
                api(self, **kw)
            except Exception as e:  # noqa: BLE001  (the node script's wait reports it)
                log(f"error: the dashboard did not start: {' '.join(str(e).split())[:300]}")
        DASHBOARD.append(threading.Thread(target=run, daemon=True))
        DASHBOARD[-1].start()

    ray_node.Node.start_api_server = in_background
    try:
        return ray_node.Node(params, head=True, shutdown_at_exit=False, spawn_reaper=False)
    finally:
        ray_node.Node.start_api_server = api


def _patch_head_lookup(ray_node: Any, tmp: str) -> None:
    """Let a worker start without waiting for the head's raylet.

    A worker's ``Node`` asks the GCS for the head node's record only for its temp and session
    dirs, and until the head's raylet has registered it re-asks every 2 s. Both dirs are known as
    soon as the GCS is up: the default temp dir (the head uses it too) and the session name the
    head writes to the GCS first thing. If the head has registered, its own record is used.
    """
    real = getattr(ray_node, "get_all_node_info_until_retrieved", None)
    if real is None:
        return
    from types import SimpleNamespace

    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    def lookup(gcs_client: Any, *a: Any, node_selectors: Any = None, **kw: Any) -> Any:
        if node_selectors and all(getattr(sel, "is_head_node", False) for sel in node_selectors):
            try:
                found = list(gcs_client.get_all_node_info(timeout=5, node_selectors=node_selectors).values())
                name = gcs_client.internal_kv_get(b"session_name", namespace=b"session", timeout=5)
            except Exception:
                found, name = [], None
            if found:
                return found
            if name:
                return [SimpleNamespace(state=GcsNodeInfo.GcsNodeState.ALIVE, temp_dir=tmp,
                                        session_dir=os.path.join(tmp, name.decode()))]
        return real(gcs_client, *a, node_selectors=node_selectors, **kw)

    ray_node.get_all_node_info_until_retrieved = lookup


#: The head's dashboard start-up thread (the starter waits for it before leaving).
DASHBOARD: list = []


def _patch_dashboard_modules(modules: Optional[str]) -> None:
    """Load only these dashboard modules (``--modules-to-load``); None = all of Ray's.

    The Jobs API answers only once *every* module's subprocess is up, and rayjobs needs few: the
    Jobs API (JobHead: /api/jobs, /api/version; NodeHead records the head node id it needs), the
    state API (StateHead: /api/v0/nodes, logs), the cluster status (ReportHead) and EventHead
    (where the nodes' agents report events), the metrics service discovery (ReportHead:
    /api/prometheus/sd, for the metrics gateway) and MetricsHead (Ray's Prometheus and Grafana
    configs and dashboards in the session dir). Left out, among others, UsageStatsHead: its cloud
    metadata probes block the dashboard's event loop for ~8 s where no metadata endpoint answers.
    RAYJOBS_DASHBOARD_MODULES=all brings the whole Ray dashboard UI back.
    """
    if not modules:
        return
    import ray._private.services as services

    real = services.start_ray_process

    def start(command: list, process_type: str, *a: Any, **kw: Any) -> Any:
        if process_type == "dashboard" and not any(str(c).startswith("--modules-to-load") for c in command):
            command = [*command, f"--modules-to-load={modules}"]
        return real(command, process_type, *a, **kw)

    services.start_ray_process = start


def _start_cli(cfg: Config) -> str:
    """``ray start`` through its CLI code, in this process."""
    args = [
        f"--node-ip-address={cfg.ip}", f"--num-gpus={cfg.gpus}",
        f"--dashboard-agent-listen-port={cfg.agent_port}",
        "--min-worker-port=20002", "--max-worker-port=29999",
        f"--ray-client-server-port={cfg.client_port or 10011}", "--disable-usage-stats",
        f"--metrics-export-port={cfg.metrics_export_port}",
    ]
    if cfg.cpus is not None:
        args.append(f"--num-cpus={cfg.cpus}")
    labels = node_labels()
    if labels:
        args.append("--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
    if cfg.temp_dir:
        args.append(f"--temp-dir={cfg.temp_dir}")
    if cfg.head:
        args = ["--head", f"--port={cfg.port}", "--dashboard-host=127.0.0.1",
                f"--dashboard-port={cfg.dashboard_port}", "--include-dashboard=true", *args]
    else:
        args = [f"--address={cfg.gcs}", *args]
    log("ray start " + " ".join(args))
    from ray.scripts.scripts import start

    try:
        start.main(args=args, prog_name="ray start", standalone_mode=False)
    except SystemExit as e:
        if e.code:
            fail(f"`ray start` failed on rank {cfg.rank} ({cfg.ip}) with exit code {e.code}")
    except Exception as e:
        fail(f"`ray start` failed on rank {cfg.rank} ({cfg.ip}): {' '.join(str(e).split())[:400]}")
    return ""


# --------------------------------------------------------------------------- roles
def worker(cfg: Config) -> None:
    deadline = time.monotonic() + cfg.timeout
    starter = Starter(cfg)
    nodes = alive_nodes(cfg.gcs)
    if nodes is None:
        log(f"waiting for the head at {cfg.gcs}")
    # The head's GCS answers and has its session name (Ray's worker start-up re-asks every 2 s).
    while nodes is None or not session_known(cfg):
        if time.monotonic() > deadline:
            starter.cancel()
            fail(f"rank {cfg.rank} ({cfg.ip}): the Ray head at {cfg.gcs} did not answer within {cfg.timeout:.0f} s")
        time.sleep(0.1)
        nodes = alive_nodes(cfg.gcs)
    if healthy(cfg, nodes):
        starter.cancel()
        log(f"rank {cfg.rank} ({cfg.ip}) is already in the cluster at {cfg.gcs}: nothing to do")
        return
    end_stale(cfg)
    log(f"starting the Ray worker, joining {cfg.gcs}")
    node_id = starter.go()
    while not any(n["id"] == node_id or (not node_id and n["ip"] == cfg.ip) for n in alive_nodes(cfg.gcs) or []):
        if time.monotonic() > deadline:
            fail(f"rank {cfg.rank} ({cfg.ip}) started Ray but the head at {cfg.gcs} does not list it")
        time.sleep(0.1)
    log(f"rank {cfg.rank} ({cfg.ip}) joined {cfg.gcs}")


def head(cfg: Config) -> None:
    starter = Starter(cfg)
    if healthy(cfg, alive_nodes(cfg.gcs)):
        starter.cancel()
        log(f"the head at {cfg.gcs} is already running: not starting it again")
    else:
        end_stale(cfg)
        log("starting the Ray head")
        starter.go()
    wait_complete(cfg)


def missing(cfg: Config, nodes: list[dict[str, Any]]) -> list[str]:
    """Ranks not (fully) present: '2 (10.0.0.3)' or '1 (10.0.0.2: 0 of 8 GPUs)'."""
    out = []
    for rank, ip in enumerate(cfg.ips[: cfg.num_nodes]):
        mine = [n for n in nodes if n["ip"] == ip]
        if not mine:
            out.append(f"{rank} ({ip})")
        elif max(n["gpus"] for n in mine) < cfg.gpus:
            out.append(f"{rank} ({ip}: {max(n['gpus'] for n in mine):g} of {cfg.gpus} GPUs)")
    return out


def wait_complete(cfg: Config) -> None:
    deadline = time.monotonic() + cfg.timeout
    last = ""
    while True:
        nodes = alive_nodes(cfg.gcs) or []
        gaps = missing(cfg, nodes)
        api = jobs_api_up(cfg)
        if not gaps and api:
            break
        present = cfg.num_nodes - len(gaps)
        state = f"{present}/{cfg.num_nodes} nodes" + ("" if api else ", Jobs API not up yet")
        if state != last:
            log(f"waiting: {state}")
            last = state
        if time.monotonic() > deadline:
            what = f"rank(s) {', '.join(gaps)} did not join" if gaps else "the Jobs API did not answer"
            fail(f"cluster not ready after {cfg.timeout:.0f} s: {what} (head {cfg.gcs}, "
                 f"{cfg.num_nodes - len(gaps)} of {cfg.num_nodes} nodes present); see those nodes' `sky logs` output")
        time.sleep(0.1)
    metrics = metrics_gateway(cfg)
    write_ready(cfg, nodes, metrics)
    revive_queue(cfg)


def _gateway_up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/healthy", timeout=1) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def metrics_gateway(cfg: Config) -> Optional[str]:
    """Start the head's metrics gateway (loopback only) unless it answers; its address, or None.

    Non-fatal: the cluster runs its jobs without it; `rayjobs cluster` then says metrics are not
    available. Started detached (it double-forks), like Ray's processes, so it outlives this script.
    """
    if not cfg.metrics_port:
        return None
    if not _gateway_up(cfg.metrics_port):
        cmd = [sys.executable, "-m", "rayjobs.oncluster.metricsgateway", "--daemon", f"--port={cfg.metrics_port}",
               f"--dashboard=http://127.0.0.1:{cfg.dashboard_port}", f"--pidfile={cfg.dir / 'metrics_gateway.pid'}",
               f"--log={cfg.dir / 'metrics_gateway.log'}"]
        try:
            subprocess.run(cmd, timeout=30, check=True, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            log(f"warning: the metrics gateway did not start ({e.__class__.__name__}); `rayjobs cluster` shows no GPU use")
            return None
        deadline = time.monotonic() + 30
        while not _gateway_up(cfg.metrics_port):
            if time.monotonic() > deadline:
                log(f"warning: the metrics gateway does not answer on 127.0.0.1:{cfg.metrics_port} "
                    f"(see {cfg.dir / 'metrics_gateway.log'}); `rayjobs cluster` shows no GPU use")
                return None
            time.sleep(0.1)
        log(f"metrics of every node on the head's 127.0.0.1:{cfg.metrics_port} (rayjobs connect tunnels it)")
    return f"127.0.0.1:{cfg.metrics_port}"


def revive_queue(cfg: Config) -> None:
    """After the head's Ray (re)started: start rayjobs' queue at once -- its API answers then, and its
    backlog runs on without waiting for the next rayjobs command (non-fatal, bounded)."""
    try:
        import rayjobs.door.host  # noqa: F401
    except ImportError:
        return
    env = dict(os.environ, RAY_ADDRESS=cfg.gcs)
    try:
        r = subprocess.run([sys.executable, "-m", "rayjobs.door.host", "start"], env=env,
                           capture_output=True, text=True, timeout=180)
        log(f"the queue is up (its API on the head's 127.0.0.1{_door_said(r.stdout)}; its backlog reloaded)"
            if r.returncode == 0 else
            f"warning: could not start the queue ({(r.stderr.strip().splitlines() or ['?'])[-1]}); "
            f"the next rayjobs command starts it")
    except (OSError, subprocess.TimeoutExpired) as e:
        log(f"warning: could not start the queue ({e.__class__.__name__}); the next rayjobs command starts it")


def _door_said(out: str) -> str:
    """``, and over TLS at URL (certificate sha256:...)`` from the starter's answer, or ""."""
    try:
        got = json.loads((out or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ""
    if not isinstance(got, dict) or not got.get("url"):
        return ""
    return f", and for teammates over TLS at {got['url']} (certificate {got.get('fingerprint')})"


def _version(dist: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _forwarded() -> list[str]:
    """The secret names `rayjobs up` forwarded (the settings' `secrets`, in RAYJOBS_SECRETS); a task
    launched by hand has none there: the two the task file lists."""
    return [n.strip() for n in os.environ.get("RAYJOBS_SECRETS", "WANDB_API_KEY,HF_TOKEN").split(",") if n.strip()]


def _secret_names() -> list[str]:
    """The secret names this script hands to Ray's processes (and so to every job), never values:
    the secret-looking ones and the forwarded ones that are set."""
    own = {n for n in _forwarded() if os.environ.get(n)}
    try:
        from rayjobs.shared import secret_names
    except ImportError:
        return sorted(own)
    return sorted(own | set(secret_names(dict(os.environ))))


def write_ready(cfg: Config, nodes: list[dict[str, Any]], metrics: Optional[str] = None) -> None:
    """The readiness record; rewritten only when its content changes (a re-run changes nothing)."""
    import ray

    ranks = [[n for n in nodes if n["ip"] == ip] for ip in cfg.ips[: cfg.num_nodes]]
    rec = {
        "ready": True,
        "nodes": sum(1 for r in ranks if r),
        "gpus": int(sum(max(n["gpus"] for n in r) for r in ranks if r)),
        "gpus_per_node": cfg.gpus,
        "node_ips": cfg.ips[: cfg.num_nodes],
        "gcs": cfg.gcs,
        "dashboard": f"127.0.0.1:{cfg.dashboard_port}",
        # The head's metrics gateway (loopback; `rayjobs connect` tunnels it), or None, and Ray's
        # temp dir there (Ray writes its Prometheus/Grafana configs under session_latest/metrics).
        "metrics": metrics,
        # The queue's API, on the head's loopback too (`rayjobs connect` tunnels it).
        "api": f"127.0.0.1:{int(os.environ.get('RAYJOBS_API_PORT') or 8263)}",
        "ray_temp_dir": ray_temp_dir(cfg),
        "token_path": str(cfg.dir / "auth_token"),
        "storage": cfg.storage or None,
        "queue": os.environ.get("RAYJOBS_QUEUE_NAME"),  # its store: <storage>/queue/<queue>
        "ray_version": ray.__version__,
        "verl_version": _version("verl"),
        "rayjobs_version": _version("rayjobs"),
        "rayjobs_commit": node_labels().get("rayjobs.io/commit"),
        # Names only: what the jobs' environment holds (preflight checks e.g. WANDB_API_KEY by name).
        "secrets": _secret_names(),
    }
    path = cfg.dir / "ready.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    if {k: v for k, v in old.items() if k != "ready_at"} == rec:
        log("cluster ready (unchanged)")
    else:
        rec["ready_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        from rayjobs.contract.files import write_atomic

        write_atomic(path, (json.dumps(rec, indent=2) + "\n").encode())
        old = rec
        log(f"cluster ready: {rec['nodes']} nodes, {rec['gpus']} GPUs, Ray {rec['ray_version']}, verl {rec['verl_version']}")
    print("RAYJOBS_READY " + json.dumps(old, sort_keys=True), flush=True)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--start":
        detached_start(Path(sys.argv[2]), int(sys.argv[3]))
    cfg = Config(dict(os.environ))
    prepare_env(cfg)
    log(f"rank {cfg.rank}/{cfg.num_nodes} at {cfg.ip}, head {cfg.gcs}, {cfg.gpus} GPU(s) per node")
    (head if cfg.head else worker)(cfg)


if __name__ == "__main__":
    main()

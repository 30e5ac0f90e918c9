#!/usr/bin/env python3
"""Benchmark: time from the last node's script start to "cluster ready", rayjobs' node script vs
the seed recipe's run block, side by side on the same 3 fake machines (network + PID + mount
namespaces, tests/nodes.py), interleaved rounds, fresh machines every round.

* seed: the run block of verl's examples/skypilot/verl-ppo.yaml (head: `ray start --head`, then
  `ray status | grep -c node_` every 10 s; workers: `sleep 15`, `ray start --address`), with
  the training command replaced by printing a marker. Ready = the head's "All nodes connected".
* rayjobs: bootstrap/ray_node.py (token auth, loopback dashboard, GCS polling, no sleeps).
  Ready = the head's RAYJOBS_READY line (every node and GPU present, Jobs API answering).

Usage: sudo .venv/bin/python scripts/bench_bootstrap.py [--rounds 3] [--nodes 3]
Writes the "bootstrap" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import REPO, doc, timing  # noqa: E402  (also puts tests/ on sys.path)
from bench.timing import median  # noqa: E402

from clusterops import wait_until  # noqa: E402
from nodes import Net  # noqa: E402

PY = sys.executable
GPUS = 1

# verl examples/skypilot/verl-ppo.yaml `run`, verbatim except: the trainer -> a marker line, and
# the dashboard bound to 127.0.0.1 instead of the seed's public 0.0.0.0 (it does not change how the
# cluster forms, and we never bind Ray to every interface, even inside test namespaces).
SEED_RUN = r"""
HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
NUM_NODES=$SKYPILOT_NUM_NODES
if [ "$SKYPILOT_NODE_RANK" == "0" ]; then
  echo "Starting Ray head node..."
  ps aux | grep ray | grep 6379 &> /dev/null ||  ray start --head --disable-usage-stats \
        --port=6379 \
        --dashboard-host=127.0.0.1 \
        --dashboard-port=8265
  echo "Waiting for all nodes to join Ray cluster..."
  retry_count=0
  max_retries=30
  while [ $retry_count -lt $max_retries ]; do
    connected_nodes=$(ray status 2>/dev/null | grep -c "node_" || true)
    echo "Connected nodes: $connected_nodes/$NUM_NODES (attempt $((retry_count+1))/$max_retries)"
    if [ "$connected_nodes" -ge "$NUM_NODES" ]; then
      echo "All nodes connected to Ray cluster"
      break
    fi
    retry_count=$((retry_count+1))
    sleep 10
  done
  if [ $retry_count -eq $max_retries ]; then
    echo "ERROR: Not all nodes connected to Ray cluster after $max_retries attempts"
    exit 1
  fi
  echo "SEED_READY"
else
  sleep 15
  echo "Starting Ray worker node..."
  ps aux | grep ray | grep $HEAD_IP:6379 &> /dev/null || ray start --address $HEAD_IP:6379 --disable-usage-stats
  sleep 10
fi
"""


def fresh(net: Net) -> None:
    """Every machine rebooted with an empty disk (no Ray state, no token, no node record)."""
    for node in net.nodes:
        node.crash()
        subprocess.run(["rm", "-rf", str(node.tmp), str(node.home)], check=True)
        node.tmp.mkdir(parents=True)
        node.home.mkdir(parents=True)
        node.boot()


def one_round(net: Net, kind: str, keep: Optional[str], timeout: float = 180.0) -> float:
    """Seconds from the last node's script start to the head's ready line, on fresh machines."""
    fresh(net)
    token = secrets.token_hex(16)
    # A file, as SkyPilot runs it (the seed's `ps | grep` checks would match `bash -c '<script>'`).
    script = net.root / "seed_run.sh"
    script.write_text(SEED_RUN)
    logs, procs = [], []
    for node in net.nodes:
        env = net.skypilot_env(node, GPUS)
        env["PATH"] = os.path.dirname(PY) + os.pathsep + os.environ.get("PATH", "")
        if kind == "seed":
            env["RAY_AUTH_MODE"] = "disabled"  # the seed has no auth
            cmd = ["bash", str(script)]
        else:
            env["RAY_AUTH_TOKEN"] = token
            cmd = [PY, str(REPO / "bootstrap" / "ray_node.py")]
        logs.append(net.root / f"{kind}-{node.rank}.log")
        procs.append(node.popen(cmd, env=env, stdout=open(logs[-1], "w"), stderr=subprocess.STDOUT))
    t0 = time.perf_counter()  # the last node's script has started
    marker = "SEED_READY" if kind == "seed" else "RAYJOBS_READY"

    def ready() -> bool:
        if marker in logs[0].read_text():
            return True
        if procs[0].poll() is not None:
            raise RuntimeError(f"{kind}: the head ended without {marker}:\n{logs[0].read_text()[-3000:]}")
        return False
    try:
        wait_until(ready, timeout, f"{kind}'s {marker}", every=0.02)
    except AssertionError:
        tails = "\n".join(f"--- rank {i}\n{log.read_text()[-1500:]}" for i, log in enumerate(logs))
        raise RuntimeError(f"{kind}: not ready after {timeout} s\n{tails}") from None
    dt = time.perf_counter() - t0
    for p in procs:
        p.wait(timeout=timeout)
    if keep:
        files = [str(log.relative_to(net.root)) for log in logs]
        files += [str(Path(f).relative_to(net.root)) for n in net.nodes
                  for f in (n.tmp / "ray").glob("session_2*/logs/*") if f.suffix in (".log", ".out", ".err")]
        subprocess.run(["tar", "-czf", f"{keep}-{kind}.tgz", "-C", str(net.root), *files], check=False)
    return dt


def render(res: dict, load: list, nodes: int, rounds: int, cpus: int, where: str = "") -> str:
    """The section of one run."""
    seed, ours = median(res["seed"]), median(res["rayjobs"])
    fmt = lambda xs: ", ".join(f"{x:.1f}" for x in xs)  # noqa: E731
    rows = [("seed (verl-ppo.yaml: `sleep 15` workers, 10 s `ray status` polls)", f"{seed:.1f}", fmt(res["seed"])),
            ("rayjobs `bootstrap/ray_node.py` (token auth, loopback dashboard, GCS polls)", f"{ours:.1f}", fmt(res["rayjobs"]))]
    return f"""## Bootstrap: last node's script start -> cluster ready ({nodes} nodes)

`scripts/bench_bootstrap.py`: {nodes} fake machines (own network, PID and mount namespaces, veth into
a bridge, `--num-gpus={GPUS}` each) on one {cpus}-core machine{where}; each round reboots them with
empty disks and starts every node's script at once; interleaved, {rounds} rounds each. Load
average during the runs: {min(load):.1f}-{max(load):.1f}.

{doc.table(["run block", "median (s)", "rounds (s)"], rows, "lll")}

rayjobs / seed = **{ours / seed:.2f}** (target <= 0.20).
"""


NOTES = """rayjobs' "ready" is stricter than the seed's: every rank's node *and* GPUs present, the Jobs API
answering and the head's job agent known to it (the seed counts `node_` lines in `ray status`).
What makes it fast, besides polling instead of sleeping:
- workers start as soon as the head's GCS answers; Ray's own worker start-up waits for the head's
  raylet to register, re-checking every 2 s;
- the head's dashboard starts alongside its raylet; Ray starts it first and waits for it, which
  puts its start-up (seconds of imports) on every worker's path;
- the dashboard loads only the modules rayjobs uses (JobHead, NodeHead, StateHead, ReportHead,
  EventHead). UsageStatsHead, left out, probes cloud metadata endpoints (3 x 1 s HTTP timeouts
  plus a DNS lookup) on the dashboard's event loop: ~8 s without a Jobs API wherever no metadata
  endpoint answers (k8s pods, these namespaces).
On a small machine all nodes share its cores and their start-up CPU (~10 CPU-s for 3 nodes) is
the floor; on real nodes each has its own.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--md-out", help="write the markdown section here instead of docs/benchmarks.md")
    ap.add_argument("--where", default="", help="a few words on the machine, for the section's text")
    ap.add_argument("--keep-logs", help="after each round, save the nodes' script and Ray logs as KEEP_LOGS-<kind>.tgz")
    a = doc.parse(ap, {"rounds": 1, "nodes": 2})
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    net = Net(a.nodes)
    net.create(boot=False)
    load: list[float] = []

    def measure(kind: str) -> Callable[[], float]:
        def fn() -> float:
            load.append(os.getloadavg()[0])
            dt = one_round(net, kind, a.keep_logs)
            print(f"{kind}: {dt:.1f} s", file=sys.stderr, flush=True)
            return dt
        return fn
    try:
        res = timing.interleaved({"seed": measure("seed"), "rayjobs": measure("rayjobs")}, a.rounds)
    finally:
        net.destroy()
    md = render(res, load, a.nodes, a.rounds, os.cpu_count() or 0, a.where) + "\n" + NOTES
    if a.md_out:
        Path(a.md_out).write_text(md)
        print(md)
    else:
        doc.publish(a, "bootstrap", md)


if __name__ == "__main__":
    main()

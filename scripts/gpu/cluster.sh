# Sourced on the GPU machine (repo root as cwd) by nodes2.sh and team.sh, after scripts/gpu/env.sh:
# the cluster formed by the real node script (bootstrap/ray_node.py), run the way SkyPilot runs it,
# one "node" per GPU of this host: SKYPILOT_NODE_RANK 0..NODES-1, SKYPILOT_NODE_IPS 127.0.0.1,
# 127.0.0.2, ..., one GPU each (CUDA_VISIBLE_DEVICES), each with its own node dir, agent port,
# metrics port and Ray temp dir. Uses $W, $ND, $NODES, $IPS, mark, $RJ from the caller.
#   form_cluster        -> rank 0 (the head) then rank 1 (if NODES=2); exits the caller on failure
#   restart_head        -> the head's Ray ended by PID (a crash of its Ray), then its node script again
#                          (HARD=1: one SIGKILL of every head process and their descendants at once)
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: with loopback node addresses on one host, Ray's own
# processes (the job agent's ray.init, job drivers) swap 127.0.0.1 for the host's eth0 address
# and wait forever for a raylet there (seen: every submission timed out with HTTP 504). The
# switch makes them keep 127.0.0.1; only Ray's `ray start` CLI refuses workers under it, and the
# node script starts Ray without that CLI. Real SkyPilot nodes have real addresses: not needed.
TOKEN_FILE=$ND/cluster_token
node() {  # RANK GPU
  env RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 SKYPILOT_NODE_RANK=$1 SKYPILOT_NODE_IPS="$IPS" SKYPILOT_NUM_NODES=$NODES \
      SKYPILOT_NUM_GPUS_PER_NODE=1 CUDA_VISIBLE_DEVICES=$2 RAY_AUTH_TOKEN=$(cat $TOKEN_FILE) \
      RAYJOBS_NODE_DIR=$ND/node$1 RAYJOBS_AGENT_PORT=$(( 52366 + $1 )) RAYJOBS_JOIN_TIMEOUT=180 \
      RAYJOBS_RAY_TEMP_DIR=/tmp/rn$1 RAYJOBS_METRICS_EXPORT_PORT=$(( 8090 + $1 )) ${NUM_CPUS:+RAYJOBS_NUM_CPUS=$NUM_CPUS} \
      python3 bootstrap/ray_node.py
}

form_cluster() {
  if [ "${RESET:-0}" = 1 ]; then   # end this script's earlier cluster, by PID: the processes naming its temp dirs
    python3 -c "from rayjobs.client.headprocs import pids_naming, terminate; terminate(lambda: pids_naming('/tmp/rn0/', '/tmp/rn1/'))"
    rm -rf $ND/node0 $ND/node1
  fi
  mkdir -p $ND
  [ -s $TOKEN_FILE ] || python3 -c "import secrets; print(secrets.token_hex(24))" > $TOKEN_FILE  # `rayjobs up` passes it as a SkyPilot secret
  # Each node its own Ray temp dir, as on separate machines: sharing one, rank 1's runtime-env agent
  # unpacked the jobs' working_dir again under the head's waiting job (phase 3). One after the other:
  # two raylets starting in the same instant in one shared session dir both took `sockets/raylet`.
  : > $W/node0.log   # a previous run's "cluster ready" must not start rank 1 early
  node 0 0 > $W/node0.log 2>&1 &
  local n0=$! rc0 rc1=0
  for _ in $(seq 1 600); do grep -q "waiting: \|cluster ready\|error" $W/node0.log && break; sleep 0.1; done
  : > $W/node1.log
  [ "$NODES" = 2 ] && { node 1 1 > $W/node1.log 2>&1; rc1=$?; }
  wait $n0; rc0=$?
  cat $W/node1.log $W/node0.log
  echo "node script exit codes: rank 0 $rc0, rank 1 $rc1" | tee -a $W/summary.txt
  if [ $rc0 != 0 ] || [ $rc1 != 0 ]; then cp $W/node0.log $W/node1.log $W/summary.txt $OUT/; exit 1; fi
  mark "node scripts done"
  for _ in $(seq 1 60); do   # rank 1's script returns once the head lists it; its GPU shows a moment later
    $RJ cluster --json > $W/cluster.json 2>/dev/null && python3 - $W/cluster.json $NODES <<'PY' && break
import json, sys
d = json.load(open(sys.argv[1]))
nodes = d.get("nodes", [])
want = int(sys.argv[2])
sys.exit(0 if len(nodes) == want and sum(n.get("gpus", 0) for n in nodes) == want else 1)
PY
    sleep 1
  done
  $RJ cluster 2>&1 | tee -a $W/summary.txt
}

restart_head() {  # the head's Ray crashes (every process of its session, by PID), then its node script runs again
  # Default: SIGTERM to the processes naming the head's temp dir, SIGKILL to what is left after 10 s.
  # HARD=1: one SIGKILL, at once, to those and every descendant of theirs (Ray's workers, the jobs'
  # drivers: rayjobs' runners and the trainers), as when the head's processes die all together.
  if [ "${HARD:-0}" = 1 ]; then
    python3 - <<'PY' | tee -a $W/summary.txt
import os, signal, time
from rayjobs.client.headprocs import pids_naming, with_descendants
pids = with_descendants(pids_naming('/tmp/rn0/'))
pids = [p for p in pids if p != os.getpid()]
t = time.time()
for p in pids:
    try:
        os.kill(p, signal.SIGKILL)
    except ProcessLookupError:
        pass
time.sleep(0.5)
def alive(p):
    try:
        return open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False
left = [p for p in pids if alive(p)]
print(f"hard crash at {time.strftime('%H:%M:%S', time.gmtime(t))}: SIGKILL to {len(pids)} processes at once; alive 0.5 s later: {left}")
PY
  else
    python3 -c "from rayjobs.client.headprocs import pids_naming, terminate; terminate(lambda: pids_naming('/tmp/rn0/'))"
  fi
  node 0 0 > $W/node0-restart.log 2>&1; local rc=$?
  cat $W/node0-restart.log
  echo "head's node script after the crash: exit $rc" | tee -a $W/summary.txt
}

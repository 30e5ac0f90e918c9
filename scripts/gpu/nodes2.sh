#!/usr/bin/env bash
# The two-node shape on one 2-GPU machine (nvidia-h200-x2), repo root as cwd (docs/gpu-e2e.md §4):
#   bash scripts/gpu/nodes2.sh start    # call 1: install, model/data, the cluster, the sweep, tail point 1
#   bash scripts/gpu/nodes2.sh finish   # call 2: tail point 2 (live panel), status, list, plot, logs
# NODES=1 runs the same on one GPU (nvidia-h200): the node script as a 1-node cluster, a 1-GPU sweep.
# The cluster is formed by the real node script (bootstrap/ray_node.py) run twice, the way SkyPilot
# runs it on two nodes: SKYPILOT_NODE_RANK 0 and 1, SKYPILOT_NODE_IPS lists both (here the same
# host, 127.0.0.1 and 127.0.0.2), SKYPILOT_NUM_GPUS_PER_NODE=1, one GPU each (CUDA_VISIBLE_DEVICES), each with
# its own node dir and dashboard-agent port.
# Then a 2-point sweep of trainer.nnodes=2 trainer.n_gpus_per_node=1: each point needs both nodes,
# so point 2 waits QUEUED until point 1 ends. Ray's processes are in their own session (the node
# script's starter calls setsid), so they outlive call 1 and call 2 finds the cluster and jobs.
set -uo pipefail
T0=$(date +%s)
LIMIT=${LIMIT:-560}
PHASE=${1:-start}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/root/work2}; mkdir -p $W
ND=${ND:-/root}                  # node dirs: $ND/node0, $ND/node1
NODES=${NODES:-2}                # 2: the two-node shape; 1: one node, one GPU
[ "$NODES" = 1 ] || [ "$NODES" = 2 ] || { echo "NODES must be 1 or 2"; exit 2; }
IPS=$'127.0.0.1\n127.0.0.2'; [ "$NODES" = 1 ] && IPS=127.0.0.1
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mark() { echo "### [t=$(( $(date +%s) - T0 ))s] $*"; }
RJ="python3 -m rayjobs.cli"

if [ "$PHASE" = start ]; then
  mark "unpack"
  bash scripts/gpu/unpack.sh install >/dev/null || { echo "unpack failed"; exit 1; }
fi
source scripts/gpu/env.sh
source scripts/gpu/cluster.sh
export RAYJOBS_STORAGE=$RAYJOBS_HOME/storage
# The client side: what `rayjobs connect` would remember, given as variables.
export RAY_ADDRESS=http://127.0.0.1:8265 RAY_AUTH_TOKEN_PATH=$ND/node0/auth_token

if [ "$PHASE" = start ]; then
  nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
  mark "model + data"
  [ -f $RAYJOBS_STORAGE/models/tiny-qwen2/config.json ] || python3 scripts/gpu/make_tiny.py $RAYJOBS_STORAGE 2>&1 | grep -v Writing

  mark "cluster: bootstrap/ray_node.py rank 0, then rank 1"
  form_cluster

  mark "sweep submit ($NODES node(s) x 1 GPU per point)"
  ta=$(date +%s.%N)
  python3 -m rayjobs.submit -m +exp=gpu_tiny_grpo trainer.nnodes=$NODES trainer.n_gpus_per_node=1 \
    actor_rollout_ref.actor.kl_loss_coef=0.001,0.1 "$@" > $W/ids.txt 2> $W/submit.err
  rc=$?; cat $W/submit.err
  echo "sweep submit: exit $rc after $(python3 -c "print(round($(date +%s.%N)-$ta,2))") s" | tee -a $W/summary.txt
  grep -o "(sweep [^)]*)" $W/submit.err | head -1 | tr -d '()' | cut -d' ' -f2 > $W/sweep.txt
fi

mapfile -t IDS < $W/ids.txt
J1=${IDS[0]:-}; J2=${IDS[1]:-}; S=$(cat $W/sweep.txt 2>/dev/null)
echo "sweep $S: point 1 $J1, point 2 $J2" | tee -a $W/summary.txt
[ -n "$J2" ] && [ -n "$S" ] || { echo "no sweep was submitted"; cp $W/*.log $W/summary.txt $OUT/ 2>/dev/null; exit 1; }

if [ "$PHASE" = start ]; then
  sleep 4
  mark "rayjobs list --sweep $S (point 2 should be QUEUED)"
  $RJ list --sweep $S 2>&1 | tee -a $W/summary.txt
  $RJ cluster 2>&1 | tee -a $W/summary.txt
  # Both points reach the queue at once; it admits whichever runner asked first. Follow that one
  # (bounded wait until one of them shows QUEUED; PENDING means its runner has not asked yet).
  for _ in $(seq 1 20); do
    st1=$($RJ status $J1 --json 2>/dev/null); st2=$($RJ status $J2 --json 2>/dev/null)
    case "$st1" in *'"status": "QUEUED"'*) T=$J1; J1=$J2; J2=$T; break;; esac
    case "$st2" in *'"status": "QUEUED"'*) break;; esac
    sleep 1
  done
  printf '%s\n%s\n' $J1 $J2 > $W/ids.txt   # the finish phase follows the other one
  mark "rayjobs tail $J1 --plain (the point admitted first)"
  t=$(( $(left) - 20 )); [ $t -gt 0 ] || t=1
  timeout $t $RJ tail $J1 --plain 2>&1 | python3 -u scripts/gpu/summarize.py --stamp > $W/tail1.log
  echo "point 1 ($J1): tail exit ${PIPESTATUS[0]}, ended at t=$(( $(date +%s) - T0 ))s" | tee -a $W/summary.txt
  grep -E "\[rayjobs\]|step:|Error|error" $W/tail1.log | cut -c1-400 | tail -30
  $RJ list --sweep $S 2>&1 | tee -a $W/summary.txt
  $RJ logs $J1 > $W/j1.log 2>&1
  grep -E "\[rayjobs\]|world_size|Resource pool|placement" $W/j1.log | head -20 | cut -c1-300
  python3 scripts/gpu/summarize.py "${NODES}node-point1=$W/j1.log" >> $W/summary.txt
  $RJ plot --sweep $S -o $OUT/sweep2.png --json > $W/plot.json 2>> $W/summary.txt
  head -c 2000 $W/plot.json | tee -a $W/summary.txt; echo
  if [ "${STOP2:-0}" = 1 ]; then   # no time for point 2 in this call: stop it (graceful), show it
    mark "rayjobs stop $J2"
    $RJ stop $J2 --wait 60 2>&1 | tee -a $W/summary.txt
    $RJ list --sweep $S 2>&1 | tee -a $W/summary.txt
  fi
  cp $W/tail1.log $W/node0.log $W/node1.log $W/summary.txt $OUT/
  tar -czf $OUT/logs.tgz --exclude='logs/events' --exclude='python-core-*' -C $(dirname $W) $(basename $W) -C /tmp/rn0/session_latest logs 2>/dev/null
  mark "done (call 1)"
  exit 0
fi

# finish
mark "rayjobs tail $J2 (live panel on a pty)"
$RJ list --sweep $S 2>&1 | tee -a $W/summary.txt
t=$(( $(left) - 60 )); [ $t -gt 0 ] || t=1
timeout $t script -qfec "stty cols 150 rows 50; $RJ tail $J2" /dev/null > $OUT/tail2.tty 2>&1
echo "point 2 ($J2): tail exit $?, ended at t=$(( $(date +%s) - T0 ))s" | tee -a $W/summary.txt
$RJ status $J2 --json 2>&1 | tee -a $W/summary.txt; echo
mark "rayjobs plot --sweep $S"
$RJ plot --sweep $S -o $OUT/sweep2.png --json > $W/plot.json 2>> $W/summary.txt
python3 -c "import json; print(json.dumps(json.load(open('$W/plot.json')))[:3000])" | tee -a $W/summary.txt
$RJ list --sweep $S 2>&1 | tee -a $W/summary.txt
$RJ cluster 2>&1 | tee -a $W/summary.txt
$RJ logs $J1 > $W/j1.log 2>&1; $RJ logs $J2 > $W/j2.log 2>&1
grep -E "world_size|nnodes|WorkerDict|placement|node_ip|NCCL INFO (Init|Channel 00)" $W/j1.log | head -20 | cut -c1-300
python3 scripts/gpu/summarize.py "${NODES}node-point1=$W/j1.log" "${NODES}node-point2=$W/j2.log" >> $W/summary.txt
cp $W/summary.txt $W/node0.log $W/node1.log $OUT/ 2>/dev/null; cat $W/summary.txt | tail -40
s=/tmp/rn0/session_latest
tar -czf $OUT/logs.tgz --exclude='logs/events' --exclude='python-core-*' -C $(dirname $W) $(basename $W) -C $s logs 2>/dev/null
ls -la $OUT
mark "done (call 2)"

#!/usr/bin/env bash
# Issue 19 on the lent GPU machine, repo root as cwd (docs/gpu-e2e.md §5-8): a shared cluster's rules
# with real verl, on a cluster formed by bootstrap/ray_node.py (NODES=1: this host's one GPU).
# One call per phase, each right after the other (the cluster, the tails and the GPU watch live on
# between calls in sessions of their own):
#   bash scripts/gpu/team.sh preempt   # install, cluster, GPU watch; a preemptible 2-point sweep; once
#                                      # point 1 has saved step 2, a job of priority 10: it preempts point 1
#   bash scripts/gpu/team.sh resume    # the high job ends; point 1 resumes from its checkpoint (attempt 2);
#                                      # point 2 is cancelled (device time); once attempt 2 trains a step,
#                                      # `rayjobs stop --at-checkpoint` on point 1, then `rayjobs resume` it (<id>-r1)
#   bash scripts/gpu/team.sh finish    # <id>-r1 to the end; status, list, plot (one curve across the
#                                      # attempts), cluster (GPU use from Ray's metrics); who held GPU
#                                      # memory at each admission (scripts/gpu/gpuwatch.py)
#   bash scripts/gpu/team.sh restart   # a job running + one queued; the head's Ray crashes and its node
#                                      # script runs again; the running one resumes as a new attempt
#   bash scripts/gpu/team.sh restart-finish   # both to the end; list keeps both ids
#   bash scripts/gpu/team.sh multiturn # +exp=gpu_tiny_multiturn, a few steps: the tool agent loop calling
#                                      # the shipped calc_gsm8k_reward tool (docs/gpu-e2e.md §9)
#   MT=1 bash scripts/gpu/team.sh restart-finish   # the same, with the multi-turn job submitted first
#   bash scripts/gpu/team.sh multiturn-finish     # (queued behind the restart's jobs), then waited for here
# preempt, restart and multiturn each start from a bare machine too (install, model and data,
# cluster, GPU watch: each skipped when already there), so `restart` or `multiturn` can open a session.
# Everything lands in $OUT (summary.txt, the tails, gpuwatch.txt, the plot, logs.tgz). LIMIT (560 s)
# bounds each call; a device call may run 600 s.
set -uo pipefail
T0=$(date +%s)
LIMIT=${LIMIT:-560}
PHASE=${1:-preempt}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/root/work5}; mkdir -p $W
ND=${ND:-/root}
NODES=${NODES:-1}   # 2 on nvidia-h200-x2: two nodes of one GPU (as nodes2.sh); pass trainer.nnodes=2 to preempt
IPS=127.0.0.1; [ "$NODES" = 2 ] && IPS=$'127.0.0.1\n127.0.0.2'
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mark() { echo "### [t=$(( $(date +%s) - T0 ))s] $*" | tee -a $W/summary.txt; }
RJ="python3 -m rayjobs.cli"
EXP=${EXP:-gpu_tiny_grpo}

case "$PHASE" in preempt|restart|multiturn)
  [ -n "${SKIP_UNPACK:-}" ] || bash scripts/gpu/unpack.sh install >/dev/null || { echo "unpack failed"; exit 1; } ;;
esac
source scripts/gpu/env.sh
source scripts/gpu/cluster.sh
export RAYJOBS_STORAGE=$RAYJOBS_HOME/storage
# The client side: what `rayjobs connect` would remember, given as variables.
export RAY_ADDRESS=http://127.0.0.1:8265 RAY_AUTH_TOKEN_PATH=$ND/node0/auth_token

log_has() { $RJ logs "$1" 2>/dev/null | grep -q "$2"; }
wait_log() {  # ID PATTERN SECONDS [AFTER]: until the job's log has PATTERN (after the last AFTER) (bounded)
  local deadline=$(( $(date +%s) + $3 ))
  while [ $(date +%s) -lt $deadline ]; do
    $RJ logs "$1" 2>/dev/null | python3 -c "import sys; t = sys.stdin.read(); a = sys.argv[2]; i = t.rfind(a) if a else 0
sys.exit(0 if i >= 0 and sys.argv[1] in t[i:] else 1)" "$2" "${4:-}" && return 0
    sleep 2
  done
  return 1
}
status_of() { $RJ status "$1" --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['status'])" 2>/dev/null; }
wait_status() {  # ID STATUS SECONDS
  local deadline=$(( $(date +%s) + $3 ))
  while [ $(date +%s) -lt $deadline ]; do [ "$(status_of $1)" = "$2" ] && return 0; sleep 3; done
  return 1
}
bg_tail() { setsid nohup $RJ tail "$1" --plain > $W/tail-$1.log 2>&1 < /dev/null & }
rl() { $RJ "$@" 2>&1 | tee -a $W/summary.txt; }
save() { cp $W/summary.txt $W/tail-*.log $W/gpuwatch.txt "$@" $OUT/ 2>/dev/null; ls $OUT; }
ids() { mapfile -t IDS < $W/ids.txt; P1=${IDS[0]:-}; P2=${IDS[1]:-}; H=$(cat $W/high.txt 2>/dev/null); S=$(cat $W/sweep.txt 2>/dev/null); }

setup() {  # model + data, the cluster, the GPU watch; each only when not already there (idempotent)
  nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader | tee -a $W/summary.txt
  mark "model + data"
  [ -f $RAYJOBS_STORAGE/models/tiny-qwen2-tools/config.json ] ||
    python3 scripts/gpu/make_tiny.py $RAYJOBS_STORAGE --tools 2>&1 | grep -v Writing | tee -a $W/summary.txt
  mark "cluster: bootstrap/ray_node.py, one node, one GPU"
  form_cluster   # the node script is idempotent: "cluster ready (unchanged)" when it is up
  [ -s $W/gpuwatch.pid ] && kill -0 $(cat $W/gpuwatch.pid) 2>/dev/null ||
    { setsid nohup python3 scripts/gpu/gpuwatch.py $W/gpuwatch.txt 3000 > /dev/null 2>&1 < /dev/null & echo $! > $W/gpuwatch.pid; }
}

mt_submit() {  # the multi-turn job (its id in $W/mt.txt), a tail of it
  mark "+exp=gpu_tiny_multiturn: the tool agent loop with the shipped tool, 3 steps"
  # rollout_data_dir: verl writes each step's generations (input, output, score) as JSON lines
  python3 -m rayjobs.submit +exp=gpu_tiny_multiturn trainer.rollout_data_dir=$W/rollouts "$@" > $W/mt.txt 2>> $W/summary.txt
  echo "multi-turn job $(cat $W/mt.txt)" | tee -a $W/summary.txt
  [ -s $W/mt.txt ] && bg_tail "$(cat $W/mt.txt)"
}

case "$PHASE" in
preempt)
  setup
  mark "a preemptible 2-point sweep (8 steps, a checkpoint every 2)"
  python3 -m rayjobs.submit -m +exp=$EXP actor_rollout_ref.actor.kl_loss_coef=0.001,0.1 rayjobs.preemptible=true \
    rayjobs.max_retries=1 trainer.total_training_steps=8 trainer.save_freq=2 "$@" > $W/ids.txt 2> $W/submit.err
  cat $W/submit.err | tee -a $W/summary.txt
  grep -o "(sweep [^)]*)" $W/submit.err | head -1 | tr -d '()' | cut -d' ' -f2 > $W/sweep.txt
  ids; echo "sweep $S: point 1 $P1, point 2 $P2" | tee -a $W/summary.txt
  [ -n "$P2" ] || { echo "no sweep was submitted"; save; exit 1; }
  bg_tail $P1
  sleep 5; rl list --sweep $S
  mark "waiting for point 1's checkpoint of step 2"
  wait_log $P1 "checkpoint saved: step 2" $(( $(left) - 150 )) || { mark "no checkpoint in time"; rl list; save; exit 1; }
  mark "point 1 saved step 2: submit a job of priority 10 (1 step)"
  python3 -m rayjobs.submit +exp=$EXP rayjobs.priority=10 trainer.total_training_steps=1 trainer.save_freq=-1 "$@" \
    > $W/high.txt 2> $W/high.err
  cat $W/high.err; ids; echo "high-priority job $H" | tee -a $W/summary.txt
  bg_tail $H
  for _ in $(seq 1 40); do   # the preemption, as the views show it
    rl list --sweep $S | grep -q "PREEMPTED" && break; sleep 2
  done
  rl list; rl status $P1
  $RJ logs $P1 2>&1 | grep "\[rayjobs\]" | tee -a $W/summary.txt
  mark "waiting for the high job's first step"
  wait_log $H "step:1 - " $(( $(left) - 40 )) && mark "the high job trains"
  rl cluster
  save
  ;;
resume)
  ids
  mark "the high job to its end"
  wait_status $H SUCCEEDED $(( $(left) - 360 )); rl list
  mark "point 1 resumes from its checkpoint (attempt 2); point 2 is cancelled (device time)"
  rl stop $P2
  wait_log $P1 " - actor/" $(( $(left) - 120 )) "attempt 2 of run" || { mark "point 1 did not train again"; rl list; save; exit 0; }
  $RJ logs $P1 2>&1 | grep -E "\[rayjobs\]|Resuming" | tail -12 | tee -a $W/summary.txt
  mark "rayjobs stop $P1 --at-checkpoint"
  rl stop $P1 --at-checkpoint --timeout 120
  wait_status $P1 STOPPED 150; rl status $P1
  mark "rayjobs resume $P1"
  rl resume $P1
  rl list
  $RJ list --json 2>/dev/null | python3 -c "import json,sys; print(*[r['id'] for r in json.load(sys.stdin) if r.get('resumed_from')][:1])" > $W/resumed.txt
  [ -s $W/resumed.txt ] && bg_tail $(cat $W/resumed.txt)
  save
  ;;
finish)
  ids; R=$(cat $W/resumed.txt)
  mark "$R to its end"
  wait_status $R SUCCEEDED $(( $(left) - 60 )); rl list; rl status $R; rl status $P1
  rl plot --sweep $S -o $OUT/team-sweep.png --json > $W/plot.json
  head -c 3000 $W/plot.json | tee -a $W/summary.txt; echo
  rl cluster
  for j in $P1 $H $R; do $RJ logs $j > $W/$j.log 2>&1; done
  mark "who held GPU memory at each admission (nvidia-smi, every 0.5 s)"
  python3 scripts/gpu/gpuwatch.py --report $W/gpuwatch.txt $W/$P1.log $W/$H.log $W/$R.log | tee -a $W/summary.txt
  python3 scripts/gpu/summarize.py "point1=$W/$P1.log" "high=$W/$H.log" "resumed=$W/$R.log" >> $W/summary.txt
  tar -czf $OUT/logs.tgz --exclude='logs/events' --exclude='python-core-*' -C $(dirname $W) $(basename $W) -C /tmp/rn0/session_latest logs 2>/dev/null
  save
  ;;
restart)
  setup
  mark "a job (4 steps, a checkpoint every 2, one retry) and one queued behind it"
  python3 -m rayjobs.submit +exp=$EXP trainer.total_training_steps=4 trainer.save_freq=2 rayjobs.max_retries=1 "$@" \
    > $W/run.txt 2>> $W/summary.txt
  python3 -m rayjobs.submit +exp=$EXP trainer.total_training_steps=1 trainer.save_freq=-1 "$@" > $W/queued.txt 2>> $W/summary.txt
  A=$(cat $W/run.txt); B=$(cat $W/queued.txt); echo "running $A, queued $B" | tee -a $W/summary.txt
  bg_tail $A
  wait_log $A "checkpoint saved: step 2" $(( $(left) - 120 )) || { mark "no checkpoint in time"; rl list; save; exit 0; }
  rl list
  mark "the head's Ray crashes (every process of its session, by PID); its node script runs again"
  restart_head
  for _ in $(seq 1 30); do rl list | grep -q "$A" && break; sleep 2; done
  rl list
  save
  ;;
restart-finish)
  A=$(cat $W/run.txt); B=$(cat $W/queued.txt)
  [ -z "${MT:-}" ] || mt_submit "$@"   # queued behind A and B: one call less for the session
  wait_status $B SUCCEEDED $(( $(left) - 60 ))
  rl list; rl status $A; rl status $B
  $RJ logs $A 2>&1 | grep -E "\[rayjobs\]|Resuming" | tee -a $W/summary.txt
  tar -czf $OUT/logs-restart.tgz --exclude='logs/events' --exclude='python-core-*' -C /tmp/rn0/session_latest logs 2>/dev/null
  save
  ;;
multiturn|multiturn-finish)
  if [ "$PHASE" = multiturn ]; then setup; mt_submit "$@"; fi
  M=$(cat $W/mt.txt); [ -n "$M" ] || { save; exit 1; }
  while [ $(left) -gt 45 ]; do   # to its end (bounded by the call's time)
    case "$(status_of $M)" in SUCCEEDED|FAILED|STOPPED) break;; esac; sleep 3
  done
  rl list; rl status $M
  $RJ logs $M > $W/$M.log 2>&1
  grep -E "\[rayjobs\]|Traceback|Error" $W/$M.log | head -40 | tee -a $W/summary.txt
  # the evidence of tool calls: verl's per-step turn counts (1 turn = no tool call) and one trajectory
  grep -oE "step:[0-9]+ |num_turns/[a-z]+:[^ ]+|critic/score/mean:[-0-9.]+|response_length/mean:[0-9.]+" $W/$M.log |
    tr '\n' ' ' | sed 's/step:/\nstep:/g' | tee -a $W/summary.txt; echo
  python3 scripts/gpu/summarize.py "multiturn=$W/$M.log" >> $W/summary.txt
  python3 - $W/rollouts <<'PY' | tee -a $W/summary.txt   # what the model wrote: tool calls per step
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
    rows = [json.loads(line) for line in f.open()]
    calls = sum("<tool_call>" in r.get("output", "") for r in rows)
    print(f"rollouts step {f.stem}: {len(rows)} generations, {calls} with a <tool_call>; first: {rows[0].get('output', '')[:300]!r}")
PY
  tar -czf $OUT/logs-mt.tgz --exclude='logs/events' --exclude='python-core-*' -C /tmp/rn0/session_latest logs 2>/dev/null
  save $W/$M.log
  ;;
esac
mark "done ($PHASE)"

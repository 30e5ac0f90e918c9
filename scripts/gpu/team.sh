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
#   bash scripts/gpu/team.sh restart-finish   # both to the end (waited for, bounded by LIMIT); list keeps both ids
#   bash scripts/gpu/team.sh multiturn # +exp=gpu_tiny_multiturn, a few steps: the tool agent loop calling
#                                      # the shipped calc_gsm8k_reward tool (docs/gpu-e2e.md §9)
#   MT=1 bash scripts/gpu/team.sh restart-finish   # the same, with the multi-turn job submitted first
#   bash scripts/gpu/team.sh multiturn-finish     # (queued behind the restart's jobs), then waited for here
#   HARD=1 bash scripts/gpu/team.sh restart        # the crash is one SIGKILL of every head process at once
#                                      # (cluster.sh restart_head), not SIGTERM then SIGKILL after 10 s
#   bash scripts/gpu/team.sh restart-crash  # when `restart`'s call ended before its job's checkpoint: wait for
#                                      # it and crash the head (HARD=1 too) in the next call, then restart-finish
# Issue 33 items 3-4 (docs/gpu-e2e.md §11), one GPU, the points one after the other:
#   bash scripts/gpu/team.sh halving   # install, cluster, GPU watch; a 4-point sweep through the queue's API
#                                      # ($SWEEP), successive halving at step 2 (keep 0.5), $STEPS (4) steps,
#                                      # a checkpoint every 2; waits within LIMIT
#   bash scripts/gpu/team.sh halving-finish   # waits for every point to end (bounded by LIMIT), one warm
#                                      # submit timed (then cancelled), then the report: status/usage --json,
#                                      # the GPU watch per job, the idle gaps at job changes (jobtimes.py)
#   HARD=1 bash scripts/gpu/team.sh crash     # the head's Ray crashes with nothing running; the node script
#                                      # again; the queue's records are still listed
# preempt, restart, multiturn and halving each start from a bare machine too (install, model and data,
# cluster, GPU watch: each skipped when already there), so any of them can open a session. The
# multi-turn model (make_tiny.py --tools: a 57 s SFT) is made only for multiturn and with MT=1.
# DRY=1: a CPU dry run (docs/gpu-e2e.md "Checked here"): no install, the embedded head with one
# logical GPU instead of the node script, the fake nvidia-smi of tests/workloads/bin fed with the
# trainers' pids; pass rayjobs.entrypoint='python3 tests/workloads/fake_verl.py' and +fake.* knobs.
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
# the client's warm verl-validation helper (started by the first submit, in a session of its own)
# stays up across this session's calls (default 900 s idle)
export RAYJOBS_PREFLIGHT_IDLE_S=${RAYJOBS_PREFLIGHT_IDLE_S:-3600}

DRY=${DRY:-0}
case "$PHASE" in preempt|restart|multiturn|halving)
  [ -n "${SKIP_UNPACK:-}" ] || [ "$DRY" = 1 ] || bash scripts/gpu/unpack.sh install >/dev/null || { echo "unpack failed"; exit 1; } ;;
esac
source scripts/gpu/env.sh
source scripts/gpu/cluster.sh
export RAYJOBS_STORAGE=$RAYJOBS_HOME/storage
# The client side: what `rayjobs connect` would remember, given as variables (DRY=1: the embedded head's record).
[ "$DRY" = 1 ] || export RAY_ADDRESS=http://127.0.0.1:8265 RAY_AUTH_TOKEN_PATH=$ND/node0/auth_token
if [ "$DRY" = 1 ]; then   # the fake nvidia-smi lists the pids in $FAKE_NVIDIA_SMI_APPS
  export PATH=$(pwd)/tests/workloads/bin:$PATH FAKE_NVIDIA_SMI_APPS=$W/fake-gpu-apps
  touch $FAKE_NVIDIA_SMI_APPS
fi

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
save() {  # what comes back (at most 8 files): the summary, the watch, the tails in one tgz, the files named
  cp $W/summary.txt $W/gpuwatch.txt "$@" $OUT/ 2>/dev/null
  (cd $W && ls tail-*.log > /dev/null 2>&1 && tar -czf $OUT/tails.tgz tail-*.log)
  ls $OUT
}
ids() { mapfile -t IDS < $W/ids.txt; P1=${IDS[0]:-}; P2=${IDS[1]:-}; H=$(cat $W/high.txt 2>/dev/null); S=$(cat $W/sweep.txt 2>/dev/null); }

models() {  # the tiny model and data; the multi-turn model (a 57 s SFT) only if $1 = tools
  if [ "${1:-}" = tools ]; then
    [ -f $RAYJOBS_STORAGE/models/tiny-qwen2-tools/config.json ] ||
      python3 scripts/gpu/make_tiny.py $RAYJOBS_STORAGE --tools 2>&1 | grep -v Writing | tee -a $W/summary.txt
  else
    [ -f $RAYJOBS_STORAGE/models/tiny-qwen2/config.json ] ||
      python3 scripts/gpu/make_tiny.py $RAYJOBS_STORAGE 2>&1 | grep -v Writing | tee -a $W/summary.txt
  fi
}

fake_gpu_feeder() {  # DRY=1: each fake trainer "holds the GPU" while it lives (anchored: not this shell)
  setsid nohup bash -c "for _ in \$(seq 1 20000); do for p in \$(pgrep -f '^python3 [^ ]*fake_verl.py'); do
    tr '\\0' '\\n' < /proc/\$p/environ 2>/dev/null | grep -q '^RAYJOBS_JOB=$EXP-' || continue
    grep -q \"^\$p,\" $FAKE_NVIDIA_SMI_APPS || echo \"\$p,1190\" >> $FAKE_NVIDIA_SMI_APPS; done; sleep 0.2; done" \
    > /dev/null 2>&1 < /dev/null &
  echo $! > $W/feeder.pid
}

setup() {  # model + data, the cluster, the GPU watch; each only when not already there (idempotent)
  [ "$DRY" = 1 ] || nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader | tee -a $W/summary.txt
  mark "model + data"
  if [ "$DRY" = 1 ]; then models 2>&1 | tail -1   # here: the data; the model needs torch (not in .venv)
  elif [ "${MT:-0}" = 1 ] || [ "$PHASE" = multiturn ]; then models tools; else models; fi
  if [ "$DRY" = 1 ]; then
    mark "cluster (DRY=1): the embedded head, 127.0.0.1, one logical GPU"
    python3 -c "from rayjobs.client import embedded; print((embedded.running() or embedded.start(num_gpus=1, num_cpus=8))['dashboard'])"
    [ -s $W/feeder.pid ] && kill -0 $(cat $W/feeder.pid) 2>/dev/null || fake_gpu_feeder
  else
    mark "cluster: bootstrap/ray_node.py, one node, one GPU"
    form_cluster   # the node script is idempotent: "cluster ready (unchanged)" when it is up
  fi
  [ -s $W/gpuwatch.pid ] && kill -0 $(cat $W/gpuwatch.pid) 2>/dev/null ||
    { setsid nohup python3 scripts/gpu/gpuwatch.py $W/gpuwatch.txt 3000 > /dev/null 2>&1 < /dev/null & echo $! > $W/gpuwatch.pid; }
}

ended() {  # ID: true once the job is in an end state
  case "$(status_of $1)" in SUCCEEDED|FAILED|STOPPED) return 0;; esac; return 1
}
wait_ended() {  # SECONDS ID...: until every ID has ended (bounded); says which did not
  local deadline=$(( $(date +%s) + $1 )) j left_ids; shift
  while :; do
    left_ids=""; for j in "$@"; do [ -n "$j" ] && ! ended $j && left_ids="$left_ids $j"; done
    [ -z "$left_ids" ] && return 0
    [ $(date +%s) -ge $deadline ] && { mark "not ended in time:$left_ids"; return 1; }
    sleep 3
  done
}

mt_submit() {  # the multi-turn job (its id in $W/mt.txt), a tail of it
  mark "+exp=gpu_tiny_multiturn: the tool agent loop with the shipped tool, 3 steps"
  # rollout_data_dir: verl writes each step's generations (input, output, score) as JSON lines
  python3 -m rayjobs.submit +exp=gpu_tiny_multiturn trainer.rollout_data_dir=$W/rollouts "$@" > $W/mt.txt 2>> $W/summary.txt
  echo "multi-turn job $(cat $W/mt.txt)" | tee -a $W/summary.txt
  [ -s $W/mt.txt ] && bg_tail "$(cat $W/mt.txt)"
}

mt_report() {  # the multi-turn job $M: status, its [rayjobs] lines, turn counts, tool calls per step
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
}

sweep_states() {  # "ID STATUS" per point of sweep $S (one list request)
  $RJ list --sweep $S --json 2>/dev/null | python3 -c "import json,sys
for r in json.load(sys.stdin): print(r.get('id'), r.get('status'))" 2>/dev/null
}
halving_wait() {  # MARGIN [running-last]: until every point ended (or, running-last: no point waits and one
  # runs), or until MARGIN s are left of the call; a line each time the points' states change
  local last="" now
  while [ $(left) -gt $1 ]; do
    now=$(sweep_states | tr '\n' ' ')
    [ "$now" != "$last" ] && { mark "points: $now"; last=$now; }
    if [ -n "$now" ]; then
      echo "$now" | grep -qE "QUEUED|PENDING|RUNNING" || return 0
      [ "${2:-}" = running-last ] && ! echo "$now" | grep -qE "QUEUED|PENDING" && return 0
    fi
    sleep 5
  done
  return 1
}

halving_report() {  # status/logs of each point, usage, the watch, the tables (jobtimes.py)
  rl list --sweep $S
  for j in "${IDS[@]}"; do
    $RJ status $j --json > $W/status-$j.json 2>&1
    $RJ logs $j > $W/$j.log 2>&1
    rl status $j
    grep -E "\[rayjobs\]" $W/$j.log | cut -c1-300 | tee -a $W/summary.txt
  done
  $RJ usage --sweep $S --json > $W/usage.json 2>> $W/summary.txt
  rl usage --sweep $S
  mark "the queue's record, the runners' stamps and the GPU watch, per job (scripts/gpu/jobtimes.py)"
  python3 scripts/gpu/jobtimes.py --watch $W/gpuwatch.txt --usage $W/usage.json --submit $W/submit.txt \
    --dir $W "${IDS[@]}" | tee $W/jobtimes.txt
  for j in "${IDS[@]}"; do set -- "$@" "p${j##*-}=$W/$j.log"; done
  python3 scripts/gpu/summarize.py "$@" >> $W/summary.txt 2>&1
  local logdir=/tmp/rn0/session_latest; [ "$DRY" = 1 ] && logdir=$RAYJOBS_HOME/local/ray/session_latest
  tar -czf $OUT/logs.tgz --exclude='logs/events' --exclude='python-core-*' -C $(dirname $W) $(basename $W) -C $logdir logs 2>/dev/null
  save $W/jobtimes.txt $W/usage.json
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
  mark "the head's Ray crashes (every process of its session, by PID${HARD:+, one SIGKILL at once}); its node script runs again"
  restart_head
  for _ in $(seq 1 30); do rl list | grep -q "$A" && break; sleep 2; done
  rl list
  save
  ;;
restart-crash)   # `restart` cut before its crash (no checkpoint in its call): the crash of the same jobs
  A=$(cat $W/run.txt); B=$(cat $W/queued.txt)
  wait_log $A "checkpoint saved: step 2" $(( $(left) - 30 )) || { mark "no checkpoint in time"; rl list; save; exit 0; }
  rl list
  mark "the head's Ray crashes (every process of its session, by PID${HARD:+, one SIGKILL at once}); its node script runs again"
  restart_head
  for _ in $(seq 1 30); do rl list | grep -q "$A" && break; sleep 2; done
  rl list
  save
  ;;
restart-finish)
  A=$(cat $W/run.txt); B=$(cat $W/queued.txt); M=
  if [ "${MT:-0}" = 1 ]; then   # queued behind A and B: one call less for the session
    models tools; mt_submit "$@"; M=$(cat $W/mt.txt)
  fi
  # every job of the phase to its end (the multi-turn one too), bounded by the call's time
  wait_ended $(( $(left) - 60 )) $A $B $M
  rl list; rl status $A; rl status $B
  $RJ logs $A 2>&1 | grep -E "\[rayjobs\]|Resuming" | tee -a $W/summary.txt
  tar -czf $OUT/logs-restart.tgz --exclude='logs/events' --exclude='python-core-*' -C /tmp/rn0/session_latest logs 2>/dev/null
  if [ -n "$M" ] && ended $M; then mt_report; fi   # else: `team.sh multiturn-finish` in the next call
  save
  ;;
multiturn|multiturn-finish)
  if [ "$PHASE" = multiturn ]; then setup; mt_submit "$@"; fi
  M=$(cat $W/mt.txt); [ -n "$M" ] || { save; exit 1; }
  while [ $(left) -gt 45 ]; do   # to its end (bounded by the call's time)
    ended $M && break; sleep 3
  done
  mt_report
  ;;
halving)
  setup
  SWEEP=${SWEEP:-data.max_response_length=32,16,24,8}
  STEPS=${STEPS:-4}
  mark "a 4-point sweep through the queue's API ($SWEEP): halving at step 2 (keep 0.5), $STEPS steps, a checkpoint every 2"
  echo "start $(date +%s.%N)" > $W/submit.txt
  python3 -m rayjobs.submit -m +exp=$EXP $SWEEP rayjobs.halving.metric=critic/score/mean 'rayjobs.halving.rungs=[2]' \
    rayjobs.halving.keep=0.5 trainer.total_training_steps=$STEPS trainer.save_freq=2 "$@" > $W/ids.txt 2> $W/submit.err
  rc=$?; echo "end $(date +%s.%N)" >> $W/submit.txt
  cat $W/submit.err | tee -a $W/summary.txt
  python3 -c "import sys; a, b = (float(l.split()[1]) for l in open(sys.argv[1])); print(f'submit: exit $rc, wall {b - a:.2f} s')" $W/submit.txt | tee -a $W/summary.txt
  grep -o "(sweep [^)]*)" $W/submit.err | head -1 | tr -d '()' | cut -d' ' -f2 > $W/sweep.txt
  ids; echo "sweep $S: ${IDS[*]}" | tee -a $W/summary.txt
  [ ${#IDS[@]} -ge 2 ] || { echo "no sweep was submitted"; save; exit 1; }
  for j in "${IDS[@]}"; do bg_tail $j; done
  sleep 2; rl list --sweep $S; rl cluster
  halving_wait 30
  save
  ;;
halving-finish)
  ids
  if [ -z "${NO_WARM:-}" ] && ! [ -s $W/warm.txt ]; then   # a warm submit through the API, while the points run
    halving_wait 120 running-last   # once the last point runs (nothing of the sweep waits) or all ended
    mark "one more submit through the API (a single job, while the last point runs): timed, then cancelled"
    echo "start $(date +%s.%N)" > $W/warm-submit.txt
    python3 -m rayjobs.submit +exp=$EXP trainer.total_training_steps=1 trainer.save_freq=-1 "$@" > $W/warm.txt 2>> $W/summary.txt
    echo "end $(date +%s.%N)" >> $W/warm-submit.txt
    WJ=$(cat $W/warm.txt)
    $RJ status $WJ --json > $W/status-$WJ.json 2>/dev/null
    rl stop $WJ
    python3 - $W/warm-submit.txt $W/status-$WJ.json <<'PY' | tee -a $W/summary.txt
import json, sys
a, b = (float(l.split()[1]) for l in open(sys.argv[1]))
from datetime import datetime
st = json.load(open(sys.argv[2]))
q = st.get("queued_at") or st.get("submitted_at")
try:
    qe = float(q) if isinstance(q, (int, float)) else datetime.fromisoformat(str(q)).timestamp()
    after = f"{qe - a:.2f}"
except (TypeError, ValueError):
    after = "?"
print(f"second submit {st.get('id')}: wall {b - a:.2f} s; status then {st.get('status')} {st.get('queue_position') or ''}; "
      f"submitted_at {q} ({after} s after the command started)")
PY
  fi
  halving_wait 60
  halving_report
  if [ "$DRY" = 1 ]; then   # here: end what setup left running (by PID), then `rayjobs local stop`
    kill $(cat $W/feeder.pid) $(cat $W/gpuwatch.pid) 2>/dev/null; rm -f $W/feeder.pid $W/gpuwatch.pid
    $RJ local stop
  fi
  ;;
crash)
  mark "the head's Ray crashes with nothing running (${HARD:+one SIGKILL of every head process at once}${HARD:-SIGTERM, SIGKILL after 10 s}); its node script again"
  S=$(cat $W/sweep.txt 2>/dev/null)
  t0=$(date +%s.%N)
  restart_head
  for _ in $(seq 1 60); do rl list --sweep "$S" > /dev/null 2>&1 && break; sleep 1; done
  echo "listed again $(python3 -c "import time; print(round(time.time() - $t0, 1))") s after the crash began" | tee -a $W/summary.txt
  rl list --sweep "$S"; rl cluster
  save
  ;;
esac
mark "done ($PHASE)"

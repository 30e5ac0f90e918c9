#!/usr/bin/env bash
# On the GPU machine, repo root as cwd, as the last call of the chain (docs/gpu-e2e.md):
#   bash scripts/gpu/device_run.sh [MODE] [extra rayjobs/verl overrides...]
# MODE: suite (default: the sweep, tail, crash + resume, plot of issue 7, see scripts/gpu/suite.sh),
#       resume (docs/gpu-e2e.md §2 alone: one job, its TaskRunner killed after its step-3
#       checkpoint, attempt 2 resumes; tail on a pty, status, plot),
#       both (one rayjobs submit, then the same verl command through plain `ray job submit`),
#       startup (issue 33: the preset twice through the queue, one after the other, 1 step each,
#       followed; the phase table of the first and the next job, scripts/gpu/phases.py; knobs
#       RESTART_HEAD=1 (a fresh head), COLD=1 (no compile caches of an earlier call), TAG,
#       JOBS (labels of this call's jobs, default "first next"), PHASES (the logs of the table),
#       ARGS_<label> (that job's own overrides), PRESET (default gpu_tiny_grpo; gpu_tiny_multiturn
#       makes its tool-use model first, the 57 s SFT, before the first job)),
#       rayjobs, plain, setup (install + model/data + head only).
# Unpacks the bundle, makes the tiny model and data, starts rayjobs' embedded Ray head on
# 127.0.0.1 (token auth) with the environment of scripts/gpu/env.sh, then runs the tiny GRPO run.
# Everything it learns lands in $OUT (at most 8 files come back): chain.log is written by the
# caller (`... 2>&1 | tee $OUT/chain.log`), summary.txt, rayjobs.log, plain.log, logs.tgz.
# Time-boxed: the whole script stays under $LIMIT seconds (default 560; a device call may run 600).
set -uo pipefail
T0=$(date +%s)
LIMIT=${LIMIT:-560}
MODE=${1:-suite}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/root/work}; mkdir -p $W
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mark() { echo "### [t=$(( $(date +%s) - T0 ))s] $*"; }

mark "unpack"
bash scripts/gpu/unpack.sh install || { echo "unpack failed"; exit 1; }
source scripts/gpu/env.sh
STORAGE=$RAYJOBS_HOME/storage
mark "versions"
python3 - <<'PY'
import importlib.metadata as m, sys
print(sys.executable, sys.version.split()[0])
for p in ("torch", "ray", "vllm", "verl", "transformers", "tokenizers", "hydra-core", "omegaconf", "transferqueue", "tensordict"):
    try: print(f"  {p} {m.version(p)}")
    except Exception as e: print(f"  {p} MISSING {e}")
PY
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader

mark "model + data"
[ -f $STORAGE/models/tiny-qwen2/config.json ] || python3 scripts/gpu/make_tiny.py $STORAGE 2>&1 | grep -v Writing
if [ "${PRESET:-}" = gpu_tiny_multiturn ] && [ ! -f $STORAGE/models/tiny-qwen2-tools/config.json ]; then
  python3 scripts/gpu/make_tiny.py $STORAGE --tools 2>&1 | grep -v Writing
fi

if [ "${RESTART_HEAD:-0}" = 1 ]; then   # a fresh head for this call (startup mode: the first job on it)
  mark "stop the head of the earlier call"
  python3 -m rayjobs.cli local stop || true
fi
if [ "${COLD:-0}" = 1 ]; then   # startup mode: no compile caches of an earlier call (their defaults and rayjobs')
  rm -rf ~/.cache/vllm ~/.triton /tmp/torchinductor_$(id -un) ~/.nv/ComputeCache ~/.cache/torch_extensions /tmp/rayjobs-cache-$(id -u)
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" || echo "page cache NOT dropped (read-only /proc/sys)"
fi

mark "embedded head"
# setsid: the head outlives this call (a device call ends by killing what it started, except new sessions),
# so the next call can tail or plot jobs that are still running.
setsid -w python3 -m rayjobs.cli local start
REC=$RAYJOBS_HOME/local/head.json
DASH=$(python3 -c "import json; print(json.load(open('$REC'))['dashboard'])")
GCS=$(python3 -c "import json; print(json.load(open('$REC'))['gcs'])")
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAYJOBS_HOME/local/auth_token   # for the plain `ray` CLI only
curl -s -m 5 -H "Authorization: Bearer $(cat $RAY_AUTH_TOKEN_PATH)" $DASH/api/version; echo
for _ in $(seq 1 30); do   # a fresh head answers before its job agent is up ("No available agent to submit job")
  RAY_ADDRESS=$DASH ray job list >/dev/null 2>&1 && curl -s -m 3 -H "Authorization: Bearer $(cat $RAY_AUTH_TOKEN_PATH)" \
    $DASH/api/v0/nodes 2>/dev/null | grep -q '"ALIVE"' && break; sleep 1
done
mark "head ready"
[ "$MODE" = setup ] && exit 0


collect() {   # logs of the Ray session, metrics files, checkpoints listing
  local s=$RAYJOBS_HOME/local/ray/session_latest
  {
    echo "--- ps"; ps -eo pid,etimes,rss,args --sort=-rss | cut -c1-220 | head -40
    echo "--- nvidia-smi"; nvidia-smi
    echo "--- checkpoints"; find $STORAGE/checkpoints -maxdepth 4 | head -60
    echo "--- runs (rayjobs metrics files)"; find $STORAGE/runs -type f -exec ls -la {} \; 2>/dev/null
    echo "--- other verl jsonl"; find $s/runtime_resources /root -name '*.jsonl' -newer $REC 2>/dev/null | grep -v "^$STORAGE/runs" | head
  } > $W/collect.txt 2>&1
  # $W holds the small files (collect.txt, the jobs' logs, ids, list/plot output); logs/ is Ray's
  tar -czf $OUT/logs.tgz --exclude='logs/events' -C $(dirname $W) $(basename $W) -C $s logs 2>/dev/null
  if [ $(stat -c %s $OUT/logs.tgz) -gt 15000000 ]; then
    tar -czf $OUT/logs.tgz --exclude='python-core-*' --exclude='logs/events' -C $(dirname $W) $(basename $W) -C $s logs
  fi
}
stop_job() { RAY_ADDRESS=$DASH timeout 70 ray job stop "$1" >/dev/null 2>&1; }
gpu_free() {  # the previous job's actors exit with its driver; give Ray a moment to return the GPU
  sleep 10   # (`ray status` is not used: against the token-auth head it timed out in a local dry run)
}

if [ "$MODE" = suite ]; then
  source scripts/gpu/suite.sh "$@"
  collect
  mark "done"
  exit 0
fi

if [ "$MODE" = startup ]; then   # issue 33 (docs/gpu-e2e.md §10, §12): the FIRST job on this head, then the NEXT
  # Each is the preset through the queue, 1 step, followed to its end; phases.py reads the stamped logs.
  # RAYJOBS_NODE_CACHE=off (set before the head starts) is the control: the runner sets no cache.
  # JOBS: the labels of this call's jobs, in order (default "first next"); a later call on the same
  # head may run JOBS="next next2" with PHASES="first next next2" (the earlier logs stay in $W).
  NC=${RAYJOBS_NODE_CACHE:-/tmp/rayjobs-cache-$(id -u)}
  TAG=${TAG:-}
  JOBS=${JOBS:-first next}
  PRESET=${PRESET:-gpu_tiny_grpo}
  caches() {
    for d in $NC/* ~/.cache/vllm ~/.triton/cache /tmp/torchinductor_$(id -un) ~/.nv/ComputeCache ~/.cache/torch_extensions; do
      [ -e "$d" ] && echo "  $d: $(du -sh $d 2>/dev/null | cut -f1) in $(find $d -type f 2>/dev/null | wc -l) files"
    done
    echo "  byte code under $SITE: $(find $SITE -name '*.pyc' 2>/dev/null | wc -l) .pyc files"
    local all site new=""
    all=$(find $NC/pyc -name '*.pyc' 2>/dev/null | wc -l); site=$(find $NC/pyc$SITE -name '*.pyc' 2>/dev/null | wc -l)
    [ -n "${1:-}" ] && new=", $(find $NC/pyc -name '*.pyc' -newer $1 2>/dev/null | wc -l) written since this job's submit"
    echo "  byte code in the node cache: $all .pyc files ($site of $SITE)$new"
  }
  { echo "node cache: ${RAYJOBS_NODE_CACHE:-default $NC}; PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-<unset>}" \
      "RAYJOBS_NODE_CACHE_PYC=${RAYJOBS_NODE_CACHE_PYC-<unset>}; before the jobs ($JOBS):"; caches; } | tee -a $W/summary.txt
  n=$(echo $JOBS | wc -w)
  for label in $JOBS; do
    # a warm next job needs ~215 s (submit to exit); a first one ~290 s: with LIMIT=585 both fit one call
    n=$(( n - 1 )); T=$(( $(left) - 12 - 220 * n ))   # leave each job after this one >=220 s
    mark "$label job: +exp=$PRESET, 1 step, followed (timeout ${T}s)"
    xa="ARGS_${label//-/_}"; eval "XA=(${!xa:-})"   # ARGS_<label>: this job's own overrides (shell words)
    touch $W/submit-$label$TAG; ta=$(date +%s.%N)
    timeout $T python3 -m rayjobs.submit +exp=$PRESET rayjobs.follow=true rayjobs.preflight=false \
      trainer.total_training_steps=1 trainer.save_freq=-1 "$@" "${XA[@]}" 2>&1 | python3 -u scripts/gpu/summarize.py --epoch > $W/$label$TAG.log
    rc=${PIPESTATUS[0]}; tb=$(date +%s.%N)
    JOB=$(python3 -c "import json; print(json.loads(open('$RAYJOBS_HOME/ledger.jsonl').read().splitlines()[-1])['id'])" 2>/dev/null)
    { echo "$label job $JOB: exit $rc, wall $(python3 -c "print(round($tb-$ta,1))") s; caches after it:"; caches $W/submit-$label$TAG; } | tee -a $W/summary.txt
    grep -E "\[rayjobs\]|step:1 - " $W/$label$TAG.log | cut -c1-260
    cp $W/$label$TAG.log $OUT/ 2>/dev/null
    [ $rc = 124 ] && { echo "timed out: stopping $JOB"; stop_job $JOB; break; }
  done
  PH=(); for label in ${PHASES:-$JOBS}; do [ -f $W/$label$TAG.log ] && PH+=("$label$TAG=$W/$label$TAG.log"); done
  python3 scripts/gpu/phases.py "${PH[@]}" | tee $W/phases$TAG.txt
  cat $W/summary.txt $W/phases$TAG.txt > $OUT/phases$TAG.txt
  collect
  mark "done"
  exit 0
fi

if [ "$MODE" = resume ]; then   # §2: a crash after a checkpoint, and the retry that resumes from it
  RJ="python3 -m rayjobs.cli"
  mark "one job: 6 steps, a checkpoint every 3, one retry"
  python3 -m rayjobs.submit +exp=gpu_tiny_grpo rayjobs.max_retries=1 trainer.total_training_steps=6 \
    trainer.save_freq=3 "$@" > $W/resume-id.txt 2> $W/resume-submit.err; cat $W/resume-submit.err
  J=$(cat $W/resume-id.txt); [ -n "$J" ] || { echo "nothing was submitted"; exit 1; }
  (  # verl saves the checkpoint before it logs the step: once step:3 is logged, kill -9 the TaskRunner
    for _ in $(seq 1 200); do $RJ logs $J 2>/dev/null | grep -q "step:3 - " && break; sleep 2; done
    sleep 1
    pids=$(pgrep -f "^ray::TaskRunner")   # anchored: the pattern would also match a shell holding it
    echo "### [t=$(( $(date +%s) - T0 ))s] crash: kill -9 TaskRunner actor(s) $pids of $J after its step-3 checkpoint"
    [ -n "$pids" ] && kill -9 $pids
  ) &
  KILLER=$!
  mark "rayjobs tail $J (live panel on a pty)"
  timeout $(( $(left) - 40 )) script -qfec "stty cols 150 rows 50; $RJ tail $J" /dev/null > $OUT/resume.tty 2>&1
  echo "tail exit $?" | tee -a $W/summary.txt
  kill $KILLER 2>/dev/null
  $RJ status $J 2>&1 | tee -a $W/summary.txt
  $RJ logs $J 2>&1 | grep -E "\[rayjobs\]|Resuming|Loaded" | tee -a $W/summary.txt
  $RJ plot $J -o $OUT/resume.png 2>&1 | tail -2
  cp $W/summary.txt $OUT/summary.txt
  collect
  mark "done"
  exit 0
fi

if [ "$MODE" = both ] || [ "$MODE" = rayjobs ]; then
  TA=$(( $(left) - 40 ))                                   # alone: all the time there is
  if [ "$MODE" = both ]; then TA=$(( $(left) - 170 )); [ $TA -gt 330 ] && TA=330; fi   # leave >=130 s for plain
  mark "rayjobs submit (follow), timeout ${TA}s"
  ta=$(date +%s.%N)
  timeout $TA python3 -m rayjobs.submit +exp=gpu_tiny_grpo rayjobs.follow=true "$@" 2>&1 \
    | python3 -u scripts/gpu/summarize.py --stamp > $OUT/rayjobs.log
  rc=${PIPESTATUS[0]}
  if [ $rc = 2 ] && ! grep -q "submitted; follow" $OUT/rayjobs.log; then   # refused on the client: say so, retry unchecked
    echo "rayjobs refused the submission (exit 2):"; grep -E "error|rayjobs:" $OUT/rayjobs.log | head -20
    mv $OUT/rayjobs.log $W/rayjobs-refused.log
    mark "rayjobs submit again with rayjobs.preflight=false"
    timeout $(( TA - 30 )) python3 -m rayjobs.submit +exp=gpu_tiny_grpo rayjobs.follow=true rayjobs.preflight=false "$@" 2>&1 \
      | python3 -u scripts/gpu/summarize.py --stamp > $OUT/rayjobs.log
    rc=${PIPESTATUS[0]}
  fi
  tb=$(date +%s.%N)
  JOB=$(python3 -c "import json; print(json.loads(open('$RAYJOBS_HOME/ledger.jsonl').read().splitlines()[-1])['id'])" 2>/dev/null)
  echo "rayjobs run: job $JOB exit $rc wall $(python3 -c "print(round($tb-$ta,1))") s" | tee -a $W/summary.txt
  [ $rc = 124 ] && { echo "timed out: stopping $JOB"; stop_job $JOB; }
  tail -25 $OUT/rayjobs.log
  gpu_free
fi

if [ "$MODE" = both ] || [ "$MODE" = plain ]; then
  # The same verl command line rayjobs built (its dry run), without the runner prefix and
  # under its own run name / checkpoint dir, through Ray's own CLI.
  EP=$(python3 -m rayjobs.submit +exp=gpu_tiny_grpo rayjobs.dry_run=true rayjobs.preflight=false "$@" 2>/dev/null \
       | python3 -c "import json,sys,time; d=json.load(sys.stdin)['submit_job']; \
print(d['entrypoint'].split(' -- ',1)[1].replace(d['metadata']['run'], 'plain-'+time.strftime('%Y%m%d-%H%M%S')))")
  [ -n "$EP" ] || { echo "could not build the verl command (dry run failed)"; exit 1; }
  TB=$(( $(left) - 35 ))
  mark "plain ray job submit, timeout ${TB}s"
  echo "$EP" > $W/plain_entrypoint.txt
  ta=$(date +%s.%N)
  set -f; eval "ARGS=($EP)"   # shell words, so that Ray's shlex.join rebuilds the same command line
  RAY_ADDRESS=$DASH timeout $TB ray job submit --working-dir . --submission-id plain-$(date +%H%M%S) -- "${ARGS[@]}" 2>&1 \
    | python3 -u scripts/gpu/summarize.py --stamp > $OUT/plain.log
  rc=${PIPESTATUS[0]}; set +f
  tb=$(date +%s.%N)
  echo "plain run: exit $rc wall $(python3 -c "print(round($tb-$ta,1))") s" | tee -a $W/summary.txt
  [ $rc = 124 ] && { PJ=$(grep -o "raysubmit_[A-Za-z0-9]*\|plain-[0-9]*" $OUT/plain.log | head -1); stop_job $PJ; }
  tail -25 $OUT/plain.log
fi

mark "summary"
python3 scripts/gpu/summarize.py rayjobs=$OUT/rayjobs.log plain=$OUT/plain.log >> $W/summary.txt
cp $W/summary.txt $OUT/summary.txt; cat $OUT/summary.txt
collect
mark "done"

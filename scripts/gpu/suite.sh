# Sourced by scripts/gpu/device_run.sh (MODE=suite) once the embedded head is up on the GPU machine.
# What issue 7 asks for, in one time-boxed call (uses mark/left/stop_job/$W/$OUT/$DASH from the caller):
#  1. a 2-point KL sweep through the rayjobs launcher on the 1-GPU head: point 2 waits QUEUED behind
#     point 1 (it is not crashed by verl's GPU check);
#  2. `rayjobs list --sweep S` while point 2 is queued; `rayjobs tail` of point 1 (plain lines) and of
#     point 2 (the live panel, on a pseudo-terminal);
#  3. point 2 runs with rayjobs.max_retries=1: once its step-5 checkpoint is written, its TaskRunner
#     actor is killed (a crash), and the runner's attempt 2 resumes from global_step_5;
#  4. `rayjobs plot --sweep S` of the reward curves;
#  5. point 1's exact verl command through plain `ray job submit` (step time, rayjobs vs plain).
# The sweep varies actor_rollout_ref.actor.kl_loss_coef: this GRPO preset uses the KL *loss*
# (use_kl_in_reward=false), so algorithm.kl_ctrl.kl_coef would change nothing.
RJ="python3 -m rayjobs.cli"
KL=(actor_rollout_ref.actor.kl_loss_coef=0.001,0.1)

mark "sweep submit"
ta=$(date +%s.%N)
python3 -m rayjobs.submit -m +exp=gpu_tiny_grpo "${KL[@]}" rayjobs.max_retries=1 "$@" > $W/ids.txt 2> $W/submit.err
rc=$?; cat $W/submit.err
if [ $rc = 2 ] && [ ! -s $W/ids.txt ]; then   # refused on the client: say so, submit unchecked
  mark "sweep submit again with rayjobs.preflight=false"
  python3 -m rayjobs.submit -m +exp=gpu_tiny_grpo "${KL[@]}" rayjobs.max_retries=1 rayjobs.preflight=false "$@" \
    > $W/ids.txt 2> $W/submit.err; cat $W/submit.err
fi
echo "sweep submit returned after $(python3 -c "print(round($(date +%s.%N)-$ta,2))") s" | tee -a $W/summary.txt
mapfile -t IDS < $W/ids.txt
J1=${IDS[0]:-}; J2=${IDS[1]:-}
S=$(grep -o "(sweep [^)]*)" $W/submit.err | head -1 | tr -d '()' | cut -d' ' -f2)
echo "sweep $S: point 1 $J1, point 2 $J2" | tee -a $W/summary.txt
[ -n "$J2" ] || { echo "no sweep was submitted"; return 0; }

sleep 4
mark "rayjobs list --sweep $S (point 2 should be QUEUED)"
$RJ list --sweep $S 2>&1 | tee $W/list1.txt | tee -a $W/summary.txt

# The crash for step 3, in the background: wait for point 2's "step:5" line (verl saves the
# checkpoint before it logs the step), then kill -9 the TaskRunner actor of the running job.
(
  for _ in $(seq 1 400); do
    $RJ logs $J2 2>/dev/null | grep -q "step:5 - " && break
    sleep 2
  done
  sleep 1
  pids=$(pgrep -f "^ray::TaskRunner")   # anchored: an unanchored pattern also matches a shell whose command line holds it
  echo "### [t=$(( $(date +%s) - T0 ))s] crash: kill -9 TaskRunner actor(s) $pids of $J2 after its step-5 checkpoint"
  [ -n "$pids" ] && kill -9 $pids
) &
KILLER=$!

mark "rayjobs tail $J1 --plain"
timeout $(( $(left) - 200 )) $RJ tail $J1 --plain 2>&1 | python3 -u scripts/gpu/summarize.py --stamp > $OUT/tail1.log
echo "point 1 ($J1): tail exit ${PIPESTATUS[0]}, ended at t=$(( $(date +%s) - T0 ))s" | tee -a $W/summary.txt
tail -5 $OUT/tail1.log

mark "rayjobs tail $J2 (live panel on a pty)"
$RJ list --sweep $S 2>&1 | tee -a $W/summary.txt
if command -v script >/dev/null; then
  timeout $(( $(left) - 140 )) script -qfec "stty cols 150 rows 50; $RJ tail $J2" /dev/null > $OUT/tail2.tty 2>&1
  rc=$?
else
  timeout $(( $(left) - 140 )) $RJ tail $J2 --plain > $OUT/tail2.tty 2>&1; rc=$?
fi
echo "point 2 ($J2): tail exit $rc, ended at t=$(( $(date +%s) - T0 ))s" | tee -a $W/summary.txt
kill $KILLER 2>/dev/null
$RJ status $J2 --json > $W/status2.json 2>&1; cat $W/status2.json | tee -a $W/summary.txt; echo
$RJ logs $J2 2>&1 | grep -E "\[rayjobs\]|[Rr]esum|global_step|Traceback|Error" | head -40 | tee -a $W/summary.txt

mark "rayjobs plot --sweep $S"
$RJ plot --sweep $S -o $OUT/sweep.png --json > $W/plot.json 2>> $W/summary.txt
python3 -c "import json; d=json.load(open('$W/plot.json')); print(json.dumps(d)[:3000])" | tee -a $W/summary.txt
$RJ list --sweep $S 2>&1 | tee -a $W/summary.txt

if [ $(left) -gt 150 ]; then
  EP=$(python3 -m rayjobs.submit +exp=gpu_tiny_grpo actor_rollout_ref.actor.kl_loss_coef=0.001 "$@" \
         rayjobs.dry_run=true rayjobs.preflight=false 2>/dev/null \
       | python3 -c "import json,sys,time; d=json.load(sys.stdin)['submit_job']; \
print(d['entrypoint'].split(' -- ',1)[1].replace(d['metadata']['run'], 'plain-'+time.strftime('%Y%m%d-%H%M%S')))")
  echo "$EP" > $W/plain_entrypoint.txt
  TB=$(( $(left) - 30 ))
  mark "plain ray job submit of point 1's verl command, timeout ${TB}s"
  ta=$(date +%s.%N)
  set -f; eval "ARGS=($EP)"   # shell words: `ray job submit` re-joins them with shlex.join
  RAY_ADDRESS=$DASH timeout $TB ray job submit --working-dir . --submission-id plain-$(date +%H%M%S) -- "${ARGS[@]}" 2>&1 \
    | python3 -u scripts/gpu/summarize.py --stamp > $OUT/plain.log
  rc=${PIPESTATUS[0]}; set +f
  echo "plain run: exit $rc wall $(python3 -c "print(round($(date +%s.%N)-$ta,1))") s" | tee -a $W/summary.txt
  [ $rc = 124 ] && { PJ=$(grep -o "plain-[0-9]*" $OUT/plain.log | head -1); stop_job $PJ; }
  tail -8 $OUT/plain.log
else
  echo "plain run skipped: $(left) s left" | tee -a $W/summary.txt; : > $OUT/plain.log
fi

mark "summary"
$RJ logs $J1 > $W/j1.log 2>&1; $RJ logs $J2 > $W/j2.log 2>&1
python3 scripts/gpu/summarize.py "rayjobs-point1=$W/j1.log" "rayjobs-point2=$W/j2.log" plain=$OUT/plain.log >> $W/summary.txt
cp $W/summary.txt $OUT/summary.txt; cat $OUT/summary.txt

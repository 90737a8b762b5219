#!/usr/bin/env bash
# Failure recovery: a rank is killed (SIGKILL) during training on 4 local processes; the launcher
# stops the job, re-plans for the 3 devices left, resumes from the last checkpoint and finishes
# with the same losses as an uninterrupted run. Torn, corrupted and foreign checkpoints are
# refused; re-planning without any device left is refused.
set -u
exe=$1
plan_bin=$2
launch=$3
tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/lib.sh"
launch() { GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" timeout 180 "$launch" "$@"; }

"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 4 \
  --batch 16 --micro-batches 4 --optimizer adam --out "$tmp/plan4.pb" >/dev/null || exit 1

# 1. Uninterrupted, 10 iterations.
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 10 --metrics-out "$tmp/full.json" \
  > "$tmp/full.log" 2>&1; rc=$?
check "an uninterrupted 4-rank run exits 0" '[ $rc -eq 0 ]'

# 2. Rank 2 killed at iteration 5; checkpoints every 2 iterations; re-plan and resume.
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 10 --metrics-out "$tmp/recovered.json" \
  --timeout 10 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 2 --on-failure replan \
  --run-dir "$tmp/run" -- --kill-rank-at 2:5 > "$tmp/recovered.log" 2>&1; rc=$?
check "the job with a killed rank finishes (exit 0)" '[ $rc -eq 0 ]'
check "the launcher names the dead rank and re-plans for 3 devices" \
  'grep -q "rank 2 failed (exit status 137" "$tmp/recovered.log" && grep -q "re-planned for 3 devices" "$tmp/recovered.log"'
check "the new plan has 3 ranks" \
  '"$plan_bin" inspect --plan "$tmp/ckpt/plan-after-failure-1.pb" | grep -q "1 x 3 cpu-process"'
check "training resumed after the last complete checkpoint (iteration 3)" \
  'grep -q "rank 0: resuming after iteration 3 from" "$tmp/recovered.log"'
# The failed attempt's metrics (its complete iterations) come first, the resumed run's append.
check "the metrics of both attempts are iterations 0-9, with the uninterrupted run's losses" \
  '[ -s "$tmp/recovered.json" ] && [ "$(iteration_losses "$tmp/recovered.json")" = "$(iteration_losses "$tmp/full.json")" ]'

# 3. A corrupted newest checkpoint: the previous one (commit keeps it) is used, with a warning
#    naming the file; when every checkpoint is damaged, resuming is refused naming each problem.
cp -r "$tmp/ckpt" "$tmp/bad"
latest=$(cat "$tmp/bad/LATEST")
previous=$(ls -d "$tmp/bad"/iter-* | xargs -n1 basename | grep -vx "$latest")
victim=$(ls "$tmp/bad/$latest"/op-*.bin | head -1)
printf 'garbage' | dd of="$victim" bs=1 seek=64 conv=notrunc 2>/dev/null
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 12 --timeout 10 \
  --checkpoint-dir "$tmp/bad" --resume --metrics-out "$tmp/fallback.json" > "$tmp/bad.log" 2>&1; rc=$?
check "a corrupted newest checkpoint falls back to the previous one ($previous), with a warning" \
  '[ $rc -eq 0 ] && grep -q "checksum mismatch" "$tmp/bad.log" && grep -q "$(basename "$victim")" "$tmp/bad.log" && grep -q "using $previous instead" "$tmp/bad.log"'
check "training resumed after $previous" \
  'grep -q "resuming after iteration ${previous#iter-} from" "$tmp/bad.log"'
victim2=$(ls "$tmp/bad/$previous"/op-*.bin | head -1)
truncate -s 10 "$victim2"
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 12 --timeout 10 \
  --checkpoint-dir "$tmp/bad" --resume > "$tmp/torn.log" 2>&1; rc=$?
check "with every checkpoint damaged, resuming is refused naming both" \
  '[ $rc -ne 0 ] && grep -q "no valid checkpoint" "$tmp/torn.log" && grep -q "torn" "$tmp/torn.log" && grep -q "checksum mismatch" "$tmp/torn.log"'

# A FIFO as LATEST and no checkpoint beside it: the ranks refuse to resume at once, naming it,
# instead of blocking in open() past --timeout (timeout 180 would end such a hang with 124).
mkdir -p "$tmp/fifo-ck" && mkfifo "$tmp/fifo-ck/LATEST"
named="'$tmp/fifo-ck/LATEST' is a FIFO, not a regular file"
start=$SECONDS
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 12 --timeout 10 \
  --checkpoint-dir "$tmp/fifo-ck" --resume > "$tmp/fifo.log" 2>&1; rc=$?
check "a FIFO as LATEST: resuming is refused within --timeout, naming it" \
  '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((SECONDS - start)) -lt 60 ] && grep -qF "$named" "$tmp/fifo.log"'

# 4. A plan of another model cannot resume from it.
"$plan_bin" --log-level warn search --model zoo:tiny-candle-uno --cluster cpu-local --devices 2 \
  --batch 16 --micro-batches 4 --optimizer adam --out "$tmp/other.pb" >/dev/null || exit 1
launch --plan "$tmp/other.pb" --nprocs 2 --iterations 12 --timeout 10 \
  --checkpoint-dir "$tmp/ckpt" --resume > "$tmp/other.log" 2>&1; rc=$?
check "a checkpoint of another model is refused" '[ $rc -ne 0 ] && grep -q "is of model" "$tmp/other.log"'

# 5. Checkpoint flags: --checkpoint-every without a directory, and --resume of an empty one, are
#    refused once by the launcher before any rank starts; --resume-if-present starts fresh there
#    with one warning and, run again (a requeued job), resumes on every rank.
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 4 --checkpoint-every 2 > "$tmp/every.log" 2>&1; rc=$?
check "the launcher refuses --checkpoint-every without --checkpoint-dir (exit 2, naming both)" \
  '[ $rc -eq 2 ] && grep -q -- "--checkpoint-every 2 needs --checkpoint-dir" "$tmp/every.log" && ! grep -q "^\[rank" "$tmp/every.log"'
mkdir -p "$tmp/empty-ck"
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 4 --checkpoint-dir "$tmp/empty-ck" --resume \
  > "$tmp/empty.log" 2>&1; rc=$?
check "--resume of an empty directory: exit 2, one error naming it, no rank started" \
  '[ $rc -eq 2 ] && [ "$(grep -c "error" "$tmp/empty.log")" -eq 1 ] && grep -q "no checkpoint in .$tmp/empty-ck." "$tmp/empty.log" && ! grep -q "^\[rank" "$tmp/empty.log"'
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 4 --timeout 10 --checkpoint-dir "$tmp/requeue" \
  --checkpoint-every 2 --resume-if-present > "$tmp/requeue1.log" 2>&1; rc=$?
check "--resume-if-present without a checkpoint: trains from iteration 0 after one warning" \
  '[ $rc -eq 0 ] && [ "$(grep -c "no checkpoint in" "$tmp/requeue1.log")" -eq 1 ] && ! grep -q "resuming after" "$tmp/requeue1.log" && [ -f "$tmp/requeue/LATEST" ]'
launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 6 --timeout 10 --checkpoint-dir "$tmp/requeue" \
  --checkpoint-every 2 --resume-if-present > "$tmp/requeue2.log" 2>&1; rc=$?
check "--resume-if-present with a checkpoint: every rank resumes after iteration 3" \
  '[ $rc -eq 0 ] && [ "$(grep -c "resuming after iteration 3 from" "$tmp/requeue2.log")" -eq 4 ] && ! grep -q "no checkpoint" "$tmp/requeue2.log"'

# 6. Re-planning needs a device left and a rank that exists.
"$plan_bin" replan --plan "$tmp/plan4.pb" --exclude-ranks 0,1,2,3 --out "$tmp/none.pb" \
  > "$tmp/none.log" 2>&1; rc=$?
check "re-planning with no device left exits 2" '[ $rc -eq 2 ] && grep -q "no device would be left" "$tmp/none.log"'
"$plan_bin" replan --plan "$tmp/plan4.pb" --exclude-ranks 9 --out "$tmp/none.pb" \
  > "$tmp/none.log" 2>&1; rc=$?
check "re-planning without a rank the plan does not have exits 2" '[ $rc -eq 2 ] && grep -q "not a rank" "$tmp/none.log"'
exit $fail

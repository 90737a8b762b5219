#!/usr/bin/env bash
# Ctrl-C typed in a terminal (a pty: the kernel sends SIGINT to the whole foreground process
# group, launcher, ranks and log pipes alike) under graphpipe-launch, on a 2-rank CPU job: the
# ranks stop at an agreed iteration with a checkpoint, what they print while stopping reaches the
# console, and the launcher's last line says where the job stopped and the exact command that
# resumes it (exit 130, logs kept); that command continues the loss exactly as an uninterrupted
# run. A second ^C kills at once. `status --run-dir` finds the job from its log directory.
# `submit` to a node daemon ends the same way.
set -u
exe=$(realpath "$1")  # absolute: the test runs in $tmp
plan_bin=$(realpath "$2")
launch=$(realpath "$3")
tmp=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$tmp" && mkdir -p "$tmp"
. "$here/lib.sh"
pty_run=(python3 "$here/../support/pty_interrupt.py")
export GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin"
cd "$tmp" || exit 1  # the launcher's default log directory is ./graphpipe-runs/JOB-ID

# About 8 ms an iteration on 2 CPU ranks: a stop asked for at iteration 100 lands well before 800.
"$plan_bin" --log-level warn search --model 'zoo:tiny-mmt?hidden=128&ffn=512' --cluster cpu-local \
  --devices 2 --batch 16 --micro-batches 4 --optimizer adam --out plan.pb >/dev/null || exit 1
# This test's ranks only (their store directory is under $tmp): other tests run "plan.pb" too.
ranks_alive() { pgrep -f -- "run --plan plan.pb .*--store-dir $tmp/" | wc -l; }
# The console as a terminal shows it, without carriage returns.
console() { tr -d '\r' < "$1"; }

# 1. The uninterrupted run, to compare with.
timeout 120 "$launch" --plan plan.pb --iterations 800 --log-every 100 --metrics-out ref.json \
  > ref.log 2>&1; rc=$?
check "the uninterrupted run finishes (exit 0)" '[ $rc -eq 0 ] && [ -s ref.json ]'
check "the launcher prints its job id, log directory and coordinator address at start" \
  'grep -q "^graphpipe-launch: job job-[0-9a-f]*: logs in $tmp/graphpipe-runs/job-[0-9a-f]* " ref.log && grep -q "^graphpipe-launch: job job-[0-9a-f]*: coordinator at 127.0.0.1:[0-9]*$" ref.log'
job=$(sed -n 's/^graphpipe-launch: job \(job-[0-9a-f]*\): logs in .*/\1/p' ref.log)
check "the logs are kept in ./graphpipe-runs/$job, and the coordinator used that job id" \
  '[ -n "$job" ] && [ -s "graphpipe-runs/$job/attempt-0/rank-0.log" ] && [ -s "graphpipe-runs/$job/attempt-0/rank-1.log" ] && grep -q "job $job: all 2 ranks registered" "graphpipe-runs/$job/attempt-0/rank-0.log"'

# 2. ^C once, after `status --run-dir` has seen the job.
"${pty_run[@]}" --log int.log --after "iteration 99: loss" --when-file status.done --timeout 120 \
  -- "$launch" --plan plan.pb --iterations 800 --log-every 50 --checkpoint-dir ck \
  --metrics-out m.json &
driver=$!
for _ in $(seq 600); do grep -q "iteration 49: loss" int.log 2>/dev/null && break; sleep 0.1; done
run_dir=$(console int.log | sed -n 's/^graphpipe-launch: job job-[0-9a-f]*: logs in \([^ ]*\) .*/\1/p')
for _ in $(seq 100); do  # until both ranks have reported an iteration (heartbeats: 0.5 s)
  "$exe" status --run-dir "$run_dir" > status.txt 2>&1; rc_status=$?
  [ "$(grep -c "^rank [01]: iter" status.txt)" -eq 2 ] && break
  sleep 0.1
done
"$exe" status --run-dir "$tmp/nowhere" > status-none.txt 2>&1; rc_none=$?
touch status.done
wait "$driver"; rc=$?
check "status --run-dir reads the address and token from the log directory" \
  '[ $rc_status -eq 0 ] && grep -q "^rank 0: iter" status.txt && grep -q "^rank 1: iter" status.txt'
check "status --run-dir on a directory without a job says so (exit non-zero)" \
  '[ $rc_none -ne 0 ] && grep -q "run-dir $tmp/nowhere: no coordinator address" status-none.txt'
console int.log > int.txt
stop=$(sed -n 's/.*rank 0: stopped after iteration \([0-9]*\) of 800.*/\1/p' int.txt)
check "^C: exit 130, and the ranks' own 'stopped after iteration' lines reach the console" \
  '[ $rc -eq 130 ] && [ -n "$stop" ] && grep -q "^\[rank 1\] .*rank 1: stopped after iteration $stop of 800" int.txt'
check "the last line says where it stopped, its checkpoint and how to resume" \
  '[ "$(tail -1 int.txt)" = "graphpipe-launch: stopped after iteration $stop of 800; checkpoint ck/iter-$stop; resume with: $launch --plan plan.pb --iterations 800 --log-every 50 --checkpoint-dir ck --metrics-out m.json --resume" ]'
check "the checkpoint is that iteration's, the logs are kept and no rank is left" \
  '[ "$(cat ck/LATEST)" = "iter-$stop" ] && grep -q "stopped after iteration $stop" "$run_dir/attempt-0/rank-0.log" && [ "$(ranks_alive)" -eq 0 ]'
resume=$(tail -1 int.txt | sed 's/.*; resume with: //')
eval "timeout 120 $resume" > resume.log 2>&1; rc=$?
check "the printed command resumes after iteration $stop (exit 0)" \
  '[ $rc -eq 0 ] && grep -q "resuming after iteration $stop" resume.log'
check "the losses of both parts equal the uninterrupted run's" \
  '[ "$(iteration_losses m.json | wc -l)" -eq 800 ] && [ "$(losses m.json)" = "$(losses ref.json)" ]'

# 3. ^C twice: the second does not wait for the agreed iteration. Rank 1 hears of the stop at
#    its next heartbeat; 30 s apart, one falls between the two ^C (1.2 s apart; a repeat within
#    1 s of the first would count as the same ^C) in 4% of runs (5 s apart it was 30%).
"${pty_run[@]}" --log twice.log --after "iteration 199: loss" --times 2 --gap 1.2 --timeout 120 \
  -- "$launch" --plan plan.pb --iterations 100000 --log-every 100 --checkpoint-dir ck2 \
  --checkpoint-every 100 --timeout 120 -- --heartbeat-ms 30000; rc=$?
console twice.log > twice.txt
check "a second ^C kills the ranks at once: exit 130, naming the newest checkpoint" \
  '[ $rc -eq 130 ] && grep -q "INT again: killing every rank now" twice.txt && tail -1 twice.txt | grep -q "^graphpipe-launch: .*; \(newest \)\?checkpoint ck2/iter-[0-9]*; resume with: .* --resume -- --heartbeat-ms 30000$" && [ "$(ranks_alive)" -eq 0 ]'

# 4. submit to a node daemon, ^C: the same last line and exit 130; its command resumes.
GP_AUTH_TOKEN=s3cret "$exe" serve --listen 127.0.0.1:0 --devices 2 --work-dir "$tmp/work" \
  > daemon.log 2>&1 &
daemon=$!
trap 'kill "$daemon" 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "serving" daemon.log && break; sleep 0.1; done
addr=$(sed -n 's/.* on \(127.0.0.1:[0-9]*\),.*/\1/p' daemon.log | head -1)
port=$((29900 + RANDOM % 90))
GP_AUTH_TOKEN=s3cret "${pty_run[@]}" --log submit.log --after "iteration 99: loss" --timeout 120 \
  -- "$exe" submit --plan plan.pb --nodes "$addr" --iterations 800 --port $port \
  -- --checkpoint-dir "$tmp/work/ck" > /dev/null; rc=$?
console submit.log > submit.txt
stop=$(sed -n 's/.*rank 0: stopped after iteration \([0-9]*\) of 800.*/\1/p' submit.txt)
check "submit, ^C: exit 130 (not 1), the last line names the iteration, checkpoint and resume" \
  '[ $rc -eq 130 ] && [ -n "$stop" ] && [ "$(tail -1 submit.txt)" = "graphpipe-executor: stopped after iteration $stop of 800; checkpoint $tmp/work/ck/iter-$stop; resume with: $exe submit --plan plan.pb --nodes $addr --iterations 800 --port $port -- --checkpoint-dir $tmp/work/ck --resume $tmp/work/ck" ] && [ "$(cat work/ck/LATEST)" = "iter-$stop" ] && ! grep -q "interrupted" submit.txt'
resume=$(tail -1 submit.txt | sed 's/.*; resume with: //')
GP_AUTH_TOKEN=s3cret eval "timeout 120 $resume" > submit-resume.log 2>&1; rc=$?
check "the printed submit command resumes after iteration $stop (exit 0)" \
  '[ $rc -eq 0 ] && grep -q "resuming after iteration $stop" submit-resume.log'
exit $fail
